"""The merge rule of spec sessions-ext-storage.md §3.7, measured.

``max_pages`` = the largest value with a p95 single ``'merge'`` command ≤ 50 ms on this
corpus, clamped to [64, 2000]; ``max_commands`` keeps a pass ≤ 250 ms per index; the
amortised merge time must stay ≤ 1 ms per write; ``usermerge`` 2 (with 4 a positive merge on a
many-transaction index made no progress).

1. **Corpus**: a session store (the store's own schema and triggers) of ``--messages``
   messages (prose, paths, some CJK): an older part written in large transactions (big
   segments), then ``--tail`` messages each in its **own transaction** — every transaction
   leaves a level-0 segment per FTS index, which is what the cadence merges.
2. **Per-command time**: for each candidate ``max_pages``, on a fresh copy of the corpus, up to
   ``--commands`` single ``'merge'`` commands on ``messages_fts`` (each its own
   ``BEGIN IMMEDIATE … COMMIT``, ``usermerge`` 2): p50 / p95 / max and the rows each changed.
   Beside them, in the same run, ``'optimize'`` of the same index (the one-shot alternative,
   core P-11).
3. **usermerge 2 vs 4**: segments of the index and a MATCH lookup's median before and after
   the same number of merge commands.
4. **Amortised**: ``--writes`` ``append_message`` calls through ``SessionStore`` with the real
   cadence (``merge_fts(500, 4)`` every 1,000th write, post-commit): merge time per write.

Prints the journal mode and ``synchronous`` in effect; ``--keep DIR`` keeps the files.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hermes_data.sessions.storage.fts import maintenance as fts_maintenance
from hermes_data.sessions.store import SessionStore  # noqa: E402

CANDIDATES = (64, 128, 250, 500, 1000, 2000)
WORDS = ("gateway session token index merge segment query planner sqlite write lock agent tool "
         "result message cursor page vacuum checkpoint journal backend frontend compile build "
         "error warning trace stack python rust config deploy server client request response "
         "cache memory thread process signal socket timeout retry budget").split()
CJK = ["数据库连接超时了怎么办", "搜索功能找不到结果", "サーバーを再起動してください", "서버 로그를 확인해 주세요"]


def _text(rng: random.Random) -> str:
    words = " ".join(rng.choice(WORDS) if rng.random() < 0.7 else f"{rng.choice(WORDS)}{rng.randint(0, 99999)}"
                     for _ in range(rng.randint(20, 300)))
    path = f"/src/{rng.choice(WORDS)}/{rng.choice(WORDS)}_{rng.randint(0, 999)}.py"
    return f"{words} {path}" + (f" {rng.choice(CJK)}" if rng.random() < 0.2 else "")


def build_corpus(path: Path, n: int, tail: int, chunk: int, seed: int = 7) -> float:
    """``n`` messages through the store's triggers: the first ``n - tail`` in transactions of
    ``chunk`` rows (a large, older index: big segments), then ``tail`` single-row
    transactions (recent appends: a level-0 segment each, as the cadence finds them).
    Returns seconds."""
    with SessionStore(path) as s:
        for i in range(20):
            s.create_session(f"s{i}", "cli" if i % 4 else "telegram")
    rng = random.Random(seed)
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("PRAGMA synchronous=OFF")  # building only; measurements use the store's setting
    insert = "INSERT INTO messages(session_id, role, content, timestamp) VALUES (?, ?, ?, ?)"

    def row(i: int) -> tuple:
        return (f"s{i % 20}", "user" if i % 2 else "assistant", _text(rng), 1.7e9 + i)

    t0 = time.perf_counter()
    bulk = max(0, n - tail)
    for start in range(0, bulk, chunk):
        con.execute("BEGIN IMMEDIATE")
        con.executemany(insert, [row(i) for i in range(start, min(bulk, start + chunk))])
        con.execute("COMMIT")
    for i in range(bulk, n):
        con.execute("BEGIN IMMEDIATE")
        con.execute(insert, row(i))
        con.execute("COMMIT")
    con.close()
    return time.perf_counter() - t0


def _connect(path: Path) -> sqlite3.Connection:
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("PRAGMA synchronous=NORMAL")
    return con


def _segments(con: sqlite3.Connection) -> int:
    return con.execute("SELECT count(DISTINCT segid) FROM messages_fts_idx").fetchone()[0]


def _pages(con: sqlite3.Connection) -> int:
    return con.execute("SELECT count(*) FROM messages_fts_data").fetchone()[0]


def _merge(con: sqlite3.Connection, pages: int) -> tuple[float, int, float]:
    """One 'merge' in its own transaction: (wall ms, rows changed, CPU ms of this process)."""
    before = con.total_changes
    c0, t0 = time.process_time(), time.perf_counter()
    con.execute("BEGIN IMMEDIATE")
    con.execute("INSERT INTO messages_fts(messages_fts, rank) VALUES ('merge', ?)", (pages,))
    con.execute("COMMIT")
    wall, cpu = (time.perf_counter() - t0) * 1000, (time.process_time() - c0) * 1000
    return wall, con.total_changes - before, cpu


def _lookup_ms(con: sqlite3.Connection, reps: int = 30) -> float:
    times = []
    for i in range(reps):
        term = WORDS[i % len(WORDS)]
        t0 = time.perf_counter()
        con.execute("SELECT count(*) FROM messages_fts WHERE messages_fts MATCH ?", (term,)).fetchone()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def _p95(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(0.95 * (len(xs) - 1))))]


def per_command(corpus: Path, work: Path, commands: int) -> dict[int, dict]:
    out = {}
    for pages in CANDIDATES:
        copy = work / f"merge_{pages}.db"
        shutil.copyfile(corpus, copy)
        con = _connect(copy)
        con.execute("INSERT INTO messages_fts(messages_fts, rank) VALUES ('usermerge', 2)")
        times, changes, cpus = [], [], []
        for _ in range(commands):
            ms, changed, cpu = _merge(con, pages)
            times.append(ms)
            changes.append(changed)
            cpus.append(cpu)
            if changed < 2:
                break
        out[pages] = {"n": len(times), "p50": statistics.median(times), "p95": _p95(times),
                      "max": max(times), "cpu_p95": _p95(cpus), "segments_after": _segments(con),
                      "exhausted": changes[-1] < 2}
        con.close()
        copy.unlink()
    return out


def optimize_ms(corpus: Path, work: Path) -> float:
    copy = work / "optimize.db"
    shutil.copyfile(corpus, copy)
    con = _connect(copy)
    t0 = time.perf_counter()
    con.execute("BEGIN IMMEDIATE")
    con.execute("INSERT INTO messages_fts(messages_fts) VALUES ('optimize')")
    con.execute("COMMIT")
    ms = (time.perf_counter() - t0) * 1000
    con.close()
    copy.unlink()
    return ms


def usermerge_progress(corpus: Path, work: Path, limit: int = 200) -> dict[int, tuple]:
    """Per ``usermerge`` 2 / 4: merge commands of 500 pages until one changes < 2 rows (or
    ``limit``): (commands, segments before, after, median MATCH ms before, after)."""
    out = {}
    for um in (2, 4):
        copy = work / f"usermerge_{um}.db"
        shutil.copyfile(corpus, copy)
        con = _connect(copy)
        con.execute("INSERT INTO messages_fts(messages_fts, rank) VALUES ('usermerge', ?)", (um,))
        seg0, look0 = _segments(con), _lookup_ms(con)
        n = 0
        while n < limit:
            n += 1
            if _merge(con, fts_maintenance.MERGE_PAGES)[1] < 2:
                break
        out[um] = (n, seg0, _segments(con), look0, _lookup_ms(con))
        con.close()
        copy.unlink()
    return out


def amortised(work: Path, writes: int) -> tuple[float, float, int]:
    """(ms of merge per write, ms of a whole append per write, merge passes) with the cadence."""
    path = work / "cadence.db"
    rng = random.Random(11)
    merge_s, passes = 0.0, 0
    real = fts_maintenance.merge_fts

    def timed(*a, **k):
        nonlocal merge_s, passes
        t0 = time.perf_counter()
        try:
            return real(*a, **k)
        finally:
            merge_s += time.perf_counter() - t0
            passes += 1

    fts_maintenance.merge_fts = timed  # type: ignore[assignment]
    try:
        with SessionStore(path) as s:
            s.create_session("a", "cli")
            t0 = time.perf_counter()
            for _ in range(writes):
                s.append_message("a", "user", _text(rng))
            total = time.perf_counter() - t0
    finally:
        fts_maintenance.merge_fts = real  # type: ignore[assignment]
    return merge_s * 1000 / writes, total * 1000 / writes, passes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=60_000)
    ap.add_argument("--tail", type=int, default=5_000, help="single-row transactions at the end")
    ap.add_argument("--chunk", type=int, default=2_500, help="rows per bulk transaction")
    ap.add_argument("--commands", type=int, default=40, help="merge commands per candidate")
    ap.add_argument("--writes", type=int, default=3_000, help="appends of the cadence run")
    ap.add_argument("--keep", type=Path, default=None)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="fts_merge_")) if args.keep is None else args.keep
    work.mkdir(parents=True, exist_ok=True)
    corpus = work / "corpus.db"
    reused = args.keep is not None and corpus.exists()  # --keep DIR: reuse its corpus
    built = 0.0 if reused else build_corpus(corpus, args.messages, args.tail, args.chunk)
    con = _connect(corpus)
    mode = con.execute("PRAGMA journal_mode").fetchone()[0]
    sync = con.execute("PRAGMA synchronous").fetchone()[0]
    print(f"SQLite {sqlite3.sqlite_version}, journal_mode={mode}, synchronous={sync} (1=NORMAL), "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"corpus: {args.messages:,} messages ({args.messages - args.tail:,} in transactions of "
          f"{args.chunk:,}, then {args.tail:,} single-row transactions) "
          f"({'reused' if reused else f'{built:.1f} s'}); messages_fts: {_pages(con):,} pages, {_segments(con):,} segments")
    con.close()

    res = per_command(corpus, work, args.commands)
    print("\nsingle 'merge' command on messages_fts (usermerge 2), each its own transaction:")
    print("max_pages  commands  p50 ms  p95 ms  max ms  p50 ms/page  CPU p95 ms  "
          "segments after  exhausted")
    for pages, r in res.items():
        print(f"{pages:>9}  {r['n']:>8}  {r['p50']:6.1f}  {r['p95']:6.1f}  {r['max']:6.1f}  "
              f"{r['p50'] / pages:11.3f}  {r['cpu_p95']:10.1f}  {r['segments_after']:>14}  "
              f"{r['exhausted']}")
    fit = [p for p, r in res.items() if r["p95"] <= 50.0]
    chosen = max(64, min(2000, max(fit) if fit else 64))
    cmds = max(1, int(250.0 // max(res[chosen]["p95"], 1e-3)))
    cpu_fit = [p for p, r in res.items() if r["cpu_p95"] <= 50.0]
    cpu_chosen = max(64, min(2000, max(cpu_fit) if cpu_fit else 64))
    print(f"by CPU time (what an idle machine would see, I/O aside): max_pages = {cpu_chosen}, "
          f"{max(1, int(250.0 // max(res[cpu_chosen]['cpu_p95'], 1e-3)))} command(s) per pass")
    print(f"'optimize' of the same index (one command): {optimize_ms(corpus, work):.0f} ms")
    print(f"rule: max_pages = {chosen} (largest with p95 <= 50 ms, clamped [64, 2000]); "
          f"a pass of max_commands x p95 <= 250 ms allows {cmds} command(s); "
          f"constants in use: max_pages={fts_maintenance.MERGE_PAGES}, "
          f"max_commands={fts_maintenance.MERGE_COMMANDS}")

    um = usermerge_progress(corpus, work)
    print("\nusermerge: merge commands of 500 pages until nothing is left to merge")
    for k, (n, s0, s1, l0, l1) in um.items():
        print(f"  usermerge {k}: {n} command(s), {s0:,} -> {s1:,} segments; median MATCH "
              f"{l0:.3f} -> {l1:.3f} ms")

    per_write, append_ms, passes = amortised(work, args.writes)
    print(f"\ncadence: {args.writes:,} appends, {passes} merge pass(es): merge {per_write:.3f} ms "
          f"per write amortised (target <= 1 ms); an append costs {append_ms:.2f} ms")
    if args.keep is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
