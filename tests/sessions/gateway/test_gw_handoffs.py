"""Cross-platform handoffs (spec sessions-ext-gateway.md §3.6, acceptance behaviours
25–29), on SQLite and PostgreSQL unless marked."""

from __future__ import annotations

import multiprocessing
import os
import re
import socket
import subprocess
import sys
import threading
import time

import pytest
import sqlalchemy as sa

from hermes_data.sessions.gateway import common as gateway_common
from hermes_data.sessions.gateway.handoffs import HandoffState


def _target(store, backend) -> str:
    return str(store.path) if backend == "sqlite" else \
        store.url.render_as_string(hide_password=False)


def test_gw25_request_claim_complete_cycle(store):
    """Behaviour 25: request ⇒ pending; the same request ⇒ True (replay), another platform
    ⇒ False; claim ⇒ running; complete ⇒ completed; a new request ⇒ pending with the claim
    fields cleared; a blank platform ⇒ ValueError."""
    store.create_session("s", "cli")
    assert store.request_handoff("s", "telegram")
    st = store.get_handoff_state("s")
    assert (st.state, st.platform, st.claimed_by) == ("pending", "telegram", None)
    assert st.requested_at is not None
    assert store.request_handoff("s", "telegram")
    assert store.request_handoff("s", "discord") is False
    assert store.request_handoff("missing", "telegram") is False
    assert store.claim_handoff("s", claimant="gw-1")
    st = store.get_handoff_state("s")
    assert (st.state, st.claimed_by) == ("running", "gw-1") and st.claimed_at is not None
    assert store.complete_handoff("s", claimant="gw-1")
    assert store.get_handoff_state("s").state == "completed"
    assert store.request_handoff("s", "discord")
    st = store.get_handoff_state("s")
    assert (st.state, st.platform, st.error, st.claimed_by, st.claimed_at) == (
        "pending", "discord", None, None, None)
    for blank in ("", "  ", None):
        with pytest.raises(ValueError):
            store.request_handoff("s", blank)
    row = store.get_session("s")
    assert (row.handoff_state, row.handoff_platform) == ("pending", "discord")


def test_request_handoff_without_replay_is_upstreams_answer(store):
    """Issue 33: ``accept_replay=False`` answers as upstream's ``request_handoff``: False for
    any handoff in flight, the same platform's too (the default answers a replay True), and
    nothing changes; from a terminal state it requests as usual."""
    store.create_session("s", "cli")
    assert store.request_handoff("s", "telegram", accept_replay=False) is True
    before = store.get_handoff_state("s")
    assert store.request_handoff("s", "telegram", accept_replay=False) is False
    assert store.request_handoff("s", "telegram") is True  # the default: a replay
    assert store.claim_handoff("s", claimant="gw")
    assert store.request_handoff("s", "telegram", accept_replay=False) is False
    assert store.get_handoff_state("s").requested_at == before.requested_at
    assert store.fail_handoff("s", "boom", claimant="gw")
    assert store.request_handoff("s", "telegram", accept_replay=False) is True
    assert store.request_handoff("missing", "telegram", accept_replay=False) is False


def test_claim_without_replay_is_upstreams_answer(store):
    """Issue 33: ``claim_handoff(accept_replay=False)`` answers as upstream's claim: True only
    for the call that moved the row out of ``pending``; a repeat by the same claimant finds
    no pending row, False (the default answers that replay True); the claim is unchanged."""
    store.create_session("s", "cli")
    assert store.claim_handoff("s", accept_replay=False) is False  # nothing pending
    store.request_handoff("s", "telegram")
    assert store.claim_handoff("s", claimant="gw", accept_replay=False) is True
    before = store.get_handoff_state("s")
    assert store.claim_handoff("s", claimant="gw", accept_replay=False) is False
    assert store.claim_handoff("s", claimant="gw") is True  # the default: a replay
    assert store.claim_handoff("s", claimant="other") is False
    assert store.get_handoff_state("s") == before
    assert store.claim_handoff("missing", accept_replay=False) is False


def _claim_many(target, sid, go, out, n):
    from hermes_data.sessions.store import SessionStore

    with SessionStore(target) as s:
        wins: list[bool] = []
        go.wait(30)

        def run(i):
            wins.append(s.claim_handoff(sid, claimant=f"{os.getpid()}-{i}"))

        threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        out.put(sum(wins))


def test_gw26_concurrent_claimers_and_a_racing_waiter(store, backend):
    """Behaviour 26: 20 concurrent claimers in two processes ⇒ exactly one True; a waiter's
    fail(only_states=('pending',)) racing a claim: exactly one lands and the final state
    matches it."""
    store.create_session("s", "cli")
    store.request_handoff("s", "telegram")
    ctx = multiprocessing.get_context("spawn")
    go, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_claim_many, args=(_target(store, backend), "s", go, out, 10))
             for _ in range(2)]
    for p in procs:
        p.start()
    go.set()
    wins = sum(out.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(30)
    assert wins == 1 and store.get_handoff_state("s").state == "running"
    for i in range(3):
        sid = f"race{i}"
        store.create_session(sid, "cli")
        store.request_handoff(sid, "telegram")
        results: dict[str, bool] = {}
        barrier = threading.Barrier(2)

        def claim():
            barrier.wait()
            results["claim"] = store.claim_handoff(sid, claimant="gw")

        def fail():
            barrier.wait()
            results["fail"] = store.fail_handoff(sid, "timed out", only_states=("pending",))

        threads = [threading.Thread(target=claim), threading.Thread(target=fail)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results["claim"] != results["fail"]
        want = "running" if results["claim"] else "failed"
        assert store.get_handoff_state(sid).state == want


def test_gw27_ownership_terminal_states_and_error_text(store):
    """Behaviour 27: a foreign claimant's complete/fail ⇒ False; complete after a reclaim ⇒
    False (stays failed); only_states=('completed',) ⇒ False; a plain fail on a NULL-state
    row ⇒ False; fail(sid, None) stores 'handoff failed'; 600 characters are cut to 500;
    claim and complete replays ⇒ True."""
    for sid in ("a", "b", "c", "d"):
        store.create_session(sid, "cli")
    store.request_handoff("a", "telegram")
    assert store.claim_handoff("a", claimant="gw-1")
    assert store.claim_handoff("a", claimant="gw-1")  # replay
    assert store.claim_handoff("a", claimant="gw-2") is False
    assert store.complete_handoff("a", claimant="gw-2") is False
    assert store.fail_handoff("a", "x", claimant="gw-2") is False
    assert store.fail_handoff("a", "x", only_states=("completed",)) is False
    assert store.complete_handoff("a", claimant="gw-1")
    assert store.complete_handoff("a", claimant="gw-1")  # replay
    assert store.fail_handoff("a", "late") is False
    assert store.get_handoff_state("a").state == "completed"
    # A reclaim fails the running claim; the late complete loses.
    store.request_handoff("b", "telegram")
    store.claim_handoff("b", claimant="gw-old")
    assert store.reclaim_stale_running_handoffs("gateway restarted", claimant="gw-new",
                                                max_running_seconds=-1.0,
                                                heartbeat_staleness_seconds=60) == ["b"]
    assert store.complete_handoff("b", claimant="gw-old") is False
    assert store.get_handoff_state("b").state == "failed"
    assert store.fail_handoff("c", "x") is False  # never requested
    store.request_handoff("c", "telegram")
    assert store.fail_handoff("c", None)
    assert store.get_handoff_state("c").error == "handoff failed"
    assert store.fail_handoff("c", None)  # replay
    store.request_handoff("d", "telegram")
    assert store.fail_handoff("d", "  " + "e" * 600)
    assert store.get_handoff_state("d").error == "e" * 500
    assert store.fail_handoff("d", "e" * 600)  # replay: same stored text


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


@pytest.mark.sqlite_only("injected wall clock (SQLite's db_now is the wall clock)")
def test_gw28_reclaim_fails_only_stale_claims(store, monkeypatch):
    """Behaviour 28: reclaim fails an unclaimed running row (an upstream-style raw UPDATE)
    and a dead same-host claim; it keeps a live same-host sibling's, the caller's own and a
    remote claim younger than 900 s, failing the remote one at 901 s; with
    heartbeat_staleness_seconds it keeps the claims of fresh backends only."""
    clock = [1_000_000.0]
    monkeypatch.setattr(gateway_common, "wall", lambda: clock[0])
    host = socket.gethostname()
    claims = {"raw": None, "dead": f"handoff:pid={_dead_pid()}:host={host}:x",
              "sibling": f"handoff:pid={os.getpid()}:host={host}:sibling",
              "own": "me", "remote": "handoff:pid=1:host=elsewhere:y"}
    for sid, who in claims.items():
        clock[0] = 1_000_500.0 if sid == "sibling" else 1_000_000.0  # a younger claim
        store.create_session(sid, "cli")
        store.request_handoff(sid, "telegram")
        if who is None:
            with store.engine.begin() as conn:
                conn.exec_driver_sql("UPDATE sessions SET handoff_state = 'running' "
                                     "WHERE id = 'raw'")
        else:
            assert store.claim_handoff(sid, claimant=who)
    clock[0] = 1_000_900.0
    assert sorted(store.reclaim_stale_running_handoffs("stale", claimant="me")) == [
        "dead", "raw"]
    clock[0] += 1
    assert store.reclaim_stale_running_handoffs("stale", claimant="me") == ["remote"]
    assert store.get_handoff_state("remote") == HandoffState(
        "failed", "telegram", "stale", 1_000_000.0, claims["remote"], 1_000_000.0)
    assert store.get_handoff_state("sibling").state == "running"
    assert store.get_handoff_state("own").state == "running"
    # Heartbeat staleness: only claims of backends with a fresh heartbeat survive.
    for sid, who in (("hb-fresh", "backend-a"), ("hb-stale", "backend-b")):
        store.create_session(sid, "cli")
        store.request_handoff(sid, "telegram")
        store.claim_handoff(sid, claimant=who)
    store.register_backend_heartbeat(backend_id="backend-a", pid=1, started_at=1.0)
    store.register_backend_heartbeat(backend_id="backend-b", pid=1, started_at=1.0,
                                     last_heartbeat=clock[0] - 120)
    assert sorted(store.reclaim_stale_running_handoffs(
        "stale", claimant="me", heartbeat_staleness_seconds=60, max_running_seconds=0)) == [
        "hb-stale", "sibling"]  # the sibling registered no heartbeat either
    assert store.get_handoff_state("hb-fresh").state == "running"


def test_reclaim_including_live_claims_is_upstreams_sweep(store):
    """Issue 33: ``include_live_claims=True`` fails every ``running`` row as upstream's
    reclaim did — a live same-host sibling's fresh claim and the caller's own too — and
    leaves pending, completed and untouched rows alone; the default fails none of them."""
    host = socket.gethostname()
    claims = {"sibling": f"handoff:pid={os.getpid()}:host={host}:sibling", "own": "me",
              "remote": "handoff:pid=1:host=elsewhere:y"}
    for sid, who in claims.items():
        store.create_session(sid, "cli")
        store.request_handoff(sid, "telegram")
        assert store.claim_handoff(sid, claimant=who)
    for sid in ("pending", "done", "untouched"):
        store.create_session(sid, "cli")
    store.request_handoff("pending", "telegram")
    store.request_handoff("done", "telegram")
    store.claim_handoff("done", claimant="x")
    store.complete_handoff("done", claimant="x")
    assert store.reclaim_stale_running_handoffs("restart", claimant="me") == []
    assert store.reclaim_stale_running_handoffs(
        "restart", claimant="me", include_live_claims=True) == ["own", "remote", "sibling"]
    for sid in claims:
        st = store.get_handoff_state(sid)
        assert (st.state, st.error) == ("failed", "restart"), sid
    assert [store.get_handoff_state(s).state for s in ("pending", "done", "untouched")] == [
        "pending", "completed", None]
    assert store.reclaim_stale_running_handoffs("again", include_live_claims=True) == []


def test_gw29_readers_propagate_errors_and_list_fifo(store, backend, monkeypatch):
    """Behaviour 29: get_handoff_state — missing ⇒ None, untouched ⇒ all None, an injected
    storage error propagates; list_pending_handoffs is FIFO by request and honours
    ``platforms`` (case-insensitively)."""
    assert store.get_handoff_state("missing") is None
    store.create_session("z-first", "cli")
    assert store.get_handoff_state("z-first") == HandoffState(None, None, None, None, None, None)
    store.create_session("a-second", "cli")
    store.create_session("m-third", "cli")
    store.request_handoff("z-first", "Telegram")
    time.sleep(0.01)
    store.request_handoff("a-second", "discord")
    time.sleep(0.01)
    store.request_handoff("m-third", "telegram")
    assert [r.id for r in store.list_pending_handoffs()] == ["z-first", "a-second", "m-third"]
    assert [r.id for r in store.list_pending_handoffs(platforms=["TELEGRAM"])] == [
        "z-first", "m-third"]
    assert store.list_pending_handoffs(platforms=[]) == []

    def locked(conn, cursor, statement, parameters, context, executemany):
        # the state read (its columns table-qualified since it is a Core construct)
        if re.search(r"handoff_state, (sessions\.)?handoff_platform", statement):
            raise sa.exc.OperationalError(statement, parameters,
                                          Exception("database is locked"))

    if backend == "sqlite":  # the read patience, shortened: the error still surfaces
        from hermes_data.sessions.backends import sqlite as sqlite_backend
        monkeypatch.setattr(sqlite_backend, "READ_PATIENCE_S", 0.3)
    sa.event.listen(store.engine, "before_cursor_execute", locked)
    try:
        with pytest.raises(Exception, match="locked|busy|held the write lock"):
            store.get_handoff_state("z-first")
    finally:
        sa.event.remove(store.engine, "before_cursor_execute", locked)


def test_gw42_reclaim_binds_at_most_900_ids_per_statement(store):
    """Behaviour 42 (this area): failing 1000 stale handoffs binds ≤ 900 ids per statement."""
    with store.engine.begin() as conn:
        conn.exec_driver_sql("INSERT INTO sessions (id, source, started_at, handoff_state) "
                             "VALUES (?, 'cli', 1.0, 'running')",
                             [(f"h{i:04d}",) for i in range(1000)])
    seen: list[tuple[str, object]] = []
    sa.event.listen(store.engine, "before_cursor_execute",
                    lambda c, cur, st, p, ctx, many: seen.append((st, p)))
    assert len(store.reclaim_stale_running_handoffs("gone", claimant="me")) == 1000
    updates = [p for st, p in seen if st.startswith("UPDATE sessions SET handoff_state")]
    assert len(updates) == 2 and max(len(p) for p in updates) <= 901  # error text + ids
    assert store.list_pending_handoffs() == []
