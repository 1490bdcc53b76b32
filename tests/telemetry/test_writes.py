"""Write API: lifecycle, counters, COALESCE rules, atomicity and the smaller tables."""

from __future__ import annotations

import sqlite3
from datetime import timedelta

import pytest

from hermes_data.telemetry import reads as R
from hermes_data.telemetry import writes as W
from hermes_data.telemetry.store import TelemetryStore

from .conftest import NOW, iso, sql


def rows(store: TelemetryStore, text: str, *args) -> list[tuple]:
    return sql(store, text, *args)


# ----------------------------------------------------------------------------- runs
def test_start_run_creates_row_and_is_idempotent(store):
    W.start_run(store, "s1", "m1", "cron", "job", profile="work", started_at=NOW)
    W.start_run(store, "s1", "m2", "cli", "other", profile="home")
    run = R.get_run(store, "s1")
    assert (run.model, run.platform, run.cron_job_id, run.profile, run.status) == \
        ("m1", "cron", "job", "work", "running")
    assert run.started_at == NOW.isoformat()
    assert R.get_run(store, "missing") is None


def test_start_run_fills_only_null_facts_of_a_lazily_created_row(store):
    W.record_llm_call(store, "s1", iso(2026, 7, 20, 10, 0, 0), "m", "p", 1, 1, 0.1, 5)
    W.start_run(store, "s1", "other-model", "telegram", None, profile="work",
                started_at=iso(2026, 7, 20, 9, 0, 0))
    run = R.get_run(store, "s1")
    assert run.platform == "telegram" and run.profile == "work"
    assert run.model == "m"  # first non-null wins
    assert run.started_at == iso(2026, 7, 20, 10, 0, 0)  # never rewritten
    assert run.api_calls == 1


def test_end_run_sets_status_and_duration(store):
    W.start_run(store, "s1", "m", "cli", started_at=iso(2026, 7, 20, 10, 0, 0))
    W.end_run(store, "s1", "ok", iso(2026, 7, 20, 10, 0, 2, 500000))
    run = R.get_run(store, "s1")
    assert run.status == "ok" and run.ended_at == iso(2026, 7, 20, 10, 0, 2, 500000)
    assert run.duration_ms == 2500  # rounded: a bare CAST of the julianday product gave 2499


def test_end_run_lazily_creates_a_closed_row(store):
    W.end_run(store, "orphan", "interrupted", NOW)
    run = R.get_run(store, "orphan")
    assert (run.status, run.started_at, run.ended_at, run.duration_ms) == \
        ("interrupted", NOW.isoformat(), NOW.isoformat(), 0)


@pytest.mark.parametrize("terminal", ["error", "interrupted"])
def test_end_run_keeps_terminal_status_against_a_later_ok(store, terminal):
    W.start_run(store, "s1", "m", "cli", started_at=NOW)
    W.end_run(store, "s1", terminal, NOW + timedelta(seconds=1))
    W.end_run(store, "s1", "ok", NOW + timedelta(seconds=5))
    run = R.get_run(store, "s1")
    assert run.status == terminal
    assert run.ended_at == (NOW + timedelta(seconds=5)).isoformat()  # still refreshed
    assert run.duration_ms == 5000
    W.end_run(store, "s1", "ok", NOW + timedelta(seconds=6), overwrite_terminal=True)
    assert R.get_run(store, "s1").status == "ok"


def test_end_run_running_and_error_overwrite_ok(store):
    W.start_run(store, "s1", "m", "cli", started_at=NOW)
    W.end_run(store, "s1", "ok", NOW)
    W.end_run(store, "s1", "error", NOW)
    assert R.get_run(store, "s1").status == "error"
    W.end_run(store, "s1", "running", NOW)
    assert R.get_run(store, "s1").status == "running"


# ----------------------------------------------------------------------------- calls
def test_record_llm_call_lazily_creates_and_accumulates(store):
    t1, t2 = iso(2026, 7, 20, 10, 0, 0), iso(2026, 7, 20, 10, 1, 0)
    id1 = W.record_llm_call(store, "s1", t1, None, None, 100, 10, 0.5, 200, 7, 3, 9)
    id2 = W.record_llm_call(store, "s1", t2, "m", "p", 50, 5, 0.25, 100, 1, 2, 4,
                            estimated=True, provider_assumed=True, moa_preset="mix")
    W.record_llm_call(store, "s1", t2, "later", "later-p", 1, 1, 0.0, 1, moa_preset="")
    assert id2 == id1 + 1
    run = R.get_run(store, "s1")
    assert run.started_at == t1 and run.status == "running"
    assert (run.tokens_in, run.tokens_out, run.cost_usd, run.api_calls) == (151, 16, 0.75, 3)
    assert (run.cache_read_tokens, run.cache_write_tokens) == (8, 5)
    assert (run.estimated_llm_calls, run.provider_assumed_calls, run.moa_calls) == (1, 1, 1)
    assert (run.model, run.provider) == ("m", "p")  # first non-null, never overwritten
    calls = rows(store, "SELECT reasoning_tokens, estimated, provider_assumed, moa_preset "
                        "FROM llm_calls ORDER BY id")
    assert calls == [(9, 0, 0, None), (4, 1, 1, "mix"), (0, 0, 0, None)]


def test_record_llm_call_does_not_duplicate_after_start_run(store):
    W.start_run(store, "s1", "m", "cli", started_at=NOW)
    W.record_llm_call(store, "s1", NOW + timedelta(seconds=3), "m", "p", 1, 2, 0.1, 1)
    assert rows(store, "SELECT COUNT(*), MIN(started_at) FROM runs") == [(1, NOW.isoformat())]


def test_record_llm_call_turn_identity_and_attribution(store):
    W.record_llm_call(store, "s1", NOW, "m", "p", 1, 1, 0.1, 1, turn_id="", task_id="",
                      api_request_id="", sender_id="", profile=None)
    W.record_llm_call(store, "s1", NOW, "m", "p", 1, 1, 0.1, 1, turn_id="s1:t:0001",
                      task_id="t", api_request_id="req-1", sender_id="alice", profile="work")
    W.record_llm_call(store, "s1", NOW, "m", "p", 1, 1, 0.1, 1, sender_id="bob", profile="home")
    assert rows(store, "SELECT turn_id, task_id, api_request_id FROM llm_calls ORDER BY id")[:2] == \
        [(None, None, None), ("s1:t:0001", "t", "req-1")]
    run = R.get_run(store, "s1")
    assert (run.sender_id, run.profile) == ("alice", "work")


def test_set_sender_and_profile_first_non_empty_wins(store):
    W.start_run(store, "s1", "m", "cli")
    W.set_sender(store, "s1", "")
    W.set_profile(store, "s1", None)
    assert (R.get_run(store, "s1").sender_id, R.get_run(store, "s1").profile) == (None, None)
    W.set_sender(store, "s1", "alice")
    W.set_sender(store, "s1", "bob")
    W.set_profile(store, "s1", "work")
    W.set_profile(store, "s1", "home")
    assert (R.get_run(store, "s1").sender_id, R.get_run(store, "s1").profile) == ("alice", "work")


def test_record_llm_call_is_one_immediate_transaction_of_two_statements(sqlite_store):
    """SQLite's statement trace (PostgreSQL: test_record_llm_call_on_postgres_is_one_transaction)."""
    store = sqlite_store
    conn = store.connection()
    seen: list[str] = []
    conn.set_trace_callback(seen.append)
    try:
        W.record_llm_call(store, "s1", NOW, "m", "p", 1, 1, 0.1, 1)
    finally:
        conn.set_trace_callback(None)
    heads = [s.split(None, 2)[:2] for s in seen]
    assert heads == [["BEGIN", "IMMEDIATE"], ["INSERT", "INTO"], ["INSERT", "INTO"], ["COMMIT"]]
    assert "ON CONFLICT" in seen[2] and "runs" in seen[2]


def test_record_llm_call_on_postgres_is_one_transaction(pg_store):
    """PostgreSQL twin of the trace test: one transaction with the call insert (RETURNING its
    id) and the run upsert (ON CONFLICT), no ``BEGIN IMMEDIATE``."""
    seen: list[str] = []
    conn = pg_store.connection()
    import psycopg

    class Tracing(psycopg.Cursor):
        def execute(self, query, params=None, **kw):
            seen.append(str(query))
            return super().execute(query, params, **kw)

    conn.cursor_factory = Tracing
    try:
        call_id = W.record_llm_call(pg_store, "s1", NOW, "m", "p", 1, 1, 0.1, 1)
    finally:
        conn.cursor_factory = psycopg.Cursor
    heads = [s.split(None, 2)[:2] for s in seen]
    assert heads == [["INSERT", "INTO"], ["INSERT", "INTO"]], seen
    assert "RETURNING llm_calls.id" in seen[0] and "ON CONFLICT (session_id)" in seen[1]
    assert not any("IMMEDIATE" in s for s in seen)
    assert call_id == 1 and R.get_run(pg_store, "s1").api_calls == 1
    assert conn.info.transaction_status == 0  # committed: nothing left open on the connection


def test_record_llm_call_is_atomic_on_postgres(pg_store):
    # A trigger makes the run-row upsert fail for one session: the call row must roll back too.
    import psycopg

    rows(pg_store, """CREATE FUNCTION boom() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN IF NEW.session_id = 'bad' THEN RAISE EXCEPTION 'boom'; END IF; RETURN NEW; END $$""")
    rows(pg_store, "CREATE TRIGGER boom_ins BEFORE INSERT ON runs FOR EACH ROW EXECUTE FUNCTION boom()")
    try:
        with pytest.raises(psycopg.errors.RaiseException, match="boom"):
            W.record_llm_call(pg_store, "bad", NOW, "m", "p", 1, 1, 0.1, 1)
        assert rows(pg_store, "SELECT COUNT(*) FROM llm_calls") == [(0,)]
        W.record_llm_call(pg_store, "good", NOW, "m", "p", 1, 1, 0.1, 1)  # connection still usable
        assert rows(pg_store, "SELECT COUNT(*) FROM llm_calls") == [(1,)]
    finally:
        rows(pg_store, "DROP TRIGGER boom_ins ON runs")
        rows(pg_store, "DROP FUNCTION boom()")


def test_record_llm_call_is_atomic(sqlite_store):
    """SQLite trigger syntax (PostgreSQL: test_record_llm_call_is_atomic_on_postgres)."""
    store = sqlite_store
    # A trigger makes the run-row upsert fail for one session: the call row must roll back too.
    store.connection().executescript("""
        CREATE TRIGGER boom_ins BEFORE INSERT ON runs WHEN NEW.session_id = 'bad'
        BEGIN SELECT RAISE(ABORT, 'boom'); END;
    """)
    with pytest.raises(sqlite3.IntegrityError):
        W.record_llm_call(store, "bad", NOW, "m", "p", 1, 1, 0.1, 1)
    assert rows(store, "SELECT COUNT(*) FROM llm_calls") == [(0,)]
    W.record_llm_call(store, "good", NOW, "m", "p", 1, 1, 0.1, 1)  # connection still usable
    assert rows(store, "SELECT COUNT(*) FROM llm_calls") == [(1,)]


def test_sqlalchemy_connection_target_gives_the_same_rows(store, db_path):
    W.record_llm_call(store, "a", NOW, "m", "p", 3, 4, 0.5, 9, 1, 2, 3, True, False, "x",
                      turn_id="a:t:1", sender_id="s")
    with store.engine.connect() as conn:
        W.record_llm_call(conn, "b", NOW, "m", "p", 3, 4, 0.5, 9, 1, 2, 3, True, False, "x",
                          turn_id="b:t:1", sender_id="s")
        run_b = R.get_run(conn, "b")
    run_a = R.get_run(store, "a")
    assert {k: getattr(run_a, k) for k in run_a.__slots__ if k != "session_id"} == \
        {k: getattr(run_b, k) for k in run_b.__slots__ if k != "session_id"}


def test_record_tool_call_counts_on_existing_run_only(store):
    W.start_run(store, "s1", "m", "cli")
    W.record_tool_call(store, "s1", NOW, "bash", True, 10, turn_id="s1:t:1", tool_call_id="c1")
    W.record_tool_call(store, "s1", NOW, "bash", False, 20)
    W.record_tool_call(store, "nobody", NOW, "bash", True, 5)
    assert R.get_run(store, "s1").tool_calls == 2
    assert R.get_run(store, "nobody") is None
    assert rows(store, "SELECT session_id, ok, turn_id, tool_call_id FROM tool_calls ORDER BY id") == \
        [("s1", 1, "s1:t:1", "c1"), ("s1", 0, None, None), ("nobody", 1, None, None)]


# ----------------------------------------------------------------------------- subagents
def test_subagent_start_first_edge_wins_and_skips_empty_ids(store):
    assert W.record_subagent_start(store, "c1", "p1", "", "", "sa-1-abc", "", NOW)
    assert not W.record_subagent_start(store, "c1", "p2", "p2:t:1")
    assert not W.record_subagent_start(store, "", "p1")
    assert not W.record_subagent_start(store, "c2", "")
    edge = R.get_subagent_edge(store, "c1")
    assert (edge.parent_session_id, edge.parent_turn_id, edge.parent_subagent_id,
            edge.child_subagent_id, edge.child_role) == ("p1", None, None, "sa-1-abc", None)
    assert rows(store, "SELECT COUNT(*) FROM subagent_edges") == [(1,)]


def test_subagent_stop_finalizes_and_backfills(store):
    W.record_subagent_start(store, "c1", "p1", child_role="coder", started_at=NOW)
    W.record_subagent_stop(store, "c1", "p1", "completed", "reviewer", NOW + timedelta(seconds=9))
    edge = R.get_subagent_edge(store, "c1")
    assert (edge.child_status, edge.child_role, edge.stopped_at) == \
        ("completed", "coder", (NOW + timedelta(seconds=9)).isoformat())
    W.record_subagent_stop(store, "c2", "p1", "failed", "helper", NOW)
    back = R.get_subagent_edge(store, "c2")
    assert (back.started_at, back.stopped_at, back.child_status, back.child_role,
            back.child_subagent_id) == (NOW.isoformat(), NOW.isoformat(), "failed", "helper", None)
    W.record_subagent_stop(store, "c3", "", "failed")  # no parent: nothing to backfill
    assert R.get_subagent_edge(store, "c3") is None
    assert [e.child_session_id for e in R.list_subagent_edges(store, "p1")] == ["c1", "c2"]


# ----------------------------------------------------------------------------- budget
def test_try_budget_alert_fires_once_per_key(store):
    args = ("global", None, "daily", "2026-07-20", "soft", 8.0, 10.0)
    assert W.try_budget_alert(store, *args) is True
    assert W.try_budget_alert(store, *args) is False
    assert W.try_budget_alert(store, "global", "", "daily", "2026-07-20", "hard", 10.0, 10.0)
    assert W.try_budget_alert(store, "global", "", "daily", "2026-07-21", "soft", 8.0, 10.0)
    assert rows(store, "SELECT scope_id FROM budget_alerts") == [("",), ("",), ("",)]


# ----------------------------------------------------------------------------- free models
def test_known_free_models_exact_pair_and_wildcard(store):
    assert W.record_free_model(store, "m:free", "openrouter")
    assert not W.record_free_model(store, "m:free", "openrouter")
    assert R.is_known_free_model(store, "m:free", "openrouter")
    assert not R.is_known_free_model(store, "m:free", "other")
    assert not R.is_known_free_model(store, "unknown", "openrouter")
    assert W.backfill_known_free_models(store, ["w", "w", "m:free", ""]) == 2
    assert W.backfill_known_free_models(store, ["w"]) == 0
    assert R.is_known_free_model(store, "w", "anyone")
    assert rows(store, "SELECT provider FROM known_free_models WHERE model='m:free' ORDER BY 1") == \
        [("",), ("openrouter",)]


@pytest.mark.parametrize("model, expected", [
    ("vendor/llama-3", True),          # bare id of vendor/llama-3:free
    ("vendor/llama-3-turbo", True),    # suffix after a '-' boundary
    ("vendor/llama-3:beta", True),
    ("vendor/llama-30", False),        # no token boundary
    ("vendor/other", False),
])
def test_free_tier_transition_rules(store, model, expected):
    W.record_free_model(store, "vendor/llama-3:free", "openrouter")
    assert R.is_free_tier_transition(store, model, "openrouter") is expected
    assert R.is_free_tier_transition(store, model, "elsewhere") is False


def test_free_tier_transition_via_wildcard(store):
    W.backfill_known_free_models(store, ["vendor/x:free"])
    assert R.is_free_tier_transition(store, "vendor/x", "any")
    assert not R.is_free_tier_transition(store, "vendor/y", "any")


def test_free_paid_transition_first_flip_wins_and_prefers_specific_row(store):
    W.record_free_model(store, "m", "", now=iso(2026, 7, 1, 0, 0, 0))
    W.record_free_model(store, "m", "p", now=iso(2026, 7, 2, 0, 0, 0))
    assert W.record_free_paid_transition(store, "m", "p", "s1", 0.02, now=NOW)
    assert not W.record_free_paid_transition(store, "m", "p", "s2", 0.5)
    assert W.record_free_paid_transition(store, "m", "q", "s3", 0.1, now=NOW)
    assert W.record_free_paid_transition(store, "renamed", "p", "s4", 0.1, now=NOW)
    got = {(t.model, t.provider): t for t in R.recent_free_paid_transitions(store, 0)}
    assert got["m", "p"].first_free_seen_at == iso(2026, 7, 2, 0, 0, 0)
    assert got["m", "p"].session_id == "s1" and got["m", "p"].first_paid_cost_usd == 0.02
    assert got["m", "q"].first_free_seen_at == iso(2026, 7, 1, 0, 0, 0)  # wildcard fallback
    assert got["renamed", "p"].first_free_seen_at is None


# ----------------------------------------------------------------------------- unavailable
def test_model_unavailable_upsert_counts_and_keeps_first_seen(store):
    first = W.record_model_unavailable(store, "m", "p", 404, "gone", now=NOW)
    assert first.occurrences == 1 and first.first_seen_at == first.last_seen_at == NOW.isoformat()
    later = NOW + timedelta(hours=1)
    second = W.record_model_unavailable(store, "m", "p", 410, "x" * 500, now=later)
    assert (second.occurrences, second.error_code, second.first_seen_at, second.last_seen_at) == \
        (2, 410, NOW.isoformat(), later.isoformat())
    assert R.get_model_unavailable(store, "m", "p").error_message == "x" * 500
    assert R.get_model_unavailable(store, "m", "") is None
    W.record_model_unavailable(store, "n", "p", 404, now=NOW + timedelta(hours=2))
    assert [u.model for u in R.recent_model_unavailable(store, 0)] == ["n", "m"]


# ----------------------------------------------------------------------------- pricing
SNAP = {"input_cost_per_million": 1.0, "output_cost_per_million": 2.0,
        "cache_read_cost_per_million": None, "cache_write_cost_per_million": None,
        "request_cost": None, "source": "core", "source_url": "u1", "pricing_version": "v1",
        "fetched_at": "f1"}


@pytest.mark.parametrize("change, writes", [
    ({}, False),
    ({"source_url": "u2", "fetched_at": "f2"}, False),          # context only
    ({"input_cost_per_million": 1.0 + 1e-12}, False),           # within tolerance
    ({"input_cost_per_million": 1.5}, True),
    ({"cache_read_cost_per_million": 0.1}, True),               # NULL -> value
    ({"output_cost_per_million": None}, True),                  # value -> NULL
    ({"pricing_version": "v2"}, True),
    ({"source": "catalog"}, True),
])
def test_pricing_snapshot_change_detection(store, change, writes):
    assert W.record_pricing_snapshot(store, "p", "m", SNAP, "https://x", "chat")
    assert W.record_pricing_snapshot(store, "p", "m", {**SNAP, **change}, "https://y", "resp") is writes
    assert len(rows(store, "SELECT id FROM pricing_snapshots")) == (2 if writes else 1)


def test_pricing_snapshot_resolved_model_and_reads(store):
    assert W.record_pricing_snapshot(store, "p", "m-2026", SNAP)
    assert W.record_pricing_snapshot(store, "p", "m-2026", SNAP, resolved_model="m")
    assert not W.record_pricing_snapshot(store, "p", "m-2026", SNAP, resolved_model="m")
    assert W.record_pricing_snapshot(store, "p", "m-2026", SNAP, resolved_model=None)
    assert W.record_pricing_snapshot(store, "q", "m-2026", SNAP)  # provider scoped
    latest = R.get_latest_pricing_snapshot(store, "p", "m-2026")
    assert latest.resolved_model is None and latest.id == 3 and latest.base_url == ""
    assert R.get_latest_pricing_snapshot(store, "p", "nope") is None
    assert [(s.provider, s.id) for s in R.list_latest_pricing_snapshots(store)] == [("p", 3), ("q", 4)]


def test_models_needing_pricing_snapshot(store):
    for provider, model in [("p", "a"), ("p", "b"), (None, "c"), ("p", ""), ("p", None)]:
        W.record_llm_call(store, "s", NOW, model, provider, 1, 1, 0.0, 1)
    W.record_pricing_snapshot(store, "p", "a", SNAP)
    assert R.count_distinct_llm_models(store) == 3
    assert R.models_needing_pricing_snapshot(store) == [(None, "c"), ("p", "b")]


# ----------------------------------------------------------------------------- caches
def test_endpoint_cache_upsert_and_eviction(store):
    W.put_endpoint_payload_cache(store, "providers", "[24]", "{}", 0, now=NOW - timedelta(hours=7))
    for i in range(70):
        W.put_endpoint_payload_cache(store, "providers", f"[{i}]", f'{{"i":{i}}}', i,
                                     now=NOW + timedelta(seconds=i))
    W.put_endpoint_payload_cache(store, "other", "[1]", "{}", 1, now=NOW)
    keys = {r[0] for r in rows(store, "SELECT cache_key FROM endpoint_payload_cache "
                                      "WHERE cache_name='providers'")}
    assert len(keys) == 64 and "[5]" not in keys and "[69]" in keys and "[24]" in keys
    got = R.get_endpoint_payload_cache(store, "providers", "[69]")
    assert (got.payload_json, got.rows_count) == ('{"i":69}', 69)
    assert R.get_endpoint_payload_cache(store, "other", "[1]") is not None


def test_efficiency_cache_key_and_age_eviction(store):
    W.put_model_efficiency_cache(store, 24, False, 50, "old", 1, now=NOW - timedelta(hours=7))
    W.put_model_efficiency_cache(store, 48, True, 10, "new", 2, now=NOW)
    assert R.get_model_efficiency_cache(store, 24, False, 50) is None
    assert R.get_model_efficiency_cache(store, 48, True, 10).payload_json == "new"
    assert rows(store, "SELECT cache_key FROM model_efficiency_cache") == [("(48, 1, 10)",)]
