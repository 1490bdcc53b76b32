"""Gateway peer recovery (spec sessions-ext-gateway.md §3.3, acceptance behaviours 11–15,
17–19), on SQLite and PostgreSQL unless marked."""

from __future__ import annotations

import json
import logging

import pytest

from hermes_data.errors import ConfigurationError
from hermes_data.sessions.store import SessionStore

from tests.conftest import truncate_tables
from tests.sessions.conftest import _TABLES, make_chain, qmark_for_tests

T = 1_700_000_000.0
_COLS = ("id", "source", "session_key", "user_id", "chat_id", "chat_type", "thread_id",
         "started_at", "ended_at", "end_reason", "last_activity_at", "parent_session_id",
         "model_config", "profile_name")


def _row(store, sid, **kw):
    vals = {"source": "telegram", "started_at": T, **kw, "id": sid}
    cols = [c for c in _COLS if c in vals]
    with store.engine.begin() as conn:
        conn.exec_driver_sql(f"INSERT INTO sessions ({', '.join(cols)}) VALUES "
                             f"({', '.join('?' * len(cols))})", tuple(vals[c] for c in cols))


def _msg(store, sid, ts):
    with store.engine.begin() as conn:
        conn.exec_driver_sql("INSERT INTO messages (session_id, role, content, timestamp) "
                             "VALUES (?, 'user', 'hi', ?)", (sid, ts))


def _find(store, key, **kw):
    row = store.find_latest_gateway_session_for_peer(source="telegram", session_key=key, **kw)
    return None if row is None else row.id


def test_gw11_recording_creates_and_updates_the_peer(store):
    """Behaviour 11: a missing id is created with source, key, tuple, owner profile and
    started_at; a second call with display_name=None keeps it, thread_id=None clears it."""
    n = store.record_gateway_session_peer("new", source="telegram", session_key="k",
                                          user_id=42, chat_id=-100, chat_type="group",
                                          thread_id=7, display_name="Ann")
    row = store.get_session("new")
    assert n == 1 and (row.source, row.session_key, row.user_id, row.chat_id, row.chat_type,
                       row.thread_id, row.display_name) == (
        "telegram", "k", "42", "-100", "group", "7", "Ann")
    assert row.profile_name == store.owner_profile() and row.started_at > T
    assert store.record_gateway_session_peer("new", source="telegram", session_key="k",
                                             user_id=42, chat_id=-100, chat_type="group") == 1
    row = store.get_session("new")
    assert (row.display_name, row.thread_id) == ("Ann", None)
    assert store.record_gateway_session_peer("", source="telegram", session_key="k") == 0
    assert store.record_gateway_session_peer("new", source="telegram", session_key=" ") == 0


def test_gw12_compression_ancestors_are_stamped_not_branches(store):
    """Behaviour 12: with ancestors, all five segments of a compression lineage are stamped;
    a branch and a reset child of the root are not."""
    ids = make_chain(store, 5)
    _row(store, "branch", source="cli", parent_session_id=ids[0],
         model_config=json.dumps({"_branched_from": ids[0]}))
    _row(store, "resetkid", source="cli", parent_session_id=ids[0],
         model_config=json.dumps({"_reset_from": ids[0]}))
    assert store.record_gateway_session_peer(ids[-1], source="telegram", session_key="k",
                                             chat_id="c", include_compression_ancestors=True) == 5
    assert [store.get_session(i).session_key for i in ids] == ["k"] * 5
    assert store.get_session("branch").session_key is None
    assert store.get_session("resetkid").session_key is None


def test_gw13_source_changes_respect_the_trigram_boundary(store, caplog):
    """Behaviour 13: a cron row with messages recorded as telegram stays cron (WARNING); a
    message-less cron row and a cli row with messages become telegram."""
    store.create_session("cron1", "cron")
    store.append_message("cron1", "user", "run")
    store.create_session("cron2", "cron")
    store.create_session("cli1", "cli")
    store.append_message("cli1", "user", "hi")
    with caplog.at_level(logging.WARNING, logger="hermes_data.sessions.gateway"):
        for sid in ("cron1", "cron2", "cli1"):
            assert store.record_gateway_session_peer(sid, source="telegram", session_key=sid)
    assert [store.get_session(s).source for s in ("cron1", "cron2", "cli1")] == [
        "cron", "telegram", "telegram"]
    assert "cron1" in caplog.text and store.get_session("cron1").session_key == "cron1"


def test_gw14_exact_key_prefers_messages_then_newest_message(store):
    """Behaviour 14: a row with messages beats a newer empty one; of two with messages, the
    later newest message beats a later ``last_activity_at``."""
    _row(store, "x", session_key="k1", started_at=T + 1)
    _msg(store, "x", T + 3)
    _row(store, "y", session_key="k1", started_at=T + 5)
    assert _find(store, "k1") == "x"
    _row(store, "z", session_key="k2", started_at=T + 6)
    _msg(store, "z", T + 20)
    _row(store, "w", session_key="k2", started_at=T + 7, last_activity_at=T + 15)
    _msg(store, "w", T + 8)
    assert _find(store, "k2") == "z"
    assert _find(store, "") is None


def test_gw15_reset_fence(store):
    """Behaviour 15: A ended session_reset at t10 fences an open B active at t5 (None); C
    started at t11 ⇒ C; D ended agent_close active at t12 ⇒ D; A's reset child E created at
    t9 without activity ⇒ E; the same with session_switch."""
    for reason in ("session_reset", "session_switch"):
        def a(key):
            _row(store, f"A-{key}", session_key=key, started_at=T + 1, ended_at=T + 10,
                 end_reason=reason)
        for key in ("k1", "k2", "k3", "k4"):
            key = f"{reason}-{key}"
            a(key)
        _row(store, f"B-{reason}", session_key=f"{reason}-k1", started_at=T + 2,
             last_activity_at=T + 5)
        assert _find(store, f"{reason}-k1") is None
        _row(store, f"C-{reason}", session_key=f"{reason}-k2", started_at=T + 11)
        assert _find(store, f"{reason}-k2") == f"C-{reason}"
        _row(store, f"D-{reason}", session_key=f"{reason}-k3", started_at=T + 2,
             ended_at=T + 12, end_reason="agent_close", last_activity_at=T + 12)
        assert _find(store, f"{reason}-k3") == f"D-{reason}"
        parent = f"A-{reason}-k4"
        _row(store, f"E-{reason}", session_key=f"{reason}-k4", started_at=T + 9,
             parent_session_id=parent, model_config=json.dumps({"_reset_from": parent}))
        assert _find(store, f"{reason}-k4") == f"E-{reason}"


def test_gw17_tuple_fallback_and_thread(store):
    """Behaviour 17: same tuple, other key, with messages ⇒ returned; another thread ⇒
    None; without chat_id/chat_type no fallback."""
    _row(store, "old", session_key="other", user_id="u", chat_id="c", chat_type="group",
         thread_id="7", started_at=T + 1)
    _msg(store, "old", T + 2)
    tup = {"user_id": "u", "chat_id": "c", "chat_type": "group"}
    assert _find(store, "new", thread_id=7, **tup) == "old"
    assert _find(store, "new", thread_id=8, **tup) is None
    assert _find(store, "new", thread_id=7, user_id="u") is None


def test_gw17_profile_fence_on_a_profile_file(tmp_path):
    """Behaviour 17 (SQLite): in ``<root>/profiles/work/state.db`` a same-tuple row of
    profile ``default`` ⇒ None; a NULL-profile row ⇒ it."""
    path = tmp_path / "profiles" / "work" / "state.db"
    path.parent.mkdir(parents=True)
    with SessionStore(path, hermes_root=tmp_path) as s:
        assert s.owner_profile() == "work"
        tup = {"user_id": "u", "chat_id": "c", "chat_type": "dm"}
        _row(s, "other", session_key="k0", profile_name="default", **tup)
        _msg(s, "other", T + 1)
        assert _find(s, "k", **tup) is None
        _row(s, "legacy", session_key="k1", **tup)
        _msg(s, "legacy", T + 2)
        assert _find(s, "k", **tup) == "legacy"


def test_gw17_profile_fence_on_postgresql_with_owner_profile(pg_session_url):
    """Behaviour 17 (PostgreSQL, M3): a store opened with ``owner_profile='work'`` fences a
    same-tuple row of profile ``default`` out and still finds a NULL-profile row; without
    the option the owner is None and the ``default`` row is found (unfenced)."""
    truncate_tables(pg_session_url, _TABLES)
    tup = {"user_id": "u", "chat_id": "c", "chat_type": "dm"}
    with SessionStore(pg_session_url, owner_profile="work") as s:
        qmark_for_tests(s)
        assert s.owner_profile() == "work"
        _row(s, "other", session_key="k0", profile_name="default", **tup)
        _msg(s, "other", T + 1)
        assert _find(s, "k", **tup) is None
        s.record_gateway_session_peer("fresh", source="telegram", session_key="k9")
        assert s.get_session("fresh").profile_name == "work"
    with SessionStore(pg_session_url) as s:
        assert s.owner_profile() is None
        assert _find(s, "k", **tup) == "other"
    with SessionStore(pg_session_url, owner_profile="work") as s:
        qmark_for_tests(s)
        _row(s, "legacy", session_key="k1", **tup)
        _msg(s, "legacy", T + 2)
        assert _find(s, "k", **tup) == "legacy"


def test_owner_profile_option_is_postgresql_only_and_validated(tmp_path, pg_session_url):
    """``owner_profile`` is refused by name on a SQLite store (its owner is its path) and a
    value that is no profile name is refused before anything opens."""
    with pytest.raises(ConfigurationError, match="owner_profile='work' applies to PostgreSQL"):
        SessionStore(tmp_path / "state.db", owner_profile="work")
    assert not (tmp_path / "state.db").exists()
    with pytest.raises(ConfigurationError, match="'Work Space' is not a profile name"):
        SessionStore(pg_session_url, owner_profile="Work Space")


def test_gw18_origin_lookup_never_crosses_participants(store):
    """Behaviour 18: the exact sender wins; two users and no match ⇒ None; one foreign row ⇒
    it; ``thread_id=''`` matches a NULL thread; ``Telegram`` matches ``telegram``."""
    _row(store, "s1", session_key="k1", chat_id="c", user_id="u1", started_at=T + 1)
    _row(store, "s2", session_key="k2", chat_id="c", user_id="u2", started_at=T + 2)
    assert store.find_session_by_origin(platform="Telegram", chat_id="c", user_id="u1") == "s1"
    assert store.find_session_by_origin(platform="telegram", chat_id="c", user_id="u9") is None
    assert store.find_session_by_origin(platform="telegram", chat_id="c") is None
    _row(store, "s3", session_key="k3", chat_id="d", user_id="u1", started_at=T + 3)
    assert store.find_session_by_origin(platform="telegram", chat_id="d", user_id="u9") == "s3"
    assert store.find_session_by_origin(platform="telegram", chat_id="d", thread_id="") == "s3"
    assert store.find_session_by_origin(platform="telegram", chat_id="d", thread_id="1") is None
    assert store.find_session_by_origin(platform="", chat_id="d") is None
    assert store.find_session_by_origin(platform="telegram", chat_id="") is None


def test_gw19_one_live_mapping_per_source_and_key(store):
    """Behaviour 19: one row per (source, key); a key whose newest row ended is omitted; an
    api_server row sharing a Telegram key hides nothing under platform='telegram'."""
    _row(store, "t-old", session_key="k", started_at=T + 1)
    _row(store, "t-new", session_key="k", started_at=T + 2)
    _row(store, "api", source="api_server", session_key="k", started_at=T + 3)
    _row(store, "gone", session_key="k2", started_at=T + 4, ended_at=T + 5,
         end_reason="session_reset")
    assert [r.id for r in store.list_gateway_sessions(platform="telegram")] == ["t-new"]
    assert sorted(r.id for r in store.list_gateway_sessions()) == ["api", "t-new"]
    rows = store.list_gateway_sessions(platform="TELEGRAM", active_only=False)
    assert sorted(r.id for r in rows) == ["gone", "t-new"]
    assert all(r.last_active is not None for r in rows)


def test_gw16_adopted_fixture_reset_row_is_not_recovered(legacy_copy):
    """Behaviour 16: on the adopted fixture, key ``telegram:-100200:7`` and the tuple
    ``-100200``/``group``/``7``/``u123`` fallback ⇒ None (its only row ended session_reset)."""
    with SessionStore(legacy_copy) as s:
        with s.engine.connect() as conn:
            rows = conn.exec_driver_sql(
                "SELECT end_reason FROM sessions WHERE session_key = 'telegram:-100200:7'"
            ).fetchall()
        assert [r[0] for r in rows] == ["session_reset"]
        assert s.find_latest_gateway_session_for_peer(
            source="telegram", session_key="telegram:-100200:7", chat_id="-100200",
            chat_type="group", thread_id="7", user_id="u123") is None
