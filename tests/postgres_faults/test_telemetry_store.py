"""The telemetry store on a PostgreSQL server that goes away (issue 31; docs/postgresql.md,
"When the server goes away"): restarts, a backend terminated mid-transaction, a statement
timeout, the buffered writer across a restart — on a private server (conftest.py)."""

from __future__ import annotations

import uuid

import psycopg
import pytest

from hermes_data.errors import DatabaseUnavailableError, StatementTimeoutError
from hermes_data.telemetry import reads, writes
from hermes_data.telemetry.buffered import BufferedWriter
from hermes_data.telemetry.store import TelemetryStore

from .test_session_store import assert_plain

pytestmark = pytest.mark.journal_independent("PostgreSQL only: a private server that goes away")


@pytest.fixture
def store(faults_telemetry_url):
    with TelemetryStore(faults_telemetry_url) as s:
        yield s


def sid() -> str:
    return f"run-{uuid.uuid4().hex[:10]}"


def calls_of(store: TelemetryStore, session_id: str) -> tuple[int, int]:
    """The run's counted calls and its ``llm_calls`` rows."""
    run = reads.get_run(store, session_id)
    with store.read() as tx:
        rows = tx.conn.execute("SELECT count(*) FROM llm_calls WHERE session_id = %s",
                               (session_id,)).fetchone()[0]
    return (run.api_calls if run else 0), rows


def test_reads_and_writes_after_a_restart_reconnect(store, private_pg):
    first, second = sid(), sid()
    writes.start_run(store, first)
    assert reads.get_run(store, first) is not None  # this thread's connection is held
    private_pg.restart("fast")
    assert reads.get_run(store, first).session_id == first  # no error reaches the caller
    writes.record_llm_call(store, second, None, "m", "p", tokens_in=3)
    assert calls_of(store, second) == (1, 1)


@pytest.mark.parametrize("fault", ["restart-fast", "restart-immediate", "terminate"])
def test_a_write_in_flight_is_typed_and_all_or_nothing(store, private_pg, fault):
    a, b = sid(), sid()
    with pytest.raises(DatabaseUnavailableError) as info:
        with store.write():  # one transaction: both calls or neither
            writes.record_llm_call(store, a, None, "m", "p", tokens_in=1)
            if fault == "terminate":
                private_pg.terminate(store.connection().info.backend_pid)
            else:
                private_pg.restart(fault.split("-")[1])
            writes.record_llm_call(store, b, None, "m", "p", tokens_in=1)
    assert not info.value.outcome_unknown and "rolled back" in str(info.value)
    assert_plain(info.value, "telemetry store")
    assert calls_of(store, a) == (0, 0) and calls_of(store, b) == (0, 0)
    writes.record_llm_call(store, b, None, "m", "p", tokens_in=1)  # the next write succeeds
    assert calls_of(store, b) == (1, 1)


def test_a_statement_timeout_is_typed_and_the_store_stays_usable(faults_telemetry_url):
    url = faults_telemetry_url + "?options=-c%20statement_timeout%3D300"
    run = sid()
    with TelemetryStore(url) as store:
        writes.start_run(store, run)
        with psycopg.connect(faults_telemetry_url.replace("postgresql+psycopg", "postgresql")) as other:
            other.execute("SELECT 1 FROM runs WHERE session_id = %s FOR UPDATE", (run,))
            with pytest.raises(StatementTimeoutError) as info:  # waits on the row lock
                writes.record_llm_call(store, run, None, "m", "p", tokens_in=1)
            other.rollback()
        assert info.value.sqlstate == "57014" and isinstance(info.value, TimeoutError)
        assert_plain(info.value, "telemetry store")
        assert calls_of(store, run) == (0, 0)
        writes.record_llm_call(store, run, None, "m", "p", tokens_in=1)
        assert calls_of(store, run) == (1, 1)


def test_the_buffered_writer_keeps_writing_across_a_restart(store, private_pg):
    run = sid()
    with BufferedWriter(store) as writer:
        writer.record_llm_call(run, None, "m", "p", tokens_in=1)
        assert writer.flush(10)
        private_pg.restart("fast")  # the writer thread's connection dies, idle
        for _ in range(3):
            writer.record_llm_call(run, None, "m", "p", tokens_in=1)
        assert writer.flush(10)
        assert writer.failed == 0
    assert calls_of(store, run) == (4, 4)
