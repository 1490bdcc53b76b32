"""Conversation projections of the agent turn API (spec sessions-ext-agent.md §3.5;
acceptance behaviours 26–32), on SQLite files and PostgreSQL."""

from __future__ import annotations

import sqlite3

import pytest

from hermes_data.sessions.agent.projections import ConversationHooks


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
    ``compacted``; the six columns every row uses come first, in the order the hot path
    indexes them; the ``None``-tested columns are optional ones."""
    from hermes_data.sessions.sql import core as core
    from hermes_data.sessions.agent import projections_sql as p

    assert set(p.PROJECTION_COLS) == set(core.MESSAGE_COLS) - {"token_count", "compacted"}
    assert len(p.PROJECTION_COLS) == len(set(p.PROJECTION_COLS)) == 22
    assert p.PROJECTION_COLS[:p.OPTIONAL_FROM] == ("id", "session_id", "role", "content",
                                                   "timestamp", "active")
    assert p.NONE_TESTED <= set(p.PROJECTION_COLS[p.OPTIONAL_FROM:])
    for d in ("sqlite", "postgresql"):
        stmt = " ".join(p.for_dialect(d).rows(2, "active").split())  # Core: one line per clause
        cols = ", ".join(f"messages.{c}" for c in p.PROJECTION_COLS)
        assert stmt.startswith(f"SELECT {cols} FROM messages ")


# -- the hot path against the general path (no database: rows as the driver returns them) --

_OPTIONAL_VALUES = {  # per optional column: NULL, empty, falsy and truthy stored values
    "tool_calls": [None, "", "  ", "[]", '[{"id": "c"}]', ' [{"id": "w"}]\n', "[1] [2]", "[1",
                   '{"id": "o"}', "NaN", '"text"', "not json"],
    "display_metadata": [None, "", '{"a": 1}', '"{\\"b\\": 2}"', "[1]"],
    "observed": [None, 0, 1], "_compressed_summary": [None, 0, 1],
    "reasoning_details": [None, "", "[]", '[{"d": 1}]', " [2] ", "[1] x", "not json"],
    "codex_reasoning_items": [None, "", '[{"r": 1}]'],
    "codex_message_items": [None, "", '[{"m": 1}]'],
}
_TEXT_VALUES = [None, "", "x", "  padded  ", "[memory]"]
_CONTENTS = ["plain text", "  padded text \n", "", "   ", "a < b", "see [1]", "nul\x00inside",
             "<memory-context>recalled</memory-context> the ask ",
             "[System note: The following is recalled memory context, NOT new user input. "
             "Treat as background.] ask", " [memory] ", "[skill]",
             "Review the conversation above and update the skill library",
             "  Review the conversation above and consider saving to memory",
             "Review the conversation abovf", "Review the conversation abov",
             "so: Review the conversation above and update the skill library",
             "\x00json:[{\"type\": \"text\", \"text\": \" parts \"}]", "\x00json:{bad",
             "\ufdd0json:[{\"type\": \"text\", \"text\": \"pg\"}]", "\ufdd0json:\"pg text \"",
             None, 7]


def _row(rid, role, content, ts, **optional):
    from hermes_data.sessions.agent.projections_sql import OPTIONAL_FROM, PROJECTION_COLS

    row = [rid, "s", role, content, ts, 1] + [None] * (len(PROJECTION_COLS) - OPTIONAL_FROM)
    for name, value in optional.items():
        row[PROJECTION_COLS.index(name)] = value
    for flag in ("observed", "_compressed_summary"):
        if flag not in optional:
            row[PROJECTION_COLS.index(flag)] = 0
    return tuple(row)


def _reference(rows, d, hooks, *, summary, row_ids):
    """The replayed messages spelled out plainly, one row at a time (the behaviour the
    projection had before its hot path was tuned; §3.5): content decoded, user and
    assistant text sanitized and stripped, then each optional key in one fixed order."""
    import json

    from hermes_data.sessions.core import encoding
    from hermes_data.sessions.agent.projections import sanitize_memory_context

    def parse(raw, fallback):
        try:
            return json.loads(raw)
        except (TypeError, ValueError):
            return fallback

    out = []
    for r in rows:
        (rid, _sid, role, content, ts, _active, tool_calls, meta, api_content, kind,
         tool_call_id, tool_name, effect, pmid, observed, compressed, reasoning_content,
         details, codex_items, codex_msgs, finish, reasoning) = r
        if isinstance(content, str):
            if content.startswith(encoding.content_prefix(d)):
                content = encoding.decode_content(content, d)
            if role in ("user", "assistant") and isinstance(content, str):
                if hooks.sanitize_text is not sanitize_memory_context or "<" in content \
                        or "[" in content:
                    content = hooks.sanitize_text(content)
                content = content.strip()
        m = {"role": role, "content": content, "_db_persisted": True}
        if row_ids:
            m["_row_id"] = rid
        if api_content:
            m["api_content"] = api_content
        if kind:
            m["display_kind"] = kind
        decoded_meta = encoding.decode_display_metadata(meta) if meta else None
        if isinstance(decoded_meta, dict):
            m["display_metadata"] = decoded_meta
        if summary and compressed:
            m["_compressed_summary"] = True
        for k, v in (("timestamp", ts), ("tool_call_id", tool_call_id), ("tool_name", tool_name),
                     ("effect_disposition", effect)):
            if v:
                m[k] = v
        if tool_calls is not None:
            m["tool_calls"] = parse(tool_calls, [])
        if pmid:
            m["message_id"] = pmid
        if observed:
            m["observed"] = True
        if role == "assistant":
            if finish:
                m["finish_reason"] = finish
            if reasoning:
                m["reasoning"] = reasoning
            if reasoning_content is not None:
                m["reasoning_content"] = reasoning_content
            for name, raw in (("reasoning_details", details),
                              ("codex_reasoning_items", codex_items),
                              ("codex_message_items", codex_msgs)):
                if raw is not None:
                    m[name] = parse(raw, None)
        out.append(m)
    return out


def _assert_hot_path_matches(rows, hooks):
    import copy

    from hermes_data.sessions.agent import projections as pr

    for d in ("sqlite", "postgresql"):
        for summary in (False, True):
            for row_ids in (False, True):
                # Streamed in batches of 3 rows: the flag carries across batches.
                batches = [rows[i:i + 3] for i in range(0, len(rows), 3)]
                got, needed = pr._messages(batches, d, hooks, summary=summary, row_ids=row_ids)
                want = _reference(rows, d, hooks, summary=summary, row_ids=row_ids)
                assert [list(m.items()) for m in got] == [list(m.items()) for m in want], rows
                # The hot path's "post passes needed" flag never skips a pass that would
                # change the result.
                assert pr._post_passes(copy.deepcopy(got), needed) \
                    == pr._post_passes(copy.deepcopy(want)), rows


def test_hot_path_equals_the_general_path_column_by_column():
    """Every optional column, alone or beside a role's common shape, with each kind of stored
    value (NULL, empty, falsy, truthy, unparsable), on user / assistant / tool / system rows:
    the hot path gives the same messages, keys in the same order, as the reference."""
    from hermes_data.sessions.agent.projections_sql import OPTIONAL_FROM, PROJECTION_COLS

    rows = []
    # Each role alone, and with what its common shape carries (an answer's finish reason,
    # a tool result's call id and tool name), then one more optional column set.
    for role, shape in (("user", {}), ("assistant", {}), ("assistant", {"finish_reason": "stop"}),
                        ("tool", {}), ("tool", {"tool_call_id": "c", "tool_name": "t"}),
                        ("system", {})):
        for ts in (1.5, 0.0):
            rows.append(_row(len(rows) + 1, role, " text ", ts, **shape))
            for name in PROJECTION_COLS[OPTIONAL_FROM:]:
                for value in _OPTIONAL_VALUES.get(name, _TEXT_VALUES):
                    rows.append(_row(len(rows) + 1, role, " text ", ts, **{**shape, name: value}))
    _assert_hot_path_matches(rows, ConversationHooks())
    _assert_hot_path_matches(rows, ConversationHooks(sanitize_text=lambda t: t.replace("e", "E")))


def test_hot_path_equals_the_general_path_for_any_content():
    """Contents the hot path treats specially (markers of both dialects, NUL, '<' and '[',
    harness text and near misses, padding, non-text) on every role: the same messages as
    the general path, and the post passes give the same result."""
    rows = [_row(i + 1, role, content, 2.0, **extra)
            for i, (role, content, extra) in enumerate(
                (role, content, extra)
                for role in ("user", "assistant", "tool", "system", "other")
                for content in _CONTENTS
                for extra in ({}, {"tool_calls": '[{"id": "k"}]'}, {"finish_reason": "stop"},
                              {"tool_call_id": "k", "tool_name": "t"}))]
    _assert_hot_path_matches(rows, ConversationHooks())
    _assert_hot_path_matches(rows, ConversationHooks(sanitize_text=str.upper))
    # Each row alone too: the post-pass flag must hold for a harness turn anywhere.
    for r in rows:
        _assert_hot_path_matches([r, _row(999, "assistant", "reply", 3.0)], ConversationHooks())


def test_hot_path_equals_the_general_path_on_random_transcripts():
    """Property (hypothesis): random transcripts mixing the values above give the same
    messages and post-pass result on the hot path as on the general path."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from hermes_data.sessions.agent.projections_sql import OPTIONAL_FROM, PROJECTION_COLS

    optional = st.fixed_dictionaries({}, optional={
        name: st.sampled_from(_OPTIONAL_VALUES.get(name, _TEXT_VALUES))
        for name in PROJECTION_COLS[OPTIONAL_FROM:]})
    row = st.tuples(st.sampled_from(["user", "assistant", "tool", "system"]),
                    st.sampled_from(_CONTENTS) | st.text(alphabet=" <[]\x00Rx", max_size=8),
                    st.sampled_from([1.0, 0.0, None]), optional)

    @settings(max_examples=20, deadline=None, derandomize=True, database=None)
    @given(st.lists(row, max_size=12))
    def check(spec):
        rows = [_row(i + 1, role, content, ts, **opt)
                for i, (role, content, ts, opt) in enumerate(spec)]
        _assert_hot_path_matches(rows, ConversationHooks())

    check()


def test_harness_range_is_startswith():
    """``_HARNESS_TEXT <= s < _HARNESS_TEXT_END`` exactly when ``s`` starts with the
    harness text (the hot path's test)."""
    from hermes_data.sessions.agent import projections as pr

    h = pr._HARNESS_TEXT
    for s in ("", h, h + " and more", h[:-1], h[:-1] + chr(ord(h[-1]) + 1), h[:-1] + "\uffff",
              " " + h, h.lower(), h.upper(), "S", "R", h + "\x00", h[:-1] + chr(ord(h[-1]) - 1)
              + "zzz", "\U0001f600" + h):
        assert (h <= s < pr._HARNESS_TEXT_END) == s.startswith(h), s


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
