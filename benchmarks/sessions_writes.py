"""Session-store write/read hot paths against a plain-sqlite3 baseline of the same statements.

    python benchmarks/sessions_writes.py [--journal wal|delete] [--n 3000] [--batch-total 20000]

Both sides run in this process, on files in one temp directory, with the same journal mode,
``synchronous`` setting and FTS objects (the baseline file is created by the store, so both
indexes and all six triggers are live). Reported: medians of --repeat runs and ratios.
Targets (issue 5, 2-core machine): append_message >= 3,700 msg/s, append_messages_batch
>= 18,000 msg/s, tip of a 500-segment chain <= 5 ms, paging 50,000 messages by 100 with
after_id <= 1 s in total.

Issue 14: the batch baseline is the per-row path (the same admission and INSERT statements in
plain sqlite3, every row fired through both FTS triggers — what append_messages_batch itself
did before it filled the indexes in bulk): ratio >= 2.0, printed as the ratio of the medians
and as the median of the per-run ratios (each run measures ours, then the baseline, back to
back: the pairing cancels a shared machine's drift between runs). And the memory one call of
--memory-rows rows (default 50,000) adds, in a fresh process each (VmHWM during the call
minus VmRSS before it, the input list already built): ours against the upstream-equivalent
(plain sqlite3, one transaction, one INSERT per row straight from the list); target <= 5 MB.

Issue 34 item 3: ``append_message`` against **upstream's write path** (seed 002's
``append_message`` through ``_execute_write``, reproduced in plain sqlite3 on the same file:
``BEGIN IMMEDIATE``, its 22-column ``INSERT``, its ``message_count`` ``UPDATE``, ``COMMIT``, and
the PASSIVE checkpoint after every 50th write, :class:`upstream_writes.UpstreamWriter`; none of
upstream's own Python, so the baseline is faster than upstream itself), same journal mode and
``synchronous``; target: paired ratio >= 1.2. And the same batch line on rows that all hold CJK words, each side finishing with
its CJK-bigram queue drained by the store's ``cjk_index_step`` (the same end state: asserted);
target: paired ratio >= 2.0.
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from hermes_data.engine import SqliteSettings  # noqa: E402
from hermes_data.sessions import sql  # noqa: E402
from hermes_data.sessions.storage.fts import ddl as fts_ddl  # noqa: E402
from hermes_data.sessions.backends.sqlite import CHECKPOINT_EVERY  # noqa: E402
from hermes_data.sessions.store import SessionStore  # noqa: E402
from upstream_writes import UpstreamWriter  # noqa: E402

#: The very statements the store's append path sends (admission with the header read, insert).
_STATEMENTS = sql.for_dialect("sqlite")
_ADMIT_AND_COUNT = _STATEMENTS.ADMIT_AND_COUNT
_INSERT_MESSAGE = _STATEMENTS.INSERT_MESSAGE

#: Upstream's append (seed 002 ``append_message``): its INSERT's 22 columns (no
#: display_identity: the store's insert trigger fills it, as on an adopted file) and its
#: counter UPDATE for a row without tool calls.
_UPSTREAM_INSERT = (
    "INSERT INTO messages (session_id, role, content, tool_call_id, tool_calls, tool_name, "
    "effect_disposition, timestamp, token_count, finish_reason, reasoning, reasoning_content, "
    "reasoning_details, codex_reasoning_items, codex_message_items, platform_message_id, "
    "observed, _compressed_summary, active, api_content, display_kind, display_metadata) "
    "VALUES (" + ", ".join("?" * 22) + ")")
_UPSTREAM_COUNT = "UPDATE sessions SET message_count = message_count + 1 WHERE id = ?"

CONTENT = ("The gateway routes each inbound message to its session and appends the turn; "
           "this sentence is a realistic assistant reply of moderate length. ") * 2


def _row(i: int) -> dict:
    return {"role": "assistant" if i % 2 else "user", "content": f"{CONTENT} #{i}"}


def _baseline_tuple(i: int, ts: float, row: Callable[[int], dict] = _row) -> tuple:
    r = row(i)
    return (r["role"], r["content"], None, None, None, ts, None, None, None, None, None, None,
            None, None, 0, 0, None, 1, None, None, None, None)


def open_store(path: Path, journal: str) -> SessionStore:
    return SessionStore(path, settings=SqliteSettings(busy_timeout_ms=1000, journal_mode=journal))


def baseline_conn(path: Path, journal: str) -> sqlite3.Connection:
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("PRAGMA busy_timeout=1000")
    con.execute(f"PRAGMA journal_mode={journal}")
    con.execute("PRAGMA synchronous=NORMAL")
    con.execute("PRAGMA foreign_keys=ON")
    return con


def _baseline_singles(con: sqlite3.Connection, sid: str, n: int, checkpoint_every: int) -> float:
    t0 = time.perf_counter()
    for i in range(n):
        con.execute("BEGIN IMMEDIATE")
        con.execute(_ADMIT_AND_COUNT, (1, 0, sid)).fetchall()
        con.execute(_INSERT_MESSAGE, (sid, *_baseline_tuple(i, time.time())))
        con.execute("COMMIT")
        if checkpoint_every and (i + 1) % checkpoint_every == 0:
            con.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
    return n / (time.perf_counter() - t0)


def _upstream_singles(con: sqlite3.Connection, sid: str, n: int) -> float:
    """Upstream's append_message write path, ``n`` times (see the module docstring)."""
    writer = UpstreamWriter(con)
    t0 = time.perf_counter()
    for i in range(n):
        r = _row(i)
        con.execute("BEGIN IMMEDIATE")
        con.execute(_UPSTREAM_INSERT, (sid, r["role"], r["content"], None, None, None, None,
                                       time.time(), None, None, None, None, None, None, None,
                                       None, 0, 0, 1, None, None, None))
        con.execute(_UPSTREAM_COUNT, (sid,))
        writer.commit()
    return n / (time.perf_counter() - t0)


def bench_single(store: SessionStore, con: sqlite3.Connection, n: int,
                 wal: bool) -> tuple[float, float, float, float]:
    """Ours; the baseline; the baseline plus the PASSIVE checkpoint every 50 writes that the
    store sends in WAL mode (spec §8.5) — i.e. every statement the store issues; upstream's
    write path (:func:`_upstream_singles`)."""
    store.create_session("single", "cli")
    t0 = time.perf_counter()
    for i in range(n):
        r = _row(i)
        store.append_message("single", r["role"], r["content"])
    ours = n / (time.perf_counter() - t0)
    for sid in ("single", "single_ckpt", "single_upstream"):
        con.execute("INSERT INTO sessions (id, source, started_at) VALUES (?, 'cli', ?)",
                    (sid, time.time()))
    base = _baseline_singles(con, "single", n, 0)
    base_ckpt = _baseline_singles(con, "single_ckpt", n, CHECKPOINT_EVERY if wal else 0)
    upstream = _upstream_singles(con, "single_upstream", n)
    return ours, base, base_ckpt, upstream


def bench_batch(store: SessionStore, con: sqlite3.Connection, total: int, size: int,
                tag: str, row: Callable[[int], dict] = _row,
                finish: tuple[Callable[[], None], Callable[[], None]] | None = None
                ) -> tuple[float, float]:
    """Ours (``append_messages_batch``) and the per-row baseline, ``total`` rows of ``row``
    in batches of ``size`` into session ``batch<tag>``; ``finish``: work each side's timing
    includes after its last batch (ours, baseline)."""
    sid = f"batch{tag}"
    store.create_session(sid, "cli")
    rows = [row(i) for i in range(size)]
    t0 = time.perf_counter()
    for _ in range(total // size):
        store.append_messages_batch(sid, rows)
    if finish:
        finish[0]()
    ours = total / (time.perf_counter() - t0)
    con.execute("INSERT INTO sessions (id, source, started_at) VALUES (?, 'cli', ?)", (sid, time.time()))
    t0 = time.perf_counter()
    for _ in range(total // size):
        now = time.time()
        con.execute("BEGIN IMMEDIATE")
        con.execute(_ADMIT_AND_COUNT, (size, 0, sid)).fetchall()
        con.executemany(_INSERT_MESSAGE, [(sid, *_baseline_tuple(i, now + i * 1e-6, row))
                                          for i in range(size)])
        con.execute("COMMIT")
    if finish:
        finish[1]()
    base = total / (time.perf_counter() - t0)
    return ours, base


#: CJK words mixed into every row of the CJK line (issue 34 item 3): each row queues its id
#: for the CJK-bigram index.
CJK_WORDS = ("修改服务端的配置文件", "日志里有错误", "サーバーの設定を変更", "설정 파일을 수정")


def _cjk_row(i: int) -> dict:
    return {"role": "assistant" if i % 2 else "user",
            "content": f"{CONTENT} {CJK_WORDS[i % len(CJK_WORDS)]} #{i}"}


def _drain_cjk(store: SessionStore) -> None:
    while store.cjk_index_step():
        pass


def bench_batch_cjk(store: SessionStore, con: sqlite3.Connection, base_path: Path,
                    journal: str, total: int, size: int, tag: str) -> tuple[float, float]:
    """Issue 34 item 3: the batch against the per-row path on a corpus whose every row holds
    CJK words, to the same end state — each side's queued ids indexed by the store's own
    ``cjk_index_step`` (the baseline's through a store handle on its file), timed."""
    def drain_base() -> None:
        with open_store(base_path, journal) as drainer:
            _drain_cjk(drainer)

    rates = bench_batch(store, con, total, size, f"cjk{tag}", _cjk_row,
                        (lambda: _drain_cjk(store), drain_base))
    sid = f"batchcjk{tag}"
    for side in (store.engine.connect(), None):
        c = side.connection.driver_connection if side is not None else con
        left = c.execute("SELECT COUNT(*) FROM messages_cjk_queue").fetchone()[0]
        docs = c.execute("SELECT COUNT(*) FROM messages_cjk_doc d JOIN messages m "
                         "ON m.id = d.id WHERE m.session_id = ?", (sid,)).fetchone()[0]
        assert (left, docs) == (0, total), (left, docs)  # the same end state on both sides
        if side is not None:
            side.close()
    return rates


def bench_tip(store: SessionStore, con: sqlite3.Connection, repeat: int) -> tuple[float, float]:
    ids = [f"chain{i:04d}" for i in range(500)]
    rows = [(sid, 1.7e9 + i, ids[i - 1] if i else None, "compression" if i < 499 else None,
             1.7e9 + i + 0.5 if i < 499 else None) for i, sid in enumerate(ids)]
    insert = ("INSERT INTO sessions (id, source, started_at, parent_session_id, end_reason, ended_at) "
              "VALUES (?, 'cli', ?, ?, ?, ?)")
    with store.engine.begin() as conn:
        conn.exec_driver_sql(insert, rows)
    con.execute("BEGIN")
    con.executemany(insert, rows)
    con.execute("COMMIT")
    assert store.get_compression_tip(ids[0]) == ids[-1]
    ours, base = [], []
    q = str(sql.TIP_OF)
    for _ in range(repeat):
        t0 = time.perf_counter()
        store.get_compression_tip(ids[0])
        ours.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        assert con.execute(q, {"start": ids[0]}).fetchone()[0] == ids[-1]
        base.append(time.perf_counter() - t0)
    return statistics.median(ours) * 1000, statistics.median(base) * 1000


def bench_paging(store: SessionStore, con: sqlite3.Connection) -> tuple[float, float, float, int]:
    store.create_session("paged", "cli")
    for _ in range(5):
        store.append_messages_batch("paged", [_row(i) for i in range(10_000)])
    t0 = time.perf_counter()
    after, seen = 0, 0
    while True:
        page = store.get_messages("paged", limit=100, after_id=after)
        if not page:
            break
        seen += len(page)
        after = page[-1].id
    ours = time.perf_counter() - t0
    assert seen == 50_000
    con.execute("BEGIN")
    con.execute("INSERT INTO sessions (id, source, started_at) VALUES ('paged', 'cli', 1.7e9)")
    con.executemany(_INSERT_MESSAGE, [("paged", *_baseline_tuple(i, 1.7e9 + i)) for i in range(50_000)])
    con.execute("COMMIT")
    t0 = time.perf_counter()
    after = 0
    while True:
        rows = con.execute("SELECT id, content FROM messages WHERE session_id = ? AND +active = 1 "
                           "AND id > ? ORDER BY id LIMIT 100", ("paged", after)).fetchall()
        if not rows:
            break
        after = rows[-1][0]
    base = time.perf_counter() - t0
    t0 = time.perf_counter()
    for off in range(0, 50_000, 100):  # what upstream did: OFFSET paging (sampled: first 100 pages)
        if off >= 10_000:
            break
        con.execute("SELECT id, content FROM messages WHERE session_id = ? ORDER BY id LIMIT 100 OFFSET ?",
                    ("paged", off)).fetchall()
    offset_100_pages = time.perf_counter() - t0
    return ours, base, offset_100_pages, seen


def bench_ceilings(d: Path, journal: str, n: int) -> dict[str, float]:
    """Plain sqlite3 single appends with no FTS trigger, the standard index only, and both."""
    out = {}
    for name, drop in (("no triggers", fts_ddl.FTS_TRIGGERS), ("base index only", fts_ddl.TRIGRAM_TRIGGERS),
                       ("both indexes", ())):
        path = d / f"ceiling-{name.replace(' ', '_')}.db"
        open_store(path, journal).close()
        con = baseline_conn(path, journal)
        for trig in drop:
            con.execute(f"DROP TRIGGER IF EXISTS {trig}")
        con.execute("INSERT INTO sessions (id, source, started_at) VALUES ('c', 'cli', ?)", (time.time(),))
        t0 = time.perf_counter()
        for i in range(n):
            con.execute("BEGIN IMMEDIATE")
            con.execute(_ADMIT_AND_COUNT, (1, 0, "c")).fetchall()
            con.execute(_INSERT_MESSAGE, ("c", *_baseline_tuple(i, time.time())))
            con.execute("COMMIT")
        out[name] = n / (time.perf_counter() - t0)
        con.close()
    return out


def _rss_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def memory_child(side: str, path: Path, journal: str, rows: int) -> None:
    """One call of ``rows`` rows; prints the peak RSS growth in kB (child process)."""
    if side == "ours":
        store = open_store(path, journal)
        store.create_session("mem", "cli")
    else:
        open_store(path, journal).close()
        con = baseline_conn(path, journal)
        con.execute("INSERT INTO sessions (id, source, started_at) VALUES ('mem', 'cli', ?)",
                    (time.time(),))
    data = [_row(i) for i in range(rows)]
    before = _rss_kb("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS (Linux >= 4.0)
    if side == "ours":
        assert store.append_messages_batch("mem", data) == rows
    else:
        now = time.time()
        con.execute("BEGIN IMMEDIATE")
        con.execute(_ADMIT_AND_COUNT, (rows, 0, "mem")).fetchall()
        for i, r in enumerate(data):
            con.execute(_INSERT_MESSAGE, ("mem", r["role"], r["content"], None, None, None,
                                          now + i * 1e-6, None, None, None, None, None, None,
                                          None, None, 0, 0, None, 1, None, None, None, None))
        con.execute("COMMIT")
    print(_rss_kb("VmHWM") - before)


def bench_memory(d: Path, journal: str, rows: int, repeat: int) -> tuple[float, float]:
    out: dict[str, list[float]] = {"ours": [], "upstream": []}
    for run in range(repeat):
        for side in out:
            res = subprocess.run([sys.executable, __file__, "--memory-child", side,
                                  str(d / f"mem-{side}-{run}.db"), "--journal", journal,
                                  "--memory-rows", str(rows)],
                                 check=True, capture_output=True, text=True)
            out[side].append(int(res.stdout.split()[-1]) / 1024)
    return statistics.median(out["ours"]), statistics.median(out["upstream"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--journal", choices=("wal", "delete"), default="wal")
    ap.add_argument("--n", type=int, default=3000, help="single appends per run")
    ap.add_argument("--batch-total", type=int, default=20_000)
    ap.add_argument("--batch-size", type=int, default=500)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--memory-rows", type=int, default=50_000)
    ap.add_argument("--memory-child", nargs=2, metavar=("SIDE", "DB"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.memory_child:
        memory_child(args.memory_child[0], Path(args.memory_child[1]), args.journal,
                     args.memory_rows)
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="hermes-bench-"))
    try:
        singles, batches, cjk_batches = [], [], []
        for run in range(args.repeat):
            d = tmp / f"run{run}"
            d.mkdir()
            store = open_store(d / "ours.db", args.journal)
            open_store(d / "base.db", args.journal).close()  # same schema, FTS and triggers
            con = baseline_conn(d / "base.db", args.journal)
            if run == 0:
                jm = store.journal_mode
                sync = store.engine.connect().exec_driver_sql("PRAGMA synchronous").scalar()
                bjm = con.execute("PRAGMA journal_mode").fetchone()[0]
                bsync = con.execute("PRAGMA synchronous").fetchone()[0]
                print(f"SQLite {sqlite3.sqlite_version}; journal_mode ours={jm} baseline={bjm}; "
                      f"synchronous ours={sync} baseline={bsync} (1=NORMAL); FTS: both indexes + 6 triggers live")
            singles.append(bench_single(store, con, args.n, args.journal == "wal"))
            batches.append(bench_batch(store, con, args.batch_total, args.batch_size, str(run)))
            cjk_batches.append(bench_batch_cjk(store, con, d / "base.db", args.journal,
                                               args.batch_total, args.batch_size, str(run)))
            if run == args.repeat - 1:
                ceilings = bench_ceilings(d, args.journal, args.n)
                tip = bench_tip(store, con, 21)
                paging = bench_paging(store, con)
                memory = bench_memory(d, args.journal, args.memory_rows, 3)
            store.close()
            con.close()
        med = lambda xs, k: statistics.median(x[k] for x in xs)  # noqa: E731
        s_o, s_b, s_c = med(singles, 0), med(singles, 1), med(singles, 2)
        b_o, b_b = med(batches, 0), med(batches, 1)
        print(f"append_message        : {s_o:10,.0f} msg/s   baseline {s_b:10,.0f} msg/s   ratio {s_o / s_b:5.2f}   target >= 3,700")
        print(f"  same + PASSIVE checkpoint every {CHECKPOINT_EVERY} writes (§8.5): baseline {s_c:10,.0f} msg/s   ratio {s_o / s_c:5.2f}")
        s_u = med(singles, 3)
        u_paired = statistics.median(x[0] / x[3] for x in singles)
        print(f"append_message vs upstream's write path (plain sqlite3, its statements and "
              f"checkpoint cadence): {s_u:10,.0f} msg/s   paired ratio {u_paired:5.2f}   "
              f"({', '.join(f'{x[0] / x[3]:.2f}' for x in singles)}; target >= 1.2, issue 34)")
        print(f"append_messages_batch : {b_o:10,.0f} msg/s   baseline {b_b:10,.0f} msg/s   ratio {b_o / b_b:5.2f}   target >= 18,000 (batches of {args.batch_size}); "
              "ratio >= 2.0 against the per-row trigger path (issue 14)")
        paired = statistics.median(o / b for o, b in batches)  # each run: ours, then base
        print(f"  paired (median of the per-run ratios, {len(batches)} runs): {paired:5.2f}   "
              f"({', '.join(f'{o / b:.2f}' for o, b in batches)}; target >= 2.0)")
        c_o, c_b = med(cjk_batches, 0), med(cjk_batches, 1)
        c_paired = statistics.median(o / b for o, b in cjk_batches)
        print(f"append_messages_batch, CJK in every row, CJK queue drained on both sides: "
              f"{c_o:10,.0f} msg/s   baseline {c_b:10,.0f} msg/s   paired ratio {c_paired:5.2f}   "
              f"({', '.join(f'{o / b:.2f}' for o, b in cjk_batches)}; target >= 2.0, issue 34)")
        print(f"append_messages_batch of {args.memory_rows:,} rows in one call: peak RSS growth "
              f"{memory[0]:+6.1f} MB   upstream-equivalent {memory[1]:+6.1f} MB   target <= 5 MB")
        print("raw sqlite3 single-append ceilings: " + ", ".join(
            f"{k} {v:,.0f} msg/s" for k, v in ceilings.items()))
        print(f"tip of 500-segment    : {tip[0]:10.2f} ms      baseline {tip[1]:10.2f} ms      ratio {tip[0] / tip[1]:5.2f}   target <= 5 ms")
        print(f"page 50,000 by 100    : {paging[0]:10.3f} s       baseline {paging[1]:10.3f} s       ratio {paging[0] / paging[1]:5.2f}   target <= 1 s "
              f"(OFFSET paging, first 100 pages only: {paging[2]:.3f} s)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
