"""Routing index and hygiene streaks (spec sessions-ext-gateway.md §3.1–§3.2, acceptance
behaviours 7–10), on SQLite and PostgreSQL."""

from __future__ import annotations

import multiprocessing
import threading

import pytest
import sqlalchemy as sa


def _target(store, backend) -> str:
    return str(store.path) if backend == "sqlite" else \
        store.url.render_as_string(hide_password=False)


def _trace(store):
    seen: list[tuple[str, object]] = []

    def hook(conn, cursor, statement, parameters, context, executemany):
        seen.append((statement, parameters))

    sa.event.listen(store.engine, "before_cursor_execute", hook)
    return seen, lambda: sa.event.remove(store.engine, "before_cursor_execute", hook)


def test_gw7_scopes_blanks_types_and_chunked_deletes(store):
    """Behaviour 7: one key in scopes a/b is independent; a blank key or entry writes
    nothing; a bare str of keys and a non-str entry ⇒ TypeError; deleting 2000 keys binds at
    most 900 per statement."""
    assert store.save_gateway_routing_entry("k", "A", scope="a")
    assert store.save_gateway_routing_entry("k", "B", scope="b")
    assert store.delete_gateway_routing_entries(["k"], scope="a") == 1
    assert store.load_gateway_routing_entries(scope="a") == {}
    assert store.load_gateway_routing_entries(scope="b") == {"k": "B"}
    seen, stop = _trace(store)
    try:
        assert store.save_gateway_routing_entry("", "E") is False
        assert store.save_gateway_routing_entry("k", "  ") is False
        assert store.delete_gateway_routing_entries([]) == 0
    finally:
        stop()
    assert seen == []
    with pytest.raises(TypeError):
        store.delete_gateway_routing_entries("k")
    with pytest.raises(TypeError):
        store.save_gateway_routing_entry("k", b"E")  # type: ignore[arg-type]
    keys = [f"key{i:05d}" for i in range(2000)]
    assert store.replace_gateway_routing_entries({k: "e" for k in keys}, scope="big") == 2000
    seen, stop = _trace(store)
    try:
        assert store.delete_gateway_routing_entries(keys + keys[:5] + [""], scope="big") == 2000
    finally:
        stop()
    deletes = [p for st, p in seen if st.startswith("DELETE FROM gateway_routing")]
    assert len(deletes) == 3 and max(len(p) - 1 for p in deletes) <= 900
    assert store.load_gateway_routing_entries(scope="big") == {}


def test_gw8_compare_and_set_saves_survive_replays(store):
    """Behaviour 8: if_current=None inserts (replay ⇒ True, one row); a CAS from E1 moves to
    E2; a stale replay of the first save ⇒ False and leaves E2; a plain save still
    overwrites."""
    assert store.save_gateway_routing_entry("K", "E1", if_current=None)
    assert store.save_gateway_routing_entry("K", "E1", if_current=None)
    assert store.load_gateway_routing_entries() == {"K": "E1"}
    assert store.save_gateway_routing_entry("K", "E2", if_current="E1")
    assert store.save_gateway_routing_entry("K", "E2", if_current="E1")  # replay
    assert store.save_gateway_routing_entry("K", "E1", if_current=None) is False
    assert store.save_gateway_routing_entry("K", "E3", if_current="E1") is False
    assert store.load_gateway_routing_entries() == {"K": "E2"}
    assert store.save_gateway_routing_entry("K", "E1")
    assert store.load_gateway_routing_entries() == {"K": "E1"}


def test_gw9_replace_is_authoritative_per_scope_and_atomic(store):
    """Behaviour 9: replace drops keys absent from the snapshot and leaves scope b alone; a
    failure injected mid-replace changes nothing; 5000 entries commit in one transaction."""
    store.replace_gateway_routing_entries({"x": "1", "y": "2"}, scope="a")
    store.save_gateway_routing_entry("x", "b1", scope="b")
    assert store.replace_gateway_routing_entries({"y": "3", "z": "4", "": "skip",
                                                  "w": " "}, scope="a") == 2
    assert store.load_gateway_routing_entries(scope="a") == {"y": "3", "z": "4"}
    assert store.load_gateway_routing_entries(scope="b") == {"x": "b1"}
    with pytest.raises(TypeError):
        store.replace_gateway_routing_entries([("y", "3")], scope="a")  # type: ignore[arg-type]

    def fail(conn, cursor, statement, parameters, context, executemany):
        if statement.startswith("INSERT INTO gateway_routing"):
            raise RuntimeError("injected mid-replace")

    sa.event.listen(store.engine, "before_cursor_execute", fail)
    try:
        with pytest.raises(Exception, match="injected mid-replace"):
            store.replace_gateway_routing_entries({"q": "9"}, scope="a")
    finally:
        sa.event.remove(store.engine, "before_cursor_execute", fail)
    assert store.load_gateway_routing_entries(scope="a") == {"y": "3", "z": "4"}
    big = {f"k{i:05d}": f"e{i}" for i in range(5000)}
    seen, stop = _trace(store)
    try:
        assert store.replace_gateway_routing_entries(big, scope="a") == 5000
    finally:
        stop()
    commits = [st for st, _ in seen if st.strip().upper() in ("COMMIT", "BEGIN IMMEDIATE")]
    assert len(commits) <= 2  # at most one BEGIN IMMEDIATE and one COMMIT (SQLite)
    assert store.load_gateway_routing_entries(scope="a") == big


def _bump(target, go, out, n):
    from hermes_data.sessions.store import SessionStore

    with SessionStore(target) as s:
        go.wait(30)
        try:
            for _ in range(n):
                s.increment_hygiene_failure_streak("chat")
            out.put(None)
        except Exception as exc:  # noqa: BLE001 - reported to the parent
            out.put(repr(exc))


def test_gw10_hygiene_streak_counts_every_call_under_concurrency(store, backend):
    """Behaviour 10: 1, 2, 3; reset then 1; blank ⇒ 1 with no write; 8 threads × 50 and
    2 processes × 50 on one key ⇒ exactly 500."""
    assert [store.increment_hygiene_failure_streak("c") for _ in range(3)] == [1, 2, 3]
    store.reset_hygiene_failure_streak("c")
    assert store.increment_hygiene_failure_streak("c") == 1
    seen, stop = _trace(store)
    try:
        assert store.increment_hygiene_failure_streak("") == 1
        store.reset_hygiene_failure_streak(" ")
    finally:
        stop()
    assert seen == []
    ctx = multiprocessing.get_context("spawn")
    go, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_bump, args=(_target(store, backend), go, out, 50))
             for _ in range(2)]
    for p in procs:
        p.start()
    errors: list[str] = []

    def run():
        try:
            for _ in range(50):
                store.increment_hygiene_failure_streak("chat")
        except Exception as exc:  # noqa: BLE001
            errors.append(repr(exc))

    threads = [threading.Thread(target=run) for _ in range(8)]
    go.set()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    results = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(30)
    assert errors == [] and results == [None, None]
    assert store.increment_hygiene_failure_streak("chat") == 501
