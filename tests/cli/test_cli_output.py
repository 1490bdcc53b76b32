"""What the command line prints when things go right: readable text, one JSON shape, the
version, ``-v`` anywhere, and warnings that say how to act — once."""

from __future__ import annotations

import json
import re
import sqlite3
from importlib.metadata import version

import pytest

from hermes_data.migrate import runner as migrate

from tests.conftest import run_cli


#: What these tests count does not depend on the journal mode (see the fixture's docstring).
pytestmark = pytest.mark.usefixtures("default_journal_policy")


def test_version():
    proc = run_cli("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"hermes-data {version('hermes-data')}"


def test_verbose_is_accepted_after_the_command(tmp_path):
    db = tmp_path / "t.db"
    proc = run_cli("upgrade", "--store", "telemetry", "--url", str(db), "-v")
    assert proc.returncode == 0, proc.stderr
    assert "INFO" in proc.stderr  # -v turned logging on


@pytest.mark.parametrize("command", ["upgrade", "status", "check", "doctor"])
def test_json_is_one_object_keyed_by_store(tmp_path, command):
    env = {"HERMES_HOME": str(tmp_path)}
    assert run_cli("upgrade", env=env).returncode == 0
    proc = run_cli(command, "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert isinstance(data, dict) and set(data) == {"telemetry", "sessions"}
    single = json.loads(run_cli(command, "--store", "sessions", "--json", env=env).stdout)
    assert set(single) == {"sessions"}


def test_fresh_upgrade_is_not_a_permissions_repair_and_status_says_new_or_delete(tmp_path):
    db = tmp_path / "fresh.db"
    proc = run_cli("upgrade", "--store", "sessions", "--url", str(db))
    assert proc.returncode == 0, proc.stderr
    assert "repair" not in proc.stdout
    assert (db.stat().st_mode & 0o777) == 0o600  # still made owner-only
    status = run_cli("status", "--store", "sessions", "--url", str(db)).stdout
    assert "existing DELETE-mode file" not in status
    db.chmod(0o644)  # a real repair is still reported
    again = run_cli("upgrade", "--store", "sessions", "--url", str(db)).stdout
    assert "repair: permissions set to 0600" in again


def test_doctor_prints_no_python_reprs(tmp_path):
    env = {"HERMES_HOME": str(tmp_path)}
    run_cli("upgrade", env=env)
    for args in ((), ("--store", "sessions", "--url", str(tmp_path / "missing.db"))):
        out = run_cli("doctor", *args, env=env).stdout
        assert "None" not in out and "{" not in out and "[" not in out, out
        assert re.search(r"sizes: db [\d,]+ bytes", out) or "not created yet" in out


def test_check_names_an_expression_index_readably(tmp_path):
    db = tmp_path / "state.db"
    migrate.upgrade("sessions", db)
    con = sqlite3.connect(db)
    con.execute("DROP INDEX idx_sessions_effective_activity")
    con.commit()
    con.close()
    proc = run_cli("check", "--store", "sessions", "--url", str(db))
    assert proc.returncode == 1
    line = next(l for l in proc.stdout.splitlines() if "idx_sessions_effective_activity" in l)
    assert "None" not in line and "<expression>" in line, line


def test_vacuum_never_reports_a_negative_reclaim(tmp_path):
    from hermes_data.sessions.store import SessionStore

    db = tmp_path / "state.db"
    with SessionStore(db) as s:
        s.create_session("a", "cli")
        s.append_messages_batch("a", [{"role": "user", "content": f"m{i}"} for i in range(20)])
    proc = run_cli("vacuum", "--url", str(db))
    assert proc.returncode == 0, proc.stderr
    assert "reclaimed -" not in proc.stdout
    assert re.search(r"reclaimed [\d,]+ bytes|nothing to reclaim", proc.stdout), proc.stdout
    data = json.loads(run_cli("vacuum", "--url", str(db), "--json").stdout)
    assert set(data["sessions"]) >= {"before_bytes", "after_bytes"}


def test_export_has_no_json_flag():
    proc = run_cli("export", "x", "--json")
    assert proc.returncode == 2 and "unrecognized arguments: --json" in proc.stderr


def test_copy_infers_the_session_store_from_the_source(tmp_path):
    from hermes_data.sessions.store import SessionStore

    src = tmp_path / "state.db"
    with SessionStore(src) as s:
        s.create_session("abc", "cli")
        s.append_messages_batch("abc", [{"role": "user", "content": "hello"}])
    target = tmp_path / "copy.db"
    proc = run_cli("copy", "--from", str(src), "--to", str(target), "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert set(report) == {"sessions"} and report["sessions"]["verified"]
    with SessionStore(target) as s:
        assert [m.content for m in s.get_messages("abc")] == ["hello"]


def test_wal_reset_warning_once_per_process_and_says_how_to_act(tmp_path):
    """On a WAL-reset-vulnerable build an existing WAL file is kept in WAL with a warning:
    printed once per process per file (an upgrade opens the file several times), with the way
    out. Skipped on a SQLite build without the bug."""
    from hermes_data.engine import is_wal_reset_vulnerable, linked_sqlite_version

    if not is_wal_reset_vulnerable(linked_sqlite_version()):
        pytest.skip("this SQLite build does not have the WAL-reset bug")
    db = tmp_path / "state.db"
    migrate.upgrade("sessions", db)  # created in DELETE mode on this build…
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA journal_mode=WAL").fetchone() == ("wal",)  # …then made WAL
    con.close()
    # `search` only reads, through a read-only connection that applies no journal policy
    # (docs/cli.md "Reading a store without writing it"): it has nothing to warn about.
    for args, expected in ((("upgrade", "--store", "sessions"), 1),
                           (("status", "--store", "sessions"), 1), (("search", "hello"), 0)):
        proc = run_cli(*args, "--url", str(db))
        assert proc.returncode == 0, proc.stderr
        warnings = [l for l in proc.stderr.splitlines() if "WAL-reset" in l]
        assert len(warnings) == expected, proc.stderr
        if not expected:
            continue
        assert "HERMES_DATA_JOURNAL_MODE=delete" in warnings[0] and "3.51.3" in warnings[0]
