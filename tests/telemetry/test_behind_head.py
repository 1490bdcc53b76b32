"""Issue 33 (telemetry): a ``TelemetryStore`` on an existing file behind the head refused
nothing, and its first write failed with a raw ``OperationalError: table llm_calls has no
column named …``. It now refuses at its first connection — one ``StoreBehindError`` naming
the file and ``hermes-data upgrade``, the file unchanged — and works once upgraded."""

from __future__ import annotations

import hashlib
import sqlite3

import pytest

from hermes_data.errors import StoreBehindError
from hermes_data.migrate import runner as migrate
from hermes_data.telemetry import TelemetryStore, record_llm_call
from hermes_data.telemetry.migration import HEAD_LEVEL, revision_for_level
from hermes_data.telemetry.schema import HEAD_REVISION

from tests.conftest import copy_fixture


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
