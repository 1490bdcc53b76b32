"""Read-path benchmark: every hermes-data read vs the same SQL on plain sqlite3.

Builds one database (default 200,000 llm_calls over 30 days, ~10,000 runs, tool calls,
cron jobs with delegated children), then for each read function measures the median
latency of

* ``hermes``   — the public function on a :class:`TelemetryStore` (typed rows), and
* ``sqlite3``  — the very statements that function ran (captured once, same parameters),
  executed on a plain ``sqlite3`` connection with ``sqlite3.Row`` and ``dict(row)``, the
  way upstream ``db.py`` returned rows.

The ratio hermes / sqlite3 is the cost of the layer (target ≤ 1.1×). For ``stats_summary``
it also times upstream's top-tools statement (tool_calls joined to runs, which scans every
tool call) to show what the index-driven form saves. Both sides run in this process, on
the same file, journal mode and ``synchronous``, interleaved.

    python benchmarks/telemetry_reads.py [--calls 200000] [--iterations 30]
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hermes_data.telemetry import reads as R  # noqa: E402
from hermes_data.telemetry import store as store_mod  # noqa: E402
from hermes_data.telemetry.schema import metadata  # noqa: E402
from hermes_data.telemetry.store import TelemetryStore  # noqa: E402

NOW = datetime(2026, 7, 20, 12, 0, 0, tzinfo=timezone.utc)

# Upstream's top-tools statement (spec §5.3), with our exact cutoff so only the shape differs.
UPSTREAM_TOP_TOOLS = """
SELECT tc.tool_name, COUNT(*) AS calls, SUM(CASE WHEN tc.ok = 0 THEN 1 ELSE 0 END) AS failures,
       AVG(tc.latency_ms) AS avg_ms
  FROM tool_calls tc JOIN runs r ON r.session_id = tc.session_id
 WHERE r.started_at >= ?
 GROUP BY tc.tool_name ORDER BY calls DESC LIMIT 10
"""


def build(path: Path, n_calls: int) -> dict:
    rnd = random.Random(42)
    n_runs = max(50, n_calls // 20)
    start = NOW - timedelta(days=30)
    conn = sqlite3.connect(str(path), isolation_level=None)
    conn.execute("BEGIN")
    runs, calls, tools, edges = [], [], [], []
    span = 30 * 86400
    for r in range(n_runs):
        at = start + timedelta(seconds=span * r / n_runs)
        cron = r % 5 == 0
        sid = f"cron_job{r % 40}_{at:%Y%m%d_%H%M%S}" if cron else f"{at:%Y%m%d_%H%M%S}_{r:06x}"
        runs.append([sid, "cron" if cron else "cli", f"job{r % 40}" if cron else None, at, r])
        if not cron and r % 7 == 0 and r > 5:
            edges.append((sid, runs[r - 5][0], f"{runs[r - 5][0]}:t:{r:08x}" if r % 2 else "", at.isoformat()))
    totals = {}
    for i in range(n_calls):
        sid, _, _, at, r = runs[i * n_runs // n_calls]
        ts = (at + timedelta(seconds=i % 600)).isoformat()
        tin, tout, cost = rnd.randint(100, 5000), rnd.randint(10, 900), rnd.random() / 50
        est = 1 if i % 13 == 0 else 0
        calls.append((sid, ts, f"model-{i % 9}", f"prov-{i % 4}", tin, tout, cost, rnd.randint(50, 4000),
                      0, 0, 0, est, 1 if i % 31 == 0 else 0, None, f"{sid}:t:{i // 5:08x}", None, None))
        t = totals.setdefault(sid, [0, 0, 0.0, 0, 0])
        t[0] += tin
        t[1] += tout
        t[2] += cost
        t[3] += 1
        t[4] += est
        if i % 3 == 0:
            tools.append((sid, ts, f"tool-{i % 17}", 0 if i % 19 == 0 else 1, rnd.randint(1, 900)))
    conn.executemany(
        "INSERT INTO llm_calls (session_id, ts, model, provider, tokens_in, tokens_out, cost_usd, "
        "latency_ms, cache_read_tokens, cache_write_tokens, reasoning_tokens, estimated, "
        "provider_assumed, moa_preset, turn_id, task_id, api_request_id) "
        "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", calls)
    conn.executemany("INSERT INTO tool_calls (session_id, ts, tool_name, ok, latency_ms) VALUES (?,?,?,?,?)", tools)
    ntools = {}
    for t in tools:
        ntools[t[0]] = ntools.get(t[0], 0) + 1
    conn.executemany(
        "INSERT INTO runs (session_id, platform, cron_job_id, model, provider, started_at, ended_at, status, "
        "tokens_in, tokens_out, cost_usd, duration_ms, api_calls, tool_calls, estimated_llm_calls, sender_id, profile) "
        "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        [(sid, plat, job, "model-1", "prov-1", at.isoformat(), (at + timedelta(minutes=5)).isoformat(),
          ("ok", "error", "interrupted", "ok")[r % 4], *totals.get(sid, [0, 0, 0.0, 0, 0])[:3], 300000,
          totals.get(sid, [0, 0, 0, 0, 0])[3], ntools.get(sid, 0), totals.get(sid, [0, 0, 0, 0, 0])[4],
          f"user{r % 25}", f"profile{r % 3}")
         for sid, plat, job, at, r in runs])
    conn.executemany("INSERT OR IGNORE INTO subagent_edges (child_session_id, parent_session_id, parent_turn_id, "
                     "started_at) VALUES (?,?,?,?)", edges)
    conn.executemany("INSERT INTO free_paid_transitions (model, provider, detected_at, session_id, first_paid_cost_usd) "
                     "VALUES (?,?,?,?,?)", [(f"m{i}", "p", (NOW - timedelta(hours=i)).isoformat(), "s", 0.1) for i in range(200)])
    conn.executemany("INSERT INTO model_unavailable_alerts VALUES (?,?,404,'gone',?,?,1)",
                     [(f"m{i}", "p", (NOW - timedelta(hours=i)).isoformat(), (NOW - timedelta(hours=i)).isoformat()) for i in range(200)])
    conn.executemany("INSERT INTO pricing_snapshots (provider, model, input_cost_per_million, captured_at) VALUES (?,?,?,?)",
                     [(f"prov-{i % 4}", f"model-{i % 7}", i * 0.1, NOW.isoformat()) for i in range(300)])
    conn.execute("COMMIT")
    conn.close()
    some_session = runs[len(runs) // 2][0]
    return {"session": some_session, "runs": n_runs, "tools": len(tools), "edges": len(edges)}


def capture(store: TelemetryStore, fn) -> list[tuple[str, tuple]]:
    """The (sql, args) a read runs: every statement passes through ``Prepared.args``."""
    seen: list[tuple[str, tuple]] = []
    original = store_mod.Prepared.args

    def spy(self, params):
        args = original(self, params)
        seen.append((self.sql, args))
        return args

    store_mod.Prepared.args = spy
    try:
        fn()
    finally:
        store_mod.Prepared.args = original
    if not seen:
        raise RuntimeError("no statement captured")
    return seen


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=200_000)
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args(argv)

    tmp = Path(args.dir or tempfile.mkdtemp(prefix="hermes-bench-reads-"))
    path = tmp / "reads.db"
    for suffix in ("", "-wal", "-shm", "-journal"):
        if os.path.exists(f"{path}{suffix}"):
            os.remove(f"{path}{suffix}")
    t0 = time.perf_counter()
    with TelemetryStore(path) as s:
        metadata.create_all(s.engine)
    facts = build(path, args.calls)
    print(f"built {args.calls:,} llm_calls, {facts['runs']:,} runs, {facts['tools']:,} tool_calls, "
          f"{facts['edges']:,} edges over 30 days in {time.perf_counter() - t0:.1f}s")

    store = TelemetryStore(path)
    conn = store.connection()
    mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    sync = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}[conn.execute("PRAGMA synchronous").fetchone()[0]]
    base = sqlite3.connect(str(path), isolation_level=None)
    base.execute("PRAGMA busy_timeout=30000")
    base.execute(f"PRAGMA synchronous={sync}")
    base.row_factory = sqlite3.Row
    print(f"sqlite {sqlite3.sqlite_version}, nproc {os.cpu_count()}, journal_mode={mode} synchronous={sync} "
          f"(both sides), {args.iterations} iterations, medians\n")

    day = NOW - timedelta(days=1)
    week = NOW - timedelta(days=7)
    cases = {
        "get_run": lambda: R.get_run(store, facts["session"]),
        "stats_summary 24h": lambda: R.stats_summary(store, 24, now=NOW),
        "stats_summary 30d": lambda: R.stats_summary(store, 720, now=NOW),
        "cost_by_job 7d": lambda: R.cost_by_job(store, 168, now=NOW),
        "recent_runs": lambda: R.recent_runs(store, 20, window_hours=168, now=NOW),
        "stats_by_provider 24h": lambda: R.stats_by_provider(store, 24, now=NOW),
        "stats_by_model 7d": lambda: R.stats_by_model(store, 168, now=NOW),
        "efficiency_runs 7d": lambda: R.efficiency_runs(store, 168, now=NOW),
        "unattributed_child_cost": lambda: R.unattributed_child_cost(store, week),
        "spend global 7d": lambda: R.spend_by_scope(store, "global", None, week),
        "spend cron_job 7d": lambda: R.spend_by_scope(store, "cron_job", "job5", week),
        "spend sender 7d": lambda: R.spend_by_scope(store, "sender", "user3", week),
        "spend profile 7d": lambda: R.spend_by_scope(store, "profile", "profile1", week),
        "daily_spend_series 30d": lambda: R.daily_spend_series(store, "global", None, 30, now=NOW),
        "estimated_price_share": lambda: R.estimated_price_share(store, "global", None, day, ["model-3"]),
        "turn_summary": lambda: R.turn_summary(store, facts["session"]),
        "delegation_join": lambda: R.delegation_join(store),
        "list_cron_job_ids 7d": lambda: R.list_cron_job_ids(store, week),
        "recent_free_paid_transitions": lambda: R.recent_free_paid_transitions(store, 72, now=NOW),
        "recent_model_unavailable": lambda: R.recent_model_unavailable(store, 72, now=NOW),
        "list_latest_pricing_snapshots": lambda: R.list_latest_pricing_snapshots(store),
        "count_distinct_llm_models": lambda: R.count_distinct_llm_models(store),
        "models_needing_pricing_snapshot": lambda: R.models_needing_pricing_snapshot(store),
    }

    def upstream_efficiency(rows):
        # upstream scored and sorted in Python as well; the baseline does the same work
        out = []
        for r in rows:
            v = list(r.values())
            ti, to, st, calls = v[3], v[4], v[2], v[5]
            ratio = min(60.0, 40.0 * to / ti) if ti > 0 else 0.0
            pen = {"error": 30.0, "interrupted": 10.0}.get(st, 0.0)
            r["efficiency_score"] = round(max(0.0, min(100.0, 40.0 + ratio - pen - min(30.0, 1.5 * calls))), 1)
            out.append(r)
        out.sort(key=lambda r: r["efficiency_score"], reverse=True)
        return out

    post = {"efficiency_runs 7d": upstream_efficiency}

    def baseline_of(statements, name=""):
        fix = post.get(name, lambda rows: rows)

        def run():
            return [fix([dict(r) for r in base.execute(sql, a).fetchall()]) for sql, a in statements]
        return run

    def timed(fn) -> float:
        t = time.perf_counter()
        fn()
        return time.perf_counter() - t

    worst = 0.0
    print(f"{'read':34s} {'hermes ms':>10s} {'sqlite3 ms':>11s} {'ratio':>7s}")
    for name, fn in cases.items():
        statements = capture(store, fn)
        ref = baseline_of(statements, name)
        fn(), ref()  # warm both statement caches and the page cache
        ours, theirs = [], []
        for _ in range(args.iterations):
            ours.append(timed(fn))
            theirs.append(timed(ref))
        mo, mt = statistics.median(ours), statistics.median(theirs)
        worst = max(worst, mo / mt)
        print(f"{name:34s} {mo * 1e3:10.3f} {mt * 1e3:11.3f} {mo / mt:6.2f}x")
        if name == "stats_summary 24h":
            up = [(sql, a) for sql, a in statements[:2]] + [(UPSTREAM_TOP_TOOLS, (statements[0][1][-2],))]
            up_run = baseline_of(up)
            up_times = [timed(up_run) for _ in range(args.iterations)]
            mu = statistics.median(up_times)
            print(f"{'  upstream top-tools shape (sqlite3)':34s} {'':10s} {mu * 1e3:11.3f}   "
                  f"-> index-driven form is {mu / mo:.1f}x faster")
    print(f"\nworst ratio {worst:.2f}x (target <= 1.10x): {'MET' if worst <= 1.10 else 'NOT MET'}")
    store.close()
    base.close()
    return 0 if worst <= 1.10 else 1


if __name__ == "__main__":
    raise SystemExit(main())
