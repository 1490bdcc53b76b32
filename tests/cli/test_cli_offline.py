"""Issue 31 items 1, 3 and 9: the commands that only look never write the store.

Every case runs ``hermes-data`` in a real process against real files:

1. after a writer is SIGKILLed inside a large ``append_messages_batch`` (rollback journal:
   a hot ``-journal``; WAL: ``-wal``/``-shm`` left), ``status``/``doctor``/``check`` report
   a healthy file, not a corrupt one, and leave the file and its sidecars byte-identical
   (WAL: the ``-shm`` index aside, which any SQLite reader may rebuild); ``copy`` reads
   such a source without writing it; ``upgrade`` (a writer) rolls the journal back and
   succeeds;
2. ``search``, ``prune`` (dry run), ``export``, ``status``, ``doctor``, ``check`` and
   ``stats`` leave an upstream legacy file, another application's empty SQLite file and a
   WAL store byte-identical, with no new ``-wal``/``-shm``/``-journal`` beside them; the
   looking commands refuse the first two in one line naming ``hermes-data upgrade``;
3. ``export -o FILE`` on a full disk (a real, tiny tmpfs) names FILE, exits 2, removes its
   temporary file and leaves a previous FILE untouched; a symbolic link at FILE is refused.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import copy_fixture, run_cli, tiny_tmpfs

JOURNAL_MAGIC = bytes.fromhex("d9d505f920a163d7")

_WRITER = r"""
import sys
from hermes_data.sessions.store import SessionStore
s = SessionStore(sys.argv[1])
s.create_session("s1", "cli")
s.append_message("s1", "user", "hello before the crash")
print("ready", flush=True)
while True:
    s.append_messages_batch("s1", [{"role": "user", "content": "x" * 900 + str(i)}
                                   for i in range(20000)])
"""


def _files(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.iterdir()) if p.is_file()}


def _inside_transaction(db: Path, mode: str) -> bool:
    """The writer is inside a write transaction whose state a crash leaves on disk: a
    rollback journal with its header written (hot once the writer is gone), or WAL frames."""
    if mode == "wal":
        wal = Path(f"{db}-wal")
        return wal.exists() and wal.stat().st_size > 100_000
    try:
        with open(f"{db}-journal", "rb") as fh:
            return fh.read(8) == JOURNAL_MAGIC
    except FileNotFoundError:
        return False


def crash_writer(db: Path, mode: str) -> None:
    """SIGKILL a real writer process in the middle of a large append_messages_batch."""
    env = {**os.environ, "HERMES_DATA_JOURNAL_MODE": mode}
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(db)], stdout=subprocess.PIPE,
                            text=True, env=env)
    try:
        assert proc.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 60
        while not _inside_transaction(db, mode):
            assert time.monotonic() < deadline, "the writer never got inside a transaction"
            assert proc.poll() is None, "the writer died by itself"
            time.sleep(0.001)
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()


@pytest.fixture(params=["delete", "wal"])
def crashed(request, tmp_path):
    db = tmp_path / "state.db"
    crash_writer(db, request.param)
    if request.param == "delete":
        assert _inside_transaction(db, "delete"), "no hot journal was left"
        ro = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)
        try:  # the defect's precondition: a read-only reader cannot roll it back
            with pytest.raises(sqlite3.OperationalError, match="readonly"):
                ro.execute("SELECT count(*) FROM sqlite_master").fetchall()
        finally:
            ro.close()
    else:
        assert Path(f"{db}-wal").exists() and Path(f"{db}-shm").exists()
    return request.param, db


def _unchanged(before: dict[str, str], after: dict[str, str], mode: str) -> None:
    if mode == "wal":  # a reader may rebuild the -shm index; the db and -wal stay as they are
        before = {k: v for k, v in before.items() if not k.endswith("-shm")}
        after = {k: v for k, v in after.items() if not k.endswith("-shm")}
    assert after == before


@pytest.mark.parametrize("command", ["status", "doctor", "check"])
def test_looking_at_a_crashed_store_calls_it_healthy_and_writes_nothing(crashed, command):
    mode, db = crashed
    before = _files(db.parent)
    proc = run_cli(command, "--store", "sessions", "--url", str(db))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "corrupt" not in proc.stdout + proc.stderr
    assert "readonly" not in proc.stdout + proc.stderr
    _unchanged(before, _files(db.parent), mode)


def test_copy_reads_a_crashed_source_without_writing_it(crashed, tmp_path):
    mode, db = crashed
    before = _files(db.parent)
    target = tmp_path / "copy" / "state.db"
    target.parent.mkdir()
    proc = run_cli("copy", "--from", str(db), "--to", str(target), "--json")
    assert proc.returncode == 0, proc.stderr
    _unchanged(before, _files(db.parent), mode)
    con = sqlite3.connect(target)
    try:  # the acknowledged message is there; the killed batch is not (rolled back)
        rows = con.execute("SELECT content FROM messages WHERE session_id = 's1'").fetchall()
    finally:
        con.close()
    assert ("hello before the crash",) in rows
    if mode == "delete":
        assert rows == [("hello before the crash",)]
    again = run_cli("copy", "--from", str(db), "--to", str(target), "--json")
    assert again.returncode == 0, again.stderr  # a rerun resumes (nothing left to copy)


def test_upgrade_rolls_a_hot_journal_back_and_succeeds(crashed):
    mode, db = crashed
    proc = run_cli("upgrade", "--store", "sessions", "--url", str(db))
    assert proc.returncode == 0, proc.stderr
    con = sqlite3.connect(db)
    try:
        assert con.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        con.close()


def test_no_snapshot_is_left_behind(crashed, tmp_path):
    from hermes_data.migrate.reading import SNAPSHOT_PREFIX

    mode, db = crashed
    scratch = tmp_path / "tmpdir"
    scratch.mkdir()
    proc = run_cli("doctor", "--store", "sessions", "--url", str(db),
                   env={"TMPDIR": str(scratch)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not [p for p in scratch.iterdir() if p.name.startswith(SNAPSHOT_PREFIX)]


# -- 2. commands that only look change nothing -----------------------------------------

LOOKING = {
    "search": ["search", "hello"],
    "prune (dry run)": ["prune"],
    "export": ["export", "s1"],
    "export --all": ["export", "--all"],
    "export --format md": ["export", "s1", "--format", "md"],
    "status": ["status", "--store", "sessions"],
    "doctor": ["doctor", "--store", "sessions"],
    "check": ["check", "--store", "sessions"],
}
#: The commands that read sessions: they refuse what is not a session store at the head.
REFUSING = {"search", "prune (dry run)", "export", "export --all", "export --format md"}


def _upstream(tmp_path: Path) -> Path:
    db = copy_fixture("legacy-sessions/state_fork_v21.db", tmp_path)
    db.chmod(0o600)
    return db


def _foreign_empty(tmp_path: Path) -> Path:
    db = tmp_path / "other-app.db"
    con = sqlite3.connect(db)
    con.execute("PRAGMA user_version = 7")  # a header, no table: another application's
    con.close()
    return db


@pytest.mark.parametrize("kind", ["upstream legacy", "foreign empty"])
@pytest.mark.parametrize("command", list(LOOKING), ids=list(LOOKING))
def test_looking_commands_leave_files_byte_identical(tmp_path, kind, command):
    db = _upstream(tmp_path) if kind == "upstream legacy" else _foreign_empty(tmp_path)
    before = _files(tmp_path)
    proc = run_cli(*LOOKING[command], "--url", str(db))
    assert "Traceback" not in proc.stderr
    assert _files(tmp_path) == before, proc.stderr  # nothing written, no sidecar left
    if command in REFUSING:
        assert proc.returncode == 2, proc.stdout + proc.stderr
        line, = proc.stderr.splitlines()
        assert line.startswith("hermes-data: error: ") and str(db) in line
        assert "hermes-data upgrade" in line


def _wal_store(tmp_path: Path, monkeypatch) -> Path:
    from hermes_data.sessions.store import SessionStore

    db = tmp_path / "state.db"
    monkeypatch.setenv("HERMES_DATA_JOURNAL_MODE", "wal")
    with SessionStore(db) as s:
        s.create_session("s1", "cli")
        s.append_message("s1", "user", "hello world")
    assert db.read_bytes()[18:20] == b"\x02\x02"
    return db


@pytest.mark.parametrize("command", list(LOOKING), ids=list(LOOKING))
def test_looking_commands_leave_no_sidecars_beside_a_wal_store(tmp_path, command, monkeypatch):
    db = _wal_store(tmp_path, monkeypatch)
    assert not Path(f"{db}-wal").exists() and not Path(f"{db}-shm").exists()
    before = _files(tmp_path)
    proc = run_cli(*LOOKING[command], "--url", str(db))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _files(tmp_path) == before


def test_stats_leaves_a_wal_telemetry_store_as_it_was(tmp_path, monkeypatch):
    from hermes_data.telemetry import TelemetryStore

    db = tmp_path / "telemetry.db"
    monkeypatch.setenv("HERMES_DATA_JOURNAL_MODE", "wal")
    TelemetryStore(db).close()
    assert db.read_bytes()[18:20] == b"\x02\x02"
    before = _files(tmp_path)
    for args in (["stats"], ["status", "--store", "telemetry"], ["doctor", "--store", "telemetry"]):
        proc = run_cli(*args, "--url", str(db))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert _files(tmp_path) == before, args


def test_search_on_a_wal_store_another_process_holds_keeps_its_sidecars(tmp_path, monkeypatch):
    """SQLite decides: the -wal/-shm of a file another connection holds are not removed."""
    db = _wal_store(tmp_path, monkeypatch)
    holder = sqlite3.connect(db)
    try:
        holder.execute("SELECT count(*) FROM sessions").fetchall()
        assert Path(f"{db}-wal").exists()
        proc = run_cli("search", "hello", "--url", str(db))
        assert proc.returncode == 0, proc.stderr
        assert Path(f"{db}-wal").exists() and Path(f"{db}-shm").exists()
        assert holder.execute("SELECT count(*) FROM messages").fetchone() == (1,)
    finally:
        holder.close()


# -- 3. export -o FILE -------------------------------------------------------------------

@pytest.fixture
def tiny_disk(tmp_path):
    """A real 64 KiB tmpfs (CI runs as root); skipped where mounting is not permitted."""
    with tiny_tmpfs(tmp_path / "disk", "64k") as mnt:
        yield mnt


@pytest.fixture
def big_store(tmp_path):
    from hermes_data.sessions.store import SessionStore

    db = tmp_path / "big.db"
    with SessionStore(db) as s:
        s.create_session("s1", "cli")
        s.append_messages_batch("s1", [{"role": "user", "content": "y" * 1000}
                                       for _ in range(300)])
    return db


@pytest.mark.parametrize("form", [["s1"], ["s1", "--format", "md"], ["--all"]],
                         ids=["jsonl", "md", "all"])
def test_export_on_a_full_disk_names_the_output_and_keeps_the_old_file(tiny_disk, big_store,
                                                                       form):
    out = tiny_disk / "export.jsonl"
    out.write_text("previous export\n")
    proc = run_cli("export", *form, "--url", str(big_store), "-o", str(out))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line, = proc.stderr.splitlines()
    assert line == (f"hermes-data: error: no space left on device writing {out}; nothing was "
                    "written there (the previous file is unchanged)")
    assert str(big_store) not in line
    assert sorted(p.name for p in tiny_disk.iterdir()) == ["export.jsonl"]  # no temporary file
    assert out.read_text() == "previous export\n"


def test_export_replaces_the_output_whole_and_owner_only(tmp_path, big_store):
    out = tmp_path / "export.jsonl"
    out.write_text("previous export\n")
    out.chmod(0o644)
    proc = run_cli("export", "s1", "--url", str(big_store), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert len(out.read_text().splitlines()) == 300
    assert out.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".export")) == []


@pytest.mark.parametrize("form", [["s1"], ["--all"]], ids=["jsonl", "all"])
def test_export_refuses_a_symbolic_link_at_the_output(tmp_path, big_store, form):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    link = tmp_path / "export.jsonl"
    link.symlink_to(victim)
    proc = run_cli("export", *form, "--url", str(big_store), "-o", str(link))
    assert proc.returncode == 2
    line, = proc.stderr.splitlines()
    assert str(link) in line and "symbolic link" in line
    assert link.is_symlink() and victim.read_text() == "precious\n"
