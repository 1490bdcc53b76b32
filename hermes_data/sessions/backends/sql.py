"""Statements the backends themselves send: transaction control, PRAGMAs, probes,
checkpoints and maintenance commands (SQLite), and their PostgreSQL counterparts.
Identifiers come only from the store's own fixed names; values are bound.
"""

from __future__ import annotations

from hermes_data.sessions.storage.fts.ddl import FTS_VIRTUAL_TABLES

# -- SQLite ------------------------------------------------------------------------------
#: Take the write lock before doing any work (docs/sessions.md §8.5).
BEGIN_IMMEDIATE = "BEGIN IMMEDIATE"
#: Deferred read transaction (engine ``begin`` hook of read-only handles).
BEGIN = "BEGIN"
#: End a transaction.
COMMIT = "COMMIT"
#: Abandon a transaction.
ROLLBACK = "ROLLBACK"
#: Rows the last statement changed (pysqlite reports -1 for WITH … UPDATE).
CHANGES = "SELECT changes()"
#: The file header's application id (replaced-file guard, docs/sessions.md §8.9).
APPLICATION_ID = "PRAGMA application_id"
#: Foreign keys on every connection (docs/sessions.md §2, §8.1 step 5).
FOREIGN_KEYS_ON = "PRAGMA foreign_keys=ON"
#: The cheapest read that proves the schema is readable.
SCHEMA_PROBE = "SELECT 1 FROM sqlite_master LIMIT 1"
#: The only checkpoint mode this library issues (docs/sessions.md §8.8).
CHECKPOINT_PASSIVE = "PRAGMA wal_checkpoint(PASSIVE)"
#: The journal mode in effect.
JOURNAL_MODE = "PRAGMA journal_mode"
#: Logical size: pages × page size.
PAGE_COUNT = "PRAGMA page_count"
PAGE_SIZE = "PRAGMA page_size"
#: Free pages (VACUUM gate).
FREELIST_COUNT = "PRAGMA freelist_count"
#: Rewrite the file (outside any transaction; takes the write lock itself).
VACUUM = "VACUUM"
#: The file's auto-vacuum mode (0 NONE, 1 FULL, 2 INCREMENTAL).
AUTO_VACUUM = "PRAGMA auto_vacuum"
#: Make the next VACUUM of this connection convert the file to INCREMENTAL auto-vacuum.
AUTO_VACUUM_INCREMENTAL = "PRAGMA auto_vacuum=INCREMENTAL"


def incremental_vacuum_step(pages: int) -> str:
    """One paced step of the incremental vacuum as a script: its own write transaction,
    returning up to ``pages`` free pages to the filesystem. A script, because the pragma
    frees one page per row it steps and the driver's ``execute`` steps once."""
    return f"BEGIN IMMEDIATE; PRAGMA incremental_vacuum({int(pages)}); COMMIT;"


#: Does a schema object of this name exist?
OBJECT_EXISTS = "SELECT 1 FROM sqlite_master WHERE name = ?"


def _fts_table(table: str) -> str:
    if table not in FTS_VIRTUAL_TABLES:
        raise ValueError(f"not an FTS table of the store: {table!r}")
    return table


def fts_probe(table: str) -> str:
    """Touch an FTS table without reading rows (missing module / tokenizer raise here)."""
    # not Core: an FTS5 virtual table by name (a probe of its module and tokenizer)
    return f"SELECT * FROM {_fts_table(table)} LIMIT 0"


# -- PostgreSQL --------------------------------------------------------------------------
#: Advisory-lock key of the PostgreSQL auto-maintenance lock (any fixed bigint).
PG_MAINTENANCE_LOCK_KEY = 0x6865726D6573_01
#: Take / drop the auto-maintenance lock without waiting.
PG_TRY_MAINTENANCE_LOCK = f"SELECT pg_try_advisory_lock({PG_MAINTENANCE_LOCK_KEY})"
PG_MAINTENANCE_UNLOCK = f"SELECT pg_advisory_unlock({PG_MAINTENANCE_LOCK_KEY})"


def pg_statement_timeout(timeout_s: float) -> str:
    """Bound the current transaction's statements (milliseconds, at least 1)."""
    return f"SET LOCAL statement_timeout = {max(1, int(timeout_s * 1000))}"


def pg_relation_size(n: int) -> str:
    """Summed ``pg_total_relation_size`` of ``n`` tables of the current schema (:t0 …)."""
    names = ", ".join(f":t{i}" for i in range(n))
    return ("SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r' "
            f"AND c.relname IN ({names})")


def pg_vacuum(tables: list[str]) -> str:
    """``VACUUM (ANALYZE)`` of the store's tables (names from the Core metadata only)."""
    return f"VACUUM (ANALYZE) {', '.join(tables)}"
