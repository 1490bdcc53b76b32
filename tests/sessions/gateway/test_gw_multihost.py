"""Multi-host gateways on one PostgreSQL database (issue 20 acceptance 2; spec
sessions-ext-gateway.md §3.0 M1–M2, §3.6–3.7). PostgreSQL only: the hosts share a server.

Two groups of real processes present different host identities (``socket.gethostname`` is
replaced in each child before any holder is made); each process registers a heartbeat
under its claimant, claims one handoff and keeps heartbeating. Group A is SIGKILLed: its
pids are then provably gone on *this* machine, but its holders name another host, so only
heartbeat staleness — measured with the server's clock — may release its work (M1, M2).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time

import sqlalchemy as sa

from hermes_data.sessions.store import SessionStore

from tests.conftest import truncate_tables
from tests.sessions.conftest import _TABLES

#: Heartbeat staleness the reclaimer and the prune use (small: the test waits it out once).
STALE_S = 1.0
GROUPS = {"host-a": ("a1", "a2"), "host-b": ("b1", "b2")}


def _gateway(url: str, host: str, sid: str, out) -> None:
    """One gateway process on ``host``: heartbeat, claim ``sid``, heartbeat until killed."""
    import socket
    socket.gethostname = lambda: host  # this process's host identity
    from hermes_data.sessions.coordination.lock_rows import make_holder
    me = make_holder("handoff")
    started = time.time()
    with SessionStore(url) as s:
        s.register_backend_heartbeat(backend_id=me, pid=os.getpid(), started_at=started,
                                     host=host)
        out.put((sid, me, s.claim_handoff(sid, claimant=me)))
        while True:
            s.register_backend_heartbeat(backend_id=me, pid=os.getpid(), started_at=started,
                                         host=host)
            time.sleep(0.05)


def _server_now(store: SessionStore) -> float:
    with store.engine.connect() as conn:
        return float(conn.execute(sa.text("SELECT EXTRACT(EPOCH FROM clock_timestamp())"))
                     .scalar())


def test_killed_host_group_loses_only_its_own_work_after_heartbeat_staleness(pg_session_url):
    truncate_tables(pg_session_url, _TABLES)
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs: dict[str, list] = {host: [] for host in GROUPS}
    with SessionStore(pg_session_url) as store:
        for host, sids in GROUPS.items():
            for sid in sids:
                store.create_session(sid, "cli")
                assert store.request_handoff(sid, "telegram")
                p = ctx.Process(target=_gateway, args=(pg_session_url, host, sid, out))
                p.start()
                procs[host].append(p)
        try:
            holders = {}
            for _ in range(4):
                sid, holder, claimed = out.get(timeout=120)
                assert claimed, sid
                holders[sid] = holder
            a_ids, b_ids = set(GROUPS["host-a"]), set(GROUPS["host-b"])

            def reclaim() -> list[str]:
                return store.reclaim_stale_running_handoffs(
                    "gateway gone", claimant="reaper", heartbeat_staleness_seconds=STALE_S,
                    max_running_seconds=0)

            # Everyone alive: no sweep touches anything; a live claim cannot be taken over.
            assert reclaim() == []
            assert store.prune_stale_heartbeats(max_age_seconds=STALE_S) == []
            assert not store.claim_handoff("a1", claimant=holders["b1"])
            for p in procs["host-a"]:
                os.kill(p.pid, signal.SIGKILL)
            for p in procs["host-a"]:
                p.join(30)
                assert p.exitcode == -signal.SIGKILL
            beats = {h.backend_id: h.last_heartbeat for h in store.list_backend_heartbeats()}
            # Each claim is due when its own claimant's last heartbeat is STALE_S old.
            due = {s: beats[holders[s]] + STALE_S for s in a_ids}
            # The dead pids exist nowhere on this machine, yet nothing is released before
            # the heartbeat timeout (their holders name another host: M1).
            reclaimed: set[str] = set()
            early_polls = 0
            deadline = time.monotonic() + 30
            while reclaimed != a_ids:
                assert time.monotonic() < deadline, f"reclaimed only {sorted(reclaimed)}"
                got = reclaim()
                after = _server_now(store)  # no earlier than the sweep's own clock reading
                for sid in got:
                    assert sid in a_ids and sid not in reclaimed, (sid, got)
                    assert after >= due[sid], (sid, after, due[sid])
                early_polls += any(after < due[s] for s in a_ids - reclaimed - set(got))
                reclaimed |= set(got)
                time.sleep(0.05)
            assert early_polls > 0  # the timeout was really waited out, not skipped
            for sid in a_ids:
                assert store.get_handoff_state(sid).state == "failed"
            for sid in b_ids:
                state = store.get_handoff_state(sid)
                assert (state.state, state.claimed_by) == ("running", holders[sid])
            assert store.prune_stale_heartbeats(max_age_seconds=STALE_S) == \
                sorted(holders[s] for s in a_ids)
            left = {h.backend_id for h in store.list_backend_heartbeats()}
            assert left == {holders[s] for s in b_ids}
            assert reclaim() == []  # group B stays untouched on later sweeps too
            assert all(p.is_alive() for p in procs["host-b"])
        finally:
            for group in procs.values():
                for p in group:
                    if p.is_alive():
                        os.kill(p.pid, signal.SIGKILL)
                    p.join(30)
