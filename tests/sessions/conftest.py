"""Session-store test support: real SQLite files under tmp_path, fixture copies, digests."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from hermes_data.sessions.schema import TELEGRAM_TABLES, metadata
from hermes_data.sessions.store import SessionStore

from tests.conftest import FIXTURES, scratch_store_database, truncate_tables

LEGACY = FIXTURES / "legacy-sessions"
LEGACY_DB = LEGACY / "state_fork_v21.db"


BACKENDS = ("sqlite", "postgresql")
_TABLES = ", ".join((*TELEGRAM_TABLES, *(t.name for t in reversed(metadata.sorted_tables))))


@pytest.fixture(scope="session")
def pg_session_url():
    """One PostgreSQL database for the whole session, upgraded to head once; every test
    starts from ``TRUNCATE … RESTART IDENTITY`` of the store's tables."""
    with scratch_store_database("sessions", "hd_ses") as url:
        yield url


def _truncate(url: str) -> None:
    truncate_tables(url, _TABLES)


def delete_store_rows(engine) -> None:
    """Empty the store's tables with ``DELETE`` (children first) through ``engine``: for the
    many resets of a property test, ten times faster than ``TRUNCATE`` on a near-empty
    database; identities keep counting (nothing may depend on their values)."""
    with engine.begin() as conn:
        for table in _TABLES.split(", "):
            conn.exec_driver_sql(f"DELETE FROM {table}")


def module_target(request, tmp_path_factory, tag: str) -> Path | str:
    """Where a module-scoped fixture parametrised over :data:`BACKENDS` opens its store: a
    ``state.db`` in a new ``tag`` directory, or the session's PostgreSQL database emptied."""
    if request.param == "sqlite":
        return tmp_path_factory.mktemp(tag) / "state.db"
    url = request.getfixturevalue("pg_session_url")
    _truncate(url)
    return url


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    """The backend under test (``sqlite`` or ``postgresql``)."""
    return request.param


def pytest_configure(config) -> None:
    config.addinivalue_line(
        "markers", "sqlite_only(reason): the test checks SQLite-specific behaviour; its "
        "PostgreSQL run is skipped with that reason")


def _pg_skip_reason(request) -> str | None:
    marker = request.node.get_closest_marker("sqlite_only")
    if marker is None:
        return None
    return f"SQLite-specific: {marker.args[0] if marker.args else 'SQLite only'}"


@pytest.fixture
def store(backend, tmp_path, request):
    """A fresh store: a real SQLite file, or the emptied session PostgreSQL database."""
    if backend == "postgresql":
        reason = _pg_skip_reason(request)
        if reason:
            pytest.skip(reason)
    if backend == "sqlite":
        with SessionStore(tmp_path / "state.db") as s:
            yield s
        return
    url = request.getfixturevalue("pg_session_url")
    _truncate(url)
    with SessionStore(url) as s:
        qmark_for_tests(s)
        yield s


def qmark_for_tests(store: SessionStore) -> None:
    """Let the tests' own ad-hoc driver SQL (written with ``?``) run on a PostgreSQL store's
    engine: rendered to psycopg's ``%s`` by the dialect's own renderer. The library never
    relies on this: its statements are rendered once per dialect in ``sessions/sql``."""
    from sqlalchemy import event

    render = store.backend.sql.render

    def rewrite(conn, cursor, statement, parameters, context, executemany):
        if context is not None and context.compiled is None and "?" in statement \
                and "%s" not in statement:
            statement = render(statement)
        return statement, parameters

    event.listen(store.engine, "before_cursor_execute", rewrite, retval=True)


@pytest.fixture
def sqlite_store(tmp_path):
    """A SQLite store, for tests of SQLite-only behaviour."""
    with SessionStore(tmp_path / "state.db") as s:
        yield s


@pytest.fixture
def pg_store(pg_session_url):
    """A PostgreSQL store, for the PostgreSQL equivalents of SQLite-only tests."""
    _truncate(pg_session_url)
    with SessionStore(pg_session_url) as s:
        qmark_for_tests(s)
        yield s


def sqlite_only(store, reason: str) -> None:
    """Skip the PostgreSQL run of a test that checks SQLite-specific behaviour."""
    if store.engine.dialect.name != "sqlite":
        pytest.skip(f"SQLite-specific: {reason}")


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
