"""Upstream's v18 gateway metadata backfill from ``sessions.json`` at the adoption of an
upstream ``state.db`` below schema version 18 (docs/sessions-storage.md §3.12; issue 33).

Upstream ``state.db`` files exist only as SQLite files: PostgreSQL stores are created by
hermes-data itself and never adopted, so there is no PostgreSQL run."""

from __future__ import annotations

import json
import logging
import sqlite3
from pathlib import Path

import pytest

from hermes_data.sessions.storage import sessions_json as sj
from hermes_data.sessions.store import SessionStore

pytestmark = pytest.mark.sqlite_only("adoption of an upstream state.db (a SQLite file)")

TG = "20260801_120500_d4e5f6"    # telegram group session of the fixture
DC = "20260802_081500_0a0b0c"    # discord DM
MIX = "20260810_001500_mix000"   # telegram, no routing columns at all
CRON = "20260803_070000_beef02"

TG_ORIGIN = {"platform": "telegram", "chat_id": "-100200", "chat_name": "Ops", "chat_type": "group",
             "user_id": "7", "user_name": "ann", "thread_id": "7", "chat_topic": None}
MIX_ORIGIN = {"platform": "telegram", "chat_id": "4242", "chat_name": None, "chat_type": "dm",
              "user_id": "4242", "user_name": "bo", "thread_id": None, "chat_topic": None}


def _entry(key: str, sid: str, **extra) -> dict:
    """A ``SessionEntry.to_dict()`` as the gateway writes it."""
    doc = {"session_key": key, "session_id": sid, "created_at": "2026-08-01T12:05:00",
           "updated_at": "2026-08-01T12:09:00", "display_name": None, "platform": "telegram",
           "chat_type": "dm", "input_tokens": 10, "output_tokens": 4, "cache_read_tokens": 0,
           "cache_write_tokens": 0, "total_tokens": 14, "last_prompt_tokens": 10,
           "estimated_cost_usd": 0.0, "cost_status": "estimated", "memory_flushed": False,
           "suspended": False, "resume_pending": False, "resume_reason": None,
           "last_resume_marked_at": None}
    doc.update(extra)
    return doc


def _index() -> dict:
    return {
        "agent:main:telegram:group:-100200:7": _entry(
            "agent:main:telegram:group:-100200:7", TG, display_name="Ops group",
            chat_type="group", origin=TG_ORIGIN, memory_flushed=True),
        "agent:main:discord:dm:c9": _entry(
            "agent:main:discord:dm:c9", DC, display_name="Bob", platform="discord",
            origin={"platform": "discord", "chat_id": "c9", "chat_type": "dm", "user_id": "u9",
                    "user_name": "bob", "thread_id": None, "chat_name": None,
                    "chat_topic": None}),
        "agent:main:telegram:dm:4242": _entry(
            "", MIX, display_name="Bo", origin=MIX_ORIGIN, expiry_finalized=True),
        "_version": 3,                                              # metadata key: skipped
        "agent:main:telegram:dm:none": _entry("k", "", display_name="no id"),  # skipped
        "agent:main:telegram:dm:gone": _entry("gone", "20260101_000000_nope00"),
        "agent:main:telegram:dm:odd": ["not", "an", "entry"],       # skipped
    }


def _pre_v18(path: Path, *, version: int = 17) -> None:
    """The upstream fixture as a file upstream had not yet taken past ``version``: the
    backfilled columns NULL (one display name already set by newer code)."""
    con = sqlite3.connect(path)
    try:
        con.execute("UPDATE schema_version SET version = ?", (version,))
        con.execute("UPDATE sessions SET display_name = NULL, origin_json = NULL, "
                    "expiry_finalized = 0")
        con.execute("UPDATE sessions SET display_name = 'Kept' WHERE id = ?", (DC,))
        con.commit()
    finally:
        con.close()


def _write_index(path: Path, doc) -> Path:
    target = path.parent / "sessions" / "sessions.json"
    target.parent.mkdir(exist_ok=True)
    target.write_text(doc if isinstance(doc, str) else json.dumps(doc, indent=2),
                      encoding="utf-8")
    return target


def _cols(path: Path, sid: str) -> tuple:
    con = sqlite3.connect(path)
    try:
        return con.execute(
            "SELECT session_key, chat_id, chat_type, thread_id, display_name, origin_json, "
            "expiry_finalized FROM sessions WHERE id = ?", (sid,)).fetchone()
    finally:
        con.close()


def test_adoption_below_v18_backfills_from_sessions_json(legacy_copy, caplog):
    _pre_v18(legacy_copy)
    index = _write_index(legacy_copy, _index())
    before_cron = _cols(legacy_copy, CRON)
    before_tg = _cols(legacy_copy, TG)
    caplog.set_level(logging.WARNING, "hermes_data")
    with SessionStore(legacy_copy) as store:
        tg, dc, mix = (store.get_session(s) for s in (TG, DC, MIX))
        repairs = list(store.backend.open_repairs)
    # Existing routing columns kept; the NULL ones filled from the entry and its origin.
    assert (tg.session_key, tg.chat_id, tg.chat_type, tg.thread_id) == before_tg[:4]
    assert tg.display_name == "Ops group" and json.loads(tg.origin_json) == TG_ORIGIN
    assert tg.expiry_finalized is True  # memory_flushed counts, as upstream
    assert dc.display_name == "Kept"    # never overwritten
    assert json.loads(dc.origin_json)["user_id"] == "u9" and dc.expiry_finalized is False
    # A blank session_key falls back to the entry's key; chat_id from the origin.
    assert (mix.session_key, mix.chat_id, mix.chat_type, mix.display_name) == (
        "agent:main:telegram:dm:4242", "4242", "dm", "Bo")
    assert mix.thread_id is None and mix.expiry_finalized is True
    assert _cols(legacy_copy, CRON) == before_cron  # not in the index: untouched
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING
                and "sessions.json" in r.getMessage()]
    assert any("backfilled gateway metadata of 3 session(s)" in r and str(index) in r
               for r in repairs), repairs
    # Idempotent: a second run over the adopted file changes nothing.
    snapshot = [_cols(legacy_copy, s) for s in (TG, DC, MIX, CRON)]
    with SessionStore(legacy_copy) as store:
        with store.engine.begin() as conn:
            assert sj.backfill_gateway_metadata(conn, index) == 3
    assert [_cols(legacy_copy, s) for s in (TG, DC, MIX, CRON)] == snapshot


def test_the_step_is_upstreams_v18_only(legacy_copy):
    """A file at schema version 18 or later already has the columns upstream filled: the
    index is not read (the fixture's NULL display names stay NULL)."""
    _pre_v18(legacy_copy, version=18)
    _write_index(legacy_copy, _index())
    with SessionStore(legacy_copy) as store:
        assert store.get_session(TG).display_name is None
        assert store.get_session(MIX).origin_json is None


def test_a_missing_index_is_nothing_to_do(legacy_copy, caplog):
    _pre_v18(legacy_copy)
    caplog.set_level(logging.DEBUG, "hermes_data")
    with SessionStore(legacy_copy) as store:
        assert store.get_session(TG).display_name is None
    assert not [r for r in caplog.records if "sessions.json" in r.getMessage()]


@pytest.mark.parametrize("content, why", [
    ('{"agent:main:telegram:dm:1": {"session_id": ', "not valid JSON"),
    ('["a", "list"]', "holds a JSON list"),
    (b"\xff\xfe garbage", "cannot be read"),
])
def test_a_malformed_index_is_ignored_with_one_line(legacy_copy, caplog, content, why):
    _pre_v18(legacy_copy)
    target = legacy_copy.parent / "sessions" / "sessions.json"
    target.parent.mkdir()
    if isinstance(content, bytes):
        target.write_bytes(content)
    else:
        target.write_text(content, encoding="utf-8")
    caplog.set_level(logging.DEBUG, "hermes_data")
    with SessionStore(legacy_copy) as store:  # the adoption goes on
        assert store.get_session(TG).display_name is None
        assert store.get_session(DC).display_name == "Kept"
    lines = [r for r in caplog.records if "sessions.json" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.WARNING
    assert str(target) in lines[0].getMessage() and why in lines[0].getMessage()


def test_entry_values_of_the_wrong_type_are_ignored_not_bound(legacy_copy):
    _pre_v18(legacy_copy)
    _write_index(legacy_copy, {
        "k1": {"session_id": TG, "display_name": {"nested": 1}, "chat_type": ["x"],
               "origin": "not an object", "session_key": None},
        "k2": {"session_id": MIX, "display_name": "lone \ud800", "chat_type": 5,
               "origin": {"chat_id": 4242, "thread_id": True}},
    })
    with SessionStore(legacy_copy) as store:
        tg, mix = store.get_session(TG), store.get_session(MIX)
    assert tg.display_name is None and tg.origin_json is None
    assert mix.display_name is None and mix.chat_type == "5" and mix.chat_id == "4242"
    assert mix.thread_id is None and mix.session_key == "k2"
    assert json.loads(mix.origin_json) == {"chat_id": 4242, "thread_id": True}
