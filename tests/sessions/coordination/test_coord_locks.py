"""Compression locks and lease-required publish (spec sessions-ext-coordination.md §3.10,
acceptance C4–C9, C47, C48 first half)."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import sqlite3
import threading
import time

import pytest

from hermes_data.sessions.coordination import compression_locks
from hermes_data.sessions.errors import (CompressionPublishError, CompressionSessionBusyError,
                                         StateDbReplacedError)
from hermes_data.sessions.core.maintenance import prune_sessions
from hermes_data.sessions.store import SessionStore

from tests.sessions.coordination.coord_support import chain, guard_row, put_guard, server_now, sql, where, worker

LOCKS = "compression_locks"
HANDOFF = [{"role": "user", "content": "summary"}]
CLOCK_ONLY = "injected wall clock: PostgreSQL decides guard expiry with the server clock (§3.1)"


def test_c4_one_winner_among_threads_and_processes(store):
    """C4: 16 threads + 4 processes race one acquire from a barrier: exactly one True."""
    start = time.time() + 1.5
    procs = [worker("race", where(store), "s", str(start), str(i)) for i in range(4)]
    handles = [store] + [SessionStore(where(store)) for _ in range(3)]
    results: list[bool] = []

    def race(h, i):
        while time.time() < start:
            time.sleep(0.001)
        results.append(h.try_acquire_compression_lock("s", f"thread-{i}"))

    threads = [threading.Thread(target=race, args=(handles[i % 4], i)) for i in range(16)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        outs = [p.communicate(timeout=60)[0].strip() for p in procs]
    finally:
        for h in handles[1:]:
            h.close()
    assert all(o in ("True", "False") for o in outs), outs
    assert results.count(True) + outs.count("True") == 1
    assert guard_row(store, LOCKS, "s") is not None


@pytest.mark.sqlite_only(CLOCK_ONLY)
def test_c5_expiry_equality_is_expired(store):
    """C5: a foreign row with ``expires_at = now`` is reclaimed; ``now + 1`` ⇒ False."""
    store.wall = lambda: 5000.0
    put_guard(store, LOCKS, "s", "other", 5000.0)
    assert store.try_acquire_compression_lock("s", "me")
    assert guard_row(store, LOCKS, "s")[0] == "me"
    put_guard(store, LOCKS, "s", "other", 5001.0)
    assert not store.try_acquire_compression_lock("s", "me")
    assert guard_row(store, LOCKS, "s") == ("other", 5001.0)


def test_c6_dead_holders_only_are_reclaimed_early(store, caplog):
    """C6: a DEAD ``pid=<n>:x`` is reclaimed early with a WARNING naming it; own pid, no pid,
    ``mypid=``, ``pid=0``, a raising probe, another host (and on PostgreSQL a hostless pid)
    are not; the holder getter hides expired and DEAD rows."""
    pg = store.backend.dialect == "postgresql"
    far = server_now(store) + 3600
    store.pid_exists = lambda pid: False
    dead = "pid=999999:x"
    put_guard(store, LOCKS, "s", dead, far)
    with caplog.at_level(logging.WARNING, logger="hermes_data.sessions.coordination.compression_locks"):
        got = store.try_acquire_compression_lock("s", "me")
    assert got is not pg
    if not pg:
        assert dead in caplog.text and store.get_compression_lock_holder("s") == "me"
    else:
        assert store.get_compression_lock_holder("s") == dead
    for holder in (f"pid={os.getpid()}:x", "worker-7", "mypid=12:x", "pid=0:x",
                   "pid=999999:host=elsewhere:x"):
        put_guard(store, LOCKS, "s", holder, far)
        assert not store.try_acquire_compression_lock("s", "me"), holder
        assert store.get_compression_lock_holder("s") == holder

    def boom(pid):
        raise RuntimeError("probe failed")

    store.pid_exists = boom
    put_guard(store, LOCKS, "s", "pid=999999:host=" + os.uname().nodename + ":x", far)
    assert not store.try_acquire_compression_lock("s", "me")
    store.pid_exists = lambda pid: False
    assert store.get_compression_lock_holder("s") is None  # same-host DEAD row
    put_guard(store, LOCKS, "s", "worker-7", server_now(store) - 1)
    assert store.get_compression_lock_holder("s") is None  # expired row


def test_c7_refresh_and_release_are_holder_matched(store):
    """C7: the owner's refresh after its own expiry (unreclaimed) ⇒ True and live; after a
    foreign reclaim ⇒ False, foreign row unchanged; non-owner release deletes nothing;
    repeated releases are silent."""
    put_guard(store, LOCKS, "s", "A", server_now(store) - 10)
    assert store.refresh_compression_lock("s", "A", ttl_seconds=60)
    assert store.get_compression_lock_holder("s") == "A"
    put_guard(store, LOCKS, "s", "A", server_now(store) - 10)
    assert store.try_acquire_compression_lock("s", "B")
    before = guard_row(store, LOCKS, "s")
    assert not store.refresh_compression_lock("s", "A")
    store.release_compression_lock("s", "A")
    assert guard_row(store, LOCKS, "s") == before
    store.release_compression_lock("s", "B")
    store.release_compression_lock("s", "B")
    assert guard_row(store, LOCKS, "s") is None


@pytest.mark.sqlite_only("SQLite's database write lock and file identity")
def test_c8_busy_replaced_and_reentrant(store, monkeypatch, caplog, tmp_path):
    """C8: acquire while another connection holds the write lock past patience ⇒ False +
    WARNING; on a replaced file ⇒ StateDbReplacedError; re-entrant acquire ⇒ True with
    ``expires_at`` never lowered."""
    assert store.try_acquire_compression_lock("s", "me", ttl_seconds=1000)
    high = guard_row(store, LOCKS, "s")[1]
    assert store.try_acquire_compression_lock("s", "me", ttl_seconds=10)
    assert guard_row(store, LOCKS, "s")[1] == high
    monkeypatch.setattr(compression_locks, "LOCK_PATIENCE_S", 0.3)
    other = sqlite3.connect(store.path, timeout=0.1, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        with caplog.at_level(logging.WARNING, logger="hermes_data.sessions.coordination.compression_locks"):
            assert not store.try_acquire_compression_lock("t", "me")
        assert "not acquired" in caplog.text
    finally:
        other.execute("ROLLBACK")
        other.close()
    copy = tmp_path / "copy.db"
    shutil.copyfile(store.path, copy)
    os.replace(copy, store.path)
    with pytest.raises(StateDbReplacedError):
        store.try_acquire_compression_lock("t", "me")


def test_c9_lease_required_publish(store):
    """C9: a non-owning holder, or ``require_compression_lease=True`` without one ⇒
    CompressionSessionBusyError, nothing written; the owner's expired unreclaimed row with
    ``require_lease_refresh=True`` ⇒ published; ``orphaned_compression`` / ``tui_shutdown``
    parents are cleared and published; ``new_session`` / ``session_reset`` refused."""
    store.create_session("p", "cli")
    assert store.try_acquire_compression_lock("p", "owner")
    with pytest.raises(CompressionSessionBusyError, match="compression lease"):
        store.publish_compression_child("p", "c", "cli", HANDOFF, lease_holder="intruder")
    with pytest.raises(CompressionSessionBusyError):
        store.publish_compression_child("p", "c", "cli", HANDOFF, require_compression_lease=True)
    with pytest.raises(ValueError):
        store.publish_compression_child("p", "c", "cli", HANDOFF, lease_holder="owner",
                                        compression_lock_holder="other")
    assert store.get_session("c") is None and store.get_session("p").ended_at is None
    put_guard(store, LOCKS, "p", "owner", server_now(store) - 5)
    with pytest.raises(CompressionSessionBusyError):
        store.publish_compression_child("p", "c", "cli", HANDOFF,
                                        compression_lock_holder="owner")
    res = store.publish_compression_child("p", "c", "cli", HANDOFF,
                                          compression_lock_holder="owner",
                                          require_lease_refresh=True)
    assert res.child_session_id == "c" and store.get_session("p").end_reason == "compression"
    assert guard_row(store, LOCKS, "p")[0] == "owner"  # publish leaves the row alone
    for i, reason in enumerate(("orphaned_compression", "tui_shutdown")):
        store.create_session(f"a{i}", "cli")
        store.end_session(f"a{i}", reason)
        store.publish_compression_child(f"a{i}", f"a{i}c", "cli", HANDOFF)
        assert store.get_session(f"a{i}").end_reason == "compression"
    for i, reason in enumerate(("new_session", "session_reset")):
        store.create_session(f"b{i}", "cli")
        store.end_session(f"b{i}", reason)
        with pytest.raises(CompressionPublishError):
            store.publish_compression_child(f"b{i}", f"b{i}c", "cli", HANDOFF)
        assert store.get_session(f"b{i}c") is None


def test_c47_guarded_prune_spares_a_locked_parent(store):
    """C47: a guarded prune spares a ``tui_shutdown`` parent under a live lock; the owner's
    publish then succeeds."""
    store.create_session("p", "tui")
    store.append_message("p", "user", "hello")
    store.end_session("p", "tui_shutdown")
    sql(store, "UPDATE sessions SET started_at = 1000, ended_at = 1001 WHERE id = 'p'")
    sql(store, "UPDATE messages SET timestamp = 1000 WHERE session_id = 'p'")
    holder = store.make_holder("compress")
    assert store.try_acquire_compression_lock("p", holder)
    assert prune_sessions(store, older_than_days=1, exclude_active_write_guards=True) == 0
    res = store.publish_compression_child("p", "c", "tui", HANDOFF, lease_holder=holder)
    assert res.child_session_id == "c"
    store.release_compression_lock("p", holder)
    assert store.get_compression_lock_holder("p") is None


@pytest.mark.sqlite_only("PID liveness on this host; PostgreSQL uses the same rule (C6)")
def test_c48_sigkilled_holder_is_reclaimed_at_once(store):
    """C48 (first half): a process SIGKILLed holding a lock and a lease is reclaimed at once
    by a same-host process."""
    chain(store, "r", "t")
    proc = worker("hold", where(store), "t")
    line = proc.stdout.readline().split()
    assert line[0] == "held", line
    assert store.get_compression_lock_holder("t") == line[1]
    assert not store.try_acquire_compression_lock("t", "me")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)  # reaped: a zombie still "exists"
    assert store.try_acquire_compression_lock("t", "me")
    assert store.try_acquire_session_turn_lease("t", "me")
    assert guard_row(store, "session_turn_leases", "r")[0] == "me"
