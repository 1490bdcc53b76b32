"""Statements the session store's migration hooks send while inspecting, adopting and
reconciling a file (SQLite catalogue reads, add-only DDL) and probing PostgreSQL.
Identifiers are the file's own catalogue names or the metadata's, always quoted.
"""

from __future__ import annotations

import sqlalchemy as sa

from hermes_data.sessions.schema import sessions
from hermes_data.sessions.sql.constructs import bp, const
from hermes_data.sessions.sql.core import quote_ident
from hermes_data.sessions.sql.dialect import marks
from hermes_data.statements import DriverPrepared

#: Every table of a SQLite file.
SQLITE_TABLES = "SELECT name FROM sqlite_master WHERE type = 'table'"
#: Every index of a SQLite file.
SQLITE_INDEXES = "SELECT name FROM sqlite_master WHERE type = 'index'"
_GATEWAY_FILLED = ("session_key", "chat_id", "chat_type", "thread_id", "display_name",
                   "origin_json")
#: The newest upstream schema_version row.
# not Core: upstream's schema_version table, read on adoption but never declared here
UPSTREAM_SCHEMA_VERSION = "SELECT MAX(version) FROM schema_version"
#: Upstream's v18 gateway metadata backfill of one session (docs/sessions-storage.md §3.12):
#: NULL columns filled, ``expiry_finalized`` only raised 0 → 1. Values: session_key, chat_id,
#: chat_type, thread_id, display_name, origin_json, finalized (0/1), id.
#: A Core construct compiled on first use (:data:`BACKFILL_GATEWAY_ORDER`: its positional order).
BACKFILL_GATEWAY_METADATA = DriverPrepared("backfill_gateway_metadata", lambda: sa.update(
    sessions).ordered_values(
    *[(sessions.c[c], sa.func.coalesce(sessions.c[c], bp(c))) for c in _GATEWAY_FILLED],
    (sessions.c.expiry_finalized, sa.case(
        (sa.and_(sa.func.coalesce(sessions.c.expiry_finalized, const(0)) == const(0),
                 bp("finalized") == const(1)), const(1)),
        else_=sessions.c.expiry_finalized)),
).where(sessions.c.id == bp("id")))
#: The positional order :data:`BACKFILL_GATEWAY_METADATA`'s callers bind.
BACKFILL_GATEWAY_ORDER = (*_GATEWAY_FILLED, "finalized", "id")
#: The file header's application id.
APPLICATION_ID = "PRAGMA application_id"
#: Is the pg_trgm extension installed?
PG_TRGM_INSTALLED = "SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm'"
#: PostgreSQL's own text of one index (``%s``: its name, bound), NULL when there is none.
PG_INDEX_DEFINITION = "SELECT pg_get_indexdef(to_regclass(%s))"


def core_catalog(tables: int) -> str:
    """In one statement: ``('column', table, column)`` for each column of the ``tables``
    named by parameters (only those: loading an FTS table may need a tokenizer this build
    lacks) and ``('index', name, NULL)`` for every index."""
    return ("SELECT 'column', m.name, p.name FROM sqlite_master AS m "
            "JOIN pragma_table_info(m.name) AS p "
            f"WHERE m.type = 'table' AND m.name IN ({marks(tables)}) "
            "UNION ALL SELECT 'index', name, NULL FROM sqlite_master WHERE type = 'index'")


def table_info(table: str) -> str:
    """The columns of a SQLite table, in order."""
    return f"PRAGMA table_info({quote_ident(table)})"


def foreign_key_list(table: str) -> str:
    """The foreign keys of a SQLite table as SQLite enforces them (``on_delete`` included)."""
    return f"PRAGMA foreign_key_list({quote_ident(table)})"


def add_column(table: str, column_ddl: str) -> str:
    """Add one column in its canonical form (DDL compiled from the metadata)."""
    return f"ALTER TABLE {quote_ident(table)} ADD COLUMN {column_ddl}"
