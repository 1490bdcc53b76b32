"""Revision ``s04_coordination`` (spec sessions-ext-coordination.md §2): the compression
cooldown/streak columns and ``rewind_count``, add-only and read-gated."""

from __future__ import annotations

import sqlite3

import pytest
import sqlalchemy as sa

from hermes_data.migrate import runner as migrate
from hermes_data.engine import trace_writes
from hermes_data.sessions.errors import SchemaBehindError
from hermes_data.sessions.storage.fresh import REVISIONS
from hermes_data.sessions.schema import metadata
from hermes_data.sessions.store import SessionStore
from hermes_data.migrate.shape import live_shape, metadata_shape

COORDINATION_COLUMNS = ("compression_failure_cooldown_until", "compression_failure_error",
                        "compression_fallback_streak", "compression_ineffective_count",
                        "compression_recovery_deadline", "compression_overload_streak",
                        "rewind_count")
# The v21 fixture (upstream schema 21) already has these; it lacks the other three.
V21_HAS = ("compression_failure_cooldown_until", "compression_failure_error",
           "compression_fallback_streak", "rewind_count")


def _at_s03(path) -> None:
    assert migrate.upgrade("sessions", path, revision="s03_agent_turn").applied[-1] \
        == "s03_agent_turn"


def _sql(path, statement: str) -> list:
    con = sqlite3.connect(path)
    try:
        out = con.execute(statement).fetchall()
        con.commit()
        return out
    finally:
        con.close()


@pytest.mark.sqlite_only("PRAGMA table_info metadata")
def test_upgrade_from_s03_appends_the_canonical_columns_and_settles(tmp_path):
    path = tmp_path / "state.db"
    _at_s03(path)
    _sql(path, "INSERT INTO sessions (id, source, started_at) VALUES ('a', 'cli', 1.0)")
    assert migrate.upgrade("sessions", path).applied == list(REVISIONS[3:])
    engine = sa.create_engine(f"sqlite:///{path}")
    with engine.connect() as conn:
        got = live_shape(conn)
    engine.dispose()
    assert got.tables["sessions"] == metadata_shape(metadata).tables["sessions"]
    assert migrate.check("sessions", path) == []
    # The existing row reads the neutral values; NOT NULL columns hold 0, never NULL.
    row = _sql(path, "SELECT compression_fallback_streak, compression_ineffective_count, "
                     "compression_overload_streak, rewind_count, "
                     "compression_failure_cooldown_until FROM sessions")
    assert row == [(0, 0, 0, 0, None)]
    with SessionStore(path) as s:
        seen, stop = trace_writes(s.engine)
        try:
            assert s.get_session("a") is not None
        finally:
            stop()
        assert seen == []


@pytest.mark.sqlite_only("read-only open of a SQLite file")
def test_read_only_open_behind_s04_names_the_missing_column(tmp_path):
    path = tmp_path / "state.db"
    _at_s03(path)
    before = _sql(path, "SELECT sql FROM sqlite_master ORDER BY name")
    with pytest.raises(SchemaBehindError, match=r"sessions\.compression_failure_cooldown_until"):
        SessionStore(path, read_only=True)
    assert _sql(path, "SELECT sql FROM sqlite_master ORDER BY name") == before


@pytest.mark.sqlite_only("upstream state.db shapes are SQLite files")
def test_v21_fixture_keeps_its_columns_and_values(legacy_copy):
    """Coordination §2.3: the five upstream columns keep their position, declaration and
    values; the three missing ones are appended."""
    before_info = {r[1]: r for r in _sql(legacy_copy, "PRAGMA table_info(sessions)")}
    assert set(V21_HAS) <= set(before_info)
    cols = ", ".join(V21_HAS)
    before_values = _sql(legacy_copy, f"SELECT id, {cols} FROM sessions ORDER BY id")
    migrate.upgrade("sessions", legacy_copy)
    info = {r[1]: r for r in _sql(legacy_copy, "PRAGMA table_info(sessions)")}
    for name in V21_HAS:
        assert info[name] == before_info[name]
    assert set(COORDINATION_COLUMNS) <= set(info)
    assert _sql(legacy_copy, f"SELECT id, {cols} FROM sessions ORDER BY id") == before_values


def test_postgresql_upgrade_from_s03_adds_the_columns(pg_url):
    assert migrate.upgrade("sessions", pg_url, revision="s03_agent_turn").applied
    engine = sa.create_engine(pg_url)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql("INSERT INTO sessions (id, source, started_at) "
                                 "VALUES ('a', 'cli', 1.0)")
        assert migrate.upgrade("sessions", pg_url).applied == list(REVISIONS[3:])
        with engine.connect() as conn:
            cols = {c["name"]: c for c in sa.inspect(conn).get_columns("sessions")}
            assert conn.exec_driver_sql("SELECT rewind_count, compression_overload_streak "
                                        "FROM sessions").all() == [(0, 0)]
        for name in COORDINATION_COLUMNS:
            assert name in cols
        assert str(cols["compression_recovery_deadline"]["type"]) == "DOUBLE PRECISION"
        assert str(cols["rewind_count"]["type"]) == "BIGINT"
        assert not cols["rewind_count"]["nullable"]
        assert migrate.check("sessions", pg_url) == []
    finally:
        engine.dispose()
