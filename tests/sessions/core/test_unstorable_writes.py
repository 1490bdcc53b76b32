"""Issue 31 item 8, every write path: each public ``SessionStore`` method that writes takes
its callers' text (ids, keys, sources, holders, platform keys, model names …) only when both
backends can store it. NUL or a lone surrogate in any such argument raises
:class:`~hermes_data.errors.UnstorableValueError` naming the argument, before anything is
written — on SQLite too, which could store NUL (PostgreSQL refuses it: a store must copy
between them unchanged).

One table drives them all: each entry is a call with valid arguments, and the test puts the
bad value in one text argument at a time, then compares every table of the store before and
after. Values with documented encodings are not in it: message ``content`` (docs/sessions.md
§6.1), titles (sanitized), JSON-encoded values (``model_config`` patches, tool names,
reactions) and diagnostic text (handoff and cooldown errors, activity descriptions), whose
NUL becomes U+FFFD (the last test).
"""

from __future__ import annotations

from typing import Any, Callable

import pytest
import sqlalchemy as sa

from hermes_data.errors import UnstorableValueError
from hermes_data.sessions.store import SessionStore

from tests.sessions.conftest import BACKENDS, module_target, qmark_for_tests

BAD = {"nul": "a\x00b", "surrogate": "a\ud800b"}

Call = Callable[[SessionStore, dict[str, Any]], Any]

M = [{"role": "user", "content": "handoff"}]


def _peer(s: SessionStore, a: dict[str, Any]) -> Any:
    sid = a.pop("session_id")
    return s.record_gateway_session_peer(sid, **a)


def _kw(name: str) -> Call:
    return lambda s, a: getattr(s, name)(**a)


def _pos(name: str, *positional: str) -> Call:
    def call(s: SessionStore, a: dict[str, Any]) -> Any:
        a = dict(a)
        first = [a.pop(p) for p in positional]
        return getattr(s, name)(*first, **a)
    return call


#: method → (call, valid arguments, the text arguments checked). A value that is a list or a
#: dict gets the bad value as an element (a dict: as a key and, separately, as a value).
WRITES: dict[str, tuple[Call, dict[str, Any], tuple[str, ...]]] = {
    # core (store.py)
    "create_session": (_pos("create_session", "session_id", "source"), dict(
        session_id="n", source="cli", user_id="u", session_key="k", chat_id="c",
        chat_type="dm", thread_id="t", display_name="d", origin_json="{}", model="m",
        system_prompt="p", parent_session_id="s", cwd="/w", git_branch="b",
        git_repo_root="/w", profile_name="default"), (
        "session_id", "source", "user_id", "session_key", "chat_id", "chat_type", "thread_id",
        "display_name", "origin_json", "model", "system_prompt", "parent_session_id", "cwd",
        "git_branch", "git_repo_root", "profile_name")),
    "create_child_session": (_pos("create_child_session", "parent_id", "child_id", "kind"),
                             dict(parent_id="s", child_id="n", kind="branch", source="cli",
                                  cwd="/w"), ("parent_id", "child_id", "source", "cwd")),
    "end_session": (_pos("end_session", "session_id", "end_reason"),
                    dict(session_id="s", end_reason="user_exit"), ("session_id", "end_reason")),
    "reopen_session": (_pos("reopen_session", "session_id"), dict(session_id="e"),
                       ("session_id",)),
    "set_session_title": (_pos("set_session_title", "session_id", "title"),
                          dict(session_id="s", title="new"), ("session_id",)),
    "set_auto_title": (_pos("set_auto_title", "session_id", "title", "source"),
                       dict(session_id="u2", title="auto", source="llm"), ("session_id",)),
    "set_session_archived": (_pos("set_session_archived", "session_id"),
                             dict(session_id="s"), ("session_id",)),
    "set_session_hidden": (_pos("set_session_hidden", "session_id"), dict(session_id="s"),
                           ("session_id",)),
    "set_session_read": (_pos("set_session_read", "session_id"), dict(session_id="s"),
                         ("session_id",)),
    "set_session_pinned": (_pos("set_session_pinned", "session_id"), dict(session_id="s"),
                           ("session_id",)),
    "set_meta": (_pos("set_meta", "key", "value"), dict(key="k2", value="v"), ("key", "value")),
    # agent
    "update_token_counts": (_pos("update_token_counts", "session_id"), dict(
        session_id="s", input_tokens=3, model="m", billing_provider="p",
        billing_base_url="http://x", billing_mode="m", cost_status="c", cost_source="c",
        pricing_version="v"), ("session_id", "model", "billing_provider", "billing_base_url",
                               "billing_mode", "cost_status", "cost_source", "pricing_version")),
    "queue_token_counts": (_pos("queue_token_counts", "session_id"), dict(
        session_id="s", input_tokens=3, model="m", billing_provider="p"),
        ("session_id", "model", "billing_provider")),
    "update_session_billing_route": (_pos("update_session_billing_route", "session_id"), dict(
        session_id="s", provider="p", base_url="http://x", billing_mode="m"),
        ("session_id", "provider", "base_url", "billing_mode")),
    "ensure_session": (_pos("ensure_session", "session_id", "source"), dict(
        session_id="n", source="cli", model="m", cwd="/w"),
        ("session_id", "source", "model", "cwd")),
    "update_system_prompt": (_pos("update_system_prompt", "session_id", "system_prompt"),
                             dict(session_id="s", system_prompt="p2"),
                             ("session_id", "system_prompt")),
    "update_session_model": (_pos("update_session_model", "session_id", "model"),
                             dict(session_id="s", model="m2", provider="p"),
                             ("session_id", "model", "provider")),
    "update_session_meta": (_pos("update_session_meta", "session_id", "model_config_json"),
                            dict(session_id="s", model_config_json="{}", model="m2"),
                            ("session_id", "model")),
    "patch_session_model_config": (_pos("patch_session_model_config", "session_id", "patch"),
                                   dict(session_id="s", patch={"x": 1}), ("session_id",)),
    "update_session_runtime_lock": (_pos("update_session_runtime_lock", "session_id"), dict(
        session_id="s", model="m2", provider="p", route_source="r"),
        ("session_id", "model", "provider", "route_source")),
    "set_session_yolo": (_pos("set_session_yolo", "session_id", "enabled"),
                         dict(session_id="s", enabled=True), ("session_id",)),
    "update_session_tool_names": (_pos("update_session_tool_names", "session_id", "tool_names"),
                                  dict(session_id="s", tool_names=["t"]), ("session_id",)),
    "update_session_cwd": (_pos("update_session_cwd", "session_id", "cwd"), dict(
        session_id="s", cwd="/x", git_branch="b", git_repo_root="/x"),
        ("session_id", "cwd", "git_branch", "git_repo_root")),
    "publish_session_git_metadata": (_pos("publish_session_git_metadata", "session_id", "cwd",
                                          "generation"), dict(
        session_id="s", cwd="/w", generation=1, git_branch="b2", git_repo_root="/w2"),
        ("session_id", "cwd", "git_branch", "git_repo_root")),
    "backfill_repo_roots": (_pos("backfill_repo_roots", "cwd_to_root"),
                            dict(cwd_to_root={"/w": "/w"}), ("cwd_to_root",)),
    "set_expiry_finalized": (_pos("set_expiry_finalized", "session_id"), dict(session_id="s"),
                             ("session_id",)),
    "touch_session_activity": (_pos("touch_session_activity", "session_id"),
                               dict(session_id="s", description="d"), ("session_id",)),
    "clear_session_activity_labels": (_pos("clear_session_activity_labels", "session_id"),
                                      dict(session_id="a"), ("session_id",)),
    "set_latest_user_api_content": (_pos("set_latest_user_api_content", "session_id",
                                         "content", "api_content"),
                                    dict(session_id="s", content="hello", api_content="x"),
                                    ("session_id", "api_content")),
    "set_latest_matching_message_display_kind": (_pos(
        "set_latest_matching_message_display_kind", "session_id"), dict(
        session_id="s", role="user", content="hello", display_kind="k"),
        ("session_id", "role", "display_kind")),
    "set_auto_title_if_empty": (_pos("set_auto_title_if_empty", "session_id", "title"),
                                dict(session_id="u2", title="auto"), ("session_id",)),
    "set_session_title_source": (_pos("set_session_title_source", "session_id", "source"),
                                 dict(session_id="s", source="llm"), ("session_id",)),
    "promote_to_session_reset": (_pos("promote_to_session_reset", "session_id", "reason"),
                                 dict(session_id="s", reason="session_reset"), ("session_id",)),
    # coordination
    "try_acquire_compression_lock": (_pos("try_acquire_compression_lock", "session_id",
                                          "holder"), dict(session_id="s", holder="h"),
                                     ("session_id", "holder")),
    "refresh_compression_lock": (_pos("refresh_compression_lock", "session_id", "holder"),
                                 dict(session_id="L", holder="h"), ("session_id", "holder")),
    "release_compression_lock": (_pos("release_compression_lock", "session_id", "holder"),
                                 dict(session_id="L", holder="h"), ("session_id", "holder")),
    "publish_compression_child": (_pos("publish_compression_child", "parent_session_id",
                                       "child_session_id", "source", "messages"), dict(
        parent_session_id="s", child_session_id="n", source="cli", messages=M, model="m",
        system_prompt="p", cwd="/w", profile_name="default"), (
        "parent_session_id", "child_session_id", "source", "model", "system_prompt", "cwd",
        "profile_name")),
    "publish_compression_child ": (_pos("publish_compression_child", "parent_session_id",
                                        "child_session_id", "source", "messages"), dict(
        parent_session_id="L", child_session_id="n", source="cli", messages=M,
        compression_lock_holder="h"), ("compression_lock_holder",)),
    "try_acquire_session_turn_lease": (_pos("try_acquire_session_turn_lease", "session_id",
                                            "holder"), dict(session_id="s", holder="h"),
                                       ("session_id", "holder")),
    "acquire_session_turn_lease": (_pos("acquire_session_turn_lease", "session_id", "holder"),
                                   dict(session_id="s", holder="h", wait_seconds=0.0),
                                   ("session_id", "holder")),
    "refresh_session_turn_lease": (_pos("refresh_session_turn_lease", "session_id", "holder"),
                                   dict(session_id="T", holder="h"), ("session_id", "holder")),
    "release_session_turn_lease": (_pos("release_session_turn_lease", "session_id", "holder"),
                                   dict(session_id="T", holder="h"), ("session_id", "holder")),
    "append_message": (_pos("append_message", "session_id", "role", "content"), dict(
        session_id="T", role="user", content="x", turn_lease_holder="h"),
        ("session_id", "role", "turn_lease_holder")),
    "append_messages_batch": (_pos("append_messages_batch", "session_id", "messages"), dict(
        session_id="T", messages=M, turn_lease_holder="h"),
        ("session_id", "turn_lease_holder")),
    "replace_messages": (_pos("replace_messages", "session_id", "messages"),
                         dict(session_id="s", messages=M), ("session_id",)),
    "clear_messages": (_pos("clear_messages", "session_id"), dict(session_id="s"),
                       ("session_id",)),
    "archive_and_compact": (_pos("archive_and_compact", "session_id", "compacted_messages"),
                            dict(session_id="L", compacted_messages=M, lock_holder="h"),
                            ("session_id", "lock_holder")),
    "rewind_to_message": (_pos("rewind_to_message", "session_id", "target_message_id"),
                          dict(session_id="s", target_message_id=1), ("session_id",)),
    "restore_rewound": (_pos("restore_rewound", "session_id", "since_message_id"),
                        dict(session_id="s", since_message_id=3), ("session_id",)),
    "reopen_orphaned_compression_session": (_pos("reopen_orphaned_compression_session",
                                                 "session_id"), dict(session_id="e"),
                                            ("session_id",)),
    "record_compression_failure_cooldown": (_pos("record_compression_failure_cooldown",
                                                 "session_id", "cooldown_until"),
                                            dict(session_id="s", cooldown_until=9e9),
                                            ("session_id",)),
    "restore_compression_failure_cooldown_row": (_pos(
        "restore_compression_failure_cooldown_row", "session_id", "snapshot"),
        dict(session_id="s", snapshot={"session_exists": True, "cooldown_until": 9e9, "error": "e"}), ("session_id",)),
    "clear_compression_failure_cooldown": (_pos("clear_compression_failure_cooldown",
                                                "session_id"), dict(session_id="C"),
                                           ("session_id",)),
    "set_compression_fallback_streak": (_pos("set_compression_fallback_streak", "session_id",
                                             "value"), dict(session_id="s", value=2),
                                        ("session_id",)),
    "set_compression_ineffective_count": (_pos("set_compression_ineffective_count",
                                               "session_id", "value"),
                                          dict(session_id="s", value=2), ("session_id",)),
    "set_compression_overload_streak": (_pos("set_compression_overload_streak", "session_id",
                                             "value"), dict(session_id="s", value=2),
                                        ("session_id",)),
    "set_compression_recovery_deadline": (_pos("set_compression_recovery_deadline",
                                               "session_id", "deadline"),
                                          dict(session_id="s", deadline=9e9), ("session_id",)),
    "sweep_orphaned_sessions": (_kw("sweep_orphaned_sessions"), dict(
        max_idle_seconds=0.0, sources=["cli"], exclude_ids=["x"]), ("sources", "exclude_ids")),
    "unarchive_recoverable_session": (_pos("unarchive_recoverable_session", "session_id"),
                                      dict(session_id="A"), ("session_id",)),
    "delete_session_if_empty": (_pos("delete_session_if_empty", "session_id"),
                                dict(session_id="E0"), ("session_id",)),
    # gateway
    "save_gateway_routing_entry": (_pos("save_gateway_routing_entry", "session_key",
                                        "entry_json"), dict(
        session_key="k", entry_json='{"b": 2}', scope="sc", if_current='{"a": 1}'),
        ("session_key", "entry_json", "scope", "if_current")),
    "replace_gateway_routing_entries": (_pos("replace_gateway_routing_entries", "entries"),
                                        dict(entries={"k": '{"a": 1}', "k3": "{}"},
                                             scope="sc"), ("entries", "scope")),
    "delete_gateway_routing_entries": (_pos("delete_gateway_routing_entries", "session_keys"),
                                       dict(session_keys=["k"], scope="sc"),
                                       ("session_keys", "scope")),
    "increment_hygiene_failure_streak": (_pos("increment_hygiene_failure_streak",
                                              "session_key"), dict(session_key="k"),
                                         ("session_key",)),
    "reset_hygiene_failure_streak": (_pos("reset_hygiene_failure_streak", "session_key"),
                                     dict(session_key="H"), ("session_key",)),
    "record_gateway_session_peer": (_peer, dict(
        session_id="s", source="telegram", user_id="u", session_key="k", chat_id="c",
        chat_type="dm", thread_id="t", display_name="d", origin_json="{}"), (
        "session_id", "source", "user_id", "session_key", "chat_id", "chat_type", "thread_id",
        "display_name", "origin_json")),
    "adopt_orphaned_gateway_session": (_pos("adopt_orphaned_gateway_session", "orphan_id",
                                            "donor_id"), dict(orphan_id="s", donor_id="e"),
                                       ("orphan_id", "donor_id")),
    "request_handoff": (_pos("request_handoff", "session_id", "platform"),
                        dict(session_id="s", platform="telegram"), ("session_id", "platform")),
    "claim_handoff": (_pos("claim_handoff", "session_id"),
                      dict(session_id="P", claimant="c"), ("session_id", "claimant")),
    "complete_handoff": (_pos("complete_handoff", "session_id"),
                         dict(session_id="P", claimant="c"), ("session_id", "claimant")),
    "fail_handoff": (_pos("fail_handoff", "session_id", "error"), dict(
        session_id="P", error="e", only_states=["pending"], claimant="c"),
        ("session_id", "claimant")),
    "reclaim_stale_running_handoffs": (_pos("reclaim_stale_running_handoffs", "error"),
                                       dict(error="e", claimant="c"), ("claimant",)),
    "register_backend_heartbeat": (_kw("register_backend_heartbeat"), dict(
        backend_id="b2", pid=1, started_at=1.0, profile="p", host="h"),
        ("backend_id", "profile", "host")),
    "clear_backend_heartbeat": (_pos("clear_backend_heartbeat", "backend_id"),
                                dict(backend_id="b"), ("backend_id",)),
    "retag_kanban_worker_sessions": (_pos("retag_kanban_worker_sessions", "workspaces_root"),
                                     dict(workspaces_root="/w"), ("workspaces_root",)),
    "enable_telegram_topic_mode": (_kw("enable_telegram_topic_mode"), dict(
        chat_id="c2", user_id="u", profile_name="default"), ("chat_id", "user_id")),
    "disable_telegram_topic_mode": (_kw("disable_telegram_topic_mode"),
                                    dict(chat_id="c"), ("chat_id",)),
    "bind_telegram_topic": (_kw("bind_telegram_topic"), dict(
        chat_id="c", thread_id="t2", user_id="u", session_key="k", session_id="e",
        managed_mode="auto"), ("chat_id", "thread_id", "user_id", "session_key", "session_id",
                               "managed_mode")),
    "delete_telegram_topic_binding": (_kw("delete_telegram_topic_binding"),
                                      dict(chat_id="c", thread_id="t"),
                                      ("chat_id", "thread_id")),
    # ui
    "ensure_display_order": (_pos("ensure_display_order", "session_id"), dict(session_id="s"),
                             ("session_id",)),
    "set_message_reaction": (_pos("set_message_reaction", "session_id", "message_row_id",
                                  "emoji"), dict(session_id="s", message_row_id=1, emoji="+1"),
                             ("session_id",)),
    "take_unseen_reactions": (_pos("take_unseen_reactions", "session_id"),
                              dict(session_id="s"), ("session_id",)),
}


#: Text stored scrubbed like a message's (lone surrogates → U+FFFD), so only NUL is refused.
SCRUBBED = {("set_latest_user_api_content", "api_content"),
            ("set_latest_matching_message_display_kind", "display_kind")}


def _cases() -> list[Any]:
    out = []
    for method, (_call, args, texts) in WRITES.items():
        for arg in texts:
            value = args[arg]
            shapes = ("key", "value") if isinstance(value, dict) else (None,)
            for shape in shapes:
                for kind in BAD:
                    if kind == "surrogate" and (method, arg) in SCRUBBED:
                        continue
                    tag = f"{method.strip()}-{arg}{'-' + shape if shape else ''}-{kind}"
                    out.append(pytest.param(method, arg, shape, kind, id=tag))
    return out


def _seed(s: SessionStore) -> None:
    """Rows each write above would change with its valid arguments."""
    s.apply_telegram_topic_migration()
    s.create_session("s", "cli", user_id="u", session_key="k", chat_id="c", cwd="/w")
    s.append_message("s", "user", "hello")
    s.append_message("s", "assistant", "hi")
    for sid in ("e", "a", "u2", "A", "E0", "P", "L", "T", "C"):
        s.create_session(sid, "telegram", session_key="k", chat_id="c")
    s.append_message("T", "user", "t")
    s.end_session("e", "user_exit")
    s.set_session_archived("A")
    s.touch_session_activity("a", description="working")
    s.request_handoff("P", "telegram")
    s.try_acquire_compression_lock("L", "h")
    s.append_message("L", "user", "l")
    s.try_acquire_session_turn_lease("T", "h")
    s.record_compression_failure_cooldown("C", 9e9, "boom")
    s.set_meta("k1", "v1")
    s.save_gateway_routing_entry("k", '{"a": 1}', scope="sc")
    s.increment_hygiene_failure_streak("H")
    s.register_backend_heartbeat(backend_id="b", pid=1, started_at=1.0)
    s.enable_telegram_topic_mode(chat_id="c", user_id="u")
    s.bind_telegram_topic(chat_id="c", thread_id="t", user_id="u", session_key="k",
                          session_id="s")
    s.flush_token_counts()


@pytest.fixture(scope="module", params=BACKENDS)
def seeded(request, tmp_path_factory):
    target = module_target(request, tmp_path_factory, "unstorable-writes")
    with SessionStore(target) as s:
        if request.param == "postgresql":
            qmark_for_tests(s)
        _seed(s)
        yield s


def _digest(s: SessionStore) -> dict[str, list[str]]:
    """Every row of every table (SQLite's FTS shadow tables included)."""
    s.flush_token_counts()
    engine = s.engine
    with engine.connect() as conn:
        names = sa.inspect(conn).get_table_names()
        return {n: sorted(repr(tuple(r)) for r in conn.exec_driver_sql(
            f'SELECT * FROM "{n}"').fetchall()) for n in names}


@pytest.mark.parametrize("method,arg,shape,kind", _cases())
def test_every_write_refuses_unstorable_text_before_writing(seeded, method, arg, shape, kind):
    call, args, _texts = WRITES[method]
    bad = BAD[kind]
    args = dict(args)
    value = args[arg]
    if isinstance(value, list):
        args[arg] = [*value, bad]
    elif isinstance(value, dict):
        args[arg] = {**value, bad: "v"} if shape == "key" else {**value, "k9": bad}
    else:
        args[arg] = bad
    before = _digest(seeded)
    with pytest.raises(UnstorableValueError) as info:
        call(seeded, args)
    assert info.value.argument == arg, str(info.value)
    assert info.value.value == bad and arg in str(info.value)
    assert _digest(seeded) == before, f"{method}({arg}=...) wrote before refusing"


@pytest.mark.parametrize("method", list(WRITES))
def test_each_entry_is_a_valid_call(tmp_path, method):
    """Each entry's valid arguments are accepted on a freshly seeded store (so the refusals
    above come from the bad value alone)."""
    call, args, _texts = WRITES[method]
    with SessionStore(tmp_path / "state.db") as s:
        _seed(s)
        call(s, dict(args))


def test_diagnostic_text_keeps_nul_as_replacement_character(seeded):
    """Free diagnostic text is never refused: NUL becomes U+FFFD and a lone surrogate U+FFFD,
    on both backends (an error message must not cost the failure it reports)."""
    seeded.create_session("d", "telegram")
    seeded.touch_session_activity("d", description="step\x00 \ud800two")
    assert seeded.get_session_activity("d").last_activity_description == "step\ufffd \ufffdtwo"
    seeded.record_compression_failure_cooldown("d", 9e9, "bo\x00om")
    assert seeded.get_compression_failure_cooldown_row("d").error == "bo\ufffdom"
    seeded.request_handoff("d", "telegram")
    assert seeded.fail_handoff("d", "fa\x00il")
    assert seeded.get_handoff_state("d").error == "fa\ufffdil"


@pytest.mark.parametrize("arg", ["session_id", "task", "model", "billing_provider"])
def test_auxiliary_usage_stays_best_effort(seeded, arg):
    """``record_auxiliary_usage`` never raises (an auxiliary call never fails because its
    accounting did): unstorable text is False, a WARNING, and nothing written."""
    args = dict(session_id="s", task="vision", model="m", billing_provider="p",
                input_tokens=5)
    args[arg] = BAD["nul"]
    before = _digest(seeded)
    sid = args.pop("session_id")
    task = args.pop("task")
    assert seeded.record_auxiliary_usage(sid, task, **args) is False
    assert _digest(seeded) == before


@pytest.mark.parametrize("field", ["id", "source", "cwd", "model", "parent_session_id"])
def test_import_reports_unstorable_text_and_imports_nothing(seeded, field):
    """``import_sessions`` validates before its transaction: NUL in a session's id or text
    column is an issue naming it (``ok=False``), nothing imported — SQLite stored it."""
    entry = {"id": "imp", "source": "cli", "cwd": "/w", "model": "m",
             "parent_session_id": None, "messages": [{"role": "user", "content": "x"}]}
    entry[field] = BAD["nul"]
    before = _digest(seeded)
    result = seeded.import_sessions([entry])
    assert not result.ok and result.imported == 0
    assert any(e.error.startswith(f"{field} contains NUL") for e in result.errors), \
        result.errors
    assert _digest(seeded) == before
