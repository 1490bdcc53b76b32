"""Retry safety of the gateway writes (issue 20 acceptance 3), on SQLite and PostgreSQL.

Each write runs once with its reply lost: the backend's write transaction commits, then the
caller gets an injected timeout instead of the result (it cannot tell the write landed). The
caller retries the same call; the test asserts exactly one effect. Hygiene streaks are left
out on purpose: the spec makes each increment count (not idempotent).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest


class InjectedTimeout(Exception):
    """The reply of a committed write never reached the caller."""


def _lost_then_retried(store, call: Callable[[], Any]) -> Any:
    """Run ``call`` with every write's reply lost after its commit, then retry it plainly."""
    backend = store.backend
    committed: list[str] = []

    def losing(name):
        real = getattr(backend, name)

        def run(*args, **kwargs):
            real(*args, **kwargs)
            committed.append(name)
            raise InjectedTimeout(f"{name}: reply lost after commit")
        return run

    backend.write = losing("write")
    backend.write_driver = losing("write_driver")
    try:
        with pytest.raises(InjectedTimeout):
            call()
    finally:
        del backend.write, backend.write_driver
    assert committed, "the first attempt never reached a write transaction"
    return call()


def _count(store, sql: str, *params: Any) -> int:
    with store.engine.connect() as conn:
        return int(conn.exec_driver_sql(sql, params).scalar())


def test_routing_writes_retried_after_a_lost_reply(store):
    assert _lost_then_retried(store, lambda: store.save_gateway_routing_entry("K", "E1"))
    assert store.save_gateway_routing_entry("C", "E1")
    assert _lost_then_retried(
        store, lambda: store.save_gateway_routing_entry("C", "E2", if_current="E1"))
    assert _lost_then_retried(
        store, lambda: store.replace_gateway_routing_entries({"a": "1", "b": "2"}, scope="r"))
    assert store.save_gateway_routing_entry("D", "E")
    assert _lost_then_retried(store, lambda: store.delete_gateway_routing_entries(["D"])) == 0
    assert store.load_gateway_routing_entries() == {"K": "E1", "C": "E2"}
    assert store.load_gateway_routing_entries(scope="r") == {"a": "1", "b": "2"}
    assert _count(store, "SELECT COUNT(*) FROM gateway_routing") == 4


def test_peer_and_handoff_writes_retried_after_a_lost_reply(store):
    _lost_then_retried(store, lambda: store.record_gateway_session_peer(
        "p", source="telegram", session_key="pk", user_id="u", chat_id="c", chat_type="dm"))
    assert _count(store, "SELECT COUNT(*) FROM sessions WHERE id = 'p' AND session_key = 'pk'"
                  " AND user_id = 'u'") == 1
    for sid in ("h", "f"):
        store.create_session(sid, "cli")
        assert _lost_then_retried(store, lambda: store.request_handoff(sid, "telegram"))
        assert store.get_handoff_state(sid).state == "pending"
    assert _lost_then_retried(store, lambda: store.claim_handoff("h", claimant="gw"))
    assert store.get_handoff_state("h").claimed_by == "gw"
    assert _lost_then_retried(store, lambda: store.complete_handoff("h", claimant="gw"))
    assert store.get_handoff_state("h").state == "completed"
    assert _lost_then_retried(store, lambda: store.fail_handoff("f", "boom"))
    state = store.get_handoff_state("f")
    assert (state.state, state.error) == ("failed", "boom")
    # A lost reply of a platform-deduplicated append (amendment A4): one message, one id.
    store.create_session("m", "telegram")
    holder: dict[str, int] = {}

    def append() -> int:
        holder["id"] = store.append_message("m", "user", "hi", platform_message_id="pm1",
                                            skip_if_platform_message_exists=True)
        return holder["id"]

    first = _lost_then_retried(store, append)
    assert _count(store, "SELECT COUNT(*) FROM messages WHERE session_id = 'm'") == 1
    assert store.append_message("m", "user", "hi", platform_message_id="pm1",
                                skip_if_platform_message_exists=True) == first


def test_heartbeat_and_topic_writes_retried_after_a_lost_reply(store):
    assert _lost_then_retried(store, lambda: store.register_backend_heartbeat(
        backend_id="gw-1", pid=42, started_at=10.0, last_heartbeat=20.0))
    assert [(h.backend_id, h.last_heartbeat) for h in store.list_backend_heartbeats()] == [
        ("gw-1", 20.0)]
    _lost_then_retried(store, lambda: store.clear_backend_heartbeat("gw-1"))
    assert store.list_backend_heartbeats() == []
    _lost_then_retried(store, lambda: store.enable_telegram_topic_mode(chat_id=1, user_id=2))
    assert store.is_telegram_topic_mode_enabled(chat_id=1, user_id=2)
    store.create_session("t", "telegram")
    _lost_then_retried(store, lambda: store.bind_telegram_topic(
        chat_id=1, thread_id=5, user_id=2, session_key="tk", session_id="t"))
    assert [b.session_id for b in store.list_telegram_topic_bindings_for_chat(chat_id=1)] \
        == ["t"]
    assert _lost_then_retried(
        store, lambda: store.delete_telegram_topic_binding(chat_id=1, thread_id=5)) == 0
    assert store.list_telegram_topic_bindings_for_chat(chat_id=1) == []
