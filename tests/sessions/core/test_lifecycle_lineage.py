"""Lifecycle (§4.1–§4.3) and lineage (§3, §4.4) against real files (§10 #14–#23)."""

from __future__ import annotations

import json
import time

import pytest

from hermes_data.sessions import sql
from hermes_data.sessions.core import messages
from hermes_data.sessions.errors import (CompressionPublishError, CompressionSessionClosedError,
                                         SessionNotFoundError)
from hermes_data.sessions.store import SessionStore

from tests.sessions.conftest import make_chain


def test_create_is_enrich_on_conflict(store):
    store.create_session("s", "telegram", user_id="u1", model=None, cwd=None)
    store.create_session("s", "unknown", user_id="u2", model="gpt", cwd="/w")
    row = store.get_session("s")
    assert (row.source, row.user_id, row.model, row.cwd) == ("telegram", "u1", "gpt", "/w")
    store.create_session("s", "cli", model="other")
    assert store.get_session("s").model == "gpt"


def test_profile_inherits_only_when_namespaces_agree(store):
    store.create_session("p", "telegram", session_key="agent:alpha:telegram:1", profile_name="work")
    store.create_session("c1", "telegram", parent_session_id="p", session_key="agent:alpha:telegram:2")
    store.create_session("c2", "telegram", parent_session_id="p", session_key="agent:beta:telegram:2")
    assert store.get_session("c1").profile_name == "work"
    assert store.get_session("c2").profile_name is None


def test_owner_profile_stamped(tmp_path):
    root = tmp_path / "root"
    with SessionStore(root / "profiles" / "coder" / "state.db", hermes_root=root) as s:
        s.create_session("a", "cli")
        assert s.get_session("a").profile_name == "coder"
    with SessionStore(tmp_path / "elsewhere" / "state.db", hermes_root=root) as s:
        s.create_session("a", "cli")
        assert s.get_session("a").profile_name is None


def test_compression_child_inherits_routing_delegate_of_live_parent_does_not(store):
    store.create_session("p", "telegram", user_id="u", session_key="k", chat_id="c", cwd="/w",
                         git_branch="main", git_repo_root="/w", profile_name="pr")
    store.create_child_session("p", "d", "delegate", source="subagent")
    d = store.get_session("d")
    assert (d.cwd, d.git_branch, d.profile_name) == ("/w", "main", "pr")
    assert (d.user_id, d.session_key, d.chat_id) == (None, None, None)
    store.end_session("p", "compression")
    store.create_session("c", "telegram", parent_session_id="p")
    c = store.get_session("c")
    assert (c.user_id, c.session_key, c.chat_id, c.cwd, c.profile_name) == ("u", "k", "c", "/w", "pr")


def test_first_end_reason_wins(store):
    store.create_session("s", "cli")
    assert store.end_session("s", "compression")
    assert not store.end_session("s", "user_exit")
    assert store.get_session("s").end_reason == "compression"


def test_reopen_stamps_legacy_reset_children(store):
    store.create_session("p", "telegram", session_key="telegram:1")
    store.end_session("p", "session_reset")
    store.create_session("c", "telegram", session_key="telegram:1", parent_session_id="p")
    assert "c" in [r.id for r in store.list_sessions()]
    assert store.reopen_session("p")
    c = store.get_session("c")
    assert json.loads(c.model_config)["_reset_from"] == "p"
    assert store.get_session("p").end_reason is None
    assert {"p", "c"} <= {r.id for r in store.list_sessions()}


def test_publish_is_atomic(store, monkeypatch):
    store.create_session("p", "cli")
    store.append_message("p", "user", "hi")
    original = messages.insert_rows

    def boom(*a, **k):
        original(*a, **k)
        raise RuntimeError("injected")

    monkeypatch.setattr(messages, "insert_rows", boom)
    with pytest.raises(RuntimeError):
        store.publish_compression_child("p", "c", "cli", [{"role": "user", "content": "sum"}])
    monkeypatch.undo()
    assert store.get_session("c") is None
    assert store.get_session("p").ended_at is None
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM messages WHERE session_id = 'c'").scalar() == 0
    with pytest.raises(CompressionPublishError):
        store.publish_compression_child("p", "c", "cli", [])


def test_publish_parent_end_reasons(store):
    store.create_session("r", "cli")
    store.end_session("r", "session_reset")
    with pytest.raises(CompressionPublishError):
        store.publish_compression_child("r", "rc", "cli", [{"role": "user", "content": "x"}])
    store.create_session("t", "cli")
    store.end_session("t", "tui_shutdown")
    store.publish_compression_child("t", "tc", "cli", [{"role": "user", "content": "x"}])
    assert store.get_session("t").end_reason == "compression"


def test_publish_watermark_clones_and_moves_title_and_flags(store):
    store.create_session("p", "cli")
    ids = [store.append_message("p", "user", f"m{i}") for i in range(6)]
    store.set_session_title("p", "Bot Chat")
    store.set_session_pinned("p")
    store.set_session_read("p")
    res = store.publish_compression_child("p", "c", "cli", [{"role": "user", "content": "handoff"}],
                                          watermark=ids[1], watermark_ceiling=ids[4])
    assert res.cloned_rows == 3 and res.title_moved
    msgs = store.get_messages("c")
    assert [m.content for m in msgs] == ["handoff", "m2", "m3", "m4"]
    c, p = store.get_session("c"), store.get_session("p")
    assert c.message_count == 4 and c.title == "Bot Chat" and p.title is None
    assert (c.pinned, c.hidden, c.last_read_at) == (p.pinned, p.hidden, p.last_read_at)
    with pytest.raises(CompressionSessionClosedError):
        store.append_message("p", "user", "late")
    with pytest.raises(CompressionSessionClosedError):
        store.append_messages_batch("p", [{"role": "user", "content": "late"}])
    with pytest.raises(SessionNotFoundError):
        store.append_message("nope", "user", "x")


def _raw(store, *rows):
    with store.engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO sessions (id, source, started_at, parent_session_id, end_reason, ended_at, "
            "model_config) VALUES (?, ?, ?, ?, ?, ?, ?)", list(rows))


def test_chain_rules(store):
    now = time.time()
    _raw(store,
         ("root", "cli", now, None, "compression", now + 1, None),
         ("br", "cli", now + 2, "root", None, None, json.dumps({"_branched_from": "root"})),
         ("cont", "cli", now + 1, "root", "compression", now + 3,
          json.dumps({"_branched_from": "someone_else"})),
         ("live", "cli", now + 3, "cont", None, None, None),
         ("stale", "cli", now + 4, "cont", "ws_orphan_reap", now + 5, None))
    assert store.get_compression_chain("root") == ["root", "cont", "live"]
    assert store.get_compression_root("live") == "root"
    assert store.get_compression_root("br") == "br"
    assert store.get_lineage_ids("cont") == ["root", "cont", "live"]


def test_cycle_terminates(store):
    now = time.time()
    _raw(store, ("x", "cli", now, None, "compression", now, None),
         ("y", "cli", now, "x", "compression", now, None))
    with store.engine.begin() as conn:  # artificial cycle (foreign keys allow it once both exist)
        conn.exec_driver_sql("UPDATE sessions SET parent_session_id = 'y' WHERE id = 'x'")
    assert store.get_compression_chain("x") == ["x", "y"]
    assert store.get_compression_tip("x") == "y"
    assert store.get_compression_root("x") in ("x", "y")


def test_resume_target_skips_forks_and_resets(store):
    now = time.time()
    _raw(store,
         ("r", "cli", now, None, "compression", now + 1, None),
         ("t", "cli", now + 1, "r", None, None, None),
         ("tb", "cli", now + 5, "t", None, None, json.dumps({"_branched_from": "t"})),
         ("tr", "cli", now + 6, "t", None, None, json.dumps({"_reset_from": "t"})),
         ("td", "cli", now + 7, "t", None, None, json.dumps({"_delegate_from": "t"})),
         ("tt", "tool", now + 8, "t", None, None, None))
    for sid in ("tb", "tr", "td", "tt"):
        store.append_message(sid, "user", "x")
    assert store.resolve_resume_session_id("r") == "t"


def test_lineage_at_depth_500_is_one_statement_each(store):
    ids = make_chain(store, 500)
    from sqlalchemy import event
    count = []
    def listener(conn, cursor, statement, *a):
        if not statement.startswith("BEGIN"):
            count.append(statement)

    from sqlalchemy.engine import Engine
    # Every engine: in WAL the reads run on the read pool's, not the writer's.
    event.listen(Engine, "before_cursor_execute", listener)
    try:
        for probe in (ids[0], ids[99], ids[100], ids[250], ids[499]):
            count.clear()
            assert store.get_compression_tip(probe) == ids[-1]
            assert store.get_compression_root(probe) == ids[0]
            assert store.resolve_resume_session_id(probe) == ids[-1]
            assert len(count) == 3  # one statement per query
            assert all(q.startswith("WITH RECURSIVE") for q in count)
    finally:
        event.remove(Engine, "before_cursor_execute", listener)
    assert store.get_lineage_ids(ids[300]) == ids
    assert store.get_resume_lineage_ids(ids[10]) == ids[:11]
    rows = store.list_sessions(limit=5)
    assert rows[0].id == ids[-1] and rows[0].lineage_ids == tuple(ids)
    assert sql.MAX_LINEAGE_DEPTH > 500
