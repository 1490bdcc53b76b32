"""Backend heartbeats (spec sessions-ext-gateway.md §3.7, acceptance behaviours 30–33)."""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest
import sqlalchemy as sa

from hermes_data.sessions.gateway import common as gateway_common


def test_gw30_register_list_clear_and_monotonic_refresh(store):
    """Behaviour 30: register, list newest first, clear; an older ``last_heartbeat`` never
    replaces a newer one; a new ``started_at`` under the same id replaces every value;
    ``pid=True`` and ``started_at=nan`` ⇒ ValueError."""
    assert store.register_backend_heartbeat(backend_id="a", pid=10, started_at=1.0,
                                            last_heartbeat=100.0, profile="p", host="h")
    assert store.register_backend_heartbeat(backend_id="b", pid=11, started_at=1.0,
                                            last_heartbeat=200.0, profile=None, host=None)
    assert [(h.backend_id, h.profile, h.host) for h in store.list_backend_heartbeats()] == [
        ("b", "", ""), ("a", "p", "h")]
    assert store.register_backend_heartbeat(backend_id="a", pid=10, started_at=1.0,
                                            last_heartbeat=50.0, profile="p2", host="h")
    a = {h.backend_id: h for h in store.list_backend_heartbeats()}["a"]
    assert (a.last_heartbeat, a.profile) == (100.0, "p2")
    assert store.register_backend_heartbeat(backend_id="a", pid=12, started_at=5.0,
                                            last_heartbeat=60.0, profile="q", host="h2")
    a = {h.backend_id: h for h in store.list_backend_heartbeats()}["a"]
    assert a.as_dict() == {"backend_id": "a", "pid": 12, "started_at": 5.0,
                           "last_heartbeat": 60.0, "profile": "q", "host": "h2"}
    assert store.clear_backend_heartbeat("a") and not store.clear_backend_heartbeat("a")
    assert [h.backend_id for h in store.list_backend_heartbeats()] == ["b"]
    with pytest.raises(ValueError):
        store.register_backend_heartbeat(backend_id="c", pid=True, started_at=1.0)
    with pytest.raises(ValueError):
        store.register_backend_heartbeat(backend_id="c", pid=1, started_at=float("nan"))
    assert store.register_backend_heartbeat(backend_id=" ", pid=1, started_at=1.0) is False


def test_gw31_prune_returns_exactly_the_removed_ids_without_returning(store, backend):
    """Behaviour 31: prune returns exactly the removed ids; ``max_age_seconds=0`` ⇒ [];
    no SQLite statement of this area uses RETURNING (trace)."""
    seen: list[str] = []
    sa.event.listen(store.engine, "before_cursor_execute",
                    lambda c, cur, st, p, ctx, many: seen.append(st))
    now = time.time()
    for bid, age in (("old1", 500), ("old2", 400), ("new", 1)):
        store.register_backend_heartbeat(backend_id=bid, pid=1, started_at=1.0,
                                         last_heartbeat=now - age)
    assert store.prune_stale_heartbeats(max_age_seconds=0) == []
    assert store.prune_stale_heartbeats(max_age_seconds=float("inf")) == []
    assert store.prune_stale_heartbeats(max_age_seconds=300) == ["old1", "old2"]
    assert store.prune_stale_heartbeats(max_age_seconds=300) == []
    assert [h.backend_id for h in store.list_backend_heartbeats()] == ["new"]
    store.increment_hygiene_failure_streak("k")
    store.create_session("s", "cli")
    store.request_handoff("s", "telegram")
    store.claim_handoff("s")
    store.reclaim_stale_running_handoffs("x", claimant="other", max_running_seconds=-1,
                                         heartbeat_staleness_seconds=1)
    if backend == "sqlite":
        assert seen and not [st for st in seen if "RETURNING" in st.upper()]


@pytest.mark.parametrize("backend", ["postgresql"])
def test_gw32_server_clock_stamps_heartbeats(store, monkeypatch):
    """Behaviour 32 (PG): with the store's wall clock an hour ahead, a default registration
    stores the server's time and ``prune(60)`` keeps it (M2)."""
    real = time.time()
    monkeypatch.setattr(gateway_common, "wall", lambda: real + 3600)
    assert store.register_backend_heartbeat(backend_id="a", pid=1, started_at=1.0)
    hb = store.list_backend_heartbeats()[0]
    assert abs(hb.last_heartbeat - real) < 60
    assert store.prune_stale_heartbeats(max_age_seconds=60) == []
    assert [h.backend_id for h in store.list_backend_heartbeats()] == ["a"]


@pytest.mark.sqlite_only("SQLite's file write lock")
def test_gw33_registration_gives_up_after_five_seconds(store):
    """Behaviour 33: another connection holds the write lock past 5 s ⇒ registration
    returns False without raising."""
    holder = sqlite3.connect(store.path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    release = threading.Timer(7.0, lambda: holder.execute("ROLLBACK"))
    release.start()
    t0 = time.monotonic()
    try:
        assert store.register_backend_heartbeat(backend_id="a", pid=1, started_at=1.0) is False
        assert 4.5 <= time.monotonic() - t0 < 7.0
    finally:
        release.cancel()
        holder.execute("ROLLBACK")
        holder.close()
    assert store.register_backend_heartbeat(backend_id="a", pid=1, started_at=1.0)
