"""``hermes-data optimize-storage`` (sessions-ext-storage §3.6): a legacy-layout file settles
from the command line, with ``--json``, and draws its phases on a terminal only."""

from __future__ import annotations

import json
import os
import pty
import shutil
import sqlite3
import subprocess
import sys

from tests.conftest import REPO, run_cli
from tests.sessions.conftest import LEGACY_DB
from tests.sessions.storage.fts_migration_support import add_legacy_rows, fts_check, layout


def _legacy(tmp_path, extra: int = 0):
    path = tmp_path / "state.db"
    shutil.copyfile(LEGACY_DB, path)
    os.chmod(path, 0o600)
    if extra:
        add_legacy_rows(path, extra)
    return path


def test_optimize_storage_settles_a_legacy_file(tmp_path):
    path = _legacy(tmp_path)
    r = run_cli("optimize-storage", "--url", str(path), "--min-pause", "0")
    assert r.returncode == 0, r.stderr
    assert "FTS storage is current (storage version 3); vacuumed" in r.stdout
    assert "tool_name" in layout(path)["messages_fts"]
    assert not [n for n in layout(path) if n.startswith("fts_v22_trash_")]
    fts_check(path)
    r = run_cli("optimize-storage", "--url", str(path), "--no-vacuum", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"sessions": {"ok": True, "reason": None, "vacuumed": False}}
    con = sqlite3.connect(path)
    assert con.execute("SELECT value FROM state_meta WHERE key = 'fts_storage_version'"
                       ).fetchone() == ("3",)
    con.close()


def _run_on_a_terminal(*args: str, timeout: float = 120) -> tuple[int, str, str]:
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "hermes_data.cli", *args], cwd=REPO,
                                stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL)
    finally:
        os.close(slave)
    chunks = []
    try:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        out = proc.stdout.read().decode()
        proc.wait(timeout=timeout)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, out, b"".join(chunks).decode(errors="replace")


def test_optimize_storage_draws_its_phases_on_a_terminal_only(tmp_path):
    path = _legacy(tmp_path, extra=1500)
    code, out, term = _run_on_a_terminal("optimize-storage", "--url", str(path),
                                         "--min-pause", "0")
    assert code == 0, term
    assert "indexing messages:" in term and "1,802/1,802 100%" in term
    assert "draining the old index:" in term and "vacuuming" in term
    assert "storage version 3" in out


def test_optimize_storage_draws_nothing_with_json_on_a_terminal(tmp_path):
    path = _legacy(tmp_path, extra=600)
    code, out, term = _run_on_a_terminal("optimize-storage", "--url", str(path),
                                         "--min-pause", "0", "--json")
    assert code == 0, term
    assert "indexing messages" not in term
    assert json.loads(out)["sessions"]["ok"] is True
