"""Fixtures of the telemetry query-API tests: a real SQLite file per test, schema at head."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from hermes_data.telemetry.schema import metadata
from hermes_data.telemetry.store import TelemetryStore

#: A fixed "now" so window tests are exact and independent of the wall clock.
NOW = datetime(2026, 7, 20, 15, 30, 0, tzinfo=timezone.utc)


@pytest.fixture
def db_path(tmp_path):
    return tmp_path / "telemetry.db"


@pytest.fixture
def store(db_path):
    with TelemetryStore(db_path) as s:
        metadata.create_all(s.engine)
        yield s


def iso(*args: int) -> str:
    """Canonical stored form of a UTC datetime given as (y, m, d, H, M, S[, us])."""
    return datetime(*args, tzinfo=timezone.utc).isoformat()


@pytest.fixture
def wal_store(tmp_path):
    """A store forced into WAL (``synchronous=NORMAL`` then commits without fsync): the
    8-thread test checks atomicity, and 16,000 fsynced DELETE-mode commits would take a minute."""
    from hermes_data.engine import SqliteSettings

    with TelemetryStore(tmp_path / "wal.db", settings=SqliteSettings(journal_mode="wal")) as s:
        metadata.create_all(s.engine)
        assert s.connection().execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        yield s
