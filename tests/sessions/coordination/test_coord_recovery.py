"""Lineage recovery, cooldowns and streaks (spec sessions-ext-coordination.md §3.11–§3.13,
A8; acceptance C10–C16)."""

from __future__ import annotations

import json
import logging
import math
import sqlite3
import time

import pytest

from hermes_data.sessions.coordination import cooldowns
from hermes_data.sessions.coordination.cooldowns import CooldownRow
from hermes_data.sessions.errors import CooldownRestoreError
from hermes_data.sessions.store import SessionStore

from tests.sessions.coordination.coord_support import chain, guard_row, put_guard, server_now, sql

DAY = 86400.0


@pytest.mark.sqlite_only("the shared legacy state.db is a SQLite file")
def test_c10_fixture_live_child(legacy_copy):
    """C10 (fixture half): ``find_live_compression_child(…cmp003)`` ⇒ ``…cmp004``."""
    with SessionStore(legacy_copy) as store:
        child = store.find_live_compression_child("20260806_030000_cmp003")
        assert child is not None and child.id == "20260806_040000_cmp004"


def test_c10_live_child_candidates(store):
    """C10: two open continuations ⇒ None; branch, reset and tool children ignored; a
    continuation with an inherited foreign ``_delegate_from`` counts."""
    chain(store, "p", "c1")
    store.create_child_session("p", "b", "branch")
    store.create_child_session("p", "r", "reset")
    store.create_session("t", "tool", parent_session_id="p")
    assert store.find_live_compression_child("p").id == "c1"
    store.create_session("c2", "cli", parent_session_id="p")
    assert store.find_live_compression_child("p") is None
    store.end_session("c2", "user_exit")
    store.end_session("c1", "user_exit")
    store.create_session("c3", "cli", parent_session_id="p",
                         model_config={"_delegate_from": "someone-else"})
    assert store.find_live_compression_child("p").id == "c3"
    assert store.find_live_compression_child("c3") is None  # not compression-ended
    assert store.find_live_compression_child("missing") is None


def test_c11_reopen_orphaned_parent(store):
    """C11: childless, no lock ⇒ True; a closed continuation child ⇒ False; a live lock ⇒
    False; an expired lock ⇒ True, row gone, the old owner's refresh then False."""
    for sid in ("a", "b", "c", "d"):
        store.create_session(sid, "cli")
        store.end_session(sid, "compression")
    assert store.reopen_orphaned_compression_session("a")
    assert store.get_session("a").ended_at is None
    assert not store.reopen_orphaned_compression_session("a")  # no longer compression-ended
    store.create_session("b1", "cli", parent_session_id="b")
    store.end_session("b1", "user_exit")
    assert not store.reopen_orphaned_compression_session("b")
    assert store.try_acquire_compression_lock("c", "owner")
    assert not store.reopen_orphaned_compression_session("c")
    assert store.get_session("c").end_reason == "compression"
    put_guard(store, "compression_locks", "d", "owner", server_now(store) - 1)
    assert store.reopen_orphaned_compression_session("d")
    assert guard_row(store, "compression_locks", "d") is None
    assert not store.refresh_compression_lock("d", "owner")


def test_c12_finalize_unused_continuations(store):
    """C12: finalize closes an open continuation idle 8 days without API calls; spares one
    with a 1-day-old message, a pinned one, a branch child and one under a live lease on its
    root."""
    now = time.time()
    old = now - 8 * DAY
    for kid in ("idle", "recent", "pinned", "leased"):
        chain(store, f"{kid}-p", kid)
    store.create_child_session("idle-p", "branch", "branch")
    for kid in ("idle", "recent", "pinned", "leased", "branch"):
        store.append_message(kid, "user", "hi")
        sql(store, "UPDATE sessions SET started_at = ? WHERE id = ?", (old, kid))
        sql(store, "UPDATE messages SET timestamp = ? WHERE session_id = ?", (old, kid))
    sql(store, "UPDATE messages SET timestamp = ? WHERE session_id = 'recent'", (now - DAY,))
    store.set_session_pinned("pinned", True)
    assert store.try_acquire_session_turn_lease("leased", "turn")
    assert guard_row(store, "session_turn_leases", "leased-p")[0] == "turn"
    assert store.finalize_orphaned_compression_sessions() == 1
    got = {sid: store.get_session(sid).end_reason
           for sid in ("idle", "recent", "pinned", "leased", "branch")}
    assert got == {"idle": "orphaned_compression", "recent": None, "pinned": None,
                   "leased": None, "branch": None}
    assert store.finalize_orphaned_compression_sessions() == 0


def test_c13_reopen_refuses_a_parent_with_a_continuation(store):
    """C13: ``reopen_session`` on a compression parent with a continuation child ⇒ False,
    unchanged (a childless one still reopens)."""
    chain(store, "p", "c")
    before = store.get_session("p")
    assert not store.reopen_session("p")
    assert store.get_session("p") == before
    store.create_session("q", "cli")
    store.end_session("q", "compression")
    assert store.reopen_session("q")


def test_reopen_with_allow_continued_parent_is_upstreams_reopen(store):
    """Issue 33: ``allow_continued_parent=True`` reopens a compression parent with a
    continuation, as upstream's ``reopen_session`` did (the default keeps A8's refusal);
    legacy reset children are stamped first either way."""
    chain(store, "p", "c")
    store.create_session("legacy", "telegram", session_key="k")
    store.end_session("legacy", "session_reset")
    store.create_session("kid", "telegram", session_key="k", parent_session_id="legacy")
    assert store.reopen_session("p", allow_continued_parent=True)
    row = store.get_session("p")
    assert (row.ended_at, row.end_reason) == (None, None)
    assert store.reopen_session("legacy", allow_continued_parent=True)
    assert json.loads(store.get_session("kid").model_config)["_reset_from"] == "legacy"
    assert not store.reopen_session("missing", allow_continued_parent=True)


def test_c14_cooldown_merge_max(store):
    """C14: ``record(t+100,"a")``, ``record(t+50,"b")`` ⇒ until ``t+100``, error ``b``;
    ``record(nan)`` ⇒ ValueError, no write; the getter is None once ``wall() ≥ until``."""
    store.create_session("s", "cli")
    t = 1_000_000.0
    store.wall = lambda: t
    store.record_compression_failure_cooldown("s", t + 100, "a")
    store.record_compression_failure_cooldown("s", t + 50, "b")
    assert store.get_compression_failure_cooldown_row("s") == CooldownRow(True, t + 100, "b")
    with pytest.raises(ValueError):
        store.record_compression_failure_cooldown("s", math.nan, "c")
    with pytest.raises(ValueError):
        store.record_compression_failure_cooldown("s", True)
    state = store.get_compression_failure_cooldown("s")
    assert (state.cooldown_until, state.remaining_seconds, state.error) == (t + 100, 100, "b")
    store.wall = lambda: t + 100
    assert store.get_compression_failure_cooldown("s") is None
    assert store.get_compression_failure_cooldown_row("nope") == CooldownRow(False, None, None)


def test_c15_cooldown_restore(store, monkeypatch, caplog):
    """C15: an absent snapshot is a no-op while absent, CooldownRestoreError once the row
    exists; an expired snapshot is restored exactly; a row deleted before verify ⇒ WARNING;
    a concurrent overwrite before verify ⇒ error."""
    absent = store.get_compression_failure_cooldown_row("s")
    store.restore_compression_failure_cooldown_row("s", absent)
    store.create_session("s", "cli")
    with pytest.raises(CooldownRestoreError):
        store.restore_compression_failure_cooldown_row("s", absent)
    store.record_compression_failure_cooldown("s", 50.0, "old")
    snap = store.get_compression_failure_cooldown_row("s")
    store.record_compression_failure_cooldown("s", time.time() + 999, "new")
    store.restore_compression_failure_cooldown_row(
        "s", {"session_exists": True, "cooldown_until": 50.0, "error": "old"})
    assert store.get_compression_failure_cooldown_row("s") == snap
    monkeypatch.setattr(cooldowns, "_before_verify",
                        lambda: sql(store, "UPDATE sessions SET compression_failure_error = "
                                           "'racer' WHERE id = 's'"))
    with pytest.raises(CooldownRestoreError, match="racer"):
        store.restore_compression_failure_cooldown_row("s", snap)
    monkeypatch.setattr(cooldowns, "_before_verify",
                        lambda: sql(store, "DELETE FROM sessions WHERE id = 's'"))
    with caplog.at_level(logging.WARNING, logger="hermes_data.sessions.coordination.cooldowns"):
        store.restore_compression_failure_cooldown_row("s", snap)
    assert "vanished" in caplog.text


def test_cooldown_restore_raise_if_vanished_is_upstreams_error(store, monkeypatch):
    """Issue 33: with ``raise_if_vanished=True`` a snapshot whose row is gone raises
    ``CooldownRestoreError`` (a ``RuntimeError``) with upstream's phrases — "session
    missing" when the row vanished before the write, "verification failed" when it vanished
    before the check — where the default only warns."""
    store.create_session("s", "cli")
    store.record_compression_failure_cooldown("s", 50.0, "old")
    snap = store.get_compression_failure_cooldown_row("s")
    sql(store, "DELETE FROM sessions WHERE id = 's'")
    store.restore_compression_failure_cooldown_row("s", snap)  # the default: a WARNING
    with pytest.raises(RuntimeError, match="compression cooldown rollback session missing: s"):
        store.restore_compression_failure_cooldown_row("s", snap, raise_if_vanished=True)
    store.create_session("s", "cli")
    monkeypatch.setattr(cooldowns, "_before_verify",
                        lambda: sql(store, "DELETE FROM sessions WHERE id = 's'"))
    with pytest.raises(CooldownRestoreError, match="verification failed"):
        store.restore_compression_failure_cooldown_row("s", snap, raise_if_vanished=True)
    store.create_session("s", "cli")
    monkeypatch.setattr(cooldowns, "_before_verify", None)
    store.restore_compression_failure_cooldown_row("s", snap, raise_if_vanished=True)
    assert store.get_compression_failure_cooldown_row("s") == snap


def test_c16_tolerant_writes_and_neutral_reads(store, monkeypatch, caplog):
    """C16: record/clear on a missing row or under a long-held lock return normally
    (WARNING); fallback streak ``-3`` ⇒ 0, ``True`` ⇒ ValueError, legacy ``'abc'`` reads 0
    (SQLite); recovery deadline 0/None/inf ⇒ NULL and reads 0.0."""
    store.record_compression_failure_cooldown("missing", 10.0, "x")
    store.clear_compression_failure_cooldown("missing")
    store.create_session("s", "cli")
    store.set_compression_fallback_streak("s", -3)
    assert store.get_compression_fallback_streak("s") == 0
    store.set_compression_ineffective_count("s", 4)
    store.set_compression_overload_streak("s", 2.9)
    assert (store.get_compression_ineffective_count("s"),
            store.get_compression_overload_streak("s")) == (4, 2)
    with pytest.raises(ValueError):
        store.set_compression_fallback_streak("s", True)
    store.set_compression_fallback_streak("missing", 3)
    # upstream's keyword spellings (issue 33): streak=, count=; both spellings ⇒ TypeError
    store.set_compression_fallback_streak("s", streak=5)
    store.set_compression_ineffective_count("s", count=6)
    assert (store.get_compression_fallback_streak("s"),
            store.get_compression_ineffective_count("s")) == (5, 6)
    with pytest.raises(TypeError, match="value= or streak="):
        store.set_compression_fallback_streak("s", 1, streak=2)
    with pytest.raises(TypeError, match="value= or count="):
        store.set_compression_ineffective_count("s", value=1, count=2)
    with pytest.raises(TypeError, match="missing required argument: 'value'"):
        store.set_compression_fallback_streak("s")
    assert store.get_compression_fallback_streak("s") == 5
    for value in (0, None, math.inf, -5, "junk"):
        store.set_compression_recovery_deadline("s", 123.0)
        store.set_compression_recovery_deadline("s", value)
        assert sql(store, "SELECT compression_recovery_deadline FROM sessions")[0][0] is None
        assert store.get_compression_recovery_deadline("s") == 0.0
    store.set_compression_recovery_deadline("s", 456.5)
    assert store.get_compression_recovery_deadline("s") == 456.5
    if store.backend.dialect != "sqlite":
        return
    sql(store, "UPDATE sessions SET compression_fallback_streak = 'abc'")
    assert store.get_compression_fallback_streak("s") == 0
    monkeypatch.setattr(cooldowns, "COOLDOWN_PATIENCE_S", 0.2)
    other = sqlite3.connect(store.path, timeout=0.1, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        with caplog.at_level(logging.WARNING, logger="hermes_data.sessions.coordination.cooldowns"):
            store.record_compression_failure_cooldown("s", 10.0, "x")
            store.clear_compression_failure_cooldown("s")
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert "not recorded" in caplog.text and "not cleared" in caplog.text
