"""Agent turn API hot paths (issue 17) against plain sqlite3 running the same statements.

    python benchmarks/agent_turn.py [--journal wal|delete] [--calls 2000] [--messages 20000]
        [--repeat 3] [--rounds 11] [--only accounting|conversation] [--shape plain|mixed|both]

Both sides run in this process on files in one temp directory, with the same journal mode
and ``synchronous`` setting. Reported: medians of --repeat runs and ratios.

* ``accounting``: one turn's accounting write. Baseline: plain sqlite3 sending, per call, the
  statements ``update_token_counts`` sends (row ensure, route read, summary update, route
  re-read, usage upsert) in one ``BEGIN IMMEDIATE``. Ours: ``update_token_counts`` (sync) and
  ``queue_token_counts`` + ``flush_token_counts`` (queued). Target: queued ≥ 0.9× baseline.
* ``8 threads``: the same calls from 8 threads, queued vs sync. Target: ≥ 5×.
* ``conversation``: ``get_messages_as_conversation`` of a 20,000-message session vs plain
  sqlite3 running the projection's own statement (the same rows and columns) and keeping
  the tuples (``fetchall``); both warm. Each repetition times --rounds (>= 5) interleaved
  pairs of calls, alternating which side goes first, in wall-clock and in CPU time of the
  calling thread; the ratio is median(ours) / median(baseline) of the wall-clock times,
  printed with the target beside it, the median per-pair ratio and the CPU-time ratio (the
  steadier figure on a shared machine), then the median over repetitions. Target: ≤ 1.2×
  on the ``plain`` transcript (text turns); the ``mixed`` one (agent turns with a tool call
  and its result: JSON to parse, optional columns set) is reported beside it. Memory: the
  peak traced Python memory of one call of each (``tracemalloc``), the resident set after
  the first and the last round (bounded: no growth across calls), and the process's peak RSS.
"""

from __future__ import annotations

import argparse
import json
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
from hermes_data.sessions.agent import accounting_sql as acc_sql
from hermes_data.sessions.agent import projections_sql as proj_sql
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


def _rss_mib() -> float:
    """The process's current resident set (MiB; Linux ``/proc``, else the peak)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize() / 2**20
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def transcript(n: int, shape: str) -> list[dict]:
    """``n`` messages: ``plain`` alternates user and assistant text turns (no optional
    column); ``mixed`` repeats an agent turn of four — user ask, assistant tool call
    (``tool_calls`` JSON, finish reason, reasoning), tool result, assistant answer (finish
    reason) — so three rows in four take the general path and one in four parses JSON."""
    if shape == "plain":
        return [{"role": "assistant" if i % 2 else "user",
                 "content": f"message {i} " + "lorem ipsum dolor sit amet " * 8}
                for i in range(n)]
    rows: list[dict] = []
    for i in range(n // 4):
        call = {"id": f"call_{i}", "type": "function", "function": {
            "name": "read_file", "arguments": json.dumps({"path": f"src/module_{i}.py"})}}
        rows += [{"role": "user", "content": f"ask {i} " + "lorem ipsum dolor sit amet " * 4},
                 {"role": "assistant", "content": "", "tool_calls": [call],
                  "finish_reason": "tool_calls", "reasoning": "the file is needed"},
                 {"role": "tool", "content": "file body line\n" * 12,
                  "tool_call_id": f"call_{i}", "tool_name": "read_file"},
                 {"role": "assistant", "content": f"answer {i} " + "lorem ipsum " * 10,
                  "finish_reason": "stop"}]
    return rows


def bench_conversation(tmp: Path, journal: str, n: int, rounds: int = 11,
                       shape: str = "plain") -> dict[str, float]:
    """One repetition of the conversation line: ``rounds`` interleaved pairs of calls (the
    plain fetch and ``get_messages_as_conversation``, the order alternating each round), each
    timed in wall-clock and in CPU time of the calling thread; medians of each, the median of
    the per-round ratios, the peak traced Python memory (bytes) of one call of each and the
    resident set (MiB) after the first and the last round.

    The baseline runs the projection's own statement (``rows(1, 'active')``: the same rows
    and columns) on a plain ``sqlite3`` connection and keeps the tuples (``fetchall``). Each
    side's first call is untimed and traced with ``tracemalloc`` (it opens or warms its
    connection), so both sides are timed warm and untraced."""
    path = tmp / f"conv-{shape}.db"
    if not path.exists():
        with open_store(path, journal) as s:
            s.create_session("big", "cli")
            s.append_messages_batch("big", transcript(n, shape), chunk_rows=5000)
    stmt = proj_sql.for_dialect("sqlite").rows(1, "active")
    con = baseline_conn(path, journal)
    tracemalloc.start()
    got = con.execute(stmt, ("big",)).fetchall()
    base_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(got) == n
    del got
    wall: dict[str, list[float]] = {"base": [], "ours": []}
    cpu: dict[str, list[float]] = {"base": [], "ours": []}
    with open_store(path, journal) as s:
        tracemalloc.start()
        conv = s.get_messages_as_conversation("big")
        ours_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert len(conv) == n
        del conv
        calls = {"base": lambda: con.execute(stmt, ("big",)).fetchall(),
                 "ours": lambda: s.get_messages_as_conversation("big")}
        rss = []
        for i in range(rounds):
            for side in ("base", "ours") if i % 2 == 0 else ("ours", "base"):
                c0, t0 = time.thread_time(), time.perf_counter()
                result = calls[side]()
                wall[side].append(time.perf_counter() - t0)
                cpu[side].append(time.thread_time() - c0)
                assert len(result) == n
                del result
            rss.append(_rss_mib())
    con.close()
    med = statistics.median
    return {"base": med(wall["base"]), "ours": med(wall["ours"]),
            "ratio": med(wall["ours"]) / med(wall["base"]),
            "pair_ratio": med([o / b for o, b in zip(wall["ours"], wall["base"])]),
            "cpu_ratio": med(cpu["ours"]) / med(cpu["base"]),
            "base_peak": base_peak, "ours_peak": ours_peak,
            "rss_first": rss[0], "rss_last": rss[-1]}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--journal", default="delete", choices=("wal", "delete"))
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--messages", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=11,
                    help="interleaved call pairs per repetition of the conversation line (>= 5)")
    ap.add_argument("--only", choices=("accounting", "conversation"),
                    help="run one part (default: both)")
    ap.add_argument("--shape", choices=("plain", "mixed", "both"), default="both",
                    help="conversation transcripts: plain text turns (the target's line), a "
                         "mix of tool calls and results (reported beside it), or both")
    args = ap.parse_args()
    if args.rounds < 5:
        ap.error("--rounds must be at least 5")
    print(f"journal={args.journal} synchronous=NORMAL sqlite={sqlite3.sqlite_version}")
    acc: list = []
    thr: list = []
    conv: dict[str, list[dict[str, float]]] = {}
    shapes = ("plain", "mixed") if args.shape == "both" else (args.shape,)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for _ in range(args.repeat):
            if args.only != "conversation":
                acc.append(bench_accounting(tmp, args.journal, args.calls))
                thr.append(bench_threads(tmp, args.journal, args.calls))
            if args.only != "accounting":
                for shape in shapes:
                    conv.setdefault(shape, []).append(bench_conversation(
                        tmp, args.journal, args.messages, args.rounds, shape))
    med = lambda xs: statistics.median(xs)  # noqa: E731
    ok = True
    if acc:
        base, sync, queued = (med([a[i] for a in acc]) for i in range(3))
        print(f"accounting, 1 thread (calls/s): baseline {base:,.0f}  sync {sync:,.0f} "
              f"({sync / base:.2f}x)  queued+flush {queued:,.0f} ({queued / base:.2f}x, "
              "target >= 0.9x)")
        tsync, tqueued = (med([t[i] for t in thr]) for i in range(2))
        print(f"accounting, 8 threads (calls/s): sync {tsync:,.0f}  queued {tqueued:,.0f} "
              f"({tqueued / tsync:.1f}x, target >= 5x)")
        ok = queued / base >= 0.9 and tqueued / tsync >= 5
    for shape, runs in conv.items():
        c = {k: med([r[k] for r in runs]) for k in runs[0]}
        target = "target <= 1.2x" if shape == "plain" else "reported, no target"
        print(f"get_messages_as_conversation, {args.messages:,} {shape} rows ({args.repeat} x "
              f"{args.rounds} interleaved calls): plain fetch {c['base'] * 1000:.1f} ms  ours "
              f"{c['ours'] * 1000:.1f} ms -> {c['ratio']:.3f}x ({target}); median per-pair "
              f"ratio {c['pair_ratio']:.3f}x; CPU time {c['cpu_ratio']:.3f}x; per repetition: "
              + " ".join(f"{r['ratio']:.3f}x" for r in runs))
        print(f"  memory: peak traced Python memory of one call: plain fetch "
              f"{c['base_peak'] / 2**20:.1f} MiB, ours {c['ours_peak'] / 2**20:.1f} MiB; "
              f"resident set after the first / last round {c['rss_first']:.0f} / "
              f"{c['rss_last']:.0f} MiB; process peak RSS so far "
              f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
        if shape == "plain":
            ok = ok and c["ratio"] <= 1.2
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
