"""SQLite vs PostgreSQL in one run: 16-thread record_llm_call and the read functions.

1. **Writes**: ``--threads`` (16) threads each call ``record_llm_call`` ``--per-thread`` times
   over 500 sessions, through a :class:`TelemetryStore` on a fresh SQLite file (journal mode
   by policy, printed) and on a fresh PostgreSQL database (``synchronous_commit`` as the
   server is configured, printed). Prints calls/s per backend, their ratio, and checks no
   update was lost (``runs.api_calls`` sums to the calls made).
2. **Reads**: the 200,000-call / 30-day data set of ``telemetry_reads.py`` is built on SQLite,
   copied to PostgreSQL with ``hermes_data.copy.transfer.copy_store`` (so both hold identical rows),
   then every read function's median latency is measured on both, interleaved.

    python benchmarks/backends.py [--pg-admin-url postgresql+psycopg://postgres@127.0.0.1/test]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import sqlalchemy as sa  # noqa: E402

from hermes_data.migrate import runner as migrate
from hermes_data.copy.transfer import copy_store  # noqa: E402
from hermes_data.telemetry import reads as R  # noqa: E402
from hermes_data.telemetry import writes as W  # noqa: E402
from hermes_data.telemetry.store import TelemetryStore  # noqa: E402
from telemetry_reads import NOW, build  # noqa: E402


def _pg_database(admin_url: str, name: str, create: bool) -> str:
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"' if create
                             else f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin.dispose()
    return sa.engine.make_url(admin_url).set(database=name).render_as_string(hide_password=False)


def _writes(url: str, threads: int, per_thread: int) -> tuple[float, bool]:
    migrate.upgrade("telemetry", url)
    with TelemetryStore(url) as store:
        barrier = threading.Barrier(threads + 1)

        def work(t: int) -> None:
            barrier.wait()
            for i in range(per_thread):
                W.record_llm_call(store, f"s{(t * 31 + i) % 500}", NOW, "m", "p", 10, 5, 0.001, 20)

        pool = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
        for th in pool:
            th.start()
        barrier.wait()
        t0 = time.perf_counter()
        for th in pool:
            th.join()
        elapsed = time.perf_counter() - t0
        total = sum(r.api_calls for r in R.recent_runs(store, 10_000, window_hours=0))
    return threads * per_thread / elapsed, total == threads * per_thread


#: Issue 34 item 4: every read on PostgreSQL within this factor of its SQLite time.
READ_TARGET = 2.0


def read_cases(facts: dict) -> dict:
    """Every read function of the telemetry store on the data set of ``telemetry_reads.py``
    (the same list that benchmark replays on plain sqlite3), keyed by a printable name."""
    week, day = NOW - timedelta(days=7), NOW - timedelta(days=1)
    return {
        "get_run": lambda s: R.get_run(s, facts["session"]),
        "stats_summary 24h": lambda s: R.stats_summary(s, 24, now=NOW),
        "stats_summary 30d": lambda s: R.stats_summary(s, 720, now=NOW),
        "cost_by_job 7d": lambda s: R.cost_by_job(s, 168, now=NOW),
        "recent_runs": lambda s: R.recent_runs(s, 20, window_hours=168, now=NOW),
        "stats_by_provider 24h": lambda s: R.stats_by_provider(s, 24, now=NOW),
        "stats_by_model 7d": lambda s: R.stats_by_model(s, 168, now=NOW),
        "efficiency_runs 7d": lambda s: R.efficiency_runs(s, 168, now=NOW),
        "unattributed_child_cost": lambda s: R.unattributed_child_cost(s, week),
        "spend global 7d": lambda s: R.spend_by_scope(s, "global", None, week),
        "spend cron_job 7d": lambda s: R.spend_by_scope(s, "cron_job", "job5", week),
        "spend sender 7d": lambda s: R.spend_by_scope(s, "sender", "user3", week),
        "spend profile 7d": lambda s: R.spend_by_scope(s, "profile", "profile1", week),
        "daily_spend_series 30d": lambda s: R.daily_spend_series(s, "global", None, 30, now=NOW),
        "daily_spend_series cron_job 30d": lambda s: R.daily_spend_series(s, "cron_job", "job5", 30, now=NOW),
        "estimated_price_share": lambda s: R.estimated_price_share(s, "global", None, day, ["model-3"]),
        "estimated_price_share 7d": lambda s: R.estimated_price_share(s, "global", None, week, ["model-3", "model-5"]),
        "estimated_price_share cron_job": lambda s: R.estimated_price_share(s, "cron_job", "job5", week, ["model-3"]),
        "estimated_price_share sender": lambda s: R.estimated_price_share(s, "sender", "user3", week, ["model-3"]),
        "turn_summary": lambda s: R.turn_summary(s, facts["session"]),
        "delegation_join": lambda s: R.delegation_join(s),
        "list_cron_job_ids 7d": lambda s: R.list_cron_job_ids(s, week),
        "list_sender_ids 7d": lambda s: R.list_sender_ids(s, week),
        "recent_free_paid_transitions": lambda s: R.recent_free_paid_transitions(s, 72, now=NOW),
        "recent_model_unavailable": lambda s: R.recent_model_unavailable(s, 72, now=NOW),
        "list_latest_pricing_snapshots": lambda s: R.list_latest_pricing_snapshots(s),
        "count_distinct_llm_models": lambda s: R.count_distinct_llm_models(s),
        "models_needing_pricing_snapshot": lambda s: R.models_needing_pricing_snapshot(s),
    }


def _analyze(url: str) -> None:
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        conn.exec_driver_sql("ANALYZE")
        conn.commit()
    engine.dispose()


def _reads(lite_path: Path, pg_url: str, facts: dict, iterations: int, only: list[str]) -> float:
    """Paired timing of every read on both backends; prints one line per read and returns
    the worst PostgreSQL/SQLite ratio. Each iteration times the read once on each backend,
    the first side alternating; the line shows both medians, median(pg)/median(sqlite) and
    the median of the per-pair ratios, and whether the read meets :data:`READ_TARGET`."""
    cases = {k: v for k, v in read_cases(facts).items() if not only or any(o in k for o in only)}
    if not cases:
        raise SystemExit(f"no read matches --only {only!r}; the reads are: "
                         + ", ".join(read_cases(facts)))
    print(f"{iterations} paired iterations per read (first side alternating), medians; "
          f"target pg/sqlite <= {READ_TARGET:.1f}x")
    print(f"{'read':34s} {'sqlite ms':>10s} {'postgres ms':>12s} {'pg/sqlite':>10s} "
          f"{'paired':>7s}  target")
    worst = 0.0
    with TelemetryStore(lite_path) as lite, TelemetryStore(pg_url) as pg:
        # The floor: one trivial statement on each store's held connection. A read whose
        # SQLite time is below half of PostgreSQL's round trip cannot meet the target.
        floor = {}
        for side in (lite, pg):
            conn = side.connection()
            times = []
            for _ in range(200):
                t = time.perf_counter()
                conn.execute("SELECT 1").fetchall()
                times.append(time.perf_counter() - t)
            floor[id(side)] = statistics.median(times)
        pg_floor = floor[id(pg)]
        print(f"{'(round trip: SELECT 1)':34s} {floor[id(lite)] * 1e3:10.3f} {pg_floor * 1e3:12.3f}")
        for name, fn in cases.items():
            if fn(lite) != fn(pg):  # float sums may differ in the last bits: reported, not fatal
                print(f"{name}: the backends return different results")
            fn(lite), fn(pg)
            a, b, pairs = [], [], []
            for i in range(iterations):
                order = (lite, pg) if i % 2 == 0 else (pg, lite)
                took = {}
                for side in order:
                    t = time.perf_counter()
                    fn(side)
                    took[id(side)] = time.perf_counter() - t
                a.append(took[id(lite)])
                b.append(took[id(pg)])
                pairs.append(took[id(pg)] / took[id(lite)])
            ma, mb = statistics.median(a), statistics.median(b)
            ratio = mb / ma
            worst = max(worst, ratio)
            verdict = ("met" if ratio <= READ_TARGET else
                       "NOT MET (below the round trip)" if READ_TARGET * ma < pg_floor else "NOT MET")
            print(f"{name:34s} {ma * 1e3:10.3f} {mb * 1e3:12.3f} {ratio:9.2f}x "
                  f"{statistics.median(pairs):6.2f}x  {verdict}")
    return worst


def _report(worst: float) -> int:
    met = worst <= READ_TARGET
    print(f"\nworst read ratio {worst:.2f}x (target <= {READ_TARGET:.1f}x each): "
          f"{'MET' if met else 'NOT MET'}")
    return 0 if met else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pg-admin-url", default=os.environ.get(
        "HERMES_DATA_PG_ADMIN_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"))
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--per-thread", type=int, default=500)
    ap.add_argument("--calls", type=int, default=200_000)
    ap.add_argument("--iterations", type=int, default=15)
    ap.add_argument("--skip-writes", action="store_true", help="only the read comparison")
    ap.add_argument("--only", action="append", default=[],
                    help="time only the reads whose name contains this text (repeatable)")
    ap.add_argument("--keep", action="store_true",
                    help="keep the read data (SQLite file and PostgreSQL database) for --reuse")
    ap.add_argument("--reuse", nargs=2, metavar=("SQLITE_FILE", "PG_URL"),
                    help="time the reads on data kept by an earlier --keep run (upgraded and "
                         "analyzed again, so new revisions and statistics apply)")
    args = ap.parse_args(argv)
    if args.reuse:
        lite_r, pg_r = Path(args.reuse[0]), args.reuse[1]
        migrate.upgrade("telemetry", str(lite_r))
        migrate.upgrade("telemetry", pg_r)
        _analyze(pg_r)
        with TelemetryStore(lite_r) as s:
            facts = {"session": s.connection().execute(
                "SELECT session_id FROM runs ORDER BY started_at LIMIT 1 OFFSET "
                "(SELECT COUNT(*) / 2 FROM runs)").fetchone()[0]}
        return _report(_reads(lite_r, pg_r, facts, args.iterations, args.only))

    tmp = Path(tempfile.mkdtemp(prefix="hermes-backends-"))
    names = [f"hd_bench_{uuid.uuid4().hex[:8]}" for _ in range(2)]
    try:
        pg_w = _pg_database(args.pg_admin_url, names[0], True)
        pg_r = _pg_database(args.pg_admin_url, names[1], True)
        engine = sa.create_engine(pg_w)
        with engine.connect() as conn:
            version = conn.exec_driver_sql("SHOW server_version").scalar()
            sync = conn.exec_driver_sql("SHOW synchronous_commit").scalar()
        engine.dispose()
        lite_w = tmp / "writes.db"
        migrate.upgrade("telemetry", str(lite_w))
        with TelemetryStore(lite_w) as s:
            mode = s.connection().execute("PRAGMA journal_mode").fetchone()[0]
            lsync = s.connection().execute("PRAGMA synchronous").fetchone()[0]
        print(f"nproc {os.cpu_count()}; SQLite journal_mode={mode} synchronous={lsync}; "
              f"PostgreSQL {version} synchronous_commit={sync}\n")

        if not args.skip_writes:
            print(f"record_llm_call, {args.threads} threads x {args.per_thread} calls, 500 sessions")
            lite_rate, lite_ok = _writes(str(lite_w), args.threads, args.per_thread)
            pg_rate, pg_ok = _writes(pg_w, args.threads, args.per_thread)
            print(f"  sqlite      {lite_rate:10,.0f} calls/s   no lost update: {lite_ok}")
            print(f"  postgresql  {pg_rate:10,.0f} calls/s   no lost update: {pg_ok}")
            print(f"  ratio postgresql / sqlite: {pg_rate / lite_rate:.2f}x\n")

        lite_r = tmp / "reads.db"
        migrate.upgrade("telemetry", str(lite_r))
        facts = build(lite_r, args.calls)
        t0 = time.perf_counter()
        copy_store(str(lite_r), pg_r, batch=20_000)
        print(f"reads on {args.calls:,} llm_calls over 30 days (copied to PostgreSQL in "
              f"{time.perf_counter() - t0:.1f} s)")
        _analyze(pg_r)
        if args.keep:
            print(f"kept: --reuse {lite_r} {pg_r}")
        return _report(_reads(lite_r, pg_r, facts, args.iterations, args.only))
    finally:
        for name in names[:1] if args.keep else names:
            _pg_database(args.pg_admin_url, name, False)


if __name__ == "__main__":
    raise SystemExit(main())
