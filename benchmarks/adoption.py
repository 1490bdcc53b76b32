"""Adoption/upgrade benchmark (issue 3, item 6).

Two measurements, each against a baseline measured in the same run on the same data:

1. **Up-to-date file.** ``hermes-data upgrade`` on a file already at the head: whole-process
   wall time (``python -m hermes_data.cli upgrade …``) and in-process
   :func:`hermes_data.migrate.runner.upgrade` time, medians of ``--runs`` runs. Baselines: a Python
   process that only opens the file with ``sqlite3`` and reads ``alembic_version``; the same
   read in-process. The target is "well under a second" for the whole process.
2. **Adopting a large legacy file.** A v1-level ``telemetry.db`` (the upstream v1 DDL, same
   declared types and defaults as the fixtures, WAL like them) of about ``--size-mb`` MB is
   generated with plain ``sqlite3``, copied twice, and

   * copy A is adopted by :func:`hermes_data.migrate.runner.upgrade`; every write statement it sends
     is recorded (with its parameters) and the report's per-step times are printed;
   * copy B gets exactly those recorded statements replayed with plain ``sqlite3`` in one
     ``BEGIN IMMEDIATE`` transaction, same ``journal_mode`` and ``synchronous`` — what SQLite
     itself needs for the same work. Per step and in total, the ratio hermes-data / SQLite is
     printed; "dominated by SQLite's own work" means the total ratio is close to 1.

The journal mode and ``synchronous`` of both sides are printed.

    python benchmarks/adoption.py                    # ~1 GB legacy file (needs ~3 GB in --dir)
    python benchmarks/adoption.py --size-mb 100      # a quicker run
    python benchmarks/adoption.py --skip-large       # only the up-to-date measurement

Generated files live in a temporary directory (``--dir`` to choose where) and are removed at
the end unless ``--keep``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sqlalchemy import event  # noqa: E402
from sqlalchemy.engine import Engine  # noqa: E402

from hermes_data.migrate import runner as migrate
from hermes_data.engine import WRITE_PREFIXES, SqliteSettings  # noqa: E402

# The upstream plugin's v1 DDL (spec telemetry §2, commit 949d9b6), as the fixtures hold it.
V1_DDL = """
CREATE TABLE IF NOT EXISTS schema_version (
    version  INTEGER PRIMARY KEY,
    applied_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS runs (
    session_id   TEXT PRIMARY KEY,
    platform     TEXT,
    cron_job_id  TEXT,
    model        TEXT,
    provider     TEXT,
    started_at   TEXT NOT NULL,
    ended_at     TEXT,
    status       TEXT DEFAULT 'running',
    tokens_in    INTEGER DEFAULT 0,
    tokens_out   INTEGER DEFAULT 0,
    cost_usd     REAL DEFAULT 0.0,
    duration_ms  INTEGER,
    api_calls    INTEGER DEFAULT 0,
    tool_calls   INTEGER DEFAULT 0
);
CREATE TABLE IF NOT EXISTS llm_calls (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id  TEXT NOT NULL,
    ts          TEXT NOT NULL,
    model       TEXT,
    provider    TEXT,
    tokens_in   INTEGER DEFAULT 0,
    tokens_out  INTEGER DEFAULT 0,
    cost_usd    REAL DEFAULT 0.0,
    latency_ms  INTEGER
);
CREATE TABLE IF NOT EXISTS tool_calls (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id  TEXT NOT NULL,
    ts          TEXT NOT NULL,
    tool_name   TEXT NOT NULL,
    ok          INTEGER NOT NULL DEFAULT 1,
    latency_ms  INTEGER
);
CREATE INDEX IF NOT EXISTS idx_runs_started    ON runs(started_at);
CREATE INDEX IF NOT EXISTS idx_runs_platform   ON runs(platform);
CREATE INDEX IF NOT EXISTS idx_runs_cron_job   ON runs(cron_job_id);
CREATE INDEX IF NOT EXISTS idx_llm_session     ON llm_calls(session_id);
CREATE INDEX IF NOT EXISTS idx_llm_ts          ON llm_calls(ts);
CREATE INDEX IF NOT EXISTS idx_tool_session    ON tool_calls(session_id);
CREATE INDEX IF NOT EXISTS idx_tool_name       ON tool_calls(tool_name);
"""

CALLS_PER_SESSION = 12
BATCH = 200_000
EPOCH = 1_780_000_000  # 2026-05-28

# Rows generated inside SQLite (a recursive CTE) — Python only drives the batches.
_GEN_LLM = f"""
WITH RECURSIVE c(i) AS (SELECT :start UNION ALL SELECT i + 1 FROM c WHERE i < :stop)
INSERT INTO llm_calls (session_id, ts, model, provider, tokens_in, tokens_out, cost_usd, latency_ms)
SELECT printf('sess-%08d', i / {CALLS_PER_SESSION}),
       strftime('%Y-%m-%dT%H:%M:%S+00:00', {EPOCH} + i * 7, 'unixepoch'),
       CASE i % 5 WHEN 0 THEN 'anthropic/claude-sonnet-4' WHEN 1 THEN 'openai/gpt-4.1-mini'
            WHEN 2 THEN 'google/gemini-2.5-flash' WHEN 3 THEN 'meta-llama/llama-3.3-70b'
            ELSE 'qwen/qwen3-coder' END,
       CASE i % 3 WHEN 0 THEN 'openrouter' WHEN 1 THEN 'anthropic' ELSE 'nous' END,
       (i * 37) % 20000, (i * 11) % 4000,
       CASE WHEN i % 9 = 0 THEN 0.0 ELSE ((i * 13) % 1000) / 100000.0 END,
       200 + (i * 17) % 9000
FROM c
"""
_GEN_TOOL = f"""
WITH RECURSIVE c(i) AS (SELECT :start UNION ALL SELECT i + 1 FROM c WHERE i < :stop)
INSERT INTO tool_calls (session_id, ts, tool_name, ok, latency_ms)
SELECT printf('sess-%08d', i / {CALLS_PER_SESSION}),
       strftime('%Y-%m-%dT%H:%M:%S+00:00', {EPOCH} + i * 7 + 3, 'unixepoch'),
       CASE i % 6 WHEN 0 THEN 'terminal' WHEN 1 THEN 'read_file' WHEN 2 THEN 'web_search'
            WHEN 3 THEN 'write_file' WHEN 4 THEN 'browser_navigate' ELSE 'patch' END,
       CASE WHEN i % 50 = 0 THEN 0 ELSE 1 END,
       5 + (i * 29) % 3000
FROM c WHERE i % 4 <> 0
"""
_GEN_RUNS = f"""
WITH RECURSIVE c(i) AS (SELECT :start UNION ALL SELECT i + 1 FROM c WHERE i < :stop)
INSERT INTO runs (session_id, platform, cron_job_id, model, provider, started_at, ended_at,
                  status, tokens_in, tokens_out, cost_usd, duration_ms, api_calls, tool_calls)
SELECT printf('sess-%08d', i),
       CASE i % 4 WHEN 0 THEN 'cli' WHEN 1 THEN 'telegram' WHEN 2 THEN 'discord' ELSE 'cron' END,
       CASE WHEN i % 4 = 3 THEN printf('job-%03d', i % 97) END,
       'anthropic/claude-sonnet-4', 'openrouter',
       strftime('%Y-%m-%dT%H:%M:%S+00:00', {EPOCH} + i * 7 * {CALLS_PER_SESSION}, 'unixepoch'),
       strftime('%Y-%m-%dT%H:%M:%S+00:00', {EPOCH} + i * 7 * {CALLS_PER_SESSION} + 80, 'unixepoch'),
       'completed', (i * 37) % 200000, (i * 11) % 40000, ((i * 13) % 1000) / 1000.0,
       1000 + i % 60000, {CALLS_PER_SESSION}, 9
FROM c
"""


def _median(values: list[float]) -> float:
    return statistics.median(values)


def _ms(s: float) -> str:
    return f"{s * 1000:9.1f} ms"


def _ratio(a: float, b: float) -> str:
    return f"{a / b:6.2f}x" if b > 0 else "   n/a"


# ---------------------------------------------------------------------------------------------
# 1. Up-to-date file


def bench_up_to_date(workdir: Path, runs: int) -> None:
    db = workdir / "head.db"
    migrate.upgrade("telemetry", db)
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}

    def wall(argv: list[str]) -> float:
        t0 = time.perf_counter()
        proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True)
        elapsed = time.perf_counter() - t0
        if proc.returncode != 0:
            raise SystemExit(f"{argv} failed: {proc.stderr}")
        return elapsed

    cli = [sys.executable, "-m", "hermes_data.cli", "upgrade", "--store", "telemetry",
           "--url", str(db)]
    baseline = [sys.executable, "-c",
                "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
                "c.execute('SELECT version_num FROM alembic_version').fetchall(); c.close()",
                str(db)]
    imports = [sys.executable, "-c", "import hermes_data.cli.app, hermes_data.telemetry.migration"]
    wall(cli)  # page cache, .pyc files
    cli_s = _median([wall(cli) for _ in range(runs)])
    base_s = _median([wall(baseline) for _ in range(runs)])
    import_s = _median([wall(imports) for _ in range(runs)])

    migrate.upgrade("telemetry", db)
    inproc = []
    for _ in range(runs):
        t0 = time.perf_counter()
        report = migrate.upgrade("telemetry", db)
        inproc.append(time.perf_counter() - t0)
        assert report.up_to_date, report
    reads = []
    for _ in range(runs):
        t0 = time.perf_counter()
        con = sqlite3.connect(db)
        con.execute("SELECT version_num FROM alembic_version").fetchall()
        con.close()
        reads.append(time.perf_counter() - t0)
    inproc_s, read_s = _median(inproc), _median(reads)

    print(f"\n== up-to-date file ({runs} runs each, medians) — journal_mode={report.journal_mode}, "
          f"synchronous={SqliteSettings().synchronous} (read-only path)")
    print(f"  hermes-data upgrade, whole process      {_ms(cli_s)}")
    print(f"  python + sqlite3 read (baseline)        {_ms(base_s)}   ratio {_ratio(cli_s, base_s)}")
    print(f"  python + imports only                   {_ms(import_s)}")
    print(f"  migrate.upgrade in-process              {_ms(inproc_s)}")
    print(f"  sqlite3 open+read in-process (baseline) {_ms(read_s)}   ratio {_ratio(inproc_s, read_s)}")
    print(f"  -> whole process {cli_s:.3f} s, of which interpreter start-up and imports "
          f"{import_s:.3f} s; hermes-data's own work on a settled file {inproc_s * 1000:.1f} ms "
          "(read-only: no lock, no write)")


# ---------------------------------------------------------------------------------------------
# 2. Large legacy file


def generate_v1(path: Path, size_mb: int, journal_mode: str) -> dict:
    """A v1-level legacy file of about ``size_mb`` MB; returns row counts."""
    target = size_mb * 1024 * 1024
    con = sqlite3.connect(path, isolation_level=None)
    try:
        con.execute(f"PRAGMA journal_mode={journal_mode}")
        con.execute("PRAGMA synchronous=OFF")  # generation only; the benchmark sets its own
        con.executescript(V1_DDL)
        con.execute("INSERT INTO schema_version (version, applied_at) VALUES (1, ?)",
                    ("2026-05-31T00:00:00+00:00",))
        done = 0
        page_size = con.execute("PRAGMA page_size").fetchone()[0]
        while True:
            con.execute("BEGIN")
            con.execute(_GEN_LLM, {"start": done, "stop": done + BATCH - 1})
            con.execute(_GEN_TOOL, {"start": done, "stop": done + BATCH - 1})
            con.execute(_GEN_RUNS, {"start": done // CALLS_PER_SESSION,
                                    "stop": (done + BATCH) // CALLS_PER_SESSION - 1})
            con.execute("COMMIT")
            done += BATCH
            size = con.execute("PRAGMA page_count").fetchone()[0] * page_size
            print(f"\r  generating: {size / 2**20:8.0f} MB, {done:,} llm_calls", end="", flush=True)
            if size >= target:
                break
        print()
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # our private file: settle it
        return {t: con.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
                for t in ("runs", "llm_calls", "tool_calls")}
    finally:
        con.close()


_VERSION_UPDATE = re.compile(r"SET version_num='(v\d+)'")


class StatementRecorder:
    """Every write statement (and its parameters) any engine sends, tagged with its step."""

    def __init__(self):
        self.statements: list[tuple[str, object]] = []
        self.steps: list[tuple[str, list[int]]] = []
        self._pending: list[int] = []

    def __call__(self, conn, cursor, statement, parameters, context, executemany):
        head = statement.lstrip().split(None, 1)[0].upper() if statement.strip() else ""
        if head not in WRITE_PREFIXES:
            return  # reads (shape inspection) and BEGIN are hermes-data's own overhead
        self.statements.append((statement, parameters))
        self._pending.append(len(self.statements) - 1)
        if head == "INSERT" and "alembic_version" in statement:
            self._close("adopt")  # the stamp ends adoption
        m = _VERSION_UPDATE.search(statement)
        if head == "UPDATE" and m:
            self._close(m.group(1))  # a revision's statements end with its version update

    def _close(self, step: str) -> None:
        self.steps.append((step, self._pending))
        self._pending = []

    def finish(self) -> None:
        if self._pending:
            self._close("reconcile")


def replay(path: Path, recorder: StatementRecorder, synchronous: str) -> tuple[float, dict, str]:
    """Run the recorded statements with plain sqlite3 in one BEGIN IMMEDIATE transaction."""
    per_step: dict[str, float] = {}
    t0 = time.perf_counter()
    con = sqlite3.connect(path, isolation_level=None, timeout=30)
    con.execute("PRAGMA busy_timeout=30000")
    mode = con.execute("PRAGMA journal_mode").fetchone()[0]
    con.execute(f"PRAGMA synchronous={synchronous}")
    sync_value = con.execute("PRAGMA synchronous").fetchone()[0]
    con.execute("BEGIN IMMEDIATE")
    for step, indexes in recorder.steps:
        s0 = time.perf_counter()
        for i in indexes:
            statement, params = recorder.statements[i]
            con.execute(statement, params or ())
        per_step[step] = per_step.get(step, 0.0) + time.perf_counter() - s0
    c0 = time.perf_counter()
    con.execute("COMMIT")
    con.close()  # the last close checkpoints, as the engine's dispose() does
    per_step["commit+close"] = time.perf_counter() - c0
    return time.perf_counter() - t0, per_step, f"journal_mode={mode}, synchronous={sync_value}"


def bench_large(workdir: Path, size_mb: int, journal_mode: str) -> None:
    source = workdir / "legacy_v1.db"
    print(f"\n== adopting a large v1-level legacy file (~{size_mb} MB, {journal_mode})")
    t0 = time.perf_counter()
    counts = generate_v1(source, size_mb, journal_mode)
    print(f"  generated in {time.perf_counter() - t0:.1f} s: "
          + ", ".join(f"{t} {n:,}" for t, n in counts.items())
          + f"; {source.stat().st_size / 2**20:.0f} MB")
    a, b = workdir / "adopt_hermes.db", workdir / "adopt_sqlite.db"
    shutil.copyfile(source, a)
    shutil.copyfile(source, b)
    source.unlink()

    recorder = StatementRecorder()
    event.listen(Engine, "before_cursor_execute", recorder)
    try:
        report = migrate.upgrade("telemetry", a)
    finally:
        event.remove(Engine, "before_cursor_execute", recorder)
    recorder.finish()
    assert report.after_revision == "v18" and report.adopted_from, report
    con = sqlite3.connect(a)
    hermes_sync = con.execute("PRAGMA synchronous").fetchone()[0]  # a fresh connection: default
    con.close()

    base_total, base_steps, base_settings = replay(b, recorder, SqliteSettings().synchronous)
    drift = [d for d in migrate.check("telemetry", b) if not d.is_extra]
    assert drift == [], f"the replayed copy is not at the head: {drift}"

    print(f"  hermes-data: journal_mode={report.journal_mode}, "
          f"synchronous={SqliteSettings().synchronous} (a plain connection defaults to {hermes_sync})")
    print(f"  sqlite3    : {base_settings}  (1 = NORMAL)")
    print(f"  adopted from: {report.adopted_from}")
    print(f"  {len(recorder.statements)} write statements recorded and replayed\n")
    print(f"  {'step':<14}{'hermes-data':>14}{'sqlite3':>14}{'ratio':>9}")
    steps = list(report.step_seconds.items())
    for step, seconds in steps:
        base = base_steps.get(step, 0.0)
        print(f"  {step:<14}{_ms(seconds):>14}{_ms(base):>14}  {_ratio(seconds, base)}")
    print(f"  {'commit+close':<14}{'(in total)':>14}{_ms(base_steps['commit+close']):>14}")
    print(f"  {'TOTAL':<14}{_ms(report.seconds):>14}{_ms(base_total):>14}  "
          f"{_ratio(report.seconds, base_total)}")
    heavy = max(steps, key=lambda kv: kv[1])
    print(f"  slowest step: {heavy[0]} ({heavy[1]:.2f} s); hermes-data beyond SQLite's own work: "
          f"{report.seconds - base_total:+.2f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024, help="legacy file size (default 1024)")
    parser.add_argument("--runs", type=int, default=15, help="runs for the up-to-date medians")
    parser.add_argument("--journal-mode", choices=["wal", "delete"], default="wal",
                        help="journal mode of the generated legacy file (fixtures are WAL)")
    parser.add_argument("--skip-large", action="store_true", help="only the up-to-date part")
    parser.add_argument("--dir", help="where to put the generated files (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the generated files")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="hermes-adoption-bench-", dir=args.dir))
    print(f"SQLite {sqlite3.sqlite_version}, Python {sys.version.split()[0]}, work dir {workdir}")
    try:
        bench_up_to_date(workdir, args.runs)
        if not args.skip_large:
            bench_large(workdir, args.size_mb, args.journal_mode)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
