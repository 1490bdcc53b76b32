"""optimize-storage on a large legacy-layout file (sessions-ext-storage §3.6; issue 21
acceptance 3):

    python benchmarks/fts_migration.py [--messages 200000] [--kills 3] [--pause 0] [--seed N]

Builds an upstream schema-21 ``state.db`` (the repository's legacy fixture, unpacked from
``tests/fixtures/legacy.tar.xz``) grown to --messages messages through its own inline FTS
triggers, adopts it (a writable open), records the search results of a fixed term set, then:

* **one measured run** in this process: every backfill step and teardown step timed (medians
  and p95; baseline: one blocking ``'rebuild'`` of the same indexes in the same process),
  throughput in messages indexed and old-index rows drained per second of step time, the
  peak ``-wal`` size (sampled every 5 ms by a thread) and the logical size before
  and after, the search results compared with the "before" set at 25 / 50 / 75 % of the
  backfill (the gap supplement covers the unindexed window) and after the settle, and
  ``'integrity-check'`` of both indexes;
* **--kills trials**: a copy of the adopted file is migrated by a child process that is
  SIGKILLed at a random time, then a second run finishes it; the end state must equal the
  measured run's (same search results, ``integrity-check``, one document per message,
  storage version 3, no trash).

--pause sets the shortest pause between steps (the library's default is 0.2 s, each pause at
least 4x the step: ≤ 20 % duty); 0 measures the work itself. Prints the seed, the journal
mode and ``synchronous``.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


from hermes_data.sessions.storage.fts import layout as fts_storage
from hermes_data.sessions.store import SessionStore  # noqa: E402

FIXTURE = "legacy-sessions/state_fork_v21.db"
SESSION = "20260801_090000_a1b2c3"
#: Whole-token words (none is a substring of another), so a LIKE match in the unindexed window
#: and a word match of the index agree.
VOCAB = [a + b + c for a in ("bra", "clo", "dru", "fen", "gal", "hix", "jor", "kev")
         for b in ("mal", "nop", "qis", "rut", "sev", "tow") for c in ("ax", "ez", "oq", "uy")]
RARE = ["rarealpha", "rarebeta", "raregamma", "raredelta"]
TERMS = VOCAB[:12] + RARE + ["服务器迁移"]

WORKER = """
import sys
from hermes_data.sessions import fts_storage as f
from hermes_data.sessions.store import SessionStore
f.PAUSE_MIN_S = float(sys.argv[2]); f.PAUSE_FACTOR = 0.0 if f.PAUSE_MIN_S == 0 else 4.0
with SessionStore(sys.argv[1]) as s:
    r = s.optimize_fts_storage(vacuum=False)
print(r.ok, r.reason)
"""


def unpack_fixture(dest: Path) -> Path:
    with tarfile.open(ROOT / "tests" / "fixtures" / "legacy.tar.xz") as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith(FIXTURE))
        member.name = "fixture.db"
        tar.extract(member, dest, filter="data")
    path = dest / "fixture.db"
    os.chmod(path, 0o600)
    return path


def build(path: Path, messages: int, rng: random.Random) -> None:
    """Grow the fixture to ``messages`` rows through its own legacy triggers."""
    con = sqlite3.connect(path)
    have = con.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
    rows = []
    t0 = 1_790_000_000.0
    for i in range(max(0, messages - have)):
        words = rng.choices(VOCAB, k=rng.randint(6, 18))
        if i % 997 == 0:
            words.append(RARE[(i // 997) % 4])
        role, content, tool = "user", " ".join(words), None
        if i % 7 == 3:
            role, tool = "tool", "terminal"
            content = " ".join(words) + " " + "output line\n" * rng.randint(5, 60)
        elif i % 4 == 1:
            role = "assistant"
        if i % 211 == 0 and role != "tool":  # (the trigram index holds no tool rows)
            content += " 服务器迁移完成"
        rows.append((SESSION, role, content, tool, t0 + i))
        if len(rows) == 20_000:
            con.executemany("INSERT INTO messages(session_id, role, content, tool_name, timestamp, "
                            "active) VALUES (?, ?, ?, ?, ?, 1)", rows)
            con.commit()
            rows.clear()
    if rows:
        con.executemany("INSERT INTO messages(session_id, role, content, tool_name, timestamp, "
                        "active) VALUES (?, ?, ?, ?, ?, 1)", rows)
        con.commit()
    con.close()


def results(store: SessionStore) -> dict[str, list[int]]:
    return {t: sorted(h.id for h in store.search_messages(t, limit=100_000, fields=["id"]))
            for t in TERMS}


def end_state(path: Path) -> tuple:
    con = sqlite3.connect(path)
    try:
        for t in ("messages_fts", "messages_fts_trigram"):
            con.execute(f"INSERT INTO {t}({t}, rank) VALUES ('integrity-check', 1)")
        trash = con.execute("SELECT COUNT(*) FROM sqlite_master WHERE name GLOB "
                            "'fts_v22_trash_*'").fetchone()[0]
        version = con.execute("SELECT value FROM state_meta WHERE key = "
                              "'fts_storage_version'").fetchone()
        n = con.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
        docs = con.execute("SELECT COUNT(*) FROM messages_fts_docsize").fetchone()[0]
        return trash, version, n == docs
    finally:
        con.close()


def rebuild_baseline(path: Path) -> float:
    """The blocking alternative, same data, same process: one ``'rebuild'`` of both current
    indexes in one transaction (the write lock held throughout)."""
    con = sqlite3.connect(path, isolation_level=None)
    try:
        t = time.perf_counter()
        con.execute("BEGIN IMMEDIATE")
        for table in ("messages_fts", "messages_fts_trigram"):
            con.execute(f"INSERT INTO {table}({table}) VALUES ('rebuild')")
        con.execute("COMMIT")
        return time.perf_counter() - t
    finally:
        con.close()


class WalPeak(threading.Thread):
    """Samples the size of ``<db>-wal`` every 5 ms."""

    def __init__(self, path: Path) -> None:
        super().__init__(daemon=True)
        self.wal, self.peak, self.stop = Path(f"{path}-wal"), 0, threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.005):
            try:
                self.peak = max(self.peak, self.wal.stat().st_size)
            except FileNotFoundError:
                pass


def timed(fn, into: list[float], worked):
    """``fn`` with the time of each call that did work (``worked(result)``) kept in ``into``."""
    def wrapper(*a, **kw):
        t = time.perf_counter()
        result = fn(*a, **kw)
        if worked(result):
            into.append(time.perf_counter() - t)
        return result
    return wrapper


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(p * len(s)))] if s else 0.0


def measured_run(path: Path, before: dict, pause: float) -> dict:
    step_t: list[float] = []
    trash_t: list[float] = []
    trash_rows = [0]
    real_step, real_trash = fts_storage.fts_rebuild_step, fts_storage._fts_teardown_trash_step

    def trash(store):
        done = real_trash(store)
        trash_rows[0] += done[1]
        return done

    fts_storage.fts_rebuild_step = timed(real_step, step_t, bool)
    fts_storage._fts_teardown_trash_step = timed(trash, trash_t, lambda done: done[1] > 0)
    fts_storage.PAUSE_MIN_S, fts_storage.PAUSE_FACTOR = pause, (4.0 if pause else 0.0)
    mismatches: list[str] = []
    checked: list[int] = []
    steps_peak: list[int] = []
    peak = WalPeak(path)
    try:
        with SessionStore(path) as s:
            mode = s.journal_mode
            sync = s.engine.connect().exec_driver_sql("PRAGMA synchronous").scalar()
            size_before = s.backend.logical_size_bytes()

            def cb(p):
                if p.phase == "vacuum":
                    steps_peak.append(peak.peak)
                if p.phase == "backfill" and p.total and len(checked) < 3 \
                        and p.percent >= 25 * (len(checked) + 1) and p.percent < 100:
                    checked.append(p.percent)
                    during = results(s)
                    mismatches.extend(f"{p.percent}% {t}" for t in TERMS if during[t] != before[t])

            peak.start()
            t0 = time.perf_counter()
            r = s.optimize_fts_storage(progress_cb=cb)
            total = time.perf_counter() - t0
            peak.stop.set()
            peak.join()
            after = results(s)
            size_after = s.backend.logical_size_bytes()
    finally:
        fts_storage.fts_rebuild_step, fts_storage._fts_teardown_trash_step = real_step, real_trash
    mismatches.extend(f"after {t}" for t in TERMS if after[t] != before[t])
    return {"result": r, "mode": mode, "sync": sync, "total": total, "steps": step_t,
            "trash": trash_t, "trash_rows": trash_rows[0], "wal_peak": peak.peak,
            "steps_wal_peak": steps_peak[0] if steps_peak else peak.peak,
            "size_before": size_before, "size_after": size_after, "checked": checked,
            "mismatches": mismatches, "after": after}


def kill_trial(adopted: Path, work: Path, rng: random.Random, expected: dict,
               duration: float, pause: float) -> str:
    path = work / "trial.db"
    for suffix in ("", "-wal", "-shm"):
        if Path(f"{path}{suffix}").exists():
            os.unlink(f"{path}{suffix}")
    shutil.copyfile(adopted, path)
    proc = subprocess.Popen([sys.executable, "-c", WORKER, str(path), str(pause)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    at = rng.uniform(0.3, max(0.5, duration))
    time.sleep(at)
    killed = proc.poll() is None
    if killed:
        os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()
    with SessionStore(path) as s:
        mid = results(s)
        status = s.fts_rebuild_status()
        fts_storage.PAUSE_MIN_S, fts_storage.PAUSE_FACTOR = 0.0, 0.0
        r = s.optimize_fts_storage(vacuum=False)
        final = results(s)
    state = end_state(path)
    ok = (r.ok and final == expected and mid == expected and state == (0, ("3",), True))
    where = ((f"backfill {status.percent}%" if status else "teardown/settle") if killed
             else "after the end")
    return f"kill at {at:5.2f} s ({where}): {'OK' if ok else 'FAILED ' + repr((r, state))}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--kills", type=int, default=3)
    ap.add_argument("--pause", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=None)
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    print(f"seed {seed}; {args.messages:,} messages; pause {args.pause:g} s; "
          f"SQLite {sqlite3.sqlite_version}")
    with tempfile.TemporaryDirectory(prefix="hd-ftsmig-") as tmp:
        work = Path(tmp)
        fixture = unpack_fixture(work)
        t = time.perf_counter()
        build(fixture, args.messages, random.Random(seed))
        print(f"built the legacy-layout file in {time.perf_counter() - t:.1f} s "
              f"({fixture.stat().st_size / 1e6:.1f} MB)")
        with SessionStore(fixture) as s:  # adoption (a writable open)
            assert s.fts_optimize_available()
            before = results(s)
        adopted = work / "adopted.db"
        shutil.copyfile(fixture, adopted)
        if Path(f"{fixture}-wal").exists():
            shutil.copyfile(f"{fixture}-wal", f"{adopted}-wal")
        run = measured_run(fixture, before, args.pause)
        steps, trash = run["steps"], run["trash"]
        n = args.messages
        print(f"journal mode {run['mode']}, synchronous {run['sync']}; result {run['result']}")
        print(f"total {run['total']:.1f} s; backfill steps {len(steps)}: median "
              f"{statistics.median(steps) * 1e3:.1f} ms, p95 {pct(steps, 0.95) * 1e3:.1f} ms, "
              f"{n / max(sum(steps), 1e-9):,.0f} messages/s of step time")
        print(f"teardown steps {len(trash)}: median {statistics.median(trash) * 1e3:.1f} ms, "
              f"p95 {pct(trash, 0.95) * 1e3:.1f} ms, {run['trash_rows']:,} rows, "
              f"{run['trash_rows'] / max(sum(trash), 1e-9):,.0f} rows/s of step time")
        print(f"peak -wal during the steps {run['steps_wal_peak'] / 1e6:.2f} MB, with the "
              f"VACUUM {run['wal_peak'] / 1e6:.2f} MB; logical size "
              f"{run['size_before'] / 1e6:.1f} -> {run['size_after'] / 1e6:.1f} MB")
        print(f"searches compared at {run['checked']} % of the backfill and after: "
              f"{len(run['mismatches'])} mismatches {run['mismatches'][:5]}")
        state = end_state(fixture)
        print(f"end state: trash tables {state[0]}, storage version {state[1]}, "
              f"one document per message {state[2]}")
        base = rebuild_baseline(fixture)
        longest = max(steps + trash)
        print(f"baseline: one blocking 'rebuild' of both indexes {base:.2f} s with the write lock "
              f"held throughout; the backfill's step time {sum(steps):.2f} s = "
              f"{sum(steps) / base:.2f}x it, longest single write-lock hold "
              f"{longest * 1e3:.0f} ms")
        # the child runs the steps without searches or VACUUM: kill within its likely span
        duration = 1.0 + 1.2 * (sum(steps) + sum(trash))
        for _ in range(args.kills):
            print(kill_trial(adopted, work, rng, before, duration, args.pause))


if __name__ == "__main__":
    main()
