"""Cold start of a SQLite process (issue 14): the telemetry store's import, open and writes
load no PostgreSQL module and no Alembic, and the statements PostgreSQL runs are still
built (lazily) with the bind order the hot paths rely on."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from hermes_data.migrate import runner as migrate

from ..conftest import REPO

_FORBIDDEN = ("sqlalchemy.dialects.postgresql", "psycopg", "asyncpg", "alembic")

_PROBE = """
import json, sys
from hermes_data.telemetry import (BufferedWriter, TelemetryStore, record_llm_call,
                                   record_tool_call, start_run, end_run)
from hermes_data import migrate
path = sys.argv[1]
with TelemetryStore(path) as store:
    start_run(store, "s1", platform="cli")
    record_llm_call(store, "s1", None, "m", "p", tokens_in=3)
    record_tool_call(store, "s1", None, "grep", True, 4)
    with BufferedWriter(store) as w:
        w.record_llm_call("s1", None, "m", "p", tokens_in=1)
    end_run(store, "s1", "completed")
assert migrate.upgrade("telemetry", path).up_to_date
migrate.status("telemetry", path)
print(json.dumps(sorted(sys.modules)))
"""


@pytest.mark.parametrize("existing", [False, True], ids=["missing-file", "settled-file"])
def test_sqlite_telemetry_paths_import_no_postgresql_and_no_alembic(tmp_path, existing):
    path = tmp_path / "telemetry.db"
    if existing:
        migrate.upgrade("telemetry", path)
    out = subprocess.run([sys.executable, "-c", _PROBE, str(path)], capture_output=True,
                         text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stderr
    loaded = json.loads(out.stdout)
    bad = [m for m in loaded if any(m == f or m.startswith(f + ".") for f in _FORBIDDEN)
           or "psycopg" in m]
    assert bad == []
    # Writes never pay for the read module or the read API's row dataclasses.
    assert "hermes_data.telemetry.reads" not in loaded
    assert "hermes_data.telemetry.types" not in loaded


def test_postgresql_statements_keep_the_hot_bind_order():
    from hermes_data.telemetry import writes

    assert len(writes.HOT_BIND_ORDERS) == 5
    for prepared, cols in writes.HOT_BIND_ORDERS:
        assert prepared.order == cols
        assert prepared.pg.order == cols, prepared.name
        assert "ON CONFLICT" in prepared.pg.sql or "ON CONFLICT" not in prepared.sql
