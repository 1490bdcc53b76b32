"""Malformed-schema repair (storage spec §3.3; acceptance behaviours 3, 4, 5, 7, 8) on damaged
copies of the shared legacy ``state.db`` (``state_fork_v21``)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections import namedtuple
from pathlib import Path

import pytest

from hermes_data.errors import ConfigurationError
from hermes_data.sessions.storage import filesafety
from hermes_data import tracked
from hermes_data.sessions.storage.repair import procedure as repair
from hermes_data.sessions.storage.repair import backup as rb
from hermes_data.sessions.errors import LiveConnectionError, StateDbMalformedError
from hermes_data.sessions.store import SessionStore

from tests.sessions.storage.repair_support import (duplicate_schema_row, file_digest, legacy_copy, table_digests,
                             truncate, zero)

pytestmark = pytest.mark.journal_independent("repairs a copied legacy WAL-header file; the "
                                             "store's journal policy plays no part")

Usage = namedtuple("Usage", "total used free")


@pytest.fixture
def undamaged(tmp_path) -> dict:
    """Digests of the undamaged legacy copy."""
    return table_digests(legacy_copy(tmp_path, "pristine.db"))


@pytest.fixture
def dup(tmp_path) -> Path:
    path = legacy_copy(tmp_path)
    duplicate_schema_row(path)
    return path


def _assert_malformed(path: Path) -> None:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        with pytest.raises(sqlite3.DatabaseError, match="malformed database schema"):
            con.execute("SELECT COUNT(*) FROM sessions").fetchall()
    finally:
        con.close()


# --------------------------------------------------------------------------- classification
def test_error_classification(dup):
    con = sqlite3.connect(dup)
    try:
        with pytest.raises(sqlite3.DatabaseError) as info:
            con.execute("PRAGMA journal_mode").fetchall()
    finally:
        con.close()
    assert repair.is_malformed_schema_error(info.value)
    assert repair.is_malformed_db_error(info.value)
    wrapped = RuntimeError("outer")
    wrapped.__cause__ = info.value
    assert repair.is_malformed_schema_error(wrapped)
    image = sqlite3.DatabaseError("database disk image is malformed")
    assert repair.is_malformed_db_error(image) and not repair.is_malformed_schema_error(image)
    assert not repair.is_malformed_db_error(sqlite3.OperationalError("database is locked"))


# --------------------------------------------------------------------------- the acceptance
def test_duplicate_schema_row_repair_restores_every_row(dup, undamaged):
    before = file_digest(dup)
    report = repair.repair_state_db_schema(dup)
    assert report.repaired and report.rewritten and report.strategy == "dedup_schema", report.error
    assert report.journal_mode_before == "wal"
    assert table_digests(dup) == undamaged  # counts and checksums of every table
    assert repair.opens_cleanly(dup)
    (bundle,) = rb.bundles(dup)
    assert str(bundle) == report.backup_path and file_digest(bundle) == before
    assert not rb.ledger_path(dup).exists() and not rb.scratch_path(dup).exists()
    assert report.inventory["messages"][0] == undamaged["messages"][0]


@pytest.mark.parametrize("damage", ["zeroed", "truncated"])
def test_unrepairable_copies_are_refused_and_left_byte_identical(tmp_path, damage, undamaged):
    path = legacy_copy(tmp_path)
    (zero if damage == "zeroed" else truncate)(path)
    before = file_digest(path)
    report = repair.repair_state_db_schema(path)
    assert not report.repaired and report.error
    assert file_digest(path) == before
    for bundle in rb.bundles(path):  # a backup, when one was made, is the damaged image
        assert file_digest(bundle) == before
    assert not rb.scratch_path(path).exists()
    if damage == "zeroed":
        assert "zeroed" in report.error and not rb.bundles(path)


def test_postgresql_url_is_a_configuration_error():
    with pytest.raises(ConfigurationError):
        repair.repair_state_db_schema("postgresql+psycopg://127.0.0.1/test")


def test_healthy_file_is_already_healthy(tmp_path):
    path = legacy_copy(tmp_path)
    before = file_digest(path)
    rb.record_failure(path, "an earlier failed attempt")  # a stale record of a failure
    report = repair.repair_state_db_schema(path)
    # Upstream's report (issue 33): a healthy file is repaired=True, strategy already_healthy.
    assert report.ok and report.strategy == "already_healthy" and report.repaired
    assert not report.rewritten and report.to_dict()["repaired"] is True
    assert file_digest(path) == before and not rb.bundles(path)
    assert not rb.ledger_path(path).exists()  # the health check clears it, as upstream's


# --------------------------------------------------------------------------- behaviour 3
def test_writable_open_repairs_once(dup, undamaged):
    with SessionStore(dup) as s:
        assert any("malformed schema repaired (dedup_schema" in r for r in s.backend.open_repairs)
        assert s.journal_mode == "wal"
        n = s.backend.read(lambda c: c.exec_driver_sql("SELECT COUNT(*) FROM messages").scalar())
        assert n == undamaged["messages"][0]
    assert len(rb.bundles(dup)) == 1 and not rb.ledger_path(dup).exists()


def test_writable_open_raises_malformed_when_repair_fails(tmp_path):
    path = legacy_copy(tmp_path)
    duplicate_schema_row(path, "messages", differ=True)  # differing copies of a real table
    before = file_digest(path)
    with pytest.raises(StateDbMalformedError) as info:
        SessionStore(path)
    err = info.value
    assert isinstance(err, sqlite3.DatabaseError) and err.sqlite_errorname == "SQLITE_CORRUPT"
    assert err.report is not None and err.report.error and file_digest(path) == before
    with pytest.raises(StateDbMalformedError, match="already tried"):  # one repair per process
        SessionStore(path)
    assert rb.read_ledger(path).failed_attempts == 1


WAIT_OPEN = textwrap.dedent("""
    import sys
    from hermes_data.sessions.store import SessionStore
    print("started", flush=True)
    with SessionStore(sys.argv[1]) as s:
        print("|".join(s.backend.open_repairs), flush=True)
""")


def test_second_process_waits_for_the_repair_lock_then_opens_without_repairing(dup):
    lock = f"{dup}.repair.lock"
    with filesafety.maintenance_flock(lock, 5) as got:
        assert got
        proc = subprocess.Popen([sys.executable, "-c", WAIT_OPEN, str(dup)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "started"
        time.sleep(1.0)  # the child meets the malformed schema and waits on the lock
        assert proc.poll() is None
        # "The first process" repairs meanwhile (under the lock it holds).
        con = sqlite3.connect(dup, isolation_level=None)
        con.execute("PRAGMA writable_schema = ON")
        con.execute("DELETE FROM sqlite_master WHERE rowid NOT IN "
                    "(SELECT MIN(rowid) FROM sqlite_master GROUP BY type, name)")
        version = con.execute("PRAGMA schema_version").fetchone()[0]
        con.execute(f"PRAGMA schema_version = {version + 1}")
        con.close()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "malformed schema repaired (already_healthy)" in out
    assert not rb.bundles(dup)


def test_lock_not_acquired_but_healthy_is_repaired_by_other_process(tmp_path, monkeypatch, dup):
    monkeypatch.setattr(repair, "REPAIR_LOCK_WAIT_S", 0.1)
    with filesafety.maintenance_flock(f"{dup}.repair.lock", 5):
        report = repair.repair_state_db_schema(dup)
        assert report.error and "repair.lock" in report.error and not report.counted
        healthy = legacy_copy(tmp_path, "healthy.db")
        with filesafety.maintenance_flock(f"{healthy}.repair.lock", 5):
            report = repair.repair_state_db_schema(healthy)
            assert report.strategy == "repaired_by_other_process" and report.repaired
    assert not rb.ledger_path(dup).exists()


# --------------------------------------------------------------------------- behaviour 4
HOLD = textwrap.dedent("""
    import sqlite3, sys, time
    con = sqlite3.connect(sys.argv[1])
    con.execute("PRAGMA writable_schema = ON")
    con.execute("SELECT COUNT(*) FROM messages").fetchall()   # WAL: idle, holding the file
    print("ready", flush=True)
    time.sleep(60)
""")


@pytest.mark.parametrize("scan", ["real", "blind"])
def test_another_process_holding_the_file_refuses_without_copying(dup, scan):
    before = file_digest(dup)
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(dup)], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        if scan == "blind":  # the holder scan misses it: the lock probe still sees the peer
            filesafety.set_holder_scanner(lambda p: [])
        report = repair.repair_state_db_schema(dup)
    finally:
        filesafety.set_holder_scanner(None)
        proc.kill()
        proc.wait()
    assert not report.repaired and ("held" in report.error or "locked" in report.error)
    assert "stop the gateway" in report.error
    assert not rb.bundles(dup) and file_digest(dup) == before and not report.counted


def test_tracked_connection_in_this_process_refuses_and_reads_nothing(dup):
    con = tracked.tracked_connect(str(dup))
    try:
        assert tracked.live_connections(dup) == 1
        report = repair.repair_state_db_schema(dup)
        assert "close every handle first" in report.error
        with pytest.raises(LiveConnectionError):
            with filesafety.offline_file_access(dup, "hash it"):
                pass
        assert rb.fingerprint(dup) is None  # a raw read is refused too
    finally:
        con.close()
    assert tracked.live_connections(dup) == 0
    assert not rb.bundles(dup) and not rb.ledger_path(dup).exists()


# --------------------------------------------------------------------------- behaviour 5
def test_a_scratch_that_lost_messages_is_never_promoted(tmp_path, monkeypatch):
    path = legacy_copy(tmp_path)
    duplicate_schema_row(path, "messages", differ=True)  # dedup refuses: real table copies differ
    before = file_digest(path)

    def vacuum_drops_messages(con, complete):
        # What VACUUM does with an entry it cannot parse: the table and its rows are gone.
        con.execute("PRAGMA writable_schema = ON")
        con.execute("DELETE FROM sqlite_master WHERE tbl_name = 'messages' OR "
                    "name GLOB 'messages_fts*'")
        con.execute("PRAGMA writable_schema = RESET")
        con.execute("VACUUM")

    monkeypatch.setitem(repair._STRATEGY_FNS, "drop_fts_rebuild", vacuum_drops_messages)
    report = repair.repair_state_db_schema(path)
    assert not report.repaired and "row inventory changed" in report.error
    assert file_digest(path) == before and report.counted


# --------------------------------------------------------------------------- behaviour 7
def _bump_header(path: Path) -> None:
    """What a DELETE-mode commit does to the header: change counter and version-valid-for."""
    with open(path, "r+b") as f:
        head = bytearray(f.read(100))
        for off in (24, 92):
            n = int.from_bytes(head[off:off + 4], "big") + 1
            head[off:off + 4] = n.to_bytes(4, "big")
        f.seek(0)
        f.write(head)


def test_three_failures_exhaust_the_ledger(tmp_path, monkeypatch):
    path = legacy_copy(tmp_path)
    duplicate_schema_row(path, "messages", differ=True)
    clock = iter(range(1_000_000, 2_000_000, 7))
    monkeypatch.setattr(rb, "now", lambda: float(next(clock)))
    for attempt in (1, 2, 3):
        report = repair.repair_state_db_schema(path)
        assert report.error and report.counted
        assert rb.read_ledger(path).failed_attempts == attempt
        if attempt < 3:
            _bump_header(path)  # DELETE-mode commits in between do not reset the budget
    before = file_digest(path)
    started = time.monotonic()
    report = repair.repair_state_db_schema(path)
    assert "exhausted" in report.error and not report.counted
    assert time.monotonic() - started < 1
    assert not Path(f"{path}.repair.lock").read_bytes()  # released, no record left behind
    assert file_digest(path) == before
    ledger = json.loads(rb.ledger_path(path).read_text())
    assert set(ledger) >= {"fingerprint", "failed_attempts", "last_attempt"}
    assert ledger["failed_attempts"] == 3 and ledger["last_error"]
    # Each header bump is another image for the bundles (full content identity).
    assert 1 <= len(rb.bundles(path)) <= 3
    rb.ledger_path(path).unlink()  # deleting the ledger forces a retry
    assert repair.repair_state_db_schema(path).counted


def test_identical_image_reuses_its_bundle(tmp_path):
    path = legacy_copy(tmp_path)
    duplicate_schema_row(path, "messages", differ=True)
    first = repair.repair_state_db_schema(path)
    second = repair.repair_state_db_schema(path)
    assert first.backup_path == second.backup_path and len(rb.bundles(path)) == 1


def test_success_deletes_the_ledger(dup):
    rb.record_failure(dup, "earlier")
    rb.record_failure(dup, "earlier")
    assert rb.read_ledger(dup).failed_attempts == 2
    assert repair.repair_state_db_schema(dup).repaired
    assert not rb.ledger_path(dup).exists()


def test_too_little_disk_refuses_before_copying_and_is_not_counted(dup, monkeypatch):
    before = file_digest(dup)
    monkeypatch.setattr(rb, "disk_usage", lambda p: Usage(10**12, 10**12 - 10**6, 10**6))
    report = repair.repair_state_db_schema(dup)
    assert "disk space" in report.error and not report.counted
    assert not rb.bundles(dup) and not rb.ledger_path(dup).exists()
    assert file_digest(dup) == before
    assert not [p for p in os.listdir(dup.parent) if "staging" in p]

    def fails(p):
        raise OSError("statvfs failed")

    monkeypatch.setattr(rb, "disk_usage", fails)
    assert "free space unknown" in repair.repair_state_db_schema(dup).error


def test_no_more_than_three_bundles_remain(tmp_path, monkeypatch):
    path = legacy_copy(tmp_path)
    stamps = iter(range(1_700_000_000, 1_800_000_000, 3600))
    monkeypatch.setattr(rb, "now", lambda: float(next(stamps)))
    made = []
    for i in range(5):
        with open(path, "r+b") as f:  # another image each time
            f.seek(path.stat().st_size - 1)
            f.write(bytes([i]))
        made.append(rb.make_bundle(path)[0])
    assert rb.bundles(path) == list(reversed(made[-3:]))
    assert not any(p.exists() for p in made[:2])


def test_fingerprint_ignores_the_commit_counters(tmp_path):
    path = legacy_copy(tmp_path)
    fp = rb.fingerprint(path)
    _bump_header(path)
    assert rb.fingerprint(path) == fp and fp.startswith(f"{path.stat().st_size}:")
    with open(path, "r+b") as f:
        f.seek(40)
        f.write(b"\x01")
    assert rb.fingerprint(path) != fp


# --------------------------------------------------------------------------- behaviour 8
FORKED_HOLDER = textwrap.dedent("""
    import os, sys, time
    from hermes_data.sessions.storage.filesafety import maintenance_flock
    lock = sys.argv[1]
    cm = maintenance_flock(lock, 5)
    assert cm.__enter__()
    child = os.fork()
    if child == 0:            # the child inherits the flock and outlives its parent
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        time.sleep(30)
        os._exit(0)
    print("held", child, flush=True)
    os._exit(0)               # the recorded holder dies without releasing
""")

LIVE_HOLDER = textwrap.dedent("""
    import sys, time
    from hermes_data.sessions.storage.filesafety import maintenance_flock
    with maintenance_flock(sys.argv[1], 5) as got:
        print("held" if got else "no", flush=True)
        time.sleep(30)
""")


def test_lock_of_a_dead_holder_is_broken_while_a_forked_child_keeps_the_flock(tmp_path):
    lock = tmp_path / "state.db.repair.lock"
    out = subprocess.run([sys.executable, "-c", FORKED_HOLDER, str(lock)], capture_output=True,
                         text=True, timeout=30)
    word, child = out.stdout.split()
    assert word == "held", out.stderr
    try:
        record = json.loads(lock.read_text())
        old_inode = lock.stat().st_ino
        with filesafety.maintenance_flock(lock, 3) as got:
            assert got
            assert json.loads(lock.read_text())["pid"] == os.getpid()
            assert lock.stat().st_ino != old_inode  # retaken on a fresh inode
        assert filesafety.holder_dead(record)
    finally:
        os.kill(int(child), 9)  # the forked child this test spawned


def test_a_live_holder_keeps_the_lock(tmp_path):
    lock = tmp_path / "state.db.repair.lock"
    proc = subprocess.Popen([sys.executable, "-c", LIVE_HOLDER, str(lock)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        with filesafety.maintenance_flock(lock, 0.2, 0.02) as got:
            assert not got
        assert not filesafety.holder_dead(json.loads(lock.read_text()))
    finally:
        proc.kill()
        proc.wait()


def test_unopenable_lock_file_is_not_acquired(tmp_path):
    missing_dir = tmp_path / "nope" / "state.db.repair.lock"
    with filesafety.maintenance_flock(missing_dir, 0.1) as got:
        assert not got


def test_doubt_counts_as_alive():
    assert not filesafety.holder_dead({"pid": "x"})
    assert not filesafety.holder_dead({"pid": 1})  # init: alive (or not ours to judge)
    assert not filesafety.holder_dead({"pid": os.getpid(), "start_ticks": None})
    assert filesafety.holder_dead({"pid": os.getpid(),
                                   "start_ticks": filesafety.start_ticks(os.getpid()) + 1})


def test_diagnose_reports_without_changing(dup):
    before = file_digest(dup)
    diag = repair.diagnose(dup)
    assert diag.exists and diag.healthy is False and "malformed" in diag.why
    assert diag.would_write.startswith(f"{dup}.malformed-backup-") and not diag.bundles
    assert file_digest(dup) == before and not rb.bundles(dup)


def test_differing_shadow_table_copies_fall_back_to_dropping_the_fts_objects(tmp_path, undamaged):
    path = legacy_copy(tmp_path)
    duplicate_schema_row(path, "messages_fts_data", differ=True)
    report = repair.repair_state_db_schema(path)
    assert report.repaired and report.strategy == "drop_fts_rebuild", report.error
    assert table_digests(path) == undamaged
    with SessionStore(path) as s:  # the next open recreates and rebuilds the index
        fts = s.backend.read(lambda c: c.exec_driver_sql(
            "SELECT COUNT(*) FROM messages_fts WHERE messages_fts MATCH 'the'").scalar())
        assert fts > 0 and s.search_messages("the")
