"""Crash safety of the transcript rewrites (issue 18 acceptance 4), the long run of
``tests/sessions/coordination/test_coord_crash.py``:

    python benchmarks/coordination_crash.py [--trials 50] [--rows 3000] [--seed N]

For each of ``archive_and_compact``, ``replace_messages`` and ``rewind_to_message``: --trials
times, a fresh copy of a --rows session is rewritten by a separate process that is SIGKILLed
at a random point (0–80 ms after it announced the call). Afterwards the transcript must be
exactly the before- or the after-state, both FTS indexes must pass ``integrity-check`` and
agree with ``messages`` for a term, and ``message_count`` must equal the active rows. Prints
the seed, per operation how many trials ended before / after, and any failure.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hermes_data.sessions.store import SessionStore  # noqa: E402


def snapshot(path: Path) -> tuple[list, int, bool]:
    con = sqlite3.connect(path)
    try:
        rows = con.execute("SELECT id, content, active, compacted FROM messages "
                           "WHERE session_id = 's' ORDER BY id").fetchall()
        count = con.execute("SELECT message_count FROM sessions WHERE id = 's'").fetchone()[0]
        for t in ("messages_fts", "messages_fts_trigram"):
            con.execute(f"INSERT INTO {t}({t}) VALUES ('integrity-check')")
        fts = con.execute("SELECT COUNT(*) FROM messages_fts WHERE messages_fts MATCH 'alpha'"
                          ).fetchone()[0]
        like = con.execute("SELECT COUNT(*) FROM messages WHERE content LIKE '%alpha%'"
                           ).fetchone()[0]
        return rows, count, fts == like
    finally:
        con.close()


def after_ok(op: str, rows: list, before: list) -> bool:
    active = [r for r in rows if r[2]]
    if op == "compact":
        return [r[1] for r in active] == ["omega summary"] \
            and all(r[3] for r in rows if r[0] <= before[-1][0])
    if op == "replace":
        return [r[1] for r in rows] == ["omega new"]
    return [r[0] for r in active] == [before[0][0], before[1][0]]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=50)
    ap.add_argument("--rows", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=None)
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(10 ** 6)
    print(f"seed={seed} trials={args.trials} rows={args.rows}")
    rng = random.Random(seed)
    failures = 0
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        seed_db = tmp / "seed.db"
        with SessionStore(seed_db, hermes_root=tmp) as store:
            store.create_session("s", "cli")
            store.append_messages_batch("s", [{"role": "user" if i % 2 == 0 else "assistant",
                                               "content": f"alpha row {i}"}
                                              for i in range(args.rows)])
        before, _, _ = snapshot(seed_db)
        for op in ("compact", "replace", "rewind"):
            tally = {"before": 0, "after": 0}
            for trial in range(args.trials):
                db = tmp / f"{op}{trial}.db"
                shutil.copyfile(seed_db, db)
                proc = subprocess.Popen(
                    [sys.executable, "-m", "tests.sessions.coordination.coord_worker", "crash-op", str(db),
                     "s", op], cwd=str(ROOT), stdout=subprocess.PIPE, text=True,
                    env={**os.environ})
                assert proc.stdout is not None
                if proc.stdout.readline().strip() != "go":
                    print(f"{op} trial {trial}: worker did not start")
                    failures += 1
                    continue
                time.sleep(rng.uniform(0.0, 0.08))
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
                rows, count, fts_ok = snapshot(db)
                state = "before" if rows == before else "after" if after_ok(op, rows, before) \
                    else None
                if state is None or not fts_ok or count != sum(1 for r in rows if r[2]):
                    failures += 1
                    print(f"{op} trial {trial}: FAILED (state={state}, fts_ok={fts_ok}, "
                          f"count={count})")
                    continue
                tally[state] += 1
                db.unlink()
            print(f"{op:8s} killed {args.trials}×: before-state {tally['before']}, "
                  f"after-state {tally['after']}")
    print("failures:", failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
