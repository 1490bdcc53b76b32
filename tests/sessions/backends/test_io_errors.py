"""I/O faults reach the caller as one typed error naming the file (issue 31;
docs/sqlite-policy.md "I/O errors").

A full database is made for real, without fault injection: ``PRAGMA max_page_count`` on the
writer's own connection caps the file just above its size, so SQLite answers ``SQLITE_FULL``
("database or disk is full") mid-transaction exactly as on a full disk. Every injected fault
position is covered by the fault matrix (tests/faults/).
"""

from __future__ import annotations

import sqlite3

import pytest

from hermes_data.errors import StoreFullError, StoreIOError, store_io_error
from hermes_data.sessions.core.persistence_errors import classify_persistence_error
from hermes_data.sessions.store import SessionStore

BIG = "x" * 20_000


def _cap_pages(store: SessionStore, extra: int = 1) -> None:
    """Let the file grow by ``extra`` pages at most (the writer's connection only)."""
    def cap(con: sqlite3.Connection) -> None:
        pages = con.execute("PRAGMA page_count").fetchone()[0]
        con.execute(f"PRAGMA max_page_count = {pages + extra}")
    store.backend.on_writer_raw(cap)


def _uncap(store: SessionStore) -> None:
    store.backend.on_writer_raw(lambda con: con.execute("PRAGMA max_page_count = 1073741823"))


@pytest.fixture
def store(tmp_path):
    with SessionStore(tmp_path / "state.db") as s:
        s.create_session("s1", "cli")
        s.append_message("s1", "user", "acknowledged")
        yield s


def _messages(store: SessionStore) -> list[str]:
    return [m.content for m in store.get_messages("s1")]


def test_a_full_database_during_a_batch_is_one_typed_error_and_nothing_is_visible(store):
    _cap_pages(store)
    with pytest.raises(StoreFullError) as info:
        store.append_messages_batch("s1", [{"role": "user", "content": BIG}] * 20)
    err = info.value
    assert isinstance(err, StoreIOError) and isinstance(err, OSError)
    assert str(store.backend.path) in str(err) and err.path == str(store.backend.path)
    assert err.errno == 28  # ENOSPC
    assert isinstance(err.orig, sqlite3.OperationalError)
    assert err.orig.sqlite_errorcode & 0xFF == 13  # SQLITE_FULL, the driver's own error
    assert _messages(store) == ["acknowledged"]
    assert classify_persistence_error(err) == "disk"
    # The handle stays usable: once there is room the same call succeeds.
    _uncap(store)
    store.append_messages_batch("s1", [{"role": "user", "content": BIG}] * 20)
    assert len(_messages(store)) == 21
    assert store.get_session("s1").message_count == 21


def test_a_full_database_inside_a_savepoint_keeps_the_first_error(store):
    """import_sessions sets titles inside a savepoint: when SQLite rolls the whole transaction
    back, SQLAlchemy's ``ROLLBACK TO SAVEPOINT`` fails with "no such savepoint" — the caller
    gets StoreFullError carrying the first driver error, not the secondary one."""
    _cap_pages(store, extra=4)
    entries = [{"id": f"imp-{n}", "source": "cli", "title": f"imported {n}",
                "started_at": 1_700_000_000.0,
                "messages": [{"role": "user", "content": BIG, "timestamp": 1_700_000_000.0}]}
               for n in range(8)]
    with pytest.raises(StoreIOError) as info:
        store.import_sessions(entries)
    assert "no such savepoint" not in str(info.value.orig)
    assert str(store.backend.path) in str(info.value)
    assert [s for s in ("imp-0", "imp-7") if store.get_session(s) is not None] == []
    _uncap(store)
    assert store.import_sessions(entries).imported == 8


def test_lock_conflicts_and_other_errors_are_no_io_fault(tmp_path):
    """The classifier never calls contention or a wrong statement an I/O fault."""
    db = tmp_path / "plain.db"
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN IMMEDIATE")
    other = sqlite3.connect(db, timeout=0, isolation_level=None)
    try:
        with pytest.raises(sqlite3.OperationalError) as busy:
            other.execute("BEGIN IMMEDIATE")
        with pytest.raises(sqlite3.OperationalError) as wrong:
            other.execute("SELECT nope FROM t")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        other.close()
    assert store_io_error(busy.value, str(db), "write") is None
    assert store_io_error(wrong.value, str(db), "write") is None


def test_classify_persistence_error_puts_store_io_errors_in_the_disk_bucket(tmp_path):
    secondary = sqlite3.OperationalError("no such savepoint: sa_savepoint_2")
    assert classify_persistence_error(StoreIOError(str(tmp_path / "state.db"), "write",
                                                   secondary)) == "disk"
    assert classify_persistence_error(StoreFullError(str(tmp_path / "state.db"), "write")) \
        == "disk"
