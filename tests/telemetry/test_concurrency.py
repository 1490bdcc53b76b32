"""Real threads: no lost update on the run counters, and the buffered writer's contract."""

from __future__ import annotations

import sqlite3
import threading
from contextlib import contextmanager

import pytest

from hermes_data.telemetry import reads as R
from hermes_data.telemetry import writes as W
from hermes_data.telemetry.buffered import BufferedWriter, BufferFullError

from .conftest import NOW, sql

THREADS, PER_THREAD, SESSIONS = 8, 2_000, 40

AGGREGATE_MISMATCHES = """
SELECT r.session_id
  FROM runs r
  JOIN (SELECT session_id, COUNT(*) n, SUM(tokens_in) ti, SUM(tokens_out) tout,
               SUM(cache_read_tokens) cr, SUM(estimated) est, SUM(cost_usd) cost
          FROM llm_calls GROUP BY session_id) c ON c.session_id = r.session_id
 WHERE r.api_calls != c.n OR r.tokens_in != c.ti OR r.tokens_out != c.tout
    OR r.cache_read_tokens != c.cr OR r.estimated_llm_calls != c.est
    OR abs(r.cost_usd - c.cost) > 1e-9
"""


def _hammer(record, per_thread: int = PER_THREAD) -> list[BaseException]:
    errors: list[BaseException] = []
    barrier = threading.Barrier(THREADS)

    def work(t: int) -> None:
        barrier.wait()
        try:
            for i in range(per_thread):
                sid = f"s{(t * 7 + i) % SESSIONS}"  # every session is hit by every thread
                record(sid, NOW, "m", "p", 1 + i % 5, 2, 0.001, 10, i % 3, 0, 0, i % 11 == 0)
        except BaseException as exc:  # pragma: no cover - surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def _assert_consistent(store, per_thread: int = PER_THREAD) -> None:
    assert sql(store, "SELECT COUNT(*) FROM llm_calls") == [(THREADS * per_thread,)]
    assert sql(store, "SELECT COUNT(*), CAST(SUM(api_calls) AS BIGINT) FROM runs") == \
        [(SESSIONS, THREADS * per_thread)]
    assert sql(store, AGGREGATE_MISMATCHES) == []


@pytest.mark.slow
def test_eight_threads_record_llm_call_without_lost_updates(wal_store):
    """SQLite in WAL: the process-wide writer lock plus BEGIN IMMEDIATE (the PostgreSQL twin
    is the next test)."""
    errors = _hammer(lambda *a: W.record_llm_call(wal_store, *a))
    assert errors == []
    _assert_consistent(wal_store)


@pytest.mark.slow
def test_eight_threads_record_llm_call_without_lost_updates_on_postgres(pg_store):
    """PostgreSQL: eight threads, one held connection each, no writer lock — the run upsert's
    ON CONFLICT DO UPDATE takes the row lock, so no increment is lost."""
    per_thread = 1_000
    backends: set[tuple[int, int]] = set()

    def record(*a):
        W.record_llm_call(pg_store, *a)
        backends.add((threading.get_ident(), pg_store.connection().info.backend_pid))

    errors = _hammer(record, per_thread)
    assert errors == []
    _assert_consistent(pg_store, per_thread)
    # one held server connection per thread, kept for all of its calls
    assert len(backends) == THREADS and len({pid for _, pid in backends}) == THREADS


def test_threads_in_delete_mode_and_a_second_store_on_the_same_file(store, store_url):
    """Two stores on one file / database (two engines, as two plugins would have); on SQLite
    in DELETE mode."""
    from hermes_data.telemetry.store import TelemetryStore

    with TelemetryStore(store_url) as second:
        targets = [store, second]
        barrier = threading.Barrier(4)

        def work(t: int) -> None:
            barrier.wait()
            for i in range(50):
                W.record_llm_call(targets[t % 2], f"s{i % 3}", NOW, "m", "p", 1, 1, 0.5, 1)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert [r.api_calls for r in (R.get_run(store, f"s{i}") for i in range(3))] == [68, 68, 64]
    assert sql(store, AGGREGATE_MISMATCHES) == []


@pytest.mark.slow
def test_buffered_writer_from_eight_threads(store):
    with BufferedWriter(store, max_pending=1_000, max_batch=500) as writer:
        errors = _hammer(writer.record_llm_call)
        assert writer.flush(timeout=60)
        assert errors == [] and writer.failed == 0 and writer.pending == 0
        assert writer.batches < THREADS * PER_THREAD  # calls really were grouped
    _assert_consistent(store)


def test_buffered_writer_matches_the_synchronous_rows(store, tmp_path):
    from hermes_data.telemetry.schema import metadata
    from hermes_data.telemetry.store import TelemetryStore

    calls = [(f"s{i % 3}", NOW, f"m{i % 2}" if i else None, "p", i, 2 * i, 0.1 * i, i, 1, 2, 3,
              i % 2 == 0, i % 3 == 0, "moa" if i % 4 == 0 else "")
             for i in range(50)]
    for c in calls:
        W.record_llm_call(store, *c, turn_id=f"t{c[4]}", sender_id="x" if c[4] == 7 else None)
    W.record_tool_call(store, "s1", NOW, "bash", False, 3)
    with TelemetryStore(tmp_path / "buffered.db") as other:
        metadata.create_all(other.engine)
        with BufferedWriter(other) as writer:
            for c in calls:
                writer.record_llm_call(*c, turn_id=f"t{c[4]}", sender_id="x" if c[4] == 7 else None)
            writer.record_tool_call("s1", NOW, "bash", False, 3)
        for query in ("SELECT * FROM runs ORDER BY session_id", "SELECT * FROM llm_calls ORDER BY id",
                    "SELECT * FROM tool_calls ORDER BY id"):
            # on PostgreSQL this also compares the two backends' rows value for value
            assert other.connection().execute(query).fetchall() == sql(store, query)


@contextmanager
def _database_write_lock(store):
    """Take the store's write lock from a separate connection (a real lock, not an in-process one)."""
    if store.engine.dialect.name == "sqlite":
        holder = sqlite3.connect(store.path, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            holder.execute("ROLLBACK")
            holder.close()
    else:
        with store.engine.connect() as holder, holder.begin():
            holder.exec_driver_sql("LOCK TABLE llm_calls IN EXCLUSIVE MODE")
            yield


def test_buffered_writer_back_pressure_and_bad_calls(store, caplog):
    writer = BufferedWriter(store, max_pending=5, put_timeout=0.2, max_delay=0.01)
    # Hold the database's write lock from another connection: the writer cannot commit, so
    # the queue fills and producers wait.
    with _database_write_lock(store):
        with pytest.raises(BufferFullError, match="pending"):
            for i in range(10_000):
                writer.record_llm_call("s", NOW, "m", "p", 1, 1, 0.1, 1)
    assert writer.flush(timeout=10)
    [(queued,)] = sql(store, "SELECT COUNT(*) FROM llm_calls")
    assert 5 <= queued < 10_000
    # one bad call (a NULL session violates NOT NULL) does not sink its batch neighbours
    writer.record_llm_call("ok1", NOW, "m", "p", 1, 1, 0.1, 1)
    writer.record_llm_call(None, NOW, "m", "p", 1, 1, 0.1, 1)
    writer.record_llm_call("ok2", NOW, "m", "p", 1, 1, 0.1, 1)
    writer.close()
    assert writer.failed == 1
    assert R.get_run(store, "ok1").api_calls == 1 and R.get_run(store, "ok2").api_calls == 1
    with pytest.raises(Exception, match="closed"):
        writer.record_llm_call("late", NOW, "m", "p")


def test_writers_queue_in_process_only_in_rollback_journal_modes(tmp_path):
    """WAL: SQLite's own hand-off of the write lock (no in-process queue); DELETE: one
    in-process lock per file shared by every store on it."""
    from hermes_data.engine import SqliteSettings
    from hermes_data.telemetry import TelemetryStore
    from hermes_data.telemetry.schema import metadata

    with TelemetryStore(tmp_path / "w.db", settings=SqliteSettings(journal_mode="wal")) as wal:
        metadata.create_all(wal.engine)
        W.start_run(wal, "s", "m", "cli")
        assert not hasattr(wal.writer_queue, "acquire")
    with TelemetryStore(tmp_path / "d.db", settings=SqliteSettings(journal_mode="delete")) as a, \
            TelemetryStore(tmp_path / "d.db", settings=SqliteSettings(journal_mode="delete")) as b:
        metadata.create_all(a.engine)
        W.start_run(a, "s", "m", "cli")
        W.start_run(b, "t", "m", "cli")
        assert hasattr(a.writer_queue, "acquire") and a.writer_queue is b.writer_queue
