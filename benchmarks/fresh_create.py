"""Fresh-store creation (issue 13): ``migrate.upgrade`` on a missing file vs plain sqlite3.

What upstream does on a missing file is its ``_get_conn()``: connect, set the pragmas, run the
schema DDL (the telemetry plugin's v1..v18 steps with their ``schema_version`` rows; the
session store's ``SCHEMA_SQL`` + FTS DDL) and commit. The baseline here is the cheapest form
of that, written for this script: one plain ``sqlite3`` connection, ``busy_timeout``, the
journal mode this run's policy picks and ``synchronous=NORMAL``, then **exactly the DDL the
head has** — every ``sqlite_master`` statement of a reference file (tables, indexes, FTS
views, virtual tables and triggers; not the FTS shadow tables, which their virtual tables
create) plus the ledger / ``state_meta`` rows — in one transaction. Upstream runs more
(statement-by-statement version checks), so the ratio is an upper bound on our overhead.

Three lines per store, interleaved, medians of ``--runs`` files each:

* ``baseline``  — the plain sqlite3 creation above;
* ``fresh``     — ``migrate.upgrade(store, path)`` (the fast path, in a warm process);
* ``revisions`` — ``migrate.upgrade(store, path, fast_create=False)`` (every Alembic revision).

Plus the first creation in a new process (``python -c "…upgrade(…)"``) for both paths, with
a bare ``python -c "import sqlite3 …"`` baseline, medians of ``--process-runs`` (children
reuse bytecode from a cache in the scratch directory). The baseline runs the journal mode
hermes-data's connections run (the policy and its rollback flavour).

    python benchmarks/fresh_create.py [--runs 30] [--process-runs 5] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hermes_data.migrate import runner as migrate
from hermes_data.engine import SqliteSettings, create_sqlite_engine, journal_state  # noqa: E402

#: Target: fast creation within this factor of the plain-sqlite3 baseline (warm process).
TARGET_RATIO = 2.0
_ROWS = {"telemetry": ("schema_version",), "sessions": ("state_meta",)}


def reference_script(store: str, directory: Path) -> tuple[list[str], list[tuple[str, list]]]:
    """The head's DDL (sqlite_master, creation order) and its bookkeeping rows."""
    ref = directory / f"ref-{store}.db"
    migrate.upgrade(store, ref)
    con = sqlite3.connect(ref)
    try:
        virtual = [n for n, s in con.execute("SELECT name, sql FROM sqlite_master")
                   if (s or "").startswith("CREATE VIRTUAL TABLE")]
        ddl = [s for n, s in con.execute("SELECT name, sql FROM sqlite_master ORDER BY rowid")
               if s and n != "alembic_version" and not n.startswith("sqlite_")
               and not any(n.startswith(v + "_") for v in virtual)]
        rows = [(t, con.execute(f"SELECT * FROM {t}").fetchall()) for t in _ROWS[store]]
        rows.append(("alembic_version", con.execute("SELECT * FROM alembic_version").fetchall()))
        ddl.insert(0, con.execute("SELECT sql FROM sqlite_master WHERE name = 'alembic_version'"
                                  ).fetchone()[0])
    finally:
        con.close()
    return ddl, rows


def baseline_create(path: Path, mode: str, ddl: list[str], rows: list[tuple[str, list]]) -> None:
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("PRAGMA busy_timeout=30000")
    con.execute(f"PRAGMA journal_mode={mode}")
    con.execute("PRAGMA synchronous=NORMAL")
    con.execute("BEGIN IMMEDIATE")
    for statement in ddl:
        con.execute(statement)
    for table, values in rows:
        if values:
            marks = ", ".join("?" * len(values[0]))
            con.executemany(f"INSERT INTO {table} VALUES ({marks})", values)
    con.execute("COMMIT")
    con.close()


def _remove(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def time_one(fn, path: Path) -> float:
    _remove(path)
    t0 = time.perf_counter()
    fn(path)
    elapsed = time.perf_counter() - t0
    _remove(path)
    return elapsed


def in_process(store: str, directory: Path, runs: int, mode: str) -> dict[str, float]:
    ddl, rows = reference_script(store, directory)
    variants = {
        "baseline": lambda p: baseline_create(p, mode, ddl, rows),
        "fresh": lambda p: migrate.upgrade(store, p),
        "revisions": lambda p: migrate.upgrade(store, p, fast_create=False),
    }
    for fn in variants.values():  # warm every path once (imports, compiled DDL)
        time_one(fn, directory / "warm.db")
    samples: dict[str, list[float]] = {k: [] for k in variants}
    for i in range(runs):
        for name, fn in variants.items():  # interleaved: load drifts hit all three alike
            samples[name].append(time_one(fn, directory / f"{store}-{name}-{i}.db"))
    return {k: statistics.median(v) for k, v in samples.items()}


#: Children write and reuse bytecode (an installed package has its .pyc files; a checkout
#: run with PYTHONDONTWRITEBYTECODE=1 would compile every module from source each time).
_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def new_process(store: str, directory: Path, runs: int, mode: str) -> dict[str, float]:
    ddl, rows = reference_script(store, directory)
    code = {
        "baseline": ("import sqlite3, sys, json; d, r = json.loads(sys.argv[2]); "
                     "c = sqlite3.connect(sys.argv[1], isolation_level=None); "
                     "c.execute('PRAGMA busy_timeout=30000'); "
                     f"c.execute('PRAGMA journal_mode={mode}'); "
                     "c.execute('PRAGMA synchronous=NORMAL'); c.execute('BEGIN IMMEDIATE'); "
                     "[c.execute(s) for s in d]; "
                     "[c.executemany(f'INSERT INTO {t} VALUES ({\", \".join(\"?\" * len(v[0]))})', v) "
                     "for t, v in r if v]; c.execute('COMMIT')"),
        "fresh": f"import sys; from hermes_data import migrate; migrate.upgrade({store!r}, sys.argv[1])",
        "revisions": (f"import sys; from hermes_data import migrate; "
                      f"migrate.upgrade({store!r}, sys.argv[1], fast_create=False)"),
    }
    import json
    payload = json.dumps([ddl, rows])
    samples: dict[str, list[float]] = {k: [] for k in code}
    for i in range(-1, runs):  # run -1 warms up (bytecode written, not timed)
        for name, src in code.items():
            path = directory / f"p-{store}-{name}-{i}.db"
            _remove(path)
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", src, str(path), payload], check=True,
                           cwd=Path(__file__).resolve().parent.parent, env=_ENV)
            if i >= 0:
                samples[name].append(time.perf_counter() - t0)
            _remove(path)
    return {k: statistics.median(v) for k, v in samples.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--process-runs", type=int, default=5)
    ap.add_argument("--dir", type=Path, default=None)
    args = ap.parse_args()
    directory = Path(args.dir or tempfile.mkdtemp(prefix="hd-fresh-"))
    directory.mkdir(parents=True, exist_ok=True)
    _ENV["PYTHONPYCACHEPREFIX"] = str(directory / "pycache")
    # The baseline runs the journal mode hermes-data's connections run (policy + flavour).
    engine = create_sqlite_engine(directory / "probe.db", SqliteSettings())
    with engine.connect():
        mode = journal_state(engine).mode
    engine.dispose()
    print(f"SQLite {sqlite3.sqlite_version}, journal mode {mode}, synchronous NORMAL, "
          f"nproc {os.cpu_count()}, load {os.getloadavg()[0]:.1f}")
    missed = False
    try:
        for store in ("telemetry", "sessions"):
            r = in_process(store, directory, args.runs, mode)
            ratio = r["fresh"] / r["baseline"]
            missed |= ratio > TARGET_RATIO
            print(f"{store:9s} warm process, median of {args.runs}: baseline "
                  f"{r['baseline'] * 1000:6.1f} ms | fresh {r['fresh'] * 1000:6.1f} ms "
                  f"({ratio:.2f}x baseline, target <= {TARGET_RATIO}x) | revisions "
                  f"{r['revisions'] * 1000:6.1f} ms ({r['revisions'] / r['baseline']:.2f}x; "
                  f"fresh is {r['revisions'] / r['fresh']:.1f}x faster)")
        for store in ("telemetry", "sessions"):
            r = new_process(store, directory, args.process_runs, mode)
            print(f"{store:9s} new process, median of {args.process_runs}: baseline "
                  f"{r['baseline'] * 1000:6.0f} ms | fresh {r['fresh'] * 1000:6.0f} ms "
                  f"({r['fresh'] / r['baseline']:.2f}x) | revisions {r['revisions'] * 1000:6.0f} ms "
                  f"({r['revisions'] / r['baseline']:.2f}x)")
    finally:
        if args.dir is None:
            shutil.rmtree(directory, ignore_errors=True)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
