"""The telemetry history on a real PostgreSQL server: same revisions, same lock discipline."""

from __future__ import annotations

import subprocess
import sys

import pytest
import sqlalchemy as sa
from alembic import command
from sqlalchemy import event
from sqlalchemy.engine import Engine

from hermes_data.migrate import runner as migrate
from hermes_data.errors import ForwardOnlyError

from ..conftest import REPO, run_cli
from .shapes import EXPECTED

pytestmark = pytest.mark.journal_independent("PostgreSQL only")


def _versions(url):
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            ledger = [r[0] for r in conn.exec_driver_sql("SELECT version FROM schema_version ORDER BY version")]
            alembic = conn.exec_driver_sql("SELECT version_num FROM alembic_version").fetchall()
            return ledger, alembic
    finally:
        engine.dispose()


def test_fresh_upgrade_on_postgres_matches_the_head(pg_url):
    report = migrate.upgrade("telemetry", pg_url)
    assert report.applied == [f"v{n:02d}" for n in range(1, 19)]
    assert migrate.check("telemetry", pg_url) == []
    engine = sa.create_engine(pg_url)
    with engine.connect() as conn:
        insp = sa.inspect(conn)
        cols = {c["name"]: c for c in insp.get_columns("llm_calls")}
        assert [c["name"] for c in insp.get_columns("llm_calls")] == EXPECTED["v18"]["tables"]["llm_calls"]
        assert isinstance(cols["tokens_in"]["type"], sa.BigInteger)
        assert isinstance(cols["cost_usd"]["type"], sa.Float)  # DOUBLE PRECISION
        named = {ix["name"] for t in insp.get_table_names() for ix in insp.get_indexes(t)}
        assert EXPECTED["v18"]["indexes"] <= named
    engine.dispose()
    again = migrate.upgrade("telemetry", pg_url)
    assert again.up_to_date and again.applied == []


def test_failed_step_on_postgres_changes_nothing(pg_url):
    migrate.upgrade("telemetry", pg_url, "v06")

    def fail(conn, cursor, statement, parameters, context, executemany):
        if "provider_assumed_calls" in statement:
            raise RuntimeError("injected failure")

    event.listen(Engine, "before_cursor_execute", fail)
    try:
        with pytest.raises(RuntimeError, match="injected"):
            migrate.upgrade("telemetry", pg_url)
    finally:
        event.remove(Engine, "before_cursor_execute", fail)
    assert _versions(pg_url) == ([1, 2, 3, 4, 5, 6], [("v06",)])
    engine = sa.create_engine(pg_url)
    with engine.connect() as conn:
        assert "provider_assumed" not in {c["name"] for c in sa.inspect(conn).get_columns("llm_calls")}
    engine.dispose()
    assert migrate.upgrade("telemetry", pg_url).after_revision == "v18"


def test_downgrade_refused_on_postgres(pg_url):
    migrate.upgrade("telemetry", pg_url)
    with pytest.raises(ForwardOnlyError):
        command.downgrade(migrate.alembic_config("telemetry", pg_url), "v17")
    assert _versions(pg_url)[1] == [("v18",)]


def test_concurrent_upgrades_serialize_on_the_advisory_lock(pg_url):
    procs = [subprocess.Popen([sys.executable, "-m", "hermes_data.cli", "upgrade", "--store", "telemetry",
                               "--url", pg_url], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(8)]
    results = [p.communicate(timeout=180) + (p.returncode,) for p in procs]
    assert all(rc == 0 for _, _, rc in results), [err for _, err, _ in results]
    assert _versions(pg_url) == (list(range(1, 19)), [("v18",)])


def test_check_on_postgres_names_a_dropped_index(pg_url):
    assert run_cli("upgrade", "--store", "telemetry", "--url", pg_url).returncode == 0
    engine = sa.create_engine(pg_url)
    with engine.begin() as conn:
        conn.exec_driver_sql("DROP INDEX idx_llm_turn")
    engine.dispose()
    bad = run_cli("check", "--store", "telemetry", "--url", pg_url)
    assert bad.returncode == 1 and "idx_llm_turn" in bad.stdout


def test_non_byte_order_collation_is_warned_about(pg_url):
    """Timestamps are ISO text compared as text: a database whose collation is not byte order
    is upgraded, but the report (and doctor) say so with the fix."""
    import uuid

    from hermes_data.cli.doctor import doctor

    from ..conftest import PG_ADMIN_URL

    assert migrate.upgrade("telemetry", pg_url).warnings == []  # the test server is C.UTF-8
    name = f"hd_coll_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        # An ICU default collation (this server has no libc locales besides C).
        conn.exec_driver_sql(f"CREATE DATABASE \"{name}\" TEMPLATE template0 "
                             "LOCALE_PROVIDER icu ICU_LOCALE 'en-US'")
    url = sa.engine.make_url(pg_url).set(database=name).render_as_string(hide_password=False)
    try:
        report = migrate.upgrade("telemetry", url)
        assert report.warnings and "not byte order" in report.warnings[0]
        assert any("LC_COLLATE" in w for w in doctor("telemetry", url).warnings)
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()
