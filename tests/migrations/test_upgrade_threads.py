"""Many threads of one process upgrading at once (cron jobs starting together): Alembic's
context is module-global, so the in-process lock must cover the whole command (issue 13)."""

from __future__ import annotations

import threading

import pytest

from hermes_data.migrate import runner as migrate


@pytest.mark.parametrize("store", ["telemetry", "sessions"])
def test_five_threads_upgrade_one_fresh_file(tmp_path, store):
    path = tmp_path / f"{store}.db"
    errors: list[BaseException] = []
    start = threading.Barrier(5)

    def run() -> None:
        try:
            start.wait()
            migrate.upgrade(store, str(path))
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == []
    st = migrate.status(store, str(path))
    assert st.revision == st.head == migrate.head_revision(store)
