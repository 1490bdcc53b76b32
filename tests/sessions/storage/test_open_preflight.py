"""Writability preflight of a writable open (spec sessions.md §8.1 step 2, seed 003).

The tests run as root, which bypasses permission bits for I/O, so they check the decision
(mode bits in, repair-or-refuse out), the repair (mode bits before/after via ``stat``), the
refusal text, and that a ``-wal`` is never deleted, truncated or rewritten — not EACCES.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import sqlite3
import stat
from pathlib import Path

import pytest

from hermes_data.engine import SqliteSettings
from hermes_data.sessions.storage import opening
from hermes_data.sessions.errors import StateDbPermissionError
from hermes_data.sessions.store import SessionStore

WAL = SqliteSettings(busy_timeout_ms=1000, journal_mode="wal")


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def _fake_stat(mode: int) -> os.stat_result:
    return os.stat_result((mode, 1, 1, 1, 0, 0, 0, 0, 0, 0))


def _fingerprint(path: Path) -> tuple[int, int, int, str]:
    st = os.stat(path)
    return st.st_dev, st.st_ino, st.st_size, hashlib.sha256(path.read_bytes()).hexdigest()


# -- the decision ------------------------------------------------------------------------


def test_plan_repairs_inside_home_refuses_outside_and_skips_what_is_fine(tmp_path):
    home = tmp_path / "home"
    db = home / "profiles" / "p1" / "state.db"
    outside = tmp_path / "elsewhere" / "state.db"
    plan = opening.plan_writability({
        db.parent: _fake_stat(stat.S_IFDIR | 0o500),
        db: _fake_stat(stat.S_IFREG | 0o400),
        Path(f"{db}-wal"): _fake_stat(stat.S_IFREG | 0o644),  # fine: left alone
        Path(f"{db}-shm"): None,  # absent: skipped
        outside: _fake_stat(stat.S_IFREG | 0o200),
    }, home)
    by_path = {s.path: s for s in plan}
    assert set(by_path) == {db.parent, db, outside}

    d = by_path[db.parent]
    assert d.is_dir and d.repair and d.wanted == 0o700
    assert d.command == f"chmod u+rwx {db.parent}"
    f = by_path[db]
    assert not f.is_dir and f.repair and f.wanted == 0o600 and f.command == f"chmod u+rw {db}"
    o = by_path[outside]
    assert not o.repair and o.wanted == 0o600
    # Group/other bits are kept: only the missing owner bits are added (chmod u+rw).
    assert opening.plan_writability({db: _fake_stat(stat.S_IFREG | 0o444)}, home)[0].wanted == 0o644


def test_plan_judges_mode_bits_not_access(tmp_path):
    # Root can read and write a 0o000 file, the next non-root process cannot: bits decide.
    home = tmp_path
    db = tmp_path / "state.db"
    db.write_bytes(b"")
    os.chmod(db, 0o000)
    assert os.access(db, os.R_OK | os.W_OK) == (os.geteuid() == 0)
    (step,) = opening.plan_writability({db: os.stat(db)}, home)
    assert step.repair and step.mode == 0


def test_command_is_shell_quoted(tmp_path):
    db = tmp_path / "my stores" / "state.db"
    (step,) = opening.plan_writability({db: _fake_stat(stat.S_IFREG | 0o400)}, tmp_path / "home")
    assert step.command == f"chmod u+rw '{db}'"


# -- the repair through the store --------------------------------------------------------


def _snapshot_with_live_wal(src: Path, dest: Path) -> None:
    """Copy ``src`` plus a ``-wal`` holding a committed, un-checkpointed session 'in-wal'
    (what a crashed writer leaves behind) to ``dest``."""
    con = sqlite3.connect(src, isolation_level=None)
    try:
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        con.execute("PRAGMA wal_autocheckpoint=0")
        con.execute("INSERT INTO sessions (id, source, started_at) VALUES ('in-wal', 'cli', 1.0)")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)
        shutil.copyfile(f"{src}-wal", f"{dest}-wal")
    finally:
        con.close()


def test_read_only_files_inside_the_home_are_repaired_by_path_and_the_wal_survives(
        tmp_path, _isolated_home, caplog):
    src = tmp_path / "src" / "state.db"
    with SessionStore(src, settings=WAL) as s:
        s.create_session("a", "cli")
    db = _isolated_home / "state.db"
    _snapshot_with_live_wal(src, db)
    wal = Path(f"{db}-wal")
    assert wal.stat().st_size > 0
    os.chmod(db, 0o400)
    os.chmod(wal, 0o400)
    os.chmod(db.parent, 0o500)
    before = _fingerprint(wal)

    # The step alone: modes repaired by path, the -wal byte-for-byte the same file.
    with caplog.at_level(logging.WARNING, logger="hermes_data.sessions.storage.opening"):
        repairs = opening.writability_preflight(db, _isolated_home)
    assert (_mode(db.parent), _mode(db), _mode(wal)) == (0o700, 0o600, 0o600)
    assert _fingerprint(wal) == before
    assert len(repairs) == 3 and any("chmod u+rw" in r and str(wal) in r for r in repairs)
    assert sum("repaired" in r.message for r in caplog.records) == 3

    # Through the constructor: read-only again, repaired again, the WAL's commit is there.
    os.chmod(db, 0o400)
    os.chmod(wal, 0o400)
    os.chmod(db.parent, 0o500)
    with SessionStore(db, settings=WAL) as s:
        assert (_mode(db.parent), _mode(db)) == (0o700, 0o600)
        assert any(str(wal) in r for r in s.open_repairs)
        assert s.get_session("in-wal") is not None  # the WAL was replayed, not discarded
        assert s.get_session("a") is not None
        s.append_message("a", "user", "still writable")


def test_second_open_of_a_repaired_store_repairs_nothing(_isolated_home):
    db = _isolated_home / "sub" / "state.db"
    with SessionStore(db):
        pass
    os.chmod(db, 0o200)
    with SessionStore(db) as s:
        assert any("chmod u+rw" in r for r in s.open_repairs)
    with SessionStore(db) as s:
        assert not any("chmod" in r for r in s.open_repairs)
    assert _mode(db) == 0o600


# -- refusals ------------------------------------------------------------------------------


def test_a_read_only_file_outside_the_home_is_refused_with_the_chmod_command(tmp_path):
    db = tmp_path / "state.db"  # tmp_path is outside HERMES_HOME (conftest)
    with SessionStore(db) as s:
        s.create_session("a", "cli")
    os.chmod(db, 0o400)
    with pytest.raises(StateDbPermissionError) as info:
        SessionStore(db)
    err = info.value
    assert isinstance(err, PermissionError)
    assert err.path == str(db) and err.command == f"chmod u+rw {db}"
    msg = str(err)
    assert str(db) in msg and f"Run: chmod u+rw {db}" in msg and "mode 400" in msg
    assert "outside the Hermes home" in msg
    assert _mode(db) == 0o400  # not touched
    # A read-only open is not a writable open: no preflight, the file is readable.
    with SessionStore(db, read_only=True) as ro:
        assert ro.get_session("a") is not None


def test_a_read_only_wal_outside_the_home_is_refused_and_left_in_place(tmp_path):
    src = tmp_path / "src" / "state.db"
    with SessionStore(src, settings=WAL) as s:
        s.create_session("a", "cli")
    db = tmp_path / "copy" / "state.db"
    _snapshot_with_live_wal(src, db)
    wal = Path(f"{db}-wal")
    os.chmod(wal, 0o400)
    before = _fingerprint(wal)
    with pytest.raises(StateDbPermissionError, match=f"Run: chmod u\\+rw {wal}") as info:
        SessionStore(db, settings=WAL)
    assert info.value.path == str(wal)
    assert wal.exists() and _fingerprint(wal) == before and _mode(wal) == 0o400
    os.chmod(wal, 0o600)  # what the message says to do
    with SessionStore(db, settings=WAL) as s:
        assert s.get_session("in-wal") is not None


def test_a_directory_outside_the_home_needs_u_rwx(tmp_path):
    d = tmp_path / "stores"
    d.mkdir()
    os.chmod(d, 0o500)
    try:
        with pytest.raises(StateDbPermissionError, match=f"Run: chmod u\\+rwx {d}$") as info:
            SessionStore(d / "state.db")
        assert "directory" in str(info.value)
        assert not (d / "state.db").exists()  # refused before the first creation
    finally:
        os.chmod(d, 0o700)


def test_a_failing_chmod_inside_the_home_is_reported_with_the_command(_isolated_home, monkeypatch):
    db = _isolated_home / "state.db"
    with SessionStore(db):
        pass
    os.chmod(db, 0o400)
    real_chmod = os.chmod

    def chmod(path, mode, *a, **kw):
        if Path(path) == db:
            raise PermissionError(1, "Operation not permitted", str(path))
        return real_chmod(path, mode, *a, **kw)

    monkeypatch.setattr(opening.os, "chmod", chmod)
    with pytest.raises(StateDbPermissionError, match="chmod failed: Operation not permitted") as info:
        SessionStore(db)
    assert info.value.command == f"chmod u+rw {db}" and f"Run: chmod u+rw {db}" in str(info.value)
    monkeypatch.undo()
    assert _mode(db) == 0o400
