"""Reads served by the writer's own connection wait out a lock like every other read (issue 31,
found by the chaos soak): in a rollback-journal mode a sibling holding the file past the busy
timeout — a VACUUM, a long commit — made ``get_meta`` / ``list_meta_prefix`` raise a raw
``database is locked``, and ``optimize_fts`` took a busy index for a missing one and skipped
it. Rollback-journal mode only: WAL readers are never blocked by a writer."""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest

from hermes_data import SessionStore

HOLD_S = 1.6  # past the handle's busy timeout, well within the read patience


@pytest.fixture
def held(tmp_path, monkeypatch):
    """A store in DELETE mode and a function that holds its file exclusively for HOLD_S."""
    monkeypatch.setenv("HERMES_DATA_JOURNAL_MODE", "delete")
    path = tmp_path / "state.db"
    store = SessionStore(path)
    store.create_session("s", "cli")
    store.append_message("s", "user", "hello there")
    store.set_meta("team.alpha", "1")
    timers = []

    def hold() -> None:
        holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        holder.execute("BEGIN EXCLUSIVE")

        def release() -> None:
            holder.execute("COMMIT")
            holder.close()
        timer = threading.Timer(HOLD_S, release)
        timer.start()
        timers.append(timer)

    yield store, hold
    for timer in timers:
        timer.join()
    store.close()


@pytest.mark.parametrize("read", ["get_meta", "list_meta_prefix"])
def test_meta_reads_wait_for_a_lock_held_past_the_busy_timeout(held, read):
    store, hold = held
    hold()
    started = time.monotonic()
    if read == "get_meta":
        assert store.get_meta("team.alpha") == "1"
    else:
        assert store.list_meta_prefix("team.") == {"team.alpha": "1"}
    assert time.monotonic() - started >= 1.0  # it really met the lock, and waited


def test_optimize_fts_does_not_skip_an_index_it_found_busy(held):
    store, hold = held
    idle = store.optimize_fts()
    hold()
    busy = store.optimize_fts()
    assert busy == idle and busy  # the same indexes, none taken for absent
