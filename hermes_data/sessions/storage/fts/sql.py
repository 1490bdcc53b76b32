"""Statements of FTS index maintenance (docs/sessions-storage.md §3.7–§3.9.1, §3.10):
``'optimize'`` / ``'rebuild'`` / ``'merge'`` / ``usermerge`` on the SQLite FTS5 tables, the
stale-FTS deferral record, the upstream ``messages_fts_cjk_*`` triggers, and the PostgreSQL
twins (``gin_clean_pending_list``, ``REINDEX INDEX``).

Identifiers come only from the fixed allow-lists below; values are bound.
"""

from __future__ import annotations

import re

from hermes_data.sessions.sql.constructs import module_statement
from hermes_data.sessions.sql.ddl import checked_drop
from hermes_data.sessions.sql.dialect import driver_statement
from hermes_data.sessions.sql.meta_sql import meta_exists, meta_set, meta_value
from hermes_data.sessions.storage.fts.cjk_sql import CJK_FTS
from hermes_data.sessions.storage.fts.cjk_sql import STALE_KEY as CJK_STALE_KEY
from hermes_data.sessions.storage.fts.ddl import FTS_VIRTUAL_TABLES
from hermes_data.sessions.storage.fts.gate_sql import GateStatements

#: Every FTS5 table hermes-data maintains (optimize / merge), in this order.
MAINTAINED_FTS_TABLES = (*FTS_VIRTUAL_TABLES, CJK_FTS)
#: The tables ``rebuild_fts`` rebuilds (the CJK-bigram index rebuilds from its documents, docs/sessions-storage.md §3.9.2).
REBUILT_FTS_TABLES = FTS_VIRTUAL_TABLES


def _table(table: str) -> str:
    if table not in MAINTAINED_FTS_TABLES:
        raise ValueError(f"not an FTS table hermes-data maintains: {table!r}")
    return table


def probe(table: str) -> str:
    """Is the table queryable here (any ``DatabaseError`` ⇒ absent: missing table, module,
    tokenizer, or a damaged index)."""
    # not Core: an FTS5 virtual table by name (not in the Core metadata)
    return f"SELECT 1 FROM {_table(table)} LIMIT 0"


def rebuild(table: str) -> str:
    """Rebuild an external-content index from its source view."""
    t = _table(table)
    return f"INSERT INTO {t}({t}) VALUES ('rebuild')"


def merge(table: str) -> str:
    """One incremental merge of up to ``?`` pages (FTS5 ``'merge'``; a positive value merges
    only segments of the same level, usermerge at a time)."""
    t = _table(table)
    return f"INSERT INTO {t}({t}, rank) VALUES ('merge', ?)"


def set_usermerge(table: str) -> str:
    """Persist ``usermerge`` (written to ``<t>_config``) to ``?``."""
    t = _table(table)
    # not Core: an FTS5 command (the hidden column named after the table)
    return f"INSERT INTO {t}({t}, rank) VALUES ('usermerge', ?)"


def read_usermerge(table: str) -> str:
    """The persisted ``usermerge`` of the index (no row ⇒ FTS5's default, 4)."""
    # not Core: an FTS5 shadow table (<table>_config), not in the Core metadata
    return f"SELECT v FROM {_table(table)}_config WHERE k = 'usermerge'"


#: Database-wide count of rows changed since the connection opened (merge progress).
TOTAL_CHANGES = "SELECT total_changes()"
#: The writer's lock patience (the merge pass sets 0, then restores the handle's value).
BUSY_TIMEOUT = "PRAGMA busy_timeout"


def set_busy_timeout(ms: int) -> str:
    """``PRAGMA busy_timeout=<ms>`` (an int, never user text)."""
    return f"PRAGMA busy_timeout={int(ms)}"


DEFERRAL_KEY = "fts_rebuild_deferral"


class MarkerStatements(GateStatements):
    """The FTS markers in ``state_meta`` (SQLite; Core constructs compiled on first read,
    served as plain string module attributes by :func:`__getattr__`; the rebuild-window
    markers' ``CLEAR_REBUILD_MARKERS`` inherited)."""

    #: The CJK-bigram index is marked damaged (docs/sessions-storage.md §3.9.2: it is
    #: neither drained nor maintained).
    READ_CJK_STALE = driver_statement(lambda d: meta_exists(CJK_STALE_KEY))
    #: The ``fts_stale`` marker.
    READ_FTS_STALE = driver_statement(lambda d: meta_exists("fts_stale"))
    #: The stale deferral record (JSON; docs/sessions-storage.md §3.8).
    READ_DEFERRAL = driver_statement(lambda d: meta_value(DEFERRAL_KEY))
    #: Write the deferral record (value).
    WRITE_DEFERRAL = driver_statement(lambda d: meta_set(d, key=DEFERRAL_KEY), "value")
    #: Upstream's breadcrumb: the CJK index misses rows (rebuilt only by a capable upstream
    #: host).
    MARK_FTS_CJK_STALE = driver_statement(lambda d: meta_set(d, key="fts_cjk_stale",
                                                             value="1"))


def __getattr__(name: str) -> str:
    """:class:`MarkerStatements`' statements as module attributes (PEP 562), compiled for
    SQLite on first read."""
    return module_statement(globals(), MarkerStatements, name)


# -- upstream messages_fts_cjk (docs/sessions-storage.md §3.9.1) ------------------------------------------------------
#: Upstream's CJK triggers (they call a ``cjk_unicode61`` table hermes-data cannot load).
UPSTREAM_CJK_TRIGGERS = ("messages_fts_cjk_insert", "messages_fts_cjk_delete",
                         "messages_fts_cjk_update")
#: Which of them exist (read first: dropping an existing trigger takes the write lock).
UPSTREAM_CJK_TRIGGERS_PRESENT = (
    "SELECT name FROM sqlite_master WHERE type = 'trigger' AND name IN ("
    + ", ".join(f"'{n}'" for n in UPSTREAM_CJK_TRIGGERS) + ")")


def drop_upstream_cjk_trigger(name: str) -> str:
    """Drop one of :data:`UPSTREAM_CJK_TRIGGERS`."""
    return checked_drop("TRIGGER", name, UPSTREAM_CJK_TRIGGERS, "an upstream CJK trigger")


# -- PostgreSQL (docs/sessions-storage.md §3.10) -------------------------------------------------------------------
#: The GIN indexes of ``messages`` in the current schema (names and oids).
PG_MESSAGES_GIN_INDEXES = (
    "SELECT c.relname, c.oid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
    "JOIN pg_am am ON am.oid = c.relam JOIN pg_class t ON t.oid = i.indrelid "
    "WHERE am.amname = 'gin' AND t.relname = 'messages' "
    "AND t.relnamespace = current_schema()::regnamespace ORDER BY c.relname")
#: Flush one GIN index's pending list into the main index (takes the index's oid).
PG_GIN_CLEAN_PENDING_LIST = "SELECT gin_clean_pending_list(CAST(%s AS regclass))"
#: The search GIN indexes ``rebuild_fts`` may REINDEX (the allow-list of identifiers).
PG_SEARCH_GIN_INDEXES = ("messages_fts_document", "messages_fts_trgm", "messages_fts_fold",
                         "messages_cjk_grams", "messages_symbol_grams", "messages_tool_trgm")
_IDENT = re.compile(r"^[a-z_][a-z0-9_]*$")


def pg_reindex(index: str) -> str:
    """``REINDEX INDEX`` of one search GIN index (allow-listed names only)."""
    if index not in PG_SEARCH_GIN_INDEXES or not _IDENT.match(index):
        raise ValueError(f"not a search GIN index of the store: {index!r}")
    return f"REINDEX INDEX {index}"
