"""Fault-matrix scenarios of the telemetry store's write paths (:mod:`tests.faults.base`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.faults.base import MARK, Scenario, count, rows_digest

# -- the telemetry store ----------------------------------------------------------------------

def _telemetry_store(directory: Path) -> Any:
    from hermes_data.telemetry import TelemetryStore

    return TelemetryStore(directory / "telemetry.db")


def _telemetry_prepare(directory: Path) -> None:
    from hermes_data.telemetry import record_llm_call

    store = _telemetry_store(directory)
    try:
        for i in range(10):
            record_llm_call(store, "run-1", None, "model-a", "provider-a", tokens_in=i)
    finally:
        store.close()


def _llm_calls_observe(directory: Path) -> tuple[str, int]:
    db = directory / "telemetry.db"
    prior = rows_digest(db, "SELECT id, session_id, tokens_in FROM llm_calls "
                            "WHERE session_id != ? ORDER BY id", (MARK,))
    calls = count(db, "SELECT count(*) FROM llm_calls WHERE session_id = ?", (MARK,))
    # The call and its run's totals are one transaction: a call without its run is torn.
    run_calls = count(db, "SELECT coalesce(sum(api_calls), 0) FROM runs "
                          "WHERE session_id = ?", (MARK,))
    return prior, (calls if calls == run_calls else -1 - calls)


def _record_llm_call(store: Any, directory: Path) -> None:
    from hermes_data.telemetry import record_llm_call

    record_llm_call(store, MARK, None, "model-b", "provider-b", tokens_in=7, tokens_out=3)


def _tool_prepare(directory: Path) -> None:
    from hermes_data.telemetry import record_tool_call, start_run

    _telemetry_prepare(directory)
    store = _telemetry_store(directory)
    try:
        start_run(store, MARK, "model-b", "cli")
        for i in range(10):
            record_tool_call(store, "run-1", None, f"tool-{i}", latency_ms=i)
    finally:
        store.close()


def _tool_calls_observe(directory: Path) -> tuple[str, int]:
    db = directory / "telemetry.db"
    prior = rows_digest(db, "SELECT id, session_id, tool_name, latency_ms FROM tool_calls "
                            "WHERE session_id != ? ORDER BY id", (MARK,))
    prior += rows_digest(db, "SELECT id, session_id, tokens_in FROM llm_calls ORDER BY id")
    calls = count(db, "SELECT count(*) FROM tool_calls WHERE session_id = ?", (MARK,))
    # The row and the run's counter are one transaction: a row without its count is torn.
    counted = count(db, "SELECT tool_calls FROM runs WHERE session_id = ?", (MARK,))
    return prior, (calls if calls == counted else -1 - calls)


def _record_tool_call(store: Any, directory: Path) -> None:
    from hermes_data.telemetry import record_tool_call

    record_tool_call(store, MARK, None, "fault-tool", ok=True, latency_ms=5)


# -- the buffered writer: a flush of pending calls is the operation ----------------------------
#: Calls of each kind one flush writes (one group commit: fewer than ``max_batch``).
FLUSHED = 10


class _Buffered:
    """A store and a :class:`BufferedWriter` on it whose writer thread is already running on
    its connection (a first, empty flush), so that arming counts only the flush under test."""

    def __init__(self, directory: Path) -> None:
        from hermes_data.telemetry import BufferedWriter

        self.store = _telemetry_store(directory)
        self.writer = BufferedWriter(self.store, max_delay=0.01)
        self.writer.flush()

    def close(self) -> None:
        try:
            self.writer.close()  # faults off: what a failed flush left queued lands here
        finally:
            self.store.close()


def _buffered_observe(directory: Path) -> tuple[str, int]:
    db = directory / "telemetry.db"
    prior = rows_digest(db, "SELECT id, session_id, tokens_in FROM llm_calls "
                            "WHERE session_id != ? ORDER BY id", (MARK,))
    prior += rows_digest(db, "SELECT id, session_id, tool_name FROM tool_calls "
                             "WHERE session_id != ? ORDER BY id", (MARK,))
    llm = count(db, "SELECT count(*) FROM llm_calls WHERE session_id = ?", (MARK,))
    tools = count(db, "SELECT count(*) FROM tool_calls WHERE session_id = ?", (MARK,))
    api, counted = (count(db, f"SELECT {col} FROM runs WHERE session_id = ?", (MARK,))
                    for col in ("api_calls", "tool_calls"))
    whole = llm == tools == api == counted and llm % FLUSHED == 0
    return prior, (llm // FLUSHED if whole else -1 - llm - tools)


def _buffered_flush(handle: _Buffered, directory: Path) -> None:
    writer = handle.writer
    for i in range(FLUSHED):
        writer.record_llm_call(MARK, None, "model-b", "provider-b", tokens_in=i)
        writer.record_tool_call(MARK, None, "fault-tool", latency_ms=i)
    writer.flush()


PATHS = [
    Scenario("record_llm_call", "telemetry.db", _telemetry_prepare, _record_llm_call,
             _llm_calls_observe, open=_telemetry_store),
    Scenario("record_tool_call", "telemetry.db", _tool_prepare, _record_tool_call,
             _tool_calls_observe, open=_telemetry_store),
    # A failed flush raises StoreIOError and keeps its calls queued; close() (faults off)
    # then writes them once, so the rerun's flush adds exactly one more unit.
    Scenario("buffered_flush", "telemetry.db", _tool_prepare, _buffered_flush,
             _buffered_observe, open=_Buffered),
]
