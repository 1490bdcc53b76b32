"""Every historical upstream session-store shape adopts (issue 13): the state.db files written
by early and middle upstream versions (schema v1, v4, v10, v14, v18 — v1–v6 have no
state_meta) upgrade in place, lose nothing, and then serve the core operations."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3

import pytest

from hermes_data.migrate import runner as migrate
from hermes_data.sessions.store import SessionStore

from tests.conftest import FIXTURES
from tests.sessions.conftest import table_digest

pytestmark = pytest.mark.sqlite_only("upstream state.db files are SQLite files")

HISTORY = FIXTURES / "legacy-sessions-history"
MANIFEST = json.loads((HISTORY / "manifest.json").read_text())["files"]


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_every_upstream_version_adopts_losslessly(tmp_path, name):
    entry = MANIFEST[name]
    path = tmp_path / "state.db"
    shutil.copyfile(HISTORY / name, path)
    os.chmod(path, 0o600)
    report = migrate.upgrade("sessions", str(path))
    assert f"schema_version {entry['version']}" in (report.adopted_from or "")
    con = sqlite3.connect(path)
    try:
        for table, info in entry["tables"].items():
            if table == "state_meta":
                continue  # gains the generation token; checked below
            digest, rows = table_digest(con, table, info["columns"])
            assert (rows, digest) == (info["rows"], info["sha256"]), f"{table} changed"
        names = {(r[0], r[1]) for r in con.execute("SELECT type, name FROM sqlite_master")}
        for obj in entry["objects"]:
            assert (obj["type"], obj["name"]) in names, obj  # nothing dropped
    finally:
        con.close()
    with SessionStore(path) as store:
        assert store.open_repairs == []  # the upgrade left it settled
        n = entry["tables"]["sessions"]["rows"]
        assert store.session_count_ge(n) and not store.session_count_ge(n + 1)
        sid = store.list_sessions(limit=1)[0].id
        assert store.message_count(sid, include_inactive=True) >= 0
        assert store.search_messages("gateway")
        store.create_session("new-after-adoption", "cli")
        store.append_message("new-after-adoption", "user", "written after adoption")
        assert store.search_messages("adoption")[0].session_id == "new-after-adoption"
