"""Progress of long operations is drawn on a terminal and nowhere else.

``hermes-data`` runs with its stderr on a real pseudo-terminal (``pty.openpty``) and its stdout
on a pipe: adoption of a large legacy telemetry file and a copy show their steps there; the same
commands with ``--json``, or with stderr redirected, draw nothing.
"""

from __future__ import annotations

import os
import pty
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, copy_fixture

LEGACY = "legacy-telemetry/telemetry_v1_949d9b6.db"


def _run_on_a_terminal(*args: str, timeout: float = 300) -> tuple[int, str, str]:
    """Run ``hermes-data ARGS`` with stderr on a pty; return (exit code, stdout, terminal text)."""
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


def _large_legacy(tmp_path: Path, rows: int = 60_000) -> Path:
    """A v1 legacy telemetry file made large: many more call rows than the fixture holds."""
    db = copy_fixture(LEGACY, tmp_path)
    db.chmod(0o600)
    con = sqlite3.connect(db)
    try:
        (sid,) = con.execute("SELECT session_id FROM runs LIMIT 1").fetchone()
        cols = [r[1] for r in con.execute("PRAGMA table_info(llm_calls)")]
        assert {"session_id", "ts", "model"} <= set(cols)
        con.executemany("INSERT INTO llm_calls (session_id, ts, model) VALUES (?, ?, ?)",
                        ((sid, f"2026-07-01T00:00:{i % 60:02d}+00:00", "m") for i in range(rows)))
        con.commit()
    finally:
        con.close()
    return db


def test_adoption_of_a_large_file_shows_its_steps_on_a_terminal(tmp_path):
    db = _large_legacy(tmp_path)
    code, out, term = _run_on_a_terminal("upgrade", "--store", "telemetry", "--url", str(db))
    assert code == 0, term
    assert "adopted legacy database" in out
    assert "telemetry: adopting the legacy file" in term
    assert "telemetry: v02 (2/18)" in term and "telemetry: v18 (18/18)" in term
    assert "Traceback" not in term


def test_no_progress_with_json_even_on_a_terminal(tmp_path):
    db = _large_legacy(tmp_path, rows=1000)
    code, out, term = _run_on_a_terminal("upgrade", "--store", "telemetry", "--url", str(db), "--json")
    assert code == 0, term
    assert "(18/18)" not in term and "adopting" not in term
    assert '"telemetry"' in out


def test_no_progress_when_stderr_is_not_a_terminal(tmp_path):
    db = _large_legacy(tmp_path, rows=1000)
    proc = subprocess.run([sys.executable, "-m", "hermes_data.cli", "upgrade", "--store",
                           "telemetry", "--url", str(db)], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "(18/18)" not in proc.stderr and "adopting the legacy file" not in proc.stderr


def test_copy_shows_rows_on_a_terminal_and_nothing_with_json(tmp_path):
    src = _large_legacy(tmp_path, rows=12_000)
    from hermes_data.migrate import runner as migrate

    migrate.upgrade("telemetry", src)
    code, out, term = _run_on_a_terminal("copy", "--from", str(src), "--to",
                                         str(tmp_path / "copy.db"), "--batch", "1000")
    assert code == 0, term
    assert "checksum ok" in out
    updates = re.findall(r"llm_calls: ([\d,]+) / ([\d,]+) rows", term)
    assert len(updates) >= 12 and updates[-1][0] == updates[-1][1], term  # one per batch, to the end
    code, out, term = _run_on_a_terminal("copy", "--from", str(src), "--to",
                                         str(tmp_path / "copy2.db"), "--json")
    assert code == 0, term
    assert not re.search(r"[\d,]+ / [\d,]+ rows", term) and '"telemetry"' in out


@pytest.mark.parametrize("json_flag", [False, True])
def test_vacuum_shows_elapsed_time_only_on_a_terminal_without_json(tmp_path, json_flag):
    from hermes_data.sessions.store import SessionStore

    db = tmp_path / "state.db"
    with SessionStore(db) as s:
        s.create_session("a", "cli")
        s.append_messages_batch("a", [{"role": "user", "content": f"m{i}"} for i in range(50)])
    code, out, term = _run_on_a_terminal("vacuum", "--url", str(db), *(["--json"] if json_flag else []))
    assert code == 0, term
    assert ("vacuuming: done in" in term) is not json_flag
