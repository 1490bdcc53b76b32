"""Statements of the malformed-schema repair (docs/sessions-storage.md §3.3), run on raw
``sqlite3`` connections to the live file's guard, its scratch copy and probe connections.

Identifiers are never taken from user input: table names come from ``sqlite_master`` and are
quoted by :func:`quote_ident`. (Not the gateway's ``sql/repair.py``.)
"""

from __future__ import annotations

import sqlalchemy as sa

from hermes_data.sessions.schema import messages, sessions
from hermes_data.sessions.sql.constructs import bp, const, module_statement
from hermes_data.sessions.sql.dialect import Statements, driver_statement

#: The guard's and the probes' set-up: fail at once instead of waiting on a lock.
BUSY_TIMEOUT_ZERO = "PRAGMA busy_timeout = 0"
#: Keep every lock the guard takes until it switches back to NORMAL and reads once.
LOCKING_EXCLUSIVE = "PRAGMA locking_mode = EXCLUSIVE"
LOCKING_NORMAL = "PRAGMA locking_mode = NORMAL"
BEGIN_EXCLUSIVE = "BEGIN EXCLUSIVE"
#: macOS write barriers for the repair's connections.
FULLFSYNC_ON = "PRAGMA fullfsync = ON"
BEGIN_IMMEDIATE = "BEGIN IMMEDIATE"
ROLLBACK = "ROLLBACK"
COMMIT = "COMMIT"
#: The journal mode of the file (every statement fails on a malformed schema, this one too).
JOURNAL_MODE = "PRAGMA journal_mode"
#: The rollback-journal mode's name (what a header without the WAL bytes means).
JOURNAL_DELETE = "delete"
#: Read the schema despite its damage (SQLite parses it lazily with this on).
WRITABLE_SCHEMA_ON = "PRAGMA writable_schema = ON"
WRITABLE_SCHEMA_OFF = "PRAGMA writable_schema = OFF"
WRITABLE_SCHEMA_RESET = "PRAGMA writable_schema = RESET"
INTEGRITY_CHECK = "PRAGMA integrity_check"
QUICK_CHECK = "PRAGMA quick_check"
SCHEMA_VERSION = "PRAGMA schema_version"
#: Cookie bump so other connections drop cached schemas (value bound by the caller, masked).
SET_SCHEMA_VERSION = "PRAGMA schema_version = {value:d}"
#: A page read that touches the file (the guard's release: the NORMAL mode applies then).
READ_ONE = "SELECT COUNT(*) FROM sqlite_master"
VACUUM = "VACUUM"
REINDEX = "REINDEX"

#: The session store's own tables a readable schema holds (none: another application's file,
#: which repair refuses).
STORE_TABLES = ("SELECT name FROM sqlite_master WHERE type = 'table' "
                "AND name IN ('sessions', 'messages', 'state_meta')")
#: Ordinary tables the inventory counts (FTS, CJK-bigram, trash and sqlite_* tables excluded).
INVENTORY_TABLES = (
    "SELECT DISTINCT name FROM sqlite_master WHERE type = 'table' AND rootpage <> 0 "
    "AND name NOT GLOB 'sqlite_*' AND name NOT GLOB 'messages_fts*' "
    "AND name NOT GLOB 'messages_cjk_*' AND name NOT GLOB 'fts_v22_trash_*' ORDER BY name")
#: Virtual FTS tables the file declares (each probed with ``MATCH '""'``, rebuilt by name).
FTS_TABLES = (
    "SELECT DISTINCT name FROM sqlite_master WHERE type = 'table' AND rootpage = 0 "
    "AND sql LIKE 'CREATE VIRTUAL TABLE%' AND lower(sql) LIKE '%using fts5%' ORDER BY name")
#: Groups of duplicated schema rows: (type, name, copies).
DUPLICATE_SCHEMA_ROWS = (
    "SELECT type, name, COUNT(*) FROM sqlite_master GROUP BY type, name HAVING COUNT(*) > 1")
#: The distinct definitions of one duplicated object (differing copies of a real table
#: are refused).
DUPLICATE_DEFINITIONS = (
    "SELECT COUNT(DISTINCT coalesce(tbl_name, '') || char(0) || coalesce(rootpage, '') "
    "|| char(0) || coalesce(sql, '')), MAX(rootpage) FROM sqlite_master "
    "WHERE type = ? AND name = ?")
#: Keep the first copy (lowest rowid) of every (type, name).
DEDUP_SCHEMA = (
    "DELETE FROM sqlite_master WHERE rowid NOT IN "
    "(SELECT MIN(rowid) FROM sqlite_master GROUP BY type, name)")
#: The FTS objects (and the CJK-bigram ones, docs/sessions-storage.md §2.2) removed by ``drop_fts_rebuild``.
DROP_FTS_SCHEMA_ROWS = (
    "DELETE FROM sqlite_master WHERE name GLOB 'messages_fts*' OR name GLOB 'messages_cjk_*' "
    "OR tbl_name GLOB 'messages_fts*' OR tbl_name GLOB 'messages_cjk_*'")


class ProbeStatements(Statements):
    """The repair's reads and probe writes on the store's own tables (issue 32): Core
    constructs compiled for SQLite on first read, exposed as plain string module attributes
    of the same name (:func:`__getattr__`) for the raw ``sqlite3`` connections."""

    #: A read of ``sessions`` (the repaired file answers it).
    COUNT_SESSIONS = driver_statement(lambda d: sa.select(sa.func.count()).select_from(sessions))
    #: The probe write of ``opens_cleanly`` (rolled back): a session and a message (the id).
    PROBE_SESSION = driver_statement(lambda d: sa.insert(sessions).values(
        id=bp("id"), source=const("repair-probe"), started_at=const(0)), "id")
    PROBE_MESSAGE = driver_statement(lambda d: sa.insert(messages).values(
        session_id=bp("id"), role=const("user"), content=const("probe"), timestamp=const(0)),
        "id")


def __getattr__(name: str) -> str:
    """:class:`ProbeStatements`' statements as module attributes (PEP 562), compiled for
    SQLite on first read."""
    return module_statement(globals(), ProbeStatements, name)



def quote_ident(name: str) -> str:
    """A double-quoted SQLite identifier (names come from ``sqlite_master``)."""
    return '"' + name.replace('"', '""') + '"'


def count_rows(table: str) -> str:
    """``COUNT(*)`` and ``MAX(rowid)`` of ``table`` (WITHOUT ROWID tables: the caller falls
    back to :func:`count_only`)."""
    # not Core: a table of a damaged file named from sqlite_master (any table, not metadata)
    return f"SELECT COUNT(*), MAX(rowid) FROM {quote_ident(table)}"


def count_only(table: str) -> str:
    """``COUNT(*)`` of ``table``."""
    # not Core: a table of a damaged file named from sqlite_master (any table, not metadata)
    return f"SELECT COUNT(*), NULL FROM {quote_ident(table)}"


def fts_match_probe(table: str) -> str:
    """Does the FTS table answer a query (``MATCH '""'``)?"""
    return f"SELECT rowid FROM {quote_ident(table)} WHERE {quote_ident(table)} MATCH '\"\"' LIMIT 1"


def fts_rebuild(table: str) -> str:
    """``'rebuild'`` of one FTS5 table from its content."""
    q = quote_ident(table)
    return f"INSERT INTO {q}({q}) VALUES ('rebuild')"
