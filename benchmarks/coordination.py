"""Coordination hot paths (issue 18) against plain sqlite3 running the same statements.

    python benchmarks/coordination.py [--journal wal|delete] [--rounds 2000] [--messages 20000]
                                      [--procs 8] [--handoffs 200] [--repeat 3]

Both sides run in this process on files in one temp directory, with the same journal mode
and ``synchronous`` setting (printed), each side on its own file made the same way (no
shared WAL: see ``bench_guards``). Reported: medians of --repeat runs and ratios.

* ``lock``: uncontended ``try_acquire_compression_lock`` + ``release_compression_lock``.
  Baseline: plain sqlite3 sending the same statements (read, insert ON CONFLICT DO NOTHING,
  re-read in one ``BEGIN IMMEDIATE``; the holder-matched delete in another), and — as
  upstream's ``_execute_write`` does after every 50th successful write transaction of a
  handle — a ``PRAGMA wal_checkpoint(PASSIVE)`` (:mod:`upstream_writes`; hermes-data's
  writer checkpoints on the same cadence, so leaving it out charged one side only).
  Target ≥ 0.8×.
* ``lease``: the same for the turn lease (the conversation-key walk included on both sides).
* ``handoff``: --procs processes × --handoffs rounds contending for one turn lease
  (``acquire_session_turn_lease``, 5 ms poll); latency from one holder's release to the
  next holder's acquire, p50/p95. Also checks mutual exclusion (issue 18 acceptance 2: the
  fenced marker log never interleaves).
* ``compact``: ``archive_and_compact`` of a --messages session vs plain sqlite3 sending the
  same statements on an identical copy. Target ≤ 1.3× the time.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hermes_data.sessions import sql  # noqa: E402
from hermes_data.sessions.coordination import sql as coord_sql

from agent_turn import baseline_conn, open_store  # noqa: E402  (same directory)
from upstream_writes import UpstreamWriter  # noqa: E402

Q = sql.for_dialect("sqlite")
C = coord_sql.for_dialect("sqlite")


def _claim(w: UpstreamWriter, gs: coord_sql.GuardStatements, key: str, holder: str,
           key_walk: bool) -> None:
    con = w.con
    con.execute("BEGIN IMMEDIATE")
    if key_walk:
        key = con.execute(C.KEY_OF, (key,)).fetchone()[0]
    now = time.time()
    con.execute(gs.READ, (key,)).fetchone()
    con.execute(gs.INSERT, (key, holder, now, now + 300))
    con.execute(gs.READ, (key,)).fetchone()
    w.commit()
    con.execute("BEGIN IMMEDIATE")
    if key_walk:
        key = con.execute(C.KEY_OF, (key,)).fetchone()[0]
    con.execute(gs.RELEASE, (key, holder))
    w.commit()


def bench_guards(tmp: Path, journal: str, rounds: int, repeat: int) -> None:
    # Each side on its own identical file: on one shared WAL the side that commits first
    # after the other's PASSIVE checkpoint pays the WAL restart (and its header sync), so the
    # phase of the two write counters decided who paid for both checkpoints.
    with open_store(tmp / "guards_base.db", journal) as seed:
        seed.create_session("s", "cli")
    store = open_store(tmp / "guards.db", journal)
    store.create_session("s", "cli")
    base = baseline_conn(tmp / "guards_base.db", journal)
    writer = UpstreamWriter(base)
    print(f"journal_mode={store.journal_mode} synchronous=NORMAL")
    for name, ours, theirs in (
            ("lock", lambda h: (store.try_acquire_compression_lock("s", h),
                                store.release_compression_lock("s", h)),
             lambda h: _claim(writer, C.lock, "s", h, False)),
            ("lease", lambda h: (store.try_acquire_session_turn_lease("s", h),
                                 store.release_session_turn_lease("s", h)),
             lambda h: _claim(writer, C.lease, "s", h, True))):
        ours_rates, base_rates = [], []
        for _ in range(repeat):  # interleaved per round: disk-speed drift hits both sides
            spent = {"base": 0.0, "ours": 0.0}
            for i in range(rounds):
                for side, fn in (("base", theirs), ("ours", ours)):
                    t = time.perf_counter()
                    fn(f"h{i}")
                    spent[side] += time.perf_counter() - t
            base_rates.append(rounds / spent["base"])
            ours_rates.append(rounds / spent["ours"])
        o, b = statistics.median(ours_rates), statistics.median(base_rates)
        print(f"{name:7s} acquire+release: baseline {b:8.0f}/s  hermes-data {o:8.0f}/s  "
              f"ratio {o / b:.2f}× (target ≥ 0.8×)")
    base.close()
    store.close()


def bench_handoff(tmp: Path, journal: str, procs: int, handoffs: int) -> None:
    path = tmp / "handoff.db"
    store = open_store(path, journal)
    store.create_session("s", "cli")
    start = time.time() + 3.0
    env = {**os.environ, "HERMES_DATA_JOURNAL_MODE": journal}
    workers = [subprocess.Popen([sys.executable, "-m", "tests.sessions.coordination.coord_worker", "contend",
                                 str(path), "s", str(handoffs), str(i), str(start)],
                                cwd=str(ROOT), stdout=subprocess.PIPE, text=True, env=env)
               for i in range(procs)]
    t0 = time.perf_counter()
    for w in workers:
        w.communicate(timeout=3600)
    wall = time.perf_counter() - t0
    rows = store.get_messages("s")
    log = [(m.content.split(), m.timestamp) for m in rows]
    bad = sum(1 for (e, _), (x, _) in zip(log[::2], log[1::2])
              if e[0] != "enter" or x[0] != "exit" or e[1:] != x[1:])
    gaps = [log[i + 1][1] - log[i][1] for i in range(1, len(log) - 1, 2)]
    gaps.sort()
    p50 = gaps[len(gaps) // 2] * 1000 if gaps else float("nan")
    p95 = gaps[int(len(gaps) * 0.95)] * 1000 if gaps else float("nan")
    print(f"handoff  {procs} procs × {handoffs} rounds: {len(log) // 2} turns in {wall:.1f} s, "
          f"exit→next enter p50 {p50:.1f} ms p95 {p95:.1f} ms; overlapping turns: {bad}")
    store.close()


def _baseline_compact(con: sqlite3.Connection, sid: str) -> None:
    con.execute("BEGIN IMMEDIATE")
    con.execute(C.SESSION_STATE, (sid,)).fetchone()
    con.execute(C.COMPACT_BELOW, (sid, 2 ** 62))
    con.execute(C.SUPERSEDE_ACTIVE, (sid,))
    con.execute(Q.INSERT_MESSAGE_RETURNING,
                (sid, "user", "summary", None, None, None, time.time(), None, None, None, None,
                 None, None, None, None, 0, 0, None, 1, None, None, None,
                 os.urandom(32))).fetchone()  # + display_identity (s05)
    n = con.execute(C.ACTIVE_COUNT, (sid,)).fetchone()[0]
    list(con.execute(C.ACTIVE_TOOL_CALLS, (sid,)))
    con.execute(C.SET_COUNTS, (n, 0, sid))
    con.execute("COMMIT")


def bench_compact(tmp: Path, journal: str, messages: int, repeat: int) -> None:
    seed = tmp / "seed.db"
    with open_store(seed, journal) as store:
        store.create_session("s", "cli")
        store.append_messages_batch("s", [{"role": "user" if i % 2 == 0 else "assistant",
                                           "content": f"message {i} about compaction"}
                                          for i in range(messages)])
    ours_t, base_t = [], []
    for r in range(repeat):
        a, b = tmp / f"ours{r}.db", tmp / f"base{r}.db"
        shutil.copyfile(seed, a)
        shutil.copyfile(seed, b)
        con = baseline_conn(b, journal)
        t = time.perf_counter()
        _baseline_compact(con, "s")
        base_t.append(time.perf_counter() - t)
        con.close()
        with open_store(a, journal) as store:
            t = time.perf_counter()
            store.archive_and_compact("s", [{"role": "user", "content": "summary"}])
            ours_t.append(time.perf_counter() - t)
    o, b = statistics.median(ours_t), statistics.median(base_t)
    print(f"compact  {messages} rows: baseline {b * 1000:.0f} ms  hermes-data {o * 1000:.0f} ms  "
          f"ratio {o / b:.2f}× the time (target ≤ 1.3×)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--journal", default="delete", choices=("delete", "wal"))
    ap.add_argument("--rounds", type=int, default=2000)
    ap.add_argument("--messages", type=int, default=20000)
    ap.add_argument("--procs", type=int, default=8)
    ap.add_argument("--handoffs", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-handoff", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        bench_guards(tmp, args.journal, args.rounds, args.repeat)
        bench_compact(tmp, args.journal, args.messages, args.repeat)
        if not args.skip_handoff:
            bench_handoff(tmp, args.journal, args.procs, args.handoffs)


if __name__ == "__main__":
    main()
