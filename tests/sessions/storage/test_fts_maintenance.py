"""``optimize_fts``, ``rebuild_fts``, ``merge_fts`` and the merge cadence (spec
sessions-ext-storage.md §3.7, §3.10; acceptance §4.19, §4.20)."""

from __future__ import annotations

import logging
import os
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

from hermes_data.sessions.storage.fts import maintenance as fts_maintenance
from hermes_data.sessions.core import maintenance
from hermes_data.sessions.errors import StateDbReplacedError
from hermes_data.sessions.store import SessionStore

FTS = ("messages_fts", "messages_fts_trigram", "messages_cjk_fts")

#: Holds a lock for the test: the admission flock (``flock``) or the write lock
#: (``BEGIN IMMEDIATE``); prints "held", exits when stdin closes.
HOLDER = textwrap.dedent("""
    import fcntl, os, sqlite3, sys
    kind, path = sys.argv[1], sys.argv[2]
    if kind == "flock":
        fd = os.open(path + ".fts_rebuild.lock", os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
    else:
        con = sqlite3.connect(path, isolation_level=None)
        con.execute("BEGIN IMMEDIATE")
    print("held", flush=True)
    sys.stdin.read()
""")


class Holder:
    def __init__(self, kind: str, path) -> None:
        self.p = subprocess.Popen([sys.executable, "-c", HOLDER, kind, str(path)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.p.stdout.readline().strip() == "held"

    def __enter__(self) -> "Holder":
        return self

    def __exit__(self, *exc) -> None:
        self.p.stdin.close()
        self.p.wait(timeout=10)


def _seed(s: SessionStore, n: int = 40) -> None:
    s.create_session("a", "cli")
    s.append_messages_batch("a", [{"role": "user", "content": f"alpha {i} 漢字"} for i in range(n)])


def _raw(s: SessionStore) -> sqlite3.Connection:
    return s.backend._raw


def _trace(s: SessionStore) -> list[str]:
    log: list[str] = []
    _raw(s).set_trace_callback(log.append)
    return log


def _shadow_digest(path) -> list:
    con = sqlite3.connect(path)
    try:
        return [con.execute(f"SELECT count(*), sum(length(block)) FROM {t}_data").fetchone()
                for t in FTS] + [con.execute(
                    "SELECT key, value FROM state_meta WHERE key LIKE 'fts_rebuild_%' "
                    "ORDER BY key").fetchall()]
    finally:
        con.close()


def _integrity(s: SessionStore) -> None:
    with s.engine.connect() as c:
        for t in FTS:
            c.exec_driver_sql(f"INSERT INTO {t}({t}) VALUES ('integrity-check')")


# ---------------------------------------------------------------------------------------
# optimize_fts
# ---------------------------------------------------------------------------------------


def _varint(b: bytes, i: int) -> tuple[int, int]:
    v = 0
    while True:
        c = b[i]
        i += 1
        v = (v << 7) | (c & 0x7F)
        if not c & 0x80:
            return v, i


def _segments(con, table: str) -> list[tuple[int, int]]:
    """(segment id, pages) of each segment of an FTS5 index, from its structure record
    (``<t>_data`` row 10: a 4-byte cookie, then varints: levels, segments, write counter,
    and per level its merge state and segments as id, first page, last page)."""
    b = con.execute(f"SELECT block FROM {table}_data WHERE id = 10").fetchone()[0]
    levels, i = _varint(b, 4)
    _, i = _varint(b, i)
    _, i = _varint(b, i)
    out = []
    for _ in range(levels):
        _, i = _varint(b, i)
        n, i = _varint(b, i)
        for _ in range(n):
            seg, i = _varint(b, i)
            first, i = _varint(b, i)
            last, i = _varint(b, i)
            out.append((seg, last - first + 1))
    return out


@pytest.fixture
def paced(monkeypatch):
    """Small merge steps and no pauses: the paced optimize of a test corpus takes several
    steps in milliseconds."""
    monkeypatch.setattr(fts_maintenance, "OPTIMIZE_STEP_PAGES", 2)
    monkeypatch.setattr(fts_maintenance, "OPTIMIZE_PAUSE_MIN_S", 0.0)
    monkeypatch.setattr(fts_maintenance, "OPTIMIZE_PAUSE_FACTOR", 0.0)


def test_optimize_fts_merges_each_index_to_one_segment_in_paced_steps(sqlite_store, paced,
                                                                        tmp_path):
    """The paced optimize ends where FTS5's one-shot ``'optimize'`` ends (one segment per
    index, the same pages give or take a page boundary), but in bounded ``'merge'`` steps,
    each its own write transaction: one negative merge per index, then positive ones."""
    sqlite_store.create_session("a", "cli")
    for i in range(80):  # one transaction each: dozens of segments
        sqlite_store.append_message("a", "user", f"alpha {i} beta 漢字{i} " + f"w{i * 13} " * 20)
    assert all(len(_segments(_raw(sqlite_store), t)) > 1 for t in FTS)
    reference = sqlite3.connect(tmp_path / "reference.db")
    _raw(sqlite_store).backup(reference)
    for t in FTS:
        reference.execute(f"INSERT INTO {t}({t}) VALUES ('optimize')")
        reference.commit()
    log = _trace(sqlite_store)
    assert sqlite_store.optimize_fts() == 3
    merges = [line for line in log if "VALUES ('merge'" in line]
    assert [line for line in merges if "'merge', -" in line] == [
        f"INSERT INTO {t}({t}, rank) VALUES ('merge', -2)" for t in FTS]
    assert len(merges) > 2 * len(FTS)  # several steps per index on this corpus
    assert sum(line == "BEGIN IMMEDIATE" for line in log) == len(merges)
    for t in FTS:
        (got,), (want,) = _segments(_raw(sqlite_store), t), _segments(reference, t)
        assert abs(got[1] - want[1]) <= 1, (t, got, want)
    reference.close()
    _integrity(sqlite_store)
    assert len(sqlite_store.search_messages("alpha", limit=100)) == 80
    log.clear()
    assert sqlite_store.optimize_fts() == 3  # already one segment: one step per index
    assert sum("VALUES ('merge'" in line for line in log) == len(FTS)


def test_optimize_fts_skips_absent_index_and_vacuum_calls_it(sqlite_store):
    _seed(sqlite_store)
    with sqlite_store.engine.begin() as c:  # a store without the CJK-bigram index
        for name in ("messages_cjk_enqueue_insert", "messages_cjk_enqueue_update",
                     "messages_cjk_enqueue_delete"):
            c.exec_driver_sql(f"DROP TRIGGER {name}")
        c.exec_driver_sql("DROP TABLE messages_cjk_fts")
    assert sqlite_store.optimize_fts() == 2
    log = _trace(sqlite_store)
    maintenance.vacuum(sqlite_store)
    assert sum("VALUES ('merge', -" in line for line in log) == 2


def test_maintenance_raises_the_sticky_error_of_a_replaced_handle(tmp_path):
    path = tmp_path / "state.db"
    with SessionStore(tmp_path / "other.db") as other:
        other.create_session("x", "cli")
    s = SessionStore(path)
    try:
        _seed(s, 5)
        os.replace(tmp_path / "other.db", path)
        for call in (s.optimize_fts, s.rebuild_fts, s.merge_fts,
                     lambda: maintenance.vacuum(s)):
            with pytest.raises(StateDbReplacedError):
                call()
    finally:
        s.close()


def test_a_damaged_cjk_index_never_marks_the_message_indexes_stale(sqlite_store):
    _seed(sqlite_store, 5)
    con = sqlite3.connect(sqlite_store.path, isolation_level=None)
    con.execute("UPDATE messages_cjk_fts_data SET block = x'0102030405' WHERE id = 10")
    con.close()
    assert sqlite_store.optimize_fts() == 2
    assert sqlite_store.merge_fts(64, 1) == 2
    assert sqlite_store.get_meta("fts_stale") is None
    assert sqlite_store.search_messages("alpha")[0].route == "fts"
    sqlite_store.set_meta("cjk_bigram_stale", "1")  # marked: not maintained at all
    log = _trace(sqlite_store)
    assert sqlite_store.optimize_fts() == 2
    assert not [ln for ln in log if "messages_cjk_fts(" in ln]


# ---------------------------------------------------------------------------------------
# rebuild_fts (§4.19)
# ---------------------------------------------------------------------------------------


def _set_markers(s: SessionStore) -> None:
    with s.engine.begin() as c:  # a window covering every row: nothing is hidden by the gate
        hw = c.exec_driver_sql("SELECT MAX(id) FROM messages").scalar()
        for key in ("fts_rebuild_high_water", "fts_rebuild_progress"):
            c.exec_driver_sql("INSERT INTO state_meta(key, value) VALUES (?, ?)", (key, str(hw)))


def test_rebuild_fts_against_a_held_admission_lock_changes_nothing(sqlite_store, monkeypatch):
    monkeypatch.setattr(fts_maintenance, "REBUILD_ADMISSION_WAIT_S", 0.3)
    _seed(sqlite_store)
    _set_markers(sqlite_store)
    before = _shadow_digest(sqlite_store.path)
    log = _trace(sqlite_store)
    with Holder("flock", sqlite_store.path):
        t0 = time.monotonic()
        assert sqlite_store.rebuild_fts() == 0
        assert time.monotonic() - t0 < 5
    assert not [line for line in log if line.startswith(("BEGIN IMMEDIATE", "INSERT", "DELETE"))]
    assert _shadow_digest(sqlite_store.path) == before
    assert sqlite_store.get_meta("fts_rebuild_high_water") is not None


def test_rebuild_fts_admitted_rebuilds_in_one_transaction_and_deletes_markers(sqlite_store):
    _seed(sqlite_store)
    _set_markers(sqlite_store)
    with sqlite_store.engine.begin() as c:  # lose the index's rows: only a rebuild restores them
        c.exec_driver_sql("INSERT INTO messages_fts(messages_fts) VALUES ('delete-all')")
        c.exec_driver_sql("INSERT INTO messages_fts_trigram(messages_fts_trigram) "
                          "VALUES ('delete-all')")
    log = _trace(sqlite_store)
    assert sqlite_store.rebuild_fts() == 2
    assert sum(line == "BEGIN IMMEDIATE" for line in log) == 1
    assert sum("'rebuild'" in line for line in log) == 2
    assert sqlite_store.get_meta("fts_rebuild_high_water") is None
    assert sqlite_store.get_meta("fts_rebuild_progress") is None
    _integrity(sqlite_store)
    with sqlite_store.engine.connect() as c:
        assert c.exec_driver_sql("SELECT count(*) FROM messages_fts "
                                 "WHERE messages_fts MATCH 'alpha'").scalar() == 40


def test_rebuild_fts_on_the_legacy_inline_layout_repopulates(legacy_copy):
    with SessionStore(legacy_copy) as s:
        with s.engine.connect() as c:
            assert "tool_name" not in c.exec_driver_sql(
                "SELECT sql FROM sqlite_master WHERE name = 'messages_fts'").scalar()
            total = c.exec_driver_sql("SELECT count(*) FROM messages").scalar()
        assert s.rebuild_fts() >= 1
        with s.engine.connect() as c:
            assert c.exec_driver_sql("SELECT count(*) FROM messages_fts").scalar() == total


# ---------------------------------------------------------------------------------------
# merge_fts and the cadence (§4.20)
# ---------------------------------------------------------------------------------------


def test_merge_fts_argument_checks(store):
    with pytest.raises(ValueError):
        store.merge_fts(0)
    with pytest.raises(ValueError):
        store.merge_fts(500, -1)
    with pytest.raises(TypeError):
        store.merge_fts(True)
    with pytest.raises(TypeError):
        store.merge_fts(500, 1.5)
    with pytest.raises(TypeError):
        store.merge_fts("500")


def _merge_runs(log: list[str]) -> dict[str, list[list[str]]]:
    """Per index, the statements of each transaction that ran a 'merge'."""
    out: dict[str, list[list[str]]] = {}
    tx: list[str] = []
    for line in log:
        if line.startswith("BEGIN"):
            tx = [line]
        else:
            tx.append(line)
        if line == "COMMIT":
            merges = [ln for ln in tx if "'merge'" in ln]
            for m in merges:
                table = next(t for t in reversed(FTS) if f"INTO {t}(" in m)
                out.setdefault(table, []).append(tx)
    return out


def test_cadence_after_1000_writes_runs_bounded_merges(tmp_path):
    path = tmp_path / "state.db"
    fast = {"database": {"synchronous": "OFF"}}  # 1,000 commits without 1,000 fsyncs
    with SessionStore(path, config=fast) as s:
        s.create_session("a", "cli")
        for i in range(fts_maintenance.MERGE_EVERY - 1):
            s.append_message("a", "user", f"word{i} 字{i}")
        log = _trace(s)
        s.append_message("a", "user", "the thousandth write 漢字")
        runs = _merge_runs(log)
        assert set(runs) == set(FTS)
        for table, txs in runs.items():
            assert 1 <= len(txs) <= fts_maintenance.MERGE_COMMANDS
            assert all(sum("'merge'" in ln for ln in tx) == 1 for tx in txs)  # one per transaction
        assert sum("'usermerge'" in ln and "INSERT" in ln for ln in log) == 3
        with s.engine.connect() as c:
            for t in FTS:
                assert c.exec_driver_sql(
                    f"SELECT v FROM {t}_config WHERE k = 'usermerge'").scalar() == 2
        _integrity(s)
        # The next writes up to the 2,000th run nothing.
        log.clear()
        for i in range(10):
            s.append_message("a", "user", f"after {i}")
        assert not [ln for ln in log if "'merge'" in ln]
    # Another handle reads usermerge 2 and does not write it again.
    with SessionStore(path) as s:
        log = _trace(s)
        assert s.merge_fts() >= len(FTS)
        assert not [ln for ln in log if "'usermerge'" in ln and "INSERT" in ln]
        assert sum("_config WHERE k = 'usermerge'" in ln for ln in log) == 3


def test_usermerge_written_when_it_differs(sqlite_store):
    _seed(sqlite_store)
    with sqlite_store.engine.begin() as c:
        c.exec_driver_sql("INSERT INTO messages_fts(messages_fts, rank) VALUES ('usermerge', 4)")
    log = _trace(sqlite_store)
    sqlite_store.merge_fts(64, 1)
    writes = [ln for ln in log if "'usermerge'" in ln and "INSERT" in ln]
    assert len(writes) == 3  # the base index (4) and the two never set
    log.clear()
    sqlite_store.merge_fts(64, 1)  # once per handle
    assert not [ln for ln in log if "usermerge" in ln]


def test_cadence_survives_system_error(sqlite_store, monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="hermes_data.sessions.storage.fts.maintenance")
    monkeypatch.setattr(fts_maintenance, "MERGE_EVERY", 5)

    def boom(*_a, **_k):
        raise SystemError("injected")

    monkeypatch.setattr(fts_maintenance, "merge_fts", boom)
    sqlite_store.create_session("a", "cli")
    ids = [sqlite_store.append_message("a", "user", f"m{i}") for i in range(5)]
    assert sqlite_store.append_messages_batch("a", [{"role": "user", "content": "b"}] * 4) == 4
    ids.append(sqlite_store.append_message("a", "user", "tenth"))
    assert [m.id for m in sqlite_store.get_messages("a")][:5] == ids[:5]
    assert sqlite_store.get_messages("a")[-1].content == "tenth"
    assert "SystemError" in caplog.text


def test_cadence_skips_stale_and_read_only(tmp_path, monkeypatch):
    monkeypatch.setattr(fts_maintenance, "MERGE_EVERY", 2)
    calls: list = []
    real = fts_maintenance.merge_fts
    monkeypatch.setattr(fts_maintenance, "merge_fts", lambda *a, **k: calls.append(a) or real(*a, **k))
    with SessionStore(tmp_path / "state.db") as s:
        _seed(s, 3)
        s.append_message("a", "user", "x")
        assert len(calls) == 1
        s.set_meta("fts_stale", "1")
        s.append_message("a", "user", "y")
        s.append_message("a", "user", "z")
        assert len(calls) == 1


def test_held_write_lock_ends_the_pass_without_waiting(sqlite_store):
    _seed(sqlite_store)
    with Holder("write", sqlite_store.path):
        t0 = time.monotonic()
        assert sqlite_store.merge_fts() == 0
        assert time.monotonic() - t0 < 0.5  # the handle's busy timeout is 1 s
    assert _raw(sqlite_store).execute("PRAGMA busy_timeout").fetchone()[0] == 1000
    assert sqlite_store.merge_fts() >= 3  # usermerge never got checked: it is now


# ---------------------------------------------------------------------------------------
# PostgreSQL (§3.10)
# ---------------------------------------------------------------------------------------


def test_postgresql_parity(pg_store):
    _seed(pg_store)
    with pg_store.engine.connect() as c:
        gins = c.exec_driver_sql(
            "SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "JOIN pg_am am ON am.oid = c.relam WHERE am.amname = 'gin' "
            "AND i.indrelid = 'messages'::regclass").scalar()
    assert gins >= 2
    assert pg_store.optimize_fts() == gins
    assert pg_store.rebuild_fts() >= 2
    assert pg_store.merge_fts() == 0
    with pytest.raises(ValueError):
        pg_store.merge_fts(0)
    assert pg_store.retry_deferred_fts_recovery() is False
    lock = pg_store.backend.maintenance_lock()
    try:
        assert lock.acquire()
        assert pg_store.rebuild_fts() == 0  # the maintenance advisory lock is held elsewhere
    finally:
        lock.release()
        lock.close()
    assert [r.id for r in pg_store.search_messages("alpha", limit=2)]


@pytest.mark.journal_independent(
    "forces DELETE mode itself: only a rollback journal lets a reader refuse a COMMIT")
def test_a_merge_whose_commit_is_refused_leaves_no_open_transaction(tmp_path, monkeypatch):
    """A zero-patience merge whose COMMIT meets a reader's SHARED lock (DELETE mode) gets
    SQLITE_BUSY from COMMIT, which leaves SQLite's transaction open: it must be rolled back
    there, or every later write of the handle fails "cannot start a transaction within a
    transaction" (found by the soak test after the 1,000th append)."""
    monkeypatch.setenv("HERMES_DATA_JOURNAL_MODE", "delete")
    path = tmp_path / "state.db"
    with SessionStore(path) as s:
        s.create_session("a", "cli")
        s.append_messages_batch("a", [{"role": "user", "content": f"word {i}"}
                                      for i in range(50)])
        assert s.journal_mode == "delete"
        reader = sqlite3.connect(path, isolation_level=None)
        try:
            reader.execute("BEGIN")
            reader.execute("SELECT count(*) FROM messages").fetchone()  # holds SHARED
            assert s.merge_fts(64, 1) == 0  # BEGIN IMMEDIATE works, COMMIT is refused busy
            assert not _raw(s).in_transaction
        finally:
            reader.execute("ROLLBACK")
            reader.close()
        assert s.append_message("a", "user", "after the refused commit") > 0
