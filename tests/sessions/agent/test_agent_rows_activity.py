"""Activity, message-row helpers and titles of the agent turn API (spec
sessions-ext-agent.md §3.6, §3.7, §3.10; acceptance behaviours 24, 25, 33–36, 42, 47), on
SQLite files and PostgreSQL."""

from __future__ import annotations

import re
import sqlite3
import time

import pytest

from hermes_data.engine import trace_writes


def _sql(store, statement, params=()):
    with store.engine.begin() as conn:
        result = conn.exec_driver_sql(statement, params)
        return result.fetchall() if result.returns_rows else None


def _activity(store, sid):
    return _sql(store, "SELECT last_activity_at, last_activity_description, "
                       "last_activity_provenance FROM sessions WHERE id = ?", (sid,))[0]


def test_ab24_activity_heartbeat(store):
    """AB24: never backwards; overwrites a stored 5e246; ts=1e12 ⇒ no write; 500 characters ⇒
    120 ending with '…'; unknown provenance ⇒ 'unknown'."""
    store.create_session("a", "cli")
    now = time.time()
    assert store.touch_session_activity("a", now, description="working",
                                        provenance="agent.compression") is True
    assert _activity(store, "a") == (now, "working", "agent.compression")
    assert store.touch_session_activity("a", now - 10, description="older") is False
    assert _activity(store, "a")[1] == "working"
    _sql(store, "UPDATE sessions SET last_activity_at = 5e246 WHERE id = 'a'")
    assert store.touch_session_activity("a", now, description="x" * 500, provenance="bogus")
    at, desc, prov = _activity(store, "a")
    assert at == now and len(desc) == 120 and desc.endswith("…") and prov == "unknown"
    assert store.touch_session_activity("a", 1e12) is False
    assert store.touch_session_activity("a", "soon") is False
    assert store.touch_session_activity("missing") is False
    snap = store.get_session_activity("a")
    assert snap.last_activity_at == now and snap.seconds_since_activity >= 0
    d = snap.as_dict()
    assert d["last_activity_ts"] == now and d["provenance"] == "unknown"
    assert d["description"] == d["last_activity_desc"] == desc
    assert store.get_session_activity("missing") is None


@pytest.mark.sqlite_only("another connection's file write lock")
def test_ab24_activity_gives_up_within_half_a_second_under_a_held_lock(store):
    """AB24: False within ~0.5 s under a held write lock (no raise)."""
    store.create_session("a", "cli")
    holder = sqlite3.connect(store.path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        t0 = time.monotonic()
        assert store.touch_session_activity("a", description="busy") is False
        assert time.monotonic() - t0 < 2.0
    finally:
        holder.execute("COMMIT")
        holder.close()


def test_ab25_clearing_labels(store):
    """AB25: clearing a clear row issues no write (trace); clearing keeps last_activity_at."""
    store.create_session("c", "cli")
    seen, stop = trace_writes(store.engine)
    try:
        assert store.clear_session_activity_labels("c") is False
        assert store.clear_session_activity_labels("missing") is False
    finally:
        stop()
    assert seen == []
    store.touch_session_activity("c", 1_800_000_000.0, description="compressing",
                                 provenance="agent.compression")
    assert store.clear_session_activity_labels("c") is True
    assert _activity(store, "c") == (1_800_000_000.0, "", "unknown")
    seen, stop = trace_writes(store.engine)
    try:
        assert store.clear_session_activity_labels("c") is False
    finally:
        stop()
    assert seen == []


def _fts_pages(store):
    return _sql(store, "SELECT COUNT(*), SUM(length(block)) FROM messages_fts_data")


def test_ab33_latest_user_api_content_needs_a_content_match(store):
    """AB33: writes only on a content match (multimodal too), else 0; no FTS write."""
    store.create_session("u", "cli")
    store.append_message("u", "user", "first")
    store.append_message("u", "assistant", "reply")
    parts = [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "x"}}]
    last = store.append_message("u", "user", parts)
    sqlite = store.engine.dialect.name == "sqlite"
    before = _fts_pages(store) if sqlite else None
    assert store.set_latest_user_api_content("u", "first", "API first") == 0
    assert store.set_latest_user_api_content("u", parts, "API parts") == 1
    assert store.get_messages("u")[-1].api_content == "API parts"
    assert store.get_messages("u")[-1].id == last
    if sqlite:
        assert _fts_pages(store) == before
    store.append_message("u", "user", "plain")
    assert store.set_latest_user_api_content("u", "plain", "P") == 1
    assert store.set_latest_user_api_content("", "plain", "P") == 0


def test_ab34_display_kind_stamping(store):
    """AB34: stamping without metadata keeps stored reactions; kind 'hidden' hides the row
    from search and previews."""
    store.create_session("k", "cli")
    store.append_message("k", "user", "zebracorn question", display_metadata={"reactions": ["+1"]})
    store.append_message("k", "assistant", "answer")
    assert store.set_latest_matching_message_display_kind(
        "k", role="user", content="zebracorn question", display_kind="edited") is True
    row = store.get_messages("k")[0]
    assert row.display_kind == "edited" and row.display_metadata == {"reactions": ["+1"]}
    assert store.search_messages("zebracorn")
    assert store.set_latest_matching_message_display_kind(
        "k", role="user", content="zebracorn question", display_kind="hidden",
        display_metadata={"why": "x"}) is True
    assert store.get_messages("k")[0].display_metadata == {"why": "x"}
    assert store.search_messages("zebracorn") == []
    assert store.list_sessions()[0].preview != "zebracorn question"
    assert store.set_latest_matching_message_display_kind(
        "k", role="user", content="nope", display_kind="hidden") is False
    assert store.set_latest_matching_message_display_kind(
        "k", role="user", content="", display_kind="hidden") is False


def test_ab35_latest_rows_roles_and_watermark(store):
    """AB35: ``latest_message_row_id(role='user', offset=1)`` steps back one turn, skipping
    blank, whitespace-only, hidden and inactive rows; ``role='tool'`` ⇒ None;
    ``get_message_role`` with another session's row ⇒ None; the watermark ignores inactive."""
    store.create_session("l", "cli")
    store.create_session("other", "cli")
    u1 = store.append_message("l", "user", "turn one")
    store.append_message("l", "assistant", "a1")
    u2 = store.append_message("l", "user", "turn two")
    store.append_message("l", "user", "")
    store.append_message("l", "user", "\n\t ")
    store.append_message("l", "user", "hidden one", display_kind="hidden")
    rewound = store.append_message("l", "user", "rewound")
    _sql(store, "UPDATE messages SET active = 0 WHERE id = ?", (rewound,))
    foreign = store.append_message("other", "assistant", "x")
    assert store.latest_message_row_id("l") == u2 == store.latest_user_message_row_id("l")
    assert store.latest_message_row_id("l", role="user", offset=1) == u1
    assert store.latest_message_row_id("l", role="user", offset=2) is None
    assert store.latest_message_row_id("l", role="user", require_text=False) == rewound - 1
    assert store.latest_message_row_id("l", role="tool") is None
    assert store.latest_message_row_id("l", offset=-1) is None
    assert store.get_message_role("l", u2) == "user"
    assert store.get_message_role("l", foreign) is None
    assert store.get_message_role("l", rewound) is None
    assert store.get_message_role("l", "7") is None
    assert store.get_active_message_watermark("l") == rewound - 1
    assert store.get_active_message_watermark("missing") == 0
    ids = store.get_active_message_ids("l")
    assert ids == sorted(ids) and rewound not in ids and len(ids) == 6
    assert store.has_archived_messages("l") is True
    assert store.has_archived_messages("other") is False


def test_ab36_platform_message_id_probe(store):
    """AB36: True for a rewound row with the id, False for ''; the plan uses its index."""
    store.create_session("p", "cli")
    mid = store.append_message("p", "user", "hi", platform_message_id="tg-42")
    _sql(store, "UPDATE messages SET active = 0 WHERE id = ?", (mid,))
    assert store.has_platform_message_id("p", "tg-42") is True
    assert store.has_platform_message_id("p", "tg-43") is False
    assert store.has_platform_message_id("p", "") is False
    assert store.has_platform_message_id("", "tg-42") is False
    if store.engine.dialect.name == "sqlite":
        from hermes_data.sessions.agent.message_rows_sql import for_dialect

        plan = " ".join(str(r[-1]) for r in _sql(
            store, "EXPLAIN QUERY PLAN " + for_dialect("sqlite").HAS_PLATFORM_ID, ("p", "tg-42")))
        assert "idx_messages_platform_msg_id" in plan, plan


def test_ab42_title_source(store):
    """AB42 (titles): bad source ⇒ ValueError, untitled ⇒ False; the source reads None when
    untitled; ``set_auto_title_if_empty`` is the llm automatic title."""
    store.create_session("t", "cli")
    with pytest.raises(ValueError):
        store.set_session_title_source("t", "robot")
    assert store.set_session_title_source("t", "user") is False
    _sql(store, "UPDATE sessions SET title_source = 'llm' WHERE id = 't'")
    assert store.get_session_title_source("t") is None
    assert store.set_auto_title_if_empty("t", "Auto") is True
    assert store.get_session_title("t") == "Auto" and store.get_session_title_source("t") == "llm"
    assert store.set_session_title_source("t", "derived") is True
    assert store.get_session_title_source("t") == "derived"
    assert store.get_session_title("missing") is None


def test_ab47_store_wide_message_count(store):
    """AB47: ``message_count()`` counts active rows store-wide; ``include_inactive=True``
    every row."""
    for sid in ("a", "b"):
        store.create_session(sid, "cli")
        for i in range(3):
            store.append_message(sid, "user", f"m{i}")
    _sql(store, "UPDATE messages SET active = 0 WHERE session_id = 'a' AND content = 'm0'")
    assert store.message_count() == 5
    assert store.message_count(include_inactive=True) == 6
    assert store.message_count("a") == 2


def test_ab37_stale_marker_purge(store, tmp_path):
    """AB37: a dry run writes nothing; the run writes a 0600 backup and clears exactly the
    marker rows, never selecting content over 256 characters; a rerun reports 0 and takes no
    backup; PostgreSQL without ``backup_dir`` ⇒ ValueError."""
    import os
    import stat

    from hermes_data.sessions.core.maintenance import purge_stale_tool_call_markers

    calls = [{"id": "c", "function": {"name": "memory", "arguments": "{}"}}]
    store.create_session("pm", "cli")
    marker = store.append_message("pm", "assistant", " [memory] ", tool_calls=calls)
    store.append_message("pm", "assistant", "[memory]")  # no tool calls: kept
    store.append_message("pm", "assistant", "[not a marker]", tool_calls=calls)
    store.append_message("pm", "assistant", "[" + "x" * 300 + "]", tool_calls=calls)
    pg = store.engine.dialect.name == "postgresql"
    if pg:
        with pytest.raises(ValueError):
            purge_stale_tool_call_markers(store)
    seen, stop = trace_writes(store.engine)
    try:
        report = purge_stale_tool_call_markers(store, dry_run=True)
    finally:
        stop()
    assert seen == [] and report.dry_run and report.row_ids == (marker,)
    selected: list[str] = []

    def watch(conn, cursor, statement, parameters, context, executemany):
        if "FROM messages" in statement and "content" in statement.split("FROM")[0]:
            selected.append(statement)

    from sqlalchemy import event

    event.listen(store.engine, "before_cursor_execute", watch)
    try:
        report = purge_stale_tool_call_markers(store, backup_dir=tmp_path if pg else None)
    finally:
        event.remove(store.engine, "before_cursor_execute", watch)
    assert report.row_ids == (marker,) and report.rows_affected == 1
    # The bound on the scanned content, whether the column is qualified or not (issue 32: the
    # statement is a Core construct, which qualifies it).
    assert selected and all(re.search(r"length\((messages\.)?content\) <= 256", s)
                            for s in selected)
    backup = report.backup_path
    assert backup is not None and stat.S_IMODE(os.stat(backup).st_mode) == 0o600
    contents = [m.content for m in store.get_messages("pm")]
    assert contents == ["", "[memory]", "[not a marker]", "[" + "x" * 300 + "]"]
    again = purge_stale_tool_call_markers(store, backup_dir=tmp_path if pg else None)
    assert again.rows_affected == 0 and again.backup_path is None
