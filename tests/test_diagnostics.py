"""File facts and `hermes-data doctor`: real processes holding real files."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from hermes_data.migrate import runner as migrate
from hermes_data.cli.doctor import doctor, sqlite_build
from hermes_data.files import descriptor_budget, file_facts, file_holders, make_owner_only

from .conftest import REPO, run_cli

HOLDER = textwrap.dedent("""
    import sqlite3, sys
    con = sqlite3.connect(sys.argv[1], isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("CREATE TABLE IF NOT EXISTS t (x)")
    con.execute("INSERT INTO t VALUES (1)")
    con.execute("BEGIN")
    con.execute("SELECT count(*) FROM t").fetchall()
    print("holding", flush=True)
    sys.stdin.readline()
""")


@pytest.fixture
def holder(tmp_path):
    procs = []

    def start(path):
        proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(path)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "holding"
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def test_holders_include_a_sibling_process(tmp_path, holder):
    db = tmp_path / "t.db"
    proc = holder(db)
    found = file_holders(db)
    assert found is not None
    assert proc.pid in {h.pid for h in found if not h.deleted}


def test_deleted_wal_holder_is_a_doctor_problem(tmp_path, holder):
    db = tmp_path / "telemetry.db"
    migrate.upgrade("telemetry", db)
    proc = holder(db)
    assert os.path.exists(f"{db}-wal")
    os.unlink(f"{db}-wal")  # what a TRUNCATE-and-unlink from another process leaves behind
    found = file_holders(db)
    assert any(h.deleted and h.pid == proc.pid and h.path.endswith("-wal") for h in found)
    report = doctor("telemetry", db)
    assert any("deleted -wal/-shm" in p for p in report.problems)
    cli = run_cli("doctor", "--store", "telemetry", "--url", str(db), "--json")
    assert cli.returncode == 1
    assert "split WAL generation" in json.loads(cli.stdout)["telemetry"]["problems"][0]


def test_doctor_is_clean_on_a_fresh_store_and_names_permission_problems(tmp_path):
    db = tmp_path / "telemetry.db"
    assert run_cli("upgrade", "--store", "telemetry", "--url", str(db)).returncode == 0
    assert (db.stat().st_mode & 0o777) == 0o600  # upgrade made it owner-only
    ok = run_cli("doctor", "--store", "telemetry", "--url", str(db))
    assert ok.returncode == 0, ok.stdout
    assert "integrity_check: ok" in ok.stdout and "no problems found" in ok.stdout
    os.chmod(db, 0o644)
    bad = run_cli("doctor", "--store", "telemetry", "--url", str(db))
    assert bad.returncode == 1 and "chmod 600" in bad.stdout


def test_doctor_reports_drift_and_behind_revision(tmp_path):
    db = tmp_path / "telemetry.db"
    migrate.upgrade("telemetry", db, "v16")
    report = doctor("telemetry", db)
    assert any("behind the head" in p for p in report.problems)
    assert any("llm_call_errors" in p for p in report.problems)


def test_doctor_on_a_missing_store_warns_and_creates_nothing(tmp_path):
    db = tmp_path / "nowhere" / "telemetry.db"
    report = doctor("telemetry", db)
    assert not report.exists and report.problems == []
    assert not db.exists() and not db.parent.exists()


def test_chmod_by_path_keeps_this_process_locks(tmp_path):
    """make_owner_only works by path: a read transaction held here keeps blocking a sibling's
    BEGIN EXCLUSIVE. An open()+close() of the file would have dropped our lock."""
    db = tmp_path / "t.db"
    con = sqlite3.connect(db, isolation_level=None)
    con.execute("CREATE TABLE t (x)")
    con.execute("INSERT INTO t VALUES (1)")
    os.chmod(db, 0o644)
    con.execute("BEGIN")
    con.execute("SELECT * FROM t").fetchall()  # SHARED lock held by this process
    probe = textwrap.dedent("""
        import sqlite3, sys
        c = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=0.2)
        try:
            c.execute("BEGIN EXCLUSIVE")
            print("acquired")
        except sqlite3.OperationalError as e:
            print("blocked", e)
    """)
    try:
        assert make_owner_only(db) == [str(db)]
        out = subprocess.run([sys.executable, "-c", probe, str(db)], capture_output=True,
                             text=True, timeout=30).stdout
        assert out.startswith("blocked"), out
        assert (db.stat().st_mode & 0o777) == 0o600
    finally:
        con.execute("COMMIT")
        con.close()


def test_file_facts_and_budget(tmp_path):
    db = tmp_path / "t.db"
    assert file_facts(db).exists is False
    sqlite3.connect(db).execute("CREATE TABLE t (x)").connection.close()
    facts = file_facts(db)
    assert facts.exists and facts.sizes["db"] > 0
    budget = descriptor_budget()
    assert budget.open and budget.open > 0 and budget.headroom is not None
    build = sqlite_build()
    assert build.version == sqlite3.sqlite_version and build.fts5 in (True, False)
