"""Fast creation of a store that does not exist yet (issue 13).

Running every revision through Alembic costs ~80 ms per telemetry file in a warm process
(~0.3 s in a cold one: Alembic itself and 18 revision scripts are loaded), which a test suite
creating a database per test pays each time. A *missing or zero-byte SQLite file* is
therefore created at the head directly, in one ``BEGIN IMMEDIATE`` transaction:

* the head metadata's ``CREATE TABLE`` / ``CREATE INDEX`` (compiled once per process — the
  metadata stays the one schema authority, new columns follow it automatically),
* the store's own fragments and bookkeeping (``<store>/fresh.py``: the telemetry ledger rows
  ``schema_version`` 1..18; the session store's FTS5 views/tables/triggers and the settled
  ``state_meta`` rows of :func:`hermes_data.sessions.storage.adoption.settle`),
* Alembic's ``alembic_version`` table, stamped at the head.

``tests/migrations/test_fresh_path.py`` proves the result identical to the revision path
(ordered ``table_info``, indexes, every ``sqlite_master`` object with its SQL, ledger and
``state_meta`` rows, header pragmas) for both stores. PostgreSQL stays on the revision path
(its creation is rare — one server database — and the advisory-lock path is proven there).

Concurrency: the whole step runs under the caller's in-process lock, and the emptiness check
runs inside the ``BEGIN IMMEDIATE`` transaction: of several processes racing on one missing
file exactly one creates it; the others find objects there and return ``False`` so the
caller falls back to the ordinary path (which finds the head and writes nothing).
"""

from __future__ import annotations

import importlib
import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection

from hermes_data.config import sqlite_path
from hermes_data.engine import SqliteSettings, create_engine_for, journal_state
from hermes_data.files import link_target, make_owner_only

if TYPE_CHECKING:
    from hermes_data.migrate.spec import StoreSpec, UpgradeReport

log = logging.getLogger("hermes_data.migrate.fresh")

#: Each store's fast-creation module: ``REVISIONS`` (the history it stands for, in order)
#: and ``create_head(conn, cursor, options)`` (its fragments and bookkeeping after the
#: metadata DDL; ``cursor`` is the DB-API cursor of ``conn``, inside the same transaction;
#: ``options`` the runner's opaque ``hook_options``, None without an opening handle).
FRESH_MODULES = {
    "telemetry": "hermes_data.telemetry.fresh",
    "sessions": "hermes_data.sessions.storage.fresh",
}

#: Alembic's version table exactly as Alembic creates it on SQLite
#: (``CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL,
#: CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num))``).
_ALEMBIC = sa.MetaData()
ALEMBIC_VERSION = sa.Table(
    "alembic_version", _ALEMBIC,
    sa.Column("version_num", sa.String(32), nullable=False),
    sa.PrimaryKeyConstraint("version_num", name="alembic_version_pkc"),
)

_compiled: dict[tuple[str, str], tuple[str, ...]] = {}


def head_ddl(metadata: sa.MetaData, conn: Connection, key: str) -> tuple[str, ...]:
    """``CREATE TABLE`` then ``CREATE INDEX`` statements of ``metadata`` for ``conn``'s
    dialect, in ``create_all`` order, then Alembic's version table (compiled once per
    process and dialect)."""
    cache_key = (key, conn.dialect.name)
    ddl = _compiled.get(cache_key)
    if ddl is None:
        dialect = conn.dialect
        out = []
        tables = metadata.sorted_tables
        for table in tables:
            out.append(str(sa.schema.CreateTable(table).compile(dialect=dialect)).strip())
        for table in tables:
            for index in sorted(table.indexes, key=lambda ix: str(ix.name)):
                out.append(str(sa.schema.CreateIndex(index).compile(dialect=dialect)).strip())
        out.append(str(sa.schema.CreateTable(ALEMBIC_VERSION).compile(dialect=dialect)).strip())
        ddl = _compiled[cache_key] = tuple(out)
    return ddl


#: Statements compiled once from constructs (no SQL text written here): "is the schema
#: empty?" and the Alembic stamp.
_COUNT_OBJECTS = sa.select(sa.func.count()).select_from(sa.table("sqlite_master"))
_STAMP = ALEMBIC_VERSION.insert().values(version_num=sa.bindparam("v"))
_plain: dict[str, tuple[str, str]] = {}


def _plain_statements(conn: Connection) -> tuple[str, str]:
    found = _plain.get(conn.dialect.name)
    if found is None:
        found = _plain[conn.dialect.name] = (
            str(_COUNT_OBJECTS.compile(dialect=conn.dialect)),
            str(_STAMP.compile(dialect=conn.dialect)))
    return found


def owner_only_journal(path: Path) -> list[str]:
    """``chmod 0600`` the rollback journal beside ``path`` when it exists (by path, never by
    descriptor). A TRUNCATE journal (:mod:`hermes_data.engine`) outlives its transaction, and
    SQLite created it with the mode the database had then — before a fresh file was made
    owner-only. :func:`hermes_data.files.make_owner_only` covers the WAL sidecars only."""
    journal = f"{link_target(path) or path}-journal"
    try:
        if (os.stat(journal).st_mode & 0o777) != 0o600:
            os.chmod(journal, 0o600)
            return [journal]
    except FileNotFoundError:
        pass
    return []


def is_new_file(url: URL) -> bool:
    """True when ``url`` names an SQLite file that is missing or zero bytes long."""
    path = sqlite_path(url)
    if path is None:
        return False
    try:
        return path.stat().st_size == 0
    except FileNotFoundError:
        return True


def create_fresh(spec: StoreSpec, url: URL, settings: SqliteSettings | None,
                 report: UpgradeReport, hook_options: Any = None) -> bool:
    """Create ``spec``'s store at the head in the missing/empty SQLite file ``url``.

    Returns ``False`` (nothing written) when the file is not empty by the time the write lock
    is held — a sibling created it — or when ``url`` is not an SQLite file; the caller then
    takes the ordinary path. The caller holds the in-process upgrade lock. ``hook_options``
    goes to the store's ``create_head`` unread.
    """
    if sqlite_path(url) is None:
        return False
    module = importlib.import_module(FRESH_MODULES[spec.name])
    started = time.perf_counter()
    engine = create_engine_for(spec.name, url, settings or SqliteSettings(
        busy_timeout_ms=spec.busy_timeout_ms))
    try:
        with engine.connect() as conn:
            # The connection created the (empty) file: owner-only before the first write, so
            # the rollback journal SQLite creates next inherits 0600.
            make_owner_only(sqlite_path(url))  # type: ignore[arg-type]
            conn.execution_options(hermes_begin="IMMEDIATE")
            with conn.begin():
                # DDL straight on the DB-API cursor, inside the BEGIN IMMEDIATE that
                # SQLAlchemy's begin event issued on this very connection (a result object
                # per DDL statement costs more than SQLite's work).
                cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
                count_sql, stamp_sql = _plain_statements(conn)
                if cursor.execute(count_sql).fetchone()[0]:
                    return False
                for statement in head_ddl(spec.metadata, conn, spec.name):
                    cursor.execute(statement)
                module.create_head(conn, cursor, hook_options)
                cursor.execute(stamp_sql, (spec.head,))
                cursor.close()
            report.journal_mode = journal_state(engine).mode
    finally:
        engine.dispose()
    path = sqlite_path(url)
    if path is not None:
        make_owner_only(path)
        owner_only_journal(path)
    report.before_revision, report.after_revision = None, spec.head
    report.applied = list(module.REVISIONS)
    report.step_seconds["fresh"] = report.seconds = time.perf_counter() - started
    log.info("%s store created at %s (fresh path: %s)", spec.name, spec.head,
             ", ".join(report.applied))
    return True
