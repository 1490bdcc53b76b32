"""The session store's revision history on PostgreSQL: fresh upgrade, drift check, shared
database with the telemetry store (own Alembic version table), full-text indexes."""

from __future__ import annotations

import sqlalchemy as sa

from hermes_data import migrate
from hermes_data.sessions.migration import PG_VERSION_TABLE


def _names(url: str, sql: str) -> set[str]:
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            return {r[0] for r in conn.exec_driver_sql(sql)}
    finally:
        engine.dispose()


def test_fresh_upgrade_checks_clean_and_is_idempotent(pg_url):
    report = migrate.upgrade("sessions", pg_url)
    assert report.applied == ["s01_baseline"]
    assert migrate.check("sessions", pg_url) == []
    assert migrate.upgrade("sessions", pg_url).up_to_date
    indexes = _names(pg_url, "SELECT indexname FROM pg_indexes WHERE tablename = 'messages'")
    assert {"messages_fts_tsv", "messages_fts_trgm", "idx_messages_session_id",
            "idx_messages_active_null"} <= indexes
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
            conn.exec_driver_sql("DROP INDEX messages_fts_tsv")
            conn.exec_driver_sql("ALTER TABLE sessions DROP COLUMN pinned")
    finally:
        engine.dispose()
    kinds = {(d.kind, d.object) for d in migrate.check("sessions", pg_url)}
    assert ("missing_index", "messages_fts_tsv") in kinds
    assert any(k == "missing_column" for k, _ in kinds)


def test_both_stores_share_one_database(pg_url):
    migrate.upgrade("telemetry", pg_url)
    migrate.upgrade("sessions", pg_url)
    assert migrate.check("sessions", pg_url) == []
    assert migrate.check("telemetry", pg_url) == []
    tables = _names(pg_url, "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
    assert {"alembic_version", PG_VERSION_TABLE, "sessions", "llm_calls"} <= tables
    assert _names(pg_url, f"SELECT version_num FROM {PG_VERSION_TABLE}") == {"s01_baseline"}
    assert _names(pg_url, "SELECT version_num FROM alembic_version") == {
        migrate.head_revision("telemetry")}
    assert migrate.status("sessions", pg_url).revision == "s01_baseline"
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
