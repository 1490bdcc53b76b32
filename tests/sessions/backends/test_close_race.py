"""``close()`` racing a still-running writer (spec sessions.md §8.5, last bullet).

Real threads against real files: one thread closes the store while another is inside an
``append_message`` loop. The in-flight write either completes — after one reopen with the same
connection setup and no schema work, logged as a WARNING naming the race — or fails with a
clear error. Never a silent loss, never an ``AttributeError``/``None`` error. Read-only,
replaced and quarantined handles are never reopened.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest

from hermes_data import files
from hermes_data.engine import SqliteSettings
from hermes_data.errors import ConfigurationError
from hermes_data.sessions.errors import StateDbCorruptError, StateDbReplacedError
from hermes_data.sessions.store import SessionStore

WAL = SqliteSettings(busy_timeout_ms=1000, journal_mode="wal")
DELETE = SqliteSettings(busy_timeout_ms=1000, journal_mode="delete")
RACE = "close() raced a still-running writer"
STORE_LOG = "hermes_data.sessions.backends.sqlite"


def _fds_on(path: Path, *, deleted: bool = False) -> int:
    target = str(path.resolve())
    if not deleted:
        return sum(1 for f in psutil.Process().open_files() if f.path.startswith(target))
    n = 0  # also descriptors of a deleted inode that had this name
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink(f"/proc/self/fd/{fd}").startswith(target)
        except OSError:
            continue
    return n


def _race_warnings(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if RACE in r.getMessage()]


def _stored(path: Path, session_id: str) -> tuple[list[str], int]:
    """Contents and counter of ``session_id`` as another connection sees them."""
    con = sqlite3.connect(path)
    try:
        contents = [r[0] for r in con.execute(
            "SELECT content FROM messages WHERE session_id = ? ORDER BY id", (session_id,))]
        count = con.execute("SELECT message_count FROM sessions WHERE id = ?",
                            (session_id,)).fetchone()[0]
        return contents, count
    finally:
        con.close()


@contextmanager
def sibling_write_lock(path: Path):
    """Another connection holds ``BEGIN IMMEDIATE``: writes of the store sit in their jittered
    busy-retry loop, outside the handle's lock — exactly where ``close()`` can slip in."""
    con = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    con.execute("BEGIN IMMEDIATE")
    try:
        yield con
    finally:
        if con.in_transaction:
            con.execute("ROLLBACK")
        con.close()


class Appender(threading.Thread):
    """Appends ``m0``, ``m1``… until an error (or ``limit``); records what returned an id."""

    def __init__(self, store: SessionStore, session_id: str = "a", limit: int = 100_000) -> None:
        super().__init__(daemon=True)
        self.store, self.session_id, self.limit = store, session_id, limit
        self.done: list[str] = []
        self.attempts = 0
        self.error: BaseException | None = None
        self.started_writing = threading.Event()

    def run(self) -> None:
        try:
            for i in range(self.limit):
                self.attempts += 1
                self.started_writing.set()
                self.store.append_message(self.session_id, "user", f"m{i}")
                self.done.append(f"m{i}")
        except BaseException as exc:  # noqa: BLE001 - the test inspects it
            self.error = exc


def _busy_retrying(store: SessionStore, path: Path, settings: SqliteSettings):
    """Start one append that sits in the busy-retry loop under a sibling's write lock."""
    lock = sibling_write_lock(path)
    lock.__enter__()
    writer = Appender(store, limit=1)
    writer.start()
    assert writer.started_writing.wait(5)
    time.sleep(0.3)  # several BEGIN IMMEDIATE attempts refused: the write is in flight
    assert writer.is_alive() and not writer.done
    return lock, writer


@pytest.mark.parametrize("settings", [WAL, DELETE], ids=["wal", "delete"])
def test_a_write_in_flight_at_close_completes_after_one_reopen(tmp_path, settings, caplog):
    path = tmp_path / "state.db"
    store = SessionStore(path, settings=settings)
    store.create_session("a", "cli")
    caplog.set_level(logging.WARNING, logger=STORE_LOG)
    lock, writer = _busy_retrying(store, path, settings)
    try:
        store.close()  # the writer thread is still inside append_message
        assert store.backend._writer is None
    finally:
        lock.__exit__(None, None, None)  # the sibling lets go: the write continues
    writer.join(30)
    assert not writer.is_alive()
    assert writer.error is None, repr(writer.error)
    assert writer.done == ["m0"]
    (warning,) = _race_warnings(caplog)
    assert warning.levelno == logging.WARNING and str(path) in warning.getMessage()
    assert _stored(path, "a") == (["m0"], 1)  # landed, counter with it
    # The reopened connection was closed again with the write; the handle stays closed.
    assert store.backend._writer is None and store.backend._engine is None
    assert _fds_on(path) == 0
    with pytest.raises(ConfigurationError, match="closed.*reopen it allows was already used"):
        store.append_message("a", "user", "after")
    assert len(_race_warnings(caplog)) == 1
    assert _stored(path, "a") == (["m0"], 1)


def test_the_reopen_does_no_schema_work(tmp_path, caplog):
    path = tmp_path / "state.db"
    store = SessionStore(path, settings=WAL)
    store.create_session("a", "cli")
    statements: list[str] = []
    real_connect = store.backend._connect_writer

    def traced_connect():
        engine = real_connect()
        store.backend._raw.set_trace_callback(statements.append)
        return engine

    store.backend._connect_writer = traced_connect
    caplog.set_level(logging.WARNING, logger=STORE_LOG)
    lock, writer = _busy_retrying(store, path, WAL)
    try:
        store.close()
    finally:
        lock.__exit__(None, None, None)
    writer.join(30)
    assert writer.error is None and writer.done == ["m0"]
    assert statements, "the write ran on the reopened connection"
    ddl = [s for s in statements if s.lstrip().upper().startswith(("CREATE", "DROP", "ALTER"))]
    assert ddl == []
    assert not any("alembic_version" in s or "sqlite_master" in s for s in statements)


@pytest.mark.parametrize("settings", [WAL, DELETE], ids=["wal", "delete"])
def test_closing_under_a_running_append_loop_never_loses_a_write_silently(tmp_path, settings,
                                                                           caplog):
    caplog.set_level(logging.WARNING, logger=STORE_LOG)
    for round_ in range(15):
        path = tmp_path / f"r{round_}" / "state.db"
        store = SessionStore(path, settings=settings)
        store.create_session("a", "cli")
        writer = Appender(store)
        writer.start()
        assert writer.started_writing.wait(5)
        time.sleep(0.002 * (round_ % 5))
        store.close()
        writer.join(30)
        assert not writer.is_alive()
        # The loop ends with a clear "closed" error — not AttributeError / NoneType trouble.
        assert isinstance(writer.error, ConfigurationError), repr(writer.error)
        assert "the session store is closed" in str(writer.error)
        # Every append that returned an id is stored; the one that raised is not.
        assert writer.attempts == len(writer.done) + 1
        assert _stored(path, "a") == (writer.done, len(writer.done))
        assert _fds_on(path) == 0
        assert len(_race_warnings(caplog)) <= round_ + 1  # at most one reopen per handle
    assert all(r.levelno == logging.WARNING for r in _race_warnings(caplog))


def test_a_read_only_handle_is_never_reopened(tmp_path, caplog):
    path = tmp_path / "state.db"
    with SessionStore(path) as s:
        s.create_session("a", "cli")
    caplog.set_level(logging.WARNING, logger=STORE_LOG)
    ro = SessionStore(path, read_only=True)
    errors: list[BaseException] = []
    closed = threading.Event()

    def write_after_close():
        closed.wait(5)
        try:
            ro.append_message("a", "user", "x")
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    t = threading.Thread(target=write_after_close)
    t.start()
    ro.close()
    closed.set()
    t.join(10)
    (err,) = errors
    assert isinstance(err, ConfigurationError) and "read-only handle is never reopened" in str(err)
    assert _race_warnings(caplog) == []
    assert ro.backend._writer is None and ro.backend._engine is None and _fds_on(path) == 0
    assert _stored(path, "a") == ([], 0)


def test_a_handle_whose_file_was_replaced_during_the_race_is_not_reopened(tmp_path, caplog):
    path = tmp_path / "state.db"
    other = tmp_path / "restored.db"
    with SessionStore(other):
        pass
    store = SessionStore(path, settings=DELETE)
    store.create_session("a", "cli")
    caplog.set_level(logging.WARNING, logger=STORE_LOG)
    lock, writer = _busy_retrying(store, path, DELETE)
    try:
        store.close()
        os.replace(other, path)  # an out-of-band restore while the write waits
    finally:
        lock.__exit__(None, None, None)
    writer.join(30)
    assert isinstance(writer.error, StateDbReplacedError), repr(writer.error)
    assert _race_warnings(caplog) == []
    # The handle's header descriptor (§8.9) outlived its close: the sibling above is a
    # connection of this process holding the write lock on that inode then, and closing any
    # descriptor of the inode would have dropped it. Once nothing holds it, it goes.
    assert store.backend._writer is None and _fds_on(path, deleted=True) <= 1
    files.release_idle_headers()
    assert _fds_on(path, deleted=True) == 0
    con = sqlite3.connect(path)  # the restored file got nothing of the lost handle's write
    assert con.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == 0
    con.close()
    with pytest.raises(StateDbReplacedError):  # sticky
        store.append_message("a", "user", "x")


CORRUPT_PAGE = """
import os, sys
path, page, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
fd = os.open(path, os.O_RDWR)
os.pwrite(fd, b"\\xff" * size, (page - 1) * size)
counter = int.from_bytes(os.pread(fd, 4, 24), "big") + 1
os.pwrite(fd, counter.to_bytes(4, "big"), 24)   # invalidate page caches
os.close(fd)
"""


def test_a_quarantined_handle_is_never_reopened(tmp_path, caplog):
    path = tmp_path / "state.db"
    store = SessionStore(path, settings=DELETE)
    store.create_session("a", "cli")
    page, size = store.backend.read(lambda c: (
        c.exec_driver_sql("SELECT rootpage FROM sqlite_master WHERE name = 'sessions'").scalar(),
        c.exec_driver_sql("PRAGMA page_size").scalar()))
    subprocess.run([sys.executable, "-c", CORRUPT_PAGE, str(path), str(page), str(size)],
                   check=True, timeout=30)
    with pytest.raises(StateDbCorruptError):
        store.append_message("a", "user", "x")
    assert store.quarantined
    caplog.set_level(logging.WARNING, logger=STORE_LOG)
    writer = Appender(store, limit=5)
    closing = threading.Thread(target=store.close)
    closing.start()
    writer.start()
    closing.join(10)
    writer.join(10)
    assert isinstance(writer.error, StateDbCorruptError), repr(writer.error)
    assert writer.done == []
    assert _race_warnings(caplog) == []
    assert store.backend._writer is None and _fds_on(path) == 0
