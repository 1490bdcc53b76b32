"""Fixtures of the telemetry query-API tests, run on both backends.

``store`` is parametrized over ``sqlite`` (a real file per test, schema from the metadata)
and ``postgresql`` (the real server at 127.0.0.1:5432). Creating a PostgreSQL database and
upgrading it through v1…v18 costs ≈ 2.5 s, so the PostgreSQL side uses **one database per
session**, upgraded once with ``migrate.upgrade("telemetry", url)``, and every test starts
from ``TRUNCATE … RESTART IDENTITY`` of the store's tables (the ledger and Alembic version
stay). Tests that are inherently SQLite-specific use ``sqlite_store`` / ``wal_store`` or skip
the PostgreSQL parameter with a reason (:func:`sqlite_only`).
"""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from hermes_data.migrate import runner as migrate
from hermes_data.telemetry.schema import metadata
from hermes_data.telemetry.store import TelemetryStore

from ..conftest import scratch_store_database, truncate_tables

#: A fixed "now" so window tests are exact and independent of the wall clock.
NOW = datetime(2026, 7, 20, 15, 30, 0, tzinfo=timezone.utc)

BACKENDS = ("sqlite", "postgresql")
_TABLES = ", ".join(t.name for t in metadata.sorted_tables)


def iso(*args: int) -> str:
    """Canonical stored form of a UTC datetime given as (y, m, d, H, M, S[, us])."""
    return datetime(*args, tzinfo=timezone.utc).isoformat()


@pytest.fixture(scope="session")
def pg_session_url():
    """One PostgreSQL database for the whole session, upgraded to head once; every test
    starts from ``TRUNCATE … RESTART IDENTITY`` of the store's tables."""
    with scratch_store_database("telemetry", "hd_tel") as url:
        yield url


def _truncate(url: str) -> None:
    truncate_tables(url, _TABLES)


@pytest.fixture
def db_path(tmp_path):
    return tmp_path / "telemetry.db"


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    """The backend under test (``sqlite`` or ``postgresql``)."""
    return request.param


@pytest.fixture
def store_url(backend, db_path, request):
    """Where this test's store lives: a fresh SQLite file, or the emptied session database."""
    if backend == "sqlite":
        with TelemetryStore(db_path) as s:  # the store's engine: pragmas and journal policy
            metadata.create_all(s.engine)
        return str(db_path)
    url = request.getfixturevalue("pg_session_url")
    _truncate(url)
    return url


@pytest.fixture
def store(store_url):
    with TelemetryStore(store_url) as s:
        yield s


@pytest.fixture
def sqlite_store(db_path):
    """A SQLite store, for tests of SQLite-only behaviour (pragmas, traces, query plans)."""
    with TelemetryStore(db_path) as s:
        metadata.create_all(s.engine)
        yield s


@pytest.fixture
def pg_store(pg_session_url):
    """A PostgreSQL store, for the PostgreSQL equivalents of SQLite-only tests."""
    _truncate(pg_session_url)
    with TelemetryStore(pg_session_url) as s:
        yield s


def sql(store: TelemetryStore, text: str, *args) -> list[tuple]:
    """Run ad-hoc test SQL written with ``?`` placeholders on ``store``'s own connection
    (``%s`` on PostgreSQL, where the held connection is in autocommit)."""
    conn = store.connection()
    if store.dialect == "postgresql":
        cur = conn.execute(text.replace("?", "%s"), args)
        return cur.fetchall() if cur.description else []
    return conn.execute(text, args).fetchall()


def sqlite_only(backend: str, reason: str) -> None:
    """Skip the PostgreSQL run of a test that checks SQLite-specific behaviour."""
    if backend != "sqlite":
        pytest.skip(f"SQLite-specific: {reason}")


@pytest.fixture
def wal_store(tmp_path):
    """A store forced into WAL (``synchronous=NORMAL`` then commits without fsync): the
    8-thread test checks atomicity, and 16,000 fsynced DELETE-mode commits would take a minute."""
    from hermes_data.engine import SqliteSettings

    with TelemetryStore(tmp_path / "wal.db", settings=SqliteSettings(journal_mode="wal")) as s:
        metadata.create_all(s.engine)
        assert s.connection().execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        yield s
