"""Accounting of the agent turn API (spec sessions-ext-agent.md §3.1–§3.4; acceptance
behaviours 5–17), on SQLite files and PostgreSQL."""

from __future__ import annotations

import os
import sqlite3
import threading
import time

import pytest

from hermes_data.errors import ConfigurationError
from hermes_data.sessions.agent import token_writer
from hermes_data.sessions.rows import ModelRoute, UsageTotals
from hermes_data.sessions.store import SessionStore
from hermes_data.sessions.agent.token_writer import coalesce

from tests.sessions.conftest import sqlite_only


def _usage(store, sid):
    with store.engine.connect() as conn:
        rows = conn.exec_driver_sql(
            "SELECT model, billing_provider, task, api_call_count, input_tokens, output_tokens, "
            "estimated_cost_usd, actual_cost_usd FROM session_model_usage WHERE session_id = ? "
            "ORDER BY task, model", (sid,)).fetchall()
    return [tuple(r) for r in rows]


def _sql(store, statement, params=()):
    with store.engine.begin() as conn:
        result = conn.exec_driver_sql(statement, params)
        return result.fetchall() if result.returns_rows else None


def test_ab5_queued_deltas_are_read_back_through_the_barrier(store):
    """AB5: 100 queued 1-token deltas, then get_session ⇒ input_tokens == 100; the usage
    table agrees."""
    for _ in range(100):
        store.queue_token_counts("s5", input_tokens=1, model="m", billing_provider="p",
                                 api_call_count=1)
    row = store.get_session("s5")
    assert row is not None and row.input_tokens == 100
    assert _usage(store, "s5") == [("m", "p", "", 100, 100, 0, 0.0, 0.0)]


def _delta(**kw):
    base = {"input_tokens": 0, "output_tokens": 0, "cache_read_tokens": 0,
            "cache_write_tokens": 0, "reasoning_tokens": 0, "api_call_count": 0,
            "estimated_cost_usd": None, "actual_cost_usd": None, "model": None,
            "cost_status": None, "cost_source": None, "pricing_version": None,
            "billing_provider": None, "billing_base_url": None, "billing_mode": None,
            "absolute": False}
    base.update(kw)
    return base


def test_ab6_coalescing_merges_only_adjacent_same_route_deltas(store):
    """AB6: A(r1) B(r1) C(r2) D(r1) apply as AB, C, D with the state of sequential
    application; an absolute delta never merges."""
    r1 = dict(model="m1", billing_provider="p1")
    r2 = dict(model="m2", billing_provider="p2")
    batch = [("s", _delta(input_tokens=1, estimated_cost_usd=0.5, cost_status="est", **r1)),
             ("s", _delta(input_tokens=2, api_call_count=1, cost_status="est", **r1)),
             ("s", _delta(output_tokens=3, cost_status="final", **r2)),
             ("s", _delta(input_tokens=4, actual_cost_usd=1.0, cost_status="est", **r1))]
    merged = coalesce(batch)
    assert [(d["model"], d["input_tokens"], d["estimated_cost_usd"], d["actual_cost_usd"])
            for _, d in merged] == [("m1", 3, 0.5, None), ("m2", 0, None, None),
                                    ("m1", 4, None, 1.0)]
    absolute = [("s", _delta(input_tokens=1, **r1)), ("s", _delta(input_tokens=5, absolute=True, **r1)),
                ("s", _delta(input_tokens=1, **r1))]
    assert len(coalesce(absolute)) == 3
    # The merged effect equals sequential application (first-accounted route, last cost status).
    for sid, d in batch:
        store.update_token_counts("seq", **{k: v for k, v in d.items()})
    for sid, d in batch:
        store.queue_token_counts("que", **{k: v for k, v in d.items()})
    a, b = store.get_session("seq"), store.get_session("que")
    for field in ("model", "billing_provider", "input_tokens", "output_tokens",
                  "estimated_cost_usd", "actual_cost_usd"):
        assert getattr(a, field) == getattr(b, field), field
    assert (a.model, a.billing_provider, a.input_tokens) == ("m1", "p1", 7)
    assert _sql(store, "SELECT cost_status FROM sessions WHERE id = 'que'") == [("est",)]
    assert _usage(store, "seq") == _usage(store, "que")


def test_ab7_accounting_creates_unknown_rows_that_take_a_real_source_once(tmp_path, backend,
                                                                         store):
    """AB7: a delta for an unknown id creates ``source='unknown'`` with the owner profile;
    ``create_session(sid, 'telegram')`` before any message sets it; after a message the
    source is fixed."""
    if backend == "sqlite":
        store.close()
        store = SessionStore(tmp_path / "state.db", hermes_root=tmp_path)
    try:
        store.update_token_counts("s7", input_tokens=1)
        row = store.get_session("s7")
        assert row.source == "unknown"
        assert row.profile_name == ("default" if backend == "sqlite" else None)
        store.create_session("s7", "telegram")
        assert store.get_session("s7").source == "telegram"
        store.update_token_counts("s7b", input_tokens=1)
        store.append_message("s7b", "user", "hello")
        store.ensure_session("s7b", "telegram")
        assert store.get_session("s7b").source == "unknown"
    finally:
        if backend == "sqlite":
            store.close()


def test_ab8_first_accounted_route_wins_then_never_reroutes(store):
    """AB8: row (m1,p1); first usage delta (m2,p2) ⇒ (m2,p2); later (m3,p3) ⇒ unchanged; a
    zero delta stamps nothing."""
    store.create_session("s8", "cli", model="m1")
    store.update_session_billing_route("s8", provider="p1", base_url=None)
    store.update_token_counts("s8", model="m9", billing_provider="p9")  # zero: stamps nothing
    assert (store.get_session("s8").model, store.get_session("s8").billing_provider) == ("m1", "p1")
    store.update_token_counts("s8", input_tokens=5, api_call_count=1, model="m2",
                              billing_provider="p2")
    store.update_token_counts("s8", input_tokens=5, api_call_count=1, model="m3",
                              billing_provider="p3")
    row = store.get_session("s8")
    assert (row.model, row.billing_provider, row.input_tokens) == ("m2", "p2", 10)
    # Usage rows follow each call's own route.
    assert [(r[0], r[1]) for r in _usage(store, "s8")] == [("m2", "p2"), ("m3", "p3")]


def test_ab9_model_switch_after_a_queued_old_route_delta(store):
    """AB9: ``update_session_model(sid, 'm9')`` right after queuing an old-route delta: the
    old route never reappears."""
    store.create_session("s9", "cli")
    store.queue_token_counts("s9", input_tokens=3, api_call_count=1, model="old",
                             billing_provider="p")
    store.update_session_model("s9", "m9")
    store.flush_token_counts()
    assert store.get_session("s9").model == "m9"
    store.update_token_counts("s9", input_tokens=1, model="old", billing_provider="p")
    assert store.get_session("s9").model == "m9"


def test_ab10_legacy_null_counter_adds_from_zero(store):
    """AB10: a legacy NULL ``input_tokens`` + incremental 5 ⇒ 5."""
    store.create_session("s10", "cli")
    _sql(store, "UPDATE sessions SET input_tokens = NULL, cache_read_tokens = NULL "
                "WHERE id = 's10'")
    store.update_token_counts("s10", input_tokens=5, cache_read_tokens=2)
    row = _sql(store, "SELECT input_tokens, cache_read_tokens FROM sessions WHERE id = 's10'")
    assert row == [(5, 2)]


def test_ab11_validation_errors_at_the_call_site(tmp_path, store):
    """AB11: negative count, bool, NaN/inf cost ⇒ ValueError; unknown keyword ⇒ TypeError at
    the call site; read-only handle ⇒ ConfigurationError."""
    for bad in ({"input_tokens": -1}, {"output_tokens": True}, {"estimated_cost_usd": float("nan")},
                {"actual_cost_usd": float("inf")}, {"input_tokens": 1.5}):
        with pytest.raises(ValueError):
            store.update_token_counts("s11", **bad)
        with pytest.raises(ValueError):
            store.queue_token_counts("s11", **bad)
    with pytest.raises(TypeError, match="input_tokenz"):
        store.queue_token_counts("s11", input_tokenz=1)
    assert store.get_session("s11") is None
    if store.engine.dialect.name == "sqlite":
        with SessionStore(store.path, read_only=True) as ro:
            with pytest.raises(ConfigurationError):
                ro.queue_token_counts("s11", input_tokens=1)


@pytest.mark.sqlite_only("another connection's file write lock")
def test_ab12_flush_times_out_under_a_held_lock_and_lands_once(store):
    """AB12: ``flush_token_counts(timeout=0.05)`` under another process's write lock ⇒ False,
    no raise; the delta later lands once."""
    store.create_session("s12", "cli")
    holder = sqlite3.connect(store.path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    try:
        store.queue_token_counts("s12", input_tokens=1)
        t0 = time.monotonic()
        assert store.flush_token_counts(timeout=0.05) is False
        assert time.monotonic() - t0 < 2
    finally:
        holder.execute("COMMIT")
        holder.close()
    assert store.flush_token_counts(timeout=30) is True
    assert store.get_session("s12").input_tokens == 1


def test_ab13_concurrent_flushers_and_a_queuer_apply_each_delta_once_in_order(store):
    """AB13: two flushing threads and one queuing 1000 deltas: 1000 applied, each once, in
    enqueue order per session (the last pricing version queued is the one kept)."""
    store.create_session("s13", "cli")
    done = threading.Event()
    errors: list[BaseException] = []

    def flusher():
        try:
            while not done.is_set():
                store.flush_token_counts(timeout=1)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=flusher) for _ in range(2)]
    for t in threads:
        t.start()
    for i in range(1000):
        store.queue_token_counts("s13", input_tokens=1, pricing_version=f"v{i // 10:03d}")
    done.set()
    for t in threads:
        t.join()
    assert errors == []
    assert store.flush_token_counts(timeout=60)
    row = _sql(store, "SELECT input_tokens, pricing_version FROM sessions WHERE id = 's13'")
    assert row == [(1000, "v099")]


def test_ab14_close_drains_then_refuses_and_idle_writers_respawn(tmp_path, backend, store,
                                                                 monkeypatch):
    """AB14: ``close()`` drains the queue; enqueue after close raises ConfigurationError; an
    idle-retired writer is respawned."""
    monkeypatch.setattr(token_writer, "IDLE_RETIRE_S", 0.05)
    store.create_session("s14", "cli")
    store.queue_token_counts("s14", input_tokens=2)
    assert store.flush_token_counts(timeout=30)
    deadline = time.monotonic() + 5
    while store.token_writer._thread is not None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert store.token_writer._thread is None  # retired while idle
    store.queue_token_counts("s14", input_tokens=3)  # respawns a writer
    url = store.url
    store.close()
    with pytest.raises(ConfigurationError):
        store.queue_token_counts("s14", input_tokens=1)
    target = store.path if backend == "sqlite" else url.render_as_string(hide_password=False)
    with SessionStore(target) as again:
        assert again.get_session("s14").input_tokens == 5


@pytest.mark.sqlite_only("os.fork() with a SQLite file; the PostgreSQL writer is the same Python")
def test_ab15_forked_child_starts_with_an_empty_queue(tmp_path, store):
    """AB15: after ``os.fork()`` the child never blocks on the inherited queue and never
    applies the parent's pre-fork deltas; a store the child opens queues and flushes."""
    store.create_session("s15", "cli")
    holder = sqlite3.connect(store.path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    store.queue_token_counts("s15", input_tokens=1)  # the writer waits on the lock
    pid = os.fork()
    if pid == 0:  # child
        code = 1
        try:
            t0 = time.monotonic()
            ok = store.token_writer.pending == 0 and store.token_writer.flush(0.5) \
                and time.monotonic() - t0 < 0.5
            with SessionStore(tmp_path / "child.db") as own:
                own.queue_token_counts("c", input_tokens=4)
                ok = ok and own.flush_token_counts(10) and own.get_session("c").input_tokens == 4
            code = 0 if ok else 1
        finally:
            os._exit(code)
    holder.execute("COMMIT")
    holder.close()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert store.flush_token_counts(timeout=30)
    assert store.get_session("s15").input_tokens == 1


def test_ab16_auxiliary_usage_is_its_own_route_and_best_effort(store):
    """AB16: a ``vision`` row on ``google`` despite an anthropic main route, session counters
    untouched; a failing write returns False, never raises."""
    store.create_session("s16", "cli", model="claude")
    store.update_token_counts("s16", input_tokens=100, api_call_count=1, model="claude",
                              billing_provider="anthropic")
    assert store.record_auxiliary_usage("s16", "vision", model="g", billing_provider="google",
                                        input_tokens=10) is True
    assert store.record_auxiliary_usage("s16", " ") is False
    row = store.get_session("s16")
    assert (row.input_tokens, row.billing_provider) == (100, "anthropic")
    assert _usage(store, "s16") == [("claude", "anthropic", "", 1, 100, 0, 0.0, 0.0),
                                    ("g", "google", "vision", 1, 10, 0, 0.0, 0.0)]
    # A task without a route is billed to 'unknown' / '', never to the session's route.
    store.record_auxiliary_usage("s16", "title_generation", input_tokens=1)
    assert ("unknown", "", "title_generation", 1, 1, 0, 0.0, 0.0) in _usage(store, "s16")
    # Any failure is a WARNING and False (the 20 s patience exhaustion is the same path).
    assert store.record_auxiliary_usage("s16", "vision", input_tokens=-1) is False


def test_ab17_dominant_route_and_usage_totals(store):
    """AB17: the dominant route ignores aux, ``unknown`` and provider-less rows; calls, then
    tokens, then recency; deterministic ties. ``usage_totals``: roots only, archive filter,
    actual over estimated cost."""
    sid = "s17"
    store.create_session(sid, "cli")
    store.update_token_counts(sid, input_tokens=1, api_call_count=3, model="a", billing_provider="p")
    store.update_token_counts(sid, input_tokens=50, api_call_count=3, model="b", billing_provider="p")
    _sql(store, "INSERT INTO session_model_usage (session_id, model, billing_provider, "
                "api_call_count, input_tokens) VALUES ('s17', 'z', '', 9, 99), "
                "('s17', 'unknown', 'p', 9, 99)")
    store.record_auxiliary_usage(sid, "vision", model="v", billing_provider="g", api_call_count=20)
    assert store.get_dominant_session_model_route(sid) == ModelRoute("b", "p", "", "", 3)
    store.update_token_counts("tie", input_tokens=1, api_call_count=1, model="y", billing_provider="p")
    _sql(store, "INSERT INTO session_model_usage (session_id, model, billing_provider, "
                "api_call_count, input_tokens, last_seen) SELECT 'tie', 'x', 'p', 1, 1, last_seen "
                "FROM session_model_usage WHERE session_id = 'tie'")
    assert store.get_dominant_session_model_route("tie").model == "x"
    assert store.get_dominant_session_model_route("none") is None
    _sql(store, "INSERT INTO sessions (id, source, started_at, message_count, input_tokens, "
                "output_tokens, estimated_cost_usd, actual_cost_usd, parent_session_id, archived) "
                "VALUES ('r1', 'cli', 1, 2, 10, 5, 1.0, 0.25, NULL, 0), "
                "('r2', 'cli', 1, 1, 100, 0, 2.0, NULL, NULL, 1), "
                "('c1', 'cli', 1, 5, 1000, 0, 9.0, NULL, 'r1', 0), "
                "('r0', 'cli', 1, 0, 7, 0, 3.0, NULL, NULL, 0)")
    _sql(store, "DELETE FROM sessions WHERE id IN ('s17', 'tie')")
    store.queue_token_counts("r1", output_tokens=1)
    assert store.usage_totals() == UsageTotals(16, 0.25)
    assert store.usage_totals(include_archived=True) == UsageTotals(116, 2.25)
    assert store.usage_totals(min_message_count=0) == UsageTotals(23, 3.25)


def test_prune_token_filters_see_queued_deltas(store):
    """§3.0 token barrier: a prune count or prune with a token/cost filter flushes the
    handle's queue first."""
    from hermes_data.sessions.core.maintenance import count_prune_matches, prune_sessions

    store.create_session("big", "cli")
    store.end_session("big", "user_exit")
    _sql(store, "UPDATE sessions SET started_at = 1000, ended_at = 1001 WHERE id = 'big'")
    store.queue_token_counts("big", input_tokens=5000)
    assert count_prune_matches(store, older_than_days=None, min_tokens=4000) == 1
    store.queue_token_counts("big", estimated_cost_usd=2.0)
    assert prune_sessions(store, older_than_days=None, min_cost=1.5) == 1
