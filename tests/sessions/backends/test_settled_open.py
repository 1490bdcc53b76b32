"""The settled open (issue 14): a file this process already found settled skips the
catalogue reads, and everything the skipped reads decided still reacts to a change — a
schema change, a row to heal, a stale index, forced FTS capabilities, another file at the
same inode. Meaningful in both journal modes (the policy's default, or a forced WAL)."""

from __future__ import annotations

import sqlite3

import pytest

from hermes_data.migrate import runner as migrate
from hermes_data.engine import SqliteSettings
from hermes_data.errors import NotAHermesDatabaseError
from hermes_data.sessions.storage import opening
from hermes_data.sessions.backends import sqlite as backend_mod
from hermes_data.sessions.store import SessionStore

from tests.sessions.storage.test_open_path import dbapi_trace


@pytest.fixture
def settled(tmp_path, monkeypatch):
    """A settled file opened twice (the second open took the stamp's path), and a counter
    of the full reads the next opens make."""
    path = tmp_path / "state.db"
    with SessionStore(path) as s:
        s.create_session("a", "cli")
        s.append_message("a", "user", "hello settled world")
    SessionStore(path).close()  # records the stamp
    calls: list[str] = []
    real_identify, real_missing = migrate.identify_file, backend_mod.missing_core
    monkeypatch.setattr(migrate, "identify_file",
                        lambda *a: calls.append("identify") or real_identify(*a))
    monkeypatch.setattr(backend_mod, "missing_core",
                        lambda *a: calls.append("missing_core") or real_missing(*a))
    return path, calls


def test_a_settled_file_opens_without_the_catalogue_reads(settled):
    path, calls = settled
    with SessionStore(path) as s:
        assert s.open_repairs == []
        assert s.fts_available["messages_fts"]
        assert [r.content for r in s.get_messages("a")] == ["hello settled world"]
        assert s.search_messages("settled")
    assert calls == []


def test_a_schema_change_brings_the_full_reads_and_their_repairs_back(settled):
    path, calls = settled
    con = sqlite3.connect(path)
    con.execute("DROP TRIGGER messages_fts_insert")
    con.close()
    with SessionStore(path) as s:
        assert any("messages_fts" in r for r in s.open_repairs), s.open_repairs
        s.append_message("a", "user", "indexed again")
        assert s.search_messages("indexed")
    assert "missing_core" in calls


def test_data_the_gates_read_is_read_on_every_open(settled):
    path, _calls = settled
    con = sqlite3.connect(path)
    con.execute("INSERT INTO state_meta(key, value) VALUES ('fts_stale', '1')")  # data only
    con.commit()
    con.close()
    with SessionStore(path) as s:
        assert any("recovered stale FTS" in r for r in s.open_repairs), s.open_repairs
    con = sqlite3.connect(path)
    con.execute("DELETE FROM state_meta WHERE key = 'db_file_generation'")
    con.commit()
    con.close()
    with SessionStore(path) as s:
        assert s.get_meta("db_file_generation")  # minted again


def test_a_stale_cjk_index_flag_is_read_on_every_open(settled):
    """Another process marked the CJK-bigram index stale (data only, the schema cookie is
    unchanged): the next open in this process rebuilds it, stamp or not."""
    path, _calls = settled
    with SessionStore(path) as s:
        if not s.cjk_index_status().available:
            pytest.skip("this SQLite build has no FTS5: no CJK-bigram index")
    con = sqlite3.connect(path)
    con.execute("INSERT INTO state_meta(key, value) VALUES ('cjk_bigram_stale', '1')")
    con.commit()
    con.close()
    with SessionStore(path) as s:
        assert not s.cjk_index_status().stale, s.open_repairs


def test_forced_capabilities_are_not_answered_from_a_stamp(settled):
    path, _calls = settled
    opening.force_capabilities(opening.FtsCapabilities(fts5=False, trigram=False))
    try:
        with SessionStore(path) as s:
            assert any("FTS5 unavailable" in r for r in s.open_repairs), s.open_repairs
    finally:
        opening.force_capabilities(None)


def test_another_file_at_the_same_inode_is_identified_again(settled, tmp_path):
    path, calls = settled
    foreign = tmp_path / "foreign.db"
    con = sqlite3.connect(foreign)
    con.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
    con.commit()
    con.close()
    ino = path.stat().st_ino
    with open(path, "r+b") as f:  # a copy over the same inode (no handle is open)
        f.truncate(0)
        f.write(foreign.read_bytes())
    assert path.stat().st_ino == ino
    before = path.read_bytes()
    with pytest.raises(NotAHermesDatabaseError):
        SessionStore(path)
    assert "identify" in calls
    assert path.read_bytes() == before  # refused before the policy touched it


def test_a_schema_edit_that_keeps_the_cookie_is_seen(settled):
    """``PRAGMA writable_schema`` edits leave the schema cookie alone: the catalogue text
    the stamp holds still tells (here: the trigram table's tokenizer renamed to one no build
    has, what opening the store on a build without ``trigram`` looks like)."""
    path, _calls = settled
    con = sqlite3.connect(path, isolation_level=None)
    cookie = con.execute("PRAGMA schema_version").fetchone()[0]
    con.execute("PRAGMA writable_schema=ON")
    con.execute("UPDATE sqlite_master SET sql = replace(sql, 'tokenize=''trigram''', "
                "'tokenize=''nosuchtok''') WHERE name = 'messages_fts_trigram'")
    con.execute("PRAGMA writable_schema=OFF")
    con.close()
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA schema_version").fetchone()[0] == cookie
    con.close()
    with SessionStore(path) as s:
        assert any("unusable" in r for r in s.open_repairs), s.open_repairs
        assert s.fts_available["messages_fts_trigram"] is False


WAL = SqliteSettings(busy_timeout_ms=1000, journal_mode="wal")


@pytest.mark.parametrize("settings", [None, WAL], ids=["default", "wal"])
def test_the_stamp_is_matched_from_the_header_bytes_in_either_mode(tmp_path, monkeypatch,
                                                                   settings):
    """No statement before the connection policy: the file's header bytes answer the cookie
    and ``application_id`` (a WAL file's too), so the first statement is the policy's
    journal-mode read and the identity rule is skipped."""
    path = tmp_path / "state.db"
    with SessionStore(path, settings=settings) as s:
        s.create_session("a", "cli")
    SessionStore(path, settings=settings).close()  # records the stamp
    calls: list[str] = []
    real_identify = migrate.identify_file
    monkeypatch.setattr(migrate, "identify_file",
                        lambda *a: calls.append("identify") or real_identify(*a))
    with dbapi_trace() as seen, SessionStore(path, settings=settings) as s:
        assert s.open_repairs == []
    assert seen[0] == "PRAGMA journal_mode", seen[:3]
    assert calls == []


def test_a_wal_header_behind_its_wal_still_brings_the_full_reads(tmp_path, monkeypatch):
    """WAL only (forced here): another connection changed the schema and the WAL was not
    checkpointed (a reader pins it), so the header bytes on disk still match the stamp. The
    read transaction's cookie tells: the full reads run and repair the file."""
    path = tmp_path / "state.db"
    with SessionStore(path, settings=WAL) as s:
        s.create_session("a", "cli")
    SessionStore(path, settings=WAL).close()  # records the stamp
    before = path.read_bytes()[:100]
    pin = sqlite3.connect(path, isolation_level=None)
    editor = sqlite3.connect(path, isolation_level=None)
    try:
        editor.execute("PRAGMA wal_autocheckpoint=0")
        pin.execute("BEGIN")
        pin.execute("SELECT count(*) FROM sessions").fetchone()  # holds the old snapshot
        editor.execute("DROP TRIGGER messages_fts_insert")
        assert path.read_bytes()[:100] == before  # the header on disk still says the stamp
        calls: list[str] = []
        real_missing = backend_mod.missing_core
        monkeypatch.setattr(backend_mod, "missing_core",
                            lambda *a: calls.append("missing_core") or real_missing(*a))
        with SessionStore(path, settings=WAL) as s:
            assert any("messages_fts" in r for r in s.open_repairs), s.open_repairs
            s.append_message("a", "user", "indexed after the repair")
            assert s.search_messages("repair")
        assert calls == ["missing_core"]
    finally:
        pin.close()
        editor.close()
