"""The agent-turn area of ``hermes_data.compat.SessionDB``, checked against upstream's
documented behaviour (docs/compat.md "Agent turn"): accounting, session metadata, activity,
message-row helpers, titles, conversation projections, identity and listing, through the
upstream-shaped methods on SQLite and PostgreSQL (the ``db`` fixture).

Upstream's writers here return ``None``; the tests check that and read the effect back.
"""

from __future__ import annotations

import json
import time

import pytest

from hermes_data.compat import SessionDB


def say(db: SessionDB, session_id: str, *texts: str, role: str = "user", **fields) -> list[int]:
    """Append messages through the typed store (the writers are the coordination area's)."""
    return [db.store.append_message(session_id, role, text, **fields) for text in texts]


def chain(db: SessionDB, *ids: str) -> None:
    """A compression chain written as upstream's compression does."""
    db.create_session(ids[0], "cli")
    for parent, child in zip(ids, ids[1:]):
        db.end_session(parent, "compression")
        db.create_session(child, "cli", parent_session_id=parent)


# -- accounting ----------------------------------------------------------------------------


def test_update_token_counts_adds_then_sets(db):
    db.create_session("s1", "cli")
    assert db.update_token_counts("s1", input_tokens=10, output_tokens=5, model="m1",
                                  api_call_count=1) is None
    db.update_token_counts("s1", 1, 2)  # upstream's positional order: input, output
    row = db.get_session("s1")
    assert (row["input_tokens"], row["output_tokens"], row["api_call_count"]) == (11, 7, 1)
    assert row["model"] == "m1"
    db.update_token_counts("s1", input_tokens=100, output_tokens=50, absolute=True)
    row = db.get_session("s1")
    assert (row["input_tokens"], row["output_tokens"]) == (100, 50)


def test_update_token_counts_creates_a_missing_row(db):
    db.update_token_counts("lazy", input_tokens=3)
    assert db.get_session("lazy")["source"] == "unknown"


def test_queue_then_flush_token_counts(db):
    db.create_session("s1", "cli")
    assert db.queue_token_counts("s1", input_tokens=4, output_tokens=1) is None
    db.queue_token_counts("s1", input_tokens=6)
    assert db.flush_token_counts() is True
    assert db.get_session("s1")["input_tokens"] == 10
    assert db.flush_token_counts(timeout=0.1) is True  # nothing queued


def test_record_auxiliary_usage_leaves_the_session_row_alone(db):
    db.create_session("s1", "cli")
    assert db.record_auxiliary_usage("s1", "title_generation", model="small",
                                     billing_provider="p", input_tokens=50,
                                     output_tokens=5) is None
    row = db.get_session("s1")
    assert (row["input_tokens"], row["output_tokens"]) == (0, 0)
    # an auxiliary task is never the main-loop route
    assert db.get_dominant_session_model_route("s1") is None


def test_dominant_route_is_a_dict_of_the_most_used_main_loop_route(db):
    db.create_session("s1", "cli")
    assert db.get_dominant_session_model_route("s1") is None
    for _ in range(3):
        db.update_token_counts("s1", input_tokens=1, model="big", billing_provider="acme",
                               billing_base_url="https://acme", api_call_count=1)
    db.update_token_counts("s1", input_tokens=1, model="other", billing_provider="acme",
                           api_call_count=1)
    route = db.get_dominant_session_model_route("s1")
    assert type(route) is dict
    assert route == {"model": "big", "billing_provider": "acme",
                     "billing_base_url": "https://acme", "billing_mode": route["billing_mode"],
                     "api_call_count": 3}


def test_update_session_billing_route_overwrites(db):
    db.create_session("s1", "cli", system_prompt="cached")
    db.update_token_counts("s1", input_tokens=1, billing_provider="old", api_call_count=1)
    assert db.update_session_billing_route("s1", provider="new", base_url="https://new",
                                           billing_mode="sub") is None
    row = db.get_session("s1")
    assert (row["billing_provider"], row["billing_base_url"], row["billing_mode"]) == \
        ("new", "https://new", "sub")
    assert row["system_prompt"] is None  # the cached prompt is rebuilt


def test_usage_totals(db):
    db.create_session("a", "cli")
    db.create_session("b", "cli")
    say(db, "a", "hi")
    db.update_token_counts("a", input_tokens=10, output_tokens=5, estimated_cost_usd=0.5)
    db.update_token_counts("b", input_tokens=99)  # no messages: below min_message_count=1
    totals = db.usage_totals()
    assert totals == {"tokens": 15, "cost_usd": 0.5}
    assert type(totals["tokens"]) is int and type(totals["cost_usd"]) is float
    assert db.usage_totals(min_message_count=0)["tokens"] == 114


def test_ensure_session(db):
    assert db.ensure_session("s1") == "s1"
    assert db.get_session("s1")["source"] == "unknown"
    db.create_session("s2", "telegram", model="m")
    assert db.ensure_session("s2", "cli", model="other") == "s2"
    assert (db.get_session("s2")["source"], db.get_session("s2")["model"]) == ("telegram", "m")


# -- session metadata ----------------------------------------------------------------------


def test_update_system_prompt(db):
    db.create_session("s1", "cli")
    assert db.update_system_prompt("s1", "Be brief.") is None
    assert db.get_session("s1")["system_prompt"] == "Be brief."


def test_update_session_model_records_model_and_provider(db):
    db.create_session("s1", "cli", model="old", model_config={"_branched_from": None})
    assert db.update_session_model("s1", "new", provider="acme") is None
    row = db.get_session("s1")
    assert row["model"] == "new"
    assert db.get_session_model_config_value("s1", "provider") == "acme"
    assert db.get_session_model_config_value("s1", "model") == "new"


def test_update_session_meta_replaces_the_config(db):
    db.create_session("s1", "cli", model="keep")
    assert db.update_session_meta("s1", json.dumps({"a": 1})) is None
    row = db.get_session("s1")
    assert json.loads(row["model_config"]) == {"a": 1} and row["model"] == "keep"
    db.update_session_meta("s1", json.dumps({"b": 2}), model="m2")
    assert db.get_session("s1")["model"] == "m2"


def test_patch_and_read_model_config(db):
    db.create_session("s1", "cli", model_config={"keep": 1, "drop": 2})
    assert db.patch_session_model_config("s1", {"new": "x", "drop": None}) is None
    assert db.get_session_model_config_value("s1", "new") == "x"
    assert db.get_session_model_config_value("s1", "keep") == 1
    assert db.get_session_model_config_value("s1", "drop", "gone") == "gone"
    assert db.get_session_model_config_value("missing", "k", 7) == 7


def test_update_session_runtime_lock(db):
    db.create_session("s1", "cli", model_config={"_branched_from": "p"})
    assert db.update_session_runtime_lock("s1", model="m", provider="acme",
                                          confirmed=True) is None
    lock = db.get_session_model_config_value("s1", "browser_model_lock")
    assert (lock["model"], lock["provider"], lock["confirmed"]) == ("m", "acme", True)
    assert db.get_session_model_config_value("s1", "_branched_from") == "p"


def test_yolo_round_trip_through_the_session_dict(db):
    db.create_session("s1", "cli")
    assert SessionDB.session_yolo_enabled(db.get_session("s1")) is False
    assert db.set_session_yolo("s1", True) is None
    assert SessionDB.session_yolo_enabled(db.get_session("s1")) is True
    assert db.session_yolo_enabled({"model_config": {"yolo_mode": True}}) is True
    assert SessionDB.session_yolo_enabled(None) is False
    assert SessionDB.session_yolo_enabled({"model_config": "not json"}) is False


def test_session_gateway_runtime_reads_the_session_dict():
    nested = {"model_config": json.dumps({"gateway_runtime": {"provider": "p", "x": None}})}
    assert SessionDB.session_gateway_runtime(nested) == {"provider": "p"}
    top = {"model_config": {"provider": "q", "base_url": "u", "other": 1}}
    assert SessionDB.session_gateway_runtime(top) == {"provider": "q", "base_url": "u"}
    assert SessionDB.session_gateway_runtime({"billing_provider": "acme"}) == {"provider": "acme"}
    assert SessionDB.session_gateway_runtime({"billing_provider": "auto"}) == {}
    assert SessionDB.session_gateway_runtime(None) == {}


def test_update_session_tool_names(db):
    db.create_session("s1", "cli")
    assert db.update_session_tool_names("s1", ["b", "a"]) is None
    assert json.loads(db.get_session("s1")["tool_names"]) == ["b", "a"]
    db.update_session_tool_names("s1", None)
    assert db.get_session("s1")["tool_names"] is None


def test_cwd_generation_and_git_publication(db):
    db.create_session("s1", "cli")
    assert db.update_session_cwd("missing", "/w") is None
    assert db.update_session_cwd("s1", "") is None
    first = db.update_session_cwd("s1", "/work/a")
    second = db.update_session_cwd("s1", "/work/a", git_branch="main")
    assert isinstance(first, int) and second == first + 1
    assert db.get_session("s1")["git_branch"] == "main"
    assert db.publish_session_git_metadata("s1", "/work/a", first, git_branch="stale") is False
    assert db.publish_session_git_metadata("s1", "/work/a", second, git_branch="feat",
                                           git_repo_root="/work") is True
    row = db.get_session("s1")
    assert (row["git_branch"], row["git_repo_root"]) == ("feat", "/work")
    assert db.publish_session_git_metadata("s1", "/elsewhere", second, git_branch="x") is False


def test_backfill_repo_roots_fills_only_empty_roots(db):
    db.create_session("a", "cli", cwd="/p")
    db.create_session("b", "cli", cwd="/p", git_repo_root="/kept")
    db.create_session("c", "cli", cwd="/q")
    assert db.backfill_repo_roots({"/p": "/root-p", "/q": ""}) is None
    assert db.get_session("a")["git_repo_root"] == "/root-p"
    assert db.get_session("b")["git_repo_root"] == "/kept"
    assert db.get_session("c")["git_repo_root"] is None


def test_set_expiry_finalized(db):
    db.create_session("s1", "telegram")
    assert db.set_expiry_finalized("s1") is None
    assert db.get_session("s1")["expiry_finalized"] == 1
    db.set_expiry_finalized("s1", False)
    assert db.get_session("s1")["expiry_finalized"] == 0


def test_backfill_null_session_profiles(db):
    db.create_session("a", "cli")
    db.create_session("b", "cli", profile_name="work")
    nulls = sum(1 for s in ("a", "b") if not db.get_session(s)["profile_name"])
    assert db.backfill_null_session_profiles("main") == nulls
    assert db.get_session("b")["profile_name"] == "work"  # an owner is never overwritten
    assert db.backfill_null_session_profiles("main") == 0
    assert db.backfill_null_session_profiles("   ") == 0


# -- activity ------------------------------------------------------------------------------


def test_activity_touch_read_and_clear(db):
    db.create_session("s1", "cli")
    assert db.get_session_activity("missing") is None
    now = time.time()
    assert db.touch_session_activity("s1", now, description="compressing",
                                     provenance="agent.compression") is None
    snap = db.get_session_activity("s1")
    assert type(snap) is dict
    assert snap["last_activity_at"] == pytest.approx(now)
    assert snap["last_activity_description"] == "compressing"
    assert snap["last_activity_provenance"] == "agent.compression"
    db.touch_session_activity("s1", now - 100, description="older")  # never backwards
    assert db.get_session_activity("s1")["last_activity_description"] == "compressing"
    assert db.clear_session_activity_labels("s1") is None
    snap = db.get_session_activity("s1")
    assert not snap["last_activity_description"]
    assert snap["last_activity_at"] == pytest.approx(now)


# -- message rows --------------------------------------------------------------------------


def test_set_latest_user_api_content(db):
    db.create_session("s1", "cli")
    say(db, "s1", "first", "latest")
    assert db.set_latest_user_api_content("s1", "not the latest", "side") == 0
    assert db.set_latest_user_api_content("s1", "latest", "with sidecar") == 1
    assert db.get_messages("s1")[-1]["api_content"] == "with sidecar"
    assert db.get_messages("s1")[0]["api_content"] is None


def test_set_latest_matching_message_display_kind(db):
    db.create_session("s1", "cli")
    say(db, "s1", "/cmd", "/cmd")
    assert db.set_latest_matching_message_display_kind(
        "s1", role="user", content="/cmd", display_kind="slash",
        display_metadata={"name": "cmd"}) is True
    msgs = db.get_messages("s1")
    assert (msgs[0]["display_kind"], msgs[1]["display_kind"]) == (None, "slash")
    assert msgs[1]["display_metadata"] == {"name": "cmd"}
    assert db.set_latest_matching_message_display_kind(
        "s1", role="user", content="absent", display_kind="slash") is False


def test_row_helpers(db):
    db.create_session("s1", "cli")
    u1, a1, u2 = (say(db, "s1", "q1")[0], say(db, "s1", "a1", role="assistant")[0],
                  say(db, "s1", "q2")[0])
    empty = db.store.append_message("s1", "assistant", None,
                                    tool_calls=[{"id": "c", "type": "function"}])
    assert db.get_message_role("s1", a1) == "assistant"
    assert db.get_message_role("other", a1) is None
    assert db.latest_user_message_row_id("s1") == u2
    assert db.latest_message_row_id("s1", offset=1) == u1
    assert db.latest_message_row_id("s1", role="assistant") == a1  # text required
    assert db.latest_message_row_id("s1", role="assistant", require_text=False) == empty
    assert db.latest_message_row_id("s1", role="system") is None
    assert db.get_active_message_ids("s1") == [u1, a1, u2, empty]
    assert db.get_active_message_watermark("s1") == empty
    assert db.get_active_message_watermark("missing") == 0
    assert db.has_archived_messages("s1") is False
    db.store.rewind_to_message("s1", u2)
    assert db.has_archived_messages("s1") is True
    assert db.get_message_role("s1", empty) is None  # inactive now
    assert u2 not in db.get_active_message_ids("s1")


def test_has_platform_message_id(db):
    db.create_session("s1", "telegram")
    say(db, "s1", "hi", platform_message_id="tg-42")
    assert db.has_platform_message_id("s1", "tg-42") is True
    assert db.has_platform_message_id("s1", "tg-43") is False
    assert db.has_platform_message_id("other", "tg-42") is False


# -- titles --------------------------------------------------------------------------------


def test_title_helpers(db):
    db.create_session("s1", "cli")
    db.create_session("s2", "cli")
    assert db.get_session_title("s1") is None and db.get_session_title_source("s1") is None
    assert db.set_session_title_source("s1", "llm") is False  # untitled
    assert db.set_auto_title_if_empty("s1", "from the model") is True
    assert (db.get_session_title("s1"), db.get_session_title_source("s1")) == \
        ("from the model", "llm")
    assert db.set_session_title_source("s1", "user") is True
    assert db.get_session_title_source("s1") == "user"
    assert db.set_auto_title_if_empty("s1", "another") is False
    with pytest.raises(ValueError):
        db.set_session_title_source("s1", "robot")
    db.set_session_title("s2", "typed")
    assert db.set_auto_title_if_empty("s2", "model") is False
    assert db.get_session_title("missing") is None


# -- conversation projections --------------------------------------------------------------


def test_get_messages_as_conversation(db):
    db.create_session("s1", "cli")
    u, a = say(db, "s1", "hello")[0], say(db, "s1", "hi there", role="assistant")[0]
    conv = db.get_messages_as_conversation("s1")
    assert [(m["role"], m["content"]) for m in conv] == [("user", "hello"),
                                                         ("assistant", "hi there")]
    with_ids = db.get_messages_as_conversation("s1", include_row_ids=True)
    assert [m["_row_id"] for m in with_ids] == [u, a]
    assert db.get_messages_as_conversation("missing") == []


def test_resume_projections_and_ancestor_prefix(db):
    db.create_session("root", "cli")
    say(db, "root", "before compression")
    db.end_session("root", "compression")
    db.create_session("tip", "cli", parent_session_id="root")
    say(db, "tip", "after compression")
    model, display = db.get_resume_conversations("tip")
    assert isinstance(model, list) and isinstance(display, list)
    assert [m["content"] for m in model] == ["after compression"]
    assert [m["content"] for m in display] == ["before compression", "after compression"]
    assert db.get_resume_message_count("tip") == 2
    assert db.get_resume_message_count("tip", tip_only=True) == 1
    prefix = db.get_ancestor_display_prefix("tip")
    assert [m["content"] for m in prefix] == ["before compression"]
    assert "_row_id" not in prefix[0]
    assert db.get_ancestor_display_prefix("root") == []
    ancestors = db.get_messages_as_conversation("tip", include_ancestors=True)
    assert [m["content"] for m in ancestors] == ["before compression", "after compression"]


def test_get_conversation_root(db):
    chain(db, "root", "mid", "tip")
    db.create_session("alone", "cli")
    assert db.get_conversation_root("tip") == "root"
    assert db.get_conversation_root("alone") == "alone"


# -- identity and reset --------------------------------------------------------------------


def test_resolve_session_id_by_exact_id_or_unique_prefix(db):
    db.create_session("20260101_abc", "cli")
    db.create_session("20260101_abd", "cli")
    db.create_session("20260202_xyz", "cli")
    assert db.resolve_session_id("20260101_abc") == "20260101_abc"
    assert db.resolve_session_id("20260202") == "20260202_xyz"
    assert db.resolve_session_id("20260101_ab") is None  # ambiguous
    assert db.resolve_session_id("nothing") is None


def test_fork_identity(db):
    chain(db, "root", "tip")
    db.store.create_child_session("root", "branch", "branch")
    assert db.is_explicit_fork_child("branch") is True
    assert db.is_explicit_fork_child("tip") is False
    assert db.is_explicit_fork_child("missing") is False
    assert db.declared_scope_identity("branch") == (True, "cli")
    assert type(db.declared_scope_identity("tip")) is tuple
    assert db.declared_scope_identity("tip") == (False, "cli")
    assert db.declared_scope_identity("missing") == (False, "")


def test_promote_to_session_reset_and_the_boundary_counter(db):
    key = "agent:main:telegram:dm:7"
    db.create_session("s1", "telegram", session_key=key)
    assert db.latest_conversation_boundary(key, "telegram") is None
    assert db.promote_to_session_reset("s1") is True
    assert db.get_session("s1")["end_reason"] == "session_reset"
    assert db.latest_conversation_boundary(key, "telegram") == 1
    assert db.latest_conversation_boundary(key, "discord") is None  # the peer is (key, source)
    db.create_session("s2", "telegram", session_key=key)
    db.end_session("s2", "compression")
    assert db.promote_to_session_reset("s2", "idle") is False  # an explicit boundary stays
    assert db.get_session("s2")["end_reason"] == "compression"
    assert db.promote_to_session_reset("") is False


def test_session_unread_reads_a_session_dict():
    assert SessionDB.session_unread({"last_read_at": None, "last_active": 5}) is False
    assert SessionDB.session_unread({"last_read_at": 1.0, "last_active": 5.0}) is True
    assert SessionDB.session_unread({"last_read_at": 9.0, "started_at": 5.0}) is False
    assert SessionDB.session_unread({"last_read_at": 0, "started_at": 1.0}) is True


# -- listing -------------------------------------------------------------------------------


def test_session_count_by_source(db):
    db.create_session("a", "cli")
    db.create_session("b", "cli")
    db.create_session("t", "telegram")
    db.create_session("old", "cron")
    db.set_session_archived("old", True)
    chain(db, "root", "tip")
    got = db.session_count_by_source()
    assert type(got) is dict and got == {"cli": 4, "telegram": 1}
    assert db.session_count_by_source(exclude_children=True) == {"cli": 3, "telegram": 1}
    assert db.session_count_by_source(archived_only=True) == {"cron": 1}
    assert db.session_count_by_source(include_archived=True)["cron"] == 1


def test_session_lifecycle_statuses(db):
    for sid in ("done", "asked", "empty"):
        db.create_session(sid, "cli")
    say(db, "done", "q")
    say(db, "done", "answer", role="assistant")
    say(db, "asked", "question")
    got = db.session_lifecycle_statuses(["done", "asked", "empty", ""])
    assert got == {"done": "complete", "asked": "interrupted", "empty": "empty"}
    assert type(got) is dict
    assert db.session_lifecycle_statuses([]) == {}
