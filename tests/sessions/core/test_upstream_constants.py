"""Issue 33: upstream's ``SessionDB`` class constants callers read exist as public module names
(``hermes_data.sessions``, and the modules owning each concept) and as ``SessionStore`` class
attributes — one definition each, the object our own code uses — with upstream's values, and
the behaviour that depends on them matches on both backends."""

from __future__ import annotations

import json

import pytest

import hermes_data.sessions as sessions
from hermes_data.sessions import SessionStore
from hermes_data.sessions.agent import activity
from hermes_data.sessions.agent import identity_sql
from hermes_data.sessions.core import encoding, titles
from hermes_data.sessions.sql import predicates
from hermes_data.sessions.ui import reactions, reactions_sql

#: The values seed 002's SessionDB (and its spec's RECOVERABLE_END_REASONS) define.
UPSTREAM = {
    "TITLE_SOURCE_DERIVED": "derived",
    "TITLE_SOURCE_LLM": "llm",
    "TITLE_SOURCE_USER": "user",
    "CANONICAL_BOT_CHAT_TITLE": "Bot Chat",
    "REACTIONS_METADATA_KEY": "reactions",
    "MAX_TITLE_LENGTH": 100,
    "RECOVERABLE_END_REASONS": ("agent_close", "ws_orphan_reap", "superseded_by_resume",
                                "startup_orphan_reap"),
}

#: Where each is defined (the one definition) and the concept module that publishes it.
OWNERS = {
    "TITLE_SOURCE_DERIVED": (titles, titles),
    "TITLE_SOURCE_LLM": (titles, titles),
    "TITLE_SOURCE_USER": (titles, titles),
    "CANONICAL_BOT_CHAT_TITLE": (predicates, titles),  # the lineage SQL interpolates it
    "REACTIONS_METADATA_KEY": (reactions_sql, reactions),  # … and the unseen-reaction scan
    "MAX_TITLE_LENGTH": (encoding, encoding),
    "RECOVERABLE_END_REASONS": (identity_sql, identity_sql),
}


@pytest.mark.parametrize("name", sorted(UPSTREAM))
def test_each_constant_has_upstreams_value_and_one_definition(name):
    defined, published = OWNERS[name]
    value = getattr(defined, name)
    assert (tuple(value) if name == "RECOVERABLE_END_REASONS" else value) == UPSTREAM[name]
    assert getattr(published, name) is value
    assert getattr(sessions, name) is value
    assert name in sessions.__all__
    assert getattr(SessionStore, name) is value


def test_the_title_ranks_are_built_on_the_constants():
    assert list(titles.TITLE_RANKS) == [titles.TITLE_SOURCE_DERIVED, titles.TITLE_SOURCE_LLM,
                                        titles.TITLE_SOURCE_USER]
    assert [titles.TITLE_RANKS[s] for s in activity.TITLE_SOURCES] == [0, 1, 2]
    assert all(a is b for a, b in zip(activity.TITLE_SOURCES, titles.TITLE_RANKS))


def test_title_sources_drive_the_title_writes(store):
    """set_auto_title takes the two automatic sources and refuses TITLE_SOURCE_USER, as
    upstream; a user title ranks above both; provenance reads back as the constants."""
    s = SessionStore
    store.create_session("a", "cli")
    assert store.set_auto_title("a", "derived one", s.TITLE_SOURCE_DERIVED)
    assert store.get_session_title_source("a") == s.TITLE_SOURCE_DERIVED
    assert store.set_auto_title("a", "llm one", s.TITLE_SOURCE_LLM)
    assert store.get_session_title_source("a") == s.TITLE_SOURCE_LLM
    assert not store.set_auto_title("a", "derived again", s.TITLE_SOURCE_DERIVED)
    with pytest.raises(ValueError, match="user"):
        store.set_auto_title("a", "mine", s.TITLE_SOURCE_USER)
    assert store.set_session_title("a", "mine")
    assert store.get_session_title_source("a") == s.TITLE_SOURCE_USER
    assert not store.set_auto_title("a", "llm again", s.TITLE_SOURCE_LLM)
    for source in (s.TITLE_SOURCE_DERIVED, s.TITLE_SOURCE_LLM, s.TITLE_SOURCE_USER):
        assert store.set_session_title_source("a", source)
        assert store.get_session_title_source("a") == source
    assert store.get_session_title("a") == "mine"


def test_max_title_length_is_the_bound(store):
    store.create_session("a", "cli")
    assert store.set_session_title("a", "x" * SessionStore.MAX_TITLE_LENGTH)
    with pytest.raises(ValueError, match="too long"):
        store.set_session_title("a", "y" * (SessionStore.MAX_TITLE_LENGTH + 1))
    assert store.get_session_title("a") == "x" * SessionStore.MAX_TITLE_LENGTH


def test_the_canonical_bot_chat_title_is_protected(store):
    """A hidden row titled CANONICAL_BOT_CHAT_TITLE keeps it, and pinning its lineage leaves
    it hidden (the lineage SQL interpolates the same constant)."""
    bot = SessionStore.CANONICAL_BOT_CHAT_TITLE
    store.create_session("bot", "telegram", hidden=True)
    store.set_session_title("bot", bot)
    with pytest.raises(ValueError, match=bot):
        store.set_session_title("bot", "renamed")
    assert not store.set_auto_title("bot", "renamed", SessionStore.TITLE_SOURCE_LLM)
    assert store.set_session_pinned("bot")
    row = store.get_session("bot")
    assert (row.title, row.hidden, row.pinned) == (bot, True, True)
    # Any other hidden title is un-hidden by a pin.
    store.create_session("other", "telegram", hidden=True)
    store.set_session_title("other", bot + "!")
    assert store.set_session_pinned("other")
    assert not store.get_session("other").hidden


def test_reactions_live_under_the_metadata_key(store):
    store.create_session("s", "cli")
    row = store.append_message("s", "assistant", "hello")
    store.set_message_reaction("s", row, "👍")
    with store.engine.connect() as conn:
        raw = conn.exec_driver_sql("SELECT display_metadata FROM messages WHERE id = ?",
                                   (row,)).scalar()
    assert [r["emoji"] for r in json.loads(raw)[SessionStore.REACTIONS_METADATA_KEY]] == ["👍"]
    # The unseen scan finds rows by the same key.
    assert [u.emoji for u in store.take_unseen_reactions("s")] == ["👍"]


@pytest.mark.parametrize("reason", UPSTREAM["RECOVERABLE_END_REASONS"] + ("user_exit",))
def test_recoverable_end_reasons_are_the_ones_a_reset_promotes(store, reason):
    store.create_session("s", "telegram", session_key="agent:main:tg:1")
    store.end_session("s", reason)
    promoted = store.promote_to_session_reset("s")
    assert promoted is (reason in SessionStore.RECOVERABLE_END_REASONS)
