"""A SQLite session store never imports PostgreSQL code (issue 14), and the partial indexes
still get their predicates on PostgreSQL (declared once, filled in when the DDL compiles)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from sqlalchemy.schema import CreateIndex

from tests.conftest import REPO

_FORBIDDEN = ("sqlalchemy.dialects.postgresql", "psycopg", "asyncpg")

_PROBE = """
import json, sys
from hermes_data.sessions import SessionStore
with SessionStore(sys.argv[1]) as store:
    store.create_session("s1", "cli")
    store.append_message("s1", "user", "hello partial indexes")
    store.append_messages_batch("s1", [{"role": "assistant", "content": "hello again"}])
    assert store.search_messages("hello"), "search found nothing"
    store.get_messages("s1")
print(json.dumps(sorted(sys.modules)))
"""


@pytest.mark.parametrize("runs", [1, 2], ids=["missing-file", "settled-file"])
def test_sqlite_session_store_imports_no_postgresql_module(tmp_path, runs):
    path = tmp_path / "state.db"
    for _ in range(runs):  # the second run opens the settled file the first one made
        out = subprocess.run([sys.executable, "-c", _PROBE, str(path)], capture_output=True,
                             text=True, timeout=120, cwd=REPO)
        assert out.returncode == 0, out.stderr
    loaded = json.loads(out.stdout)
    assert "hermes_data.sessions.schema" in loaded  # the probe did load the metadata
    bad = [m for m in loaded if any(m == f or m.startswith(f + ".") for f in _FORBIDDEN)]
    assert bad == []


def test_partial_index_predicates_reach_postgresql_ddl():
    from sqlalchemy.dialects import postgresql, sqlite

    from hermes_data.sessions.schema import metadata

    partial = {}
    for table in metadata.sorted_tables:
        for index in table.indexes:
            lite = str(CreateIndex(index).compile(dialect=sqlite.dialect()))
            if " WHERE " in lite:
                partial[index.name] = (lite, str(CreateIndex(index).compile(
                    dialect=postgresql.dialect())))
    assert {"idx_sessions_title_unique", "idx_messages_active_null"} <= set(partial)
    for name, (lite, pg) in partial.items():
        pg_where, lite_where = pg.split(" WHERE ", 1)[1], lite.split(" WHERE ", 1)[1]
        if name == "idx_messages_display_page":  # its own PostgreSQL predicate (schema.py)
            assert pg_where == f"display_order IS NOT NULL AND ({lite_where})"
        else:
            assert pg_where == lite_where, name
