"""The gateway methods of the drop-in ``SessionDB`` (docs/compat.md "Gateway"), each checked
against what upstream's ``SessionDB`` documents it returns, on both backends (the ``db``
fixture)."""

from __future__ import annotations

import json
import time

import pytest
import sqlalchemy as sa

DAY = 86400.0
SESSION_KEYS = {"id", "source", "session_key", "chat_id", "user_id", "parent_session_id",
                "started_at", "ended_at", "end_reason", "message_count", "title"}


def _sql(db, statement: str, **params) -> list:
    """One ad-hoc statement on the store's engine (named parameters, both dialects)."""
    with db.store.engine.begin() as conn:
        res = conn.execute(sa.text(statement), params)
        return list(res.fetchall()) if res.returns_rows else []


def _age(db, sid: str, seconds: float) -> None:
    _sql(db, "UPDATE sessions SET started_at = :t WHERE id = :i", t=time.time() - seconds,
         i=sid)


def _keyed(db, sid: str, key: str, source: str = "telegram", **kw) -> None:
    db.store.create_session(sid, source, session_key=key, **kw)


# -- routing index and hygiene --------------------------------------------------------------

def test_save_gateway_routing_entry_upserts_per_scope(db):
    assert db.save_gateway_routing_entry("k1", '{"session_id": "a"}') is None
    db.save_gateway_routing_entry("k1", '{"session_id": "b"}')
    db.save_gateway_routing_entry("k1", '{"session_id": "c"}', scope="/other")
    assert db.load_gateway_routing_entries() == {"k1": '{"session_id": "b"}'}
    assert db.load_gateway_routing_entries(scope="/other") == {"k1": '{"session_id": "c"}'}


def test_replace_gateway_routing_entries_drops_absent_keys(db):
    db.save_gateway_routing_entry("old", "{}", scope="s")
    db.save_gateway_routing_entry("keep", "{}", scope="t")
    assert db.replace_gateway_routing_entries({"a": "1", "b": "2"}, scope="s") is None
    assert db.load_gateway_routing_entries(scope="s") == {"a": "1", "b": "2"}
    assert db.load_gateway_routing_entries(scope="t") == {"keep": "{}"}


def test_load_gateway_routing_entries_is_a_plain_dict(db):
    assert db.load_gateway_routing_entries() == {}
    db.save_gateway_routing_entry("k", "v")
    got = db.load_gateway_routing_entries()
    assert type(got) is dict and got == {"k": "v"}


def test_delete_gateway_routing_entries(db):
    db.replace_gateway_routing_entries({"a": "1", "b": "2", "c": "3"})
    assert db.delete_gateway_routing_entries(["a", "c", "missing"]) is None
    assert db.load_gateway_routing_entries() == {"b": "2"}
    assert db.delete_gateway_routing_entries([]) is None


def test_hygiene_failure_streak_increments_and_resets(db):
    assert [db.increment_hygiene_failure_streak("chat") for _ in range(3)] == [1, 2, 3]
    assert db.increment_hygiene_failure_streak("other") == 1
    assert db.reset_hygiene_failure_streak("chat") is None
    assert db.increment_hygiene_failure_streak("chat") == 1


# -- peers ------------------------------------------------------------------------------------

def test_record_gateway_session_peer_stamps_the_row(db):
    db.store.create_session("s1", "telegram")
    result = db.record_gateway_session_peer("s1", source="telegram", user_id="u1",
                                            session_key="agent:tg:u1", chat_id="c1",
                                            chat_type="dm", display_name="Ann")
    assert result is None
    s = db.store.get_session("s1")
    assert (s.session_key, s.user_id, s.chat_id, s.chat_type, s.display_name) == (
        "agent:tg:u1", "u1", "c1", "dm", "Ann")


def test_record_gateway_session_peer_heals_a_missing_row(db):
    db.record_gateway_session_peer("ghost", source="telegram", user_id="u1",
                                   session_key="agent:tg:u1", chat_id="c1", chat_type="dm")
    s = db.store.get_session("ghost")
    assert s is not None and (s.source, s.session_key, s.chat_id) == ("telegram",
                                                                      "agent:tg:u1", "c1")


def test_find_latest_gateway_session_for_peer(db):
    _keyed(db, "old", "k1")
    _age(db, "old", DAY)
    _keyed(db, "new", "k1")
    db.store.append_message("new", "user", "hi")
    found = db.find_latest_gateway_session_for_peer(source="telegram", session_key="k1")
    assert type(found) is dict and found["id"] == "new"
    assert SESSION_KEYS <= set(found)
    assert db.find_latest_gateway_session_for_peer(source="telegram") is None
    assert db.find_latest_gateway_session_for_peer(source="telegram",
                                                   session_key="nobody") is None


def test_find_session_by_origin(db):
    _keyed(db, "a", "ka", chat_id="g1", user_id="u1")
    _keyed(db, "b", "kb", chat_id="g1", user_id="u2")
    db.store.create_session("unkeyed", "telegram", chat_id="g2", user_id="u1")
    assert db.find_session_by_origin(platform="telegram", chat_id="g1", user_id="u1") == "a"
    assert db.find_session_by_origin(platform="TELEGRAM", chat_id="g1", user_id="u2") == "b"
    # Several users share the chat and none is named: no guess.
    assert db.find_session_by_origin(platform="telegram", chat_id="g1") is None
    assert db.find_session_by_origin(platform="telegram", chat_id="zz") is None
    assert db.find_session_by_origin(platform="telegram", chat_id="g2") is None
    db.store.end_session("b", "user_exit")
    assert db.find_session_by_origin(platform="telegram", chat_id="g1") == "a"


def test_list_gateway_sessions_newest_per_key(db):
    _keyed(db, "k1-old", "k1")
    _age(db, "k1-old", DAY)
    _keyed(db, "k1-new", "k1")
    _keyed(db, "k2", "k2", source="discord")
    db.store.create_session("cli", "cli")
    rows = db.list_gateway_sessions()
    assert all(type(r) is dict and "last_active" in r for r in rows)
    assert sorted(r["id"] for r in rows) == ["k1-new", "k2"]
    assert [r["id"] for r in db.list_gateway_sessions(platform="discord")] == ["k2"]
    db.store.end_session("k2", "user_exit")
    assert [r["id"] for r in db.list_gateway_sessions()] == ["k1-new"]
    assert "k2" in [r["id"] for r in db.list_gateway_sessions(active_only=False)]


# -- never-active rows and orphan repair ------------------------------------------------------

def test_list_never_active_keyed_sessions(db):
    _keyed(db, "idle", "k1", chat_id="c1", chat_type="dm", user_id="u1")
    _age(db, "idle", 3 * DAY)
    _keyed(db, "young", "k2")
    _keyed(db, "used", "k3")
    db.store.append_message("used", "user", "x")
    _age(db, "used", 3 * DAY)
    rows = db.list_never_active_keyed_sessions(older_than_days=1)
    assert [r["id"] for r in rows] == ["idle"]
    assert set(rows[0]) == {"id", "session_key", "source", "chat_id", "chat_type", "user_id",
                            "started_at"}
    assert (rows[0]["session_key"], rows[0]["chat_id"]) == ("k1", "c1")


def test_prune_never_active_keyed_sessions_returns_a_pair(db):
    _keyed(db, "idle", "k1")
    _age(db, "idle", 3 * DAY)
    db.save_gateway_routing_entry("k1", json.dumps({"session_id": "idle"}))
    db.save_gateway_routing_entry("k9", json.dumps({"session_id": "other"}))
    result = db.prune_never_active_keyed_sessions(older_than_days=1)
    assert type(result) is tuple and result == (1, 1)
    assert db.store.get_session("idle") is None
    assert db.load_gateway_routing_entries() == {"k9": json.dumps({"session_id": "other"})}
    assert db.prune_never_active_keyed_sessions(older_than_days=1) == (0, 0)


def test_find_orphaned_gateway_sessions_by_lineage(db):
    _keyed(db, "donor", "k1", chat_id="c1")
    db.store.create_session("orphan", "telegram", parent_session_id="donor")
    db.store.append_message("orphan", "user", "lost")
    records = db.find_orphaned_gateway_sessions()
    assert len(records) == 1 and type(records[0]) is dict
    rec = records[0]
    assert set(rec) == {"orphan_id", "source", "message_count", "started_at", "last_active",
                        "donor_id", "session_key", "evidence", "adoptable", "reason"}
    assert (rec["orphan_id"], rec["donor_id"], rec["session_key"]) == ("orphan", "donor", "k1")
    assert rec["evidence"] == "lineage" and rec["adoptable"] is True


def test_adopt_orphaned_gateway_session(db):
    _keyed(db, "donor", "k1", chat_id="c1", user_id="u1")
    db.store.create_session("orphan", "telegram")
    db.store.append_message("orphan", "user", "lost")
    assert db.adopt_orphaned_gateway_session("orphan", "orphan") is False
    assert db.adopt_orphaned_gateway_session("orphan", "donor") is True
    orphan, donor = db.store.get_session("orphan"), db.store.get_session("donor")
    assert (orphan.session_key, orphan.chat_id, orphan.user_id) == ("k1", "c1", "u1")
    assert donor.end_reason == "superseded_by_repair" and donor.ended_at is not None
    db.store.create_session("unkeyed-donor", "telegram")
    assert db.adopt_orphaned_gateway_session("orphan", "unkeyed-donor") is False


def test_adopt_orphaned_gateway_session_twice_is_false(db):
    _keyed(db, "donor", "k1")
    db.store.create_session("orphan", "telegram")
    assert db.adopt_orphaned_gateway_session("orphan", "donor") is True
    assert db.adopt_orphaned_gateway_session("orphan", "donor") is False


# -- handoffs ---------------------------------------------------------------------------------

def test_request_handoff_then_in_flight_elsewhere_is_refused(db):
    db.store.create_session("s1", "cli")
    assert db.request_handoff("s1", "telegram") is True
    assert db.request_handoff("s1", "discord") is False
    assert db.request_handoff("missing", "telegram") is False


def test_request_handoff_repeated_same_platform_is_false(db):
    db.store.create_session("s1", "cli")
    assert db.request_handoff("s1", "telegram") is True
    assert db.request_handoff("s1", "telegram") is False


@pytest.mark.parametrize("blank", ["", "   ", None])
def test_request_handoff_refuses_a_blank_platform(db, blank):
    """Kept difference (CHANGELOG "Changed (against the upstream plugin)"): upstream wrote
    whatever platform it was given and set the row ``pending`` (True), so a blank one left a
    handoff pending for no platform; ours raises ``ValueError`` naming the value and writes
    nothing.
    A platform is stored stripped."""
    db.store.create_session("s1", "cli")
    with pytest.raises(ValueError, match="platform") as info:
        db.request_handoff("s1", blank)
    assert repr(blank) in str(info.value)
    assert db.get_handoff_state("s1") == {"state": None, "platform": None, "error": None}
    assert db.request_handoff("s1", " telegram ") is True
    assert db.get_handoff_state("s1")["platform"] == "telegram"


def test_get_handoff_state_has_upstreams_three_keys(db):
    db.store.create_session("s1", "cli")
    assert db.get_handoff_state("s1") == {"state": None, "platform": None, "error": None}
    db.request_handoff("s1", "telegram")
    assert db.get_handoff_state("s1") == {"state": "pending", "platform": "telegram",
                                          "error": None}
    assert db.get_handoff_state("missing") is None


def test_list_pending_handoffs_oldest_first(db):
    for sid in ("a", "b", "c"):
        db.store.create_session(sid, "cli")
    db.request_handoff("b", "telegram")
    db.request_handoff("a", "telegram")
    rows = db.list_pending_handoffs()
    assert all(type(r) is dict for r in rows)
    assert {r["id"] for r in rows} == {"a", "b"}
    assert all(r["handoff_state"] == "pending" for r in rows)


def test_claim_handoff_only_from_pending(db):
    db.store.create_session("s1", "cli")
    assert db.claim_handoff("s1") is False
    db.request_handoff("s1", "telegram")
    assert db.claim_handoff("s1") is True
    assert db.get_handoff_state("s1")["state"] == "running"


def test_claim_handoff_twice_is_false(db):
    db.store.create_session("s1", "cli")
    db.request_handoff("s1", "telegram")
    assert db.claim_handoff("s1") is True
    assert db.claim_handoff("s1") is False


def test_complete_handoff(db):
    db.store.create_session("s1", "cli")
    db.request_handoff("s1", "telegram")
    db.claim_handoff("s1")
    assert db.complete_handoff("s1") is None
    assert db.get_handoff_state("s1") == {"state": "completed", "platform": "telegram",
                                          "error": None}


def test_fail_handoff_compare_and_swap(db):
    db.store.create_session("s1", "cli")
    db.request_handoff("s1", "telegram")
    db.claim_handoff("s1")
    assert db.fail_handoff("s1", "gave up", only_states=("pending",)) is False
    assert db.get_handoff_state("s1")["state"] == "running"
    assert db.fail_handoff("s1", "x" * 600) is True
    state = db.get_handoff_state("s1")
    assert state["state"] == "failed" and state["error"] == "x" * 500


def test_reclaim_stale_running_handoffs_fails_unowned_running_rows(db):
    db.store.create_session("s1", "cli")
    db.store.create_session("s2", "cli")
    db.request_handoff("s1", "telegram")
    _sql(db, "UPDATE sessions SET handoff_state = 'running' WHERE id = 's1'")
    assert db.reclaim_stale_running_handoffs("gateway restarted") == ["s1"]
    assert db.get_handoff_state("s1") == {"state": "failed", "platform": "telegram",
                                          "error": "gateway restarted"}
    assert db.reclaim_stale_running_handoffs("again") == []


def test_reclaim_stale_running_handoffs_fails_a_live_claim(db):
    db.store.create_session("s1", "cli")
    db.request_handoff("s1", "telegram")
    assert db.store.claim_handoff("s1", claimant="another-gateway")
    assert db.reclaim_stale_running_handoffs("restart") == ["s1"]


# -- heartbeats -------------------------------------------------------------------------------

HB_KEYS = {"backend_id", "pid", "started_at", "last_heartbeat", "profile", "host"}


def test_register_backend_heartbeat_upserts(db):
    now = time.time()
    assert db.register_backend_heartbeat(backend_id="b1", pid=11, started_at=now - 5,
                                         profile="p", host="h") is None
    db.register_backend_heartbeat(backend_id="b1", pid=12, started_at=now, profile="p",
                                  host="h")
    rows = db.list_backend_heartbeats()
    assert len(rows) == 1 and set(rows[0]) == HB_KEYS
    assert (rows[0]["backend_id"], rows[0]["pid"], rows[0]["host"]) == ("b1", 12, "h")


def test_clear_backend_heartbeat(db):
    db.register_backend_heartbeat(backend_id="b1", pid=1, started_at=time.time())
    assert db.clear_backend_heartbeat("b1") is True
    assert db.clear_backend_heartbeat("b1") is False
    assert db.list_backend_heartbeats() == []


def test_prune_stale_heartbeats(db):
    now = time.time()
    db.register_backend_heartbeat(backend_id="stale", pid=1, started_at=now - 5000,
                                  last_heartbeat=now - 1000)
    db.register_backend_heartbeat(backend_id="fresh", pid=2, started_at=now - 5000)
    assert db.prune_stale_heartbeats(max_age_seconds=0) == []
    assert db.prune_stale_heartbeats(max_age_seconds=100) == ["stale"]
    assert [r["backend_id"] for r in db.list_backend_heartbeats()] == ["fresh"]


def test_list_backend_heartbeats_newest_first(db):
    now = time.time()
    db.register_backend_heartbeat(backend_id="older", pid=1, started_at=now - 100,
                                  last_heartbeat=now - 50)
    db.register_backend_heartbeat(backend_id="newer", pid=2, started_at=now - 100,
                                  last_heartbeat=now - 10)
    rows = db.list_backend_heartbeats()
    assert [r["backend_id"] for r in rows] == ["newer", "older"]
    assert all(type(r) is dict and set(r) == HB_KEYS for r in rows)


# -- kanban -----------------------------------------------------------------------------------

def test_retag_kanban_worker_sessions_once_per_root(db):
    db.store.create_session("w1", "cli", cwd="/boards/ws/task-1")
    db.store.create_session("w2", "cli", cwd="/boards/ws")
    db.store.create_session("user", "cli", cwd="/home/me")
    assert db.retag_kanban_worker_sessions("/boards/ws/") == 2
    assert [db.store.get_session(s).source for s in ("w1", "w2", "user")] == [
        "kanban", "kanban", "cli"]
    db.store.create_session("w3", "cli", cwd="/boards/ws/task-3")
    assert db.retag_kanban_worker_sessions("/boards/ws") == 0  # gated per root
    assert db.store.get_session("w3").source == "cli"


# -- Telegram DM topics -----------------------------------------------------------------------

BINDING_KEYS = {"profile_name", "chat_id", "thread_id", "user_id", "session_key", "session_id",
                "managed_mode", "linked_at", "updated_at"}


def _bind(db, sid: str, thread: str, chat: str = "c1", user: str = "u1") -> None:
    if db.store.get_session(sid) is None:
        db.store.create_session(sid, "telegram", user_id=user)
    db.bind_telegram_topic(chat_id=chat, thread_id=thread, user_id=user,
                           session_key=f"key-{sid}", session_id=sid)


def test_reads_before_the_topic_migration_answer_nothing(db):
    assert db.is_telegram_topic_mode_enabled(chat_id="c1", user_id="u1") is False
    assert db.get_telegram_topic_binding(chat_id="c1", thread_id="7") is None
    assert db.get_telegram_topic_binding_by_session(session_id="s1") is None
    assert db.is_telegram_session_linked_to_topic(session_id="s1") is False
    assert db.list_telegram_topic_bindings_for_chat(chat_id="c1") == []


def test_apply_telegram_topic_migration_is_idempotent(db):
    assert db.apply_telegram_topic_migration() is None
    assert db.apply_telegram_topic_migration() is None
    assert db.list_telegram_topic_bindings_for_chat(chat_id="c1") == []
    if db.store.backend.dialect == "sqlite":  # PostgreSQL's tables come with its schema
        assert db.store.get_meta("telegram_dm_topic_schema_version") == "3"


def test_enable_telegram_topic_mode(db):
    assert db.enable_telegram_topic_mode(chat_id="c1", user_id="u1",
                                         has_topics_enabled=True) is None
    assert db.is_telegram_topic_mode_enabled(chat_id="c1", user_id="u1") is True
    assert db.is_telegram_topic_mode_enabled(chat_id="c1", user_id="u2") is False
    assert db.is_telegram_topic_mode_enabled(chat_id="c1", user_id="u1",
                                             profile_name="work") is False


def test_disable_telegram_topic_mode_clears_bindings_by_default(db):
    db.enable_telegram_topic_mode(chat_id="c1", user_id="u1")
    _bind(db, "s1", "7")
    assert db.disable_telegram_topic_mode(chat_id="c1", clear_bindings=False) is None
    assert db.is_telegram_topic_mode_enabled(chat_id="c1", user_id="u1") is False
    assert db.get_telegram_topic_binding(chat_id="c1", thread_id="7") is not None
    db.enable_telegram_topic_mode(chat_id="c1", user_id="u1")
    db.disable_telegram_topic_mode(chat_id="c1")
    assert db.get_telegram_topic_binding(chat_id="c1", thread_id="7") is None


def test_is_telegram_topic_mode_enabled_per_profile(db):
    db.enable_telegram_topic_mode(chat_id="c1", user_id="u1", profile_name="work")
    assert db.is_telegram_topic_mode_enabled(chat_id="c1", user_id="u1",
                                             profile_name="work") is True
    assert db.is_telegram_topic_mode_enabled(chat_id="c1", user_id="u1") is False


def test_bind_telegram_topic_one_topic_per_session(db):
    _bind(db, "s1", "7")
    _bind(db, "s1", "7")  # the same binding again: idempotent
    with pytest.raises(ValueError):
        _bind(db, "s1", "8")
    assert db.get_telegram_topic_binding(chat_id="c1", thread_id="8") is None


def test_delete_telegram_topic_binding_turns_mode_off_with_the_last(db):
    assert db.delete_telegram_topic_binding(chat_id="c1", thread_id="7") == 0
    db.enable_telegram_topic_mode(chat_id="c1", user_id="u1")
    _bind(db, "s1", "7")
    _bind(db, "s2", "8")
    assert db.delete_telegram_topic_binding(chat_id="c1", thread_id="7") == 1
    assert db.is_telegram_topic_mode_enabled(chat_id="c1", user_id="u1") is True
    assert db.delete_telegram_topic_binding(chat_id="c1", thread_id="8") == 1
    assert db.is_telegram_topic_mode_enabled(chat_id="c1", user_id="u1") is False
    assert db.delete_telegram_topic_binding(chat_id="c1", thread_id="8") == 0


def test_get_telegram_topic_binding(db):
    _bind(db, "s1", 7)
    got = db.get_telegram_topic_binding(chat_id="c1", thread_id=7)
    assert type(got) is dict and set(got) == BINDING_KEYS
    assert (got["session_id"], got["thread_id"], got["managed_mode"], got["profile_name"]) == (
        "s1", "7", "auto", "default")
    assert db.get_telegram_topic_binding(chat_id="c1", thread_id="9") is None


def test_get_telegram_topic_binding_by_session(db):
    _bind(db, "s1", "7")
    got = db.get_telegram_topic_binding_by_session(session_id="s1")
    assert type(got) is dict and (got["chat_id"], got["thread_id"]) == ("c1", "7")
    assert db.get_telegram_topic_binding_by_session(session_id="s2") is None


def test_is_telegram_session_linked_to_topic(db):
    _bind(db, "s1", "7")
    db.store.create_session("s2", "telegram")
    assert db.is_telegram_session_linked_to_topic(session_id="s1") is True
    assert db.is_telegram_session_linked_to_topic(session_id="s2") is False


def test_list_telegram_topic_bindings_for_chat_newest_first(db):
    _bind(db, "s1", "7")
    _bind(db, "s2", "8")
    _bind(db, "s3", "9", chat="c2")
    _sql(db, "UPDATE telegram_dm_topic_bindings SET updated_at = 1.0 WHERE thread_id = '8'")
    rows = db.list_telegram_topic_bindings_for_chat(chat_id="c1")
    assert [r["thread_id"] for r in rows] == ["7", "8"]
    assert all(type(r) is dict and set(r) == BINDING_KEYS for r in rows)


def test_list_unlinked_telegram_sessions_for_user(db):
    for sid in ("bound", "free"):
        db.store.create_session(sid, "telegram", user_id="u1")
    db.store.create_session("someone", "telegram", user_id="u2")
    db.store.append_message("free", "user", "first words")
    _bind(db, "bound", "7")
    rows = db.list_unlinked_telegram_sessions_for_user(chat_id="c1", user_id="u1")
    assert [r["id"] for r in rows] == ["free"]
    row = rows[0]
    assert type(row) is dict and row["preview"] == "first words"
    assert "last_active" in row and row["source"] == "telegram"
    assert db.list_unlinked_telegram_sessions_for_user(chat_id="c1", user_id="u1",
                                                       limit=0) == []
