"""Sidecar lock files and new directories of the store (issue 31, security).

A symbolic link planted at ``<db>.repair.lock`` / ``.quarantine.lock`` / ``.fts_rebuild.lock``
/ ``.auto-maintenance.lock`` is refused with :class:`UnsafeLockFileError` naming the lock
path, never followed: the file it points at stays byte-identical. Directories the store
creates are 0700 and lock files 0600 even under ``umask 000``. Real files, real processes.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hermes_data.errors import UnsafeLockFileError
from hermes_data.files import open_lock_file
from hermes_data.sessions.core import maintenance as mt
from hermes_data.sessions.storage import filesafety
from hermes_data.sessions.store import SessionStore
from tests.conftest import REPO, run_cli

VICTIM_BYTES = b"precious contents that no lock file may truncate\n" * 20


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "victim.txt"
    victim.write_bytes(VICTIM_BYTES)
    return victim


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _make_store(db: Path) -> None:
    store = SessionStore(db)
    store.close()


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_repair_apply_refuses_a_symlinked_repair_lock(tmp_path):
    """The reported attack: a root-run ``hermes-data repair --apply`` with a link at
    ``<db>.repair.lock`` must not empty the link's target."""
    db = tmp_path / "state.db"
    _make_store(db)
    victim = _victim(tmp_path)
    lock = Path(f"{db}.repair.lock")
    os.symlink(victim, lock)
    db_before = _digest(db)

    out = run_cli("repair", "--url", str(db), "--apply")

    text = out.stdout + out.stderr
    assert out.returncode == 1, text
    assert str(lock) in text and "symbolic link" in text, text
    assert victim.read_bytes() == VICTIM_BYTES
    assert lock.is_symlink() and os.readlink(lock) == str(victim)
    assert _digest(db) == db_before


def test_creating_a_store_refuses_a_symlinked_quarantine_lock(tmp_path):
    db = tmp_path / "state.db"  # absent: a writable open takes <db>.quarantine.lock
    victim = _victim(tmp_path)
    lock = Path(f"{db}.quarantine.lock")
    os.symlink(victim, lock)

    with pytest.raises(UnsafeLockFileError) as info:
        SessionStore(db)

    assert info.value.path == str(lock)
    assert str(lock) in str(info.value) and "symbolic link" in str(info.value)
    assert victim.read_bytes() == VICTIM_BYTES


def test_rebuild_fts_refuses_a_symlinked_rebuild_lock(tmp_path):
    db = tmp_path / "state.db"
    store = SessionStore(db)
    try:
        victim = _victim(tmp_path)
        lock = Path(f"{db}.fts_rebuild.lock")
        os.symlink(victim, lock)
        with pytest.raises(UnsafeLockFileError) as info:
            store.rebuild_fts()
        assert info.value.path == str(lock)
        assert victim.read_bytes() == VICTIM_BYTES
    finally:
        store.close()


def test_auto_maintenance_refuses_a_symlinked_maintenance_lock(tmp_path):
    db = tmp_path / "state.db"
    store = SessionStore(db)
    try:
        victim = _victim(tmp_path)
        lock = Path(f"{db}.auto-maintenance.lock")
        os.symlink(victim, lock)
        result = mt.maybe_auto_prune_and_vacuum(store)  # never raises: reported, skipped
        assert result["skipped"] and str(lock) in result["error"]
        assert "symbolic link" in result["error"]
        assert victim.read_bytes() == VICTIM_BYTES
    finally:
        store.close()


def test_hard_links_and_non_regular_files_are_refused_and_left_alone(tmp_path):
    victim = _victim(tmp_path)
    linked = tmp_path / "state.db.repair.lock"
    os.link(victim, linked)  # a hard link: a holder record would overwrite the victim
    with pytest.raises(UnsafeLockFileError, match="hard links"):
        with filesafety.maintenance_flock(linked, 1):
            pass
    assert victim.read_bytes() == VICTIM_BYTES

    fifo = tmp_path / "state.db.quarantine.lock"
    os.mkfifo(fifo)
    with pytest.raises(UnsafeLockFileError, match="not a regular file"):
        open_lock_file(fifo)

    dangling = tmp_path / "state.db.fts_rebuild.lock"
    os.symlink(tmp_path / "nowhere", dangling)
    with pytest.raises(UnsafeLockFileError, match="symbolic link"):
        open_lock_file(dangling)
    assert not (tmp_path / "nowhere").exists()  # never created through the link


def test_an_existing_lock_file_is_opened_without_truncation(tmp_path):
    lock = tmp_path / "state.db.auto-maintenance.lock"
    lock.write_bytes(b"whatever a lock file holds")
    fd = open_lock_file(lock)
    os.close(fd)
    assert lock.read_bytes() == b"whatever a lock file holds"


UMASK_CHILD = textwrap.dedent("""
    import json, os, sys
    os.umask(0)
    from hermes_data.sessions.core import maintenance as mt
    from hermes_data.sessions.store import SessionStore
    from hermes_data.sessions.storage.repair.procedure import repair_state_db_schema
    from hermes_data.telemetry.store import TelemetryStore

    db, tel = sys.argv[1], sys.argv[2]
    store = SessionStore(db)
    store.rebuild_fts()
    r = mt.maybe_auto_prune_and_vacuum(store)
    store.close()
    report = repair_state_db_schema(db)
    TelemetryStore(tel).close()
    print(json.dumps({"maintenance": r, "repair_ok": report.ok, "repair_error": report.error}))
    """)


def test_umask_000_new_directories_are_0700_and_lock_files_0600(tmp_path):
    """A fresh store under ``umask 000`` (a real child process): every directory it
    creates is 0700 and every lock file 0600; a directory that existed is not changed."""
    os.chmod(tmp_path, 0o755)
    db = tmp_path / "a" / "b" / "state.db"
    tel = tmp_path / "t" / "telemetry.db"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", UMASK_CHILD, str(db), str(tel)],
                         capture_output=True, text=True, timeout=120, env=env, cwd=str(REPO))
    assert out.returncode == 0, out.stderr
    facts = json.loads(out.stdout.strip().splitlines()[-1])
    assert facts["repair_ok"], facts

    assert _mode(tmp_path) == 0o755  # existed: never chmod-ed
    for d in (tmp_path / "a", tmp_path / "a" / "b", tmp_path / "t"):
        assert _mode(d) == 0o700, (d, oct(_mode(d)))
    assert _mode(db) == 0o600
    locks = sorted(p.name for p in db.parent.iterdir() if p.name.endswith(".lock"))
    assert {"state.db.quarantine.lock", "state.db.repair.lock", "state.db.fts_rebuild.lock",
            "state.db.auto-maintenance.lock"} <= set(locks), locks
    for name in locks:
        assert _mode(db.parent / name) == 0o600, (name, oct(_mode(db.parent / name)))
