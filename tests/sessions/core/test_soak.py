"""Mixed load on one session store, real processes (issue 13, acceptance 1).

Four appenders, a searcher (alternating a read-write and a read-only handle), a pruner
running ``prune --apply``-equivalent deletes of its own ended sessions, and a vacuumer run
together for ``HERMES_DATA_SOAK_SECONDS`` (default 20). Afterwards: no error reached any
caller, every appended message is there exactly once (none lost, no id handed out twice),
nothing the pruner did not own was deleted, and ``PRAGMA integrity_check`` is ``ok``.

Both journal modes: the suite runs once under the default policy (DELETE on this machine's
SQLite) and once with ``HERMES_DATA_JOURNAL_MODE=wal``; the workers inherit the mode, and the
test asserts the file is in the mode the run asked for.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hermes_data.migrate import runner as migrate
from hermes_data.engine import is_wal_reset_vulnerable, linked_sqlite_version

from tests.conftest import RUN_JOURNAL_MODE

pytestmark = pytest.mark.sqlite_only("a soak of one SQLite file shared by sibling processes")

SECONDS = float(os.environ.get("HERMES_DATA_SOAK_SECONDS", "20"))
APPENDERS = 4
REPO = Path(__file__).resolve().parents[3]

WORKER = textwrap.dedent("""
    import json, sys, time, traceback
    from hermes_data.sessions.store import SessionStore
    from hermes_data.sessions import maintenance

    path, role, index, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    deadline = time.monotonic() + seconds
    out = {"role": role, "index": index, "errors": [], "done": 0}

    def guarded(fn):
        try:
            fn()
            out["done"] += 1
        except Exception as exc:  # every exception here is one that reached a caller
            out["errors"].append(f"{type(exc).__name__}: {exc}"[:300])

    if role == "append":
        sid = f"app-{index}"
        appended = out["appended"] = []
        with SessionStore(path) as store:
            store.create_session(sid, "soak")
            seq = 0
            while time.monotonic() < deadline:
                def one():
                    mid = store.append_message(sid, "user", f"soakword appender {index} seq {seq}")
                    appended.append([seq, mid])
                guarded(one)
                seq += 1
    elif role == "search":
        with SessionStore(path) as rw, SessionStore(path, read_only=True) as ro:
            turn = 0
            while time.monotonic() < deadline:
                store = rw if turn % 2 == 0 else ro
                guarded(lambda: store.search_messages("soakword", limit=20))
                guarded(lambda: store.get_messages(f"app-{turn % 4}"))
                turn += 1
    elif role == "prune":
        out["pruned"] = 0
        with SessionStore(path) as store:
            cycle = 0
            while time.monotonic() < deadline:
                def one():
                    for k in range(5):
                        sid = f"doomed-{cycle}-{k}"
                        store.create_session(sid, "doomed")
                        for m in range(10):
                            store.append_message(sid, "assistant", f"soakword doomed {cycle} {k} {m}")
                        store.end_session(sid, "user_exit")
                    out["pruned"] += maintenance.prune_sessions(store, older_than_days=0,
                                                                source="doomed")
                guarded(one)
                cycle += 1
    elif role == "vacuum":
        with SessionStore(path) as store:
            while time.monotonic() < deadline:
                guarded(lambda: maintenance.vacuum(store))
                time.sleep(1.0)
    print(json.dumps(out))
""")


def _start(path: Path, role: str, index: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", WORKER, str(path), role, str(index), str(SECONDS)],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_mixed_load_loses_nothing_and_surfaces_no_error(tmp_path):
    path = tmp_path / "state.db"
    migrate.upgrade("sessions", path)
    procs = [_start(path, "append", i) for i in range(APPENDERS)]
    procs += [_start(path, "search", 0), _start(path, "prune", 0), _start(path, "vacuum", 0)]
    results = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=SECONDS + 240)
        assert proc.returncode == 0, stderr[-3000:]
        results.append(json.loads(stdout.strip().splitlines()[-1]))

    errors = [(r["role"], r["index"], e) for r in results for e in r["errors"]]
    assert errors == [], errors[:10]
    by_role = {(r["role"], r["index"]): r for r in results}
    assert all(r["done"] > 0 for r in results), [(r["role"], r["done"]) for r in results]
    assert by_role[("prune", 0)]["pruned"] > 0
    assert by_role[("vacuum", 0)]["done"] > 0

    con = sqlite3.connect(path)
    try:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        for fts in ("messages_fts", "messages_fts_trigram"):
            con.execute(f"INSERT INTO {fts}({fts}) VALUES ('integrity-check')")  # raises if damaged
        mode = con.execute("PRAGMA journal_mode").fetchone()[0]
        policy = "delete" if is_wal_reset_vulnerable(linked_sqlite_version()) else "wal"
        assert mode == (RUN_JOURNAL_MODE or policy)
        all_ids = [r[0] for r in con.execute("SELECT id FROM messages")]
        assert len(all_ids) == len(set(all_ids))
        for i in range(APPENDERS):
            appended = by_role[("append", i)]["appended"]
            ids = [mid for _, mid in appended]
            assert len(ids) == len(set(ids)), f"appender {i} was handed an id twice"
            stored = dict(con.execute(
                "SELECT id, content FROM messages WHERE session_id = ?", (f"app-{i}",)).fetchall())
            assert len(stored) == len(appended), f"appender {i}: {len(appended)} appended, {len(stored)} stored"
            for seq, mid in appended:
                assert stored[mid] == f"soakword appender {i} seq {seq}"
        # the pruner deleted only its own sessions, completely
        assert con.execute("SELECT COUNT(*) FROM sessions WHERE source = 'doomed'").fetchone()[0] == 0
        assert con.execute("SELECT COUNT(*) FROM sessions WHERE source = 'soak'").fetchone()[0] == APPENDERS
        orphans = con.execute("SELECT COUNT(*) FROM messages WHERE session_id NOT IN "
                              "(SELECT id FROM sessions)").fetchone()[0]
        assert orphans == 0
    finally:
        con.close()


def test_an_fts_constructor_blocked_by_a_lock_is_busy_not_fatal(tmp_path):
    """What the soak's opens met: a connection that has read the schema, then loads an FTS5
    table while a sibling holds the file, gets "vtable constructor failed" with SQLITE_BUSY —
    a lock conflict to wait out (open and read patience), not an error for the caller."""
    from hermes_data.sessions.backends.sqlite import is_busy

    path = tmp_path / "vt.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE VIRTUAL TABLE m USING fts5(x)")
    reader = sqlite3.connect(path, isolation_level=None, timeout=0.1)
    try:
        reader.execute("SELECT COUNT(*) FROM sqlite_master").fetchall()  # schema now cached
        holder.execute("BEGIN EXCLUSIVE")
        with pytest.raises(sqlite3.OperationalError, match="vtable constructor failed") as info:
            reader.execute("SELECT * FROM m LIMIT 0").fetchall()
        assert is_busy(info.value)
        holder.execute("COMMIT")
        assert reader.execute("SELECT * FROM m LIMIT 0").fetchall() == []
        with pytest.raises(sqlite3.OperationalError) as other:
            reader.execute("SELECT * FROM no_such_table")
        assert not is_busy(other.value)
    finally:
        reader.close()
        holder.close()
