"""Issue 31 item 6: the whole-file maintenance commands refuse a structurally corrupt
session store that is at head.

A settled open runs no check (docs/sessions.md §8.4), so a damaged file at head opened fine
and ``vacuum`` rewrote it (390 → 503 pages), ``optimize-storage`` wrote into it before failing
with ``database disk image is malformed``. Now ``vacuum``, ``optimize-storage`` and
``prune --apply`` run ``PRAGMA quick_check`` first and refuse with the corrupt-file line (exit
2, one line naming the file), the file byte-identical. Every case runs ``hermes-data`` in a
real process against a real file damaged the way a real corruption looks: garbage over the
cell-pointer array of one leaf page in the middle of an index b-tree.
"""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess
from pathlib import Path

import pytest

from hermes_data.sessions.store import SessionStore

from tests.conftest import run_cli

pytestmark = pytest.mark.usefixtures("default_journal_policy")

OLD = 1_000.0  # long ago: with --older-than-days 0, prune --apply would delete every session


def _build(db: Path) -> None:
    with SessionStore(db) as s:
        for i in range(30):
            s.create_session(f"s{i}", "cli")
            s.append_messages_batch(f"s{i}", [{"role": "user", "content": f"message {i} {j} " * 20}
                                              for j in range(40)])
        with s.engine.begin() as c:
            c.exec_driver_sql("UPDATE sessions SET started_at = ?, ended_at = ?, "
                              "end_reason = 'user_exit'", (OLD, OLD + 10))


def _ro(db: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)


def _corrupt(db: Path) -> int:
    """Overwrite the cell-pointer array of a leaf page in the middle of a messages index
    (found with dbstat); the schema, the version table and the header stay intact."""
    con = _ro(db)
    try:
        page_size = con.execute("PRAGMA page_size").fetchone()[0]
        pages = [r[0] for r in con.execute(
            "SELECT pageno FROM dbstat WHERE name = 'idx_messages_display_identity' "
            "AND pagetype = 'leaf' ORDER BY pageno")]
    finally:
        con.close()
    assert len(pages) >= 3, pages
    page = pages[len(pages) // 2]
    with open(db, "r+b") as f:
        f.seek((page - 1) * page_size + 8)  # just past the 8-byte leaf page header
        f.write(b"\xff" * 8)
    return page


def _quick_check(db: Path) -> list[str]:
    con = _ro(db)
    try:
        return [r[0] for r in con.execute("PRAGMA quick_check")]
    finally:
        con.close()


def _digest(db: Path) -> str:
    return hashlib.sha256(db.read_bytes()).hexdigest()


def _one_error_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("hermes-data: error: "), lines[0]
    return lines[0]


@pytest.fixture
def corrupt_store(tmp_path) -> tuple[Path, int]:
    db = tmp_path / "state.db"
    _build(db)
    page = _corrupt(db)
    assert _quick_check(db) != ["ok"]  # structurally damaged ...
    with SessionStore(db) as s:  # ... yet at head: the settled open does not notice
        assert s.get_session("s3") is not None
    return db, page


REWRITING = {
    "vacuum": ["vacuum"],
    "optimize-storage": ["optimize-storage", "--min-pause", "0"],
    "prune --apply": ["prune", "--apply", "--older-than-days", "0"],
}


@pytest.mark.parametrize("command", list(REWRITING), ids=list(REWRITING))
def test_rewriting_maintenance_refuses_a_corrupt_store_at_head(corrupt_store, command):
    db, page = corrupt_store
    before = _digest(db)
    line = _one_error_line(run_cli(*REWRITING[command], "--url", str(db)))
    assert str(db) in line and "corrupt" in line and "quick_check" in line, line
    assert f"page {page}" in line and "left unchanged" in line, line
    assert _digest(db) == before  # byte-identical: nothing was written, nothing rewritten
    with SessionStore(db) as s:  # and prune deleted nothing
        assert s.get_session("s0") is not None


def test_a_healthy_store_still_vacuums_and_prunes(tmp_path):
    db = tmp_path / "state.db"
    _build(db)
    assert _quick_check(db) == ["ok"]
    proc = run_cli(*REWRITING["prune --apply"], "--url", str(db))
    assert proc.returncode == 0 and "deleted 30 session(s)" in proc.stdout, proc
    proc = run_cli("vacuum", "--url", str(db))
    assert proc.returncode == 0 and "reclaimed" in proc.stdout, proc
    proc = run_cli("optimize-storage", "--min-pause", "0", "--url", str(db))
    assert proc.returncode == 0, proc
