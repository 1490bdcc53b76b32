"""Lifecycle statuses as pickers use them (spec sessions-ext-ui.md §4.5 = agent §3.11;
acceptance behaviour 15 of §6). The functions are the agent API's (one copy, ``bulk``)."""

from __future__ import annotations

import sqlite3

import pytest

from hermes_data.sessions.store import SessionStore


def test_ab15_statuses(store):
    """Behaviour 15 (classification part, both backends)."""
    cases = {
        "calls": [("assistant", None, '[{"id": "c"}]', None)],
        "plain": [("assistant", "ok", None, None)],
        "user": [("user", "q", None, None)],
        "tool": [("tool", "out", None, None)],
        "err": [("assistant", "x", None, " Error ")],
        "legacy": [("assistant", "ok", "[]", None)],
        "rewound": [("assistant", "ok", None, None), ("user", "undone", None, None)],
    }
    for sid, rows in cases.items():
        store.create_session(sid, "cli")
        for role, content, calls, reason in rows:
            rid = store.append_message(sid, role, content, finish_reason=reason)
            if calls is not None:
                with store.engine.begin() as conn:
                    conn.exec_driver_sql("UPDATE messages SET tool_calls = ? WHERE id = ?",
                                         (calls, rid))
    store.create_session("none", "cli")
    with store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE messages SET active = 0 WHERE content = 'undone'")
    got = store.session_lifecycle_statuses([*cases, "none", *[f"ghost{i}" for i in range(1500)]])
    assert {k: got[k] for k in (*cases, "none")} == {
        "calls": "interrupted", "plain": "complete", "user": "interrupted",
        "tool": "interrupted", "err": "error", "legacy": "complete", "rewound": "complete",
        "none": "empty"}
    assert got["ghost1499"] == "empty" and store.session_lifecycle_statuses([]) == {}


@pytest.mark.sqlite_only("VM-step counting with a SQLite progress handler")
def test_ab15_cost_is_independent_of_transcript_length(tmp_path):
    """Behaviour 15: one backward seek per session — VM steps equal for 10 and 10,000 rows."""
    path = tmp_path / "s.db"
    with SessionStore(path) as s:
        for sid, n in (("small", 10), ("large", 10_000)):
            s.create_session(sid, "cli")
            s.append_messages_batch(sid, [{"role": "user", "content": "m"}] * n)
    steps = {}
    for sid in ("small", "large"):
        with SessionStore(path) as s:
            raw = s.backend._raw  # the writer's sqlite3 connection (reads share it here)
            assert isinstance(raw, sqlite3.Connection)
            count = [0]

            def tick() -> int:
                count[0] += 1
                return 0

            raw.set_progress_handler(tick, 1)
            try:
                s.backend._reads = None  # no read pool: read on the traced connection
                assert s.session_lifecycle_statuses([sid]) == {sid: "interrupted"}
            finally:
                raw.set_progress_handler(None, 1)
            steps[sid] = count[0]
    assert 0 < steps["small"] == steps["large"], steps
