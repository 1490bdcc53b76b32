"""SIGKILL during gateway writes (spec sessions-ext-gateway.md acceptance behaviour 41):
each scope, table or candidate is entirely before or after."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import sqlite3
import time

import pytest

from hermes_data.sessions.store import SessionStore

KEYS = 3000


def _replacer(path, ready):
    with SessionStore(path) as s:
        ready.set()
        n = 0
        while True:
            tag = "ab"[n % 2]
            s.replace_gateway_routing_entries({f"k{i:05d}": tag for i in range(KEYS)},
                                              scope="s")
            n += 1


def _pruner(path, ready):
    with SessionStore(path) as s:
        ready.set()
        s.prune_never_active_keyed_sessions(older_than_days=1)


def _kill_after(target, path, delay, until=None):
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    p = ctx.Process(target=target, args=(str(path), ready))
    p.start()
    assert ready.wait(60)
    time.sleep(delay)
    deadline = time.monotonic() + 30
    while until is not None and not until() and time.monotonic() < deadline:
        time.sleep(0.005)
    os.kill(p.pid, signal.SIGKILL)
    p.join(30)


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_gw41_sigkill_leaves_each_scope_and_candidate_whole(tmp_path):
    """Behaviour 41 (SQLite files): a process killed during scope replaces leaves the scope
    wholly one snapshot; one killed during a never-active prune leaves every candidate with
    both its row and its routing entry, or neither."""
    path = tmp_path / "state.db"
    with SessionStore(path) as s:
        s.replace_gateway_routing_entries({f"k{i:05d}": "a" for i in range(KEYS)}, scope="s")
    _kill_after(_replacer, path, 0.4)
    with SessionStore(path) as s:
        values = set(s.load_gateway_routing_entries(scope="s").values())
        assert len(s.load_gateway_routing_entries(scope="s")) == KEYS and len(values) == 1
    start = time.time() - 3 * 86400
    con = sqlite3.connect(path)
    con.executemany("INSERT INTO sessions (id, source, session_key, started_at) VALUES "
                    "(?, 'telegram', ?, ?)", [(f"n{i:04d}", f"key{i}", start) for i in range(3000)])
    con.executemany("INSERT INTO gateway_routing VALUES ('x', ?, ?, 1.0)",
                    [(f"key{i}", json.dumps({"session_id": f"n{i:04d}"})) for i in range(3000)])
    con.commit()
    con.close()
    def started() -> bool:  # the prune has committed at least one candidate
        con = sqlite3.connect(path, timeout=5)
        try:
            return con.execute("SELECT COUNT(*) FROM sessions").fetchone()[0] < 3000
        finally:
            con.close()

    _kill_after(_pruner, path, 0.0, until=started)
    con = sqlite3.connect(path)
    try:
        rows = {r[0] for r in con.execute("SELECT id FROM sessions WHERE id LIKE 'n%'")}
        entries = {json.loads(r[0])["session_id"] for r in con.execute(
            "SELECT entry_json FROM gateway_routing WHERE scope = 'x'")}
        assert rows == entries
        assert 0 < len(rows) < 3000, len(rows)  # killed mid-prune, not before or after it
        assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        con.close()
