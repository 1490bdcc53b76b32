"""UI reads and portability at scale (issue 19 acceptance 3), each against a baseline measured
in the same run:

    python benchmarks/ui_reads.py [--messages 50000] [--export-messages 200000] [--import-sessions 50]

* ``around``: SQLite VM steps (progress handler, 1 step per tick) of ``get_messages_around``
  and ``get_anchored_view`` with the anchor at the start, middle and end of one
  ``--messages`` session; the ratio end/start must be ~1 (cost independent of position).
* ``export``: peak RSS growth (VmHWM minus VmRSS before the call, fresh process) of streaming
  ``iter_export_all`` over ``--export-messages`` messages in 1,000-message sessions, and over
  ``--tiny-sessions`` one-message sessions (memory independent of the count); target <= 50 MB. Baseline: the same process reading nothing.
* ``import``: ``import_sessions`` throughput against plain sqlite3 inserting the same rows
  (same values incl. display identities, one transaction, every trigger live) into a store made by the same code;
  target ratio >= 0.8. Medians of --repeat runs; journal mode and synchronous printed.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hermes_data.sessions.core.display_order import identity  # noqa: E402
from hermes_data.sessions.store import SessionStore  # noqa: E402


def _steps(store: SessionStore, fn) -> int:
    raw = store.backend._raw  # type: ignore[attr-defined]
    count = [0]

    def tick() -> int:
        count[0] += 1
        return 0

    store.backend._read_pool = None  # type: ignore[attr-defined]  # reads on the traced conn
    raw.set_progress_handler(tick, 1)
    try:
        fn()
    finally:
        raw.set_progress_handler(None, 1)
    return count[0]


def bench_around(tmp: Path, n: int) -> None:
    path = tmp / "around.db"
    with SessionStore(path) as s:
        s.create_session("big", "cli")
        s.append_messages_batch("big", [{"role": "user" if i % 3 else "tool",
                                         "content": f"message {i}"} for i in range(n)])
    with SessionStore(path) as s:
        for name, call in (("around", lambda a: s.get_messages_around("big", a, window=5)),
                           ("anchored", lambda a: s.get_anchored_view("big", a, window=5))):
            steps = {pos: _steps(s, lambda a=a: call(a))
                     for pos, a in (("start", 1), ("middle", n // 2), ("end", n))}
            print(f"{name:9} VM steps start={steps['start']} middle={steps['middle']} "
                  f"end={steps['end']}  ratio end/start={steps['end'] / steps['start']:.2f}")


_EXPORT_CHILD = """
import sys, time
sys.path.insert(0, {repo!r})
from hermes_data.sessions.store import SessionStore
def rss(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1])
s = SessionStore({path!r}, read_only=True)
before = rss("VmRSS")
n = 0
if {read}:
    for doc in s.iter_export_all(max_messages=0):
        n += len(doc.messages)
print(n, rss("VmHWM") - before)
"""


def bench_export(tmp: Path, total: int, per: int = 1000) -> None:
    """``per`` messages a session (``per=1``: behaviour 31's many tiny sessions, written
    directly in one transaction)."""
    path = tmp / f"export{per}.db"
    SessionStore(path).close()
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("BEGIN IMMEDIATE")
    for k in range(max(1, total // per)):
        sid = f"e{k:07d}"
        con.execute("INSERT INTO sessions (id, source, started_at, message_count) "
                    "VALUES (?, 'cli', ?, ?)", (sid, 1.7e9 + k, per))
        con.executemany("INSERT INTO messages (session_id, role, content, timestamp) "
                        "VALUES (?, 'user', ?, ?)",
                        [(sid, f"row {i} of {sid}", 1.7e9 + k + i * 1e-3) for i in range(per)])
    con.execute("COMMIT")
    con.close()
    repo = str(Path(__file__).resolve().parent.parent)
    out = {}
    for read in (False, True):
        proc = subprocess.run([sys.executable, "-c", _EXPORT_CHILD.format(
            repo=repo, path=str(path), read=read)], capture_output=True, text=True, check=True)
        out[read] = [int(x) for x in proc.stdout.split()]
    grow = (out[True][1] - out[False][1]) / 1024
    print(f"export    {out[True][0]:,} messages ({per} a session) streamed; peak RSS growth "
          f"{grow:.1f} MB "
          "over the no-read baseline (target <= 50 MB)")


def _payload(sessions: int, per: int) -> list[dict]:
    return [{"id": f"imp{k:04d}", "source": "cli", "started_at": 1.7e9 + k,
             "messages": [{"role": "user" if i % 2 else "assistant",
                           "content": f"imported message {i} of session {k}",
                           "timestamp": 1.7e9 + k + i * 1e-3} for i in range(per)]}
            for k in range(sessions)]


def bench_import(tmp: Path, sessions: int, repeat: int) -> None:
    per = 1000
    payload = _payload(sessions, per)
    ours, base = [], []
    for r in range(repeat):
        a, b = tmp / f"imp_ours{r}.db", tmp / f"imp_base{r}.db"
        SessionStore(b).close()
        with SessionStore(a) as s:
            t0 = time.perf_counter()
            res = s.import_sessions(payload)
            ours.append(time.perf_counter() - t0)
            assert res.imported == sessions
            mode = s.journal_mode
        con = sqlite3.connect(b, isolation_level=None)
        sync = con.execute("PRAGMA synchronous").fetchone()[0]
        # The same rows: their display identities too (computed before the clock starts).
        rows_of = {e["id"]: [(e["id"], m["role"], m["content"], m["timestamp"],
                              identity(m["role"], m["content"], m["timestamp"], None, None,
                                       None)) for m in e["messages"]] for e in payload}
        t0 = time.perf_counter()
        con.execute("BEGIN IMMEDIATE")
        for e in payload:
            con.execute("INSERT INTO sessions (id, source, started_at, message_count) "
                        "VALUES (?, ?, ?, ?)", (e["id"], e["source"], e["started_at"], per))
            con.executemany("INSERT INTO messages (session_id, role, content, timestamp, "
                            "display_identity) VALUES (?, ?, ?, ?, ?)", rows_of[e["id"]])
        con.execute("COMMIT")
        base.append(time.perf_counter() - t0)
        con.close()
    rows = sessions * per
    o, b_ = statistics.median(ours), statistics.median(base)
    print(f"import    {rows:,} messages: ours {rows / o:,.0f} msg/s, plain sqlite3 "
          f"{rows / b_:,.0f} msg/s, ratio {b_ / o:.2f} (target >= 0.8; journal {mode}, "
          f"synchronous {sync})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=50_000)
    ap.add_argument("--export-messages", type=int, default=200_000)
    ap.add_argument("--import-sessions", type=int, default=50)
    ap.add_argument("--tiny-sessions", type=int, default=150_000,
                    help="sessions of one message each for the streaming-memory line")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        bench_around(tmp, args.messages)
        bench_export(tmp, args.export_messages)
        bench_export(tmp, args.tiny_sessions, per=1)
        bench_import(tmp, args.import_sessions, args.repeat)
    print(json.dumps({"done": True}))


if __name__ == "__main__":
    main()
