"""The core area of ``hermes_data.compat.SessionDB``, checked against upstream's documented
behaviour (docs/compat.md "Core"): values written then read back through the upstream-shaped
methods, return shapes (plain dicts and lists, ``None``/``[]``/``False`` where upstream
answers them) and exceptions, on SQLite and PostgreSQL (the ``db`` fixture).
"""

from __future__ import annotations

import time

import pytest

from hermes_data.compat import SessionDB, SessionExportTooLargeError, SessionResumeTooLargeError


def chain(db: SessionDB, *ids: str, source: str = "cli") -> list[str]:
    """A compression chain ``ids[0] → … → ids[-1]`` written as upstream's compression does:
    each segment is ended by ``compression``, then its continuation is created."""
    db.create_session(ids[0], source)
    for parent, child in zip(ids, ids[1:]):
        db.end_session(parent, "compression")
        db.create_session(child, source, parent_session_id=parent)
    return list(ids)


def say(db: SessionDB, session_id: str, *texts: str, role: str = "user") -> list[int]:
    """Append messages through the typed store (this area has no writer of its own)."""
    return [db.store.append_message(session_id, role, text) for text in texts]


# -- handle and state_meta -----------------------------------------------------------------


def test_close_closes_the_handle(db):
    db.create_session("s1", "cli")
    assert db.close() is None
    with pytest.raises(Exception, match="closed"):
        db.get_session("s1")


def test_meta_round_trip_and_missing_key(db):
    assert db.get_meta("nope") is None
    assert db.set_meta("last_auto_prune", "123.5") is None
    assert db.get_meta("last_auto_prune") == "123.5"
    db.set_meta("last_auto_prune", "200")
    assert db.get_meta("last_auto_prune") == "200"


def test_set_meta_refuses_a_cursor(db):
    with pytest.raises(TypeError, match="cursor"):
        db.set_meta("k", "v", cursor=object())
    assert db.get_meta("k") is None


def test_list_meta_prefix_is_a_list_of_pairs_matched_literally(db):
    db.set_meta("loop:a", "1")
    db.set_meta("loop:b", "2")
    db.set_meta("loopx", "3")
    db.set_meta("other", "4")
    got = db.list_meta_prefix("loop:")
    assert isinstance(got, list)
    assert sorted(got) == [("loop:a", "1"), ("loop:b", "2")]
    assert all(type(pair) is tuple for pair in got)
    assert db.list_meta_prefix("lo_p") == []  # "_" is no wildcard
    assert db.list_meta_prefix("missing:") == []


def test_list_meta_prefix_of_an_empty_prefix_is_empty(db):
    db.set_meta("k", "v")
    assert db.list_meta_prefix("") == []


# -- lifecycle -----------------------------------------------------------------------------


def test_create_session_returns_the_id_and_stores_the_keywords(db):
    assert db.create_session("s1", "telegram", user_id="u1", model="m1",
                             session_key="agent:main:telegram:dm:1") == "s1"
    row = db.get_session("s1")
    assert (row["source"], row["user_id"], row["model"], row["session_key"]) == \
        ("telegram", "u1", "m1", "agent:main:telegram:dm:1")
    assert row["ended_at"] is None


def test_end_session_returns_none_and_the_first_reason_wins(db):
    db.create_session("s1", "cli")
    assert db.end_session("s1", "user_exit") is None
    first = db.get_session("s1")
    assert first["end_reason"] == "user_exit" and first["ended_at"] is not None
    db.end_session("s1", "compression")
    again = db.get_session("s1")
    assert (again["end_reason"], again["ended_at"]) == ("user_exit", first["ended_at"])


def test_reopen_session_clears_the_end(db):
    db.create_session("s1", "cli")
    db.end_session("s1", "user_exit")
    assert db.reopen_session("s1") is None
    row = db.get_session("s1")
    assert row["ended_at"] is None and row["end_reason"] is None
    db.end_session("s1", "session_reset")  # re-ending after a reopen takes the new reason
    assert db.get_session("s1")["end_reason"] == "session_reset"


def test_reopen_session_reopens_a_compression_parent(db):
    chain(db, "root", "tip")
    db.reopen_session("root")
    assert db.get_session("root")["ended_at"] is None


# -- messages ------------------------------------------------------------------------------


def test_get_messages_are_dicts_in_insertion_order(db):
    db.create_session("s1", "cli")
    ids = say(db, "s1", "one", "two", "three")
    db.store.append_message("s1", "assistant", "", tool_calls=[{"id": "c1", "type": "function"}])
    got = db.get_messages("s1")
    assert isinstance(got, list) and all(type(m) is dict for m in got)
    assert [m["content"] for m in got[:3]] == ["one", "two", "three"]
    assert [m["id"] for m in got[:3]] == ids
    assert {"id", "session_id", "role", "content", "tool_calls", "timestamp"} <= set(got[0])
    assert got[3]["tool_calls"] == [{"id": "c1", "type": "function"}]
    assert all("_compressed_summary" not in m for m in got)
    assert db.get_messages("unknown") == []


def test_get_messages_pages(db):
    db.create_session("s1", "cli")
    ids = say(db, "s1", *[f"m{i}" for i in range(6)])
    assert [m["content"] for m in db.get_messages("s1", limit=2, offset=1)] == ["m1", "m2"]
    assert [m["content"] for m in db.get_messages("s1", limit=2, latest=True)] == ["m4", "m5"]
    assert [m["content"] for m in db.get_messages("s1", offset=4)] == ["m4", "m5"]
    assert [m["id"] for m in db.get_messages("s1", after_id=ids[3])] == ids[4:]
    with pytest.raises(ValueError):
        db.get_messages("s1", after_id=ids[0], latest=True)


def test_get_messages_inactive_and_compacted_flags(db):
    db.create_session("s1", "cli")
    ids = say(db, "s1", "keep", "drop1", "drop2")
    db.store.rewind_to_message("s1", ids[1])  # soft-deletes the rows from the target on
    active = [m["content"] for m in db.get_messages("s1")]
    everything = [m["content"] for m in db.get_messages("s1", include_inactive=True)]
    assert len(everything) == 3 and set(active) < set(everything)
    # include_compacted is upstream's third positional; rewound rows stay out of it
    assert [m["content"] for m in db.get_messages("s1", False, True)] == active


def test_message_count_counts_every_row_as_upstream(db):
    db.create_session("s1", "cli")
    db.create_session("s2", "cli")
    ids = say(db, "s1", "a", "b", "c")
    say(db, "s2", "x")
    db.store.rewind_to_message("s1", ids[1])
    assert db.store.message_count("s1") < 3  # the typed store counts active rows
    assert db.message_count("s1") == 3
    assert db.message_count() == 4
    assert db.message_count("unknown") == 0


def test_assert_resume_safe(db):
    db.create_session("s1", "cli")
    say(db, "s1", "a", "b", "c")
    assert db.assert_resume_safe("s1", 10) == 3
    assert db.assert_resume_safe("s1", 0) == 0  # 0 disables the guard
    assert db.assert_resume_safe("s1", 3, tip_only=True) == 3
    with pytest.raises(SessionResumeTooLargeError) as caught:
        db.assert_resume_safe("s1", 2)
    assert isinstance(caught.value, ValueError)
    with pytest.raises(ValueError):
        db.assert_resume_safe("s1", -1)


def test_assert_export_safe(db):
    db.create_session("s1", "cli")
    say(db, "s1", "a", "b")
    assert db.assert_export_safe("s1", 5) == 2
    assert db.assert_export_safe("s1", 0) == 0
    with pytest.raises(SessionExportTooLargeError) as caught:
        db.assert_export_safe("s1", 1)
    assert isinstance(caught.value, ValueError)


# -- lineage -------------------------------------------------------------------------------


def test_compression_chain_and_tip(db):
    chain(db, "root", "mid", "tip")
    db.create_session("alone", "cli")
    assert db.get_compression_chain("root") == ["root", "mid", "tip"]
    assert db.get_compression_chain("mid") == ["mid", "tip"]
    assert db.get_compression_chain("alone") == ["alone"]
    assert db.get_compression_tip("root") == "tip"
    assert db.get_compression_tip("alone") == "alone"


def test_get_compression_lineage_root_to_tip(db):
    chain(db, "root", "mid", "tip")
    assert db.get_compression_lineage("mid") == ["root", "mid", "tip"]
    assert db.get_compression_lineage("tip") == ["root", "mid", "tip"]


def test_get_compression_lineage_of_an_unknown_id_is_empty(db):
    assert db.get_compression_lineage("nope") == []


def test_resolve_resume_session_id_follows_the_messages(db):
    chain(db, "root", "tip")
    say(db, "tip", "continued")
    assert db.resolve_resume_session_id("root") == "tip"
    db.create_session("empty", "cli")
    assert db.resolve_resume_session_id("empty") == "empty"  # nothing anywhere: unchanged
    assert db.resolve_resume_session_id("") == ""


# -- titles --------------------------------------------------------------------------------


def test_sanitize_title_is_a_static_method():
    assert SessionDB.sanitize_title("  my \t  title \n") == "my title"
    assert SessionDB.sanitize_title("a\u200bb\x07c") == "abc"
    assert SessionDB.sanitize_title("   ") is None
    assert SessionDB.sanitize_title("") is None
    assert SessionDB.sanitize_title(None) is None
    assert SessionDB.sanitize_title("x" * SessionDB.MAX_TITLE_LENGTH) == "x" * 100
    with pytest.raises(ValueError, match="too long"):
        SessionDB.sanitize_title("x" * (SessionDB.MAX_TITLE_LENGTH + 1))


def test_set_session_title_writes_clears_and_refuses_duplicates(db):
    db.create_session("s1", "cli")
    db.create_session("s2", "cli")
    assert db.set_session_title("s1", "  Planning   day ") is True
    assert db.get_session("s1")["title"] == "Planning day"
    assert db.get_session("s1")["title_source"] == db.TITLE_SOURCE_USER
    with pytest.raises(ValueError, match="already in use"):
        db.set_session_title("s2", "Planning day")
    db.set_session_title("s1", "   ")
    assert db.get_session("s1")["title"] is None


def test_set_session_title_on_a_missing_session_is_false(db):
    assert db.set_session_title("nope", "title") is False


def test_set_auto_title_respects_rank(db):
    db.create_session("s1", "cli")
    db.create_session("s2", "cli")
    with pytest.raises(ValueError):
        db.set_auto_title("s1", "t", source=db.TITLE_SOURCE_USER)
    assert db.set_auto_title("s1", "derived one", source=db.TITLE_SOURCE_DERIVED) is True
    assert db.set_auto_title("s1", "llm one", source=db.TITLE_SOURCE_LLM) is True
    assert db.set_auto_title("s1", "derived two", source=db.TITLE_SOURCE_DERIVED) is False
    assert db.get_session("s1")["title"] == "llm one"
    db.set_session_title("s2", "mine")
    assert db.set_auto_title("s2", "llm", source=db.TITLE_SOURCE_LLM) is False
    assert db.get_session("s2")["title"] == "mine"
    assert db.set_auto_title("missing", "t", source=db.TITLE_SOURCE_LLM) is False


def test_get_next_title_in_lineage(db):
    assert db.get_next_title_in_lineage("my session") == "my session"
    db.create_session("s1", "cli")
    db.set_session_title("s1", "my session")
    assert db.get_next_title_in_lineage("my session") == "my session #2"
    db.create_session("s3", "cli")
    db.set_session_title("s3", "my session #3")
    assert db.get_next_title_in_lineage("my session") == "my session #4"
    assert db.get_next_title_in_lineage("my session #3") == "my session #4"
    assert db.get_next_title_in_lineage(base_title="100%_done") == "100%_done"


def test_session_by_title_and_resolution(db):
    for sid in ("a", "b", "c"):
        db.create_session(sid, "cli")
    db.set_session_title("a", "proj")
    assert db.get_session_by_title("proj")["id"] == "a"
    assert db.get_session_by_title("none") is None
    assert db.resolve_session_by_title("proj") == "a"
    db.set_session_title("b", "proj #2")
    time.sleep(0.01)
    db.set_session_title("c", "proj #3")
    assert db.resolve_session_by_title("proj") == "c"  # the newest numbered variant
    assert db.resolve_session_by_title("nothing") is None


# -- flags ---------------------------------------------------------------------------------


def test_set_session_archived_flips_the_whole_lineage(db):
    chain(db, "root", "tip")
    assert db.set_session_archived("tip", True) is True
    assert db.get_session("root")["archived"] == 1 and db.get_session("tip")["archived"] == 1
    assert db.set_session_archived("root", False) is True
    assert db.get_session("tip")["archived"] == 0
    assert db.set_session_archived("nope", True) is False
    with pytest.raises(TypeError):
        db.set_session_archived("root")  # upstream's flag has no default


def test_set_session_hidden_and_pinned_flip_the_lineage(db):
    chain(db, "root", "tip")
    assert db.set_session_hidden("root", True) is True
    assert db.get_session("tip")["hidden"] == 1
    assert db.set_session_pinned("tip", True) is True
    assert db.get_session("root")["pinned"] == 1
    assert db.set_session_pinned("nope", True) is False
    assert db.set_session_hidden("nope", True) is False


def test_set_session_pinned_also_unhides_unless_a_hidden_bot_chat(db):
    """Kept difference (CHANGELOG "Changed (against the upstream plugin)"): seed 002's
    ``set_session_pinned`` wrote ``pinned`` alone, so a pinned hidden session (a bot-mode
    session is created hidden) stayed out of the listing and of its pinned back-fill; ours
    clears ``hidden`` on the same set in the same transaction — upstream's later fix (#106171)
    — except on a lineage holding a hidden canonical 'Bot Chat'. ``include_forked_children``
    widens both writes to upstream's set, so a branch of the lineage is pinned and unhidden
    too; no keyword leaves ``hidden`` alone."""
    chain(db, "root", "tip")
    db.store.create_child_session("root", "br", "branch")
    db.set_session_hidden("root", True)
    assert {db.get_session(s)["hidden"] for s in ("root", "tip", "br")} == {True}
    assert db.set_session_pinned("root", True) is True
    for sid in ("root", "tip", "br"):
        row = db.get_session(sid)
        assert (row["pinned"], row["hidden"]) == (1, 0), sid
    assert db.set_session_pinned("root", False) is True
    assert db.get_session("root")["hidden"] == 0  # unpinning leaves hidden alone
    chain(db, "bot", "bottip")
    db.set_session_title("bottip", SessionDB.CANONICAL_BOT_CHAT_TITLE)
    db.set_session_hidden("bot", True)
    assert db.set_session_pinned("bottip", True) is True
    assert db.get_session("bottip")["pinned"] == 1
    assert db.get_session("bot")["hidden"] == 1 and db.get_session("bottip")["hidden"] == 1


def test_set_session_hidden_repeated_is_true(db):
    db.create_session("s1", "cli")
    db.set_session_hidden("s1", True)
    assert db.set_session_hidden("s1", True) is True


def test_set_session_read_stamps_the_watermark(db):
    chain(db, "root", "tip")
    before = time.time()
    assert db.set_session_read("tip") is True
    assert db.get_session("root")["last_read_at"] >= before - 1
    assert db.set_session_read("root", read=False) is True
    assert db.get_session("tip")["last_read_at"] == 0


# -- reads ---------------------------------------------------------------------------------


def test_get_session_is_a_plain_dict(db):
    assert db.get_session("nope") is None
    db.create_session("s1", "cli", system_prompt="You are helpful.", model="m")
    db.store.update_session_tool_names("s1", ["read", "write"])
    row = db.get_session("s1")
    assert type(row) is dict
    assert row["id"] == "s1" and row["system_prompt"] == "You are helpful."
    assert row["tool_names"] == '["read", "write"]'  # upstream stores the JSON array text
    assert {"started_at", "message_count", "title", "parent_session_id", "archived"} <= set(row)


def test_get_session_has_an_adopted_files_upstream_only_columns(db, session_store_url):
    """As upstream's ``get_session`` / ``get_session_by_title`` (``SELECT s.*``): a column an
    upstream version added and no revision here declares (docs/sessions-ui.md §2.6) is a key
    of the session dict, as it already was of the listing rows; the declared keys keep their
    values, and a fresh store's dict has none."""
    db.create_session("s1", "cli", model="m")
    db.set_session_title("s1", "named")
    assert db.store.get_session_extra("s1") == {}
    with db.store.engine.begin() as conn:
        conn.exec_driver_sql("ALTER TABLE sessions ADD COLUMN transport_profile TEXT")
        conn.exec_driver_sql("UPDATE sessions SET transport_profile = 'fast'")
    adopted = SessionDB(session_store_url)  # a handle opened on the file as it is now
    try:
        row = adopted.get_session("s1")
        assert row["transport_profile"] == "fast"
        assert (row["id"], row["model"], row["title"]) == ("s1", "m", "named")
        assert adopted.get_session_by_title("named")["transport_profile"] == "fast"
        assert adopted.store.get_session_extra("s1") == {"transport_profile": "fast"}
        assert adopted.get_session("nope") is None
        assert adopted.store.get_session_extra("nope") == {}
    finally:
        adopted.close()
        if db.store.url.get_backend_name() == "postgresql":  # the scratch database outlives us
            with db.store.engine.begin() as conn:
                conn.exec_driver_sql("ALTER TABLE sessions DROP COLUMN transport_profile")


def test_session_count_filters(db):
    db.create_session("a", "cli")
    db.create_session("b", "telegram")
    chain(db, "root", "tip")  # tip is a compression child
    db.create_session("old", "cli")
    db.set_session_archived("old", True)
    db.create_session("h", "cli", hidden=True)
    assert db.session_count() == 5  # children and hidden rows counted, archived not
    assert db.session_count(include_archived=True) == 6
    assert db.session_count(archived_only=True) == 1
    assert db.session_count(exclude_children=True) == 4
    assert db.session_count(source="telegram") == 1
    assert db.session_count(sources=["cli", "telegram"], exclude_sources=["telegram"]) == 4


def test_session_count_counts_delegate_children(db):
    db.create_session("parent", "cli")
    db.store.create_child_session("parent", "worker", "delegate")
    assert db.session_count() == 2


def test_session_count_ge(db):
    assert db.session_count_ge() is False
    db.create_session("a", "cli")
    db.set_session_archived("a", True)
    assert db.session_count_ge() is True  # archived sessions count
    assert db.session_count_ge(2) is False
    db.create_session("b", "cli")
    assert db.session_count_ge(2) is True


def test_list_recent_sessions_bounded_projects_to_the_tip(db):
    chain(db, "root", "tip")
    say(db, "tip", "hello from the tip")
    db.create_session("solo", "cron")
    say(db, "solo", "cron run")
    got = db.list_recent_sessions_bounded(limit=10)
    assert all(type(r) is dict for r in got)
    by_id = {r["id"]: r for r in got}
    assert set(by_id) == {"tip", "solo"}
    assert by_id["tip"]["_lineage_root_id"] == "root"
    assert by_id["solo"]["_lineage_root_id"] is None
    assert by_id["tip"]["preview"].startswith("hello")
    assert by_id["tip"]["unread"] is False
    assert [r["id"] for r in db.list_recent_sessions_bounded(exclude_sources=["cron"])] == ["tip"]
    with pytest.raises(TypeError):
        db.list_recent_sessions_bounded(10)  # keyword-only, as upstream
