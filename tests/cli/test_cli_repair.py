"""``hermes-data repair`` and ``doctor --repair`` (storage spec §3.3): a dry run by default
that prints the backup path it would write; ``--apply`` prints the one it wrote; ``doctor``
shows the ledger, the bundles and the last error."""

from __future__ import annotations

import json
import sqlite3
import re

import pytest

from hermes_data.sessions.storage.repair import backup as rb

from tests.conftest import run_cli
from tests.sessions.storage.repair_support import duplicate_schema_row, file_digest, legacy_copy

pytestmark = pytest.mark.journal_independent("repairs a copied legacy file")


@pytest.fixture
def dup(tmp_path):
    path = legacy_copy(tmp_path)
    duplicate_schema_row(path)
    return path


def test_dry_run_prints_the_backup_it_would_write_and_changes_nothing(dup):
    before = file_digest(dup)
    out = run_cli("repair", "--url", str(dup))
    assert out.returncode == 1, out.stderr
    assert re.search(rf"would write the backup {re.escape(str(dup))}\.malformed-backup-\d{{8}}_\d{{6}}",
                     out.stdout)
    assert "opens cleanly: no" in out.stdout and "dry run" in out.stdout
    assert file_digest(dup) == before and not rb.bundles(dup)


@pytest.mark.parametrize("command", [("repair",), ("doctor", "--repair", "--store", "sessions")])
def test_apply_repairs_and_prints_the_backup_it_wrote(dup, command):
    out = run_cli(*command, "--url", str(dup), "--apply")
    assert out.returncode == 0, out.stdout + out.stderr
    (bundle,) = rb.bundles(dup)
    assert f"backup written: {bundle}" in out.stdout and "repaired: dedup_schema" in out.stdout
    again = run_cli(*command, "--url", str(dup))
    assert again.returncode == 0 and "opens cleanly: yes" in again.stdout


def test_json_output(dup):
    out = run_cli("repair", "--url", str(dup), "--json")
    data = json.loads(out.stdout)["sessions"]
    assert data["dry_run"] and data["healthy"] is False and data["would_write"]
    out = run_cli("repair", "--url", str(dup), "--apply", "--json")
    data = json.loads(out.stdout)["sessions"]
    assert data["repaired"] and data["backup_path"] == str(rb.bundles(dup)[0])


def test_doctor_shows_ledger_bundles_and_last_error(tmp_path):
    path = legacy_copy(tmp_path)
    duplicate_schema_row(path, "messages", differ=True)  # not repairable: counted
    out = run_cli("repair", "--url", str(path), "--apply")
    assert out.returncode == 1 and "PROBLEM:" in out.stdout
    doc = run_cli("doctor", "--store", "sessions", "--url", str(path))
    assert "repair ledger: 1 failed attempt(s)" in doc.stdout
    assert "last repair error: every repair strategy failed" in doc.stdout
    assert f"repair backups: {rb.bundles(path)[0]}" in doc.stdout


def test_repair_refuses_postgresql():
    out = run_cli("repair", "--url", "postgresql+psycopg://127.0.0.1:5432/test")
    assert out.returncode == 2 and "SQLite" in out.stderr


def test_missing_file_is_nothing_to_repair(tmp_path):
    out = run_cli("repair", "--url", str(tmp_path / "none.db"))
    assert out.returncode == 0 and "nothing to repair" in out.stdout
    assert not (tmp_path / "none.db").exists()


def _not_a_store(tmp_path, kind):
    if kind == "text file":
        path = tmp_path / "notes.txt"
        path.write_text("a note, not a database\n")
    else:
        path = tmp_path / "other.db"
        con = sqlite3.connect(path)
        con.execute("CREATE TABLE inventory (item TEXT)")
        con.execute("INSERT INTO inventory VALUES ('lamp')")
        con.commit()
        con.close()
    return path


@pytest.mark.parametrize("apply", [False, True], ids=["dry run", "apply"])
@pytest.mark.parametrize("kind", ["text file", "another application's SQLite file"])
def test_a_file_that_is_no_session_store_is_refused_untouched(tmp_path, kind, apply):
    """Issue 31 item 10: ``repair --apply`` on a text file wrote a "forensic backup" then
    blamed other processes; on another application's SQLite file it said already_healthy
    (exit 0) and left a lock file. Both are refused: one line naming the file, exit 2, the
    file byte-identical and nothing written beside it."""
    path = _not_a_store(tmp_path, kind)
    before = file_digest(path)
    out = run_cli("repair", *(["--apply"] if apply else []), "--url", str(path))
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert f"{path}: " in out.stdout and "refused, nothing was written" in out.stdout
    assert "Traceback" not in out.stderr and "already_healthy" not in out.stdout
    assert file_digest(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]
