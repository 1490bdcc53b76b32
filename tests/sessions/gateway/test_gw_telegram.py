"""Telegram DM topic mode (spec sessions-ext-gateway.md §2.5, §3.8, acceptance behaviours
34–39)."""

from __future__ import annotations

import logging
import sqlite3
import threading

import pytest
import sqlalchemy as sa

from hermes_data.errors import DatabaseBusyError
from hermes_data.sessions.core.maintenance import delete_session, prune_sessions
from hermes_data.sessions.errors import SessionNotFoundError
from hermes_data.sessions.store import SessionStore

from tests.sessions.gateway.test_gw_peers import T, _msg, _row

V1_MODE = ("CREATE TABLE telegram_dm_topic_mode (chat_id TEXT PRIMARY KEY, user_id TEXT NOT "
           "NULL, enabled INTEGER NOT NULL DEFAULT 1, activated_at REAL NOT NULL, updated_at "
           "REAL NOT NULL)")
V1_BINDINGS = ("CREATE TABLE telegram_dm_topic_bindings (chat_id TEXT NOT NULL, thread_id TEXT "
               "NOT NULL, user_id TEXT NOT NULL, session_key TEXT NOT NULL, session_id TEXT NOT "
               "NULL REFERENCES sessions(id){cascade}, managed_mode TEXT NOT NULL DEFAULT 'auto', "
               "linked_at REAL NOT NULL, updated_at REAL NOT NULL, PRIMARY KEY (chat_id, "
               "thread_id))")


def _sql(path, *statements, params=()):
    con = sqlite3.connect(path)
    try:
        out = []
        for st in statements:
            out = con.execute(st, params).fetchall()
        con.commit()
        return out
    finally:
        con.close()


def _names(path):
    return {r[0] for r in _sql(path, "SELECT name FROM sqlite_master WHERE name LIKE "
                                     "'%telegram%'")}


def _trace(store):
    seen: list[str] = []
    sa.event.listen(store.engine, "before_cursor_execute",
                    lambda c, cur, st, p, ctx, many: seen.append(st))
    return seen


@pytest.mark.sqlite_only("the opt-in tables are SQLite's")
def test_gw34_opt_in_tables_on_sqlite(store):
    """Behaviour 34: a fresh SQLite store has no topic table; readers answer empty; disable
    ⇒ False and creates nothing; enable creates the v3 tables, indexes and state '3'; a
    second enable runs no DDL."""
    path = store.path
    assert _names(path) == set()
    assert store.get_telegram_topic_binding(chat_id=1, thread_id=2) is None
    assert store.get_telegram_topic_binding_by_session(session_id="s") is None
    assert store.list_telegram_topic_bindings_for_chat(chat_id=1) == []
    assert not store.is_telegram_session_linked_to_topic(session_id="s")
    assert not store.is_telegram_topic_mode_enabled(chat_id=1, user_id=2)
    assert store.delete_telegram_topic_binding(chat_id=1, thread_id=2) == 0
    assert store.disable_telegram_topic_mode(chat_id=1) is False
    assert _names(path) == set()
    store.enable_telegram_topic_mode(chat_id=1, user_id=2, has_topics_enabled=True)
    assert _names(path) == {"telegram_dm_topic_mode", "telegram_dm_topic_bindings",
                            "idx_telegram_dm_topic_bindings_session",
                            "idx_telegram_dm_topic_bindings_user",
                            "sqlite_autoindex_telegram_dm_topic_mode_1",
                            "sqlite_autoindex_telegram_dm_topic_bindings_1"}
    assert _sql(path, "SELECT value FROM state_meta WHERE key = "
                      "'telegram_dm_topic_schema_version'") == [("3",)]
    assert store.is_telegram_topic_mode_enabled(chat_id="1", user_id=2)
    with SessionStore(path) as other:
        seen = _trace(other)
        other.enable_telegram_topic_mode(chat_id=1, user_id=2)
    assert not [s for s in seen if s.lstrip().upper().startswith(("CREATE", "ALTER", "DROP"))]
    assert _sql(path, "SELECT enabled, has_topics_enabled FROM telegram_dm_topic_mode") == [
        (1, None)]


def _legacy(path, cascade: bool):
    _sql(path, V1_MODE, V1_BINDINGS.format(cascade=" ON DELETE CASCADE" if cascade else ""))
    _sql(path, "INSERT INTO telegram_dm_topic_mode VALUES ('c1', 'u', 1, 1.0, 2.0)")
    rows = [("c1", "1", "u", "k1", "s1", "auto", 1.0, 5.0),
            ("c1", "2", "u", "k1", "s1", "auto", 1.0, 9.0),  # newer duplicate of s1
            ("c1", "3", "u", "k2", "s2", "manual", 1.0, 3.0),
            ("c1", "4", "u", "kx", "gone", "auto", 1.0, 3.0)]  # its session no longer exists
    con = sqlite3.connect(path)
    con.executemany("INSERT INTO telegram_dm_topic_bindings VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    rows)
    con.commit()
    con.close()


@pytest.mark.parametrize("cascade", [False, True], ids=["v1", "v2"])
def test_gw35_legacy_tables_migrate_into_default(tmp_path, cascade, caplog):
    """Behaviour 35: v1/v2 tables migrate into profile ``default`` with their rows; v1
    bindings gain the cascade; a binding of a missing session is dropped and counted;
    duplicate bindings of one session keep the newest."""
    path = tmp_path / "state.db"
    with SessionStore(path) as s:
        s.create_session("s1", "telegram")
        s.create_session("s2", "telegram")
    _legacy(path, cascade)
    with SessionStore(path) as s, caplog.at_level(logging.WARNING):
        s.apply_telegram_topic_migration()
        assert s.is_telegram_topic_mode_enabled(chat_id="c1", user_id="u")
        assert [(b.thread_id, b.session_id, b.profile_name) for b in
                s.list_telegram_topic_bindings_for_chat(chat_id="c1")] == [
            ("2", "s1", "default"), ("3", "s2", "default")]
        assert "1 of 4 legacy row(s)" in caplog.text and "duplicate" in caplog.text
        delete_session(s, "s2")
        assert s.get_telegram_topic_binding(chat_id="c1", thread_id="3") is None
    sql = _sql(path, "SELECT sql FROM sqlite_master WHERE name = 'telegram_dm_topic_bindings'")
    assert "ON DELETE CASCADE" in sql[0][0]


def test_gw36_leftover_new_tables_and_an_interrupted_copy(tmp_path):
    """Behaviour 36: ``<t>_new`` beside ``<t>`` is redone; ``<t>_new`` alone is renamed; a
    failure injected between copy and DROP leaves the legacy tables intact and no ``_new``."""
    path = tmp_path / "state.db"
    with SessionStore(path) as s:
        s.create_session("s1", "telegram")
        s.create_session("s2", "telegram")
    _legacy(path, cascade=False)
    _sql(path, "CREATE TABLE telegram_dm_topic_bindings_new (junk TEXT)")
    with SessionStore(path) as s:
        def fail(conn, cursor, statement, parameters, context, executemany):
            if statement.startswith("DROP TABLE telegram_dm_topic_mode"):
                raise RuntimeError("injected before the drop")

        sa.event.listen(s.engine, "before_cursor_execute", fail)
        with pytest.raises(RuntimeError, match="injected"):
            s.apply_telegram_topic_migration()
        sa.event.remove(s.engine, "before_cursor_execute", fail)
        assert _sql(path, "SELECT COUNT(*) FROM telegram_dm_topic_bindings") == [(4,)]
        assert "telegram_dm_topic_mode_new" not in _names(path)
        assert "telegram_dm_topic_bindings_new" in _names(path)  # the crash's leftover, kept
        s.apply_telegram_topic_migration()  # redone: the leftover dropped, the copy re-run
        assert not {n for n in _names(path) if n.endswith("_new")}
        assert len(s.list_telegram_topic_bindings_for_chat(chat_id="c1")) == 2
    # A finished copy whose RENAME never ran: ``<t>_new`` alone is renamed.
    path2 = tmp_path / "two.db"
    with SessionStore(path2) as s:
        s.enable_telegram_topic_mode(chat_id="c", user_id="u")
    _sql(path2, "ALTER TABLE telegram_dm_topic_mode RENAME TO telegram_dm_topic_mode_new")
    with SessionStore(path2) as s:
        assert s.is_telegram_topic_mode_enabled(chat_id="c", user_id="u") is False  # absent
        s.apply_telegram_topic_migration()
        assert s.is_telegram_topic_mode_enabled(chat_id="c", user_id="u")


def test_gw37_binding_rules(store):
    """Behaviour 37: rebinding the same topic/session is idempotent; the session to another
    topic ⇒ ValueError; two racing binds of one session to two topics ⇒ one ValueError; an
    unknown session ⇒ SessionNotFoundError; re-pointing a topic resets ``linked_at``."""
    for sid in ("s1", "s2", "s3"):
        store.create_session(sid, "telegram")
    kw = {"chat_id": -100, "user_id": 5, "session_key": "k"}
    store.bind_telegram_topic(thread_id=1, session_id="s1", **kw)
    first = store.get_telegram_topic_binding(chat_id="-100", thread_id="1")
    store.bind_telegram_topic(thread_id=1, session_id="s1", **kw)
    assert store.get_telegram_topic_binding(chat_id=-100, thread_id=1).linked_at \
        == first.linked_at
    with pytest.raises(ValueError, match="already linked"):
        store.bind_telegram_topic(thread_id=2, session_id="s1", **kw)
    with pytest.raises(SessionNotFoundError):
        store.bind_telegram_topic(thread_id=3, session_id="nope", **kw)
    with pytest.raises(ValueError):
        store.bind_telegram_topic(thread_id=3, session_id="s2", managed_mode=" ", **kw)
    store.bind_telegram_topic(thread_id=1, session_id="s2", **kw)  # re-pointed
    again = store.get_telegram_topic_binding(chat_id=-100, thread_id=1)
    assert again.session_id == "s2" and again.linked_at >= first.linked_at
    assert store.get_telegram_topic_binding_by_session(session_id="s1") is None
    errors: list[str] = []
    barrier = threading.Barrier(2)

    def bind(chat):
        barrier.wait()
        try:
            store.bind_telegram_topic(chat_id=chat, thread_id=9, user_id=5, session_key="k",
                                      session_id="s3")
        except ValueError as exc:
            errors.append(str(exc))

    threads = [threading.Thread(target=bind, args=(c,)) for c in ("chatA", "chatB")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == ["session is already linked to another Telegram topic"]
    assert store.is_telegram_session_linked_to_topic(session_id="s3")


def test_gw38_deletes_disable_the_last_lane_and_cascade(store, caplog, monkeypatch):
    """Behaviour 38: deleting the chat's last binding disables its mode in the same
    transaction, a non-last one does not; profiles a/b sharing a chat id are isolated; a busy
    store ⇒ 0 + WARNING; deleting the bound session removes the binding."""
    for sid in ("s1", "s2", "s3", "s4"):
        store.create_session(sid, "telegram")
    for p in ("a", "b"):
        store.enable_telegram_topic_mode(chat_id="c", user_id="u", profile_name=p)
    store.bind_telegram_topic(chat_id="c", thread_id=1, user_id="u", session_key="k",
                              session_id="s1", profile_name="a")
    store.bind_telegram_topic(chat_id="c", thread_id=2, user_id="u", session_key="k",
                              session_id="s2", profile_name="a")
    store.bind_telegram_topic(chat_id="c", thread_id=1, user_id="u", session_key="k",
                              session_id="s3", profile_name="b")
    assert store.delete_telegram_topic_binding(chat_id="c", thread_id=1, profile_name="a") == 1
    assert store.is_telegram_topic_mode_enabled(chat_id="c", user_id="u", profile_name="a")
    assert store.delete_telegram_topic_binding(chat_id="c", thread_id=2, profile_name="a") == 1
    assert not store.is_telegram_topic_mode_enabled(chat_id="c", user_id="u", profile_name="a")
    assert store.is_telegram_topic_mode_enabled(chat_id="c", user_id="u", profile_name="b")
    assert store.get_telegram_topic_binding(chat_id="c", thread_id=1, profile_name="b")

    def busy(conn, cursor, statement, parameters, context, executemany):
        if statement.startswith("DELETE FROM telegram_dm_topic_bindings"):
            raise DatabaseBusyError("injected: busy")

    sa.event.listen(store.engine, "before_cursor_execute", busy)
    with caplog.at_level(logging.WARNING, logger="hermes_data.sessions.gateway"):
        assert store.delete_telegram_topic_binding(chat_id="c", thread_id=1,
                                                   profile_name="b") == 0
    sa.event.remove(store.engine, "before_cursor_execute", busy)
    assert "could not delete the Telegram topic binding" in caplog.text
    delete_session(store, "s3")
    assert store.get_telegram_topic_binding_by_session(session_id="s3") is None
    store.bind_telegram_topic(chat_id="c", thread_id=4, user_id="u", session_key="k",
                              session_id="s4", profile_name="b")
    store.end_session("s4", "user_exit")
    with store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE sessions SET started_at = 1, ended_at = 2 WHERE id = 's4'")
    prune_sessions(store, older_than_days=1)
    assert store.get_telegram_topic_binding_by_session(session_id="s4") is None


def test_gw39_unlinked_sessions_for_a_user(store, backend):
    """Behaviour 39: filtered by profile even without the bindings table; with it, bound rows
    and compression-ended segments are excluded; ordered by LAST_ACTIVE; limit=-1 ⇒
    ValueError."""
    _row(store, "mine", user_id="u", started_at=T + 1, profile_name="default")
    _msg(store, "mine", T + 50)
    _row(store, "null-profile", user_id="u", started_at=T + 2)
    _row(store, "work", user_id="u", started_at=T + 3, profile_name="work")
    _row(store, "seg", user_id="u", started_at=T + 4, ended_at=T + 5, end_reason="compression")
    _row(store, "bound", user_id="u", started_at=T + 6)
    _row(store, "other-user", user_id="v", started_at=T + 7)
    ids = [r.id for r in store.list_unlinked_telegram_sessions_for_user(chat_id=1, user_id="u")]
    expect = ["mine", "bound", "null-profile"]
    if backend == "sqlite":  # no bindings table yet: the profile clause still holds
        assert ids == expect
    store.bind_telegram_topic(chat_id=1, thread_id=1, user_id="u", session_key="k",
                              session_id="bound")
    rows = store.list_unlinked_telegram_sessions_for_user(chat_id=1, user_id="u")
    assert [r.id for r in rows] == ["mine", "null-profile"]
    assert rows[0].last_active == T + 50
    assert [r.id for r in store.list_unlinked_telegram_sessions_for_user(
        chat_id=1, user_id="u", profile_name="work")] == ["work"]
    assert len(store.list_unlinked_telegram_sessions_for_user(chat_id=1, user_id="u",
                                                             limit=1)) == 1
    with pytest.raises(ValueError):
        store.list_unlinked_telegram_sessions_for_user(chat_id=1, user_id="u", limit=-1)


def _bind_in_process(target, chat, go, out):
    with SessionStore(target) as s:
        s.apply_telegram_topic_migration()
        assert go.wait(60)
        try:
            s.bind_telegram_topic(chat_id=chat, thread_id=9, user_id=5, session_key="k",
                                  session_id="s3")
            out.put("bound")
        except ValueError as exc:
            out.put(str(exc))


def test_gw37_two_processes_binding_one_session_to_two_topics(store, backend):
    """Behaviour 37 with real processes: two processes bind one session to topics of two
    chats at once ⇒ exactly one succeeds, the other gets the ``ValueError``."""
    import multiprocessing

    from tests.sessions.gateway.test_gw_handoffs import _target
    store.create_session("s3", "telegram")
    store.apply_telegram_topic_migration()
    ctx = multiprocessing.get_context("spawn")
    go, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_bind_in_process, args=(_target(store, backend), c, go, out))
             for c in ("chatA", "chatB")]
    for p in procs:
        p.start()
    go.set()
    results = sorted(out.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(30)
    assert results == ["bound", "session is already linked to another Telegram topic"]
    bound = store.get_telegram_topic_binding_by_session(session_id="s3")
    assert bound is not None and bound.chat_id in ("chatA", "chatB")
