"""Helpers of the coordination tests (spec sessions-ext-coordination.md §4)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def where(store) -> str:
    """What a worker process opens: the SQLite path or the PostgreSQL URL."""
    if store.backend.dialect == "sqlite":
        return str(store.path)
    return store.url.render_as_string(hide_password=False)


def worker(*args: str) -> subprocess.Popen:
    """Start ``tests.sessions.coordination.coord_worker`` with ``args`` (stdout piped, line-buffered)."""
    return subprocess.Popen([sys.executable, "-m", "tests.sessions.coordination.coord_worker", *args],
                            cwd=str(REPO), stdout=subprocess.PIPE, text=True,
                            env={**os.environ})


def server_now(store) -> float:
    """The guard clock: PostgreSQL's server time, else the store's wall clock."""
    if store.backend.dialect == "postgresql":
        with store.engine.connect() as c:
            return float(c.exec_driver_sql(
                "SELECT EXTRACT(EPOCH FROM clock_timestamp())::float8").scalar())
    return float(store.wall())


def put_guard(store, table: str, key: str, holder: str, expires_at: float,
              acquired_at: float = 1.0) -> None:
    """Write a guard row directly (replacing any row of the key)."""
    col = "session_id" if table == "compression_locks" else "conversation_id"
    with store.engine.begin() as c:
        c.exec_driver_sql(f"DELETE FROM {table} WHERE {col} = ?", (key,))
        c.exec_driver_sql(f"INSERT INTO {table} ({col}, holder, acquired_at, expires_at) "
                          "VALUES (?, ?, ?, ?)", (key, holder, acquired_at, expires_at))


def guard_row(store, table: str, key: str):
    """``(holder, expires_at)`` of a guard row, or None."""
    col = "session_id" if table == "compression_locks" else "conversation_id"
    with store.engine.connect() as c:
        row = c.exec_driver_sql(f"SELECT holder, expires_at FROM {table} WHERE {col} = ?",
                                (key,)).first()
    return None if row is None else (row[0], float(row[1]))


def chain(store, *ids: str, source: str = "cli") -> None:
    """A compression chain ``ids[0] → … → ids[-1]`` (every segment but the tip ended)."""
    prev = None
    for i, sid in enumerate(ids):
        store.create_session(sid, source, parent_session_id=prev)
        if i < len(ids) - 1:
            store.end_session(sid, "compression")
        prev = sid


def sql(store, statement: str, params: tuple = ()) -> list:
    """Run one ad-hoc statement on the store's engine (committed); rows if any."""
    with store.engine.begin() as c:
        res = c.exec_driver_sql(statement, params)
        return list(res.fetchall()) if res.returns_rows else []
