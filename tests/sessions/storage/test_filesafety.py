"""Connection tracking and ``offline_file_access`` (storage spec §3.0)."""

from __future__ import annotations

import gc
import threading
import time

import pytest

from hermes_data.engine import SqliteSettings
from hermes_data.sessions.storage import filesafety
from hermes_data import tracked
from hermes_data.sessions.storage.repair import procedure as repair
from hermes_data.sessions.errors import LiveConnectionError
from hermes_data.sessions.store import SessionStore

from tests.sessions.storage.repair_support import duplicate_schema_row, legacy_copy

WAL = SqliteSettings(busy_timeout_ms=1000, journal_mode="wal")


def test_every_connection_of_a_handle_is_counted(tmp_path):
    db = tmp_path / "state.db"
    with SessionStore(db, settings=WAL) as s:
        s.create_session("a", "cli")
        assert tracked.live_connections(db) >= 1
        with s.backend.reading():  # a pooled mode=ro reader
            assert tracked.live_connections(db) >= 2
        with SessionStore(db, read_only=True) as ro:
            ro.get_session("a")
            with pytest.raises(LiveConnectionError, match="close every handle first"):
                with filesafety.offline_file_access(db, "copy the file"):
                    pass
    assert tracked.live_connections(db) == 0
    with filesafety.offline_file_access(db, "copy the file"):
        pass


def test_a_collected_connection_is_uncounted(tmp_path):
    db = tmp_path / "x.db"
    con = tracked.tracked_connect(str(db))
    assert tracked.live_connections(db) == 1
    del con
    gc.collect()
    assert tracked.live_connections(db) == 0


def test_uri_and_symlinked_paths_share_one_key(tmp_path):
    db = tmp_path / "x.db"
    link = tmp_path / "link.db"
    a = tracked.tracked_connect(str(db))
    link.symlink_to(db)
    b = tracked.tracked_connect(f"file:{link}?mode=ro", uri=True)
    try:
        assert tracked.live_connections(db) == 2
    finally:
        a.close()
        b.close()
        b.close()  # idempotent: the count drops once
    assert tracked.live_connections(db) == 0


def test_offline_access_blocks_new_opens_meanwhile(tmp_path):
    db = tmp_path / "x.db"
    opened = threading.Event()

    def opener() -> None:
        tracked.tracked_connect(str(db)).close()
        opened.set()

    with filesafety.offline_file_access(db, "hash it"):
        t = threading.Thread(target=opener)
        t.start()
        time.sleep(0.2)
        assert not opened.is_set()  # waiting for the raw read to finish
    t.join(10)
    assert opened.is_set()


def test_the_factory_must_be_tracked(tmp_path):
    import sqlite3

    with pytest.raises(TypeError):
        tracked.tracked_connect(str(tmp_path / "x.db"), factory=sqlite3.Connection)


def test_a_snapshot_past_its_deadline_is_refused_and_not_counted(tmp_path, monkeypatch):
    path = legacy_copy(tmp_path)
    duplicate_schema_row(path)
    ticks = iter(range(0, 10**9, 10**6))
    monkeypatch.setattr(repair, "monotonic", lambda: float(next(ticks)))
    monkeypatch.setattr(repair, "SNAPSHOT_PAGES", 8)
    report = repair.repair_state_db_schema(path)
    assert "snapshot" in report.error and not report.counted
    assert not repair.rb.scratch_path(path).exists()


def test_offline_access_does_not_hold_up_other_files(tmp_path):
    with filesafety.offline_file_access(tmp_path / "a.db", "hash it"):
        done = []
        t = threading.Thread(target=lambda: done.append(
            tracked.tracked_connect(str(tmp_path / "b.db")).close()))
        t.start()
        t.join(5)
        assert done == [None]
        with filesafety.offline_file_access(tmp_path / "a.db", "nested"):  # re-entrant
            pass
