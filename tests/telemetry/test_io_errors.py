"""Storage failures of telemetry writes reach the caller as one typed error naming the file
(issue 31; docs/telemetry-api.md "Errors a write can raise").

A real process whose file-size limit (``RLIMIT_FSIZE``) stops the database from growing: every
write that needs a new page fails in the kernel (``EFBIG``) for as long as the limit holds —
a persistent fault, where the fault matrix (tests/faults) injects one at a time.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from hermes_data.errors import StoreFullError, StoreIOError, store_io_error

from tests.conftest import REPO

pytestmark = pytest.mark.journal_independent("the fault is in the kernel, whichever journal")

_PRELUDE = """
import json, os, resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
from hermes_data.telemetry import TelemetryStore, BufferedWriter, record_llm_call, record_tool_call

def limit(on):
    soft = os.path.getsize(DB) if on else resource.RLIM_INFINITY
    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, resource.RLIM_INFINITY))

def rows(store, sid):
    return store.connection().execute(
        "SELECT count(*) FROM llm_calls WHERE session_id = ?", (sid,)).fetchone()[0]
"""


def _run(tmp_path, body: str) -> dict:
    db = tmp_path / "telemetry.db"
    code = f"DB = {str(db)!r}\n" + _PRELUDE + textwrap.dedent(body)
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_write_the_storage_fails_raises_store_io_error_and_the_next_one_succeeds(tmp_path):
    res = _run(tmp_path, """
        store = TelemetryStore(DB)
        record_llm_call(store, "before", None, "m", "p")
        limit(True)
        errors = []
        for i in range(300):  # until the file must grow
            try:
                record_llm_call(store, "big", None, "m" * 2000, "p", tokens_in=i)
            except Exception as exc:
                errors.append((type(exc).__name__, str(exc), isinstance(exc, OSError)))
                break
        limit(False)
        record_tool_call(store, "after", None, "bash")  # the same connection, usable again
        record_llm_call(store, "after", None, "m", "p")
        print(json.dumps({"errors": errors, "before": rows(store, "before"),
                          "after": rows(store, "after"),
                          "integrity": store.connection().execute(
                              "PRAGMA integrity_check").fetchone()[0]}))
    """)
    [(kind, message, is_oserror)] = res["errors"]
    assert kind in ("StoreIOError", "StoreFullError") and is_oserror
    assert str(tmp_path / "telemetry.db") in message and "llm_calls" in message
    assert (res["before"], res["after"], res["integrity"]) == (1, 1, "ok")


def test_a_failed_buffered_flush_raises_and_keeps_its_calls_for_the_next_flush(tmp_path):
    res = _run(tmp_path, """
        store = TelemetryStore(DB)
        writer = BufferedWriter(store, max_delay=0.01)
        writer.flush()
        limit(True)
        for i in range(200):
            writer.record_llm_call("buffered", None, "m" * 2000, "p", tokens_in=i)
        try:
            writer.flush()
            raised = None
        except Exception as exc:
            raised = (type(exc).__name__, str(exc))
        pending, failed, landed = writer.pending, writer.failed, rows(store, "buffered")
        limit(False)
        writer.flush()
        writer.close()
        print(json.dumps({"raised": raised, "pending": pending, "failed": failed,
                          "landed_while_failing": landed, "landed": rows(store, "buffered"),
                          "failed_after": writer.failed}))
    """)
    assert res["raised"] is not None, "the failed flush reported success"
    assert res["raised"][0] in ("StoreIOError", "StoreFullError")
    assert str(tmp_path / "telemetry.db") in res["raised"][1]
    # Kept, not dropped; all or nothing; then written exactly once.
    assert res["failed"] == 0 and res["pending"] >= 200 and res["landed_while_failing"] == 0
    assert res["landed"] == 200 and res["failed_after"] == 0


def test_close_drops_what_the_storage_still_refuses_and_says_so(tmp_path):
    res = _run(tmp_path, """
        store = TelemetryStore(DB)
        writer = BufferedWriter(store, max_delay=0.01)
        writer.flush()
        limit(True)
        for i in range(200):
            writer.record_llm_call("buffered", None, "m" * 2000, "p", tokens_in=i)
        try:
            writer.close()
            raised = None
        except Exception as exc:
            raised = type(exc).__name__
        limit(False)
        print(json.dumps({"raised": raised, "failed": writer.failed,
                          "landed": rows(store, "buffered")}))
    """)
    assert res["raised"] in ("StoreIOError", "StoreFullError")
    assert (res["failed"], res["landed"]) == (200, 0)


def _driver_error(message: str, code: int) -> sqlite3.OperationalError:
    exc = sqlite3.OperationalError(message)
    exc.sqlite_errorcode = code  # what the driver sets on a failed step
    return exc


def test_the_classifier_uses_result_codes_and_keeps_the_first_driver_error(tmp_path):
    db = str(tmp_path / "telemetry.db")
    full = store_io_error(_driver_error("database or disk is full", 13), db, "w")
    assert isinstance(full, StoreFullError) and db in str(full)
    io = _driver_error("disk I/O error", 778)  # SQLITE_IOERR_WRITE: extended code
    assert type(store_io_error(io, db, "w")) is StoreIOError
    # A lock conflict is never I/O (the busy-retry keeps it); nor is a constraint.
    assert store_io_error(_driver_error("database is locked", 5), db, "w") is None
    assert store_io_error(sqlite3.IntegrityError("UNIQUE constraint failed"), db, "w") is None
    # SQLite's complaint after its automatic rollback stands for the I/O error before it.
    try:
        try:
            raise io
        except sqlite3.Error:
            raise _driver_error("cannot commit - no transaction is active", 1)
    except sqlite3.Error as secondary:
        err = store_io_error(secondary, db, "w")
    assert err is not None and err.orig is io
    # A read-only probe: "unable to open" is a path problem its caller words, not I/O.
    assert store_io_error(_driver_error("unable to open database file", 14), db, "r",
                          writing=False) is None
