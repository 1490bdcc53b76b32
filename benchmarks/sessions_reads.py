"""Session-store transcript reads against plain-sqlite3 baselines measured in the same run (issue 14).

    python benchmarks/sessions_reads.py [--journal wal|delete] [--messages 50000] [--repeat 5]

One session of --messages rows (assistant text, one row in ten with tool calls, one in fifty
multimodal) is written once by the store; every side reads that same file.

* ``get_messages`` paging by 100 with ``after_id`` (what the export and the UI do) against
  the raw keyset query of the same columns on a plain sqlite3 connection (target <= 3x), and,
  for reference, against the two-column keyset query (``id, content``) the issue quoted.
* export (``hermes-data export``'s writer, ``cli_maintenance.write_jsonl``) against the
  upstream-equivalent: one plain sqlite3 ``SELECT *`` of the session, a dict per row decoded
  as upstream decodes it, ``json.dumps`` per line. Each side runs in a fresh process; time
  and peak-RSS growth (VmHWM after the run minus VmRSS before it) are reported. Targets:
  time <= 1.0x upstream, memory as before (+3.6 MB; upstream +276 MB at 50,000 rows).

Medians of --repeat runs; the sides alternate. The machine is shared: read ratios, not
absolute figures.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hermes_data.engine import SqliteSettings  # noqa: E402
from hermes_data.sessions.sql.core import MESSAGE_COLS  # noqa: E402
from hermes_data.sessions.store import SessionStore  # noqa: E402

SESSION = "bench"
CONTENT = ("The gateway routes each inbound message to its session and appends the turn; "
           "this sentence is a realistic assistant reply of moderate length. ") * 2
_KEYSET_ALL = (f"SELECT {', '.join(MESSAGE_COLS)} FROM messages WHERE session_id = ? "
               "AND +active = 1 AND id > ? ORDER BY id LIMIT ?")
_KEYSET_TWO = ("SELECT id, content FROM messages WHERE session_id = ? AND +active = 1 "
               "AND id > ? ORDER BY id LIMIT ?")


def _row(i: int) -> dict:
    row: dict = {"role": "assistant" if i % 2 else "user", "content": f"{CONTENT} #{i}"}
    if i % 10 == 3:
        row["tool_calls"] = [{"id": f"c{i}", "function": {"name": "read_file",
                                                          "arguments": '{"path": "a.py"}'}}]
    if i % 50 == 7:
        row["content"] = [{"type": "text", "text": f"look #{i}"},
                          {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]
    return row


def build(path: Path, journal: str, n: int) -> None:
    with SessionStore(path, settings=SqliteSettings(journal_mode=journal)) as s:
        s.create_session(SESSION, "cli")
        for start in range(0, n, 10_000):
            s.append_messages_batch(SESSION, [_row(i) for i in range(start, min(n, start + 10_000))])


# -- paging ------------------------------------------------------------------------------


def page_ours(store: SessionStore, size: int) -> int:
    after, seen = 0, 0
    while True:
        page = store.get_messages(SESSION, limit=size, after_id=after)
        if not page:
            return seen
        seen += len(page)
        after = page[-1].id


def page_raw(con: sqlite3.Connection, stmt: str, size: int) -> int:
    after, seen = 0, 0
    while True:
        rows = con.execute(stmt, (SESSION, after, size)).fetchall()
        if not rows:
            return seen
        seen += len(rows)
        after = rows[-1][0]


# -- export (each side in its own process) --------------------------------------------------


def _rss_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def _reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS (Linux >= 4.0)


def _upstream_decode(row: sqlite3.Row) -> dict:
    """Upstream's get_messages decoding of one ``SELECT *`` row."""
    msg = dict(row)
    if msg.pop("_compressed_summary", 0):
        msg["_compressed_summary"] = True
    content = msg.get("content")
    if isinstance(content, str) and content.startswith("\x00json:"):
        try:
            msg["content"] = json.loads(content[len("\x00json:"):])
        except ValueError:
            pass
    if msg.get("tool_calls"):
        try:
            msg["tool_calls"] = json.loads(msg["tool_calls"])
        except ValueError:
            msg["tool_calls"] = []
    if msg.get("display_metadata") is not None:
        try:
            msg["display_metadata"] = json.loads(msg["display_metadata"])
        except ValueError:
            msg["display_metadata"] = None
    return msg


def export_child(side: str, db: Path, out: Path, journal: str) -> None:
    """Run one export and print ``seconds rss_growth_kb lines`` (child process)."""
    if side == "ours":
        from hermes_data.cli.maintenance import write_jsonl

        store = SessionStore(db, read_only=True, settings=SqliteSettings(journal_mode=journal))
    else:
        con = sqlite3.connect(db)
        con.row_factory = sqlite3.Row
    before = _rss_kb("VmRSS")
    _reset_peak()
    t0 = time.perf_counter()
    with open(out, "w", encoding="utf-8") as fh:
        if side == "ours":
            n = write_jsonl(store, SESSION, fh)
        else:  # upstream: the whole transcript in memory, then one line per message
            rows = con.execute("SELECT * FROM messages WHERE session_id = ? AND active = 1 "
                               "ORDER BY id ASC", (SESSION,)).fetchall()
            msgs = [_upstream_decode(r) for r in rows]
            for m in msgs:
                fh.write(json.dumps(m, ensure_ascii=False, default=str) + "\n")
            n = len(msgs)
    elapsed = time.perf_counter() - t0
    print(f"{elapsed:.6f} {_rss_kb('VmHWM') - before} {n}")


def export_run(side: str, db: Path, out: Path, journal: str) -> tuple[float, float, int]:
    res = subprocess.run([sys.executable, __file__, "--export-child", side, str(db), str(out),
                          "--journal", journal], check=True, capture_output=True, text=True)
    secs, kb, n = res.stdout.split()
    return float(secs), int(kb) / 1024, int(n)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--journal", choices=("wal", "delete"), default="delete")
    ap.add_argument("--messages", type=int, default=50_000)
    ap.add_argument("--page", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--export-child", nargs=3, metavar=("SIDE", "DB", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.export_child:
        side, db, out = args.export_child
        export_child(side, Path(db), Path(out), args.journal)
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="hermes-bench-reads-"))
    try:
        db = tmp / "state.db"
        build(db, args.journal, args.messages)
        store = SessionStore(db, settings=SqliteSettings(journal_mode=args.journal))
        con = sqlite3.connect(db)
        print(f"SQLite {sqlite3.sqlite_version}; journal_mode {store.journal_mode}; "
              f"{args.messages:,} messages in one session; medians of {args.repeat}")
        ours, same, two = [], [], []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            assert page_ours(store, args.page) == args.messages
            ours.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            assert page_raw(con, _KEYSET_ALL, args.page) == args.messages
            same.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            assert page_raw(con, _KEYSET_TWO, args.page) == args.messages
            two.append(time.perf_counter() - t0)
        store.close()
        con.close()
        o, s, t = statistics.median(ours), statistics.median(same), statistics.median(two)
        print(f"get_messages paging by {args.page}: {o:8.3f} s   raw keyset, same columns {s:8.3f} s   "
              f"ratio {o / s:5.2f}   target <= 3.0")
        print(f"  (raw keyset of id, content only: {t:8.3f} s; ratio {o / t:5.2f})")
        runs: dict[str, list[tuple[float, float, int]]] = {"ours": [], "upstream": []}
        for _ in range(max(3, args.repeat // 2 + 1)):
            for side in ("ours", "upstream"):
                runs[side].append(export_run(side, db, tmp / f"{side}.jsonl", args.journal))
        assert {r[2] for r in runs["ours"]} == {r[2] for r in runs["upstream"]} == {args.messages}
        (ot, om), (ut, um) = ((statistics.median(r[0] for r in runs[k]),
                               statistics.median(r[1] for r in runs[k])) for k in ("ours", "upstream"))
        print(f"export {args.messages:,} messages : {ot:8.3f} s   upstream-equivalent {ut:8.3f} s   "
              f"ratio {ot / ut:5.2f}   target <= 1.0")
        print(f"  peak RSS growth: ours {om:+8.1f} MB   upstream-equivalent {um:+8.1f} MB   "
              f"target: as before (+3.6 MB)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
