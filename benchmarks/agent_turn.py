"""Agent turn API hot paths (issue 17) against plain sqlite3 running the same statements.

    python benchmarks/agent_turn.py [--journal wal|delete] [--calls 2000] [--messages 20000]

Both sides run in this process on files in one temp directory, with the same journal mode
and ``synchronous`` setting. Reported: medians of --repeat runs and ratios.

* ``accounting``: one turn's accounting write. Baseline: plain sqlite3 sending, per call, the
  statements ``update_token_counts`` sends (row ensure, route read, summary update, route
  re-read, usage upsert) in one ``BEGIN IMMEDIATE``. Ours: ``update_token_counts`` (sync) and
  ``queue_token_counts`` + ``flush_token_counts`` (queued). Target: queued ≥ 0.9× baseline.
* ``8 threads``: the same calls from 8 threads, queued vs sync. Target: ≥ 5×.
* ``conversation``: ``get_messages_as_conversation`` of a 20,000-message session vs plain
  sqlite3 running the projection's own statement (the same rows and columns), both warm,
  interleaved, median of 5 calls per run. Target: ≤ 1.2× the time. Memory: the peak traced
  Python memory of one call of each (``tracemalloc``) and the process's peak RSS.
"""

from __future__ import annotations

import argparse
import resource
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hermes_data.engine import SqliteSettings  # noqa: E402
from hermes_data.sessions import sql  # noqa: E402
from hermes_data.sessions.sql import accounting as acc_sql  # noqa: E402
from hermes_data.sessions.sql import projections as proj_sql  # noqa: E402
from hermes_data.sessions.store import SessionStore  # noqa: E402

Q = sql.for_dialect("sqlite")
A = acc_sql.for_dialect("sqlite")
DELTA = dict(input_tokens=1200, output_tokens=80, api_call_count=1, model="m",
             billing_provider="p", estimated_cost_usd=0.004)


def open_store(path: Path, journal: str) -> SessionStore:
    return SessionStore(path, settings=SqliteSettings(busy_timeout_ms=1000, journal_mode=journal),
                        hermes_root=path.parent)


def baseline_conn(path: Path, journal: str) -> sqlite3.Connection:
    con = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    con.execute("PRAGMA busy_timeout=1000")
    con.execute(f"PRAGMA journal_mode={journal}")
    con.execute("PRAGMA synchronous=NORMAL")
    con.execute("PRAGMA foreign_keys=ON")
    return con


def _baseline_call(con: sqlite3.Connection, sid: str) -> None:
    con.execute("BEGIN IMMEDIATE")
    con.execute(Q.SESSION_MODEL_CONFIG, (sid,)).fetchall()
    con.execute(Q.ENRICH_SESSION, (*([None] * 9), "m", *([None] * 3), sid))
    con.execute(Q.PARENT_KEYS, (sid,)).fetchall()
    con.execute(Q.FILL_PROFILE, ("default", sid))
    con.execute(A.ROUTE_FOR_UPDATE, (sid,)).fetchall()
    con.execute(A.SUMMARY_ADD, (1200, 80, 0, 0, 0, 1, 0.004, None, None, None, None, None,
                                "p", None, None, "m", sid))
    con.execute(A.ROUTE, (sid,)).fetchall()
    now = time.time()
    con.execute(A.USAGE_UPSERT, (sid, "m", "p", "", "", "", 1, 1200, 80, 0, 0, 0, 0.004, 0.0,
                                 None, None, now, now))
    con.execute("COMMIT")


def bench_accounting(tmp: Path, journal: str, calls: int) -> tuple[float, float, float]:
    path = tmp / "acc.db"
    path.unlink(missing_ok=True)
    with open_store(path, journal) as s:
        s.create_session("base", "cli")
        s.create_session("ours", "cli")
        con = baseline_conn(path, journal)
        t0 = time.perf_counter()
        for _ in range(calls):
            _baseline_call(con, "base")
        base = calls / (time.perf_counter() - t0)
        con.close()
        t0 = time.perf_counter()
        for _ in range(calls):
            s.update_token_counts("ours", **DELTA)
        sync = calls / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        for _ in range(calls):
            s.queue_token_counts("ours", **DELTA)
        assert s.flush_token_counts(timeout=600)
        queued = calls / (time.perf_counter() - t0)
        assert s.get_session("ours").input_tokens == 2 * calls * 1200
    return base, sync, queued


def bench_threads(tmp: Path, journal: str, calls: int, threads: int = 8) -> tuple[float, float]:
    path = tmp / "thr.db"
    path.unlink(missing_ok=True)
    out = []
    with open_store(path, journal) as s:
        for mode in ("sync", "queued"):
            def run(t: int) -> None:
                sid = f"t{t}"
                for _ in range(calls // threads):
                    if mode == "sync":
                        s.update_token_counts(sid, **DELTA)
                    else:
                        s.queue_token_counts(sid, **DELTA)
            ts = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
            t0 = time.perf_counter()
            for th in ts:
                th.start()
            for th in ts:
                th.join()
            assert s.flush_token_counts(timeout=600)
            out.append(calls / (time.perf_counter() - t0))
    return out[0], out[1]


def bench_conversation(tmp: Path, journal: str, n: int, rounds: int = 5
                       ) -> tuple[float, float, int, int]:
    """Median seconds of the plain fetch and of ``get_messages_as_conversation`` over
    ``rounds`` interleaved calls, and the peak traced Python memory (bytes) of one call of
    each.

    The baseline runs the projection's own statement (``rows(1, 'active')``: the same rows
    and columns) on a plain ``sqlite3`` connection and keeps the tuples. Each side's first
    call is untimed and traced with ``tracemalloc`` (it opens or warms its connection), so
    both sides are timed warm and untraced."""
    path = tmp / "conv.db"
    if not path.exists():
        with open_store(path, journal) as s:
            s.create_session("big", "cli")
            rows = [{"role": "assistant" if i % 2 else "user",
                     "content": f"message {i} " + "lorem ipsum dolor sit amet " * 8}
                    for i in range(n)]
            s.append_messages_batch("big", rows, chunk_rows=5000)
    stmt = proj_sql.for_dialect("sqlite").rows(1, "active")
    con = baseline_conn(path, journal)
    tracemalloc.start()
    got = con.execute(stmt, ("big",)).fetchall()
    base_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(got) == n
    del got
    base: list[float] = []
    ours: list[float] = []
    with open_store(path, journal) as s:
        tracemalloc.start()
        conv = s.get_messages_as_conversation("big")
        ours_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert len(conv) == n
        del conv
        for _ in range(rounds):
            t0 = time.perf_counter()
            got = con.execute(stmt, ("big",)).fetchall()
            base.append(time.perf_counter() - t0)
            del got
            t0 = time.perf_counter()
            conv = s.get_messages_as_conversation("big")
            ours.append(time.perf_counter() - t0)
            del conv
    con.close()
    return statistics.median(base), statistics.median(ours), base_peak, ours_peak


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--journal", default="delete", choices=("wal", "delete"))
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--messages", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print(f"journal={args.journal} synchronous=NORMAL sqlite={sqlite3.sqlite_version}")
    acc, thr, conv = [], [], []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for _ in range(args.repeat):
            acc.append(bench_accounting(tmp, args.journal, args.calls))
            thr.append(bench_threads(tmp, args.journal, args.calls))
            conv.append(bench_conversation(tmp, args.journal, args.messages))
    med = lambda xs: statistics.median(xs)  # noqa: E731
    base, sync, queued = (med([a[i] for a in acc]) for i in range(3))
    print(f"accounting, 1 thread (calls/s): baseline {base:,.0f}  sync {sync:,.0f} "
          f"({sync / base:.2f}x)  queued+flush {queued:,.0f} ({queued / base:.2f}x, target >= 0.9x)")
    tsync, tqueued = (med([t[i] for t in thr]) for i in range(2))
    print(f"accounting, 8 threads (calls/s): sync {tsync:,.0f}  queued {tqueued:,.0f} "
          f"({tqueued / tsync:.1f}x, target >= 5x)")
    cbase, cours, bpeak, opeak = (med([c[i] for c in conv]) for i in range(4))
    print(f"get_messages_as_conversation, {args.messages:,} rows: plain fetch {cbase * 1000:.0f} ms"
          f"  ours {cours * 1000:.0f} ms ({cours / cbase:.2f}x, target <= 1.2x); "
          f"peak traced memory of one call: plain fetch {bpeak / 2**20:.1f} MiB, "
          f"ours {opeak / 2**20:.1f} MiB; process peak RSS "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    ok = queued / base >= 0.9 and tqueued / tsync >= 5 and cours / cbase <= 1.2
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
