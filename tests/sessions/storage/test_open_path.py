"""Open path, lock patience and file safety of both stores (spec sessions.md §8, §10 #2, #5,
#51–#56): real files, real sibling processes, statements traced at the DBAPI level."""

from __future__ import annotations

import os
import re
import resource
import sqlite3
import stat
import subprocess
import sys
import textwrap
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest
import sqlalchemy as sa

from hermes_data import files
from hermes_data.migrate import runner as migrate
from hermes_data.engine import SqliteSettings
from hermes_data.errors import DatabaseBusyError, NotAHermesDatabaseError
from hermes_data.sessions.storage import handle_guards as guards
from hermes_data.sessions.errors import (DeletedWalGenerationError, SchemaBehindError,
                                         StateDbCorruptError, StateDbReplacedError)
from hermes_data.sessions.backends.sqlite import SqliteBackend
from hermes_data.sessions.store import SessionStore, is_transient_sqlite_error, last_init_error
from hermes_data.telemetry import TelemetryStore


pytestmark = pytest.mark.sqlite_only("file open path, WAL, read pool, guards, FTS5 fail-open")

WAL = SqliteSettings(busy_timeout_ms=1000, journal_mode="wal")
WRITE_HEADS = ("INSERT", "UPDATE", "DELETE", "REPLACE", "DROP", "ALTER", "CREATE")


@contextmanager
def dbapi_trace():
    """Every statement sent by any sqlite3 connection opened from now on: the library's raw
    connections (writer, readers) and SQLAlchemy's pool alike connect through
    ``sqlite3.connect`` / ``sqlite3.dbapi2.connect`` (a handle that never makes its engine
    opens no pool connection, so a pool listener would miss it)."""
    import sqlite3.dbapi2

    seen: list[str] = []
    real = (sqlite3.connect, sqlite3.dbapi2.connect)

    def traced(connect):
        def wrapper(*args, **kwargs):
            con = connect(*args, **kwargs)
            con.set_trace_callback(seen.append)
            return con
        return wrapper

    sqlite3.connect, sqlite3.dbapi2.connect = traced(real[0]), traced(real[1])
    try:
        yield seen
    finally:
        sqlite3.connect, sqlite3.dbapi2.connect = real


#: The engine's rollback flavour (hermes_data.engine, issued only on a connection already in a
#: rollback journal): DELETE -> TRUNCATE/PERSIST is a per-connection setting that touches
#: neither the file nor a lock (SQLite's pager only deletes a journal going the other way).
_ROLLBACK_FLAVOUR = re.compile(r"\s*PRAGMA journal_mode=(TRUNCATE|PERSIST)\s*$", re.I)


def writes_in(statements: list[str]) -> list[str]:
    out = []
    for s in statements:
        head = s.lstrip().split(None, 1)[0].upper() if s.strip() else ""
        if head in WRITE_HEADS or s.lstrip().upper().startswith("BEGIN IMMEDIATE"):
            out.append(s)
        elif head == "PRAGMA" and "=" in s and "busy_timeout" not in s.lower() \
                and "synchronous" not in s.lower() and "journal_size_limit" not in s.lower() \
                and "foreign_keys" not in s.lower() and not _ROLLBACK_FLAVOUR.match(s):
            out.append(s)  # a pragma that writes the file (journal_mode=, application_id=)
    return out


LOCK_HOLDER = textwrap.dedent("""
    import sqlite3, sys
    con = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=5)
    con.execute("BEGIN IMMEDIATE")
    print("locked", flush=True)
    sys.stdin.readline()
    con.execute("ROLLBACK")
""")


@contextmanager
def sibling_holding_write_lock(path: Path):
    """A real process holding ``BEGIN IMMEDIATE`` on ``path`` until the block ends."""
    proc = subprocess.Popen([sys.executable, "-c", LOCK_HOLDER, str(path)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "locked"
        yield proc
    finally:
        proc.stdin.write("\n")
        proc.stdin.flush()
        proc.wait(timeout=10)


@pytest.mark.parametrize("settings", [None, WAL], ids=["default", "wal"])
def test_settled_session_store_opens_write_free_under_a_held_lock(tmp_path, settings):
    path = tmp_path / "state.db"
    with SessionStore(path, settings=settings) as s:  # first open settles the file
        s.create_session("a", "cli")
        s.append_message("a", "user", "hello")
    with dbapi_trace() as seen:
        with SessionStore(path, settings=settings) as s:
            assert s.get_session("a").message_count == 1
    assert seen, "the trace saw nothing"
    assert writes_in(seen) == [], writes_in(seen)
    with sibling_holding_write_lock(path):
        t0 = time.monotonic()
        with SessionStore(path, settings=settings, open_patience_s=0.5) as s:
            elapsed = time.monotonic() - t0
            assert s.get_session("a") is not None
    assert elapsed < 0.9, f"open waited {elapsed:.2f} s behind the sibling's lock"


@pytest.mark.parametrize("settings", [None, WAL], ids=["default", "wal"])
def test_settled_telemetry_store_opens_write_free_under_a_held_lock(tmp_path, settings):
    path = tmp_path / "telemetry.db"
    migrate.upgrade("telemetry", path)
    with TelemetryStore(path, settings=settings) as t:  # first connection settles the mode
        t.connection().execute("SELECT 1").fetchall()
    with dbapi_trace() as seen:
        with TelemetryStore(path, settings=settings) as t:
            t.connection().execute("SELECT COUNT(*) FROM sqlite_master").fetchall()
    assert seen and writes_in(seen) == [], writes_in(seen)
    with sibling_holding_write_lock(path):
        t0 = time.monotonic()
        with TelemetryStore(path, settings=settings) as t:
            t.connection().execute("SELECT COUNT(*) FROM sqlite_master").fetchall()
        assert time.monotonic() - t0 < 0.9


def test_open_patience_gives_up_with_a_clear_error_when_work_is_needed(tmp_path):
    path = tmp_path / "state.db"
    with SessionStore(path):
        pass
    con = sqlite3.connect(path)  # make the next open need a write: drop the generation stamp
    con.execute("DELETE FROM state_meta WHERE key = 'db_file_generation'")
    con.commit()
    con.close()
    with sibling_holding_write_lock(path):
        with pytest.raises(DatabaseBusyError, match="healthy"):
            SessionStore(path, open_patience_s=0.3)
    with SessionStore(path) as s:  # after the sibling releases, the heal goes through
        assert s.get_meta("db_file_generation")


def test_io_error_at_begin_is_retried_once_on_the_same_connection(store):
    store.create_session("s", "cli")
    raw_before = id(store.backend._raw)
    fds_before = psutil.Process().num_fds()
    fired = []

    def fail_once():
        if not fired:
            fired.append(1)
            raise sqlite3.OperationalError("disk I/O error")

    store.backend._before_begin = fail_once
    assert store.append_message("s", "user", "after one EIO") > 0  # raw hot path
    fired.clear()
    assert store.set_session_title("s", "t")  # SQLAlchemy path
    assert id(store.backend._raw) == raw_before and psutil.Process().num_fds() == fds_before

    store.backend._before_begin = lambda: (_ for _ in ()).throw(sqlite3.OperationalError("disk I/O error"))
    with pytest.raises(sqlite3.OperationalError, match="disk I/O"):  # persistent: once only
        store.append_message("s", "user", "x")
    store.backend._before_begin = None
    calls = []

    def callback(conn):
        calls.append(1)
        conn.exec_driver_sql("UPDATE sessions SET title = 'changed' WHERE id = 's'")
        raise sa.exc.OperationalError("UPDATE", (), sqlite3.OperationalError("disk I/O error"))

    with pytest.raises(sa.exc.OperationalError):
        store.backend.write(callback)
    assert calls == [1]  # never retried once the callback started
    assert store.get_session("s").title == "t"  # rolled back


def test_read_only_open_retries_transient_io_errors(tmp_path, monkeypatch):
    path = tmp_path / "state.db"
    with SessionStore(path) as s:
        s.create_session("a", "cli")

    real = SqliteBackend._connect_read_only
    state = {"failures": 2, "attempts": 0}

    def flaky(self):
        state["attempts"] += 1
        if state["attempts"] <= state["failures"]:
            raise sqlite3.OperationalError("disk I/O error")
        return real(self)

    monkeypatch.setattr(SqliteBackend, "_connect_read_only", flaky)
    with SessionStore(path, read_only=True) as ro:
        assert state["attempts"] == 3 and ro.get_session("a").source == "cli"
        assert ro.fts_available == {"messages_fts": True, "messages_fts_trigram": True}
        with pytest.raises(Exception, match="read-only"):
            ro.create_session("b", "cli")
    state.update(failures=99, attempts=0)
    with pytest.raises(sqlite3.OperationalError) as info:
        SessionStore(path, read_only=True)
    assert state["attempts"] == 4
    assert is_transient_sqlite_error(info.value)
    assert not is_transient_sqlite_error(sqlite3.DatabaseError("database disk image is malformed"))


def test_read_only_open_of_a_store_missing_a_core_column_raises_schema_behind(tmp_path):
    path = tmp_path / "state.db"
    with SessionStore(path):
        pass
    con = sqlite3.connect(path)
    con.execute("ALTER TABLE sessions DROP COLUMN last_read_at")
    con.commit()
    before = con.execute("SELECT sql FROM sqlite_master ORDER BY name").fetchall()
    con.close()
    with dbapi_trace():
        with pytest.raises(SchemaBehindError, match="sessions.last_read_at") as info:
            SessionStore(path, read_only=True)
    assert str(info.value).startswith(f"{path} is behind")  # the real file, not "state.db"
    con = sqlite3.connect(path)
    assert con.execute("SELECT sql FROM sqlite_master ORDER BY name").fetchall() == before
    con.close()


def _fds_on(path: Path, *, exact: bool = False) -> int:
    target = str(path.resolve())
    return sum(1 for f in psutil.Process().open_files()
               if (f.path == target if exact else f.path.startswith(target)))


def test_owner_only_by_path_keeps_this_process_locks(tmp_path):
    """Rollback-journal mode on purpose: there a reader's SHARED lock is what blocks a
    sibling's EXCLUSIVE, so a dropped lock shows (WAL readers take no such lock)."""
    path = tmp_path / "state.db"
    delete = SqliteSettings(busy_timeout_ms=1000, journal_mode="delete")
    with SessionStore(path, settings=delete) as s:
        s.create_session("a", "cli")
        os.chmod(path, 0o644)
        holder = sqlite3.connect(path, isolation_level=None)
        holder.execute("BEGIN")
        holder.execute("SELECT COUNT(*) FROM sessions").fetchall()  # SHARED lock held
        with SessionStore(path, settings=delete):  # a second handle hardens permissions now
            pass
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        probe = subprocess.run(
            [sys.executable, "-c", "import sqlite3,sys; c=sqlite3.connect(sys.argv[1], timeout=0, "
             "isolation_level=None)\ntry:\n c.execute('BEGIN EXCLUSIVE'); print('got')\n"
             "except sqlite3.OperationalError as e: print('blocked', e)", str(path)],
            capture_output=True, text=True, timeout=30)
        assert probe.stdout.startswith("blocked"), probe.stdout + probe.stderr
        holder.execute("ROLLBACK")
        holder.close()


def test_wal_sidecars_are_owner_only(tmp_path):
    path = tmp_path / "state.db"
    with SessionStore(path, settings=WAL) as s:
        s.create_session("a", "cli")
        for suffix in ("", "-wal", "-shm"):
            assert stat.S_IMODE(Path(f"{path}{suffix}").stat().st_mode) == 0o600, suffix


def test_failing_opens_leak_no_descriptor(tmp_path):
    path = tmp_path / "state.db"
    path.write_bytes(b"this is not a database" * 200)
    proc = psutil.Process()
    # Refused by the read-only identity probe, before the engine touches the file (issue 12).
    with pytest.raises(NotAHermesDatabaseError):  # warm-up: imports, caches
        SessionStore(path)
    before = proc.num_fds()
    for _ in range(1000):
        with pytest.raises(NotAHermesDatabaseError, match="not a database"):
            SessionStore(path)
    assert proc.num_fds() == before
    assert _fds_on(path) == 0
    where, exc = last_init_error()
    assert where == str(path) and "not a database" in str(exc)


HOLD_FILE = textwrap.dedent("""
    import sys
    f = open(sys.argv[1], "rb")
    print("holding", flush=True)
    sys.stdin.readline()
""")


HOLD_CONNECTION = textwrap.dedent("""
    import sqlite3, sys
    con = sqlite3.connect(sys.argv[1], isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("SELECT COUNT(*) FROM sessions").fetchall()
    print("holding", flush=True)
    sys.stdin.readline()
""")


def _refused_while_held(path: Path, script: str, held: Path, unlink: list[Path]) -> None:
    proc = subprocess.Popen([sys.executable, "-c", script, str(held)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "holding"
        for p in unlink:
            p.unlink()
        with pytest.raises(DeletedWalGenerationError, match=f"pid {proc.pid}"):
            SessionStore(path, settings=WAL)
        # Refused before connecting. The header descriptor (§8.9) stays cached while a
        # process holds a lock on the file: a lock query cannot tell this process's locks
        # from the holder's, and closing would drop ours.
        assert _fds_on(path) <= 1
    finally:
        proc.stdin.write("\n")
        proc.stdin.flush()
        proc.wait(timeout=10)
    files.release_idle_headers()
    assert _fds_on(path) == 0  # nobody holds the file any more: it is closed


def test_a_connection_on_a_deleted_wal_generation_refuses_the_open(tmp_path):
    """The real case: a sibling's WAL connection keeps the deleted -wal/-shm (and a lock on
    the database, which is how the scan finds it without reading every process's fds)."""
    path = tmp_path / "state.db"
    with SessionStore(path, settings=WAL) as s:
        s.create_session("a", "cli")
    _refused_while_held(path, HOLD_CONNECTION, path,
                        [Path(f"{path}-wal"), Path(f"{path}-shm")])
    with SessionStore(path, settings=WAL) as s:  # holder gone: opens again
        s.create_session("b", "cli")


def test_without_a_lock_answer_every_process_is_examined(tmp_path):
    """Where no lock query can answer (no descriptor given), every process's descriptors are
    read: even a holder with no lock on the file (a plain open of the old -wal) is found."""
    path = tmp_path / "state.db"
    with SessionStore(path, settings=WAL):
        pass
    wal = Path(f"{path}-wal")
    wal.write_bytes(b"")  # a WAL of an older generation, then deleted under its holder
    proc = subprocess.Popen([sys.executable, "-c", HOLD_FILE, str(wal)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "holding"
        wal.unlink()
        assert (proc.pid, str(wal.resolve())) in files.deleted_sidecar_holders(path)
    finally:
        proc.stdin.write("\n")
        proc.stdin.flush()
        proc.wait(timeout=10)


def test_a_sibling_on_the_current_generation_is_no_holder(tmp_path, monkeypatch):
    """A sibling holding the database (a lock) but on the current WAL generation refuses
    nothing; the scan reads the descriptors of the processes ``/proc/locks`` names as
    holding a lock on the file (the sibling, and this one), not every process's (issue 14)."""
    path = tmp_path / "state.db"
    with SessionStore(path, settings=WAL) as s:
        s.create_session("a", "cli")
    read: list[int] = []
    real = files.deleted_descriptors
    monkeypatch.setattr(files, "deleted_descriptors", lambda pid: read.append(pid) or real(pid))
    proc = subprocess.Popen([sys.executable, "-c", HOLD_CONNECTION, str(path)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "holding"
        with SessionStore(path, settings=WAL) as s:
            assert sorted(read) == sorted({os.getpid(), proc.pid})
            assert files.other_process_locks(s.backend._header.fd) is True
            assert files.deleted_sidecar_holders(path, s.backend._header.fd) == []
            s.create_session("b", "cli")
    finally:
        proc.stdin.write("\n")
        proc.stdin.flush()
        proc.wait(timeout=10)


def test_the_holder_scan_reads_only_the_processes_holding_the_file(tmp_path, monkeypatch):
    """Issue 14: the deleted-sidecar scan of an open reads no descriptor at all when no
    process holds a lock on the file, and only this process's when only its own handle does
    (a WAL connection keeps a shared lock on the database for its whole life)."""
    path = tmp_path / "state.db"
    with SessionStore(path, settings=WAL):
        pass
    read: list[int] = []
    real = files.deleted_descriptors
    monkeypatch.setattr(files, "deleted_descriptors", lambda pid: read.append(pid) or real(pid))
    with SessionStore(path, settings=WAL) as s:
        assert s.backend._header is not None
        assert read == []
        with SessionStore(path, settings=WAL):
            assert read == [os.getpid()]


def test_lock_holders_reads_proc_locks(tmp_path):
    """``/proc/locks`` names the processes holding a lock on an inode; a lock of this
    process shows up under its pid, an unlocked file has none."""
    path = tmp_path / "state.db"
    with SessionStore(path, settings=WAL):
        pass
    st = path.stat()
    assert files.lock_holders((st.st_dev, st.st_ino)) == set()
    with SessionStore(path, settings=WAL):
        assert files.lock_holders((st.st_dev, st.st_ino)) == {os.getpid()}


def test_replacing_the_file_under_a_live_handle_stops_writes(tmp_path):
    path = tmp_path / "state.db"
    other = tmp_path / "restored.db"
    with SessionStore(other):
        pass
    with SessionStore(path) as s:
        s.create_session("a", "cli")
        os.replace(other, path)  # an out-of-band restore
        with pytest.raises(StateDbReplacedError, match="replaced"):
            s.append_message("a", "user", "lost?")
        with pytest.raises(StateDbReplacedError):  # sticky
            s.create_session("b", "cli")


def test_split_wal_generation_under_a_live_handle_stops_writes(tmp_path):
    path = tmp_path / "state.db"
    with SessionStore(path, settings=WAL) as s:
        s.create_session("a", "cli")
        wal = Path(f"{path}-wal")
        os.rename(wal, f"{wal}.moved")  # what a sibling's checkpoint+unlink looks like to us
        with pytest.raises(DeletedWalGenerationError):
            s.append_message("a", "user", "x")
        os.rename(f"{wal}.moved", wal)


def test_fts_corruption_during_a_write_fails_open(store):
    store.create_session("a", "cli")
    store.append_messages_batch("a", [{"role": "user", "content": f"word{i} hello"} for i in range(30)])
    con = sqlite3.connect(store.path, isolation_level=None)
    con.execute("UPDATE messages_fts_data SET block = x'ffffffffffff' WHERE id = 10")
    con.close()
    mid = store.append_message("a", "user", "written although the index is corrupt")
    assert mid > 0 and store.get_messages("a")[-1].id == mid
    assert store.get_meta("fts_stale") is not None
    con = sqlite3.connect(store.path)
    triggers = con.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' "
                           "AND name LIKE 'messages_fts%'").fetchall()
    con.close()
    assert triggers == [] and not store.quarantined
    store.append_message("a", "user", "and again")  # no rebuild from the write path


CORRUPT_PAGE = textwrap.dedent("""
    import os, sqlite3, sys
    path, page, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    fd = os.open(path, os.O_RDWR)
    os.pwrite(fd, b"\\xff" * size, (page - 1) * size)
    os.close(fd)   # this process holds no connection to the file: no lock to drop
    if sys.argv[4:] == ["commit"]:
        # The database moves on: a commit that does not touch the damaged page. Every other
        # connection drops its page cache (DELETE: the change counter; WAL: the WAL index),
        # and in WAL, after a complete checkpoint, this writer restarts the WAL.
        con = sqlite3.connect(path, isolation_level=None, timeout=10)
        con.execute("INSERT OR REPLACE INTO state_meta (key, value) VALUES ('probe', 'x')")
        con.close()
""")


def _sessions_page(s: SessionStore) -> tuple[int, int]:
    return s.backend.read(lambda c: (
        c.exec_driver_sql("SELECT rootpage FROM sqlite_master WHERE name = 'sessions'").scalar(),
        c.exec_driver_sql("PRAGMA page_size").scalar()))


def _damage(path: Path, page: int, size: int, *extra: str) -> None:
    """Another process damages the page (this process never opens the file)."""
    subprocess.run([sys.executable, "-c", CORRUPT_PAGE, str(path), str(page), str(size), *extra],
                   check=True, timeout=30)


def test_structural_corruption_quarantines_the_handle(tmp_path):
    """Both modes: damage to a page SQLite reads from the main file quarantines the handle.
    In WAL the checkpoint first folds every frame back (the next writer then restarts the
    WAL), so the damaged page's current version is the main file's, as in DELETE mode."""
    path = tmp_path / "state.db"
    with SessionStore(path) as s:
        s.create_session("a", "cli")
        page, size = _sessions_page(s)
        s.backend.checkpoint()  # WAL: complete (no reader); DELETE: nothing to do
        _damage(path, page, size, "commit")
        with pytest.raises(StateDbCorruptError, match="corrupt"):
            s.append_message("a", "user", "x")
        assert s.quarantined
        with pytest.raises(StateDbCorruptError):  # sticky: fails fast
            s.create_session("b", "cli")


def test_damage_under_a_newer_wal_frame_is_not_corruption(tmp_path):
    """WAL only: a main-file page whose current version is a WAL frame is not what SQLite
    serves, and the checkpoint writes that frame over it. The handle must not quarantine a
    healthy database (§8.11 quarantines on SQLite's corruption errors, not on bytes it does
    not read); the file is intact after the close."""
    path = tmp_path / "state.db"
    with SessionStore(path, settings=WAL) as s:
        assert s.journal_mode == "wal"
        s.create_session("a", "cli")
        page, size = _sessions_page(s)
        _damage(path, page, size)  # sessions' current page is create_session's WAL frame
        s.append_message("a", "user", "x")
        s.create_session("b", "cli")
        assert not s.quarantined
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    assert con.execute("SELECT COUNT(*) FROM sessions").fetchone()[0] == 2
    con.close()


def test_read_pool_is_bounded_per_file_and_falls_back_to_the_writer(tmp_path):
    path = tmp_path / "state.db"
    budget = guards.path_budget(path)
    with SessionStore(path, settings=WAL) as s:
        s.create_session("a", "cli")
        assert s.read_pool is not None
        seen_fds: list[int] = []
        errors: list[BaseException] = []

        def reader():
            try:
                def slow(conn):
                    seen_fds.append(_fds_on(path, exact=True))
                    time.sleep(0.05)  # a slow read: keeps the connection checked out
                    return conn.exec_driver_sql("SELECT id FROM sessions").scalar()
                for _ in range(3):
                    assert s.backend.read(slow) == "a"
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)

        threads = [threading.Thread(target=reader) for _ in range(20)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        assert 2 <= budget.peak <= guards.PATH_READ_BUDGET
        # descriptors on state.db itself: the writer's, at most 8 readers', one SQLite may
        # park (a closed connection's fd is kept while the process holds locks on the inode)
        # and the process's header descriptor (§8.9: the on-disk application_id, by pread)
        assert max(seen_fds) <= guards.PATH_READ_BUDGET + 3
        assert guards.PROCESS_BUDGET.peak <= guards.PROCESS_READ_BUDGET

        # Descriptor headroom below 64: reads are served by the writer, never an error.
        s.read_pool.dispose()
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        used_before = budget.used
        resource.setrlimit(resource.RLIMIT_NOFILE, (psutil.Process().num_fds() + 40, hard))
        guards.reset_descriptor_cache()
        try:
            assert s.get_session("a").source == "cli"
            assert budget.used == used_before
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
            guards.reset_descriptor_cache()
    assert budget.used == 0  # every permit returned at close


def test_the_read_pool_is_made_by_the_first_read_and_handles_are_counted_at_open(tmp_path,
                                                                                  caplog):
    """WAL (forced): a handle that never reads makes no read pool (issue 14: the settled
    open's cost); its first read makes one. The many-handles warning still counts every live
    handle at open, reading or not, and a closed handle no longer counts."""
    path = tmp_path / "state.db"
    with SessionStore(path, settings=WAL) as s:
        s.create_session("a", "cli")
    with SessionStore(path, settings=WAL) as s:
        assert s.backend._reads is not None and s.backend._reads._pool is None
        assert s.get_session("a").source == "cli"
        pool = s.backend._reads._pool
        assert pool is not None and s.read_pool is pool and pool.idle_count() == 1
    caplog.set_level("WARNING", logger="hermes_data.sessions.storage.handle_guards")
    stores = [SessionStore(path, settings=WAL) for _ in range(guards.MAX_HANDLES_PER_PATH)]
    try:
        assert not [r for r in caplog.records if "live session-store handles" in r.message]
        stores.append(SessionStore(path, settings=WAL))
        warned = [r.message for r in caplog.records if "live session-store handles" in r.message]
        assert len(warned) == 1 and f"{guards.MAX_HANDLES_PER_PATH + 1} live" in warned[0]
        assert all(st.backend._reads._pool is None for st in stores)  # none has read
        stores.pop().close()
        stores.pop().close()
        caplog.clear()
        stores.append(SessionStore(path, settings=WAL))  # at the limit again: no warning
        assert not [r for r in caplog.records if "live session-store handles" in r.message]
    finally:
        for st in stores:
            st.close()


@pytest.mark.parametrize("how", ["upgrade", "adopt"])
def test_the_first_open_after_an_upgrade_writes_nothing(tmp_path, how, legacy_copy):
    """``hermes-data upgrade`` leaves the store settled (generation, application_id, FTS
    storage version): its first open needs no write lock (issue 13)."""
    from hermes_data.migrate import runner as migrate

    path = legacy_copy if how == "adopt" else tmp_path / "state.db"
    migrate.upgrade("sessions", str(path))
    with dbapi_trace() as seen:
        with SessionStore(path) as s:
            assert s.open_repairs == []
            s.list_sessions()
    assert seen and writes_in(seen) == [], writes_in(seen)
    with sibling_holding_write_lock(path):
        t0 = time.monotonic()
        with SessionStore(path, open_patience_s=0.5) as s:
            assert s.session_count() >= 0
        assert time.monotonic() - t0 < 0.9
