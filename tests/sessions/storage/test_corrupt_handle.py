"""``StateDbCorruptError`` amended (storage spec §3.5; acceptance behaviour 12): a
``sqlite3.DatabaseError`` carrying the cause's code, sticky for writes and maintenance, and
the close checkpoint of a quarantined writer disabled where Python can (≥ 3.12)."""

from __future__ import annotations

import logging
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hermes_data.engine import SqliteSettings
from hermes_data.sessions.storage import filesafety
from hermes_data.sessions.core import maintenance
from hermes_data.sessions.errors import SessionStoreError, StateDbCorruptError
from hermes_data.sessions.store import SessionStore

WAL = SqliteSettings(busy_timeout_ms=1000, journal_mode="wal")

DAMAGE = textwrap.dedent("""
    import os, sqlite3, sys
    path, page, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    fd = os.open(path, os.O_RDWR)
    os.pwrite(fd, b"\\xff" * size, (page - 1) * size)
    os.close(fd)
    con = sqlite3.connect(path, isolation_level=None, timeout=10)
    con.execute("INSERT OR REPLACE INTO state_meta (key, value) VALUES ('probe', 'x')")
    con.close()
""")


def _quarantine(s: SessionStore, path: Path) -> StateDbCorruptError:
    s.create_session("a", "cli")
    page, size = s.backend.read(lambda c: (
        c.exec_driver_sql("SELECT rootpage FROM sqlite_master WHERE name = 'sessions'").scalar(),
        c.exec_driver_sql("PRAGMA page_size").scalar()))
    s.backend.checkpoint()
    subprocess.run([sys.executable, "-c", DAMAGE, str(path), str(page), str(size)], check=True,
                   timeout=30)
    with pytest.raises(StateDbCorruptError) as info:
        s.append_message("a", "user", "x")
    return info.value


def test_the_error_is_a_database_error_with_the_cause_code(tmp_path, caplog):
    path = tmp_path / "state.db"
    with caplog.at_level(logging.WARNING, "hermes_data.sessions.storage.filesafety"):
        with SessionStore(path) as s:
            err = _quarantine(s, path)
            assert isinstance(err, sqlite3.DatabaseError) and isinstance(err, SessionStoreError)
            assert err.sqlite_errorcode is not None and err.sqlite_errorcode & 0xFF == 11
            assert err.sqlite_errorname.startswith("SQLITE_CORRUPT")
            with pytest.raises(sqlite3.Error) as caught:  # `except sqlite3.Error` still works
                s.create_session("b", "cli")
            assert caught.value is err
            with pytest.raises(StateDbCorruptError):
                maintenance.vacuum(s)
            for name in ("optimize_fts", "rebuild_fts", "merge_fts", "optimize_fts_storage",
                         "cjk_index_step"):  # the maintenance verbs (storage §3.5)
                with pytest.raises(StateDbCorruptError):
                    getattr(s, name)()
    if sys.version_info < (3, 12):
        assert any("NO_CKPT_ON_CLOSE is not available" in r.message for r in caplog.records)


def test_the_message_names_the_file_and_the_cause():
    cause = sqlite3.DatabaseError("database disk image is malformed")
    cause.sqlite_errorcode, cause.sqlite_errorname = 11, "SQLITE_CORRUPT"
    err = StateDbCorruptError("/x/state.db", cause)
    assert "/x/state.db" in str(err) and "malformed" in str(err)
    assert (err.sqlite_errorcode, err.sqlite_errorname) == (11, "SQLITE_CORRUPT")
    plain = StateDbCorruptError("/x/state.db", "no code")
    assert plain.sqlite_errorcode is None


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="Connection.setconfig exists there")
def test_without_setconfig_the_close_checkpoint_remains_logged(caplog):
    con = sqlite3.connect(":memory:")
    try:
        with caplog.at_level(logging.WARNING, "hermes_data.sessions.storage.filesafety"):
            assert filesafety.no_checkpoint_on_close(con, "state.db") is False
    finally:
        con.close()
    assert "remains" in caplog.text


@pytest.mark.skipif(sys.version_info < (3, 12), reason="needs Connection.setconfig (3.12)")
def test_a_quarantined_close_keeps_the_wal(tmp_path):  # pragma: no cover - Python >= 3.12
    path = tmp_path / "state.db"
    s = SessionStore(path, settings=WAL)
    try:
        _quarantine(s, path)
        assert Path(f"{path}-wal").exists()
    finally:
        s.close()
    assert Path(f"{path}-wal").exists()
