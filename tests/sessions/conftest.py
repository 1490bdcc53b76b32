"""Session-store test support: real SQLite files under tmp_path, fixture copies, digests."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from hermes_data.sessions.store import SessionStore

from ..conftest import FIXTURES

LEGACY = FIXTURES / "legacy-sessions"
LEGACY_DB = LEGACY / "state_fork_v21.db"


@pytest.fixture
def store(tmp_path):
    """A fresh store on a real file."""
    with SessionStore(tmp_path / "state.db") as s:
        yield s


@pytest.fixture
def legacy_copy(tmp_path) -> Path:
    """A private copy of the upstream schema-21 state.db (the original is never opened)."""
    dest = tmp_path / "legacy" / "state.db"
    dest.parent.mkdir()
    shutil.copyfile(LEGACY_DB, dest)
    os.chmod(dest, 0o600)
    return dest


def manifest() -> dict:
    return json.loads((LEGACY / "manifest.json").read_text())


def _value(v):
    if isinstance(v, float):
        return ["r", repr(v)]
    if isinstance(v, bytes):
        return ["b", v.hex()]
    return v


def table_digest(con: sqlite3.Connection, table: str, columns: list[str]) -> tuple[str, int]:
    """The manifest's canonical dump of ``table`` projected onto ``columns``."""
    cols = sorted(columns)
    select = ", ".join(f'"{c}"' for c in cols)
    rows = sorted(json.dumps([_value(v) for v in row], ensure_ascii=False, separators=(",", ":"))
                  for row in con.execute(f'SELECT {select} FROM "{table}"'))
    body = f"table:{table}\ncols:{json.dumps(cols)}\n" + "\n".join(rows)
    return hashlib.sha256(body.encode("utf-8")).hexdigest(), len(rows)


def make_chain(store: SessionStore, n: int, prefix: str = "seg") -> list[str]:
    """A compression chain of ``n`` segments written directly (fast), root first."""
    ids = [f"{prefix}{i:04d}" for i in range(n)]
    rows = []
    for i, sid in enumerate(ids):
        rows.append((sid, "cli", 1_700_000_000.0 + i, ids[i - 1] if i else None,
                     "compression" if i < n - 1 else None,
                     1_700_000_000.5 + i if i < n - 1 else None))
    with store.engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO sessions (id, source, started_at, parent_session_id, end_reason, ended_at) "
            "VALUES (?, ?, ?, ?, ?, ?)", rows)
    return ids
