"""The session store's revision history on PostgreSQL: fresh upgrade, drift check, shared
database with the telemetry store (own Alembic version table), full-text indexes."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from hermes_data.migrate import runner as migrate
from hermes_data.sessions.storage.adoption import PG_VERSION_TABLE
from hermes_data.sessions.storage.fresh import REVISIONS

pytestmark = pytest.mark.journal_independent("PostgreSQL only")


def _names(url: str, sql: str) -> set[str]:
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            return {r[0] for r in conn.exec_driver_sql(sql)}
    finally:
        engine.dispose()


def test_fresh_upgrade_checks_clean_and_is_idempotent(pg_url):
    report = migrate.upgrade("sessions", pg_url)
    assert report.applied == list(REVISIONS)
    assert migrate.check("sessions", pg_url) == []
    assert migrate.upgrade("sessions", pg_url).up_to_date
    indexes = _names(pg_url, "SELECT indexname FROM pg_indexes WHERE tablename = 'messages'")
    assert {"messages_fts_document", "messages_fts_trgm", "idx_messages_session_id",
            "idx_messages_active_null", "messages_cjk_grams", "messages_symbol_grams",
            "messages_fts_fold"} <= indexes
    # The revisions own every search object (s09: accent folding without an extension); the
    # writable open creates none, and drops none: still no drift.
    from hermes_data.sessions import SessionStore
    SessionStore(pg_url).close()
    assert _names(pg_url, "SELECT indexname FROM pg_indexes WHERE tablename = 'messages'") \
        == indexes
    assert not _names(pg_url, "SELECT extname FROM pg_extension WHERE extname = 'unaccent'")
    assert migrate.check("sessions", pg_url) == []
    # s02 replaced s01's expression index: nothing queries that expression any more.
    assert "messages_fts_tsv" not in indexes
    # BIGINT / DOUBLE PRECISION where SQLite says INTEGER / REAL.
    engine = sa.create_engine(pg_url, poolclass=sa.pool.NullPool)
    try:
        cols = {c["name"]: str(c["type"]) for c in sa.inspect(engine).get_columns("messages")}
    finally:
        engine.dispose()
    assert cols["id"] == "BIGINT" and cols["timestamp"] == "DOUBLE PRECISION"


def test_drift_is_reported(pg_url):
    migrate.upgrade("sessions", pg_url)
    engine = sa.create_engine(pg_url, poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql("DROP INDEX messages_fts_document")
            conn.exec_driver_sql("DROP INDEX messages_fts_fold")
            conn.exec_driver_sql("ALTER TABLE sessions DROP COLUMN pinned")
    finally:
        engine.dispose()
    kinds = {(d.kind, d.object) for d in migrate.check("sessions", pg_url)}
    assert ("missing_index", "messages_fts_document") in kinds
    assert ("missing_index", "messages_fts_fold") in kinds
    assert ("missing_column", "sessions.pinned") in kinds


def test_missing_generated_column_is_drift(pg_url):
    migrate.upgrade("sessions", pg_url)
    engine = sa.create_engine(pg_url, poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql("ALTER TABLE messages DROP COLUMN fts_document")
    finally:
        engine.dispose()
    kinds = {(d.kind, d.object) for d in migrate.check("sessions", pg_url)}
    assert ("missing_column", "messages.fts_document") in kinds
    assert ("missing_index", "messages_fts_document") in kinds


def test_both_stores_share_one_database(pg_url):
    migrate.upgrade("telemetry", pg_url)
    migrate.upgrade("sessions", pg_url)
    assert migrate.check("sessions", pg_url) == []
    assert migrate.check("telemetry", pg_url) == []
    tables = _names(pg_url, "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
    assert {"alembic_version", PG_VERSION_TABLE, "sessions", "llm_calls"} <= tables
    assert _names(pg_url, f"SELECT version_num FROM {PG_VERSION_TABLE}") == {
        migrate.head_revision("sessions")}
    assert _names(pg_url, "SELECT version_num FROM alembic_version") == {
        migrate.head_revision("telemetry")}
    assert migrate.status("sessions", pg_url).revision == migrate.head_revision("sessions")
    assert migrate.status("telemetry", pg_url).revision == migrate.head_revision("telemetry")
    # Re-running either upgrade finds its own head.
    assert migrate.upgrade("sessions", pg_url).up_to_date
    assert migrate.upgrade("telemetry", pg_url).up_to_date


def test_both_stores_share_one_database_in_either_order(pg_url):
    """The session store first, then the telemetry store: the session tables are not foreign
    to the telemetry store on a shared server database."""
    migrate.upgrade("sessions", pg_url)
    report = migrate.upgrade("telemetry", pg_url)
    assert report.after_revision == migrate.head_revision("telemetry")
    assert report.adopted_from is None
    assert migrate.check("telemetry", pg_url) == []
    assert migrate.check("sessions", pg_url) == []


def _exec(url: str, sql: str, params=None) -> list[tuple]:
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as conn:
            result = conn.execute(sa.text(sql), params or {})
            return [tuple(r) for r in result] if result.returns_rows else []
    finally:
        engine.dispose()


def test_s01_database_upgrades_to_s02_and_backfills(pg_url):
    """A database left at s01_baseline by the previous release: its rows are searchable on
    the standard route after the upgrade (the generated column backfills them)."""
    from hermes_data.sessions.store import SessionStore

    assert migrate.upgrade("sessions", pg_url, revision="s01_baseline").applied == ["s01_baseline"]
    assert "fts_document" not in _names(
        pg_url, "SELECT column_name FROM information_schema.columns WHERE table_name = 'messages'")
    _exec(pg_url, "INSERT INTO sessions (id, source, started_at) VALUES ('old', 'cli', 1.0)")
    for i, (role, content, tool_name) in enumerate([
            ("user", "crash in gateway/run.py today", None),
            ("assistant", "mail ops@example.org about it", None),
            ("tool", "x" * 9000 + " beyondprefix", "terminal")]):
        _exec(pg_url, "INSERT INTO messages (session_id, role, content, tool_name, timestamp) "
                      "VALUES ('old', :r, :c, :t, :ts)",
              {"r": role, "c": content, "t": tool_name, "ts": 10.0 + i})
    ids = [r[0] for r in _exec(pg_url, "SELECT id FROM messages ORDER BY id")]

    report = migrate.upgrade("sessions", pg_url)
    assert report.before_revision == "s01_baseline"
    assert report.applied == list(REVISIONS[1:])
    assert migrate.check("sessions", pg_url) == []
    assert _exec(pg_url, "SELECT count(*) FROM messages WHERE fts_document IS NULL "
                         "OR fts_document = ''::tsvector") == [(0,)]
    with SessionStore(pg_url) as s:
        assert [(h.id, h.route) for h in s.search_messages("gateway")] == [(ids[0], "fts")]
        assert [h.id for h in s.search_messages("example")] == [ids[1]]
        assert [h.id for h in s.search_messages("terminal")] == [ids[2]]  # tool_name indexed
        assert s.search_messages("beyondprefix") == []  # past the 8192-character prefix
        # New rows are indexed by PostgreSQL itself.
        new = s.append_message("old", "user", "see docs/api.md")
        assert [h.id for h in s.search_messages("api")] == [new]


def test_generated_column_matches_the_head_expression(pg_url):
    """The frozen DDL of s02 and the head fragment fts_ddl.PG_FTS_GENERATED compute the same
    vector for every row shape (tool rows cut, NULL content, tool_calls JSON, CJK)."""
    from hermes_data.sessions.storage.fts import ddl as fts_ddl

    migrate.upgrade("sessions", pg_url)
    _exec(pg_url, "INSERT INTO sessions (id, source, started_at) VALUES ('g', 'cli', 1.0)")
    rows = [("user", "Gateway/Run.PY user@host e=mc2 C:\\path\\file 我们，去 café", None, None),
            ("tool", "y" * 8190 + "abcdef tail", "read_file", None),
            ("assistant", None, None, '[{"function": {"name": "read_file"}}]'),
            ("user", "", None, None)]
    for i, (role, content, tool_name, tool_calls) in enumerate(rows):
        _exec(pg_url, "INSERT INTO messages (session_id, role, content, tool_name, tool_calls, "
                      "timestamp) VALUES ('g', :r, :c, :t, :tc, :ts)",
              {"r": role, "c": content, "t": tool_name, "tc": tool_calls, "ts": float(i)})
    same = _exec(pg_url, f"SELECT fts_document = {fts_ddl.PG_FTS_GENERATED}, fts_document::text "
                         "FROM messages ORDER BY id")
    assert [r[0] for r in same] == [True] * len(rows)
    first = same[0][1]
    for lexeme in ("'gateway'", "'run'", "'py'", "'user'", "'host'", "'mc2'", "'path'",
                   "'我们'", "'去'", "'café'"):
        assert lexeme in first
    assert "/" not in first and "@" not in first
    assert "'abcdef'" not in same[1][1] and "'read'" in same[1][1]  # cut at 8192, tool_name
    assert "'read'" in same[2][1] and "'function'" in same[2][1]


def test_generated_column_is_not_in_the_core_metadata():
    from hermes_data.sessions.storage.fts import ddl as fts_ddl
    from hermes_data.sessions.schema import metadata

    assert fts_ddl.PG_FTS_COLUMN not in metadata.tables["messages"].c


def test_copy_between_two_postgresql_databases_of_the_session_store(pg_url):
    """PostgreSQL → PostgreSQL: the source's session history is read from its own version
    table (alembic_version_sessions), and the target is analysed after the bulk load."""
    import sqlalchemy as sa

    from hermes_data.copy.transfer import copy_store
    from hermes_data.sessions.store import SessionStore

    from tests.conftest import PG_ADMIN_URL

    with SessionStore(pg_url) as store:
        store.create_session("a", "cli")
        store.append_messages_batch("a", [{"role": "user", "content": "hello copy"}])
    import uuid

    name = f"hd_cp_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    target = sa.engine.make_url(pg_url).set(database=name).render_as_string(hide_password=False)
    try:
        report = copy_store(pg_url, target, store="sessions")
        assert all(t.verified for t in report.tables)
        engine = sa.create_engine(target)
        with engine.connect() as conn:
            analysed = conn.exec_driver_sql(
                "SELECT last_analyze IS NOT NULL FROM pg_stat_user_tables WHERE relname = 'messages'"
            ).scalar()
        engine.dispose()
        assert analysed
        with SessionStore(target) as copied:
            assert [m.content for m in copied.get_messages("a")] == ["hello copy"]
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()
