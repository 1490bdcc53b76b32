"""Statements of the open-time probes and heals of the SQLite session store
(docs/sessions.md §2.7, §4.7, §8.3, §8.4), used by :mod:`hermes_data.sessions.storage.opening` and the read
connections of :mod:`hermes_data.sessions.storage.handle_guards`.

SQLite only; sent with ``exec_driver_sql`` or on a DB-API connection, ``?`` placeholders.
The plain reads and writes of ``messages`` and ``state_meta`` are Core constructs on
:class:`OpeningStatements` (issue 32), compiled on first use; what stays a string reads the
catalogue, a PRAGMA or an FTS object. Every value is bound, except the integers of ``PRAGMA`` assignments (SQLite cannot bind
those; they are passed through ``int()``). Identifiers come only from the fixed
allow-lists below and in :mod:`.fts`; the builders refuse anything else.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from hermes_data.sessions.schema import messages, state_meta
from hermes_data.sessions.sql.constructs import bp, const, module_statement
from hermes_data.sessions.sql.meta_sql import meta_delete, meta_set, meta_value
from hermes_data.sessions.sql.dialect import Statements, driver_statement
from hermes_data.sessions.storage.fts.cjk_sql import STALE_KEY as CJK_STALE_KEY
from hermes_data.sessions.sql.ddl import checked_drop
from hermes_data.sessions.storage.fts.ddl import (FTS_TRIGGERS, FTS_VIEWS, FTS_VIRTUAL_TABLES,
                                                 GATE_KEYS, legacy_trigger_ddl)
from hermes_data.sessions.storage.fts.sql import DEFERRAL_KEY, UPSTREAM_CJK_TRIGGERS

# ---------------------------------------------------------------------------------------
# FTS capability probes (TEMP virtual tables, never main)
# ---------------------------------------------------------------------------------------

#: TEMP tables the capability probes create and drop again.
PROBE_TABLES = ("hermes_fts5_probe", "hermes_trigram_probe")
#: Probe: does this SQLite build have the FTS5 module?
FTS5_PROBE_DDL = "CREATE VIRTUAL TABLE temp.hermes_fts5_probe USING fts5(x)"
#: Probe: does this SQLite build have the FTS5 trigram tokenizer?
TRIGRAM_PROBE_DDL = ("CREATE VIRTUAL TABLE temp.hermes_trigram_probe "
                     "USING fts5(x, tokenize='trigram')")


def drop_probe_table(name: str) -> str:
    """Drop the TEMP capability-probe table ``name`` (one of :data:`PROBE_TABLES`)."""
    return checked_drop("TABLE", name, PROBE_TABLES, "an FTS probe table", if_exists=False,
                        schema="temp")


# ---------------------------------------------------------------------------------------
# Reading the FTS state
# ---------------------------------------------------------------------------------------

#: The FTS virtual tables, views and triggers present in the file, with their DDL.
FTS_OBJECTS = (
    "SELECT name, sql FROM sqlite_master WHERE name IN ("
    + ", ".join("'" + n + "'" for n in (*FTS_VIRTUAL_TABLES, *FTS_VIEWS, *FTS_TRIGGERS,
                                        *UPSTREAM_CJK_TRIGGERS))
    + ")")
#: Probe: does the file have ``state_meta`` (upstream files before its v7 do not)?
STATE_META_EXISTS = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'state_meta'"
#: Names of every schema object of the file.
SCHEMA_OBJECT_NAMES = "SELECT name FROM sqlite_master"

# ---------------------------------------------------------------------------------------
# Applying the FTS checks
# ---------------------------------------------------------------------------------------



def drop_fts_trigger(name: str) -> str:
    """Drop the FTS trigger ``name`` (one of ``FTS_TRIGGERS``) if it exists."""
    return checked_drop("TRIGGER", name, FTS_TRIGGERS, "an FTS trigger")


def drop_fts_table(name: str) -> str:
    """Drop the FTS virtual table ``name`` (one of ``FTS_VIRTUAL_TABLES``) if it exists."""
    return checked_drop("TABLE", name, FTS_VIRTUAL_TABLES, "an FTS table")


def drop_fts_view(name: str) -> str:
    """Drop the FTS source view ``name`` (one of ``FTS_VIEWS``) if it exists."""
    return checked_drop("VIEW", name, FTS_VIEWS, "an FTS view")


def legacy_triggers(table: str) -> tuple[str, str, str]:
    """The insert, delete and (narrowed) update triggers of legacy inline FTS ``table``."""
    return (legacy_trigger_ddl(table, "insert"), legacy_trigger_ddl(table, "delete"),
            legacy_trigger_ddl(table, "update"))


def legacy_update_trigger(table: str) -> str:
    """The narrowed update trigger of legacy inline FTS ``table``."""
    return legacy_trigger_ddl(table, "update")


# ---------------------------------------------------------------------------------------
# Other gated heals (docs/sessions.md §8.4)
# ---------------------------------------------------------------------------------------

#: The state_meta key of the file's generation token.
GENERATION_KEY = "db_file_generation"


class OpeningStatements(Statements):
    """The open path's plain reads and writes and its FTS markers in ``state_meta``, as Core
    constructs (SQLite; compiled on first read and served as plain string module attributes
    by :func:`__getattr__`; callers pass positional tuples in the declared order)."""

    #: Probe: does ``messages`` hold any row?
    MESSAGES_NONEMPTY_PROBE = driver_statement(lambda d: sa.select(const(1)).select_from(
        messages).limit(const(1)))
    #: Probe: any message with NULL ``active`` (served by idx_messages_active_null).
    NULL_ACTIVE_PROBE = driver_statement(lambda d: sa.select(const(1)).select_from(messages)
                                         .where(messages.c.active.is_(None)).limit(const(1)))
    #: Heal: NULL ``active`` becomes 1.
    HEAL_NULL_ACTIVE = driver_statement(lambda d: sa.update(messages).values(
        active=const(1)).where(messages.c.active.is_(None)))
    #: The ``db_file_generation`` token.
    READ_GENERATION = driver_statement(lambda d: sa.select(state_meta.c.value).where(
        state_meta.c.key == const(GENERATION_KEY)))
    #: Insert a ``db_file_generation`` token (bound) unless one exists; the first writer wins.
    MINT_GENERATION = driver_statement(lambda d: sqlite_insert(state_meta).prefix_with(
        "OR IGNORE").values(key=const(GENERATION_KEY), value=bp("token")).inline(), "token")
    #: Set ``fts_stale`` (value: the time) so search falls back to LIKE until a rebuild.
    MARK_FTS_STALE = driver_statement(lambda d: meta_set(d, key="fts_stale"), "value")
    #: Clear the deferred-rebuild window markers, ``fts_stale`` and the deferral record after
    #: a stale recovery (docs/sessions-storage.md §3.8).
    CLEAR_REBUILD_MARKERS_AND_STALE = driver_statement(lambda d: meta_delete(
        *GATE_KEYS, "fts_stale", DEFERRAL_KEY))
    #: The recorded ``fts_storage_version``.
    READ_FTS_STORAGE_VERSION = driver_statement(lambda d: meta_value("fts_storage_version"))
    #: Record the current external-content layout as complete (storage version 3).
    WRITE_FTS_STORAGE_VERSION = driver_statement(
        lambda d: meta_set(d, key="fts_storage_version", value="3"))


def __getattr__(name: str) -> str:
    """:class:`OpeningStatements`' statements as module attributes (PEP 562), compiled for
    SQLite on first read."""
    return module_statement(globals(), OpeningStatements, name)


#: The file's ``application_id`` header field.
READ_APPLICATION_ID = "PRAGMA application_id"
#: Probe: is the storage version withheld — a deferred rebuild window open, or demoted
#: shadow tables (``fts_v22_trash_*``) still to drain (docs/sessions-storage.md §2.1)?
FTS_STORAGE_VERSION_WITHHELD_PROBE = (
    "SELECT 1 FROM state_meta WHERE key = 'fts_rebuild_high_water' UNION ALL "
    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name GLOB 'fts_v22_trash_*' LIMIT 1")
#: Probe: does the unicode61 index hold any document?
FTS_DOCSIZE_NONEMPTY_PROBE = "SELECT 1 FROM messages_fts_docsize LIMIT 1"

# ---------------------------------------------------------------------------------------
# Pragmas (docs/sessions.md §8.3)
# ---------------------------------------------------------------------------------------

#: Integer pragmas a ``database:`` configuration section may set (identifier allow-list).
CONFIG_INT_PRAGMAS = ("cache_size", "mmap_size", "temp_store", "wal_autocheckpoint",
                      "journal_size_limit")
#: Every pragma an open assigns: the configurable integers, ``synchronous``, ``application_id``.
ASSIGNABLE_PRAGMAS = CONFIG_INT_PRAGMAS + ("synchronous", "application_id")
#: Enforce foreign keys on a connection (SQLite's default is off).
FOREIGN_KEYS_ON = "PRAGMA foreign_keys=ON"


def set_pragma(name: str, value: int) -> str:
    """``PRAGMA name = value`` for ``name`` in :data:`ASSIGNABLE_PRAGMAS` and an integer value."""
    if name not in ASSIGNABLE_PRAGMAS:
        raise ValueError(f"pragma {name!r} is not assignable here")
    return f"PRAGMA {name} = {int(value)}"


# ---------------------------------------------------------------------------------------
# The settled open (issue 14): header reads before the connection policy, then one statement
# ---------------------------------------------------------------------------------------

#: The schema cookie (a header read: SQLite does not parse the schema for it).
SCHEMA_COOKIE = "PRAGMA schema_version"
#: The whole schema as one string: a settled stamp is valid only for exactly this catalogue
#: (``PRAGMA writable_schema`` edits change it without bumping the cookie).
SCHEMA_TEXT = ("SELECT group_concat(type || ' ' || name || ' ' || tbl_name || ' ' || "
               "coalesce(sql, ''), char(10)) FROM sqlite_master")
#: Everything else a settled open re-reads from a file whose schema it already verified, in one
#: statement, inside the read transaction that reads the cookie and ``application_id`` (one
#: snapshot): the catalogue text (:data:`SCHEMA_TEXT`), the revision and the number of version
#: rows, the generation token, ``fts_storage_version``, whether ``fts_stale`` is set, whether a
#: NULL ``active`` needs healing and whether the CJK-bigram index is stale.
# not Core: a catalogue read (the sqlite_master text above) and Alembic's alembic_version,
# which the session metadata does not declare, in the one statement of the measured open.
SETTLED_PROBE = (
    f"SELECT ({SCHEMA_TEXT}), "
    "(SELECT max(version_num) FROM alembic_version), "
    "(SELECT count(*) FROM alembic_version), "
    "(SELECT value FROM state_meta WHERE key = 'db_file_generation'), "
    "(SELECT value FROM state_meta WHERE key = 'fts_storage_version'), "
    "EXISTS (SELECT 1 FROM state_meta WHERE key = 'fts_stale'), "
    "EXISTS (SELECT 1 FROM messages WHERE active IS NULL), "
    f"EXISTS (SELECT 1 FROM state_meta WHERE key = '{CJK_STALE_KEY}')")
