"""Read API: typed reports, budget scopes (incl. the cron subtree), windows and query plans."""

from __future__ import annotations

from datetime import timedelta

import pytest

from hermes_data.errors import ConfigurationError
from hermes_data.telemetry import reads as R
from hermes_data.telemetry import writes as W
from hermes_data.telemetry.types import DelegationJoin, ScopeSpend, StatsSummary

from .conftest import NOW, iso, sql

H = timedelta(hours=1)


def call(store, sid, at, cost, *, model="m", provider="p", tin=10, tout=5, est=False, turn=None,
         assumed=False, latency=100):
    W.record_llm_call(store, sid, at, model, provider, tin, tout, cost, latency, estimated=est,
                      provider_assumed=assumed, turn_id=turn)


# ----------------------------------------------------------------------------- delegation tree
@pytest.fixture
def tree(store):
    """cron root → child (edge with parent_turn_id) → grandchild (edge with parent_turn_id '')
    plus an unrelated run, an orphan child whose parent has no run, and a cycle edge."""
    root = "cron_nightly_20260720_120000"
    W.start_run(store, root, "m", "cron", "nightly", started_at=NOW - 2 * H)
    call(store, root, NOW - 2 * H, 1.0, turn=f"{root}:t:00000001")
    W.record_subagent_start(store, "child", root, f"{root}:t:00000001", started_at=NOW - 2 * H)
    call(store, "child", NOW - 2 * H, 0.5, est=True)
    sql(store,  # a live-data edge with parent_turn_id '' (never joinable)
        "INSERT INTO subagent_edges (child_session_id, parent_session_id, parent_turn_id, started_at) "
        "VALUES ('grandchild', 'child', '', ?)", NOW.isoformat())
    call(store, "grandchild", NOW - H, 0.25)
    W.record_subagent_start(store, "child", "grandchild")  # ignored: first edge wins
    sql(store,  # a cycle back to the root must not loop forever
        "INSERT INTO subagent_edges (child_session_id, parent_session_id, started_at) "
        "VALUES (?, 'grandchild', ?)", root + "-again", NOW.isoformat())
    W.start_run(store, "other", "m", "cli", started_at=NOW - H)
    call(store, "other", NOW - H, 2.0)
    W.record_subagent_start(store, "orphan", "no-such-parent", started_at=NOW - H)
    call(store, "orphan", NOW - H, 0.125)
    return root


def test_spend_by_scope_cron_job_covers_all_descendants(store, tree):
    spend = R.spend_by_scope(store, "cron_job", "nightly", NOW - 24 * H)
    assert spend == ScopeSpend(1.75, 1, 3, pytest.approx(1 / 3))
    # the time filter applies to the subtree's runs, not to the seed set
    assert R.spend_by_scope(store, "cron_job", "nightly", NOW - 90 * 60 * timedelta(seconds=1)).spent_usd == 0.25
    assert R.spend_by_scope(store, "global", None, NOW - 24 * H).spent_usd == 3.875  # each run once
    assert R.spend_by_scope(store, "cron_job", "unknown", NOW - 24 * H).total_calls == 0


def test_delegation_join_precondition(store, tree):
    join = R.delegation_join(store)
    assert isinstance(join, DelegationJoin)
    assert (join.total_edges, join.joinable_edges, join.joined_edges) == (4, 1, 1)
    assert join.healthy
    assert [(l.child_session_id, l.parent_turn_id) for l in join.links] == \
        [("child", f"{tree}:t:00000001")]


def test_delegation_join_reports_an_unjoined_edge(store):
    W.record_subagent_start(store, "c", "p", "p:t:missing")
    join = R.delegation_join(store)
    assert (join.joinable_edges, join.joined_edges, join.healthy) == (1, 0, False)


def test_unattributed_child_cost(store, tree):
    got = R.unattributed_child_cost(store, NOW - 24 * H)
    assert (got.unattributed_usd, got.edges) == (0.125, 1)
    assert R.unattributed_child_cost(store, NOW).edges == 0


def test_estimated_price_share_follows_scope(store, tree):
    assert R.estimated_price_share(store, "global", None, NOW - 24 * H, []) == 0.0
    call(store, "child", NOW - H, 0.0, model="guessed")
    share = R.estimated_price_share(store, "cron_job", "nightly", NOW - 24 * H, ["guessed", "x'); --"])
    assert share == pytest.approx(1 / 4)  # root 1 + child 2 + grandchild 1 calls
    assert R.estimated_price_share(store, "global", None, NOW - 24 * H, ["guessed"]) == pytest.approx(1 / 6)


# ----------------------------------------------------------------------------- scopes
def test_spend_sender_profile_and_unknown_scope(store):
    W.start_run(store, "a", "m", "cli", profile="work", started_at=NOW - H)
    W.set_sender(store, "a", "alice")
    call(store, "a", NOW - H, 1.0)
    W.start_run(store, "b", "m", "cli", started_at=NOW - H)
    call(store, "b", NOW - H, 2.0, est=True)
    assert R.spend_by_scope(store, "sender", "alice", NOW - 2 * H).spent_usd == 1.0
    assert R.spend_by_scope(store, "profile", "work", NOW - 2 * H).spent_usd == 1.0
    assert R.spend_by_scope(store, "profile", "", NOW - 2 * H).total_calls == 0  # NULL never matches
    assert R.spend_by_scope(store, "global", None, NOW - 2 * H).estimated_pct == 0.5
    assert R.list_sender_ids(store, NOW - 2 * H) == ["alice"]
    assert R.list_profiles(store, NOW - 2 * H) == ["work"]
    with pytest.raises(ConfigurationError, match="unknown budget scope 'team'"):
        R.spend_by_scope(store, "team", "x", NOW)


@pytest.mark.parametrize("scope, scope_id, expected", [
    ("global", None, [0.0, 3.0, 4.0]),
    ("profile", "work", [0.0, 1.0, 0.0]),   # upstream ignored the profile scope here
    ("sender", "bob", [0.0, 0.0, 4.0]),
    ("cron_job", "j", [0.0, 2.0, 0.0]),      # includes the job's delegated child
])
def test_daily_spend_series_honours_every_scope(store, scope, scope_id, expected):
    day1, day2 = NOW - 24 * H, NOW
    W.start_run(store, "p1", "m", "cli", profile="work", started_at=day1)
    call(store, "p1", day1, 1.0)
    W.start_run(store, "cron_j_20260719_150000", "m", "cron", "j", started_at=day1)
    call(store, "cron_j_20260719_150000", day1, 1.5)
    W.record_subagent_start(store, "kid", "cron_j_20260719_150000")
    W.start_run(store, "kid", "m", "cli", started_at=day1)
    call(store, "kid", day1, 0.5)
    W.start_run(store, "b1", "m", "cli", started_at=day2)
    W.set_sender(store, "b1", "bob")
    call(store, "b1", day2, 4.0)
    W.start_run(store, "old", "m", "cli", profile="work", started_at=NOW - 72 * H)
    call(store, "old", NOW - 72 * H, 100.0)
    series = R.daily_spend_series(store, scope, scope_id, 3, now=NOW)
    assert [d.day for d in series] == ["2026-07-18", "2026-07-19", "2026-07-20"]
    assert [d.cost_usd for d in series] == expected


# ----------------------------------------------------------------------------- reports
@pytest.fixture
def report_data(store):
    W.start_run(store, "cron_a_20260720_100000", "m", "cron", "a", started_at=NOW - 3 * H)
    call(store, "cron_a_20260720_100000", NOW - 3 * H, 1.0, provider="p1", tin=100, tout=80)
    W.record_tool_call(store, "cron_a_20260720_100000", NOW - 3 * H, "bash", True, 10)
    W.record_tool_call(store, "cron_a_20260720_100000", NOW - 3 * H, "bash", False, 30)
    W.end_run(store, "cron_a_20260720_100000", "ok", NOW - 2 * H)
    W.start_run(store, "cron_a_20260720_120000", "m", "cron", "a", started_at=NOW - H)
    call(store, "cron_a_20260720_120000", NOW - H, 0.5, provider=None, est=True, model=None)
    W.record_tool_call(store, "cron_a_20260720_120000", NOW - H, "read", True, 5)
    W.end_run(store, "cron_a_20260720_120000", "error", NOW - H / 2)
    W.start_run(store, "chat", "m", "telegram", started_at=NOW - H)
    call(store, "chat", NOW - H, 0.25, provider="p1", assumed=True)
    W.start_run(store, "ancient", "m", "cli", started_at=NOW - 100 * H)
    call(store, "ancient", NOW - 100 * H, 9.0)
    W.record_tool_call(store, "ancient", NOW - 100 * H, "grep", True, 1)
    return store


def test_stats_summary(report_data):
    s = R.stats_summary(report_data, 24, now=NOW)
    assert isinstance(s, StatsSummary)
    assert (s.total_runs, s.ok_runs, s.failed_runs, s.api_calls, s.tool_calls) == (3, 1, 1, 3, 3)
    assert (s.tokens_in, s.tokens_out, s.cost_usd, s.estimated_llm_calls) == (120, 90, 1.75, 1)
    assert [(t.tool_name, t.calls, t.failures, t.avg_ms) for t in s.top_tools] == \
        [("bash", 2, 1, 20.0), ("read", 1, 0, 5.0)]
    assert s.since == (NOW - 24 * H).isoformat() and s.until is None
    everything = R.stats_summary(report_data, 0, now=NOW)
    assert everything.total_runs == 4
    assert [t.tool_name for t in everything.top_tools] == ["bash", "grep", "read"]


def test_cost_by_job_and_recent_runs(report_data):
    [job] = R.cost_by_job(report_data, 24, now=NOW)
    assert (job.cron_job_id, job.runs, job.ok_runs, job.failed_runs, job.cost_usd) == ("a", 2, 1, 1, 1.5)
    assert job.last_run == (NOW - H).isoformat()
    recent = R.recent_runs(report_data, 2, window_hours=24, now=NOW)
    assert {r.session_id for r in recent} == {"cron_a_20260720_120000", "chat"}  # same start
    assert all(r.started_at == (NOW - H).isoformat() for r in recent)
    assert len(R.recent_runs(report_data, 10, window_hours=0, now=NOW)) == 4


def test_stats_by_provider_and_model(report_data):
    by_p = {p.provider: p for p in R.stats_by_provider(report_data, 24, now=NOW)}
    assert set(by_p) == {"p1", "(unknown)"}
    assert (by_p["p1"].total_calls, by_p["p1"].provider_assumed_calls,
            by_p["p1"].provider_assumed_pct, by_p["p1"].cost_usd) == (2, 1, 0.5, 1.25)
    assert (by_p["(unknown)"].estimated_calls, by_p["(unknown)"].estimated_pct) == (1, 1.0)
    models = R.stats_by_model(report_data, 24, now=NOW)
    assert [(m.provider, m.model, m.total_calls) for m in models] == \
        [("(unknown)", "(unknown)", 1), ("p1", "m", 2)]


def test_efficiency_runs_scores_and_orders(report_data):
    runs = R.efficiency_runs(report_data, 24, now=NOW)
    assert [r.session_id for r in runs] == ["cron_a_20260720_100000", "cron_a_20260720_120000"]
    ok_run, err_run = runs
    assert ok_run.efficiency_score == 70.5   # 40 + min(60, 40*80/100) - 0 - 1.5
    assert err_run.efficiency_score == 28.5  # 40 + 20 - 30 - 1.5
    assert R.efficiency_score(0, 0, "error", 100) == 0.0


def test_turn_summary_groups_by_turn(store):
    for i, turn in enumerate(["s:t:1", "s:t:1", "s:t:2", None]):
        call(store, "s", NOW, 0.5 * (i + 1), turn=turn, tin=10, tout=1)
    turns = R.turn_summary(store, "s")
    assert [(t.turn_id, t.calls, t.cost_usd, t.tokens) for t in turns] == \
        [("s:t:1", 2, 1.5, 22), ("s:t:2", 1, 1.5, 11), (None, 1, 2.0, 11)]


def test_recent_transitions_window(store):
    W.record_free_paid_transition(store, "old", "p", "s", 1.0, now=NOW - 100 * H)
    W.record_free_paid_transition(store, "new", "p", "s", 1.0, now=NOW - H)
    assert [t.model for t in R.recent_free_paid_transitions(store, 72, now=NOW)] == ["new"]
    assert [t.model for t in R.recent_free_paid_transitions(store, 0, now=NOW)] == ["new", "old"]


# ----------------------------------------------------------------------------- exact windows
def test_window_cutoff_is_exact_on_the_cutoff_day(store):
    cutoff = NOW - 24 * H  # 2026-07-19T15:30:00+00:00
    before = [cutoff - timedelta(microseconds=1), cutoff - H, cutoff.replace(hour=0, minute=0)]
    after = [cutoff, cutoff + timedelta(microseconds=1), cutoff + H]
    for i, at in enumerate(before + after):
        W.start_run(store, f"r{i}", "m", "cli", started_at=at)
        call(store, f"r{i}", at, 1.0)
    s = R.stats_summary(store, 24, now=NOW)
    # upstream's datetime('now','-24 hours') comparison would have admitted all six (same day)
    assert (s.total_runs, s.api_calls) == (3, 3)
    assert sorted(r.session_id for r in R.recent_runs(store, 50, window_hours=24, now=NOW)) == \
        ["r3", "r4", "r5"]
    assert R.spend_by_scope(store, "global", None, cutoff).total_calls == 3
    assert sum(p.total_calls for p in R.stats_by_provider(store, 24, now=NOW)) == 3


def test_date_bounds(store):
    for day in (18, 19, 20):
        W.start_run(store, f"d{day}", "m", "cli", started_at=iso(2026, 7, day, 12, 0, 0))
    from datetime import date
    got = R.recent_runs(store, 10, date_from=date(2026, 7, 19), date_to=date(2026, 7, 20))
    assert [r.session_id for r in got] == ["d19"]
    assert [r.session_id for r in R.recent_runs(store, 10, date_to=date(2026, 7, 19))] == ["d18"]


@pytest.mark.parametrize("prepared, index", [
    (R.SUMMARY_RUNS, "idx_runs_started"),
    (R.SUMMARY_CALLS, "idx_llm_ts"),
    (R.BY_PROVIDER, "idx_llm_ts"),
    (R.BY_MODEL, "idx_llm_ts"),
    (R.RECENT_RUNS, "idx_runs_started"),
    (R.COST_BY_JOB, "idx_runs_"),
    (R.TOP_TOOLS, "idx_runs_started"),
    (R.SPEND["global"], "idx_runs_started"),
])
def test_window_queries_use_the_time_index(sqlite_store, prepared, index):
    """SQLite's EXPLAIN QUERY PLAN (the PostgreSQL plans: test_postgres_window_plans)."""
    store = sqlite_store
    params = {"since": (NOW - 24 * H).isoformat(), "until": R.OPEN_END, "limit": 10}
    plan = " | ".join(r[3] for r in store.connection().execute(
        "EXPLAIN QUERY PLAN " + prepared.sql, prepared.args(params)))
    assert index in plan, plan
    if prepared is R.TOP_TOOLS:  # index-driven: tool rows found by session, never scanned
        assert "idx_tool_session" in plan and "SCAN tc" not in plan, plan


@pytest.mark.parametrize("prepared, index", [
    (R.SUMMARY_CALLS, "idx_llm_ts"),
    (R.BY_PROVIDER, "idx_llm_ts"),
    (R.BY_MODEL, "idx_llm_ts"),
    (R.SUMMARY_RUNS, "idx_runs_started"),
    (R.RECENT_RUNS, "idx_runs_started"),
    (R.TOP_TOOLS, "idx_runs_started"),
    (R.SPEND["global"], "idx_runs_started"),
])
def test_postgres_window_plans_use_the_time_index(pg_store, prepared, index):
    """PostgreSQL twin of the query-plan test: on 30 days of 20,000 calls / 2,000 runs the
    24-hour window is found through the time index, compared as canonical text."""
    start = NOW - timedelta(days=30)
    sql(pg_store, """INSERT INTO runs (session_id, started_at, status)
        SELECT 's' || g, to_char((CAST(? AS timestamptz) + g * interval '21 minutes 36 seconds')
                                 AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS') || '+00:00', 'ok'
          FROM generate_series(0, 1999) AS g""", start.isoformat())
    sql(pg_store, """INSERT INTO llm_calls (session_id, ts, model, provider, cost_usd)
        SELECT 's' || (g / 10), to_char((CAST(? AS timestamptz) + g * interval '129.6 seconds')
                                        AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS') || '+00:00',
               'm' || mod(g, 7), 'p' || mod(g, 3), 0.001
          FROM generate_series(0, 19999) AS g""", start.isoformat())
    sql(pg_store, "INSERT INTO tool_calls (session_id, ts, tool_name, ok) "
                  "SELECT session_id, started_at, 'bash', 1 FROM runs")
    sql(pg_store, "ANALYZE")
    since = (NOW - 24 * H).isoformat()
    params = {"since": since, "until": R.OPEN_END, "limit": 10}
    plan = " | ".join(r[0] for r in sql(pg_store, "EXPLAIN " + prepared.pg.sql.replace("%s", "?"),
                                        *prepared.pg.args(params)))
    assert index in plan, plan
    # and the rows it finds are exactly the window's (text comparison in the stored form)
    assert R.stats_summary(pg_store, 24, now=NOW).api_calls == \
        sql(pg_store, "SELECT COUNT(*) FROM llm_calls WHERE ts >= ?", since)[0][0] > 0
