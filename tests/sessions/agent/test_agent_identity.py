"""Identity and reset of the agent turn API (spec sessions-ext-agent.md §3.8; acceptance
behaviours 38–41), on SQLite files and PostgreSQL."""

from __future__ import annotations

import multiprocessing

import pytest

from hermes_data.sessions.core.maintenance import delete_session
from hermes_data.sessions.store import SessionStore


def _sql(store, statement, params=()):
    with store.engine.begin() as conn:
        result = conn.exec_driver_sql(statement, params)
        return result.fetchall() if result.returns_rows else None


def test_ab38_resolve_session_id(store):
    """AB38: '' ⇒ None; a unique prefix resolves; ambiguous ⇒ None; 'ABC' never resolves
    abc123; 'a_b' never matches aXb…"""
    for sid in ("abc123", "abd999", "aXb777", "zzz"):
        store.create_session(sid, "cli")
    assert store.resolve_session_id("") is None and store.resolve_session_id(None) is None
    assert store.resolve_session_id("zzz") == "zzz"
    assert store.resolve_session_id("abc") == "abc123"
    assert store.resolve_session_id("ab") is None
    assert store.resolve_session_id("ABC") is None
    assert store.resolve_session_id("a_b") is None
    assert store.resolve_session_id("a%") is None
    assert store.resolve_session_id("aX") == "aXb777"


def test_ab39_explicit_fork_children(store):
    """AB39: False for a continuation whose inherited ``_delegate_from`` names another row;
    True for a tool child and a marked orphan; ``declared_scope_identity(unknown)`` ⇒
    ``(False, '')``."""
    store.create_session("p", "cli")
    store.create_child_session("p", "dlg", "delegate")
    store.create_session("cont", "cli", parent_session_id="dlg",
                         model_config={"_delegate_from": "p"})
    assert store.is_explicit_fork_child("dlg") is True
    assert store.is_explicit_fork_child("cont") is False
    store.create_session("tooly", "tool", parent_session_id="p")
    assert store.is_explicit_fork_child("tooly") is True
    store.create_session("orphan", " cli ", model_config={"_branched_from": "gone"})
    assert store.is_explicit_fork_child("orphan") is True
    assert tuple(store.declared_scope_identity("orphan")) == (True, "cli")
    store.create_child_session("p", "reset", "reset")
    assert store.is_explicit_fork_child("reset") is False
    _sql(store, "UPDATE sessions SET model_config = 'broken' WHERE id = 'dlg'")
    assert store.is_explicit_fork_child("dlg") is False
    assert tuple(store.declared_scope_identity("nope")) == (False, "")
    assert store.is_explicit_fork_child("nope") is False


def test_session_unread_rule():
    """§3.8: ``last_read_at`` NULL ⇒ False; else activity after the read."""
    unread = SessionStore.session_unread
    assert unread({"last_read_at": None, "last_active": 5}) is False
    assert unread({"last_read_at": 4, "last_active": 5}) is True
    assert unread({"last_read_at": 4, "last_active": None, "started_at": 3}) is False


def test_ab40_reset_generations_per_peer(store):
    """AB40: two rows of one peer: promoting the live one ⇒ True, generation 1; the one
    ended ``agent_close`` ⇒ True, generation 2; a row ended ``compression`` ⇒ False, no
    bump; ``reason='compression'`` ⇒ ValueError; ``end_session(s, 'session_reset')`` bumps
    too; deleting every row of the peer keeps the generation."""
    for sid in ("live", "closed", "compressed", "plain"):
        store.create_session(sid, "telegram", session_key="agent:main:tg:42")
    store.end_session("closed", "agent_close")
    store.end_session("compressed", "compression")
    assert store.latest_conversation_boundary("agent:main:tg:42", "telegram") is None
    assert store.promote_to_session_reset("live") is True
    assert store.latest_conversation_boundary("agent:main:tg:42", "telegram") == 1
    assert store.promote_to_session_reset("live") is False  # explicit boundary kept
    assert store.promote_to_session_reset("closed", "idle") is True
    assert store.get_session("closed").end_reason == "idle"
    assert store.latest_conversation_boundary("agent:main:tg:42", "telegram") == 2
    assert store.promote_to_session_reset("compressed") is False
    assert store.latest_conversation_boundary("agent:main:tg:42", "telegram") == 2
    with pytest.raises(ValueError):
        store.promote_to_session_reset("plain", "compression")
    assert store.end_session("plain", "session_reset") is True
    assert store.latest_conversation_boundary("agent:main:tg:42", "telegram") == 3
    # Another source with the same key is another peer.
    assert store.latest_conversation_boundary("agent:main:tg:42", "api") is None
    assert store.latest_conversation_boundary(" ", "telegram") is None
    for sid in ("live", "closed", "compressed", "plain"):
        delete_session(store, sid)
    assert store.latest_conversation_boundary("agent:main:tg:42", "telegram") == 3


def _racer(target, which, go, out):
    with SessionStore(target) as s:
        go.wait(10)
        if which == "reset":
            out.put((which, s.promote_to_session_reset("race")))
        else:
            out.put((which, s.end_session("race", "compression")))


def test_ab41_racing_reset_and_compression_end(store, backend):
    """AB41: racing ``promote_to_session_reset`` and ``end_session(…, 'compression')`` on one
    live row (two processes): one reason lands; the generation moves only if the reset won."""
    target = str(store.path) if backend == "sqlite" else \
        store.url.render_as_string(hide_password=False)
    ctx = multiprocessing.get_context("spawn")
    for attempt in range(2):
        _sql(store, "DELETE FROM conversation_generations")
        _sql(store, "DELETE FROM sessions WHERE id = 'race'")
        store.create_session("race", "telegram", session_key="peer")
        go, out = ctx.Event(), ctx.Queue()
        procs = [ctx.Process(target=_racer, args=(target, w, go, out))
                 for w in ("reset", "compression")]
        for p in procs:
            p.start()
        go.set()
        results = dict(out.get(timeout=60) for _ in procs)
        for p in procs:
            p.join(30)
        assert sorted(results.values()) == [False, True]
        reason = store.get_session("race").end_reason
        generation = store.latest_conversation_boundary("peer", "telegram")
        if results["reset"]:
            assert (reason, generation) == ("session_reset", 1)
        else:
            assert (reason, generation) == ("compression", None)
