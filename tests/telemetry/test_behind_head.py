"""Issue 33 (telemetry): a ``TelemetryStore`` on an existing file behind the head refused
nothing, and its first write failed with a raw ``OperationalError: table llm_calls has no
column named …``. It now refuses at its first connection — one ``StoreBehindError`` naming
the file and ``hermes-data upgrade``, the file unchanged — and works once upgraded."""

from __future__ import annotations

import hashlib
import sqlite3

import pytest

import hermes_data.telemetry as T
from hermes_data.errors import NotAHermesDatabaseError, StoreBehindError
from hermes_data.migrate import runner as migrate
from hermes_data.telemetry import TelemetryStore, record_llm_call
from hermes_data.telemetry.migration import HEAD_LEVEL, revision_for_level
from hermes_data.telemetry.schema import HEAD_REVISION

from tests.conftest import FIXTURES, copy_fixture

#: Every legacy telemetry file the fixtures carry (ledger v1 … v16 and the two damaged ones).
LEGACY_FILES = sorted(p.name for p in (FIXTURES / "legacy-telemetry").glob("*.db"))

#: The first operation a service runs on its store, by kind: the reads and writes that take
#: the store's fast paths (held connection, execute_pair) and its transactions (read_tx /
#: write_tx), and the buffered writer (whose writes run on a thread of its own).
FIRST_OPERATIONS = {
    "read get_run": lambda s: T.get_run(s, "s"),
    "read stats_summary": lambda s: T.stats_summary(s, 24),
    "read list_cron_job_ids": lambda s: T.list_cron_job_ids(s, "2026-01-01"),
    "write start_run": lambda s: T.start_run(s, "cron_job_20260101_120000", "m", "cron"),
    "write record_llm_call": lambda s: T.record_llm_call(s, "s", None, "m", "p", tokens_in=1),
    "write record_tool_call": lambda s: T.record_tool_call(s, "s", None, "bash"),
    "write end_run": lambda s: T.end_run(s, "s", "ok"),
    "write BufferedWriter": lambda s: T.BufferedWriter(s).close(),
}


def _files(directory) -> dict[str, str]:
    """Every file of ``directory`` (the store and any sidecar) with its digest."""
    return {p.name: _digest(p) for p in sorted(directory.iterdir())}


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_head_revision_is_the_newest_level():
    assert HEAD_REVISION == revision_for_level(HEAD_LEVEL)


@pytest.mark.parametrize("shape", ["legacy v8 file", "older revision"])
def test_a_store_behind_head_is_refused_until_upgraded(tmp_path, shape):
    path = copy_fixture("legacy-telemetry/telemetry_v8_7590260.db", tmp_path)
    if shape == "older revision":
        migrate.upgrade("telemetry", path)
        con = sqlite3.connect(path)
        con.execute("UPDATE alembic_version SET version_num = 'v17'")
        con.commit()
        con.close()
    before = _digest(path)
    store = TelemetryStore(path)
    try:
        with pytest.raises(StoreBehindError) as refused:
            record_llm_call(store, "s", None, "m", "p", tokens_in=1)
    finally:
        store.close()
    message = str(refused.value)
    assert str(path) in message and "hermes-data upgrade" in message
    assert ("v17" in message) == (shape == "older revision")
    assert _digest(path) == before
    if shape == "legacy v8 file":
        migrate.upgrade("telemetry", path)
        with TelemetryStore(path) as store:
            assert record_llm_call(store, "s", None, "m", "p", tokens_in=1) > 0


@pytest.mark.parametrize("operation", sorted(FIRST_OPERATIONS))
@pytest.mark.parametrize("legacy", LEGACY_FILES)
def test_the_first_operation_on_a_legacy_file_is_one_refusal(tmp_path, legacy, operation):
    """Every legacy telemetry file, every kind of first operation: one line naming the file
    and `hermes-data upgrade`, never a driver error; no byte of the file (or a sidecar)
    changes, and no sidecar appears."""
    path = copy_fixture(f"legacy-telemetry/{legacy}", tmp_path)
    before = _files(tmp_path)
    store = TelemetryStore(path)
    try:
        with pytest.raises(Exception) as refused:
            FIRST_OPERATIONS[operation](store)
        # Later operations of the other kind get the same refusal (checked once per store,
        # but never marked "at head" by a refusal).
        with pytest.raises(StoreBehindError):
            T.get_run(store, "s") if operation.startswith("write") else \
                T.record_llm_call(store, "s", None, "m", "p")
    finally:
        store.close()
    assert refused.type is StoreBehindError, refused.value
    message = str(refused.value)
    assert "\n" not in message
    assert str(path) in message and "hermes-data upgrade" in message
    assert "never upgraded" in message
    assert _files(tmp_path) == before


def test_a_buffered_writer_on_a_file_behind_is_refused_before_it_queues(tmp_path):
    """Before issue 33's fix the writer thread met the refusal, took it for a bad call and
    dropped every queued call (logged, `failed` counted) while `flush()` returned True."""
    path = copy_fixture("legacy-telemetry/telemetry_v16_7e028ef.db", tmp_path)
    with TelemetryStore(path) as store:
        with pytest.raises(StoreBehindError, match="hermes-data upgrade"):
            T.BufferedWriter(store)
        migrate.upgrade("telemetry", path)
    with TelemetryStore(path) as store:
        with T.BufferedWriter(store) as writer:
            writer.record_llm_call("s", None, "m", "p", tokens_in=3)
            assert writer.flush(timeout=30)
        assert T.get_run(store, "s").tokens_in == 3


def test_a_foreign_file_is_refused_unchanged_not_a_driver_error(tmp_path):
    path = tmp_path / "telemetry.db"
    path.write_bytes(bytes(range(256)) * 32)
    before = _files(tmp_path)
    with TelemetryStore(path) as store:
        for operation in (lambda: T.get_run(store, "s"), lambda: T.start_run(store, "s"),
                          lambda: T.BufferedWriter(store)):
            with pytest.raises(NotAHermesDatabaseError, match="not an SQLite database"):
                operation()
    assert _files(tmp_path) == before


@pytest.mark.parametrize("revision", [None, "v12", "v17"])
def test_a_postgresql_database_behind_head_is_refused(pg_url, revision):
    """PostgreSQL: an empty database or one at an older revision gave psycopg's raw
    UndefinedTable / UndefinedColumn at the first read or write."""
    if revision is not None:
        migrate.upgrade("telemetry", pg_url, revision)
    for operation in sorted(FIRST_OPERATIONS):
        with TelemetryStore(pg_url) as store:
            with pytest.raises(StoreBehindError) as refused:
                FIRST_OPERATIONS[operation](store)
        message = str(refused.value)
        assert "\n" not in message and "hermes-data upgrade" in message, operation
        assert (revision or "never upgraded") in message
    migrate.upgrade("telemetry", pg_url)
    with TelemetryStore(pg_url) as store:
        for operation in sorted(FIRST_OPERATIONS):
            FIRST_OPERATIONS[operation](store)
        assert T.get_run(store, "s").status == "ok"
