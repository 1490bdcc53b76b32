"""Zeroed files, the startup quarantine lock and orphan sidecars (storage spec §3.4;
acceptance behaviours 9, 10, 11)."""

from __future__ import annotations

import logging
import os
import re
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from hermes_data.errors import NotAHermesDatabaseError
from hermes_data.sessions.storage import filesafety
from hermes_data import tracked
from hermes_data.sessions.storage import quarantine
from hermes_data.sessions.errors import StateDbZeroedError
from hermes_data.sessions.storage.repair.procedure import (is_zeroed_state_db, quarantine_cross_process_lock,
                                         quarantine_zeroed_state_db)
from hermes_data.sessions.store import SessionStore

from tests.sessions.storage.repair_support import file_digest

BAK = re.compile(r"^state\.db\.zeroed-\d{8}-\d{6}-(\d+)(-\d+)?\.bak$")


def _baks(directory: Path) -> list[str]:
    return sorted(n for n in os.listdir(directory) if BAK.match(n))


# --------------------------------------------------------------------------- is_zeroed_state_db
def test_zero_probe(tmp_path):
    empty, nul, sqlite_hdr, garbage = (tmp_path / n for n in ("e.db", "n.db", "s.db", "g.db"))
    empty.write_bytes(b"")
    nul.write_bytes(bytes(4096))
    sqlite_hdr.write_bytes(b"SQLite format 3\x00" + bytes(4080))
    garbage.write_bytes(b"\x00" * 50 + b"x" + bytes(4045))
    assert is_zeroed_state_db(empty) and is_zeroed_state_db(nul)
    assert not is_zeroed_state_db(sqlite_hdr)
    assert not is_zeroed_state_db(garbage)  # a non-NUL byte within the probe
    assert is_zeroed_state_db(garbage, probe_bytes=16)  # only the probed bytes count
    assert not is_zeroed_state_db(tmp_path / "missing.db")
    assert not is_zeroed_state_db(tmp_path)  # a directory


def test_zero_probe_never_blocks_on_a_fifo(tmp_path):
    fifo = tmp_path / "state.db"
    os.mkfifo(fifo)
    assert not is_zeroed_state_db(fifo)


def test_zero_probe_with_a_live_connection_needs_force(tmp_path):
    nul = tmp_path / "state.db"
    nul.write_bytes(bytes(4096))
    con = tracked.tracked_connect(str(nul))
    try:
        assert not is_zeroed_state_db(nul)  # a raw read under a live connection: never
        assert is_zeroed_state_db(nul, force=True)
    finally:
        con.close()


# --------------------------------------------------------------------------- behaviour 9
@pytest.mark.parametrize("content", [b"", bytes(4096)], ids=["empty", "nul-4k"])
def test_zeroed_file_moves_aside_and_a_fresh_store_opens(tmp_path, content, caplog):
    db = tmp_path / "state.db"
    db.write_bytes(content)
    Path(f"{db}-journal").write_bytes(b"")  # a sidecar goes with it
    with caplog.at_level(logging.ERROR, "hermes_data.sessions.storage.quarantine"):
        with SessionStore(db) as s:
            (bak,) = _baks(tmp_path)
            assert BAK.match(bak).group(1) == str(os.getpid())
            assert any(bak in r for r in s.backend.open_repairs)
            s.create_session("a", "cli")
    assert (tmp_path / bak).read_bytes() == content
    assert Path(f"{tmp_path / bak}-journal").exists()
    assert any("zeroed" in r.message for r in caplog.records if r.levelno >= logging.ERROR)


def test_sqlite_header_and_garbage_never_move(tmp_path):
    db = tmp_path / "state.db"
    db.write_bytes(b"SQLite format 3\x00" + bytes(4080))
    before = file_digest(db)
    with pytest.raises(NotAHermesDatabaseError):
        SessionStore(db)
    assert file_digest(db) == before and not _baks(tmp_path)
    db.write_bytes(b"not a database at all" * 100)
    before = file_digest(db)
    with pytest.raises(NotAHermesDatabaseError):
        SessionStore(db)
    assert file_digest(db) == before and not _baks(tmp_path)


def test_quarantine_collision_never_overwrites(tmp_path, monkeypatch):
    monkeypatch.setattr(quarantine, "now", lambda: 1_800_000_000.0)
    db = tmp_path / "state.db"
    names = []
    for _ in range(3):
        db.write_bytes(b"")
        with quarantine_cross_process_lock(db) as got:
            assert got
            names.append(quarantine_zeroed_state_db(db, already_locked=True).name)
    assert len(set(names)) == 3 and names[1].endswith("-1.bak") and names[2].endswith("-2.bak")


def test_quarantine_without_the_lock_leaves_the_file(tmp_path, monkeypatch):
    db = tmp_path / "state.db"
    db.write_bytes(bytes(4096))
    with filesafety.maintenance_flock(f"{db}.quarantine.lock", 1) as got:
        assert got

        def other() -> None:
            result.append(quarantine_zeroed_state_db(db))
        result: list = []
        monkeypatch.setattr(quarantine, "QUARANTINE_LOCK_TIMEOUT_S", 0.1)
        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert result == [None] and db.exists() and not _baks(tmp_path)


# --------------------------------------------------------------------------- behaviour 10
OPEN_AND_READ = textwrap.dedent("""
    import sqlite3, sys, time
    from hermes_data.sessions.store import SessionStore
    start = float(sys.argv[2])
    while time.time() < start:
        time.sleep(0.001)
    with SessionStore(sys.argv[1]) as s:
        pass
    con = sqlite3.connect(sys.argv[1])
    print(con.execute("SELECT value FROM state_meta WHERE key = 'db_file_generation'").fetchone()[0])
    con.close()
""")


def test_concurrent_creation_of_an_absent_file(tmp_path):
    import time

    db = tmp_path / "state.db"
    start = time.time() + 1.5
    procs = [subprocess.Popen([sys.executable, "-c", OPEN_AND_READ, str(db), str(start)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(8)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e for _o, e in outs]
    generations = {o.strip() for o, _e in outs}
    assert len(generations) == 1 and "" not in generations
    assert not _baks(tmp_path)
    assert not [n for n in os.listdir(tmp_path) if ".orphan-" in n]


# --------------------------------------------------------------------------- behaviour 11
HOLD_OPEN = textwrap.dedent("""
    import sys, time
    f = open(sys.argv[1], "rb")
    print("ready", flush=True)
    time.sleep(60)
""")


def test_zeroed_file_with_a_foreign_holder_is_refused(tmp_path):
    db = tmp_path / "state.db"
    db.write_bytes(bytes(4096))
    proc = subprocess.Popen([sys.executable, "-c", HOLD_OPEN, str(db)], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        with pytest.raises(StateDbZeroedError) as info:
            SessionStore(db)
        assert isinstance(info.value, sqlite3.DatabaseError)
    finally:
        proc.kill()
        proc.wait()
    assert db.read_bytes() == bytes(4096) and not _baks(tmp_path)


def test_zeroed_file_with_an_injected_holder_is_refused(tmp_path):
    db = tmp_path / "state.db"
    db.write_bytes(b"")
    filesafety.set_holder_scanner(lambda p: [(-1, "process table unreadable")])
    try:
        with pytest.raises(StateDbZeroedError):
            SessionStore(db)
    finally:
        filesafety.set_holder_scanner(None)
    assert db.exists() and not _baks(tmp_path)


def test_read_only_open_of_a_zeroed_file_renames_nothing(tmp_path):
    db = tmp_path / "state.db"
    for content in (b"", bytes(4096)):
        db.write_bytes(content)
        with pytest.raises(StateDbZeroedError):
            SessionStore(db, read_only=True)
        assert db.read_bytes() == content and not _baks(tmp_path)


def test_orphan_wal_moves_aside_and_its_frames_never_appear(tmp_path):
    db = tmp_path / "state.db"
    old = tmp_path / "old.db"
    con = sqlite3.connect(old, isolation_level=None)
    con.execute("PRAGMA journal_mode = wal")
    con.execute("PRAGMA wal_autocheckpoint = 0")
    con.execute("CREATE TABLE ghost (x)")
    con.execute("INSERT INTO ghost VALUES ('frame')")
    wal_bytes = Path(f"{old}-wal").read_bytes()
    con.close()
    assert wal_bytes
    Path(f"{db}-wal").write_bytes(wal_bytes)  # a WAL without its main file
    with SessionStore(db) as s:
        assert any(".orphan-" in r for r in s.backend.open_repairs)
        names = s.backend.read(lambda c: [r[0] for r in c.exec_driver_sql(
            "SELECT name FROM sqlite_master").fetchall()])
        assert "ghost" not in names
    (orphan,) = [n for n in os.listdir(tmp_path) if n.startswith("state.db-wal.orphan-")]
    assert (tmp_path / orphan).read_bytes() == wal_bytes


def test_threads_of_one_process_create_an_absent_file_without_quarantine(tmp_path):
    db = tmp_path / "state.db"
    barrier = threading.Barrier(5)
    errors: list[BaseException] = []
    stores: list[SessionStore] = []

    def run() -> None:
        try:
            barrier.wait()
            stores.append(SessionStore(db))
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in stores:
        s.close()
    assert not errors and len(stores) == 5 and not _baks(tmp_path)


def test_postgresql_urls_are_refused():
    from hermes_data.errors import ConfigurationError

    url = "postgresql+psycopg://127.0.0.1:5432/test"
    with pytest.raises(ConfigurationError):
        quarantine_zeroed_state_db(url)
    with pytest.raises(ConfigurationError):
        with quarantine_cross_process_lock(url):
            pass
    assert not is_zeroed_state_db(url)


def test_holder_scan_sees_a_process_holding_the_file(tmp_path):
    db = tmp_path / "state.db"
    db.write_bytes(bytes(4096))
    proc = subprocess.Popen([sys.executable, "-c", HOLD_OPEN, str(db)], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        assert (proc.pid, str(db.resolve())) in filesafety.holder_scan(db)
    finally:
        proc.kill()
        proc.wait()
    assert filesafety.holder_scan(db) == []


def test_uninspectable_hermes_process_counts_as_a_holder():
    home = "/srv/a/.hermes"
    assert filesafety._names_hermes_elsewhere(["python", "-m", "hermes", "gateway"], home)
    assert filesafety._names_hermes_elsewhere(["hermes-data", "doctor"], home)
    assert filesafety._names_hermes_elsewhere(
        ["hermes", "--home", "/srv/b/.hermes"], home) is None  # another home: not ours
    assert not filesafety._names_hermes_elsewhere(["postgres", "-D", "/var/lib"], home)
