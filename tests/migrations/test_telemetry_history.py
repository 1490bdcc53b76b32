"""The telemetry history: fresh upgrades, historical levels, forward-only, failure atomicity,
write-free reruns, drift checks and concurrent upgrades of one file."""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from sqlalchemy import event
from sqlalchemy.engine import Engine

from hermes_data.migrate import runner as migrate
from hermes_data.engine import create_sqlite_engine
from hermes_data.errors import ForwardOnlyError
from hermes_data.telemetry.schema import metadata

from ..conftest import REPO, run_cli
from .shapes import EXPECTED


def _pragma_dump(path: Path) -> dict:
    """Ordered table_info, index lists and the object inventory, straight from SQLite."""
    con = sqlite3.connect(path)
    try:
        objects = con.execute(
            "SELECT type, name, tbl_name FROM sqlite_master WHERE name <> 'alembic_version' "
            "AND name NOT LIKE 'sqlite_autoindex_alembic%' ORDER BY type, name"
        ).fetchall()
        tables = [n for t, n, _ in objects if t == "table" and n != "sqlite_sequence"]
        info = {t: con.execute(f"PRAGMA table_info({t})").fetchall() for t in tables}
        indexes = {}
        for t in tables:
            for row in con.execute(f"PRAGMA index_list({t})").fetchall():
                cols = [r[2] for r in con.execute(f"PRAGMA index_info({row[1]})")]
                indexes[row[1]] = (t, cols, row[2])
        return {"objects": objects, "table_info": info, "indexes": indexes}
    finally:
        con.close()


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _columns(path: Path, table: str) -> list[str]:
    con = sqlite3.connect(path)
    try:
        return [r[1] for r in con.execute(f"PRAGMA table_info({table})")]
    finally:
        con.close()


def test_fresh_upgrade_equals_create_all(tmp_path):
    upgraded, created = tmp_path / "upgraded.db", tmp_path / "created.db"
    report = migrate.upgrade("telemetry", upgraded)
    assert report.applied == [f"v{n:02d}" for n in range(1, 19)]
    engine = create_sqlite_engine(created)
    metadata.create_all(engine)
    engine.dispose()
    a, b = _pragma_dump(upgraded), _pragma_dump(created)
    assert a["objects"] == b["objects"]
    assert a["table_info"] == b["table_info"]  # name, type, notnull, dflt_value, pk — in order
    assert a["indexes"] == b["indexes"]
    named = {n for n in a["indexes"] if not n.startswith("sqlite_autoindex")}
    assert len(named) == 18


def test_head_declares_legacy_defaults_verbatim(tmp_path):
    db = tmp_path / "t.db"
    migrate.upgrade("telemetry", db)
    info = {r[1]: r for r in _pragma_dump(db)["table_info"]["runs"]}
    assert info["cost_usd"][4] == "0.0"  # not "(0.0)": legacy files say DEFAULT 0.0
    assert info["status"][4] == "'running'"
    assert info["session_id"][3] == 0 and info["session_id"][5] == 1  # nullable TEXT PK


@pytest.mark.parametrize("revision", ["v01", "v07", "v11", "v16", "v18"])
def test_historical_level_shape(tmp_path, revision):
    db = tmp_path / "t.db"
    migrate.upgrade("telemetry", db, revision)
    expected = EXPECTED[revision]
    dump = _pragma_dump(db)
    assert {t: [c[1] for c in cols] for t, cols in dump["table_info"].items()} == expected["tables"]
    named = {n for n in dump["indexes"] if not n.startswith("sqlite_autoindex")}
    assert named == expected["indexes"]
    con = sqlite3.connect(db)
    rows = [r[0] for r in con.execute("SELECT version FROM schema_version ORDER BY version")]
    con.close()
    assert rows == list(range(1, int(revision[1:]) + 1))


def test_downgrade_is_refused_and_changes_nothing(tmp_path):
    db = tmp_path / "t.db"
    migrate.upgrade("telemetry", db)
    before = _sha(db)
    cfg = migrate.alembic_config("telemetry", db)
    with pytest.raises(ForwardOnlyError, match="forward-only"):
        command.downgrade(cfg, "v17")
    with pytest.raises(ForwardOnlyError):
        command.downgrade(cfg, "base")
    assert _sha(db) == before


def test_alembic_cli_downgrade_fails(tmp_path):
    db = tmp_path / "t.db"
    migrate.upgrade("telemetry", db)
    before = _sha(db)
    proc = subprocess.run(
        [sys.executable, "-m", "alembic", "-x", f"url=sqlite:///{db}", "downgrade", "-1"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode != 0
    assert "forward-only" in proc.stderr
    assert _sha(db) == before


def test_alembic_cli_upgrade_head_creates_default_location(tmp_path, _isolated_home):
    proc = subprocess.run([sys.executable, "-m", "alembic", "upgrade", "head"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    db = _isolated_home / "telemetry" / "telemetry.db"
    assert db.exists()
    assert "llm_call_errors" in {r[1] for r in _pragma_dump(db)["objects"]}


class _InjectedLock:
    """Raise ``database is locked`` when a chosen ALTER is sent (any engine in this process)."""

    def __init__(self, needle: str):
        self.needle, self.fired = needle, 0

    def __call__(self, conn, cursor, statement, parameters, context, executemany):
        if self.needle in statement:
            self.fired += 1
            raise sqlite3.OperationalError("database is locked")

    def __enter__(self):
        event.listen(Engine, "before_cursor_execute", self)
        return self

    def __exit__(self, *exc):
        event.remove(Engine, "before_cursor_execute", self)


def test_locked_alter_leaves_everything_as_before(tmp_path):
    db = tmp_path / "t.db"
    migrate.upgrade("telemetry", db, "v06")
    before_dump, before_sha = _pragma_dump(db), _sha(db)
    with _InjectedLock("ADD COLUMN provider_assumed_calls") as inj:
        with pytest.raises(sa.exc.OperationalError, match="database is locked"):
            migrate.upgrade("telemetry", db, patience_s=0)  # one attempt (no lock wait)
    assert inj.fired == 1
    assert _pragma_dump(db) == before_dump
    assert _sha(db) == before_sha
    con = sqlite3.connect(db)
    assert con.execute("SELECT version_num FROM alembic_version").fetchall() == [("v06",)]
    assert [r[0] for r in con.execute("SELECT version FROM schema_version")] == [1, 2, 3, 4, 5, 6]
    con.close()
    report = migrate.upgrade("telemetry", db)
    assert report.after_revision == "v18"
    assert "provider_assumed_calls" in _columns(db, "runs")


def test_second_upgrade_writes_nothing(tmp_path):
    db = tmp_path / "t.db"
    migrate.upgrade("telemetry", db)
    statements: list[str] = []

    def _trace(conn, cursor, statement, parameters, context, executemany):
        statements.append(statement)

    event.listen(Engine, "before_cursor_execute", _trace)
    # Hold the write lock from another connection: an upgrade that wanted to write would block.
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        report = migrate.upgrade("telemetry", db)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        event.remove(Engine, "before_cursor_execute", _trace)
    assert report.up_to_date and report.applied == []
    writes = [s for s in statements
              if s.lstrip().split(None, 1)[0].upper() in
              ("INSERT", "UPDATE", "DELETE", "CREATE", "ALTER", "DROP", "REPLACE")
              or s.upper().startswith("BEGIN IMMEDIATE")]
    assert statements, "the trace saw nothing: it is not wired"
    assert writes == []


def test_check_passes_then_names_a_dropped_index(tmp_path):
    db = tmp_path / "t.db"
    assert run_cli("upgrade", "--store", "telemetry", "--url", str(db)).returncode == 0
    ok = run_cli("check", "--store", "telemetry", "--url", str(db))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    con = sqlite3.connect(db)
    con.execute("DROP INDEX idx_llm_turn")
    con.commit()
    con.close()
    bad = run_cli("check", "--store", "telemetry", "--url", str(db))
    assert bad.returncode == 1
    assert "idx_llm_turn" in bad.stdout


def test_check_reports_missing_and_different_columns(tmp_path):
    db = tmp_path / "t.db"
    migrate.upgrade("telemetry", db)
    con = sqlite3.connect(db)
    con.execute("ALTER TABLE llm_calls DROP COLUMN api_request_id")
    con.execute("CREATE TABLE rollup_extra (x INTEGER)")
    con.commit()
    con.close()
    diffs = {(d.kind, d.object) for d in migrate.check("telemetry", db)}
    assert ("missing_column", "llm_calls.api_request_id") in diffs
    assert ("extra_table", "rollup_extra") in diffs


CONCURRENT_UPGRADERS = 8


def test_eight_processes_upgrade_one_missing_file(tmp_path):
    db = tmp_path / "sub" / "telemetry.db"
    procs = [
        subprocess.Popen([sys.executable, "-m", "hermes_data.cli", "upgrade", "--store",
                          "telemetry", "--url", str(db)], cwd=REPO,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(CONCURRENT_UPGRADERS)
    ]
    results = [p.communicate(timeout=180) + (p.returncode,) for p in procs]
    for out, err, rc in results:
        assert rc == 0, err
        assert "locked" not in err
    con = sqlite3.connect(db)
    assert [r[0] for r in con.execute("SELECT version FROM schema_version ORDER BY version")] == \
        list(range(1, 19))
    assert con.execute("SELECT version_num FROM alembic_version").fetchall() == [("v18",)]
    con.close()
    assert migrate.check("telemetry", db) == []


def test_the_other_stores_database_is_refused_by_name(tmp_path):
    sessions_db = tmp_path / "state.db"
    migrate.upgrade("sessions", sessions_db)
    before = _sha(sessions_db)
    proc = run_cli("upgrade", "--store", "telemetry", "--url", str(sessions_db))
    assert proc.returncode == 2
    assert "not a revision of the telemetry store" in proc.stderr and migrate.head_revision("sessions") in proc.stderr
    assert _sha(sessions_db) == before


@pytest.mark.parametrize("store", ["telemetry", "sessions"])
def test_written_down_head_matches_the_scripts(store):
    assert migrate.store_spec(store).head == migrate.head_revision(store)


def test_settled_upgrade_needs_neither_alembic_nor_the_query_modules(tmp_path):
    """The common case — every process start on an up-to-date install — stays cheap."""
    db = tmp_path / "t.db"
    migrate.upgrade("telemetry", db)
    code = (
        "import sys; from hermes_data import migrate; "
        "r = migrate.upgrade('telemetry', sys.argv[1]); assert r.up_to_date, r; "
        "loaded = [m for m in ('alembic', 'hermes_data.telemetry.writes', "
        "'hermes_data.telemetry.reads') if m in sys.modules]; print(loaded)"
    )
    out = subprocess.run([sys.executable, "-c", code, str(db)], capture_output=True, text=True,
                         timeout=60, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
