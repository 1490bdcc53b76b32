"""Query plans of the telemetry reads on PostgreSQL (issue 34 item 4, docs/telemetry.md §8.8):
on an analyzed month of 2,000 runs / 40,000 calls / 10,000 tool calls, a window's runs reach
their calls and tool calls through the session indexes (never a scan of ``llm_calls`` or
``tool_calls``), the cron subtree reaches its runs by key, the estimated-model list is unnested
once, window aggregates are planned with their cutoff (never a prepared generic plan) and the
store's connections run without JIT. The SQLite plans: test_reads.py."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from hermes_data.telemetry import reads as R
from hermes_data.telemetry.store import Prepared

from .conftest import NOW, sql

DAY = (NOW - timedelta(hours=24)).isoformat()
WEEK = (NOW - timedelta(days=7)).isoformat()
MODELS = json.dumps(["m3", "m5"])


def _nodes(node: dict, parent: str = "") -> list[dict]:
    """Every plan node, each with the relationship to its parent it was found under."""
    found = [{**node, "_rel": node.get("Parent Relationship", parent)}]
    for child in node.get("Plans", ()):
        found.extend(_nodes(child))
    return found


def _plan(store, prepared: Prepared, params: dict) -> list[dict]:
    c = prepared.pg
    raw = store.connection().execute("EXPLAIN (FORMAT JSON) " + c.sql, c.args(params)).fetchone()[0]
    root = (raw if isinstance(raw, list) else json.loads(raw))[0]["Plan"]
    return _nodes(root)


def _scans(nodes: list[dict], relation: str, alias: str | None = None) -> list[str]:
    return [n["Node Type"] for n in nodes if n.get("Relation Name") == relation
            and (alias is None or n.get("Alias") == alias)]


def _indexes(nodes: list[dict]) -> set[str]:
    return {n["Index Name"] for n in nodes if "Index Name" in n}


@pytest.fixture
def month(pg_store):
    """30 days of runs (every 5th a cron run of one of 8 jobs, each with a delegated child),
    20 calls and 5 tool calls per run, analyzed."""
    start = (NOW - timedelta(days=30)).isoformat()
    stamp = ("to_char((CAST(? AS timestamptz) + g * interval '21 minutes 36 seconds') "
             "AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS') || '+00:00'")
    sql(pg_store, f"""INSERT INTO runs (session_id, platform, cron_job_id, started_at, status,
        cost_usd, api_calls, sender_id, profile)
        SELECT 's' || g, 'cli', CASE WHEN mod(g, 5) = 0 THEN 'job' || mod(g, 8) END, {stamp}, 'ok',
               0.01, 20, 'u' || mod(g, 25), 'p' || mod(g, 3)
          FROM generate_series(0, 1999) AS g""", start)
    sql(pg_store, """INSERT INTO llm_calls (session_id, ts, model, provider, cost_usd, turn_id)
        SELECT r.session_id, r.started_at, 'm' || mod(k, 7), 'p', 0.0005, r.session_id || ':t:' || k
          FROM runs AS r CROSS JOIN generate_series(0, 19) AS k""")
    sql(pg_store, """INSERT INTO tool_calls (session_id, ts, tool_name, ok, latency_ms)
        SELECT r.session_id, r.started_at, 'tool' || k, 1, 10 * k
          FROM runs AS r CROSS JOIN generate_series(0, 4) AS k""")
    sql(pg_store, """INSERT INTO subagent_edges (child_session_id, parent_session_id,
        parent_turn_id, started_at)
        SELECT 's' || (g + 1), 's' || g, 's' || g || ':t:3', started_at
          FROM runs CROSS JOIN LATERAL (SELECT CAST(substr(session_id, 2) AS INTEGER) AS g) AS n
         WHERE mod(g, 5) = 0""")
    sql(pg_store, "ANALYZE")
    return pg_store


@pytest.mark.parametrize("scope, since", [
    ("global", DAY), ("global", WEEK), ("sender", WEEK), ("profile", DAY), ("cron_job", WEEK),
])
def test_estimated_price_share_reads_each_runs_calls_by_session(month, scope, since):
    """The 17.7x read: a window's runs reach their calls through idx_llm_session, and the
    model list is built once (an InitPlan), not rescanned per call (a SubPlan)."""
    params = {"since": since, "scope_id": {"sender": "u3", "profile": "p1", "cron_job": "job5"}
              .get(scope, ""), "models": MODELS}
    nodes = _plan(month, R.SHARE[scope], params)
    assert "Seq Scan" not in _scans(nodes, "llm_calls"), nodes
    assert "idx_llm_session" in _indexes(nodes), nodes
    assert not [n for n in nodes if n["_rel"] == "SubPlan"], nodes
    assert [n for n in nodes if n["_rel"] == "InitPlan"], nodes


@pytest.mark.parametrize("since", [DAY, WEEK])
def test_top_tools_reads_each_runs_tool_calls_by_session(month, since):
    nodes = _plan(month, R.TOP_TOOLS, {"since": since, "until": R.OPEN_END, "limit": 10})
    assert "Seq Scan" not in _scans(nodes, "tool_calls"), nodes
    assert "idx_tool_session" in _indexes(nodes), nodes
    if since == DAY:
        assert "idx_runs_started" in _indexes(nodes), nodes


@pytest.mark.parametrize("prepared", [R.SPEND["cron_job"], R.DAILY["cron_job"]],
                         ids=["spend", "daily"])
def test_cron_subtree_reaches_its_runs_by_key(month, prepared):
    nodes = _plan(month, prepared, {"since": WEEK, "scope_id": "job5"})
    # runs is read twice: the CTE's first term by idx_runs_cron_job, the subtree by its key
    assert _scans(nodes, "runs") and "Seq Scan" not in _scans(nodes, "runs"), nodes
    assert {"idx_runs_cron_job", "runs_pkey"} <= _indexes(nodes), nodes
    

def test_unattributed_child_cost_looks_each_parent_up_by_key(month):
    nodes = _plan(month, R.UNATTRIBUTED, {"since": WEEK})
    parent = [n for n in nodes if n.get("Alias") == "parent"]
    assert parent and all(n["Node Type"] in ("Index Scan", "Index Only Scan") for n in parent), nodes
    assert not [n for n in nodes if n["Node Type"] == "Hash" and n["_rel"] == "Inner"
                and any(c.get("Alias") == "parent" for c in _nodes(n))], nodes


def test_the_reads_return_the_window_they_plan_for(month):
    """The reshaped statements count exactly the rows of the plain join (the plans above
    change how rows are found, never which)."""
    expected = sql(month, """SELECT COUNT(*), SUM(CASE WHEN lc.model IN ('m3', 'm5') THEN 1 ELSE 0 END)
        FROM runs AS r JOIN llm_calls AS lc ON lc.session_id = r.session_id
        WHERE r.started_at >= ?""", WEEK)[0]
    assert expected[0] > 0
    assert R.estimated_price_share(month, "global", None, WEEK, ["m3", "m5"]) == \
        pytest.approx(expected[1] / expected[0])
    top = R.stats_summary(month, 24, now=NOW).top_tools
    assert sum(t.calls for t in top) == sql(month, """SELECT COUNT(*) FROM tool_calls AS tc
        JOIN runs AS r ON r.session_id = tc.session_id WHERE r.started_at >= ?""", DAY)[0][0] > 0


def test_window_aggregates_are_planned_with_their_cutoff(month):
    """psycopg prepares a text run five times on a connection (and the server may then keep
    a generic plan, blind to the window): the windowed reads never are prepared, the
    newest-first reads are."""
    for _ in range(8):
        R.cost_by_job(month, 168, now=NOW)
        R.spend_by_scope(month, "global", None, WEEK)
        R.recent_runs(month, 5, window_hours=168, now=NOW)
    prepared = {r[0] for r in sql(month, "SELECT statement FROM pg_prepared_statements")}
    assert _server_text(R.RECENT_RUNS) in prepared
    assert _server_text(R.COST_BY_JOB) not in prepared
    assert _server_text(R.SPEND["global"]) not in prepared


def _server_text(prepared: Prepared) -> str:
    """The statement as the server records it (psycopg numbers the placeholders)."""
    parts = prepared.pg.sql.split("%s")
    return parts[0] + "".join(f"${i}{part}" for i, part in enumerate(parts[1:], 1))


def test_the_store_connections_run_without_jit(month):
    assert sql(month, "SHOW jit") == [("off",)]


def _module_statements() -> list[Prepared]:
    found: list[Prepared] = []
    for value in vars(R).values():
        if isinstance(value, Prepared):
            found.append(value)
        elif isinstance(value, dict):
            found.extend(v for v in value.values() if isinstance(v, Prepared))
    return found


def test_every_statement_with_a_cutoff_is_classified():
    """A new read binding ``since`` must say whether its plan depends on the cutoff."""
    statements = _module_statements()
    with_cutoff = [p for p in statements if "since" in p.order]
    assert len(with_cutoff) >= len(R.WINDOWED) + len(R.NEWEST_FIRST) > 20
    for p in with_cutoff:
        assert (p in R.WINDOWED) != (p in R.NEWEST_FIRST), p.name
    for p in statements:
        assert p.plan_per_call == (p in R.WINDOWED), p.name


def test_jit_is_reset_when_the_connection_goes_back_to_the_pool(pg_session_url):
    """The setting is the store's own: a connection handed back to the engine's pool (here an
    engine the caller owns and keeps) runs with the server's JIT setting again."""
    import sqlalchemy as sa

    from hermes_data.telemetry.store import TelemetryStore

    engine = sa.create_engine(sa.engine.make_url(pg_session_url), pool_size=1, max_overflow=0)
    try:
        with engine.connect() as conn:
            server_default = conn.exec_driver_sql("SHOW jit").scalar()
        with TelemetryStore(engine=engine) as store:
            assert sql(store, "SHOW jit") == [("off",)]
        with engine.connect() as conn:  # the pool's only connection, the store's before
            assert conn.exec_driver_sql("SHOW jit").scalar() == server_default
    finally:
        engine.dispose()
