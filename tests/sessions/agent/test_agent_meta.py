"""Session metadata of the agent turn API (spec sessions-ext-agent.md §3.3, §3.9, §3.10;
acceptance behaviours 18–23 and the profile half of 42), on SQLite files and PostgreSQL."""

from __future__ import annotations

import json
import multiprocessing

import pytest

from hermes_data.sessions.store import SessionStore


def _sql(store, statement, params=()):
    with store.engine.begin() as conn:
        result = conn.exec_driver_sql(statement, params)
        return result.fetchall() if result.returns_rows else None


def _config(store, sid):
    return json.loads(store.get_session(sid).model_config or "null")


def test_ab18_meta_keeps_lineage_markers_and_patches_refuse_them(store):
    """AB18: ``update_session_meta`` keeps the stored lineage markers; a patch touching one ⇒
    ValueError; a non-JSON stored config merges as {} and the value read returns the default."""
    store.create_session("root", "cli")
    store.create_child_session("root", "kid", "branch", model_config={"a": 1})
    store.update_session_meta("kid", json.dumps({"b": 2, "_branched_from": "evil",
                                                  "_delegate_from": "x"}), model="m")
    assert _config(store, "kid") == {"b": 2, "_branched_from": "root"}
    assert store.get_session("kid").model == "m"
    with pytest.raises(ValueError, match="_reset_from"):
        store.patch_session_model_config("kid", {"_reset_from": "root"})
    with pytest.raises(ValueError):
        store.update_session_meta("kid", "[1, 2]")
    assert store.patch_session_model_config("kid", {}) is False
    assert store.patch_session_model_config("missing", {"a": 1}) is False
    _sql(store, "UPDATE sessions SET model_config = 'not json' WHERE id = 'root'")
    assert store.get_session_model_config_value("root", "a", "dflt") == "dflt"
    assert store.patch_session_model_config("root", {"a": 1, "gone": None}) is True
    assert _config(store, "root") == {"a": 1}
    assert store.patch_session_model_config("root", {"a": None}) is True
    assert store.get_session("root").model_config is None  # {} is stored as NULL
    assert store.get_session_model_config_value("missing", "a", 7) == 7


def test_ab19_yolo_and_gateway_runtime_readers(store):
    """AB19: ``session_yolo_enabled`` is True only for JSON true (or 1);
    ``session_gateway_runtime`` precedence: nested with provider, top-level keys,
    ``billing_provider`` unless auto/custom."""
    yolo = SessionStore.session_yolo_enabled
    for value, want in (('"false"', False), ('"true"', False), ("0", False), ("true", True),
                        ("1", True), ("1.0", False)):
        assert yolo({"model_config": f'{{"yolo_mode": {value}}}'}) is want, value
    assert yolo({"model_config": "{"}) is False and yolo(None) is False
    assert yolo({"model_config": "{}"}) is False
    store.create_session("y", "cli")
    assert store.set_session_yolo("y", True) is True
    assert store.session_yolo_enabled(store.get_session("y")) is True
    assert store.set_session_yolo("nope", True) is False
    rt = SessionStore.session_gateway_runtime
    nested = {"gateway_runtime": {"provider": "x", "base_url": None, "api_mode": "chat"},
              "provider": "top"}
    assert rt({"model_config": json.dumps(nested)}) == {"provider": "x", "api_mode": "chat"}
    assert rt({"model_config": json.dumps({"gateway_runtime": {"provider": ""},
                                           "base_url": "u"})}) == {"base_url": "u"}
    assert rt({"model_config": "{}", "billing_provider": " openai "}) == {"provider": "openai"}
    assert rt({"model_config": "{}", "billing_provider": "Custom"}) == {}
    assert rt({"model_config": json.dumps({"gateway_runtime": {"provider": "", "x": None,
                                                               "y": 1}}),
               "billing_provider": "auto"}) == {"provider": "", "y": 1}
    assert rt({"model_config": "nonsense"}) == {}


def test_ab20_model_route_and_lock_writes_drop_the_prompt(store):
    """AB20: model / billing-route / runtime-lock writes null the prompt hash; the
    unreferenced prompt row goes, a shared one stays."""
    for sid in ("a", "b", "c"):
        store.create_session(sid, "cli", system_prompt="shared prompt")
    store.create_session("d", "cli", system_prompt="own prompt")
    count = lambda: _sql(store, "SELECT COUNT(*) FROM system_prompts")[0][0]  # noqa: E731
    assert count() == 2
    store.update_session_model("d", "m2", provider="prov")
    assert store.get_session("d").system_prompt_hash is None and count() == 1
    cfg = _config(store, "d")
    assert cfg == {"model": "m2", "provider": "prov"}
    store.update_session_billing_route("a", provider="p", base_url="u", billing_mode=None)
    assert store.get_session("a").system_prompt_hash is None and count() == 1
    assert store.update_session_runtime_lock("b", model="m3", provider="p3",
                                             model_options={"t": 1}, confirmed=True) is True
    row = store.get_session("b")
    assert row.system_prompt_hash is None and row.model == "m3" and count() == 1
    lock = _config(store, "b")["browser_model_lock"]
    assert (lock["provider"], lock["model"], lock["model_options"], lock["confirmed"]) == \
        ("p3", "m3", {"t": 1}, True)
    store.update_session_model("b", "m4")
    assert "browser_model_lock" not in _config(store, "b")
    assert store.get_session("c").system_prompt == "shared prompt"
    store.update_system_prompt("c", "new prompt")
    assert store.get_session("c").system_prompt == "new prompt" and count() == 1
    with pytest.raises(TypeError):
        store.update_session_runtime_lock("b", model_options={"f": object()})
    with pytest.raises(ValueError):
        store.update_session_model("b", "")
    assert store.update_session_runtime_lock("missing", model="m") is False


def test_ab21_tool_names(store):
    """AB21: a bare string ⇒ TypeError; a list round-trips in order; None clears."""
    store.create_session("t", "cli")
    with pytest.raises(TypeError):
        store.update_session_tool_names("t", "abc")
    with pytest.raises(TypeError):
        store.update_session_tool_names("t", ["a", 1])
    store.update_session_tool_names("t", ["zeta", "alpha", "mid"])
    assert _sql(store, "SELECT tool_names FROM sessions WHERE id = 't'") == \
        [('["zeta", "alpha", "mid"]',)]
    store.update_session_tool_names("t", None)
    assert _sql(store, "SELECT tool_names FROM sessions WHERE id = 't'") == [(None,)]
    assert store.set_expiry_finalized("t") is True
    assert store.set_expiry_finalized("t") is False
    assert store.set_expiry_finalized("t", False) is True


def _publisher(target, generation, branch, go, out):
    with SessionStore(target) as s:
        go.wait(10)
        out.put((generation, s.publish_session_git_metadata("g", "/a", generation, branch)))


def test_ab22_cwd_claims_and_git_publication(store, backend):
    """AB22: A→B→A ⇒ 1, 2, 3; publish with 1 or 2 ⇒ False, with 3 on A ⇒ True; a move clears
    branch/root; a blank branch on the same cwd keeps the stored one; racing publishers in
    two processes: only the current lands."""
    store.create_session("g", "cli")
    assert store.update_session_cwd("g", "/a", git_branch="main", git_repo_root="/a") == 1
    assert store.update_session_cwd("g", "/b") == 2
    row = store.get_session("g")
    assert (row.cwd, row.git_branch, row.git_repo_root) == ("/b", None, None)
    assert store.update_session_cwd("g", "/a", git_branch="dev") == 3
    assert store.update_session_cwd("g", "/a", git_branch="  ") == 4
    assert store.get_session("g").git_branch == "dev"
    assert store.publish_session_git_metadata("g", "/a", 3, "old") is False
    assert store.publish_session_git_metadata("g", "/b", 4, "x") is False
    assert store.publish_session_git_metadata("g", "/a", True, "x") is False
    assert store.publish_session_git_metadata("g", "/a", 4, " ", None) is False
    assert store.publish_session_git_metadata("g", "/a", 4, "feature") is True
    assert store.get_session("g").git_branch == "feature"
    assert store.update_session_cwd("missing", "/a") is None
    assert store.update_session_cwd("g", " ") is None
    target = str(store.path) if backend == "sqlite" else \
        store.url.render_as_string(hide_password=False)
    ctx = multiprocessing.get_context("spawn")
    go, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_publisher, args=(target, g, f"b{g}", go, out)) for g in (3, 4)]
    for p in procs:
        p.start()
    go.set()
    results = dict(out.get(timeout=60) for _ in procs)
    for p in procs:
        p.join(30)
    assert results == {3: False, 4: True}
    assert store.get_session("g").git_branch == "b4"


def test_ab23_backfill_repo_roots_fills_only_empty_roots(store):
    """AB23: 1000 pairs fill only empty roots, in statements of at most 900 variables."""
    from hermes_data.sessions.agent.session_meta_sql import BACKFILL_PAIRS

    assert BACKFILL_PAIRS * 2 <= 900
    with store.engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO sessions (id, source, started_at, cwd, git_repo_root) VALUES "
            + ", ".join(f"('s{i}', 'cli', 1, '/w/{i}', {'NULL' if i % 3 else repr('/kept')})"
                        for i in range(1000)))
        conn.exec_driver_sql("UPDATE sessions SET git_repo_root = '' WHERE id = 's1'")
    n = store.backfill_repo_roots({f"/w/{i}": f"/root/{i}" for i in range(1000)} | {"": "/x"})
    assert n == 1000 - len(range(0, 1000, 3))
    assert store.get_session("s1").git_repo_root == "/root/1"
    assert store.get_session("s3").git_repo_root == "/kept"
    assert store.backfill_repo_roots({}) == 0
    cwds = store.distinct_session_cwds()
    assert len(cwds) == 1000 and cwds[0].sessions == 1


def test_ab42_profile_backfill(store):
    """AB42 (profiles): ``backfill_null_session_profiles('work')`` stamps NULL/blank owners
    once; ``'Work Profile'`` ⇒ ValueError."""
    store.create_session("p1", "cli", profile_name="own")
    store.create_session("p2", "cli")
    store.create_session("p3", "cli")
    _sql(store, "UPDATE sessions SET profile_name = NULL WHERE id = 'p2'")
    _sql(store, "UPDATE sessions SET profile_name = ' ' WHERE id = 'p3'")
    assert store.backfill_null_session_profiles(" work ") == 2
    assert store.backfill_null_session_profiles("work") == 0
    assert [store.get_session(s).profile_name for s in ("p1", "p2", "p3")] == ["own", "work", "work"]
    with pytest.raises(ValueError):
        store.backfill_null_session_profiles("Work Profile")
    assert store.backfill_null_session_profiles("  ") == 0


def test_session_row_carries_the_agent_columns(store):
    """§2.6: ``SessionRow`` gains every §2.1 column (defaults for old constructors), read back
    after the operations that write them; ``tool_names`` decoded, ``expiry_finalized`` a bool."""
    store.create_session("r", "cli")
    fresh = store.get_session("r")
    assert (fresh.api_call_count, fresh.cache_read_tokens, fresh.tool_names,
            fresh.expiry_finalized, fresh.git_metadata_generation) == (0, 0, None, False, 0)
    store.update_token_counts("r", input_tokens=3, cache_read_tokens=5, reasoning_tokens=2,
                              api_call_count=1, billing_base_url="https://api.example")
    store.update_session_tool_names("r", ["terminal", "read_file"])
    store.set_expiry_finalized("r", True)
    row = store.get_session("r")
    assert (row.input_tokens, row.cache_read_tokens, row.reasoning_tokens, row.api_call_count) \
        == (3, 5, 2, 1)
    assert row.billing_base_url == "https://api.example"
    assert row.tool_names == ("terminal", "read_file")
    assert row.expiry_finalized is True
    _sql(store, "UPDATE sessions SET tool_names = ? WHERE id = ?", ('{"not": "a list"}', "r"))
    assert store.get_session("r").tool_names is None
