"""The module-level names of ``hermes_data.compat`` behave as upstream's (docs/compat.md
"Module-level names"): the exceptions keep upstream's builtin bases, the constants carry
upstream's values, the shared-handle registry hands out and takes back ``SessionDB`` handles,
and ``repair_state_db_schema`` reports a dict."""

from __future__ import annotations

import json
import sqlite3
import typing

import pytest

import hermes_data.compat as compat
from hermes_data.compat import SessionDB
from hermes_data.sessions.rows import SessionStatus


@pytest.mark.parametrize("name,base", [
    ("SessionResumeTooLargeError", ValueError), ("SessionExportTooLargeError", ValueError),
    ("WalUnsupportedError", sqlite3.OperationalError),
    ("CompressionSessionClosedError", RuntimeError), ("CompressionSessionBusyError", RuntimeError),
    ("SessionCompressionInProgressError", RuntimeError), ("StateDbReplacedError", RuntimeError),
    ("DeletedWalGenerationError", RuntimeError), ("SessionTurnLeaseLostError", RuntimeError),
    ("StateDbCorruptError", sqlite3.DatabaseError),
])
def test_exceptions_keep_upstreams_builtin_base(name, base):
    assert issubclass(getattr(compat, name), base)


def test_constants_carry_upstreams_values():
    assert compat.MAX_SAFE_RESUME_MESSAGES == 20_000
    assert compat.MAX_SAFE_EXPORT_MESSAGES == 20_000
    assert compat.AUTO_VACUUM_MIN_FREELIST_RATIO == 0.25
    assert compat.DEFAULT_DB_PATH.name == "state.db"
    statuses = (compat.SESSION_STATUS_COMPLETE, compat.SESSION_STATUS_INTERRUPTED,
                compat.SESSION_STATUS_ERROR, compat.SESSION_STATUS_EMPTY)
    assert statuses == ("complete", "interrupted", "error", "empty")
    assert set(statuses) == set(typing.get_args(SessionStatus))
    assert compat.classify_session_status("assistant", False, "stop") == \
        compat.SESSION_STATUS_COMPLETE
    assert compat.classify_session_status("user", False, None) == \
        compat.SESSION_STATUS_INTERRUPTED


def test_shared_handles_are_sessiondbs_over_one_store(tmp_path):
    path = tmp_path / "state.db"
    first = compat.get_shared_session_db(path)
    second = compat.get_shared_session_db(path)
    try:
        assert isinstance(first, SessionDB) and isinstance(second, SessionDB)
        assert first.store is second.store  # one writer per file and process
        first.create_session("s1", "cli")
        assert second.get_session("s1")["source"] == "cli"
    finally:
        assert compat.release_shared_session_db(first) is True
        compat.release_or_close(second)  # the last reference: really closed
    assert compat.release_shared_session_db(second) is False  # no longer known
    owned = SessionDB(path)
    compat.release_or_close(owned)  # not shared: closed
    with pytest.raises(Exception, match="closed"):
        owned.get_session("s1")
    again = compat.get_shared_session_db(path)
    assert again.get_session("s1") is not None
    assert compat.close_shared_session_dbs() >= 1


def test_close_on_a_shared_handle_releases_it(tmp_path):
    path = tmp_path / "state.db"
    a = compat.get_shared_session_db(path)
    b = compat.get_shared_session_db(path)
    a.close()  # gives back a's reference only
    b.create_session("s1", "cli")
    assert b.get_session("s1") is not None
    b.close()
    assert compat.release_shared_session_db(b) is False


def test_repair_state_db_schema_reports_a_dict(tmp_path):
    path = tmp_path / "state.db"
    SessionDB(path).close()
    report = compat.repair_state_db_schema(path, backup=False)
    assert type(report) is dict
    assert {"repaired", "strategy", "backup_path", "error"} <= set(report)
    assert report["error"] is None
    missing = compat.repair_state_db_schema(tmp_path / "absent.db", backup=False)
    assert missing["repaired"] is False and missing["error"]


def test_repair_state_db_schema_on_a_healthy_file_reports_repaired(tmp_path):
    path = tmp_path / "state.db"
    SessionDB(path).close()
    assert compat.repair_state_db_schema(path, backup=False)["repaired"] is True


def test_persistence_error_classification():
    assert compat.classify_persistence_error("database or disk is full") in \
        compat.PERSISTENCE_ERROR_CAUSES
    assert compat.is_disk_full_error("database or disk is full") is True
    assert compat.is_disk_full_error("syntax error") is False
    assert compat.workspace_key({"git_repo_root": " /repo ", "cwd": "/repo/sub"}) == "/repo"
    assert compat.format_session_db_unavailable("Sessions off").startswith("Sessions off")


def test_wal_reset_vulnerability_by_version():
    # Upstream's bounds: 3.7.0–3.51.2 vulnerable, 3.51.3+ fixed, backports 3.50.7 and 3.44.6.
    assert compat.is_sqlite_wal_reset_vulnerable((3, 40, 1)) is True
    assert compat.is_sqlite_wal_reset_vulnerable((3, 51, 3)) is False
    assert compat.is_sqlite_wal_reset_vulnerable((3, 44, 6)) is False
    assert compat.is_sqlite_wal_reset_vulnerable() is \
        compat.is_sqlite_wal_reset_vulnerable(sqlite3.sqlite_version_info)


def test_last_init_error_is_the_failures_text(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(Exception) as failure:
        SessionDB(blocker / "state.db")
    text = compat.get_last_init_error()
    assert isinstance(text, str) and text == str(failure.value)


def test_preflight_repairs_owner_bits_inside_the_home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HERMES_HOME", str(home))
    db = home / "state.db"
    db.write_bytes(b"")
    db.chmod(0o444)
    assert compat.preflight_db_writability(db) is None
    assert db.stat().st_mode & 0o200


def test_deleted_sidecar_holders_of_a_healthy_file_is_empty(tmp_path):
    db = SessionDB(tmp_path / "state.db")
    try:
        db.append_message(db.create_session("s1", "cli"), "user", "hi")
        assert compat.iter_deleted_sqlite_sidecar_holders(tmp_path / "state.db") == []
    finally:
        db.close()


def test_sqlite_source_id_names_the_linked_build():
    assert compat.sqlite_source_id() == \
        sqlite3.connect(":memory:").execute("select sqlite_source_id()").fetchone()[0]


def test_divert_session_transcript_jsonl_appends_the_turn(tmp_path, monkeypatch):
    monkeypatch.setenv("HERMES_HOME", str(tmp_path))
    first = compat.divert_session_transcript_jsonl("s1", [{"role": "user", "content": "hi"}])
    again = compat.divert_session_transcript_jsonl("s1", [{"role": "assistant", "content": "yo"}])
    assert first == again == tmp_path / "sessions" / "s1.jsonl"
    lines = first.read_text().splitlines()
    assert [json.loads(line)["content"] for line in lines] == ["hi", "yo"]
