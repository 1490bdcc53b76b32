"""Only PASSIVE checkpoints, anywhere: a TRUNCATE/RESTART/FULL checkpoint from a short-lived
process raced a live writer and tore pages upstream (seed 003).

Two nets: every ``wal_checkpoint`` the library's source can issue names PASSIVE, and at run
time every statement any SQLite connection sends during the whole test session is watched
(see ``conftest._checkpoint_watch``), so a checkpoint built dynamically cannot slip through.
"""

from __future__ import annotations

import re

from .conftest import REPO

CHECKPOINT = re.compile(r"wal_checkpoint\s*(\(\s*([A-Za-z]*)\s*\))?", re.IGNORECASE)


def test_source_only_issues_passive_checkpoints():
    offenders = []
    for path in (REPO / "hermes_data").rglob("*.py"):
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            for match in CHECKPOINT.finditer(code):
                mode = (match.group(2) or "").upper()
                if mode != "PASSIVE":
                    offenders.append(f"{path.relative_to(REPO)}:{lineno}: {line.strip()}")
    assert offenders == []


def test_runtime_watch_is_active(checkpoint_log):
    import sqlite3

    con = sqlite3.connect(":memory:")
    con.execute("PRAGMA wal_checkpoint(PASSIVE)")
    con.close()
    assert any("PASSIVE" in s for s in checkpoint_log)


def test_runtime_watch_sees_sqlalchemy_and_store_connections(tmp_path, checkpoint_log):
    """SQLAlchemy connects through ``sqlite3.dbapi2.connect``: the store's own engine
    connections are watched too (a TRUNCATE there would fail the session)."""
    from hermes_data.engine import SqliteSettings
    from hermes_data.sessions.store import SessionStore

    before = len(checkpoint_log)
    with SessionStore(tmp_path / "state.db", settings=SqliteSettings(
            busy_timeout_ms=1000, journal_mode="wal", sqlite_version=(3, 51, 3))) as store:
        store.create_session("s", "cli")
        with store.engine.connect() as conn:
            conn.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
    assert len(checkpoint_log) >= before + 2  # ours above, and close()'s own PASSIVE
