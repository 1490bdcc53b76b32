"""Cost of the corruption checks on a large legacy file (issue 12).

    python benchmarks/integrity_checks.py [--size-mb 1024] [--runs 3] [--dir DIR]

Generates the v1-level legacy ``telemetry.db`` of ``benchmarks/adoption.py`` (same DDL, same
generator), then times, on a read-only connection, ``PRAGMA quick_check`` and ``PRAGMA
integrity_check`` (medians of ``--runs``, the first run after generation counted, page cache
warm), and — for scale — one full adoption by ``migrate.upgrade`` of a copy (which runs the
integrity check first). Also times the settled open's probe (what every open of an
up-to-date file pays: identification, no check).
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from adoption import generate_v1  # noqa: E402

from hermes_data.migrate import runner as migrate


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args(argv)
    work = Path(args.dir or tempfile.mkdtemp(prefix="hermes-checks-"))
    work.mkdir(parents=True, exist_ok=True)
    legacy = work / "legacy.db"
    legacy.unlink(missing_ok=True)
    counts = generate_v1(legacy, args.size_mb, "wal")
    size = legacy.stat().st_size
    print(f"sqlite {sqlite3.sqlite_version}; file {size / 2**20:,.0f} MB; rows {counts}")
    con = migrate.read_only_connect(legacy)
    try:
        results = {}
        for pragma in ("quick_check", "integrity_check"):
            times = []
            for _ in range(args.runs):
                times.append(timed(lambda: migrate.sqlite_check(con, pragma)))
            results[pragma] = statistics.median(times)
            print(f"  PRAGMA {pragma:<16} median {results[pragma]:7.2f} s "
                  f"({size / 2**20 / results[pragma]:,.0f} MB/s; runs "
                  f"{', '.join(f'{t:.2f}' for t in times)})")
    finally:
        con.close()
    spec = migrate.store_spec("telemetry")
    probe = [timed(lambda: migrate.probe_file(spec, legacy, checked=False)) for _ in range(20)]
    print(f"  identity probe (no check)  median {statistics.median(probe) * 1000:7.2f} ms")
    adopted = work / "adopt.db"
    shutil.copyfile(legacy, adopted)
    total = timed(lambda: migrate.upgrade("telemetry", adopted))
    share = results["integrity_check"] / total
    print(f"  full adoption (upgrade, integrity_check included) {total:7.2f} s; "
          f"the check is ~{share:.0%} of it")
    print(f"  integrity_check / quick_check: {results['integrity_check'] / results['quick_check']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
