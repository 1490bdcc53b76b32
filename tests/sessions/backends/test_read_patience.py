"""Reads wait with patience like writes (issue 13): in a rollback-journal mode a sibling that
holds the file (committing, VACUUM, prune) blocks readers; a read retries, and past its
budget raises DatabaseBusyError saying the database is healthy — never a raw driver error.

Rollback-journal only: in WAL a writer never blocks readers, so these tests force DELETE."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest

from hermes_data.engine import SqliteSettings
from hermes_data.errors import DatabaseBusyError
from hermes_data.sessions.backends import sqlite as sqlite_backend
from hermes_data.sessions.store import SessionStore

pytestmark = pytest.mark.sqlite_only("rollback-journal reader blocking is a SQLite file fact")

DELETE = SqliteSettings(busy_timeout_ms=1000, journal_mode="delete")


def _hold_exclusive(path, seconds: float) -> subprocess.Popen:
    """A real sibling process holding BEGIN EXCLUSIVE on ``path`` for ``seconds``."""
    code = textwrap.dedent(f"""
        import sqlite3, sys, time
        con = sqlite3.connect(sys.argv[1], isolation_level=None)
        con.execute("BEGIN EXCLUSIVE")
        print("held", flush=True)
        time.sleep({seconds})
        con.execute("COMMIT")
    """)
    proc = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_read_waits_for_a_sibling_holding_the_file(tmp_path):
    path = tmp_path / "state.db"
    with SessionStore(path, settings=DELETE) as store:
        store.create_session("s", "cli")
        store.append_message("s", "user", "hello patience")
        assert store.journal_mode == "delete"
        proc = _hold_exclusive(path, 2.5)
        try:
            start = time.monotonic()
            assert store.get_session("s").source == "cli"  # waited past the 1 s busy timeout
            assert [h.session_id for h in store.search_messages("patience")] == ["s"]
            assert time.monotonic() - start > 1.0
        finally:
            proc.wait(timeout=30)


def test_past_its_patience_a_read_says_busy_and_healthy(tmp_path, monkeypatch):
    path = tmp_path / "state.db"
    with SessionStore(path, settings=DELETE) as store:
        store.create_session("s", "cli")
        monkeypatch.setattr(sqlite_backend, "READ_PATIENCE_S", 1.5)
        proc = _hold_exclusive(path, 6)
        try:
            with pytest.raises(DatabaseBusyError, match="healthy"):
                store.get_session("s")
        finally:
            proc.wait(timeout=30)
        assert store.get_session("s").source == "cli"  # and works again once released


def test_a_read_only_open_waits_too(tmp_path):
    path = tmp_path / "state.db"
    with SessionStore(path, settings=DELETE) as store:
        store.create_session("s", "cli")
    proc = _hold_exclusive(path, 2.5)
    try:
        with SessionStore(path, read_only=True) as ro:
            assert ro.get_session("s").source == "cli"
    finally:
        proc.wait(timeout=30)
