"""A command the storage fails prints one line naming the file, exit 2 (issue 31;
docs/cli.md "Output and errors"): here the kernel's file-size limit (``RLIMIT_FSIZE``) stops
the database from growing while ``upgrade`` migrates a legacy file; the fault matrix
(tests/faults/command_paths.py) injects single faults at every write position."""

from __future__ import annotations

import resource
import signal
import sqlite3
import subprocess
import sys

import pytest

from tests.conftest import REPO, copy_fixture

pytestmark = pytest.mark.journal_independent("the fault is in the kernel, whichever journal")


def _no_growth() -> None:
    """In the child, before exec: no file may grow past two pages (the journal or WAL the
    upgrade writes, the database's new pages)."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (8192, resource.RLIM_INFINITY))


def test_upgrade_on_a_failing_disk_is_one_line_naming_the_file_and_changes_nothing(tmp_path):
    db = copy_fixture("legacy-telemetry/telemetry_v1_949d9b6.db", tmp_path)
    db.chmod(0o600)
    before = sqlite3.connect(db).execute("SELECT count(*) FROM llm_calls").fetchone()[0]
    out = subprocess.run([sys.executable, "-m", "hermes_data.cli", "upgrade", "--store",
                          "telemetry", "--url", str(db)], cwd=REPO, capture_output=True,
                         text=True, timeout=120, preexec_fn=_no_growth)
    assert out.returncode == 2, out.stdout + out.stderr
    lines = [ln for ln in out.stderr.splitlines() if ln.startswith("hermes-data: error:")]
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    # Not "corrupt": the storage failed, the file is sound (before issue 31 the read-only
    # probe's "disk I/O error" was reported as corruption).
    assert lines[0].startswith(f"hermes-data: error: {db}: ") and "corrupt" not in lines[0]
    assert "failed: an I/O error on the storage" in lines[0] or "failed: the disk is full" in lines[0]
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert con.execute("SELECT count(*) FROM llm_calls").fetchone()[0] == before
    con.close()
    again = subprocess.run([sys.executable, "-m", "hermes_data.cli", "upgrade", "--store",
                            "telemetry", "--url", str(db)], cwd=REPO, capture_output=True,
                           text=True, timeout=120)
    assert again.returncode == 0, again.stderr
