"""The SQLite engine policy: pragma order, journal-mode decisions on vulnerable and safe
builds, our own BEGIN (transactional DDL, BEGIN IMMEDIATE for writers), PASSIVE checkpoints."""

from __future__ import annotations

import logging
import re
import sqlite3
import threading
import time

import pytest
import sqlalchemy as sa

from hermes_data.engine import (
    JOURNAL_SIZE_LIMIT,
    SqliteSettings,
    create_sqlite_engine,
    decide_journal_mode,
    is_wal_reset_vulnerable,
    journal_state,
    passive_checkpoint,
    write_transaction,
)
from hermes_data.errors import ConfigurationError


@pytest.fixture(autouse=True)
def _policy_without_override(monkeypatch):
    """These tests exercise the policy itself with explicit settings: the run's
    HERMES_DATA_JOURNAL_MODE (CI's WAL pass) must not override what they configure."""
    monkeypatch.delenv("HERMES_DATA_JOURNAL_MODE", raising=False)

VULNERABLE = (3, 40, 1)
SAFE = (3, 51, 3)


@pytest.mark.parametrize("version, expected", [
    ((3, 6, 23), False), ((3, 7, 0), True), ((3, 40, 1), True), ((3, 44, 5), True),
    ((3, 44, 6), False), ((3, 44, 9), False), ((3, 45, 0), True), ((3, 50, 6), True),
    ((3, 50, 7), False), ((3, 51, 0), True), ((3, 51, 2), True), ((3, 51, 3), False),
    ((3, 52, 0), False),
])
def test_wal_reset_vulnerability_ranges(version, expected):
    assert is_wal_reset_vulnerable(version) is expected


def test_sqlite_source_id_names_the_linked_build(monkeypatch):
    """Issue 33: upstream's module function ``sqlite_source_id``: the linked library's
    check-in (date, time, hash), or "" when SQLite cannot answer."""
    from hermes_data import engine

    got = engine.sqlite_source_id()
    con = sqlite3.connect(":memory:")
    try:
        assert got == con.execute("SELECT sqlite_source_id()").fetchone()[0]
    finally:
        con.close()
    assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [0-9a-f]{40}", got), got

    def refuse(*args, **kwargs):
        raise sqlite3.OperationalError("unable to open database")

    monkeypatch.setattr(engine.sqlite3, "connect", refuse)
    assert engine.sqlite_source_id() == ""


def _mode(path) -> str:
    con = sqlite3.connect(path)
    try:
        return con.execute("PRAGMA journal_mode").fetchone()[0]
    finally:
        con.close()


def _touch(engine):
    with engine.connect() as conn, conn.begin():
        conn.exec_driver_sql("CREATE TABLE IF NOT EXISTS t (x INTEGER)")


def test_fresh_file_on_vulnerable_build_uses_a_truncated_rollback_journal(tmp_path):
    engine = create_sqlite_engine(tmp_path / "a.db", SqliteSettings(sqlite_version=VULNERABLE))
    _touch(engine)
    # Not WAL; the connection's rollback journal is truncated, not unlinked, per commit.
    assert journal_state(engine).mode == "truncate"
    assert "WAL-reset bug" in journal_state(engine).reason
    assert "TRUNCATE" in journal_state(engine).reason
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "truncate"
    journal = tmp_path / "a.db-journal"
    assert journal.exists() and journal.stat().st_size == 0  # committed: nothing to replay
    engine.dispose()
    assert _mode(tmp_path / "a.db") == "delete"  # a per-connection setting: the file is not WAL


@pytest.mark.parametrize("settings, expected", [
    (SqliteSettings(sqlite_version=VULNERABLE, journal_mode="delete"), "delete"),
    (SqliteSettings(sqlite_version=VULNERABLE, rollback_journal="delete"), "delete"),
    (SqliteSettings(sqlite_version=VULNERABLE, rollback_journal="persist"), "persist"),
    (SqliteSettings(sqlite_version=SAFE), "wal"),
], ids=["configured-delete", "flavour-delete", "flavour-persist", "safe-build-wal"])
def test_rollback_flavour_applies_only_where_the_default_policy_keeps_a_rollback_journal(
        tmp_path, settings, expected, monkeypatch):
    monkeypatch.delenv("HERMES_DATA_JOURNAL_MODE", raising=False)
    engine = create_sqlite_engine(tmp_path / "a.db", settings)
    _touch(engine)
    assert journal_state(engine).mode == expected
    engine.dispose()


def test_unknown_rollback_flavour_is_refused_by_name(tmp_path):
    engine = create_sqlite_engine(tmp_path / "a.db", SqliteSettings(
        sqlite_version=VULNERABLE, journal_mode=None, rollback_journal="memory"))
    with pytest.raises(ConfigurationError, match="'memory'"):
        _touch(engine)
    engine.dispose()


_DELETE_WRITER = """
import sqlite3, sys
c = sqlite3.connect(sys.argv[1], timeout=30, isolation_level=None)
assert c.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
for i in range(200):
    c.execute("BEGIN IMMEDIATE"); c.execute("INSERT INTO t VALUES (?)", (-i,)); c.execute("COMMIT")
"""


def test_truncate_and_a_delete_mode_process_share_a_file(tmp_path):
    """Upstream processes keep DELETE on the same file: both commit, nothing is lost."""
    import subprocess
    import sys

    engine = create_sqlite_engine(tmp_path / "a.db", SqliteSettings(sqlite_version=VULNERABLE))
    _touch(engine)
    other = subprocess.Popen([sys.executable, "-c", _DELETE_WRITER, str(tmp_path / "a.db")])
    for i in range(200):
        with engine.connect() as conn:
            conn.execution_options(hermes_begin="IMMEDIATE")
            with conn.begin():
                conn.exec_driver_sql("INSERT INTO t VALUES (?)", (i + 1,))
    assert other.wait(timeout=120) == 0
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM t").scalar() == 400
        assert conn.exec_driver_sql("PRAGMA integrity_check").scalar() == "ok"
    engine.dispose()


def test_fresh_file_on_safe_build_uses_wal(tmp_path):
    engine = create_sqlite_engine(tmp_path / "a.db", SqliteSettings(sqlite_version=SAFE))
    _touch(engine)
    assert journal_state(engine).mode == "wal"
    engine.dispose()
    assert _mode(tmp_path / "a.db") == "wal"


@pytest.mark.parametrize("settings", [
    SqliteSettings(sqlite_version=VULNERABLE), SqliteSettings(sqlite_version=SAFE),
    SqliteSettings(sqlite_version=VULNERABLE, journal_mode="wal"),
    SqliteSettings(sqlite_version=VULNERABLE, journal_mode="delete"),
], ids=["vulnerable-default", "safe-default", "configured-wal", "configured-delete"])
def test_a_new_file_gets_incremental_auto_vacuum_and_its_fresh_file_journal(
        tmp_path, settings, caplog, monkeypatch):
    """A file the connection creates is INCREMENTAL auto-vacuum (docs/sqlite-policy.md), in
    every journal mode; setting it writes page 1, yet the journal policy still treats the
    file as new (no "existing file" switch warning); an existing file is never changed."""
    monkeypatch.delenv("HERMES_DATA_JOURNAL_MODE", raising=False)
    path = tmp_path / "a.db"
    engine = create_sqlite_engine(path, settings)
    with caplog.at_level(logging.WARNING, logger="hermes_data.engine"):
        _touch(engine)
    assert not any("existing" in r.message for r in caplog.records), caplog.text
    mode = journal_state(engine).mode
    engine.dispose()
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA auto_vacuum").fetchone()[0] == 2
    con.close()
    assert (_mode(path) == "wal") == (mode == "wal")
    old = tmp_path / "old.db"
    sqlite3.connect(old).execute("CREATE TABLE t (x)").connection.close()
    engine = create_sqlite_engine(old, settings)
    _touch(engine)
    engine.dispose()
    con = sqlite3.connect(old)
    assert con.execute("PRAGMA auto_vacuum").fetchone()[0] == 0  # never switched at open
    con.close()


def test_an_unknown_new_file_auto_vacuum_is_refused_by_name(tmp_path):
    engine = create_sqlite_engine(tmp_path / "a.db", SqliteSettings(new_file_auto_vacuum="fast"))
    with pytest.raises(ConfigurationError, match="'fast'"):
        _touch(engine)
    engine.dispose()


def test_existing_wal_file_stays_wal_on_vulnerable_build(tmp_path, caplog):
    path = tmp_path / "a.db"
    con = sqlite3.connect(path)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("CREATE TABLE t (x)")
    con.close()
    with caplog.at_level(logging.WARNING, logger="hermes_data.engine"):
        engine = create_sqlite_engine(path, SqliteSettings(sqlite_version=VULNERABLE))
        _touch(engine)
    assert journal_state(engine).mode == "wal"
    assert any("kept in WAL" in r.message for r in caplog.records)
    engine.dispose()


def test_configured_delete_never_downgrades_a_live_wal_file(tmp_path, caplog):
    path = tmp_path / "a.db"
    con = sqlite3.connect(path)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("CREATE TABLE t (x)")
    con.close()
    with caplog.at_level(logging.ERROR, logger="hermes_data.engine"):
        engine = create_sqlite_engine(path, SqliteSettings(sqlite_version=SAFE, journal_mode="delete"))
        _touch(engine)
    assert journal_state(engine).mode == "wal"
    assert any("offline" in r.message for r in caplog.records if r.levelno >= logging.ERROR)
    engine.dispose()


def test_explicit_wal_overrides_vulnerable_default(tmp_path, monkeypatch):
    monkeypatch.setenv("HERMES_DATA_JOURNAL_MODE", "wal")
    engine = create_sqlite_engine(tmp_path / "a.db", SqliteSettings(sqlite_version=VULNERABLE))
    _touch(engine)
    assert journal_state(engine).mode == "wal"
    engine.dispose()


def test_invalid_journal_mode_setting_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("HERMES_DATA_JOURNAL_MODE", "truncate")
    engine = create_sqlite_engine(tmp_path / "a.db")
    with pytest.raises(ConfigurationError, match="'truncate'"):
        engine.connect()
    engine.dispose()


def test_existing_wal_file_is_never_switched_by_default():
    for vulnerable in (True, False):
        decision = decide_journal_mode("wal", has_pages=True, vulnerable=vulnerable, configured=None)
        assert decision.target is None
    # A rollback-journal file on a vulnerable build is moved to DELETE, never to WAL.
    assert decide_journal_mode("truncate", has_pages=True, vulnerable=True, configured=None).target == "delete"
    assert decide_journal_mode("delete", has_pages=False, vulnerable=False, configured=None).target == "wal"


def test_busy_timeout_is_set_before_the_wal_switch(tmp_path):
    """A fresh file whose lock another connection holds briefly: the WAL switch waits in the
    busy handler instead of failing with 'database is locked' — only possible when
    busy_timeout is set first."""
    path = tmp_path / "a.db"
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")
    release = threading.Timer(0.5, lambda: holder.execute("COMMIT"))
    release.start()
    try:
        engine = create_sqlite_engine(path, SqliteSettings(sqlite_version=SAFE))
        with engine.connect() as conn:
            busy = conn.exec_driver_sql("PRAGMA busy_timeout").scalar()
            sync = conn.exec_driver_sql("PRAGMA synchronous").scalar()
            limit = conn.exec_driver_sql("PRAGMA journal_size_limit").scalar()
        assert journal_state(engine).mode == "wal"
        assert (busy, sync, limit) == (30000, 1, JOURNAL_SIZE_LIMIT)
        engine.dispose()
    finally:
        release.join()
        holder.close()


def test_ddl_is_transactional(tmp_path):
    engine = create_sqlite_engine(tmp_path / "a.db")
    with pytest.raises(RuntimeError):
        with engine.connect() as conn, conn.begin():
            conn.exec_driver_sql("CREATE TABLE a (x INTEGER)")
            conn.exec_driver_sql("ALTER TABLE a ADD COLUMN y TEXT")
            raise RuntimeError("boom")
    with engine.connect() as conn:
        assert not sa.inspect(conn).has_table("a")
    engine.dispose()


def test_write_transaction_takes_the_lock_at_begin(tmp_path):
    """BEGIN IMMEDIATE: a second writer blocks at BEGIN, before running any of its work."""
    path = tmp_path / "a.db"
    engine = create_sqlite_engine(path, SqliteSettings(busy_timeout_ms=200))
    _touch(engine)
    work_started = []
    with write_transaction(engine) as conn:
        conn.exec_driver_sql("INSERT INTO t VALUES (1)")

        def second():
            try:
                with write_transaction(engine) as other:
                    work_started.append(True)
                    other.exec_driver_sql("INSERT INTO t VALUES (2)")
            except sa.exc.OperationalError as exc:
                work_started.append(str(exc))

        th = threading.Thread(target=second)
        th.start()
        th.join()
    assert len(work_started) == 1 and "locked" in work_started[0]
    engine.dispose()


def test_passive_checkpoint_only(tmp_path):
    engine = create_sqlite_engine(tmp_path / "a.db", SqliteSettings(sqlite_version=SAFE))
    _touch(engine)
    seen = []
    sa.event.listen(engine, "before_cursor_execute",
                    lambda c, cur, stmt, *a: seen.append(stmt))
    with engine.connect() as conn:
        result = passive_checkpoint(conn)
    assert result is not None and result[0] == 0
    checkpoints = [s for s in seen if "checkpoint" in s.lower()]
    assert checkpoints == ["PRAGMA wal_checkpoint(PASSIVE)"]
    engine.dispose()


def test_connections_are_per_thread(tmp_path):
    engine = create_sqlite_engine(tmp_path / "a.db")
    _touch(engine)
    ids, barrier = set(), threading.Barrier(4)

    def work():
        with engine.connect() as conn:
            barrier.wait()
            ids.add(id(conn.connection.dbapi_connection))
            conn.exec_driver_sql("SELECT count(*) FROM t").scalar()
            barrier.wait()

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(ids) == 4
    engine.dispose()


def test_apply_wal_with_fallback_applies_the_policy_to_a_callers_connection(tmp_path):
    import sqlite3

    from hermes_data.engine import apply_wal_with_fallback

    fresh = sqlite3.connect(tmp_path / "fresh.db", isolation_level=None)
    state = apply_wal_with_fallback(fresh, tmp_path / "fresh.db",
                                    SqliteSettings(sqlite_version=(3, 40, 1)))
    assert state.mode == "delete" and "WAL-reset" in state.reason
    assert fresh.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    assert fresh.execute("PRAGMA busy_timeout").fetchone()[0] == 30000
    safe = sqlite3.connect(tmp_path / "safe.db", isolation_level=None)
    state = apply_wal_with_fallback(safe, tmp_path / "safe.db",
                                    SqliteSettings(sqlite_version=(3, 51, 3)))
    assert state.mode == "wal" and safe.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert safe.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    assert safe.execute("PRAGMA journal_size_limit").fetchone()[0] == 64 * 1024 * 1024
    safe.close()
    again = sqlite3.connect(tmp_path / "safe.db", isolation_level=None)  # an existing WAL file
    state = apply_wal_with_fallback(again, "", SqliteSettings(sqlite_version=(3, 40, 1)))
    assert state.mode == "wal" and "kept in WAL" in state.reason
    for con in (fresh, again):
        con.close()


def _dotfile_connection(path) -> sqlite3.Connection:
    """A real connection on a real file through SQLite's ``unix-dotfile`` VFS, which has no
    shared-memory methods: ``PRAGMA journal_mode=WAL`` is refused without an error and the
    file stays in DELETE — what macOS NFS / SMB do to upstream's connections."""
    return sqlite3.connect(f"file:{path}?vfs=unix-dotfile", uri=True, isolation_level=None)


def test_a_refused_wal_is_an_error_once_per_process_and_database(tmp_path, caplog):
    """Issue 33: the "WAL refused" ERROR came on every call (upstream: once per process and
    database label, its kanban opening a connection per operation). Later refusals of the
    same database are DEBUG lines; another database gets its own ERROR."""
    from hermes_data.engine import apply_wal_with_fallback

    safe = SqliteSettings(sqlite_version=(3, 51, 3))  # a build the policy puts in WAL
    first, second = tmp_path / "first.db", tmp_path / "second.db"
    with caplog.at_level(logging.DEBUG, logger="hermes_data.engine"):
        for path in (first, first, first, second, second):
            con = _dotfile_connection(path)
            try:
                state = apply_wal_with_fallback(con, path, safe)
                assert state.mode == "delete"
                assert con.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
            finally:
                con.close()
    refused = [r for r in caplog.records if "WAL refused" in r.getMessage()]
    assert [(r.levelno, str(first) in r.getMessage()) for r in refused] == [
        (logging.ERROR, True), (logging.DEBUG, True), (logging.DEBUG, True),
        (logging.ERROR, False), (logging.DEBUG, False)]
    assert "once per process and database" in refused[0].getMessage()
    assert str(second) in refused[3].getMessage()


def test_a_refused_wal_of_a_store_engine_is_one_error_too(tmp_path, caplog):
    """The stores' connect policy shares the path: a pool opening several connections to a
    file whose filesystem refuses WAL logs one ERROR."""
    from hermes_data.engine import JournalState, configure_sqlite_connection

    path = tmp_path / "store.db"
    settings = SqliteSettings(sqlite_version=(3, 51, 3))
    with caplog.at_level(logging.DEBUG, logger="hermes_data.engine"):
        for _ in range(4):
            con = _dotfile_connection(path)
            try:
                configure_sqlite_connection(con, str(path), settings, JournalState())
            finally:
                con.close()
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "WAL refused" in errors[0].getMessage()
    assert len([r for r in caplog.records if "WAL refused" in r.getMessage()]) == 4


def test_a_configured_delete_kept_in_wal_is_an_error_once(tmp_path, caplog):
    """The sibling ERROR upstream also logs once per database: DELETE configured, but the file
    is in WAL and is never downgraded live."""
    from hermes_data.engine import apply_wal_with_fallback

    path = tmp_path / "wal.db"
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("CREATE TABLE t (x)")
    with caplog.at_level(logging.DEBUG, logger="hermes_data.engine"):
        for _ in range(3):
            other = sqlite3.connect(path, isolation_level=None)
            try:
                state = apply_wal_with_fallback(
                    other, path, SqliteSettings(journal_mode="delete", sqlite_version=(3, 51, 3)))
                assert state.mode == "wal"
            finally:
                other.close()
    con.close()
    kept = [r for r in caplog.records if "live downgrade is refused" in r.getMessage()]
    assert [r.levelno for r in kept] == [logging.ERROR, logging.DEBUG, logging.DEBUG]


@pytest.mark.parametrize("platform,mode,sync,fullfsync", [
    ("darwin", "wal", 2, 1), ("darwin", "delete", 1, 0), ("linux", "wal", 1, 0)])
def test_macos_in_wal_gets_synchronous_full_and_fullfsync(tmp_path, platform, mode, sync,
                                                          fullfsync):
    settings = SqliteSettings(journal_mode=mode, sqlite_version=(3, 51, 3), platform=platform)
    engine = create_sqlite_engine(tmp_path / "t.db", settings)
    try:
        with engine.connect() as conn:
            raw = conn.connection.driver_connection
            assert raw.execute("PRAGMA journal_mode").fetchone()[0] == mode
            assert raw.execute("PRAGMA synchronous").fetchone()[0] == sync
            assert raw.execute("PRAGMA checkpoint_fullfsync").fetchone()[0] == fullfsync
    finally:
        engine.dispose()


def test_journal_state_goes_with_its_engine(tmp_path):
    """The settled mode is held per engine object, not per ``id()``: a process opening engines
    per request does not accumulate states, and a new engine never inherits a dead one's."""
    import gc

    from hermes_data import engine as engine_mod

    before = len(engine_mod._journal_states)
    for i in range(20):
        engine = create_sqlite_engine(tmp_path / f"e{i}.db", SqliteSettings(sqlite_version=SAFE))
        _touch(engine)
        assert journal_state(engine).mode == "wal"
        engine.dispose()
        del engine
    gc.collect()
    assert len(engine_mod._journal_states) <= before
    fresh = create_sqlite_engine(tmp_path / "late.db", SqliteSettings(journal_mode="delete"))
    assert journal_state(fresh).mode == "unknown"  # nothing inherited before its first connect
    _touch(fresh)
    assert journal_state(fresh).mode == "delete"
    fresh.dispose()
