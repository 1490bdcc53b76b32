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


_FULL_ORDER = ["role", "content", "_db_persisted", "_row_id", "api_content", "display_kind",
               "display_metadata", "timestamp", "tool_call_id", "tool_name", "effect_disposition",
               "tool_calls", "message_id", "observed", "finish_reason", "reasoning",
               "reasoning_content", "reasoning_details", "codex_reasoning_items",
               "codex_message_items"]


def test_plain_and_full_rows_keep_one_key_order(store):
    """§3.5 message shape: a plain turn and a turn with every optional column give their keys
    in the same relative order (with and without row ids); assistant-only columns on a user
    row add nothing; an empty-but-present ``reasoning_content`` is kept."""
    store.create_session("k", "cli")
    plain_user = store.append_message("k", "user", "  plain ask  ", timestamp=1.0)
    store.append_message("k", "assistant", "plain answer", timestamp=2.0)
    full = store.append_message(
        "k", "assistant", " calling ", timestamp=3.0, api_content="raw", display_kind="note",
        display_metadata={"a": 1}, tool_call_id="c0", tool_name="t", effect_disposition="applied",
        tool_calls=[{"id": "c1"}], platform_message_id="pm", observed=True,
        finish_reason="tool_calls", reasoning="why", reasoning_content="",
        reasoning_details=[{"d": 1}], codex_reasoning_items=[{"r": 1}],
        codex_message_items=[{"m": 1}])
    odd_user = store.append_message("k", "user", "user with stray columns", timestamp=4.0)
    _sql(store, "UPDATE messages SET finish_reason = 'stop', reasoning = 'r', "
                "reasoning_content = '' WHERE id = ?", (odd_user,))
    store.append_message("k", "assistant", "empty reasoning", timestamp=5.0,
                         reasoning_content="")

    with_ids = store.get_messages_as_conversation("k", include_row_ids=True)
    assert with_ids[0] == {"role": "user", "content": "plain ask", "_db_persisted": True,
                           "_row_id": plain_user, "timestamp": 1.0}
    assert list(with_ids[0]) == ["role", "content", "_db_persisted", "_row_id", "timestamp"]
    assert list(with_ids[1]) == ["role", "content", "_db_persisted", "_row_id", "timestamp"]
    assert list(with_ids[2]) == _FULL_ORDER
    assert with_ids[2]["_row_id"] == full and with_ids[2]["content"] == "calling"
    assert with_ids[2]["display_metadata"] == {"a": 1}
    assert with_ids[2]["codex_message_items"] == [{"m": 1}]
    assert with_ids[2]["observed"] is True and with_ids[2]["reasoning_content"] == ""
    assert list(with_ids[3]) == ["role", "content", "_db_persisted", "_row_id", "timestamp"]
    assert with_ids[4]["reasoning_content"] == ""

    plain = store.get_messages_as_conversation("k")
    assert list(plain[0]) == ["role", "content", "_db_persisted", "timestamp"]
    assert list(plain[2]) == [k for k in _FULL_ORDER if k != "_row_id"]
    assert [{k: v for k, v in m.items() if k != "_row_id"} for m in with_ids] == plain


def test_custom_sanitizer_applies_to_every_text_turn(store):
    """§3.5 hooks: an injected ``sanitize_text`` runs on plain user and assistant text (not only
    text the default sanitizer would touch); tool and system text is never sanitized."""
    store.conversation_hooks = ConversationHooks(
        sanitize_text=lambda text: text.replace("secret", "******"))
    store.create_session("s", "cli")
    store.append_message("s", "user", "my secret ask ")
    store.append_message("s", "assistant", "the secret answer")
    store.append_message("s", "assistant", "secret call", tool_calls=[{"id": "z"}])
    store.append_message("s", "tool", " secret result ", tool_call_id="z")
    store.append_message("s", "system", "secret system")
    assert [m["content"] for m in store.get_messages_as_conversation("s")] == [
        "my ****** ask", "the ****** answer", "****** call", " secret result ", "secret system"]


def test_harness_flag_survives_many_plain_rows(store):
    """§3.5 post passes on a long transcript: a harness turn deep in many plain rows is still
    dropped with its reply, and a stale marker after it is still blanked."""
    store.create_session("long", "cli")
    rows = [{"role": "assistant" if i % 2 else "user", "content": f"turn {i}", "timestamp": i}
            for i in range(1, 401)]
    rows[299] = {"role": "user", "content": "Review the conversation above and update the "
                 "skill library", "timestamp": 300}
    rows.append({"role": "assistant", "content": "[skill]", "tool_calls": [{"id": "k"}],
                 "timestamp": 401})
    store.append_messages_batch("long", rows)
    conv = store.get_messages_as_conversation("long")
    assert len(conv) == 399
    contents = [m["content"] for m in conv]
    assert "turn 299" in contents and "turn 302" in contents
    assert "turn 301" not in contents and not any(c.startswith("Review") for c in contents)
    assert contents[-1] == "" and conv[-1]["tool_calls"] == [{"id": "k"}]
    assert [m["timestamp"] for m in conv[:3]] == [1, 2, 3]


def test_projection_columns_cover_every_replayed_column():
    """The projection statement reads every message column but ``token_count`` and
    ``compacted``, the optional tail is as long as its empty pattern, and the assistant-only
    tail is the columns only an assistant message carries."""
    from hermes_data.sessions.sql import core
    from hermes_data.sessions.sql import projections as p

    assert set(p.PROJECTION_COLS) == set(core.MESSAGE_COLS) - {"token_count", "compacted"}
    assert len(p.PROJECTION_COLS) == len(set(p.PROJECTION_COLS))
    assert p.PROJECTION_COLS[:p.OPTIONAL_FROM] == ("id", "session_id", "role", "content",
                                                   "timestamp", "active")
    assert len(p.PROJECTION_COLS) - p.OPTIONAL_FROM == len(p.OPTIONAL_EMPTY)
    assert p.ASSISTANT_ONLY_FROM - p.OPTIONAL_FROM == len(p.SHARED_EMPTY)
    assert set(p.PROJECTION_COLS[p.ASSISTANT_ONLY_FROM:]) == {
        "reasoning_content", "reasoning_details", "codex_reasoning_items",
        "codex_message_items", "finish_reason", "reasoning"}
    for d in ("sqlite", "postgresql"):
        stmt = p.for_dialect(d).rows(2, "active")
        assert stmt.startswith(f"SELECT {', '.join(p.PROJECTION_COLS)} FROM messages ")


def test_a_raising_hook_leaves_the_store_usable(store):
    """§3.5 hooks: an exception from an injected transform reaches the caller, and the next
    reads and writes on the same store work (no statement left pending)."""
    def boom(text):
        raise RuntimeError(f"sanitizer refused {text!r}")

    store.create_session("x", "cli")
    for i in range(5):
        store.append_message("x", "user", f"ask {i}")
    store.conversation_hooks = ConversationHooks(sanitize_text=boom)
    with pytest.raises(RuntimeError, match="ask 0"):
        store.get_messages_as_conversation("x")
    store.conversation_hooks = ConversationHooks()
    store.append_message("x", "assistant", "answer")
    assert [m["content"] for m in store.get_messages_as_conversation("x")][-2:] == [
        "ask 4", "answer"]
