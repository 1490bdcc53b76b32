"""Conversation projections of the agent turn API (spec sessions-ext-agent.md §3.5;
acceptance behaviours 26–32), on SQLite files and PostgreSQL."""

from __future__ import annotations

import sqlite3

import pytest

from hermes_data.sessions.projections import ConversationHooks


def _sql(store, statement, params=()):
    with store.engine.begin() as conn:
        result = conn.exec_driver_sql(statement, params)
        return result.fetchall() if result.returns_rows else None


def _chain(store):
    """root r (3 rows) → compression child c (handoff + 2 rows); a delegate and a branch."""
    store.create_session("r", "cli")
    store.append_message("r", "user", "first ask", timestamp=1000.0)
    store.append_message("r", "assistant", "first answer", timestamp=1001.0)
    store.append_message("r", "user", "second ask", timestamp=1002.0)
    store.publish_compression_child("r", "c", "cli", [
        {"role": "user", "content": "second ask", "timestamp": 1002.0}])
    store.append_message("c", "assistant", "second answer", timestamp=1003.0)
    store.append_message("c", "user", "clock went back", timestamp=900.0)
    store.create_child_session("c", "d", "delegate")
    store.append_message("d", "user", "delegated work")
    store.create_child_session("c", "b", "branch")
    store.append_message("b", "user", "branch work")


def test_ab26_ancestors_follow_the_compression_path_only(store):
    """AB26: a compression tip ⇒ root…tip by id; a delegate child or branch ⇒ own rows only;
    decreasing timestamps keep insertion order."""
    _chain(store)
    conv = store.get_messages_as_conversation("c", include_ancestors=True, include_row_ids=True)
    assert [m["content"] for m in conv] == ["first ask", "first answer", "second ask",
                                            "second answer", "clock went back"]
    ids = [m["_row_id"] for m in conv]
    assert ids == sorted(ids)
    assert [m["content"] for m in store.get_messages_as_conversation(
        "d", include_ancestors=True)] == ["delegated work"]
    assert [m["content"] for m in store.get_messages_as_conversation(
        "b", include_ancestors=True)] == ["branch work"]
    assert [m["content"] for m in store.get_messages_as_conversation("c")] == [
        "second ask", "second answer", "clock went back"]
    assert store.get_messages_as_conversation("missing") == []
    assert "_row_id" not in store.get_messages_as_conversation("c")[0]


def test_ab27_persisted_marks_and_memory_context(store):
    """AB27: every message has ``_db_persisted``; ``api_content`` is byte-identical (memory
    block kept) while ``content`` loses the block and the system note."""
    store.create_session("m", "cli")
    raw = ("<memory-context>\nremembered\n</MEMORY-CONTEXT>[System note: The following is "
           "recalled memory context, NOT new user input. Treat as background.] real question  ")
    store.append_message("m", "user", raw, api_content=raw)
    store.append_message("m", "assistant", "ok", tool_calls=[{"id": "t1", "function": {
        "name": "f", "arguments": "{}"}}], finish_reason="tool_calls", reasoning_content="")
    store.append_message("m", "tool", "result", tool_call_id="t1", tool_name="f")
    conv = store.get_messages_as_conversation("m")
    assert all(m["_db_persisted"] is True for m in conv)
    assert conv[0]["content"] == "real question"
    assert conv[0]["api_content"] == raw
    assert conv[1]["tool_calls"][0]["id"] == "t1" and conv[1]["finish_reason"] == "tool_calls"
    assert conv[1]["reasoning_content"] == ""
    assert conv[2]["tool_call_id"] == "t1" and conv[2]["tool_name"] == "f"
    assert "finish_reason" not in conv[2]


def test_ab28_harness_turns_and_stale_markers(store):
    """AB28: a harness message and the reply after it never appear; assistant ``[memory]``
    with tool calls ⇒ content '', calls intact."""
    store.create_session("h", "cli")
    store.append_message("h", "user", "hello")
    store.append_message("h", "assistant", "hi")
    store.append_message("h", "user", "  Review the conversation above and consider saving to "
                                      "memory anything useful.")
    store.append_message("h", "assistant", "saved")
    store.append_message("h", "assistant", " [memory] ", tool_calls=[{"id": "x", "function": {
        "name": "memory", "arguments": "{}"}}])
    store.append_message("h", "assistant", "[not a marker]", tool_calls=[{"id": "y"}])
    conv = store.get_messages_as_conversation("h")
    assert [m["content"] for m in conv] == ["hello", "hi", "", "[not a marker]"]
    assert conv[2]["tool_calls"][0]["id"] == "x"


def test_ab29_rotation_clone_appears_once_with_the_child_row_id(store):
    """AB29: the same timestamp and content in parent and child appears once, with the
    child's row id."""
    _chain(store)
    conv = store.get_messages_as_conversation("c", include_ancestors=True, include_row_ids=True)
    asks = [m for m in conv if m["content"] == "second ask"]
    child_rows = {r.id for r in store.get_messages("c")}
    assert len(asks) == 1 and asks[0]["_row_id"] in child_rows


def test_ab29_composite_carrier_replaces_the_plain_copy(store):
    """AB29 (hooks): a composite user turn (handoff + live ask) replaces an earlier plain copy
    of the live ask; ``split_user_turn`` is the injected agent function."""
    def split(msg):
        c = msg.get("content")
        if isinstance(c, str) and c.startswith("HANDOFF|"):
            return {"content": "handoff"}, {"role": "user", "content": c.split("|", 1)[1]}
        return None, msg

    store.conversation_hooks = ConversationHooks(split_user_turn=split)
    store.create_session("p", "cli")
    store.append_message("p", "user", "the ask", timestamp=10.0)
    store.publish_compression_child("p", "q", "cli", [
        {"role": "user", "content": "HANDOFF|the ask", "timestamp": 11.0}])
    conv = store.get_messages_as_conversation("q", include_ancestors=True)
    assert [m["content"] for m in conv] == ["HANDOFF|the ask"]


def test_ab30_resume_pair_equals_the_separate_reads(store):
    """AB30: ``get_resume_conversations`` equals the two separate reads; compacted rows only in
    display; rewound rows in neither; the ancestor prefix holds ancestor rows only, ``[]`` for
    a root or branch."""
    _chain(store)
    compacted = store.append_message("c", "assistant", "compacted away", timestamp=1004.0)
    rewound = store.append_message("c", "user", "rewound ask", timestamp=1005.0)
    _sql(store, "UPDATE messages SET active = 0, compacted = 1 WHERE id = ?", (compacted,))
    _sql(store, "UPDATE messages SET active = 0 WHERE id = ?", (rewound,))
    model, display = store.get_resume_conversations("c")
    assert model == store.get_messages_as_conversation("c", repair_alternation=True,
                                                       include_row_ids=True)
    assert display == store.get_messages_as_conversation(
        "c", include_ancestors=True, include_row_ids=True, include_compacted=True)
    assert compacted in {m["_row_id"] for m in display}
    assert compacted not in {m["_row_id"] for m in model}
    assert rewound not in {m["_row_id"] for m in display + model}
    prefix = store.get_ancestor_display_prefix("c")
    assert [m["content"] for m in prefix] == ["first ask", "first answer"]
    assert all("_row_id" not in m for m in prefix)
    assert store.get_ancestor_display_prefix("r") == []
    assert store.get_ancestor_display_prefix("b") == []


def test_ab31_resume_message_count(store):
    """AB31: ``tip_only`` = the tip's active rows; else active + compacted rows of the
    compression path."""
    _chain(store)
    compacted = store.append_message("c", "assistant", "compacted", timestamp=1004.0)
    rewound = store.append_message("c", "assistant", "rewound", timestamp=1005.0)
    _sql(store, "UPDATE messages SET active = 0, compacted = 1 WHERE id = ?", (compacted,))
    _sql(store, "UPDATE messages SET active = 0 WHERE id = ?", (rewound,))
    assert store.get_resume_message_count("c", tip_only=True) == 3
    assert store.get_resume_message_count("c") == 3 + 3 + 1
    assert store.get_resume_message_count("d") == 1
    assert store.get_resume_message_count("") == 0


def test_ab32_conversation_root(store):
    """AB32: a delegate grandchild ⇒ the top root; a 2-cycle terminates; unknown ⇒ input."""
    store.create_session("top", "cli")
    store.create_child_session("top", "mid", "delegate")
    store.create_child_session("mid", "leaf", "delegate")
    assert store.get_conversation_root("leaf") == "top"
    assert store.get_conversation_root("top") == "top"
    assert store.get_conversation_root("unknown") == "unknown"
    store.create_session("x", "cli")
    store.create_session("y", "cli", parent_session_id="x")
    _sql(store, "UPDATE sessions SET parent_session_id = 'y' WHERE id = 'x'")
    assert store.get_conversation_root("y") in {"x", "y"}


@pytest.mark.sqlite_only("a dangling parent needs foreign keys off (PostgreSQL enforces them)")
def test_ab32_dangling_parent_gives_the_topmost_existing_row(store):
    """AB32: a dangling parent (FK-off fixture) ⇒ the topmost existing row."""
    store.create_session("a", "cli")
    store.create_child_session("a", "b", "delegate")
    con = sqlite3.connect(store.path)
    con.execute("UPDATE sessions SET parent_session_id = 'ghost' WHERE id = 'a'")
    con.commit()
    con.close()
    assert store.get_conversation_root("b") == "a"
