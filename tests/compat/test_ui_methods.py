"""The user-interface methods of the drop-in ``SessionDB`` (docs/compat.md "User
interface"), each checked against what upstream's ``SessionDB`` documents it returns, on both
backends (the ``db`` fixture)."""

from __future__ import annotations

import dataclasses
import json
import time

import pytest
import sqlalchemy as sa

from hermes_data.sessions.ui.portability.imports import ImportLimits

PR = "https://github.com/acme/app/pull/42"


def _sql(db, statement: str, **params) -> list:
    """One ad-hoc statement on the store's engine (named parameters, both dialects)."""
    with db.store.engine.begin() as conn:
        res = conn.execute(sa.text(statement), params)
        return list(res.fetchall()) if res.returns_rows else []


def _transcript(db, sid: str, n: int) -> list[int]:
    db.store.create_session(sid, "cli")
    return [db.store.append_message(sid, "user" if i % 2 == 0 else "assistant", f"m{i}")
            for i in range(n)]


# -- transcript windows -----------------------------------------------------------------------

def test_get_messages_around_returns_upstreams_window(db):
    ids = _transcript(db, "s1", 10)
    got = db.get_messages_around("s1", ids[4], window=2)
    assert type(got) is dict and set(got) == {"window", "messages_before", "messages_after"}
    assert [m["id"] for m in got["window"]] == ids[2:7]
    assert (got["messages_before"], got["messages_after"]) == (2, 2)
    first = got["window"][0]
    assert type(first) is dict and first["content"] == "m2" and first["role"] == "user"
    assert first["_compressed_summary"] == 0 and first["session_id"] == "s1"


def test_get_messages_around_at_the_edges_and_unknown_anchor(db):
    ids = _transcript(db, "s1", 3)
    got = db.get_messages_around("s1", ids[0])
    assert [m["id"] for m in got["window"]] == ids
    assert (got["messages_before"], got["messages_after"]) == (0, 2)
    assert db.get_messages_around("s1", ids[-1] + 1000) == {
        "window": [], "messages_before": 0, "messages_after": 0}
    assert db.get_messages_around("other", ids[0])["window"] == []


@pytest.mark.parametrize("anchor", ["5", 5.0, True, None, "abc"])
def test_get_messages_around_refuses_a_non_int_anchor(db, anchor):
    """Kept difference (CHANGELOG "Changed (against the upstream plugin)"): upstream bound the
    anchor as given and let SQLite's integer affinity decide — ``"5"``, ``5.0`` and ``True``
    anchored like ``5`` / ``1``, while ``None`` or ``"abc"`` gave the empty window of an unknown
    id, hiding the caller's bug; ours raises ``TypeError`` naming the value, on both backends
    alike."""
    _transcript(db, "s1", 6)
    with pytest.raises(TypeError, match="around_message_id must be an int") as info:
        db.get_messages_around("s1", anchor)
    assert repr(anchor) in str(info.value)


def test_get_messages_around_decodes_structured_content(db):
    db.store.create_session("s1", "cli")
    parts = [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "x"}}]
    mid = db.store.append_message("s1", "user", parts)
    calls = [{"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]
    db.store.append_message("s1", "assistant", None, tool_calls=calls)
    window = db.get_messages_around("s1", mid)["window"]
    assert window[0]["content"] == parts and window[1]["tool_calls"] == calls


def test_get_messages_around_keeps_rewound_rows(db):
    ids = _transcript(db, "s1", 6)
    db.store.rewind_to_message("s1", ids[2])
    got = db.get_messages_around("s1", ids[3], window=5)
    assert [m["id"] for m in got["window"]] == ids
    assert [m["active"] for m in got["window"]] == [True, True, False, False, False, False]


def test_get_messages_around_has_no_window_cap(db):
    db.store.create_session("s1", "cli")
    db.store.append_messages_batch("s1", [{"role": "user", "content": f"m{i}"}
                                          for i in range(1003)])
    last = db.store.get_messages("s1", latest=True, limit=1)[0].id
    got = db.get_messages_around("s1", last, window=1002)
    assert got["messages_before"] == 1002


def test_find_pr_url_messages(db):
    db.store.create_session("a", "cli")
    db.store.create_session("b", "cli")
    db.store.append_message("a", "tool", f"created {PR}", tool_call_id="t1")
    db.store.append_message("a", "user", f"see {PR}")
    db.store.append_message("a", "tool", "no link here", tool_call_id="t2")
    db.store.append_message("a", "tool", PR + "0", tool_call_id="t3")
    db.store.append_message("b", "tool", PR, tool_call_id="t4")
    rows = db.find_pr_url_messages(["a", "b", ""])
    assert all(type(r) is dict and set(r) == {"session_id", "content"} for r in rows)
    assert [(r["session_id"], r["content"]) for r in rows if r["session_id"] == "a"] == [
        ("a", f"created {PR}"), ("a", PR + "0")]
    assert ("b", PR) in [(r["session_id"], r["content"]) for r in rows]
    assert db.find_pr_url_messages([]) == []


# -- reactions --------------------------------------------------------------------------------

def test_set_message_reaction_tapback_semantics(db):
    db.store.create_session("s1", "cli")
    mid = db.store.append_message("s1", "assistant", "answer")
    got = db.set_message_reaction("s1", mid, "👍")
    assert type(got) is list and len(got) == 1 and type(got[0]) is dict
    assert (got[0]["emoji"], got[0]["author"]) == ("👍", "user")
    assert isinstance(got[0]["at"], float)
    replaced = db.set_message_reaction("s1", mid, "❤️")
    assert [r["emoji"] for r in replaced] == ["❤️"]
    both = db.set_message_reaction("s1", mid, "🎉", author="bot")
    assert sorted(r["author"] for r in both) == ["bot", "user"]
    assert [r["author"] for r in db.set_message_reaction("s1", mid, "❤️")] == ["bot"]
    assert db.set_message_reaction("s1", mid, None, author="bot") == []


def test_set_message_reaction_outside_the_session_is_none(db):
    db.store.create_session("s1", "cli")
    db.store.create_session("s2", "cli")
    mid = db.store.append_message("s1", "assistant", "answer")
    assert db.set_message_reaction("s2", mid, "👍") is None
    assert db.set_message_reaction("s1", mid + 99, "👍") is None


def test_get_message_reactions_never_none(db):
    db.store.create_session("s1", "cli")
    mid = db.store.append_message("s1", "assistant", "answer")
    assert db.get_message_reactions("s1", mid) == []
    db.set_message_reaction("s1", mid, "👍")
    got = db.get_message_reactions("s1", mid)
    assert [(r["emoji"], r["author"]) for r in got] == [("👍", "user")]
    assert db.get_message_reactions("s1", mid + 99) == []


def test_take_unseen_reactions_announces_each_once(db):
    db.store.create_session("s1", "cli")
    mid = db.store.append_message("s1", "assistant", "the answer")
    db.set_message_reaction("s1", mid, "👍")
    got = db.take_unseen_reactions("s1")
    assert got == [{"row_id": mid, "role": "assistant", "emoji": "👍", "text": "the answer"}]
    assert db.take_unseen_reactions("s1") == []
    assert db.get_message_reactions("s1", mid)[0]["seen"] is True


# -- pickers ----------------------------------------------------------------------------------

def test_list_sessions_rich_rows_are_dicts_with_preview(db):
    db.store.create_session("a", "cli")
    db.store.append_message("a", "user", "hello there")
    db.store.create_session("b", "telegram")
    rows = db.list_sessions_rich()
    assert {r["id"] for r in rows} == {"a", "b"}
    a = next(r for r in rows if r["id"] == "a")
    assert type(a) is dict and a["preview"].startswith("hello there")
    assert {"last_active", "unread", "message_count", "source", "title"} <= set(a)
    assert "_lineage_root_id" not in a
    assert [r["id"] for r in db.list_sessions_rich("telegram")] == ["b"]
    assert [r["id"] for r in db.list_sessions_rich(exclude_sources=["telegram"])] == ["a"]


def test_list_sessions_rich_projects_a_compression_chain(db):
    db.store.create_session("root", "cli")
    db.store.end_session("root", "compression")
    db.store.create_session("tip", "cli", parent_session_id="root")
    db.store.append_message("tip", "user", "continued")
    rows = db.list_sessions_rich()
    assert [r["id"] for r in rows] == ["tip"]
    assert rows[0]["_lineage_root_id"] == "root"
    assert rows[0]["_lineage_ids"] == ["root", "tip"]
    raw = db.list_sessions_rich(project_compression_tips=False)
    assert [r["id"] for r in raw] == ["root"]


def test_list_sessions_rich_archived_and_hidden_filters(db):
    for sid in ("live", "arch", "hid"):
        db.store.create_session(sid, "cli")
    db.store.set_session_archived("arch", True)
    _sql(db, "UPDATE sessions SET hidden = 1 WHERE id = 'hid'")
    assert {r["id"] for r in db.list_sessions_rich()} == {"live"}
    assert {r["id"] for r in db.list_sessions_rich(archived_only=True)} == {"arch"}
    assert {r["id"] for r in db.list_sessions_rich(include_archived=True,
                                                   include_hidden=True)} == {"live", "arch",
                                                                             "hid"}


def test_list_sessions_rich_rows_carry_the_rewind_count(db):
    ids = _transcript(db, "s1", 2)
    db.store.rewind_to_message("s1", ids[0])
    assert db.list_sessions_rich()[0]["rewind_count"] == 1


def test_search_sessions_by_recent_activity(db):
    for sid, source in (("old", "cli"), ("new", "cli"), ("tg", "telegram")):
        db.store.create_session(sid, source, cwd="/work/app" if sid != "tg" else None)
    _sql(db, "UPDATE sessions SET started_at = :t WHERE id = 'old'", t=time.time() - 3600)
    db.store.append_message("tg", "user", "x")
    rows = db.search_sessions()
    assert all(type(r) is dict and "last_active" in r for r in rows)
    assert [r["id"] for r in rows][-1] == "old"
    assert [r["id"] for r in db.search_sessions("cli")] == ["new", "old"]
    assert [r["id"] for r in db.search_sessions(limit=1, offset=2)] == ["old"]
    assert {r["id"] for r in db.search_sessions(workspace_key="/work/app")} == {"old", "new"}


def test_search_sessions_includes_archived_rows(db):
    db.store.create_session("arch", "cli")
    db.store.set_session_archived("arch", True)
    assert [r["id"] for r in db.search_sessions()] == ["arch"]


# -- import (upstream's SessionDB.import_sessions; the layer has no wrapper: db.store's) -------

def test_import_total_limit_issues_name_each_entry_past_the_limit(db):
    """As upstream's ``import_sessions``: a total cap is reported on each entry whose running
    total exceeds it, with that entry's index and id (it had been one issue at index -1, which
    as a Python index names the last entry). Nothing is written."""
    payload = [{"id": f"s{i}", "messages": [{"role": "user", "content": "x"}] * n}
               for i, n in enumerate((2, 1, 1, 1))]
    r = db.store.import_sessions(payload, ImportLimits(messages_total=3))
    assert not r.ok and r.imported == 0
    assert [(i.index, i.session_id) for i in r.errors] == [(2, "s2"), (3, "s3")]
    assert all(i.error.startswith("messages exceeds the total import limit")
               for i in r.errors)
    size = len(json.dumps(payload[0], separators=(",", ":")))
    r = db.store.import_sessions(payload, ImportLimits(bytes_total=size * 2 + 10))
    assert [(i.index, i.session_id) for i in r.errors] == [(2, "s2"), (3, "s3")]
    assert all(i.error.startswith("import exceeds the total size limit") for i in r.errors)
    assert db.get_session("s0") is None


def test_import_result_has_every_field_on_a_refusal(db):
    """Kept difference (CHANGELOG "Changed (against the upstream plugin)"): upstream's refusal
    dict had only ``ok``, ``imported``, ``skipped``, ``detached`` and ``errors`` (its success
    added the id lists, neither had ``warnings``); ours is one ``ImportResult`` whose fields are
    always there — empty lists and zero counters on a refusal."""
    r = db.store.import_sessions([{"id": "a"}, {"id": "a"}])
    assert [f.name for f in dataclasses.fields(r)] == [
        "ok", "imported", "skipped", "detached", "imported_ids", "skipped_ids", "errors",
        "warnings"]
    assert (r.ok, r.imported, r.skipped, r.detached) == (False, 0, 0, 0)
    assert (r.imported_ids, r.skipped_ids, r.warnings) == ([], [], [])
    assert [(i.index, i.session_id) for i in r.errors] == [(1, "a")]
