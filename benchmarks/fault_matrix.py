"""The full fault matrix (issue 31): every write path × {EIO, ENOSPC} × every write position.

    python benchmarks/fault_matrix.py [--paths a,b] [--faults EIO,ENOSPC] [--sample S]

Needs libfiu (Debian ``fiu-utils libfiu0``). The journal mode is the environment's
(``HERMES_DATA_JOURNAL_MODE=wal`` for the WAL run). Prints, per path and fault: positions
tried, positions survived, inconsistent files, rows lost, raw errors — and each broken
promise. Exit 1 when any position broke one. The sampled subset runs in the test suite
(tests/faults/test_fault_matrix.py); how a position is judged: tests/faults/matrix.py.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.faults import fiu, matrix  # noqa: E402
from tests.faults.scenarios import SCENARIOS  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--paths", default=",".join(sorted(SCENARIOS)))
    parser.add_argument("--faults", default=",".join(sorted(fiu.ERRNOS)))
    parser.add_argument("--sample", type=int, default=0,
                        help="positions per path and fault (0: every position)")
    args = parser.parse_args()
    if not fiu.available():
        print("libfiu is not installed (apt-get install fiu-utils libfiu0)", file=sys.stderr)
        return 2
    spec = f"sample:{args.sample}" if args.sample else "all"
    mode = os.environ.get("HERMES_DATA_JOURNAL_MODE") or "default policy"
    print(f"fault matrix — journal mode: {mode}; positions: {spec}")
    print(f"{'path':28} {'fault':7} {'tried':>6} {'survived':>9} {'inconsistent':>13} "
          f"{'lost':>5} {'raw':>4} {'s':>6}")
    totals = [0, 0, 0, 0, 0]
    broken: list[str] = []
    for path in args.paths.split(","):
        for fault in args.faults.split(","):
            started = time.monotonic()
            result = matrix.run(path, fault, spec, timeout=3600)
            bad = {rec["k"] for rec in result.records
                   if matrix.problems(rec, SCENARIOS[path].idempotent)}
            inconsistent = sum(rec["integrity"] != "ok" or not rec["opens"]
                               for rec in result.records)
            lost = sum(not rec["prior_intact"] or rec["units_after_fault"] not in (0, 1)
                       for rec in result.records)
            raw = sum(rec["outcome"] == "raw" for rec in result.records)
            tried = len(result.records)
            row = [tried, tried - len(bad), inconsistent, lost, raw]
            totals = [a + b for a, b in zip(totals, row)]
            print(f"{path:28} {fault:7} {row[0]:6} {row[1]:9} {row[2]:13} {row[3]:5} "
                  f"{row[4]:4} {time.monotonic() - started:6.1f}", flush=True)
            broken += result.problems()
    print(f"{'total':36} {totals[0]:6} {totals[1]:9} {totals[2]:13} {totals[3]:5} {totals[4]:4}")
    for line in broken:
        print("  " + line[:400])
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
