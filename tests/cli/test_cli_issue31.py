"""Issue 31 item 10: what the command line refuses, and how.

Every case runs ``hermes-data`` (or ``alembic``) in a real process against real files:

1. commands that maintain an existing session store (``prune --apply``, ``vacuum``,
   ``optimize-storage``, ``import``) refuse a path that does not exist — one line naming the
   file and ``hermes-data upgrade``, exit 2, neither the file nor its directory created;
2. out-of-range numbers (``stats --hours 1e9``) are refused at argument parsing, naming the
   option and the accepted range;
3. ``upgrade --url FILE`` without ``--store`` reads the store from FILE, as ``copy`` does;
4. ``export -o DIRECTORY`` says the output path is a directory and leaves nothing behind;
5. every session revision refuses a downgrade with the forward-only wording, and Alembic's
   offline mode (``--sql``) is refused with one line.
"""

from __future__ import annotations

import importlib.util
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from hermes_data.migrate import runner as migrate

from tests.conftest import REPO, run_cli

pytestmark = pytest.mark.usefixtures("default_journal_policy")


def _one_error_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert lines[0].startswith("hermes-data: error: "), lines[0]
    return lines[0]


def _listing(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


# -- 1. maintenance commands never create a store ------------------------------------------

MAINTAINING = {
    "prune --apply": ["prune", "--apply"],
    "vacuum": ["vacuum"],
    "optimize-storage": ["optimize-storage", "--min-pause", "0"],
    "import": ["import", "{payload}"],
}


@pytest.mark.parametrize("where", ["missing directory", "existing directory"])
@pytest.mark.parametrize("command", list(MAINTAINING), ids=list(MAINTAINING))
def test_maintenance_refuses_a_missing_store(tmp_path, command, where):
    payload = tmp_path / "payload.json"
    payload.write_text(json.dumps([]))
    typo = tmp_path / ("typo" if where == "missing directory" else "") / "stat.db"
    before = _listing(tmp_path)
    args = [a.replace("{payload}", str(payload)) for a in MAINTAINING[command]]
    line = _one_error_line(run_cli(*args, "--url", str(typo)))
    assert str(typo) in line and "not created yet" in line and "hermes-data upgrade" in line, line
    assert not typo.exists() and not typo.parent.exists() if where == "missing directory" \
        else not typo.exists()
    assert _listing(tmp_path) == before  # no file, no directory, no -journal or lock file


def test_maintenance_still_runs_on_an_existing_store(tmp_path):
    db = tmp_path / "state.db"
    migrate.upgrade("sessions", db)
    assert run_cli("vacuum", "--url", str(db)).returncode == 0
    assert run_cli("prune", "--apply", "--url", str(db)).returncode == 0


def test_import_dry_run_needs_no_store(tmp_path):
    payload = tmp_path / "payload.json"
    payload.write_text(json.dumps([]))
    proc = run_cli("import", str(payload), "--dry-run", "--url", str(tmp_path / "none.db"))
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "none.db").exists()


# -- 2. out-of-range numbers are refused by the parser --------------------------------------

OUT_OF_RANGE = {
    "stats --hours 1e9": (["stats", "--hours", "1e9"], "--hours", "876,000"),
    "stats --hours inf": (["stats", "--hours", "inf"], "--hours", "876,000"),
    "stats --hours nan": (["stats", "--hours", "nan"], "--hours", "876,000"),
    "stats --days 100000000": (["stats", "--days", "100000000"], "--days", "36,500"),
    "stats --top 10**20": (["stats", "--top", str(10 ** 20)], "--top", "1,000,000,000"),
    "prune --older-than-days nan": (["prune", "--older-than-days", "nan"], "--older-than-days",
                                    "36,500"),
    "search --offset 10**20": (["search", "x", "--offset", str(10 ** 20)], "--offset",
                               "1,000,000,000"),
    "optimize-storage --min-pause inf": (["optimize-storage", "--min-pause", "inf"],
                                         "--min-pause", "3,600"),
}


@pytest.fixture
def both_stores(tmp_path):
    migrate.upgrade("telemetry", tmp_path / "t.db")
    migrate.upgrade("sessions", tmp_path / "s.db")
    return tmp_path


@pytest.mark.parametrize("case", list(OUT_OF_RANGE), ids=list(OUT_OF_RANGE))
def test_out_of_range_numbers_are_refused_at_parsing(both_stores, case):
    args, option, high = OUT_OF_RANGE[case]
    db = both_stores / ("t.db" if args[0] == "stats" else "s.db")
    proc = run_cli(*args, "--url", str(db))
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Error:" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    last = proc.stderr.splitlines()[-1]
    assert f"argument {option}:" in last and high in last, last
    assert proc.stdout == ""


def test_in_range_numbers_still_work(both_stores):
    proc = run_cli("stats", "--url", str(both_stores / "t.db"), "--hours", "876000",
                   "--days", "3", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["telemetry"]["window_hours"] == 876000


# -- 3. upgrade --url FILE infers the store --------------------------------------------------

@pytest.mark.parametrize("store", ["telemetry", "sessions"])
def test_upgrade_infers_the_store_from_the_file(tmp_path, store):
    db = tmp_path / "x.db"
    migrate.upgrade(store, db)
    proc = run_cli("upgrade", "--url", str(db), "--json")
    assert proc.returncode == 0, proc.stderr
    assert list(json.loads(proc.stdout)) == [store]


def test_upgrade_infers_an_upstream_state_db(tmp_path):
    db = tmp_path / "state.db"
    con = sqlite3.connect(db)
    con.executescript("CREATE TABLE sessions (id TEXT PRIMARY KEY, source TEXT NOT NULL, "
                      "started_at REAL NOT NULL);"
                      "CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT, "
                      "session_id TEXT NOT NULL, role TEXT NOT NULL, content TEXT, "
                      "timestamp REAL NOT NULL);")
    con.close()
    proc = run_cli("upgrade", "--url", str(db), "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)["sessions"]
    assert report["after_revision"] == migrate.head_revision("sessions")


@pytest.mark.parametrize("kind", ["missing", "empty", "neither store"])
def test_upgrade_without_store_says_when_it_cannot_tell(tmp_path, kind):
    db = tmp_path / "x.db"
    if kind == "empty":
        db.write_bytes(b"")
    elif kind == "neither store":
        con = sqlite3.connect(db)
        con.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY)")
        con.commit()
        con.close()
    before = db.read_bytes() if db.exists() else None
    line = _one_error_line(run_cli("upgrade", "--url", str(db)))
    assert str(db) in line and "--store" in line, line
    assert (db.read_bytes() if db.exists() else None) == before


# -- 4. export -o DIRECTORY -------------------------------------------------------------------

@pytest.mark.parametrize("how", [[], ["--format", "md"], ["--lineage"], ["--all"]],
                         ids=["jsonl", "md", "lineage", "all"])
def test_export_to_a_directory_is_refused(tmp_path, how):
    from hermes_data.sessions.store import SessionStore

    db = tmp_path / "state.db"
    with SessionStore(db) as s:
        s.create_session("abc", "cli")
        s.append_message("abc", "user", "hello")
    out = tmp_path / "out"
    out.mkdir()
    before = _listing(tmp_path)
    session = [] if how == ["--all"] else ["abc"]
    line = _one_error_line(run_cli("export", *session, *how, "--url", str(db), "-o", str(out)))
    assert f"{out}: the output path is a directory" in line, line
    assert "disk I/O" not in line and str(db) not in line
    assert _listing(tmp_path) == before


# -- 5. Alembic: forward-only wording, offline mode refused ---------------------------------

def _revision_files() -> list[Path]:
    return sorted((REPO / "migrations").glob("*/versions/*.py"))


@pytest.mark.parametrize("path", _revision_files(), ids=lambda p: f"{p.parent.parent.name}/{p.stem}")
def test_every_revision_refuses_a_downgrade_with_the_forward_only_wording(path):
    from hermes_data.errors import ForwardOnlyError

    spec = importlib.util.spec_from_file_location(f"_rev_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(ForwardOnlyError) as caught:
        module.downgrade()
    assert str(caught.value) == (f"revision {module.revision} cannot be downgraded: "
                                 "the history is forward-only")


def _alembic(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "alembic", "-c", str(REPO / "alembic.ini"), *args],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)


def test_alembic_sessions_downgrade_names_the_forward_only_rule(tmp_path):
    db = tmp_path / "state.db"
    migrate.upgrade("sessions", db)
    head = migrate.head_revision("sessions")
    proc = _alembic(tmp_path, "-n", "sessions", "-x", f"url={db}", "downgrade", "-1")
    assert proc.returncode != 0
    assert "Traceback" not in proc.stdout + proc.stderr
    failed = [l for l in (proc.stdout + proc.stderr).splitlines() if l.startswith("FAILED:")]
    assert failed == [f"FAILED: revision {head} cannot be downgraded: the history is forward-only"]


@pytest.mark.parametrize("section", [[], ["-n", "sessions"]], ids=["telemetry", "sessions"])
def test_alembic_offline_mode_is_one_line(tmp_path, section):
    db = tmp_path / "new" / "x.db"
    proc = _alembic(tmp_path, *section, "-x", f"url={db}", "upgrade", "head", "--sql")
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out, out
    failed = [l for l in out.splitlines() if l.startswith("FAILED:")]
    assert len(failed) == 1 and "offline (--sql) mode is not supported" in failed[0], out
    assert len(out.strip().splitlines()) == 1, out
    assert not db.parent.exists()


def test_offline_mode_error_keeps_its_api_types():
    from alembic.util import CommandError

    from hermes_data.errors import ConfigurationError, OfflineModeError

    assert issubclass(OfflineModeError, ConfigurationError)
    assert issubclass(OfflineModeError, CommandError)
