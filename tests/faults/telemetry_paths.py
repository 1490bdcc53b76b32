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


PATHS = [
    Scenario("record_llm_call", "telemetry.db", _telemetry_prepare, _record_llm_call,
             _llm_calls_observe, open=_telemetry_store),
]
