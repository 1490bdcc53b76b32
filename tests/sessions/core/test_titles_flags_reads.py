"""Titles (§4.5), flags (§4.6) and reads (§5) against real files (§10 #24–#34, #59)."""

from __future__ import annotations

import json
import time

import pytest

from hermes_data.sessions.core.encoding import sanitize_title

from tests.sessions.conftest import make_chain


def _compressed(store, root, tip, title=None):
    store.create_session(root, "cli")
    store.append_message(root, "user", "first question")
    if title:
        store.set_session_title(root, title)
    store.publish_compression_child(root, tip, "cli", [{"role": "user", "content": "handoff"}],
                                    carry_title=False)


def test_list_projects_tips_with_root_title_fallback(store):
    _compressed(store, "r", "t", title="Bot Chat")
    rows = store.list_sessions()
    assert len(rows) == 1
    row = rows[0]
    assert (row.id, row.title, row.lineage_root_id, row.lineage_ids) == ("t", "Bot Chat", "r", ("r", "t"))
    assert row.started_at == store.get_session("r").started_at
    assert row.message_count == 1
    recent = store.list_recent_sessions_bounded()
    assert [(x.id, x.title, x.lineage_root_id) for x in recent] == [("t", "Bot Chat", "r")]
    store.set_session_title("t", "Tip title")
    assert store.list_sessions()[0].title == "Tip title"
    assert store.list_recent_sessions_bounded()[0].title == "Tip title"


def test_listability_of_children(store):
    store.create_session("root", "cli")
    store.create_child_session("root", "branch", "branch")
    store.create_child_session("root", "reset", "reset")
    store.create_child_session("root", "deleg", "delegate", source="subagent")
    store.append_message("branch", "user", "q")
    store.publish_compression_child("branch", "branch2", "cli", [{"role": "user", "content": "h"}])
    ids = {r.id for r in store.list_sessions(limit=50)}
    assert ids == {"root", "branch2", "reset"}  # branch projected onto its continuation
    assert store.session_count() == 3
    # without the child exclusion every row counts, the delegate run too (as upstream)
    assert store.session_count(exclude_children=False) == 5
    assert store.session_count(exclude_children=False, source="subagent") == 1
    assert len(store.list_sessions(include_children=True, limit=50)) == 5
    assert store.session_count_ge(3) and not store.session_count_ge(10)


def test_title_uniqueness_and_ancestor_transfer(store):
    store.create_session("a", "cli")
    store.create_session("b", "cli")
    store.set_session_title("a", "Same")
    with pytest.raises(ValueError, match="'a'"):
        store.set_session_title("b", "Same")
    _compressed(store, "r", "t", title="Moved")
    assert store.get_session("r").title == "Moved"
    assert store.set_session_title("t", "Moved")
    assert store.get_session("r").title is None and store.get_session("t").title == "Moved"


def test_sanitize_title():
    assert sanitize_title("  a\x00b\u200b\u202ec\t\n d  ") == "abc d"
    assert sanitize_title(" \u200b ") is None
    with pytest.raises(ValueError, match="101"):
        sanitize_title("x" * 101)
    assert sanitize_title("x" * 100) == "x" * 100


def test_title_provenance_ranks(store):
    store.create_session("s", "cli")
    assert store.set_auto_title("s", "derived one", "derived")
    assert store.set_auto_title("s", "llm one", "llm")
    assert not store.set_auto_title("s", "llm two", "llm")
    assert store.set_session_title("s", "user one")
    assert not store.set_auto_title("s", "llm three", "llm")
    with pytest.raises(ValueError):
        store.set_auto_title("s", "x", "user")
    with store.engine.begin() as conn:  # legacy titled row without provenance ranks as user
        conn.exec_driver_sql("UPDATE sessions SET title_source = NULL WHERE id = 's'")
    assert not store.set_auto_title("s", "derived again", "derived")


def test_bot_chat_rename_guard(store):
    store.create_session("bot", "telegram", hidden=True)
    store.set_session_title("bot", "Bot Chat")
    with pytest.raises(ValueError, match="Bot Chat"):
        store.set_session_title("bot", "Other")
    assert not store.set_auto_title("bot", "Other", "llm")
    assert store.get_session("bot").title == "Bot Chat"


def test_next_title_in_lineage(store):
    for sid, title in (("a", "my_proj"), ("b", "my_proj #3"), ("c", "myXproj #9")):
        store.create_session(sid, "cli")
        store.set_session_title(sid, title)
    assert store.get_next_title_in_lineage("my_proj") == "my_proj #4"
    assert store.get_next_title_in_lineage("my_proj #3") == "my_proj #4"
    assert store.get_next_title_in_lineage("fresh") == "fresh"
    assert store.resolve_session_by_title("my_proj") == "b"
    assert store.get_session_by_title("myXproj #9").id == "c"
    # upstream's keyword spelling (issue 33); both spellings ⇒ TypeError naming both
    assert store.get_next_title_in_lineage(base_title="my_proj") == "my_proj #4"
    with pytest.raises(TypeError, match="base= or base_title="):
        store.get_next_title_in_lineage("my_proj", base_title="my_proj")


def test_set_session_title_on_a_missing_session_is_false(store):
    """Issue 33: a user title on an unknown session answers False, as upstream (it raised
    ``SessionNotFoundError`` here); nothing is written."""
    assert store.set_session_title("nope", "Anything") is False
    assert store.set_session_title("nope", None) is False
    assert store.get_session_by_title("Anything") is None


def test_a_superscript_suffix_is_not_a_number(store):
    """'²'.isdigit() is True but int('²') raises: such a title is a title, not variant 2."""
    store.create_session("a", "cli")
    store.set_session_title("a", "notes")
    store.create_session("b", "cli")
    store.set_session_title("b", "notes #²")
    assert store.get_next_title_in_lineage("notes") == "notes #2"
    assert store.resolve_session_by_title("notes") == "a"


def test_archive_is_lineage_wide_but_not_branches(store):
    _compressed(store, "r", "t")
    store.create_child_session("r", "br", "branch")
    assert store.set_session_archived("t")
    assert store.get_session("r").archived and store.get_session("t").archived
    assert not store.get_session("br").archived
    assert store.list_sessions() and {x.id for x in store.list_sessions()} == {"br"}
    assert {x.id for x in store.list_sessions(archived_only=True)} == {"t"}


def test_flags_answer_true_for_an_existing_session_even_when_unchanged(store):
    """Issue 33: the lineage flag setters return True while the session exists — a repeated
    call too, as upstream's (its UPDATE counted the rows it matched) — and False for an
    unknown id."""
    _compressed(store, "r", "t")
    for setter, on in ((store.set_session_hidden, "hidden"),
                       (store.set_session_archived, "archived"),
                       (store.set_session_pinned, "pinned")):
        assert setter("t") is True and setter("t") is True
        assert getattr(store.get_session("r"), on)
        assert setter("r", False) is True and setter("r", False) is True
        assert not getattr(store.get_session("t"), on)
        assert setter("missing") is False
    assert store.set_session_read("t") is True and store.set_session_read("t") is True
    assert store.set_session_read("missing", False) is False


def test_include_forked_children_flags_upstreams_wider_lineage(store):
    """Issue 33: by default a flag covers the compression lineage over ``EDGE`` (a branch
    is a conversation of its own); ``include_forked_children=True`` is upstream's set: the
    id, its ancestors through compression-ended parents, and its descendants through every
    child of a compression-ended parent — forks included."""
    store.create_session("r", "cli")
    store.create_child_session("r", "br", "branch")
    store.create_session("tool", "tool", parent_session_id="r")
    store.append_message("r", "user", "q")
    store.publish_compression_child("r", "t", "cli", [{"role": "user", "content": "h"}])
    everyone = ("r", "t", "br", "tool")

    def flagged(column):
        return {sid for sid in everyone if getattr(store.get_session(sid), column)}

    assert store.set_session_hidden("r")
    assert flagged("hidden") == {"r", "t"}
    assert store.set_session_hidden("r", False)
    assert store.set_session_hidden("r", include_forked_children=True)
    assert flagged("hidden") == set(everyone)
    assert store.set_session_archived("br")  # the default: the branch alone
    assert flagged("archived") == {"br"}
    assert store.set_session_archived("br", include_forked_children=True)
    assert flagged("archived") == {"br", "r"}  # up to the compression-ended parent only
    assert store.set_session_pinned("r", include_forked_children=True)
    assert flagged("pinned") == set(everyone) and not flagged("hidden")
    assert store.set_session_read("r", False, include_forked_children=True)
    assert {store.get_session(sid).last_read_at for sid in everyone} == {0}


def test_pin_unhides_lineage_except_bot_chat(store):
    for i in range(5):
        store.create_session(f"n{i}", "cli")
    store.create_session("h", "cli", hidden=True)
    with store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE sessions SET started_at = 1000000000 WHERE id = 'h'")
    assert store.set_session_pinned("h")
    assert not store.get_session("h").hidden
    page = store.list_sessions(limit=2, include_pinned=True)
    assert "h" in [r.id for r in page] and len(page) == 3
    _compressed(store, "bot", "bottip", title="Bot Chat")
    store.set_session_hidden("bot")
    store.set_session_pinned("bottip")
    assert store.get_session("bot").hidden and store.get_session("bottip").hidden
    assert store.get_session("bottip").pinned


def test_read_state(store):
    store.create_session("s", "cli")
    store.append_message("s", "user", "x")
    assert not store.list_sessions()[0].unread
    store.set_session_read("s", False)
    assert store.list_sessions()[0].unread
    store.set_session_read("s", True)
    assert not store.list_sessions()[0].unread
    time.sleep(0.01)
    store.append_message("s", "user", "y")
    assert store.list_sessions()[0].unread


def test_order_by_last_active_and_search(store):
    store.create_session("old", "cli")
    store.set_session_title("old", "AN-94 rifle notes")
    store.create_session("new", "cli")
    store.append_message("old", "user", "recent activity")
    rows = store.list_sessions(order_by_last_active=True)
    assert [r.id for r in rows][0] == "old"
    assert [r.id for r in store.list_sessions(order_by_last_active=True, search_query="an94")] == ["old"]
    assert [r.id for r in store.list_sessions(order_by_last_active=True, search_query="100%")] == []
    assert [r.id for r in store.list_sessions(order_by_last_active=True, id_query="ne")] == ["new"]


def test_cwd_prefix(store):
    for sid, cwd in (("a", "/home/me/my_project"), ("b", "/home/me/my_project/src"),
                     ("c", "/home/me/myXproject/src"), ("d", "/home/me/my_project2"),
                     ("e", "C:\\w\\my_proj\\x"), ("f", "C:\\w\\myXproj\\x")):
        store.create_session(sid, "cli", cwd=cwd)
    assert {r.id for r in store.list_sessions(cwd_prefix="/home/me/my_project")} == {"a", "b"}
    assert {r.id for r in store.list_sessions(cwd_prefix="C:\\w\\my_proj")} == {"e"}


def test_implausible_timestamps_do_not_pin_to_top(store):
    store.create_session("garbage", "cli")
    store.append_message("garbage", "user", "x", timestamp=9.9e15)
    store.create_session("fine", "cli")
    rows = store.list_sessions(order_by_last_active=True)
    assert rows[0].id == "fine"


def test_recent_bounded_times_out_and_removes_handler(store):
    make_chain(store, 300, prefix="a")
    with pytest.raises(TimeoutError):
        store.list_recent_sessions_bounded(timeout_seconds=0.0)
    assert len(store.list_recent_sessions_bounded()) == 1
    with store.engine.connect() as conn:  # no handler left on pooled connections
        conn.exec_driver_sql("SELECT count(*) FROM sessions").scalar()


def test_preview(store):
    store.create_session("s", "cli")
    store.append_message("s", "user", "hidden", display_kind="hidden")
    store.append_message("s", "user", "line one\nline two " + "z" * 80)
    p = store.list_sessions()[0].preview
    assert p.startswith("line one line two") and p.endswith("...") and len(p) == 63
