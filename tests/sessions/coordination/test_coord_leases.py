"""Turn leases and fenced appends (spec sessions-ext-coordination.md §3.14, acceptance
C17–C24)."""

from __future__ import annotations

import time

import pytest

from hermes_data.sessions.errors import SessionTurnLeaseLostError
from hermes_data.sessions.core.maintenance import prune_sessions
from hermes_data.sessions.store import SessionStore

from tests.sessions.coordination.coord_support import chain, guard_row, put_guard, server_now, sql, where, worker

LEASES = "session_turn_leases"
CMP = "20260806_0{}0000_cmp00{}"
CLOCK_ONLY = "injected wall clock: PostgreSQL decides guard expiry with the server clock (§3.1)"


def _counts(store, sid):
    s = store.get_session(sid)
    return s.message_count, s.tool_call_count, store.message_count(sid, include_inactive=True)


@pytest.mark.sqlite_only("the shared legacy state.db is a SQLite file")
def test_c17_fixture_lineage_shares_one_lease(legacy_copy):
    """C17: on the adopted fixture, leases for ``…cmp004`` and ``…cmp001`` contend for the row
    keyed ``…cmp000``; ``…brc009`` keys itself."""
    with SessionStore(legacy_copy) as store:
        tip, mid, root = CMP.format(4, 4), CMP.format(1, 1), CMP.format(0, 0)
        assert store.try_acquire_session_turn_lease(tip, "A")
        assert not store.try_acquire_session_turn_lease(mid, "B")
        assert guard_row(store, LEASES, root)[0] == "A"
        assert store.try_acquire_session_turn_lease("20260807_103000_brc009", "B")
        assert guard_row(store, LEASES, "20260807_103000_brc009")[0] == "B"


@pytest.mark.sqlite_only("process timing; the wait loop is backend-neutral")
def test_c18_wait_notices_release_and_abort(store):
    """C18 (processes): a waiter gets ``on_wait`` at ≈0 s and each notice interval, acquires
    within one poll of the release; ``should_abort`` ends the wait within one poll."""
    store.create_session("s", "cli")
    proc = worker("lease-for", where(store), "s", "0.8", "1")
    assert proc.stdout.readline().strip() == "held"
    notices: list[float] = []
    t0 = time.monotonic()
    ok = store.acquire_session_turn_lease("s", "me", wait_seconds=10, poll_interval_seconds=0.05,
                                          on_wait=notices.append,
                                          wait_notice_interval_seconds=0.3)
    got = time.monotonic()
    released = float(proc.stdout.readline().split()[1])
    proc.wait(timeout=10)
    assert ok and got - released < 0.05 + 0.25  # one poll (+ an acquire transaction)
    assert notices[0] < 0.15 and len(notices) >= 2
    assert all(b - a >= 0.29 for a, b in zip(notices, notices[1:]))
    calls = {"n": 0}

    def abort() -> bool:
        calls["n"] += 1
        return calls["n"] > 3

    t0 = time.monotonic()
    assert not store.acquire_session_turn_lease("s", "other", wait_seconds=10,
                                                poll_interval_seconds=0.05, should_abort=abort)
    assert time.monotonic() - t0 < 0.5 and calls["n"] == 4


def test_c19_foreign_holder_append_is_refused(store):
    """C19: a foreign ``turn_lease_holder`` append ⇒ SessionTurnLeaseLostError in < 0.1 s, no
    row, counters unchanged; one's own expired unreclaimed lease ⇒ the append succeeds and
    renews it."""
    store.create_session("s", "cli")
    store.append_message("s", "user", "first")
    assert store.try_acquire_session_turn_lease("s", "owner")
    before = _counts(store, "s")
    t0 = time.monotonic()
    with pytest.raises(SessionTurnLeaseLostError, match="turn lease"):
        store.append_message("s", "assistant", "late", turn_lease_holder="intruder",
                             tool_calls=[{"id": "1", "function": {"name": "f"}}])
    assert time.monotonic() - t0 < 0.1
    with pytest.raises(SessionTurnLeaseLostError):
        store.append_messages_batch("s", [{"role": "user", "content": "x"}],
                                    turn_lease_holder="intruder")
    assert _counts(store, "s") == before
    put_guard(store, LEASES, "s", "owner", server_now(store) - 30)
    store.append_message("s", "user", "mine", turn_lease_holder="owner",
                         turn_lease_ttl_seconds=120)
    holder, expires = guard_row(store, LEASES, "s")
    assert holder == "owner" and expires > server_now(store) + 100
    assert store.append_messages_batch("s", [{"role": "user", "content": str(i)}
                                             for i in range(5)], chunk_rows=2,
                                       turn_lease_holder="owner") == 5


def test_c20_superseded_owner_is_fenced(store):
    """C20: after A's expiry and B's acquire, A's fenced append raises, A's refresh ⇒ False,
    A's release keeps B's row."""
    store.create_session("s", "cli")
    put_guard(store, LEASES, "s", "A", server_now(store) - 1)
    assert store.try_acquire_session_turn_lease("s", "B")
    with pytest.raises(SessionTurnLeaseLostError):
        store.append_message("s", "user", "late", turn_lease_holder="A")
    assert not store.refresh_session_turn_lease("s", "A")
    b_row = guard_row(store, LEASES, "s")
    store.release_session_turn_lease("s", "A")
    assert guard_row(store, LEASES, "s") == b_row and b_row[0] == "B"
    assert store.message_count("s", include_inactive=True) == 0


def test_c21_appends_ignore_compression_locks(store):
    """C21: appends succeed under a foreign live compression lock, with or without
    ``compression_lock_holder``."""
    store.create_session("s", "cli")
    assert store.try_acquire_compression_lock("s", "compressor")
    store.append_message("s", "user", "a")
    store.append_message("s", "user", "b", compression_lock_holder="someone-else")
    store.append_messages_batch("s", [{"role": "user", "content": "c"}],
                                compression_lock_holder="someone-else")
    assert store.message_count("s") == 3


@pytest.mark.sqlite_only(CLOCK_ONLY)
def test_c22_wall_clock_steps(store):
    """C22: wall stepped forward past the TTL ⇒ B reclaims and A's next fenced append fails;
    stepped back ⇒ A keeps the lease."""
    store.create_session("s", "cli")
    t = [10_000.0]
    store.wall = lambda: t[0]
    assert store.try_acquire_session_turn_lease("s", "A", ttl_seconds=60)
    t[0] -= 3600  # stepped back: A's lease lives longer, B cannot take it
    assert not store.try_acquire_session_turn_lease("s", "B", ttl_seconds=60)
    store.append_message("s", "user", "a1", turn_lease_holder="A")
    t[0] += 3600 + 61  # stepped forward past the TTL
    assert store.try_acquire_session_turn_lease("s", "B", ttl_seconds=60)
    with pytest.raises(SessionTurnLeaseLostError):
        store.append_message("s", "user", "a2", turn_lease_holder="A")
    assert not store.refresh_session_turn_lease("s", "A")
    store.append_message("s", "user", "b1", turn_lease_holder="B")
    assert [m.content for m in store.get_messages("s")] == ["a1", "b1"]


def test_c23_wait_budget_is_monotonic(store):
    """C23: ``acquire_session_turn_lease(wait_seconds=0.3)`` returns False after ≈0.3 s
    monotonic while the wall clock is frozen or jumps."""
    store.create_session("s", "cli")
    assert store.try_acquire_session_turn_lease("s", "A", ttl_seconds=3600)
    for wall in (lambda: 1.0e9, lambda: time.time() + (time.monotonic() * 1e5 % 7200) - 3600):
        store.wall = wall
        t0 = time.monotonic()
        assert not store.acquire_session_turn_lease("s", "B", wait_seconds=0.3,
                                                    poll_interval_seconds=0.05)
        assert 0.28 <= time.monotonic() - t0 < 0.8


def test_c24_manual_prune_of_the_root_rekeys_and_fences(store):
    """C24: a manual prune of the lineage root mid-turn (no guard flag) makes the owner's
    fenced append raise and lets another process acquire on the re-keyed tip."""
    chain(store, "root", "tip")
    sql(store, "UPDATE sessions SET started_at = 1000, ended_at = 1001 WHERE id = 'root'")
    assert store.try_acquire_session_turn_lease("tip", "owner")
    assert guard_row(store, LEASES, "root")[0] == "owner"
    assert prune_sessions(store, older_than_days=1) == 1
    with pytest.raises(SessionTurnLeaseLostError):
        store.append_message("tip", "user", "late", turn_lease_holder="owner")
    assert not store.refresh_session_turn_lease("tip", "owner")
    with SessionStore(where(store)) as other:
        assert other.try_acquire_session_turn_lease("tip", "other")
    assert guard_row(store, LEASES, "tip")[0] == "other"


@pytest.mark.sqlite_only("CI time: PostgreSQL's process race is C4, its fencing C19/C20")
def test_issue18_mutual_exclusion_between_processes(store):
    """Issue 18 acceptance 2 (lean: 3 processes × 5 rounds; the 8 × 200 run is
    benchmarks/coordination.py): processes contending for one session's turn lease and
    compression lock, each appending fenced enter/exit markers while it holds them, never
    overlap, never deadlock, and all finish."""
    store.create_session("s", "cli")
    start = time.time() + 1.5
    procs = [worker("contend", where(store), "s", "5", str(i), str(start)) for i in range(3)]
    for p in procs:
        assert p.communicate(timeout=120)[0].strip() == "done"
        assert p.returncode == 0
    log = [m.content.split() for m in store.get_messages("s")]
    assert len(log) == 30
    for enter, leave in zip(log[::2], log[1::2]):
        assert enter[0] == "enter" and leave[0] == "exit" and enter[1:] == leave[1:], (enter,
                                                                                      leave)
    assert guard_row(store, LEASES, "s") is None
