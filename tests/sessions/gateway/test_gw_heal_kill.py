"""SIGKILL during the legacy rebuilds (issue 20 acceptance 4; spec sessions-ext-gateway.md
§2.4 step 3, §3.8): the routing primary-key heal and the Telegram v1/v2→v3 rebuild leave
the file in the before- or the after-state. SQLite only: both rebuilds are SQLite's.

The child process pauses right after a chosen statement of the rebuild (inside its
transaction) and tells the parent, which SIGKILLs it there — a kill provably in the middle,
not a lucky timing. The next run then completes the rebuild from the intact before-state.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sqlite3
import time

import pytest

from hermes_data.migrate import runner as migrate
from hermes_data.sessions.store import SessionStore

from tests.sessions.gateway.test_gw_schema import LEGACY_ROUTING, _legacy_routing
from tests.sessions.gateway.test_gw_telegram import _legacy, _names

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")


def _rebuild_pausing_after(path: str, kind: str, marker: str, paused) -> None:
    import sqlalchemy as sa

    def pause(conn, cursor, statement, parameters, context, executemany):
        if statement.startswith(marker):
            paused.set()
            time.sleep(120)  # killed here, inside the rebuild's transaction

    sa.event.listen(sa.engine.Engine, "after_cursor_execute", pause)
    if kind == "routing":
        migrate.upgrade("sessions", path)
    else:
        with SessionStore(path) as s:
            s.apply_telegram_topic_migration()


def _kill_inside(path, kind: str, marker: str) -> None:
    ctx = multiprocessing.get_context("spawn")
    paused = ctx.Event()
    p = ctx.Process(target=_rebuild_pausing_after, args=(str(path), kind, marker, paused))
    p.start()
    try:
        assert paused.wait(120), f"the rebuild never ran {marker!r}"
    finally:
        os.kill(p.pid, signal.SIGKILL)
        p.join(30)
    assert p.exitcode == -signal.SIGKILL


def _one(path, sql: str):
    con = sqlite3.connect(path)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


@pytest.mark.parametrize("marker", [
    "ALTER TABLE gateway_routing RENAME TO gateway_routing_legacy_pk",
    "INSERT INTO gateway_routing (scope",
    "DROP TABLE gateway_routing_legacy_pk"])
def test_sigkill_inside_the_routing_key_heal_leaves_the_before_state(tmp_path, marker):
    path = tmp_path / "state.db"
    _legacy_routing(path)
    _kill_inside(path, "routing", marker)
    assert _one(path, "SELECT sql FROM sqlite_master WHERE name = 'gateway_routing'") == [
        (LEGACY_ROUTING,)]
    assert _one(path, "SELECT session_key, entry_json FROM gateway_routing ORDER BY 1") == [
        ("k1", "e1"), ("k2", "e2"), ("k3", "e3")]
    assert _one(path, "SELECT name FROM sqlite_master WHERE name LIKE '%legacy_pk'") == []
    assert _one(path, "SELECT version_num FROM alembic_version") == [("s05_ui_display",)]
    assert _one(path, "PRAGMA integrity_check") == [("ok",)]
    migrate.upgrade("sessions", path)  # the next run heals from the intact state
    assert _one(path, "SELECT scope, session_key FROM gateway_routing ORDER BY 2") == [
        ("", "k1"), ("", "k2"), ("", "k3")]


@pytest.mark.parametrize("marker", [
    "INSERT INTO telegram_dm_topic_bindings_new",
    "DROP TABLE telegram_dm_topic_mode"])
def test_sigkill_inside_the_telegram_rebuild_leaves_the_before_state(tmp_path, marker):
    path = tmp_path / "state.db"
    with SessionStore(path) as s:
        s.create_session("s1", "telegram")
        s.create_session("s2", "telegram")
    _legacy(path, cascade=False)
    _kill_inside(path, "telegram", marker)
    assert {n for n in _names(path) if not n.startswith("sqlite_autoindex")} == {
        "telegram_dm_topic_mode", "telegram_dm_topic_bindings"}
    assert _one(path, "SELECT COUNT(*) FROM telegram_dm_topic_bindings") == [(4,)]
    cols = {r[1] for r in _one(path, "PRAGMA table_info(telegram_dm_topic_mode)")}
    assert "profile_name" not in cols
    assert _one(path, "PRAGMA integrity_check") == [("ok",)]
    with SessionStore(path) as s:
        s.apply_telegram_topic_migration()
        assert [(b.thread_id, b.profile_name) for b in
                s.list_telegram_topic_bindings_for_chat(chat_id="c1")] == [
            ("2", "default"), ("3", "default")]
