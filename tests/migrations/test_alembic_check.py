"""Migration CI (issue 32, item 4): ``alembic check`` (telemetry) and ``alembic -n sessions
check`` report nothing right after ``hermes-data upgrade``, on SQLite and on PostgreSQL —
the real ``alembic`` command line, in its own process. The differences the session store's
``env.py`` does not report are each proven not to hide real drift."""

from __future__ import annotations

import sqlite3
import subprocess
import sys

import pytest
import sqlalchemy as sa

from hermes_data.sessions.store import SessionStore

from ..conftest import REPO, run_cli

STORES = ("telemetry", "sessions")


def _alembic_check(store: str, url: str) -> subprocess.CompletedProcess:
    section = ["-n", "sessions"] if store == "sessions" else []
    return subprocess.run([sys.executable, "-m", "alembic", *section, "-x", f"url={url}", "check"],
                          cwd=REPO, capture_output=True, text=True, timeout=180)


def _assert_clean(store: str, url: str) -> None:
    proc = _alembic_check(store, url)
    assert proc.returncode == 0, f"{store}: {proc.stdout}{proc.stderr}"
    assert "No new upgrade operations detected" in proc.stdout + proc.stderr


def _assert_reports(store: str, url: str, *fragments: str) -> None:
    proc = _alembic_check(store, url)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    for fragment in fragments:
        assert fragment in out


def _upgrade(store: str, url: str) -> None:
    proc = run_cli("upgrade", "--store", store, "--url", url)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("store", STORES)
def test_alembic_check_passes_after_upgrade_on_sqlite(tmp_path, store):
    db = tmp_path / f"{store}.db"
    _upgrade(store, str(db))
    _assert_clean(store, f"sqlite:///{db}")


@pytest.mark.journal_independent("PostgreSQL only")
def test_alembic_check_passes_after_upgrade_on_postgresql(pg_url):
    # Both stores in one database (a deployment may share one): neither reports the other's
    # tables.
    for store in STORES:
        _upgrade(store, pg_url)
    for store in STORES:
        _assert_clean(store, pg_url)


def test_sqlite_optional_tables_compare_when_present_and_pass_when_absent(tmp_path):
    # Telegram opt-in taken: the tables are compared (and match, inline cascade included).
    db = tmp_path / "state.db"
    _upgrade("sessions", str(db))
    with SessionStore(db) as store:
        store.apply_telegram_topic_migration()
    _assert_clean("sessions", f"sqlite:///{db}")
    # The CJK-bigram index off: its documents and queue are absent, which is no difference.
    off = tmp_path / "off.db"
    with SessionStore(off, config={"sessions": {"cjk_index": False}}):
        pass
    con = sqlite3.connect(off)
    assert con.execute("SELECT count(*) FROM sqlite_master WHERE name = 'messages_cjk_doc'"
                       ).fetchone()[0] == 0
    con.close()
    _assert_clean("sessions", f"sqlite:///{off}")


def test_sqlite_inline_foreign_key_hook_still_reports_a_missing_cascade(tmp_path):
    db = tmp_path / "state.db"
    _upgrade("sessions", str(db))
    with SessionStore(db) as store:
        store.apply_telegram_topic_migration()
    con = sqlite3.connect(db)
    with con:
        con.execute("DROP TABLE telegram_dm_topic_bindings")
        con.execute("CREATE TABLE telegram_dm_topic_bindings (profile_name TEXT NOT NULL "
                    "DEFAULT 'default', chat_id TEXT NOT NULL, thread_id TEXT NOT NULL, "
                    "user_id TEXT NOT NULL, session_key TEXT NOT NULL, session_id TEXT NOT NULL "
                    "REFERENCES sessions(id), managed_mode TEXT NOT NULL DEFAULT 'auto', "
                    "linked_at REAL NOT NULL, updated_at REAL NOT NULL, "
                    "PRIMARY KEY (profile_name, chat_id, thread_id))")
        for _name, ddl in (("s", "CREATE UNIQUE INDEX idx_telegram_dm_topic_bindings_session "
                                 "ON telegram_dm_topic_bindings (session_id)"),
                           ("u", "CREATE INDEX idx_telegram_dm_topic_bindings_user ON "
                                 "telegram_dm_topic_bindings (profile_name, user_id, chat_id)")):
            con.execute(ddl)
    con.close()
    _assert_reports("sessions", f"sqlite:///{db}", "add_fk", "ondelete='CASCADE'")


def test_sqlite_optional_table_present_in_another_shape_is_reported(tmp_path):
    db = tmp_path / "state.db"
    _upgrade("sessions", str(db))
    con = sqlite3.connect(db)
    with con:
        con.execute("DROP TABLE messages_cjk_queue")
        con.execute("CREATE TABLE messages_cjk_queue (id INTEGER PRIMARY KEY, queued_at REAL)")
    con.close()
    _assert_reports("sessions", f"sqlite:///{db}", "messages_cjk_queue", "queued_at")


@pytest.mark.journal_independent("PostgreSQL only")
def test_postgresql_hooks_still_report_real_drift(pg_url):
    _upgrade("sessions", pg_url)
    engine = sa.create_engine(pg_url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            # The collation of the cron range index, which reflection cannot see, is lost.
            conn.exec_driver_sql("DROP INDEX idx_sessions_cron_id_c")
            conn.exec_driver_sql("CREATE INDEX idx_sessions_cron_id_c ON sessions (id) "
                                 "WHERE source = 'cron'")
        _assert_reports("sessions", pg_url, "idx_sessions_cron_id_c")
        with engine.connect() as conn:
            conn.exec_driver_sql("DROP INDEX idx_sessions_cron_id_c")
            conn.exec_driver_sql('CREATE INDEX idx_sessions_cron_id_c ON sessions '
                                 '((id COLLATE "C")) WHERE source = \'cron\'')
            # The folded-document index over another expression.
            conn.exec_driver_sql("DROP INDEX messages_fts_fold")
            conn.exec_driver_sql("CREATE INDEX messages_fts_fold ON messages USING gin "
                                 "(to_tsvector('simple'::regconfig, hermes_fold(content)))")
        _assert_reports("sessions", pg_url, "messages_fts_fold")
        with engine.connect() as conn:
            conn.exec_driver_sql("DROP INDEX messages_fts_fold")
        _assert_reports("sessions", pg_url, "messages_fts_fold")
        with engine.connect() as conn:
            # pg_trgm is installed: a missing trigram index is drift.
            conn.exec_driver_sql("DROP INDEX messages_tool_trgm")
        _assert_reports("sessions", pg_url, "messages_tool_trgm")
    finally:
        engine.dispose()


@pytest.mark.journal_independent("PostgreSQL only")
def test_postgresql_without_pg_trgm_passes_without_the_trigram_indexes(pg_url):
    _upgrade("sessions", pg_url)
    engine = sa.create_engine(pg_url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            # What a server without postgresql-contrib has after the revisions: no extension,
            # so neither trigram index.
            conn.exec_driver_sql("DROP EXTENSION pg_trgm CASCADE")
            left = {str(r[0]) for r in conn.exec_driver_sql(
                "SELECT indexname FROM pg_indexes WHERE indexname IN "
                "('messages_fts_trgm', 'messages_tool_trgm')")}
        assert left == set()
    finally:
        engine.dispose()
    _assert_clean("sessions", pg_url)
    assert run_cli("check", "--store", "sessions", "--url", pg_url).returncode == 0
