"""Listing and prune reads (issue 32 round 2): CPU time per call of the sidebar listing, the
counts and the prune dry run, for an A/B of two trees on the same file:

    python benchmarks/listing_reads.py [--sessions 2000] [--calls 60] [--db PATH]

Builds (or reuses, with ``--db``) a SQLite store of ``--sessions`` sessions, a third of them
``cron``, half ended, two messages each; then prints, per line, the median thread CPU time of
``--calls`` calls after one warm-up call. Run it with ``PYTHONPATH`` set to each tree in turn,
alternating, on one ``--db`` file (thread CPU time: a loaded machine moves wall time far more).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hermes_data.sessions.core import maintenance  # noqa: E402
from hermes_data.sessions.store import SessionStore  # noqa: E402


def build(db: Path, n: int) -> None:
    """``n`` sessions with two messages each; every third ``cron``, every second ended."""
    with SessionStore(db) as s:
        for i in range(n):
            sid = f"s{i:05d}"
            s.create_session(sid, "cli" if i % 3 else "cron")
            s.append_messages_batch(sid, [{"role": "user", "content": f"hello {i} " * 5},
                                          {"role": "assistant", "content": "reply " * 20}])
            if i % 2:
                s.end_session(sid, "user_exit")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sessions", type=int, default=2000)
    ap.add_argument("--calls", type=int, default=60)
    ap.add_argument("--db", type=Path, default=None)
    args = ap.parse_args()
    db = args.db or Path(tempfile.mkdtemp(prefix="hermes-bench-listing-")) / "state.db"
    if not db.exists():
        build(db, args.sessions)
    store = SessionStore(db)
    cases = (
        ("list_sessions(limit=50)", lambda: store.list_sessions(limit=50)),
        ("list_sessions(order_by_last_active)",
         lambda: store.list_sessions(limit=50, order_by_last_active=True)),
        ("session_count", lambda: store.session_count()),
        ("session_count_by_source", lambda: store.session_count_by_source()),
        ("list_prune_candidates(source)",
         lambda: maintenance.list_prune_candidates(store, None, source="cli")),
        ("count_prune_matches(90 d)", lambda: maintenance.count_prune_matches(store, 90)),
    )
    try:
        for name, fn in cases:
            fn()
            times = []
            for _ in range(args.calls):
                t0 = time.thread_time()
                fn()
                times.append(time.thread_time() - t0)
            sys.stdout.write(f"{name}\t{statistics.median(times) * 1000:.3f} ms\n")
    finally:
        store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
