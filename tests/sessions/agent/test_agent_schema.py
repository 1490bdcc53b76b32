"""Revision ``s03_agent_turn`` (spec sessions-ext-agent.md §2, acceptance behaviours 1–4)."""

from __future__ import annotations

import logging
import sqlite3
import threading
import time

import pytest
import sqlalchemy as sa

from hermes_data.migrate import runner as migrate
from hermes_data.engine import trace_writes
from hermes_data.sessions.errors import SchemaBehindError
from hermes_data.sessions.schema import metadata
from hermes_data.sessions.store import SessionStore
from hermes_data.migrate.shape import live_shape, metadata_shape
from hermes_data.sessions.storage.fresh import REVISIONS

AGENT_COLUMNS = ("cache_read_tokens", "cache_write_tokens", "reasoning_tokens", "api_call_count",
                 "billing_base_url", "billing_mode", "cost_status", "cost_source",
                 "pricing_version", "last_activity_description", "last_activity_provenance",
                 "git_metadata_generation", "tool_names", "expiry_finalized")
AGENT_INDEXES = ("idx_session_model_usage_session", "idx_session_model_usage_model",
                 "idx_messages_platform_msg_id", "idx_messages_assistant_calls_by_session")

# Upstream's session_model_usage before task joined the key (#73823), with a nullable task.
LEGACY_USAGE = """CREATE TABLE session_model_usage (
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    model TEXT NOT NULL,
    billing_provider TEXT NOT NULL DEFAULT '',
    billing_base_url TEXT NOT NULL DEFAULT '',
    billing_mode TEXT NOT NULL DEFAULT '',
    api_call_count INTEGER NOT NULL DEFAULT 0,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    estimated_cost_usd REAL NOT NULL DEFAULT 0,
    actual_cost_usd REAL NOT NULL DEFAULT 0,
    cost_status TEXT, cost_source TEXT, first_seen REAL, last_seen REAL, task TEXT,
    PRIMARY KEY (session_id, model, billing_provider, billing_base_url, billing_mode))"""


def _core_only(path) -> None:
    assert migrate.upgrade("sessions", path, revision="s02_pg_stored_tsvector").applied[-1] \
        == "s02_pg_stored_tsvector"


def _sql(path, *statements, params=()) -> list:
    con = sqlite3.connect(path)
    try:
        out = []
        for st in statements:
            out = con.execute(st, params).fetchall()
        con.commit()
        return out
    finally:
        con.close()


@pytest.mark.sqlite_only("PRAGMA table_info metadata")
def test_ab1_upgrade_of_a_core_only_store_adds_canonical_objects_then_opens_write_free(tmp_path):
    """AB1: §2.1 columns with canonical table_info metadata, §2.2–§2.4; the next writable open
    issues no write statement."""
    path = tmp_path / "state.db"
    _core_only(path)
    _sql(path, "INSERT INTO sessions (id, source, started_at) VALUES ('a', 'cli', 1.0)")
    report = migrate.upgrade("sessions", path)
    assert report.applied == list(REVISIONS[2:])
    want = metadata_shape(metadata)
    engine = sa.create_engine(f"sqlite:///{path}")
    with engine.connect() as conn:
        got = live_shape(conn)
    engine.dispose()
    assert got.tables["sessions"] == want.tables["sessions"]  # appended in head order
    for table in ("session_model_usage", "conversation_generations"):
        assert got.tables[table] == want.tables[table]
    for name in AGENT_INDEXES:
        assert got.indexes[name] == want.indexes[name]
    assert migrate.check("sessions", path) == []
    with SessionStore(path) as s:
        seen, stop = trace_writes(s.engine)
        try:
            assert s.get_session("a") is not None
        finally:
            stop()
        assert s.open_repairs == [] and seen == []
    reopened = SessionStore(path)
    reopened.close()


def test_ab1_postgresql_upgrade_adds_the_same_objects(pg_url):
    """AB1 (PG): the same objects, plus the byte-order cron index; checks clean."""
    assert migrate.upgrade("sessions", pg_url, revision="s02_pg_stored_tsvector").applied
    engine = sa.create_engine(pg_url)
    with engine.begin() as conn:
        conn.exec_driver_sql("INSERT INTO sessions (id, source, started_at, input_tokens, "
                             "model) VALUES ('a', 'cli', 1.0, 7, 'm')")
    assert migrate.upgrade("sessions", pg_url).applied == list(REVISIONS[2:])
    with engine.connect() as conn:
        insp = sa.inspect(conn)
        cols = {c["name"] for c in insp.get_columns("sessions")}
        assert set(AGENT_COLUMNS) <= cols
        assert insp.get_pk_constraint("session_model_usage")["constrained_columns"] == [
            "session_id", "model", "billing_provider", "billing_base_url", "billing_mode", "task"]
        assert insp.get_pk_constraint("conversation_generations")["constrained_columns"] == [
            "source", "session_key"]
        names = {ix["name"] for t in ("sessions", "messages", "session_model_usage")
                 for ix in insp.get_indexes(t)}
        assert {*AGENT_INDEXES, "idx_sessions_cron_id_c"} <= names
        # AB3 on PostgreSQL: the seed step ran once.
        assert conn.exec_driver_sql("SELECT session_id, model, task, input_tokens FROM "
                                    "session_model_usage").fetchall() == [("a", "m", "", 7)]
    engine.dispose()
    assert migrate.check("sessions", pg_url) == []


def test_ab2_postgresql_legacy_usage_key_is_rebuilt_and_keeps_orphans(pg_url):
    """AB2 on PostgreSQL: the old key constraint is renamed (not dropped) so the rows that
    cannot be merged keep their key in ``session_model_usage_legacy_pk``; nothing is lost."""
    assert migrate.upgrade("sessions", pg_url, revision="s02_pg_stored_tsvector").applied
    engine = sa.create_engine(pg_url)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(LEGACY_USAGE.replace(
                " REFERENCES sessions(id) ON DELETE CASCADE", "").replace("REAL", "DOUBLE PRECISION"))
            conn.exec_driver_sql("INSERT INTO sessions (id, source, started_at) VALUES ('s1', 'cli', 1.0)")
            conn.exec_driver_sql(
                "INSERT INTO session_model_usage (session_id, model, input_tokens, task) VALUES "
                "('s1', 'm1', 10, NULL), ('ghost', 'm1', 99, NULL)")
        migrate.upgrade("sessions", pg_url)
        with engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT session_id, task, input_tokens FROM "
                                        "session_model_usage").fetchall() == [("s1", "", 10)]
            assert conn.exec_driver_sql("SELECT session_id, input_tokens FROM "
                                        "session_model_usage_legacy_pk").fetchall() == [("ghost", 99)]
            assert sa.inspect(conn).get_pk_constraint("session_model_usage_legacy_pk")[
                "constrained_columns"] == ["session_id", "model", "billing_provider",
                                           "billing_base_url", "billing_mode"]
    finally:
        engine.dispose()


@pytest.mark.sqlite_only("upstream state.db shapes are SQLite files")
def test_ab2_legacy_usage_key_is_rebuilt(tmp_path, caplog):
    """AB2: a key without ``task`` (some task NULL, one orphan row) is rebuilt: 6-column key,
    NULL ⇒ '', other rows and totals kept; upserts then work. Deliberately unlike the spec's
    [D] (orphan dropped): nothing is dropped — the orphan stays in
    ``session_model_usage_legacy_pk`` and is counted (CHANGELOG)."""
    path = tmp_path / "state.db"
    _core_only(path)
    _sql(path, LEGACY_USAGE,
         "INSERT INTO sessions (id, source, started_at) VALUES ('s1', 'cli', 1.0), "
         "('s2', 'cli', 2.0)",
         "INSERT INTO session_model_usage (session_id, model, api_call_count, input_tokens, "
         "estimated_cost_usd, task) VALUES ('s1', 'm1', 2, 10, 0.5, NULL), "
         "('s2', 'm2', 1, 20, 0.25, 'vision'), ('ghost', 'm1', 9, 99, 9.0, NULL)")
    with caplog.at_level(logging.WARNING, logger="hermes_data.sessions.migrations"):
        migrate.upgrade("sessions", path)
    assert "1 row(s) kept in session_model_usage_legacy_pk (1 of sessions that no longer exist" \
        in caplog.text
    key = [r[1] for r in sorted((r for r in _sql(path, "PRAGMA table_info(session_model_usage)")
                                 if r[5]), key=lambda r: r[5])]
    assert key == ["session_id", "model", "billing_provider", "billing_base_url",
                   "billing_mode", "task"]
    rows = _sql(path, "SELECT session_id, model, task, api_call_count, input_tokens, "
                      "estimated_cost_usd, cache_read_tokens FROM session_model_usage "
                      "ORDER BY session_id")
    assert rows == [("s1", "m1", "", 2, 10, 0.5, 0), ("s2", "m2", "vision", 1, 20, 0.25, 0)]
    names = {r[0] for r in _sql(path, "SELECT name FROM sqlite_master")}
    assert _sql(path, "SELECT session_id, model, input_tokens FROM session_model_usage_legacy_pk") \
        == [("ghost", "m1", 99)]
    assert {"idx_session_model_usage_session", "idx_session_model_usage_model"} <= names
    # The 6-column upsert (what accounting writes) now finds its key.
    _sql(path, "INSERT INTO session_model_usage (session_id, model, billing_provider, "
               "billing_base_url, billing_mode, task, input_tokens) VALUES "
               "('s1', 'm1', '', '', '', '', 5) ON CONFLICT (session_id, model, billing_provider, "
               "billing_base_url, billing_mode, task) DO UPDATE SET input_tokens = "
               "session_model_usage.input_tokens + excluded.input_tokens")
    assert _sql(path, "SELECT input_tokens FROM session_model_usage WHERE session_id = 's1'") \
        == [(15,)]


@pytest.mark.sqlite_only("upstream state.db shapes are SQLite files")
def test_ab3_pre_accounting_file_is_seeded_once(tmp_path):
    """AB3: no ``session_model_usage`` but token totals ⇒ one ``task=''`` row per such session,
    once."""
    path = tmp_path / "state.db"
    _core_only(path)
    _sql(path, "INSERT INTO sessions (id, source, started_at, ended_at, model, billing_provider, "
               "input_tokens, output_tokens, estimated_cost_usd) VALUES "
               "('t1', 'cli', 1.0, 5.0, NULL, 'openai', 3, 4, 0.1), "
               "('t2', 'cli', 2.0, NULL, 'm', NULL, NULL, 1, NULL), "
               "('zero', 'cli', 3.0, NULL, 'm', NULL, 0, 0, NULL)")
    migrate.upgrade("sessions", path)
    migrate.upgrade("sessions", path)
    assert _sql(path, "SELECT session_id, model, billing_provider, task, input_tokens, "
                      "output_tokens, estimated_cost_usd, first_seen, last_seen "
                      "FROM session_model_usage ORDER BY session_id") == [
        ("t1", "unknown", "openai", "", 3, 4, 0.1, 1.0, 5.0),
        ("t2", "m", "", "", 0, 1, 0.0, 2.0, 2.0)]
    with SessionStore(path):
        pass
    assert _sql(path, "SELECT COUNT(*) FROM session_model_usage") == [(2,)]


@pytest.mark.sqlite_only("read-only open of a SQLite file")
def test_ab4_read_only_open_behind_s03_names_the_missing_column(tmp_path):
    """AB4: a read-only open behind s03 raises SchemaBehindError naming the first missing
    column, and writes no DDL."""
    path = tmp_path / "state.db"
    _core_only(path)
    before = _sql(path, "SELECT sql FROM sqlite_master ORDER BY name")
    with pytest.raises(SchemaBehindError, match=r"sessions\.cache_read_tokens"):
        SessionStore(path, read_only=True)
    assert _sql(path, "SELECT sql FROM sqlite_master ORDER BY name") == before


@pytest.mark.sqlite_only("SQLite's file lock")
def test_ab4_upgrade_waits_out_a_held_write_lock(tmp_path):
    """AB4: the s03 ALTERs meet a held write lock and are retried within the open's
    patience: the open succeeds once the lock goes."""
    path = tmp_path / "state.db"
    _core_only(path)
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    release = threading.Timer(1.5, lambda: holder.execute("COMMIT"))
    release.start()
    t0 = time.monotonic()
    try:
        with SessionStore(path) as s:
            s.create_session("after", "cli")
    finally:
        release.join()
        holder.close()
    assert time.monotonic() - t0 >= 1.0
    cols = {r[1] for r in _sql(path, "PRAGMA table_info(sessions)")}
    assert set(AGENT_COLUMNS) <= cols


@pytest.mark.sqlite_only("upstream state.db shapes are SQLite files")
def test_v21_fixture_keeps_accounting_columns_and_usage_rows(legacy_copy):
    """Issue 17 acceptance 2: the shared legacy state.db gains the s03 shape add-only; its
    accounting columns and session_model_usage rows stay byte-for-byte (manifest checksums);
    its 5-column usage key is rebuilt with ``task`` (AB2)."""
    from tests.sessions.conftest import manifest, table_digest

    migrate.upgrade("sessions", legacy_copy)
    tables = manifest()["tables"]
    con = sqlite3.connect(legacy_copy)
    try:
        for table in ("sessions", "session_model_usage"):
            info = tables[table]
            assert table_digest(con, table, info["columns"]) == (info["sha256"], info["rows"])
        info = {r[1]: r for r in con.execute("PRAGMA table_info(sessions)")}
        # Upstream's own declarations, in upstream's position, untouched.
        assert info["expiry_finalized"][0] == 9 and info["api_call_count"][4] == "0"
        assert set(AGENT_COLUMNS) <= set(info)
        assert con.execute("SELECT COUNT(*) FROM session_model_usage WHERE task = ''").fetchone() \
            == (tables["session_model_usage"]["rows"],)
    finally:
        con.close()
