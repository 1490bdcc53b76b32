"""The coordination methods of the drop-in ``SessionDB`` (docs/compat.md "Coordination"),
each checked against what upstream's ``SessionDB`` documents it returns, on both backends
(the ``db`` fixture)."""

from __future__ import annotations

import time

import pytest
import sqlalchemy as sa

from hermes_data.sessions.errors import CompressionSessionBusyError

HOUR = 3600.0
DAY = 86400.0


def _sql(db, statement: str, **params) -> list:
    """One ad-hoc statement on the store's engine (named parameters, both dialects)."""
    with db.store.engine.begin() as conn:
        res = conn.execute(sa.text(statement), params)
        return list(res.fetchall()) if res.returns_rows else []


def _age(db, sid: str, seconds: float) -> None:
    """Move ``sid``'s start (and its messages) ``seconds`` into the past."""
    then = time.time() - seconds
    _sql(db, "UPDATE sessions SET started_at = :t WHERE id = :i", t=then, i=sid)
    _sql(db, "UPDATE messages SET timestamp = :t WHERE session_id = :i", t=then, i=sid)


def _chain(db, *ids: str, source: str = "cli") -> None:
    """A compression chain ``ids[0] → … → ids[-1]`` (every segment but the tip ended)."""
    prev = None
    for i, sid in enumerate(ids):
        db.store.create_session(sid, source, parent_session_id=prev)
        if i < len(ids) - 1:
            db.store.end_session(sid, "compression")
        prev = sid


def _session(db, sid: str):
    return db.store.get_session(sid)


# -- compression locks ------------------------------------------------------------------

def test_try_acquire_compression_lock_is_exclusive(db):
    db.store.create_session("s1", "cli")
    assert db.try_acquire_compression_lock("s1", "A") is True
    assert db.try_acquire_compression_lock("s1", "B") is False
    assert db.get_compression_lock_holder("s1") == "A"


def test_refresh_compression_lock_only_for_its_holder(db):
    db.store.create_session("s1", "cli")
    assert db.try_acquire_compression_lock("s1", "A", 60.0)
    assert db.refresh_compression_lock("s1", "A", ttl_seconds=600.0) is True
    assert db.refresh_compression_lock("s1", "B") is False


def test_release_compression_lock_by_a_stranger_is_a_no_op(db):
    db.store.create_session("s1", "cli")
    assert db.try_acquire_compression_lock("s1", "A")
    assert db.release_compression_lock("s1", "B") is None
    assert db.get_compression_lock_holder("s1") == "A"
    assert db.release_compression_lock("s1", "A") is None
    assert db.get_compression_lock_holder("s1") is None
    assert db.try_acquire_compression_lock("s1", "B") is True


def test_get_compression_lock_holder_none_without_lock(db):
    db.store.create_session("s1", "cli")
    assert db.get_compression_lock_holder("s1") is None
    db.try_acquire_compression_lock("s1", "holder-1")
    assert db.get_compression_lock_holder("s1") == "holder-1"


def test_publish_compression_child_with_the_lease(db):
    db.store.create_session("p", "cli")
    db.store.append_message("p", "user", "old turn")
    assert db.try_acquire_compression_lock("p", "L")
    result = db.publish_compression_child(
        parent_session_id="p", child_session_id="c", source="cli",
        messages=[{"role": "user", "content": "summary"}], compression_lock_holder="L")
    assert result is None
    parent, child = _session(db, "p"), _session(db, "c")
    assert parent.end_reason == "compression" and parent.ended_at is not None
    assert child.parent_session_id == "p" and child.ended_at is None
    assert [m.content for m in db.store.get_messages("c")] == ["summary"]


def test_publish_compression_child_requires_the_lease_by_default(db):
    db.store.create_session("p", "cli")
    with pytest.raises(RuntimeError) as err:
        db.publish_compression_child(parent_session_id="p", child_session_id="c",
                                     source="cli", messages=[{"role": "user", "content": "s"}])
    assert isinstance(err.value, CompressionSessionBusyError)
    assert _session(db, "p").ended_at is None and _session(db, "c") is None


# -- turn leases and appends --------------------------------------------------------------

def test_try_acquire_session_turn_lease_is_keyed_by_the_lineage_root(db):
    _chain(db, "root", "tip")
    assert db.try_acquire_session_turn_lease("tip", "A") is True
    assert db.try_acquire_session_turn_lease("root", "B") is False
    assert db.try_acquire_session_turn_lease("tip", "B", ttl_seconds=5.0) is False


def test_acquire_session_turn_lease_waits_then_gives_up(db):
    db.store.create_session("s1", "cli")
    assert db.acquire_session_turn_lease("s1", "A", wait_seconds=0) is True
    notices: list[float] = []
    started = time.monotonic()
    got = db.acquire_session_turn_lease("s1", "B", wait_seconds=0.3,
                                        poll_interval_seconds=0.05, on_wait=notices.append)
    assert got is False
    assert notices and notices[0] >= 0.0
    assert time.monotonic() - started < 5
    assert db.acquire_session_turn_lease("s1", "B", wait_seconds=60,
                                         should_abort=lambda: True) is False


def test_refresh_session_turn_lease_only_for_its_holder(db):
    db.store.create_session("s1", "cli")
    assert db.try_acquire_session_turn_lease("s1", "A")
    assert db.refresh_session_turn_lease("s1", "A", ttl_seconds=30.0) is True
    assert db.refresh_session_turn_lease("s1", "B") is False


def test_release_session_turn_lease_frees_the_conversation(db):
    db.store.create_session("s1", "cli")
    assert db.try_acquire_session_turn_lease("s1", "A")
    assert db.release_session_turn_lease("s1", "A") is None
    assert db.try_acquire_session_turn_lease("s1", "B") is True


def test_append_message_positional_fields_and_counters(db):
    db.store.create_session("s1", "cli")
    first = db.append_message("s1", "user", "hello")
    second = db.append_message("s1", "assistant", "calling", None,
                               [{"id": "t1", "type": "function",
                                 "function": {"name": "ls", "arguments": "{}"}}])
    third = db.append_message("s1", "tool", "out", "ls", None, "t1", 7)
    assert isinstance(first, int) and first < second < third
    rows = db.store.get_messages("s1")
    assert [r.id for r in rows] == [first, second, third]
    assert rows[1].tool_calls[0]["id"] == "t1"
    assert (rows[2].tool_name, rows[2].tool_call_id, rows[2].token_count) == ("ls", "t1", 7)
    s = _session(db, "s1")
    assert s.message_count == 3 and s.tool_call_count >= 1


def test_append_message_keyword_only_upstream_fields(db):
    db.store.create_session("s1", "cli")
    mid = db.append_message("s1", "assistant", "sum", _compressed_summary=True,
                            platform_message_id="tg-9", display_kind="note",
                            display_metadata={"k": 1}, api_content="sent")
    row = db.store.get_messages("s1")[0]
    assert row.id == mid and row.compressed_summary is True
    assert (row.platform_message_id, row.display_kind, row.api_content) == ("tg-9", "note",
                                                                          "sent")
    assert row.display_metadata == {"k": 1}


def test_append_messages_batch_counts_and_upstream_positionals(db):
    db.store.create_session("s1", "cli")
    msgs = [{"role": "user", "content": f"m{i}"} for i in range(5)]
    assert db.append_messages_batch("s1", msgs, None, None, 2) == 5
    assert [r.content for r in db.store.get_messages("s1")] == [f"m{i}" for i in range(5)]
    assert _session(db, "s1").message_count == 5
    assert db.append_messages_batch("s1", []) == 0


# -- rewrites and rewind ----------------------------------------------------------------

def test_replace_messages_rewrites_the_transcript(db):
    db.store.create_session("s1", "cli")
    db.append_message("s1", "user", "a")
    db.append_message("s1", "assistant", "b")
    assert db.replace_messages("s1", [{"role": "user", "content": "only"}]) is None
    assert [r.content for r in db.store.get_messages("s1", include_inactive=True)] == ["only"]
    assert _session(db, "s1").message_count == 1


def test_replace_messages_archive_dropped_keeps_old_rows_inactive(db):
    db.store.create_session("s1", "cli")
    db.append_message("s1", "user", "a")
    db.replace_messages("s1", [{"role": "user", "content": "new"}], archive_dropped=True)
    assert [r.content for r in db.store.get_messages("s1")] == ["new"]
    every = db.store.get_messages("s1", include_inactive=True)
    assert sorted((r.content, r.active) for r in every) == [("a", False), ("new", True)]


def test_clear_messages_returns_none_and_zeroes_counters(db):
    db.store.create_session("s1", "cli")
    db.append_message("s1", "user", "a")
    assert db.clear_messages("s1") is None
    assert db.store.get_messages("s1", include_inactive=True) == []
    assert _session(db, "s1").message_count == 0


def test_archive_and_compact_returns_the_active_count(db):
    db.store.create_session("s1", "cli")
    for text in ("a", "b", "c"):
        db.append_message("s1", "user", text)
    n = db.archive_and_compact("s1", [{"role": "user", "content": "summary"}])
    assert n == 1
    assert [r.content for r in db.store.get_messages("s1")] == ["summary"]
    old = [r for r in db.store.get_messages("s1", include_inactive=True) if not r.active]
    assert len(old) == 3 and all(r.compacted for r in old)


def test_rewind_to_message_returns_upstreams_dict(db):
    db.store.create_session("s1", "cli")
    db.append_message("s1", "user", "q1")
    a1 = db.append_message("s1", "assistant", "a1")
    q2 = db.append_message("s1", "user", "q2")
    db.append_message("s1", "assistant", "a2")
    result = db.rewind_to_message("s1", q2)
    assert type(result) is dict
    assert set(result) == {"rewound_count", "target_message", "new_head_id"}
    assert result["rewound_count"] == 2 and result["new_head_id"] == a1
    target = result["target_message"]
    assert type(target) is dict
    assert (target["id"], target["role"], target["content"]) == (q2, "user", "q2")
    assert [r.content for r in db.store.get_messages("s1")] == ["q1", "a1"]


def test_rewind_to_message_refuses_a_non_user_or_foreign_target(db):
    db.store.create_session("s1", "cli")
    db.append_message("s1", "user", "q1")
    a1 = db.append_message("s1", "assistant", "a1")
    with pytest.raises(ValueError):
        db.rewind_to_message("s1", a1)
    with pytest.raises(ValueError):
        db.rewind_to_message("s1", a1 + 1000)


def test_restore_rewound_counts_reactivated_rows(db):
    db.store.create_session("s1", "cli")
    db.append_message("s1", "user", "q1")
    q2 = db.append_message("s1", "user", "q2")
    db.append_message("s1", "assistant", "a2")
    db.rewind_to_message("s1", q2)
    assert db.restore_rewound("s1", q2) == 2
    assert [r.content for r in db.store.get_messages("s1")] == ["q1", "q2", "a2"]


# -- lineage recovery -------------------------------------------------------------------

def test_find_live_compression_child_returns_a_session_dict(db):
    _chain(db, "p", "c")
    child = db.find_live_compression_child("p")
    assert type(child) is dict
    assert child["id"] == "c" and child["parent_session_id"] == "p"
    assert db.find_live_compression_child("c") is None  # not compression-ended
    assert db.find_live_compression_child("nope") is None


def test_reopen_orphaned_compression_session(db):
    db.store.create_session("lonely", "cli")
    db.store.end_session("lonely", "compression")
    assert db.reopen_orphaned_compression_session("lonely") is True
    s = _session(db, "lonely")
    assert (s.ended_at, s.end_reason) == (None, None)
    _chain(db, "p", "c")
    assert db.reopen_orphaned_compression_session("p") is False
    assert db.reopen_orphaned_compression_session("c") is False  # not ended


def test_finalize_orphaned_compression_sessions(db):
    _chain(db, "p", "c")
    db.store.append_message("c", "user", "stranded")
    _age(db, "c", 8 * DAY)
    _chain(db, "p2", "fresh")
    db.store.append_message("fresh", "user", "recent")
    assert db.finalize_orphaned_compression_sessions() == 1
    assert _session(db, "c").end_reason == "orphaned_compression"
    assert _session(db, "fresh").ended_at is None


# -- cooldowns, streaks, deadline -------------------------------------------------------

def test_record_and_get_compression_failure_cooldown(db):
    db.store.create_session("s1", "cli")
    until = time.time() + 600
    assert db.record_compression_failure_cooldown("s1", until, "boom") is None
    got = db.get_compression_failure_cooldown("s1")
    assert type(got) is dict and set(got) == {"cooldown_until", "remaining_seconds", "error"}
    assert got["cooldown_until"] == pytest.approx(until)
    assert 0 < got["remaining_seconds"] <= 600 and got["error"] == "boom"


def test_get_compression_failure_cooldown_none_when_expired_or_unknown(db):
    db.store.create_session("s1", "cli")
    db.record_compression_failure_cooldown("s1", time.time() - 5, "old")
    assert db.get_compression_failure_cooldown("s1") is None
    assert db.get_compression_failure_cooldown("nope") is None


def test_get_compression_failure_cooldown_row_is_unfiltered(db):
    assert db.get_compression_failure_cooldown_row("nope") == {
        "session_exists": False, "cooldown_until": None, "error": None}
    db.store.create_session("s1", "cli")
    past = time.time() - 5
    db.record_compression_failure_cooldown("s1", past, "old")
    row = db.get_compression_failure_cooldown_row("s1")
    assert type(row) is dict and row["session_exists"] is True
    assert row["cooldown_until"] == pytest.approx(past) and row["error"] == "old"


def test_restore_compression_failure_cooldown_row_round_trip(db):
    db.store.create_session("s1", "cli")
    db.record_compression_failure_cooldown("s1", time.time() + 100, "first")
    snapshot = db.get_compression_failure_cooldown_row("s1")
    db.record_compression_failure_cooldown("s1", time.time() + 900, "second")
    assert db.restore_compression_failure_cooldown_row("s1", snapshot) is None
    assert db.get_compression_failure_cooldown_row("s1") == snapshot


def test_restore_absent_snapshot_onto_an_existing_session_raises(db):
    snapshot = db.get_compression_failure_cooldown_row("s1")
    assert snapshot["session_exists"] is False
    db.store.create_session("s1", "cli")
    with pytest.raises(RuntimeError):
        db.restore_compression_failure_cooldown_row("s1", snapshot)


def test_restore_onto_a_vanished_session_raises(db):
    db.store.create_session("s1", "cli")
    snapshot = db.get_compression_failure_cooldown_row("s1")
    _sql(db, "DELETE FROM sessions WHERE id = 's1'")
    with pytest.raises(RuntimeError):
        db.restore_compression_failure_cooldown_row("s1", snapshot)


def test_clear_compression_failure_cooldown(db):
    db.store.create_session("s1", "cli")
    db.record_compression_failure_cooldown("s1", time.time() + 600, "boom")
    assert db.clear_compression_failure_cooldown("s1") is None
    assert db.get_compression_failure_cooldown("s1") is None
    assert db.get_compression_failure_cooldown_row("s1")["cooldown_until"] is None


def test_compression_fallback_streak_round_trip(db):
    db.store.create_session("s1", "cli")
    assert db.get_compression_fallback_streak("s1") == 0
    assert db.set_compression_fallback_streak("s1", streak=3) is None
    assert db.get_compression_fallback_streak("s1") == 3
    db.set_compression_fallback_streak("s1", -4)
    assert db.get_compression_fallback_streak("s1") == 0
    assert db.get_compression_fallback_streak("nope") == 0


def test_compression_ineffective_count_round_trip(db):
    db.store.create_session("s1", "cli")
    assert db.get_compression_ineffective_count("s1") == 0
    assert db.set_compression_ineffective_count("s1", count=2) is None
    assert db.get_compression_ineffective_count("s1") == 2
    assert db.get_compression_ineffective_count("nope") == 0


def test_compression_recovery_deadline_round_trip(db):
    db.store.create_session("s1", "cli")
    assert db.get_compression_recovery_deadline("s1") == 0.0
    deadline = time.time() + 300
    assert db.set_compression_recovery_deadline("s1", deadline) is None
    assert db.get_compression_recovery_deadline("s1") == pytest.approx(deadline)
    db.set_compression_recovery_deadline("s1", 0)
    got = db.get_compression_recovery_deadline("s1")
    assert got == 0.0 and isinstance(got, float)


# -- sweeps and archive -----------------------------------------------------------------

def test_sweep_orphaned_sessions_closes_idle_owned_sources(db):
    for sid, source in (("idle", "tui"), ("keep", "tui"), ("tg", "telegram")):
        db.store.create_session(sid, source)
        _age(db, sid, 2 * HOUR)
    closed = db.sweep_orphaned_sessions(max_idle_seconds=HOUR, exclude_ids=("keep",))
    assert closed == ["idle"]
    assert _session(db, "idle").end_reason == "startup_orphan_reap"
    assert _session(db, "keep").ended_at is None and _session(db, "tg").ended_at is None
    assert db.sweep_orphaned_sessions(max_idle_seconds=0) == []


def test_unarchive_recoverable_session(db):
    db.store.create_session("acc", "cli")
    db.store.end_session("acc", "ws_orphan_reap")
    db.store.set_session_archived("acc", True)
    assert db.unarchive_recoverable_session("acc") is True
    s = _session(db, "acc")
    assert not s.archived and (s.ended_at, s.end_reason) == (None, None)
    db.store.create_session("meant", "cli")
    db.store.set_session_archived("meant", True)
    assert db.unarchive_recoverable_session("meant") is False
    assert _session(db, "meant").archived
    assert db.unarchive_recoverable_session("nope") is False


def test_archive_stale_sessions_by_last_activity(db):
    for sid in ("stale", "pinned", "recent"):
        db.store.create_session(sid, "cli")
    for sid in ("stale", "pinned"):
        _age(db, sid, 5 * DAY)
    db.store.set_session_pinned("pinned", True)
    assert db.archive_stale_sessions(3) == 1
    assert _session(db, "stale").archived and not _session(db, "recent").archived
    assert not _session(db, "pinned").archived
    assert db.archive_stale_sessions(3, exclude_pinned=False) == 1
    assert _session(db, "pinned").archived


def test_maybe_auto_archive_reports_a_plain_dict(db):
    db.store.create_session("stale", "cli")
    _age(db, "stale", 5 * DAY)
    first = db.maybe_auto_archive()
    assert first == {"skipped": False, "archived": 1}
    assert db.maybe_auto_archive() == {"skipped": True, "archived": 0}
    assert db.maybe_auto_archive(min_interval_hours=0)["skipped"] is False


# -- empty and ghost sessions -----------------------------------------------------------

def _empty_ended(db, sid: str, source: str = "cli") -> None:
    db.store.create_session(sid, source)
    db.store.end_session(sid, "user_exit")


def test_count_empty_sessions(db):
    _empty_ended(db, "e1")
    _empty_ended(db, "e2")
    db.store.set_session_archived("e2", True)
    db.store.create_session("open", "cli")
    _empty_ended(db, "full")
    db.store.append_message("full", "user", "x")
    assert db.count_empty_sessions() == 1


def test_delete_empty_sessions(db):
    _empty_ended(db, "e1")
    db.store.create_session("open", "cli")
    _empty_ended(db, "full")
    db.store.append_message("full", "user", "x")
    _empty_ended(db, "parent")
    db.store.create_session("child", "cli", parent_session_id="parent")
    db.store.append_message("child", "user", "x")
    assert db.delete_empty_sessions() == 2
    assert _session(db, "e1") is None and _session(db, "parent") is None
    assert _session(db, "child").parent_session_id is None  # orphaned, never cascaded
    assert _session(db, "open") is not None and _session(db, "full") is not None
    assert db.count_empty_sessions() == 0


def test_delete_empty_sessions_includes_pinned(db):
    _empty_ended(db, "pinned")
    db.store.set_session_pinned("pinned", True)
    assert db.delete_empty_sessions() == 1


def test_delete_session_if_empty(db):
    db.store.create_session("empty", "cli")
    assert db.delete_session_if_empty("empty") is True
    assert _session(db, "empty") is None
    db.store.create_session("titled", "cli")
    db.store.set_session_title("titled", "Kept")
    db.store.create_session("talked", "cli")
    db.store.append_message("talked", "user", "x")
    db.store.create_session("parent", "cli")
    db.store.create_session("kid", "cli", parent_session_id="parent")
    assert [db.delete_session_if_empty(s) for s in ("titled", "talked", "parent")] == [
        False, False, False]


def test_prune_empty_ghost_sessions(db, tmp_path):
    _empty_ended(db, "ghost", "tui")
    _age(db, "ghost", 2 * DAY)
    _empty_ended(db, "young", "tui")
    _empty_ended(db, "cli-old", "cli")
    _age(db, "cli-old", 2 * DAY)
    assert db.prune_empty_ghost_sessions(tmp_path) == 1
    assert _session(db, "ghost") is None
    assert _session(db, "young") is not None and _session(db, "cli-old") is not None


def test_empty_ids_answer_upstreams_neutral_values(db):
    assert db.get_compression_fallback_streak("") == 0
    assert db.get_compression_ineffective_count("") == 0
    assert db.get_compression_recovery_deadline("") == 0.0
    assert db.get_compression_failure_cooldown("") is None
    assert db.get_compression_failure_cooldown_row("") == {
        "session_exists": False, "cooldown_until": None, "error": None}
    assert db.try_acquire_compression_lock("", "h") is False
    assert db.refresh_compression_lock("s", "") is False
    assert db.get_compression_lock_holder("") is None
    assert db.try_acquire_session_turn_lease("", "h") is False
    assert db.find_live_compression_child("") is None
    assert db.reopen_orphaned_compression_session("") is False
    assert db.unarchive_recoverable_session("") is False


def test_archive_stale_sessions_non_positive_archives_nothing(db):
    db.store.create_session("stale", "cli")
    _age(db, "stale", 5 * DAY)
    assert db.archive_stale_sessions(0) == 0
    assert db.archive_stale_sessions(-1) == 0
    assert not _session(db, "stale").archived


def test_clear_messages_on_a_compression_parent(db):
    _chain(db, "p", "c")
    db.store.append_message("c", "user", "x")
    _sql(db, "INSERT INTO messages (session_id, role, content, timestamp) "
         "VALUES ('p', 'user', 'old', 1.0)")
    db.clear_messages("p")
    assert db.store.get_messages("p", include_inactive=True) == []
