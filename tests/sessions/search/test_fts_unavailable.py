"""A store made where an FTS tokenizer existed, opened where it does not (issue 13): writes
keep working and search falls back to LIKE.

A build without the trigram tokenizer is simulated honestly on this one: the trigram table's
declared tokenizer is renamed to one no SQLite build has, so loading it fails exactly as on a
build without ``trigram`` ("no such tokenizer")."""

from __future__ import annotations

import sqlite3

import pytest

from hermes_data.sessions.store import SessionStore

pytestmark = pytest.mark.sqlite_only("FTS5 tokenizers are a SQLite build fact")


def _unknown_tokenizer(path) -> None:
    con = sqlite3.connect(path, isolation_level=None)
    try:
        con.execute("PRAGMA writable_schema=ON")
        con.execute("UPDATE sqlite_master SET sql = replace(sql, 'tokenize=''trigram''', "
                    "'tokenize=''nosuchtok''') WHERE name = 'messages_fts_trigram'")
        con.execute("PRAGMA writable_schema=OFF")
    finally:
        con.close()
    probe = sqlite3.connect(path)
    try:
        with pytest.raises(sqlite3.OperationalError, match="no such tokenizer"):
            probe.execute("INSERT INTO messages_fts_trigram(rowid, content, tool_name) "
                          "VALUES (999999, 'x', NULL)")
    finally:
        probe.close()


def test_a_missing_tokenizer_never_breaks_appends(tmp_path):
    path = tmp_path / "state.db"
    with SessionStore(path) as store:
        store.create_session("s", "cli")
        store.append_message("s", "user", "before the move")
    _unknown_tokenizer(path)
    with SessionStore(path) as store:
        assert any("unusable" in r for r in store.open_repairs)
        assert store.fts_available["messages_fts_trigram"] is False
        store.append_message("s", "user", "written after the move")
        store.append_messages_batch("s", [{"role": "assistant", "content": "batch too"}])
        hits = store.search_messages("after the move")
        assert [h.session_id for h in hits] == ["s"]
        assert {h.route for h in hits} <= {"like", "cjk_like"}
        assert store.search_messages("before")[0].session_id == "s"
    with SessionStore(path) as store:  # settled again: the next open writes nothing
        assert store.open_repairs == []
        assert store.message_count("s") == 3


def test_the_write_path_treats_a_missing_tokenizer_as_fts_scoped(tmp_path):
    """A write meeting an unloadable FTS table fails open (drops the FTS triggers, retries)
    instead of raising or quarantining the handle: the error is classified as FTS-scoped."""
    from hermes_data.sessions.storage import handle_guards as guards

    path = tmp_path / "state.db"
    with SessionStore(path) as store:
        store.create_session("s", "cli")
    _unknown_tokenizer(path)
    con = sqlite3.connect(path)
    try:
        with pytest.raises(sqlite3.OperationalError) as info:
            con.execute("INSERT INTO messages(session_id, role, content, timestamp, active) "
                        "VALUES ('s', 'user', 'x', 1.0, 1)")
    finally:
        con.close()
    assert guards.is_fts_unavailable(info.value)
    assert not guards.is_structural_corruption(info.value)
