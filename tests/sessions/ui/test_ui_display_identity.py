"""Display identity and ``ensure_display_order`` (spec sessions-ext-ui.md §3.4, §4.14;
acceptance behaviours 7–9 of §6)."""

from __future__ import annotations

import hashlib
import sqlite3

import pytest

from hermes_data.migrate import runner as migrate
from hermes_data.engine import trace_writes
from hermes_data.sessions.agent.projections import ConversationHooks
from hermes_data.sessions.store import SessionStore


def _key_hash(*key) -> bytes:
    """An independent §3.4 computation: sha256 of repr of the stored key."""
    return hashlib.sha256(repr(key).encode("utf-8", "surrogatepass")).digest()


def _display(store, session_id: str) -> list[tuple]:
    with store.engine.connect() as conn:
        rows = conn.exec_driver_sql(
            "SELECT id, display_identity, display_order FROM messages WHERE session_id = ? "
            "ORDER BY id", (session_id,)).fetchall()
    return [(r[0], None if r[1] is None else bytes(r[1]), r[2]) for r in rows]


def test_ab7_equal_messages_get_equal_identities(store):
    """Behaviour 7: two appends of one logical message ⇒ equal 32-byte identities equal to an
    independent computation; ``-0.0``/``0.0`` hash equal; a 31-byte identity ⇒ ValueError."""
    store.create_session("s", "cli")
    a = store.append_message("s", "assistant", "same", timestamp=5.0, tool_calls=None)
    b = store.append_message("s", "assistant", "same", timestamp=5.0)
    c = store.append_message("s", "user", "zero", timestamp=-0.0)
    n = store.append_messages_batch("s", [{"role": "user", "content": "zero", "timestamp": 0.0},
                                          {"role": "tool", "content": "out", "tool_name": "t",
                                           "tool_call_id": "c1", "timestamp": 7}])
    assert n == 2
    rows = _display(store, "s")
    assert rows[0][1] == rows[1][1] == _key_hash("assistant", "same", 5.0, None, None, None)
    assert len(rows[0][1]) == 32
    assert rows[2][1] == rows[3][1] == _key_hash("user", "zero", 0.0, None, None, None)
    assert rows[4][1] == _key_hash("tool", "out", 7.0, "c1", None, "t")
    assert [r[2] for r in rows] == [a, a, c, c, rows[4][0]]  # the insert trigger's D1
    with pytest.raises(ValueError, match="32 bytes"):
        store.append_message("s", "user", "x", display_identity=b"\x00" * 31)
    with pytest.raises(ValueError, match="32 bytes"):
        store.append_messages_batch("s", [{"role": "user", "display_identity": "a" * 32}])
    supplied = b"\x01" * 32
    rid = store.append_message("s", "user", "x", display_identity=supplied)
    assert _display(store, "s")[-1] == (rid, supplied, rid)
    assert len(_display(store, "s")) == 6  # the refused rows wrote nothing


def test_ab7_split_user_turn_keys_carriers_by_their_live_text(tmp_path):
    """§3.4: a user row the hook splits is keyed by its live content (agent §3.5's key)."""
    def split(m):
        text = m.get("content")
        if isinstance(text, str) and text.startswith("HANDOFF|"):
            return {"content": "handoff"}, {"role": "user", "content": text.split("|", 1)[1]}
        return None, m

    with SessionStore(tmp_path / "s.db",
                      conversation_hooks=ConversationHooks(split_user_turn=split)) as s:
        s.create_session("s", "cli")
        s.append_message("s", "user", "HANDOFF|ask", timestamp=1.0)
        s.append_message("s", "user", "HANDOFF|ask", timestamp=1.0)
        rows = _display(s, "s")
    assert rows[0][1] == rows[1][1] == _key_hash("user", '"ask"', 1.0, None, None, None)


@pytest.mark.sqlite_only("adoption of a SQLite file and its read-only handle")
def test_ab8_ensure_display_order_keys_pending_rows_once(tmp_path):
    """Behaviour 8: each row's order := its key's first id, in one transaction; a second call
    writes nothing; a read-only handle returns False without writing."""
    path = tmp_path / "state.db"
    with SessionStore(path) as s:
        s.create_session("s", "cli")
        for text in ("a", "b", "a", "c", "b"):
            s.append_message("s", "user", text, timestamp=1.0)
        s.append_message("s", "user", "hidden", timestamp=1.0)
    con = sqlite3.connect(path)  # make everything pending (an adopted file's state)
    con.execute("UPDATE messages SET display_identity = NULL, display_order = NULL")
    con.execute("UPDATE messages SET active = 0 WHERE content = 'hidden'")
    con.commit()
    con.close()
    with SessionStore(path, read_only=True) as ro:
        assert ro.ensure_display_order("s") is False
    with SessionStore(path) as s:
        seen, stop = trace_writes(s.engine)
        try:
            assert s.ensure_display_order("s") is True
        finally:
            stop()
        assert [w.split()[0].upper() for w in seen] == ["BEGIN", "UPDATE"]
        rows = _display(s, "s")
        assert [r[2] for r in rows[:5]] == [1, 2, 1, 4, 2]
        assert rows[0][1] == rows[2][1] == _key_hash("user", "a", 1.0, None, None, None)
        assert rows[5][1:] == (None, None)  # invisible: not keyed
        seen, stop = trace_writes(s.engine)
        try:
            assert s.ensure_display_order("s") is True
            assert s.backfill_display_order() == 0
        finally:
            stop()
        assert seen == []


def test_ab8_backfill_drains_pending_sessions(store):
    """§4.14: the background drain keys pending sessions, one transaction each."""
    for sid in ("p1", "p2"):
        store.create_session(sid, "cli")
        store.append_message(sid, "user", "same", timestamp=2.0)
        store.append_message(sid, "user", "same", timestamp=2.0)
    with store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE messages SET display_identity = NULL, display_order = NULL")
    assert store.backfill_display_order(max_sessions=5, time_budget_s=5.0) == 2
    for sid in ("p1", "p2"):
        rows = _display(store, sid)
        assert rows[0][2] == rows[1][2] == rows[0][0] and rows[0][1] == rows[1][1]
    assert store.backfill_display_order() == 0


def test_ab9_publish_clone_copies_identity_and_takes_trigger_order(store):
    """Behaviour 9: a row cloned by ``publish_compression_child`` copies the identity and
    gets its order from the insert trigger (never the parent's)."""
    store.create_session("p", "cli")
    first = store.append_message("p", "user", "keep me", timestamp=3.0)
    store.append_message("p", "assistant", "answer", timestamp=4.0)
    res = store.publish_compression_child("p", "c", "cli",
                                          [{"role": "user", "content": "summary"}],
                                          watermark=first - 1)
    assert res.child_session_id == "c"
    parent, child = _display(store, "p"), _display(store, "c")
    cloned = child[1:]
    assert [r[1] for r in cloned] == [r[1] for r in parent]
    assert [r[2] for r in cloned] == [r[0] for r in cloned]  # trigger: own id in the child
