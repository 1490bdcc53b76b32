"""Crash safety and statement bounds of the coordination area (spec
sessions-ext-coordination.md §3.21, §3.6 W5; acceptance C48 second half, C49) and the
persistence-error buckets (A7)."""

from __future__ import annotations

import os
import random
import re
import signal
import sqlite3
import time

import pytest

from hermes_data.errors import DatabaseBusyError
from hermes_data.sessions.errors import (CompressionSessionClosedError,
                                         SessionCompressionInProgressError,
                                         SessionTurnLeaseLostError, StateDbCorruptError)

from tests.sessions.coordination.coord_support import where, worker


def _snapshot(path):
    con = sqlite3.connect(path)
    try:
        rows = con.execute("SELECT id, content, active, compacted FROM messages "
                           "WHERE session_id = 's' ORDER BY id").fetchall()
        counts = con.execute("SELECT message_count FROM sessions WHERE id = 's'").fetchone()[0]
        for t in ("messages_fts", "messages_fts_trigram"):
            con.execute(f"INSERT INTO {t}({t}) VALUES ('integrity-check')")
        fts = con.execute("SELECT COUNT(*) FROM messages_fts WHERE messages_fts MATCH "
                          "'alpha'").fetchone()[0]
        like = con.execute("SELECT COUNT(*) FROM messages WHERE content LIKE '%alpha%'"
                           ).fetchone()[0]
        return rows, counts, fts == like
    finally:
        con.close()


@pytest.mark.sqlite_only("SIGKILL of a process holding a SQLite write transaction")
@pytest.mark.parametrize("op", ["compact", "replace", "rewind"])
def test_c48_sigkill_inside_a_rewrite_leaves_before_or_after(store, op):
    """C48 (second half, and issue 18's crash item, lean: 2 trials per operation — the
    50-trial run is benchmarks/coordination_crash.py): a SIGKILL at a random point of the
    rewrite leaves exactly the before- or the after-state, FTS indexes agreeing with
    ``messages``, counters matching the rows."""
    seed = random.randrange(10 ** 6)
    print(f"seed={seed}")
    rng = random.Random(seed)
    store.create_session("s", "cli")
    store.append_messages_batch("s", [{"role": "user" if i % 2 == 0 else "assistant",
                                       "content": f"alpha row {i}"} for i in range(3000)])
    before, count_before, ok = _snapshot(store.path)
    assert ok and count_before == 3000
    for _ in range(2):
        proc = worker("crash-op", where(store), "s", op)
        assert proc.stdout.readline().strip() == "go"
        time.sleep(rng.uniform(0.0, 0.08))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        rows, count, ok = _snapshot(store.path)
        assert ok, f"FTS disagrees with messages (seed {seed})"
        active = [r for r in rows if r[2]]
        assert count == len(active), f"counters do not match the rows (seed {seed})"
        if rows == before:
            continue
        if op == "compact":
            assert [r[1] for r in active] == ["omega summary"]
            assert all(r[3] for r in rows if r[0] <= before[-1][0])
        elif op == "replace":
            assert [r[1] for r in rows] == ["omega new"]
        else:
            assert [r[0] for r in active] == [before[0][0], before[1][0]]
        return  # after-state reached: the next trial would start from another state


def test_c49_no_in_list_binds_more_than_900_ids(sqlite_store):
    """C49: no statement of this area binds more than 900 ids in one ``IN`` list (statement
    trace of the writer over the id-heavy operations: clone of 950 appended rows, a 1500-row
    ghost prune)."""
    store = sqlite_store
    store.create_session("s", "cli")
    store.append_message("s", "user", "first")
    wm = store.get_active_message_watermark("s")
    store.append_messages_batch("s", [{"role": "user", "content": f"x{i}"} for i in range(950)])
    now = time.time()
    with store.engine.begin() as c:
        c.exec_driver_sql("INSERT INTO sessions (id, source, started_at, ended_at, end_reason) "
                          "VALUES (?, 'tui', ?, ?, 'tui_shutdown')",
                          [(f"g{i:04d}", now - 2 * 86400, now - 2 * 86400) for i in range(1500)])
    traced: list[str] = []
    raw = store.backend._raw
    raw.set_trace_callback(traced.append)
    try:
        assert store.archive_and_compact("s", [{"role": "user", "content": "sum"}],
                                         watermark=wm) == 951
        assert store.prune_empty_ghost_sessions() == 1500
    finally:
        raw.set_trace_callback(None)
    widest = max((len(m.split(",")) for t in traced
                  for m in re.findall(r"\bIN \(([^()]*)\)", t)), default=0)
    assert widest == 900  # chunked at exactly the bound


def test_a7_classify_persistence_error(sqlite_store):
    """A7: typed coordination errors and their phrases land in their buckets before the
    corruption, lock and disk buckets."""
    c = sqlite_store.classify_persistence_error
    assert c(SessionTurnLeaseLostError("s", "k", "a", "b")) == "turn_lease"
    assert c(CompressionSessionClosedError("s")) == "compression_closed"
    assert c(SessionCompressionInProgressError("s", "h")) == "compression"
    assert c(StateDbCorruptError("p", "x")) == "corrupt"
    assert c(DatabaseBusyError("busy")) == "locked"
    assert c("turn lease of session 's' lost") == "turn_lease"
    assert c("session 's' is being compressed") == "compression"
    assert c("database disk image is malformed") == "corrupt"
    assert c(sqlite3.OperationalError("database is locked")) == "locked"
    assert c("disk I/O error") == "disk"
    assert c("something else") == "unknown"
