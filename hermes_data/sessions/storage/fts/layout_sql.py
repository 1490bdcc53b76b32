"""Statements of the legacy FTS layout migration, ``optimize-storage``
(docs/sessions-storage.md §3.6). Search's gap supplement over the backfill window (docs/sessions-storage.md §3.6,
amending docs/sessions.md §7.2) has its statements in :mod:`hermes_data.sessions.search.gap_sql`.

SQLite only; sent with ``exec_driver_sql`` (``?`` placeholders). Every value is
bound. Identifiers come only from the fixed names below, from the explicit shadow-table
names of :data:`DEMOTE_SHADOW_TABLES`, or — for the teardown of ``fts_v22_trash_*`` tables
— from names and key columns read from the catalogue and checked against
:data:`TRASH_NAME` / :data:`IDENTIFIER` before they are quoted into a statement.
"""

from __future__ import annotations

import re
from typing import Sequence

import sqlalchemy as sa

from hermes_data.sessions.schema import state_meta
from hermes_data.sessions.sql.constructs import const, module_statement
from hermes_data.sessions.sql.meta_sql import meta_keys
from hermes_data.sessions.sql.dialect import driver_statement
from hermes_data.sessions.storage.fts.ddl import FTS_SHADOW_SUFFIXES, FTS_TRIGGERS, FTS_VIEWS, FTS_VIRTUAL_TABLES, GATE_KEYS, tri_row
from hermes_data.sessions.storage.fts.gate_sql import GateStatements
from hermes_data.sessions.sql.dialect import marks

# ---------------------------------------------------------------------------------------
# state_meta keys (docs/sessions-storage.md §2.1)
# ---------------------------------------------------------------------------------------

HIGH_WATER_KEY, PROGRESS_KEY = GATE_KEYS
STORAGE_VERSION_KEY = "fts_storage_version"
#: Upstream's advert flag: never written here, deleted at settle.
ADVERT_KEY = "fts_optimize_available"
#: CJK-bigram keys that make the migration worth running (its backfill, its stale flag).
CJK_WORK_KEYS = ("cjk_bigram_high_water", "cjk_bigram_stale")
TEARDOWN_PREFIX = "fts_teardown_"
TEARDOWN_SUFFIX = "_progress"
#: Prefix of the demoted shadow tables (upstream's name, so mixed hosts drain each other's).
TRASH_PREFIX = "fts_v22_trash_"


class LayoutStatements(GateStatements):
    """The migration's ordinary statements over ``state_meta`` and ``messages`` (issue 32;
    the backfill markers' read and delete — ``READ_GATE`` / ``CLEAR_REBUILD_MARKERS`` —, the
    by-key reads and writes and ``MAX_MESSAGE_ID`` inherited):
    Core constructs compiled for SQLite on first read; the module exposes each as a plain
    string attribute of the same name (:func:`__getattr__`), ``?`` placeholders in the
    declared order."""

    #: Every key the availability check and the settle read (key, value).
    READ_STORAGE_META = driver_statement(lambda d: sa.select(
        state_meta.c.key, state_meta.c.value).where(meta_keys(
            HIGH_WATER_KEY, PROGRESS_KEY, STORAGE_VERSION_KEY, ADVERT_KEY, "fts_stale",
            *CJK_WORK_KEYS)))
    #: The teardown markers (key).
    TEARDOWN_KEYS = driver_statement(lambda d: sa.select(state_meta.c.key).where(
        state_meta.c.key.op("GLOB")(const(f"{TEARDOWN_PREFIX}*{TEARDOWN_SUFFIX}"))))


def __getattr__(name: str) -> str:
    """:class:`LayoutStatements`' statements as module attributes (PEP 562), compiled for
    SQLite on first read."""
    return module_statement(globals(), LayoutStatements, name)


# ---------------------------------------------------------------------------------------
# Reading the layout
# ---------------------------------------------------------------------------------------

#: Probe: does the unicode61 index hold a document (external content: one docsize row each)?
BASE_DOCSIZE_NONEMPTY = "SELECT 1 FROM messages_fts_docsize LIMIT 1"
#: The trash tables in drain order (name, sql).
TRASH_TABLES = (f"SELECT name, sql FROM sqlite_master WHERE type = 'table' AND name GLOB "
                f"'{TRASH_PREFIX}*' ORDER BY name")
#: Probe: is any trash table left?
TRASH_EXISTS = (f"SELECT 1 FROM sqlite_master WHERE type = 'table' AND name GLOB "
                f"'{TRASH_PREFIX}*' LIMIT 1")
#: Every table name of the file (the demote's collision check).
TABLE_NAMES = "SELECT name FROM sqlite_master WHERE type = 'table'"
#: Every schema object name of the file.
SCHEMA_NAMES = "SELECT name FROM sqlite_master"

# ---------------------------------------------------------------------------------------
# Bookkeeping and the demote (docs/sessions-storage.md §3.6 steps 2–3)
# ---------------------------------------------------------------------------------------

#: Empty the external-content indexes (a high water without progress: restart the backfill).
DELETE_ALL = {
    "messages_fts": "INSERT INTO messages_fts(messages_fts) VALUES ('delete-all')",
    "messages_fts_trigram": "INSERT INTO messages_fts_trigram(messages_fts_trigram) "
                            "VALUES ('delete-all')",
}
#: The shadow tables of the two FTS tables, by explicit name (a pattern once swept
#: upstream's ``messages_fts_cjk*`` into the trash and broke it, #103647).
DEMOTE_SHADOW_TABLES = tuple(t + s for t in FTS_VIRTUAL_TABLES for s in FTS_SHADOW_SUFFIXES)
#: Drop one FTS trigger / source view (fixed names).
DROP_TRIGGERS = tuple(f"DROP TRIGGER IF EXISTS {name}" for name in FTS_TRIGGERS)
DROP_VIEWS = tuple(f"DROP VIEW IF EXISTS {name}" for name in FTS_VIEWS)
#: ``writable_schema`` around the catalogue edit; RESET makes the connection re-read it.
WRITABLE_SCHEMA_ON = "PRAGMA writable_schema = ON"
WRITABLE_SCHEMA_RESET = "PRAGMA writable_schema = RESET"
WRITABLE_SCHEMA_OFF = "PRAGMA writable_schema = OFF"
#: The schema cookie (read before the catalogue edit of the two-step shape).
SCHEMA_COOKIE = "PRAGMA schema_version"


def set_schema_cookie(value: int) -> str:
    """Move the schema cookie (masked to 31 bits) so every connection re-reads the catalogue
    after a ``writable_schema`` edit without RESET."""
    return f"PRAGMA schema_version = {int(value) & 0x7FFFFFFF}"


#: Forget the two virtual tables without touching their (large) shadow tables.
DELETE_VTAB_ROWS = ("DELETE FROM sqlite_master WHERE type = 'table' AND name IN "
                    "('messages_fts', 'messages_fts_trigram')")


def rename_to_trash(name: str, target: str) -> str:
    """``ALTER TABLE <shadow> RENAME TO <trash>`` for an explicit shadow-table name."""
    if name not in DEMOTE_SHADOW_TABLES or not TRASH_NAME.match(target):
        raise ValueError(f"refusing to rename {name!r} to {target!r}")
    return f'ALTER TABLE "{name}" RENAME TO "{target}"'


# ---------------------------------------------------------------------------------------
# The backfill (fts_rebuild_step) and its finish
# ---------------------------------------------------------------------------------------

#: Index the rows of one id window (low, high] in ``messages_fts`` from its source view.
BACKFILL_BASE = ("INSERT INTO messages_fts(rowid, content, tool_name, tool_calls) "
                 "SELECT id, content, tool_name, tool_calls FROM messages_fts_src "
                 "WHERE id > ? AND id <= ? ORDER BY id")
#: The same for ``messages_fts_trigram`` (its view holds the eligible rows only).
BACKFILL_TRIGRAM = ("INSERT INTO messages_fts_trigram(rowid, content, tool_name) "
                    "SELECT id, content, tool_name FROM messages_fts_trigram_src "
                    "WHERE id > ? AND id <= ? ORDER BY id")
#: Finish: index the rows of (low, high] that have no document yet (anti-join on docsize).
FINISH_BASE = ("INSERT INTO messages_fts(rowid, content, tool_name, tool_calls) "
               "SELECT s.id, s.content, s.tool_name, s.tool_calls FROM messages_fts_src s "
               "WHERE s.id > ? AND s.id <= ? AND NOT EXISTS "
               "(SELECT 1 FROM messages_fts_docsize d WHERE d.id = s.id) ORDER BY s.id")
#: The same for the trigram index, eligible rows only (TRI_ROW).
FINISH_TRIGRAM = ("INSERT INTO messages_fts_trigram(rowid, content, tool_name) "
                  "SELECT m.id, m.content, m.tool_name FROM messages m "
                  f"WHERE m.id > ? AND m.id <= ? AND {tri_row('m')} AND NOT EXISTS "
                  "(SELECT 1 FROM messages_fts_trigram_docsize d WHERE d.id = m.id) "
                  "ORDER BY m.id")
#: Probe: is a table present (name)?
TABLE_EXISTS = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?"

# ---------------------------------------------------------------------------------------
# The teardown of fts_v22_trash_* (O(n): key-ordered chunks after a persisted marker)
# ---------------------------------------------------------------------------------------

#: A trash table name (anything else is never formatted into a statement).
TRASH_NAME = re.compile(r"^fts_v22_trash_[A-Za-z0-9_]+$")
#: A plain column name of a trash table's key.
IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _trash(name: str) -> str:
    if not TRASH_NAME.match(name):
        raise ValueError(f"not a trash table name: {name!r}")
    return f'"{name}"'


def _cols(keys: Sequence[str]) -> list[str]:
    for k in keys:
        if k != "rowid" and not IDENTIFIER.match(k):
            raise ValueError(f"not a plain key column: {k!r}")
    return ["rowid" if k == "rowid" else f'"{k}"' for k in keys]


def table_info(name: str) -> str:
    """``PRAGMA table_info`` of a trash table (its key columns: ``pk`` > 0)."""
    return f"PRAGMA table_info({_trash(name)})"


def _after(cols: list[str], marked: bool) -> str:
    if not marked:
        return ""
    if len(cols) == 1:
        return f"WHERE {cols[0]} > ?"
    return f"WHERE ({', '.join(cols)}) > ({marks(len(cols))})"


def trash_chunk_keys(name: str, keys: Sequence[str], marked: bool) -> str:
    """The keys of the next chunk of a trash table in key order (bound: the marker's key
    values when ``marked``, then the chunk size)."""
    cols = _cols(keys)
    # not Core: a demoted FTS5 shadow table named from sqlite_master (its key columns read
    # by PRAGMA table_info), not in the Core metadata
    return (f"SELECT {', '.join(cols)} FROM {_trash(name)} {_after(cols, marked)} "
            f"ORDER BY {', '.join(cols)} LIMIT ?")


def trash_delete_range(name: str, keys: Sequence[str], marked: bool) -> str:
    """Delete one chunk: keys after the marker (bound first when ``marked``) up to and
    including the chunk's last key (bound last)."""
    cols = _cols(keys)
    after = _after(cols, marked)
    upto = (f"{cols[0]} <= ?" if len(cols) == 1
            else f"({', '.join(cols)}) <= ({marks(len(cols))})")
    where = f"{after} AND {upto}" if after else f"WHERE {upto}"
    # not Core: a demoted FTS5 shadow table named from sqlite_master (its key columns read
    # by PRAGMA table_info), not in the Core metadata
    return f"DELETE FROM {_trash(name)} {where}"


def drop_trash(name: str) -> str:
    """Drop an emptied trash table."""
    return f"DROP TABLE IF EXISTS {_trash(name)}"


def trash_count(name: str) -> str:
    """Rows left in a trash table (the teardown's percentage; read once)."""
    # not Core: a demoted FTS5 shadow table named from sqlite_master (its key columns read
    # by PRAGMA table_info), not in the Core metadata
    return f"SELECT COUNT(*) FROM {_trash(name)}"
