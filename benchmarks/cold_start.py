"""Cold start (issue 14): a new process that imports the telemetry store and records one call.

Whole-process wall times, medians of ``--runs`` interleaved runs, on one settled telemetry
file (created once at the head; each run writes one more call):

* ``python``      — ``python -c pass`` (the interpreter alone);
* ``sqlalchemy``  — ``python -c "import sqlalchemy"``;
* ``upstream``    — plain ``sqlite3``: connect, upstream's pragmas (busy_timeout, journal
  mode read, synchronous), its schema-version read, then its per-call sequence (INSERT
  llm_calls; INSERT OR IGNORE runs; UPDATE runs) — written for this script;
* ``hermes-data`` — ``from hermes_data.telemetry import TelemetryStore, record_llm_call``,
  open the store, ``record_llm_call``, close.

Printed: every median (wall and CPU = user + system time of the child), **hermes-data's own
share** = ``hermes-data − sqlalchemy`` (target ≤ 30 ms: everything beyond ``import
sqlalchemy`` — our modules, the SQLite dialect and the engine set-up; judged on CPU time, which
a loaded machine distorts least) — also as the median of the per-round differences (the two
processes of a round run back to back, so the drift of a shared machine's speed between rounds
cancels) —, the ratio to upstream, and ``-X importtime``'s self time of the ``hermes_data.*``
modules (median). Also checked: no PostgreSQL module and no Alembic in the
hermes-data process.

    python benchmarks/cold_start.py [--runs 21]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
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

#: Target for hermes-data's share beyond ``import sqlalchemy`` (issue 14).
TARGET_SHARE_MS = 30.0

_UPSTREAM = """
import sqlite3, sys
c = sqlite3.connect(sys.argv[1], timeout=30, isolation_level=None)
c.execute("PRAGMA busy_timeout=30000")
c.execute("PRAGMA journal_mode").fetchone()
c.execute("PRAGMA synchronous=NORMAL")
c.execute("SELECT MAX(version) FROM schema_version").fetchone()
ts = "2026-07-20T10:00:00+00:00"
c.execute("INSERT INTO llm_calls (session_id, ts, model, provider, tokens_in, tokens_out, "
          "cost_usd, latency_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
          ("cold", ts, "m", "p", 10, 2, 0.001, 50))
c.execute("INSERT OR IGNORE INTO runs (session_id, started_at, status) VALUES (?, ?, 'running')",
          ("cold", ts))
c.execute("UPDATE runs SET tokens_in = tokens_in + ?, tokens_out = tokens_out + ?, "
          "cost_usd = cost_usd + ?, api_calls = api_calls + 1, model = COALESCE(model, ?), "
          "provider = COALESCE(provider, ?) WHERE session_id = ?",
          (10, 2, 0.001, "m", "p", "cold"))
c.close()
"""

_OURS = """
import sys
from hermes_data.telemetry import TelemetryStore, record_llm_call
store = TelemetryStore(sys.argv[1])
record_llm_call(store, "cold", None, "m", "p", tokens_in=10, tokens_out=2, cost_usd=0.001,
                latency_ms=50)
store.close()
"""

_CHECK = _OURS + """
import json
print(json.dumps([m for m in sys.modules if m.startswith(("sqlalchemy.dialects.postgresql",
                  "alembic", "psycopg", "asyncpg"))]))
"""

_VARIANTS = {"python": "pass", "sqlalchemy": "import sqlalchemy", "upstream": _UPSTREAM,
             "hermes-data": _OURS}


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


#: Children write and reuse bytecode (an installed package has its .pyc files; a checkout
#: run with PYTHONDONTWRITEBYTECODE=1 would compile every hermes_data module from source).
_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def _run(code: str, path: Path) -> tuple[float, float]:
    """Wall time and CPU time (user + system) of one child process."""
    c0, t0 = _cpu(), time.perf_counter()
    subprocess.run([sys.executable, "-c", code, str(path)], check=True, cwd=REPO, env=_ENV,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0, _cpu() - c0


def own_import_ms(path: Path) -> float:
    """Self time of every ``hermes_data.*`` module in one ``-X importtime`` run."""
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", _OURS, str(path)],
                         capture_output=True, text=True, check=True, cwd=REPO, env=_ENV)
    total = 0
    for line in out.stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+\d+ \|\s+(\S.*)$", line)
        if m and m.group(2).strip().startswith("hermes_data"):
            total += int(m.group(1))
    return total / 1000


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=21)
    ap.add_argument("--dir", type=Path, default=None)
    args = ap.parse_args()
    directory = Path(args.dir or tempfile.mkdtemp(prefix="hd-cold-"))
    directory.mkdir(parents=True, exist_ok=True)
    _ENV["PYTHONPYCACHEPREFIX"] = str(directory / "pycache")
    try:
        from hermes_data.migrate import runner as migrate

        ours, theirs = directory / "ours.db", directory / "upstream.db"
        for p in (ours, theirs):
            migrate.upgrade("telemetry", p)  # the same settled file for both sides
        mode = sqlite3.connect(ours).execute("PRAGMA journal_mode").fetchone()[0]
        print(f"SQLite {sqlite3.sqlite_version}, file journal mode {mode}, nproc {os.cpu_count()}, "
              f"load {os.getloadavg()[0]:.1f}, {args.runs} interleaved runs per line")
        loaded = json.loads(subprocess.run([sys.executable, "-c", _CHECK, str(ours)],
                                           capture_output=True, text=True, check=True,
                                           cwd=REPO).stdout)
        for name, code in _VARIANTS.items():  # warm-up: bytecode written, page cache filled
            _run(code, theirs if name == "upstream" else ours)
        wall: dict[str, list[float]] = {k: [] for k in _VARIANTS}
        cpu: dict[str, list[float]] = {k: [] for k in _VARIANTS}
        imports: list[float] = []
        for _ in range(args.runs):
            for name, code in _VARIANTS.items():
                w, c = _run(code, theirs if name == "upstream" else ours)
                wall[name].append(w)
                cpu[name].append(c)
            imports.append(own_import_ms(ours))
        med_w = {k: statistics.median(v) * 1000 for k, v in wall.items()}
        med_c = {k: statistics.median(v) * 1000 for k, v in cpu.items()}
        print(f"  {'':12s} {'wall':>9s} {'cpu':>9s}")
        for k in _VARIANTS:
            print(f"  {k:12s} {med_w[k]:7.1f}ms {med_c[k]:7.1f}ms")
        share_w = med_w["hermes-data"] - med_w["sqlalchemy"]
        share_c = med_c["hermes-data"] - med_c["sqlalchemy"]
        print(f"hermes-data's own share beyond `import sqlalchemy`: {share_c:.1f} ms CPU, "
              f"{share_w:.1f} ms wall (target <= {TARGET_SHARE_MS:.0f} ms; judged on CPU time, "
              f"which load on a shared box distorts least); hermes_data.* import self time "
              f"{statistics.median(imports):.1f} ms")
        # The two processes of one round ran back to back: their difference does not carry
        # the drift of a shared machine's speed between rounds that the medians above do.
        paired = statistics.median((h - a) * 1000 for h, a in zip(cpu["hermes-data"],
                                                                   cpu["sqlalchemy"]))
        print(f"  paired (median of the per-round differences, CPU): {paired:.1f} ms "
              f"(target <= {TARGET_SHARE_MS:.0f} ms)")
        print(f"vs upstream: {med_w['hermes-data'] / med_w['upstream']:.2f}x wall, "
              f"{med_c['hermes-data'] / med_c['upstream']:.2f}x CPU (upstream beyond the bare "
              f"interpreter: {med_w['upstream'] - med_w['python']:.1f} ms wall)")
        print(f"PostgreSQL / Alembic modules loaded by the hermes-data process: {loaded or 'none'}")
        return 0 if share_c <= TARGET_SHARE_MS and not loaded else 1
    finally:
        if args.dir is None:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
