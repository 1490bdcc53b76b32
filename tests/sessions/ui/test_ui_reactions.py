"""Message reactions (spec sessions-ext-ui.md §4.10; acceptance behaviours 6, 25–27 of §6)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading

import pytest

from hermes_data.sessions.core import encoding
from hermes_data.sessions.store import SessionStore


def _meta(store, row_id: int):
    with store.engine.connect() as conn:
        return conn.exec_driver_sql("SELECT display_metadata FROM messages WHERE id = ?",
                                    (row_id,)).scalar()


def test_ab25_set_message_reaction(store):
    """Behaviour 25."""
    store.create_session("s", "cli")
    store.create_session("t", "cli")
    row = store.append_message("s", "assistant", "hello")
    got = store.set_message_reaction("s", row, "👍")
    assert [(r["emoji"], r["author"]) for r in got] == [("👍", "user")]
    assert store.set_message_reaction("s", row, "👍") == []  # toggled off
    assert _meta(store, row) is None  # nothing else was stored
    store.set_message_reaction("s", row, "👍")
    store.set_message_reaction("s", row, "👍", author="bot")
    got = store.set_message_reaction("s", row, "❤️")
    assert [(r["emoji"], r["author"]) for r in got] == [("👍", "bot"), ("❤️", "user")]
    unseen = store.take_unseen_reactions("s")
    assert [(u.row_id, u.emoji) for u in unseen] == [(row, "❤️")]  # one unseen, the new one
    assert store.set_message_reaction("s", 999, "👍") is None
    assert store.set_message_reaction("t", row, "👍") is None  # another session's row
    assert store.set_message_reaction("", row, "👍") is None
    assert store.set_message_reaction("s", None, "👍") is None
    with pytest.raises(ValueError):
        store.set_message_reaction("s", row, "x" * 65)
    with pytest.raises(ValueError):
        store.set_message_reaction("s", row, "a\x07")
    with pytest.raises(ValueError):
        store.set_message_reaction("s", row, "👍", author="")
    legacy = store.append_message("s", "user", "old")
    with store.engine.begin() as conn:  # double-encoded legacy metadata, string reactions
        conn.exec_driver_sql("UPDATE messages SET display_metadata = ? WHERE id = ?",
                             (json.dumps(json.dumps({"pin": 1, "reactions": "oops"})), legacy))
    assert store.get_message_reactions("s", legacy) == []
    store.set_message_reaction("s", legacy, "🎉")
    stored = json.loads(_meta(store, legacy))
    assert stored["pin"] == 1 and [r["emoji"] for r in stored["reactions"]] == ["🎉"]
    assert store.get_message_reactions("s", 12345) == []


def test_ab25_compression_ended_parent_accepts_reactions(store):
    """Behaviour 25: a compression-ended parent's row accepts reactions."""
    store.create_session("p", "cli")
    row = store.append_message("p", "user", "before compaction")
    store.publish_compression_child("p", "c", "cli", [{"role": "user", "content": "sum"}])
    assert store.get_session("p").end_reason == "compression"
    assert [r["emoji"] for r in store.set_message_reaction("p", row, "👀")] == ["👀"]


def test_ab6_reaction_leaves_identity_order_and_fts_untouched(store):
    """Behaviour 6 (reaction part): D2 — no display or FTS trigger fires."""
    store.create_session("s", "cli")
    row = store.append_message("s", "user", "findable words")
    sqlite = store.engine.dialect.name == "sqlite"
    tables = ["messages_fts_data", "messages_fts_idx", "messages_fts_docsize",
              "messages_fts_trigram_data"] if sqlite else []

    def snap():
        with store.engine.connect() as conn:
            return (conn.exec_driver_sql("SELECT display_identity, display_order FROM messages"
                                         ).fetchall(),
                    [conn.exec_driver_sql(f"SELECT * FROM {t} ORDER BY 1").fetchall()
                     for t in tables])

    before = snap()
    store.set_message_reaction("s", row, "👍")
    store.take_unseen_reactions("s")
    assert snap() == before


def test_ab26_take_unseen_reactions(store, monkeypatch):
    """Behaviour 26: each unseen reaction once with role and text; rewound rows neither
    returned nor marked; unrelated metadata never decoded."""
    store.create_session("s", "cli")
    a = store.append_message("s", "assistant", "answer")
    u = store.append_message("s", "user", [{"type": "text", "text": "parts"}])
    r = store.append_message("s", "assistant", "rewound")
    for row, emoji in ((a, "👍"), (u, "❤️"), (r, "😂")):
        store.set_message_reaction("s", row, emoji)
    store.set_message_reaction("s", a, "🤖", author="bot")
    with store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE messages SET active = 0 WHERE id = ?", (r,))
    store.append_messages_batch("s", [{"role": "user", "content": "x",
                                       "display_metadata": {"note": i}} for i in range(300)])
    calls = []
    real = encoding.decode_display_metadata
    monkeypatch.setattr(encoding, "decode_display_metadata",
                        lambda v: calls.append(v) or real(v))
    got = store.take_unseen_reactions("s")
    assert [(g.row_id, g.role, g.emoji, g.text) for g in got] == [
        (a, "assistant", "👍", "answer"), (u, "user", "❤️", "")]
    assert len(calls) == 2  # only the rows whose metadata mentions reactions
    assert store.take_unseen_reactions("s") == []
    assert store.take_unseen_reactions("s", author="bot")[0].emoji == "🤖"
    assert not any(x.get("seen") for x in store.get_message_reactions("s", r))


def test_ab26_concurrent_callers_split_the_reactions(store):
    """Behaviour 26: two concurrent callers together get each reaction exactly once."""
    store.create_session("s", "cli")
    rows = [store.append_message("s", "assistant", f"m{i}") for i in range(40)]
    for row in rows:
        store.set_message_reaction("s", row, "👍")
    results: list[list] = [[], []]
    barrier = threading.Barrier(2)

    def worker(i: int) -> None:
        barrier.wait(timeout=10)
        for _ in range(3):
            results[i].extend(g.row_id for g in store.take_unseen_reactions("s"))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(results[0] + results[1]) == rows


@pytest.mark.sqlite_only("killing a process inside a SQLite write transaction")
def test_ab26_killed_mid_transaction_leaves_them_unseen(tmp_path):
    """Behaviour 26: a process killed mid-transaction leaves the reactions unseen."""
    path = tmp_path / "state.db"
    with SessionStore(path) as s:
        s.create_session("s", "cli")
        row = s.append_message("s", "assistant", "m")
        s.set_message_reaction("s", row, "👍")
    script = textwrap.dedent(f"""
        import os, signal
        from hermes_data.sessions.store import SessionStore
        s = SessionStore({str(path)!r})
        def die(*a, **k):
            os.kill(os.getpid(), signal.SIGKILL)
        orig = s.backend.write
        def write(fn, **kw):
            def wrapped(conn):
                out = fn(conn)
                die()
                return out
            return orig(wrapped, **kw)
        s.backend.write = write
        s.take_unseen_reactions("s")
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert proc.returncode == -9, proc.stderr.decode()
    with SessionStore(path) as s:
        assert [g.emoji for g in s.take_unseen_reactions("s")] == ["👍"]


def test_ab27_reaction_targets(store):
    """Behaviour 27 (agent §3.6 targets, as reactions use them)."""
    store.create_session("s", "cli")
    first = store.append_message("s", "user", "first")
    store.append_message("s", "assistant", "reply")
    second = store.append_message("s", "user", "second")
    store.append_message("s", "assistant", None, tool_calls=[{"id": "c", "function": {}}])
    assert store.latest_message_row_id("s") == second
    assert store.latest_user_message_row_id("s") == second
    assert store.latest_message_row_id("s", offset=1) == first
    assert store.latest_message_row_id("s", role="tool") is None
    with store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE messages SET active = 0 WHERE id = ?", (second,))
    assert store.get_message_role("s", second) is None
    assert store.get_message_role("s", first) == "user"
