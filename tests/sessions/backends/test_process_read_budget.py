"""The 24-per-process read-connection cap across several files (spec §8.7, P-14)."""

from __future__ import annotations

import threading
import time

import pytest

from hermes_data.engine import SqliteSettings
from hermes_data.sessions.storage import handle_guards as guards
from hermes_data.sessions.store import SessionStore

pytestmark = pytest.mark.sqlite_only("per-process mode=ro read pool")

WAL = SqliteSettings(busy_timeout_ms=1000, journal_mode="wal")


def test_process_cap_holds_across_files_and_misses_fall_back_to_the_writer(tmp_path):
    budget = guards.PROCESS_BUDGET
    used_before = budget.used
    budget.peak = used_before
    denied_before = budget.denied
    stores = [SessionStore(tmp_path / f"s{i}.db", settings=WAL) for i in range(4)]
    try:
        for s in stores:
            s.create_session("a", "cli")
        per_store = 10  # 40 concurrent reads over 4 files: > 24, each file <= 8 readers
        errors: list[BaseException] = []
        on_reader: list[bool] = []
        held = threading.Condition()
        active = [0]

        def reader(s: SessionStore) -> None:
            try:
                def slow(conn):
                    pooled = conn.connection.driver_connection is not s.backend._raw
                    on_reader.append(pooled)
                    if pooled:  # hold the reader until the process cap is reached (or 10 s)
                        with held:
                            active[0] += 1
                            held.notify_all()
                            held.wait_for(lambda: active[0] >= guards.PROCESS_READ_BUDGET,
                                          timeout=10)
                    return conn.exec_driver_sql("SELECT id FROM sessions").scalar()
                assert s.backend.read(slow) == "a"
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)

        threads = [threading.Thread(target=reader, args=(s,)) for s in stores
                   for _ in range(per_store)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        assert budget.peak - used_before <= guards.PROCESS_READ_BUDGET
        assert all(guards.path_budget(s.path).peak <= guards.PATH_READ_BUDGET for s in stores)
        # 4 files x 8 would be 32 readers: the process cap, not the per-file one, bound them.
        assert budget.peak == guards.PROCESS_READ_BUDGET, budget.peak
        assert budget.denied > denied_before
        assert on_reader.count(False) > 0  # some reads were served by a writer, no error
    finally:
        for s in stores:
            s.close()
    assert budget.used == used_before  # every permit returned at close
