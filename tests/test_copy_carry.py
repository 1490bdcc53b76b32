"""``copy --store sessions`` carries what the head metadata does not declare (issue 12).

The shared legacy ``state.db`` (adopted) goes to PostgreSQL and back to a new SQLite file:
every column of every source table — upstream-only columns such as ``rewind_count``, tables
such as the keyless ``schema_version`` ledger, and the objects the head declares since
``s03_agent_turn`` (``api_call_count``, ``session_model_usage``) and ``s06_gateway``
(``handoff_state``, ``gateway_routing``, ``async_delegations``) — compares equal row for row.
What cannot be carried makes the copy refuse before it writes, naming it.
"""

from __future__ import annotations

import sqlite3

import pytest
import sqlalchemy as sa

from hermes_data.migrate import runner as migrate
from hermes_data.copy.transfer import CopyUncarriableError, copy_store
from hermes_data.sessions.storage.adoption import ignore_table

from .conftest import copy_fixture, run_cli

#: Not carried, by design (README "copy"): Alembic's and SQLite's bookkeeping and the FTS index
#: (rebuilt by the target). Upstream's keyless ``schema_version`` ledger is carried.
NOT_CARRIED = {"alembic_version", "sqlite_sequence"}


def _tables(con: sqlite3.Connection) -> list[str]:
    names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    return sorted(n for n in names if n not in NOT_CARRIED and not ignore_table(n))


def _rows(con: sqlite3.Connection, table: str) -> tuple[list[str], list[dict]]:
    cols = [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]
    keys = [r[1] for r in sorted((r for r in con.execute(f'PRAGMA table_info("{table}")') if r[5]),
                                 key=lambda r: r[5])] or cols
    order = ", ".join(f'"{k}"' for k in keys)
    rows = con.execute(f'SELECT * FROM "{table}" ORDER BY {order}').fetchall()
    return cols, [dict(zip(cols, r)) for r in rows]


def test_adopted_state_db_to_postgresql_and_back_carries_every_column(tmp_path, pg_url):
    src = copy_fixture("legacy-sessions/state_fork_v21.db", tmp_path)
    migrate.upgrade("sessions", src)
    with sqlite3.connect(src) as con:
        upstream_ledger = [r[0] for r in con.execute("SELECT version FROM schema_version ORDER BY version")]
    assert upstream_ledger  # the fixture is an upstream file at schema_version 21
    report = copy_store(src, pg_url, store="sessions", batch=3)
    assert report.verified
    carried = "\n".join(report.carried)
    assert "table schema_version" in carried, carried
    # Declared by the head since s03_agent_turn (sessions-ext-agent §2.1-§2.2),
    # s04_coordination (coordination §2.1) and s06_gateway (gateway §2.1-§2.2): copied as head
    # columns and tables, not as extras.
    for name in ("api_call_count", "session_model_usage", "rewind_count",
                 "compression_failure_cooldown_until", "handoff_state", "gateway_routing",
                 "async_delegations"):
        assert name not in carried, carried
    assert {"session_model_usage", "sessions"} <= {t.table for t in report.tables}
    with sa.create_engine(pg_url).connect() as conn:
        assert conn.exec_driver_sql("SELECT COUNT(*) FROM session_model_usage").scalar() == 5
        assert conn.exec_driver_sql(
            "SELECT data_type FROM information_schema.columns WHERE table_name = 'sessions' "
            "AND column_name = 'api_call_count'").scalar() == "bigint"
        assert conn.exec_driver_sql(
            "SELECT data_type FROM information_schema.columns WHERE table_name = 'sessions' "
            "AND column_name = 'compression_failure_cooldown_until'").scalar() \
            == "double precision"
        # Upstream's ledger arrives under its server name; ``schema_version`` stays free for
        # the telemetry store sharing the database.
        assert [r[0] for r in conn.exec_driver_sql(
            "SELECT version FROM upstream_schema_version ORDER BY version")] == upstream_ledger
        assert not sa.inspect(conn).has_table("schema_version")
    back = tmp_path / "back" / "state.db"
    report_back = copy_store(pg_url, back, store="sessions", batch=4)
    assert report_back.verified
    a, b = sqlite3.connect(src), sqlite3.connect(back)
    try:
        tables = _tables(a)
        assert {"session_model_usage", "schema_version"} <= set(tables)
        assert set(tables) <= set(_tables(b))
        for table in tables:
            cols_a, rows_a = _rows(a, table)
            cols_b, rows_b = _rows(b, table)
            assert set(cols_a) <= set(cols_b), (table, set(cols_a) - set(cols_b))
            assert len(rows_a) == len(rows_b), table
            for ra, rb in zip(rows_a, rows_b):
                assert ra == {c: rb[c] for c in cols_a}, table
    finally:
        a.close()
        b.close()


def test_uncarriable_column_refuses_before_writing(tmp_path, pg_url):
    src = tmp_path / "state.db"
    migrate.upgrade("sessions", src)
    con = sqlite3.connect(src)
    con.execute("ALTER TABLE sessions ADD COLUMN upstream_count INTEGER")
    con.execute("INSERT INTO sessions (id, source, started_at, upstream_count) "
                "VALUES ('s1', 'cli', 1.0, 'many')")  # SQLite kept text in an INTEGER column
    con.commit()
    con.close()
    target = tmp_path / "target.db"
    with pytest.raises(CopyUncarriableError, match=r"sessions\.upstream_count: declared INTEGER "
                                                   r"but holds text"):
        copy_store(src, target, store="sessions")
    assert not target.exists()  # refused before the target was created
    cli = run_cli("copy", "--store", "sessions", "--from", str(src), "--to", pg_url)
    assert cli.returncode == 2 and "sessions.upstream_count" in cli.stderr
    with sa.create_engine(pg_url).connect() as conn:
        assert not sa.inspect(conn).has_table("sessions")


def test_both_stores_share_one_postgresql_database(tmp_path, pg_url):
    """The telemetry ledger and upstream's session-store ledger do not collide on a server."""
    sessions = copy_fixture("legacy-sessions/state_fork_v21.db", tmp_path)
    migrate.upgrade("sessions", sessions)
    telemetry = tmp_path / "telemetry.db"
    migrate.upgrade("telemetry", telemetry)
    assert copy_store(telemetry, pg_url, store="telemetry").verified
    assert copy_store(sessions, pg_url, store="sessions").verified
    with sa.create_engine(pg_url).connect() as conn:
        ledger = [r[0] for r in conn.exec_driver_sql("SELECT version FROM schema_version ORDER BY version")]
        assert ledger == list(range(1, 19))  # the telemetry store's, untouched
        assert conn.exec_driver_sql("SELECT MAX(version) FROM upstream_schema_version").scalar() == 21
    # Copied again into a fresh SQLite file, the upstream ledger gets its own name back.
    back = tmp_path / "back" / "state.db"
    report = copy_store(pg_url, back, store="sessions")
    assert report.verified
    with sqlite3.connect(back) as con:
        assert con.execute("SELECT MAX(version) FROM schema_version").fetchone()[0] == 21


def test_cli_names_what_it_carried(tmp_path):
    """The human report lists the carried columns and tables, not only the log's warning."""
    src = copy_fixture("legacy-sessions/state_fork_v21.db", tmp_path)
    migrate.upgrade("sessions", src)
    out = run_cli("copy", "--from", str(src), "--to", str(tmp_path / "copy" / "state.db"))
    assert out.returncode == 0, out.stderr
    carried = [line for line in out.stdout.splitlines() if "carried (created on the target" in line]
    # handoff_state is a head column since s06_gateway: not listed as carried.
    assert not any("sessions.handoff_state" in line for line in carried), out.stdout
    assert any("table schema_version" in line for line in carried), out.stdout
