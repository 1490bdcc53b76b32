"""The coordination columns as the store sees them (spec sessions-ext-coordination.md §2,
acceptance C1–C3; the revision's own tests are in test_coordination_schema.py)."""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest

from hermes_data.migrate import runner as migrate
from hermes_data.engine import trace_writes
from hermes_data.sessions.errors import SchemaBehindError
from hermes_data.sessions.store import SessionStore

EXPECTED = {  # (type, notnull, dflt_value) per §4 C1
    "compression_failure_cooldown_until": ("REAL", 0, None),
    "compression_failure_error": ("TEXT", 0, None),
    "compression_fallback_streak": ("INTEGER", 1, "0"),
    "compression_ineffective_count": ("INTEGER", 1, "0"),
    "compression_recovery_deadline": ("REAL", 0, None),
    "compression_overload_streak": ("INTEGER", 1, "0"),
    "rewind_count": ("INTEGER", 1, "0"),
    "api_call_count": ("INTEGER", 0, "0"),
}
REW, INP = "20260808_090000_rew011", "20260808_120000_inp012"


def _info(path) -> dict:
    con = sqlite3.connect(path)
    try:
        return {r[1]: (r[2], r[3], r[4]) for r in con.execute("PRAGMA table_info(sessions)")}
    finally:
        con.close()


@pytest.mark.sqlite_only("PRAGMA table_info")
def test_c1_fresh_columns(tmp_path):
    """C1: a fresh upgrade gives the eight §2.1 columns with the exact (type, notnull,
    dflt)."""
    path = tmp_path / "state.db"
    SessionStore(path).close()
    info = _info(path)
    assert {c: info[c] for c in EXPECTED} == EXPECTED


@pytest.mark.sqlite_only("the shared legacy state.db is a SQLite file")
def test_c2_fixture_adoption_keeps_values_and_settles(legacy_copy):
    """C2: adopting the v21 fixture adds exactly the three missing columns, keeps
    ``rewind_count = 1`` on rew011 and the 14 ``compacted = 1`` rows of inp012; the next open
    writes nothing."""
    before = set(_info(legacy_copy))
    with SessionStore(legacy_copy) as store:
        pass
    added = set(_info(legacy_copy)) - before
    assert {"compression_ineffective_count", "compression_recovery_deadline",
            "compression_overload_streak"} <= added
    assert not added & {"compression_failure_cooldown_until", "compression_failure_error",
                        "compression_fallback_streak", "rewind_count"}
    with SessionStore(legacy_copy) as store:
        seen, stop = trace_writes(store.engine)
        try:
            con = sqlite3.connect(legacy_copy)
            assert con.execute("SELECT rewind_count FROM sessions WHERE id = ?",
                               (REW,)).fetchone() == (1,)
            assert con.execute("SELECT COUNT(*) FROM messages WHERE session_id = ? "
                               "AND compacted = 1", (INP,)).fetchone() == (14,)
            con.close()
            assert store.get_session(REW) is not None
        finally:
            stop()
        assert seen == []


@pytest.mark.sqlite_only("read-only open and the write lock of a SQLite file")
def test_c3_read_only_probe_and_locked_alter(tmp_path):
    """C3: a read-only open of a store lacking ``compression_ineffective_count`` raises
    SchemaBehindError naming it, without DDL; a locked ALTER of the revision is retried by
    open patience."""
    path = tmp_path / "state.db"
    SessionStore(path).close()
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("ALTER TABLE sessions DROP COLUMN compression_ineffective_count")
    schema = con.execute("SELECT sql FROM sqlite_master ORDER BY name").fetchall()
    with pytest.raises(SchemaBehindError, match="compression_ineffective_count"):
        SessionStore(path, read_only=True)
    assert con.execute("SELECT sql FROM sqlite_master ORDER BY name").fetchall() == schema
    con.close()
    old = tmp_path / "old.db"
    migrate.upgrade("sessions", old, revision="s03_agent_turn")
    holder = sqlite3.connect(old, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    threading.Timer(0.6, lambda: holder.execute("ROLLBACK")).start()
    t0 = time.monotonic()
    with SessionStore(old, open_patience_s=10):
        assert time.monotonic() - t0 >= 0.5
    holder.close()
    assert "compression_ineffective_count" in _info(old)


def test_session_rows_carry_the_coordination_columns(store):
    """Issue 33: ``get_session`` / ``get_session_rich_row`` / ``list_sessions_rich`` rows carry
    the seven coordination columns (upstream's ``get_session`` is ``SELECT s.*``); a fresh
    session reads the defaults."""
    store.create_session("fresh", "cli")
    store.create_session("busy", "cli")
    store.append_message("busy", "user", "hello")
    store.record_compression_failure_cooldown("busy", 2_000_000_000.0, "summary failed")
    store.set_compression_fallback_streak("busy", 2)
    store.set_compression_ineffective_count("busy", 3)
    store.set_compression_overload_streak("busy", 4)
    store.set_compression_recovery_deadline("busy", 1_900_000_000.0)
    store.append_message("busy", "assistant", "hi")
    target = store.append_message("busy", "user", "again")
    store.rewind_to_message("busy", target)
    want = {"compression_failure_cooldown_until": 2_000_000_000.0,
            "compression_failure_error": "summary failed", "compression_fallback_streak": 2,
            "compression_ineffective_count": 3, "compression_recovery_deadline": 1_900_000_000.0,
            "compression_overload_streak": 4, "rewind_count": 1}
    defaults = {"compression_failure_cooldown_until": None, "compression_failure_error": None,
                "compression_fallback_streak": 0, "compression_ineffective_count": 0,
                "compression_recovery_deadline": None, "compression_overload_streak": 0,
                "rewind_count": 0}
    rich = {r.id: r for r in store.list_sessions_rich(limit=10)}
    for sid, expected in (("busy", want), ("fresh", defaults)):
        for row in (store.get_session(sid), store.get_session_rich_row(sid), rich[sid]):
            assert {k: getattr(row, k) for k in expected} == expected, (sid, type(row))
            assert not set(expected) & set(getattr(row, "extra", {}))
