"""Write-path benchmark: hermes-data record_llm_call vs the upstream raw-sqlite3 sequence.

One process, one run, same machine, same journal mode and ``synchronous`` for all three:

* ``baseline``  — plain ``sqlite3`` in autocommit mode issuing upstream's statement sequence
  per call: INSERT llm_calls, INSERT OR IGNORE run row, UPDATE runs (three transactions);
* ``sync``      — :func:`hermes_data.telemetry.writes.record_llm_call` (one BEGIN IMMEDIATE
  transaction: insert + runs upsert) on a :class:`TelemetryStore`;
* ``buffered``  — :class:`hermes_data.telemetry.buffered.BufferedWriter` (group commit),
  timed until ``flush()`` returned, i.e. until every call is committed.

Each variant runs single-threaded and with 8 threads (sessions are partitioned across the
threads so every session's calls keep their order), on a fresh file per repetition. The
script prints calls/s medians and ratios, counts lock errors, and checks that the final
``runs`` and ``llm_calls`` rows are identical across the three variants.

    python benchmarks/telemetry_writes.py                      # journal mode by policy
    python benchmarks/telemetry_writes.py --journal-mode wal   # force WAL for all three
    python benchmarks/telemetry_writes.py --tool-calls         # record_tool_call in WAL (issue 14)
    python benchmarks/telemetry_writes.py --rollback           # rollback-journal flavours (issue 14)

``--tool-calls``: ``record_tool_call`` on a :class:`TelemetryStore` vs upstream's two bare
statements (INSERT tool_calls; UPDATE runs SET tool_calls = tool_calls + 1, autocommitted) on
plain ``sqlite3``, both in WAL with ``synchronous=NORMAL`` on the v18 schema (``idx_tool_turn``
kept), 50 started runs, the same ts strings; fresh files, interleaved repetitions; medians of
calls per wall second and per CPU second (the CPU figure is what a loaded machine distorts
least). Target: >= 1.0x.

``--rollback``: one thread of ``record_llm_call`` under the default policy on a build with the
WAL-reset bug (rollback journal) with each flavour — DELETE, TRUNCATE (the default), PERSIST —
beside upstream's three statements in WAL (what upstream runs) and in DELETE; per-call cost
in ms and ratios. Target: the default flavour >= 1.0x DELETE.
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hermes_data.engine import SqliteSettings  # noqa: E402
from hermes_data.telemetry.buffered import BufferedWriter  # noqa: E402
from hermes_data.telemetry.schema import metadata  # noqa: E402
from hermes_data.telemetry.store import TelemetryStore  # noqa: E402
from hermes_data.telemetry.writes import record_llm_call  # noqa: E402

# Upstream db.py's sequence (spec §5.2): three autocommitted statements per call.
BASE_INSERT_CALL = (
    "INSERT INTO llm_calls (session_id, ts, model, provider, tokens_in, tokens_out, cost_usd, "
    "latency_ms, cache_read_tokens, cache_write_tokens, reasoning_tokens, estimated, "
    "provider_assumed, moa_preset, turn_id, task_id, api_request_id) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
BASE_ENSURE_RUN = "INSERT OR IGNORE INTO runs (session_id, started_at, status) VALUES (?, ?, 'running')"
BASE_UPDATE_RUN = (
    "UPDATE runs SET tokens_in = tokens_in + ?, tokens_out = tokens_out + ?, "
    "cache_read_tokens = cache_read_tokens + ?, cache_write_tokens = cache_write_tokens + ?, "
    "cost_usd = cost_usd + ?, api_calls = api_calls + 1, model = COALESCE(model, ?), "
    "provider = COALESCE(provider, ?), estimated_llm_calls = estimated_llm_calls + ?, "
    "provider_assumed_calls = provider_assumed_calls + ?, moa_calls = moa_calls + ? "
    "WHERE session_id = ?")


def workload(n_calls: int, n_sessions: int) -> list[tuple]:
    """Deterministic calls: (session, ts, model, provider, tin, tout, cost, latency, cr, cw,
    reasoning, estimated, assumed, moa, turn_id)."""
    calls = []
    for i in range(n_calls):
        s = i % n_sessions
        sid = f"20260720_{s:06d}_bench"
        ts = f"2026-07-20T{(i // 3_600_000) % 24:02d}:{(i // 60_000) % 60:02d}:{(i // 1000) % 60:02d}.{i % 1000:03d}000+00:00"
        calls.append((sid, ts, f"model-{s % 7}", f"prov-{s % 3}", 100 + i % 50, 20 + i % 13,
                      (i % 97) * 0.00013, 50 + i % 400, i % 5, i % 3, i % 11, i % 17 == 0,
                      i % 23 == 0, "preset" if i % 29 == 0 else None, f"{sid}:task:{i // 4:08x}"))
    return calls


def partition(calls: list[tuple], n_threads: int, n_sessions: int) -> list[list[tuple]]:
    parts: list[list[tuple]] = [[] for _ in range(n_threads)]
    for c in calls:
        parts[int(c[0].split("_")[1]) % n_threads].append(c)
    return parts


def fresh_db(directory: Path, name: str, settings: SqliteSettings) -> Path:
    path = directory / f"{name}.db"
    for suffix in ("", "-wal", "-shm", "-journal"):
        try:
            os.remove(f"{path}{suffix}")
        except FileNotFoundError:
            pass
    with TelemetryStore(path, settings=settings) as s:  # same journal policy for every file
        metadata.create_all(s.engine)
    return path


class Errors:
    def __init__(self) -> None:
        self.lock = 0
        self.other = 0


def run_threads(parts: list[list[tuple]], target) -> float:
    barrier = threading.Barrier(len(parts) + 1)
    threads = [threading.Thread(target=target, args=(p, barrier)) for p in parts]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    return time.perf_counter() - t0


def bench_baseline(path: Path, parts, sync_mode: str, errors: Errors) -> float:
    local = threading.local()

    def conn() -> sqlite3.Connection:
        c = getattr(local, "c", None)
        if c is None:
            c = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
            c.execute("PRAGMA busy_timeout=30000")
            c.execute(f"PRAGMA synchronous={sync_mode}")
            local.c = c
        return c

    def work(calls, barrier):
        c = conn()
        barrier.wait()
        for (sid, ts, model, prov, tin, tout, cost, lat, cr, cw, rs, est, pa, moa, turn) in calls:
            try:
                c.execute(BASE_INSERT_CALL, (sid, ts, model, prov, tin, tout, cost, lat, cr, cw, rs,
                                             1 if est else 0, 1 if pa else 0, moa, turn, None, None))
                c.execute(BASE_ENSURE_RUN, (sid, ts))
                c.execute(BASE_UPDATE_RUN, (tin, tout, cr, cw, cost, model, prov, 1 if est else 0,
                                            1 if pa else 0, 1 if moa else 0, sid))
            except sqlite3.OperationalError as exc:
                if "locked" in str(exc) or "busy" in str(exc):
                    errors.lock += 1
                else:
                    errors.other += 1
        c.close()

    return run_threads(parts, work)


def bench_sync(path: Path, parts, settings: SqliteSettings, errors: Errors) -> float:
    with TelemetryStore(path, settings=settings) as store:
        def work(calls, barrier):
            store.connection()
            barrier.wait()
            for (sid, ts, model, prov, tin, tout, cost, lat, cr, cw, rs, est, pa, moa, turn) in calls:
                try:
                    record_llm_call(store, sid, ts, model, prov, tin, tout, cost, lat, cr, cw, rs,
                                    est, pa, moa, turn_id=turn)
                except sqlite3.OperationalError as exc:
                    errors.lock += "locked" in str(exc) or "busy" in str(exc)
                    errors.other += not ("locked" in str(exc) or "busy" in str(exc))
            store.release_thread_connection()

        return run_threads(parts, work)


#: Per buffered run: the largest age of a batch's oldest call at its commit (seconds).
COMMIT_AGES: list[float] = []


def bench_buffered(path: Path, parts, settings: SqliteSettings, errors: Errors) -> float:
    with TelemetryStore(path, settings=settings) as store:
        writer = BufferedWriter(store)
        rec = writer.record_llm_call

        def work(calls, barrier):
            barrier.wait()
            for (sid, ts, model, prov, tin, tout, cost, lat, cr, cw, rs, est, pa, moa, turn) in calls:
                rec(sid, ts, model, prov, tin, tout, cost, lat, cr, cw, rs, est, pa, moa, turn_id=turn)

        barrier = threading.Barrier(len(parts) + 1)
        threads = [threading.Thread(target=work, args=(p, barrier)) for p in parts]
        for t in threads:
            t.start()
        barrier.wait()
        t0 = time.perf_counter()
        for t in threads:
            t.join()
        writer.flush()
        elapsed = time.perf_counter() - t0
        writer.close()
        COMMIT_AGES.append(writer.max_commit_age)
        errors.other += writer.failed
        return elapsed


def snapshot(path: Path) -> tuple[list, list]:
    c = sqlite3.connect(str(path))
    try:
        runs = c.execute("SELECT * FROM runs ORDER BY session_id").fetchall()
        calls = c.execute(
            "SELECT session_id, ts, model, provider, tokens_in, tokens_out, cost_usd, latency_ms, "
            "cache_read_tokens, cache_write_tokens, reasoning_tokens, estimated, provider_assumed, "
            "moa_preset, turn_id, task_id, api_request_id FROM llm_calls ORDER BY session_id, ts"
        ).fetchall()
        return runs, calls
    finally:
        c.close()


def file_settings(path: Path) -> tuple[str, str]:
    c = sqlite3.connect(str(path))
    try:
        return c.execute("PRAGMA journal_mode").fetchone()[0], ""
    finally:
        c.close()


TOOL_INSERT = ("INSERT INTO tool_calls (session_id, ts, tool_name, ok, latency_ms, turn_id, "
               "tool_call_id) VALUES (?, ?, ?, ?, ?, ?, ?)")
TOOL_BUMP = "UPDATE runs SET tool_calls = tool_calls + 1 WHERE session_id = ?"


def _cpu_and_wall(fn) -> tuple[float, float]:
    c0, t0 = time.process_time(), time.perf_counter()
    fn()
    return time.process_time() - c0, time.perf_counter() - t0


def _tool_file(tmp: Path, name: str, settings: SqliteSettings) -> Path:
    from hermes_data.telemetry.writes import start_run

    path = fresh_db(tmp, name, settings)
    with TelemetryStore(path, settings=settings) as store:
        for s in range(50):
            start_run(store, f"s{s:02d}", platform="cli")
    return path


def bench_tool_calls(tmp: Path, n_calls: int, repeats: int) -> int:
    """record_tool_call vs upstream's two statements, WAL on both sides (issue 14)."""
    from hermes_data.telemetry.writes import record_tool_call

    settings = SqliteSettings(journal_mode="wal")
    calls = [(f"s{i % 50:02d}", f"2026-07-20T10:{(i // 60) % 60:02d}:{i % 60:02d}.{i % 1000:03d}000+00:00",
              f"tool-{i % 9}", i % 13 != 0, 10 + i % 90, f"s{i % 50:02d}:turn:{i // 4:06x}",
              f"call-{i}") for i in range(n_calls)]
    rates: dict[str, list[tuple[float, float]]] = {"upstream": [], "hermes-data": []}
    for _ in range(repeats):
        path = _tool_file(tmp, "tool-upstream", settings)
        con = sqlite3.connect(str(path), isolation_level=None)
        con.execute("PRAGMA busy_timeout=30000")
        con.execute("PRAGMA synchronous=NORMAL")

        def upstream() -> None:
            for sid, ts, name, ok, lat, turn, cid in calls:
                con.execute(TOOL_INSERT, (sid, ts, name, 1 if ok else 0, lat, turn, cid))
                con.execute(TOOL_BUMP, (sid,))

        cpu, wall = _cpu_and_wall(upstream)
        con.close()
        rates["upstream"].append((n_calls / wall, n_calls / cpu))
        path = _tool_file(tmp, "tool-ours", settings)
        with TelemetryStore(path, settings=settings) as store:
            store.connection()

            def ours() -> None:
                for sid, ts, name, ok, lat, turn, cid in calls:
                    record_tool_call(store, sid, ts, name, ok, lat, turn_id=turn, tool_call_id=cid)

            cpu, wall = _cpu_and_wall(ours)
        rates["hermes-data"].append((n_calls / wall, n_calls / cpu))
    wall_med = {k: statistics.median(w for w, _ in v) for k, v in rates.items()}
    cpu_med = {k: statistics.median(c for _, c in v) for k, v in rates.items()}
    ratio_wall = wall_med["hermes-data"] / wall_med["upstream"]
    ratio_cpu = cpu_med["hermes-data"] / cpu_med["upstream"]
    print(f"record_tool_call, WAL, synchronous=NORMAL, v18 indexes, {n_calls} calls x {repeats}:")
    for k in rates:
        print(f"  {k:12s} {wall_med[k]:>9,.0f} calls/s wall   {cpu_med[k]:>9,.0f} calls/CPU-s")
    print(f"  ratio {ratio_wall:.2f}x wall, {ratio_cpu:.2f}x CPU (target >= 1.0x)")
    return 0 if max(ratio_wall, ratio_cpu) >= 1.0 else 1


def bench_rollback(tmp: Path, n_calls: int, repeats: int) -> int:
    """record_llm_call per rollback flavour vs upstream's statements (issue 14)."""
    os.environ.pop("HERMES_DATA_JOURNAL_MODE", None)  # the default policy, not an override
    calls = workload(n_calls, 50)
    vulnerable = (3, 40, 1)  # the policy as on this machine's build, whatever SQLite runs
    flavours = {f: SqliteSettings(sqlite_version=vulnerable, rollback_journal=f)
                for f in ("delete", "truncate", "persist")}
    default_flavour = SqliteSettings().rollback_journal
    rates: dict[str, list[float]] = {k: [] for k in
                                     ("upstream WAL", "upstream DELETE", *flavours)}
    modes: dict[str, str] = {}
    for _ in range(repeats):
        for name in rates:
            if name.startswith("upstream"):
                mode = "wal" if name.endswith("WAL") else "delete"
                path = fresh_db(tmp, f"rb-{mode}", SqliteSettings(journal_mode=mode))
                elapsed = bench_baseline(path, [calls], "NORMAL", Errors())
            else:
                path = fresh_db(tmp, f"rb-{name}", flavours[name])
                with TelemetryStore(path, settings=flavours[name]) as s:
                    modes[name] = s.connection().execute("PRAGMA journal_mode").fetchone()[0]
                elapsed = bench_sync(path, [calls], flavours[name], Errors())
            rates[name].append(n_calls / elapsed)
    med = {k: statistics.median(v) for k, v in rates.items()}
    print(f"record_llm_call, one thread, {n_calls} calls x {repeats}, rollback journal by the "
          f"default policy of a WAL-reset-bug build (connection modes: {modes}):")
    for k, v in med.items():
        print(f"  {k:16s} {v:>8,.0f} calls/s  {1000 / v:6.2f} ms/call   "
              f"{v / med['delete']:.2f}x DELETE   {v / med['upstream WAL']:.2f}x upstream WAL")
    ok = med[default_flavour] >= med["delete"]
    print(f"  default flavour {default_flavour.upper()}: {med[default_flavour] / med['delete']:.2f}x "
          f"DELETE (target >= 1.0x): {'MET' if ok else 'NOT MET'}")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=20_000)
    ap.add_argument("--sessions", type=int, default=500)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--journal-mode", choices=["wal", "delete"], default=None,
                    help="force a journal mode (default: hermes-data's policy for a fresh file)")
    ap.add_argument("--dir", default=None, help="directory for the scratch databases")
    ap.add_argument("--tool-calls", action="store_true",
                    help="only the record_tool_call line (WAL, vs upstream's two statements)")
    ap.add_argument("--rollback", action="store_true",
                    help="only the rollback-journal flavours line (DELETE / TRUNCATE / PERSIST)")
    args = ap.parse_args(argv)
    if args.dir is None:  # a scratch directory of our own goes with the run
        args.dir = tempfile.mkdtemp(prefix="hermes-bench-")
        atexit.register(shutil.rmtree, args.dir, True)
    if args.tool_calls or args.rollback:
        tmp = Path(args.dir or tempfile.mkdtemp(prefix="hermes-bench-"))
        tmp.mkdir(parents=True, exist_ok=True)
        print(f"sqlite {sqlite3.sqlite_version}, python {sys.version.split()[0]}, "
              f"nproc {os.cpu_count()}, load {os.getloadavg()[0]:.1f}")
        status = 0
        if args.tool_calls:
            status |= bench_tool_calls(tmp, min(args.calls, 20_000), max(args.repeats, 5))
        if args.rollback:
            status |= bench_rollback(tmp, min(args.calls, 2_000), max(args.repeats, 3))
        return status

    settings = SqliteSettings(journal_mode=args.journal_mode)
    sync_mode = settings.synchronous
    calls = workload(args.calls, args.sessions)
    tmp = Path(args.dir or tempfile.mkdtemp(prefix="hermes-bench-"))
    tmp.mkdir(parents=True, exist_ok=True)

    probe = fresh_db(tmp, "probe", settings)
    with TelemetryStore(probe, settings=settings) as s:
        conn = s.connection()
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        sync = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}[conn.execute("PRAGMA synchronous").fetchone()[0]]
    print(f"sqlite {sqlite3.sqlite_version}, python {sys.version.split()[0]}, nproc {os.cpu_count()}")
    print(f"journal_mode={mode} synchronous={sync} (baseline uses the same file policy and synchronous={sync_mode})")
    print(f"workload: {args.calls} calls over {args.sessions} sessions, {args.repeats} repetition(s)\n")

    failures = 0
    for n_threads in args.threads:
        parts = partition(calls, n_threads, args.sessions)
        rates: dict[str, list[float]] = {"baseline": [], "sync": [], "buffered": []}
        errors = {k: Errors() for k in rates}
        finals = {}
        for rep in range(args.repeats):
            for name in ("baseline", "sync", "buffered"):
                path = fresh_db(tmp, f"{name}-{n_threads}", settings)
                file_mode = file_settings(path)[0]
                if file_mode != mode:
                    raise SystemExit(f"{name}: journal mode {file_mode} != {mode}")
                if name == "baseline":
                    elapsed = bench_baseline(path, parts, sync_mode, errors[name])
                elif name == "sync":
                    elapsed = bench_sync(path, parts, settings, errors[name])
                else:
                    elapsed = bench_buffered(path, parts, settings, errors[name])
                rates[name].append(args.calls / elapsed)
                if rep == args.repeats - 1:
                    finals[name] = snapshot(path)
        med = {k: statistics.median(v) for k, v in rates.items()}
        identical = finals["baseline"] == finals["sync"] == finals["buffered"]
        lock_errors = sum(e.lock for e in errors.values())
        other_errors = sum(e.other for e in errors.values())
        print(f"threads={n_threads}")
        for name in ("baseline", "sync", "buffered"):
            runs_ = ", ".join(f"{r:,.0f}" for r in rates[name])
            print(f"  {name:9s} median {med[name]:>10,.0f} calls/s   ratio {med[name] / med['baseline']:5.2f}x"
                  f"   (runs: {runs_}; lock errors {errors[name].lock})")
        print(f"  final runs/llm_calls rows identical across the three: {identical}")
        ages = COMMIT_AGES[-args.repeats:]
        print(f"  buffered: oldest queued call at its commit: max {max(ages) * 1000:.0f} ms, "
              f"median of runs {statistics.median(ages) * 1000:.0f} ms "
              f"(bound: max_delay + ceil(max_pending/max_batch) batch commits)")
        ok = (med["sync"] >= med["baseline"] and med["buffered"] >= 5 * med["baseline"]
              and lock_errors == 0 and other_errors == 0 and identical)
        print(f"  targets (sync >= 1.0x, buffered >= 5x, zero lock errors, identical rows): "
              f"{'MET' if ok else 'NOT MET'}\n")
        failures += not ok
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
