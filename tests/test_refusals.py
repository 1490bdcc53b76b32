"""What we refuse stays byte-identical (issue 12): corrupt files, foreign files, dangling
links; commands that only look create nothing; exports are owner-only.

Every case uses real files (copies of the shared fixtures, damaged by flipping one byte) and
the real command line in a subprocess.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import stat
from pathlib import Path

import pytest

from hermes_data.migrate import runner as migrate
from hermes_data.errors import (CorruptDatabaseError, NotAHermesDatabaseError, StoreLinkError,
                                StoreNotCreatedError)
from hermes_data.sessions.storage.adoption import identify as identify_session_store

from .conftest import FIXTURES, copy_fixture, run_cli

SESSIONS_V21 = "legacy-sessions/state_fork_v21.db"
TELEMETRY_V16 = "legacy-telemetry/telemetry_v16_7e028ef.db"


# --------------------------------------------------------------------------- helpers
def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def writable_copy(relpath: str, dest: Path) -> Path:
    """A copy of the fixture's main file only (no stale sidecars), mode 0644."""
    db = copy_fixture(relpath, dest)
    for suffix in ("-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    db.chmod(0o644)
    return db


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    value = 0
    for k in range(9):
        b = buf[i + k]
        if k == 8:
            return (value << 8) | b, i + 9
        value = (value << 7) | (b & 0x7F)
        if not b & 0x80:
            return value, i + k + 1
    raise AssertionError("unreachable")


def _root_page(path: Path, name: str) -> tuple[int, int]:
    con = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
    try:
        size = con.execute("PRAGMA page_size").fetchone()[0]
        root = con.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (name,)).fetchone()[0]
    finally:
        con.close()
    return size, root


def break_page_header(path: Path, table: str) -> None:
    """Flip the page-type byte of ``table``'s root page: quick_check reports
    ``btreeInitPage() returns error code 11``."""
    size, root = _root_page(path, table)
    data = bytearray(path.read_bytes())
    data[(root - 1) * size] ^= 0xFF
    path.write_bytes(bytes(data))


def break_index_entry(path: Path, index: str) -> None:
    """Flip the low bit of the row id stored in the first cell of the rightmost leaf of
    ``index``: the b-tree stays well formed (quick_check: ok) but one row is missing from the
    index (integrity_check: ``row N missing from index``)."""
    size, page = _root_page(path, index)
    data = bytearray(path.read_bytes())
    while True:
        base = (page - 1) * size
        if data[base] == 0x0A:  # index leaf
            break
        assert data[base] == 0x02, "expected an interior index page"
        page = int.from_bytes(data[base + 8:base + 12], "big")  # rightmost child
    cell = base + int.from_bytes(data[base + 8:base + 10], "big")
    length, start = _varint(bytes(data), cell)
    assert start + length <= base + size, "first cell overflows; pick another"
    data[start + length - 1] ^= 0x01
    path.write_bytes(bytes(data))


def pragma(path: Path, name: str) -> list[str]:
    con = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
    try:
        return [r[0] for r in con.execute(f"PRAGMA {name}(10)")]
    finally:
        con.close()


def other_application_db(path: Path) -> Path:
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
    con.execute("INSERT INTO notes (body) VALUES ('not yours')")
    con.commit()
    con.close()
    return path


# --------------------------------------------------------------------------- corrupt files
@pytest.fixture
def corrupt_sessions(tmp_path) -> Path:
    db = writable_copy(SESSIONS_V21, tmp_path)
    break_page_header(db, "messages")
    assert "btreeInitPage() returns error code 11" in " ".join(pragma(db, "quick_check"))
    return db


@pytest.fixture
def corrupt_telemetry(tmp_path) -> Path:
    db = writable_copy(TELEMETRY_V16, tmp_path)
    break_index_entry(db, "idx_llm_session")
    assert pragma(db, "quick_check") == ["ok"]  # the damage quick_check cannot see
    assert "missing from index idx_llm_session" in " ".join(pragma(db, "integrity_check"))
    return db


def test_corrupt_session_file_is_refused_byte_identical(corrupt_sessions):
    before = digest(corrupt_sessions)
    cli = run_cli("upgrade", "--store", "sessions", "--url", str(corrupt_sessions))
    assert cli.returncode == 2, cli.stdout + cli.stderr
    line = cli.stderr.strip().splitlines()[-1]
    assert str(corrupt_sessions) in line and "corrupt" in line and "btreeInitPage" in line
    assert digest(corrupt_sessions) == before


def test_corrupt_session_file_is_refused_by_the_store_api(corrupt_sessions):
    from hermes_data import SessionStore

    from hermes_data.engine import SqliteSettings

    before = digest(corrupt_sessions)
    for settings in (None, SqliteSettings(journal_mode="wal")):  # writer path, probe path
        with pytest.raises(CorruptDatabaseError, match="corrupt") as err:
            SessionStore(corrupt_sessions, settings=settings)
        assert str(corrupt_sessions) in str(err.value)
        assert digest(corrupt_sessions) == before


def test_telemetry_missing_index_entry_refused_at_adoption(corrupt_telemetry):
    before = digest(corrupt_telemetry)
    cli = run_cli("upgrade", "--store", "telemetry", "--url", str(corrupt_telemetry))
    assert cli.returncode == 2, cli.stdout + cli.stderr
    line = cli.stderr.strip().splitlines()[-1]
    assert str(corrupt_telemetry) in line and "corrupt" in line
    assert "missing from index idx_llm_session" in line
    assert digest(corrupt_telemetry) == before


def test_doctor_names_the_damage_quick_check_misses(corrupt_telemetry):
    before = digest(corrupt_telemetry)
    cli = run_cli("doctor", "--store", "telemetry", "--url", str(corrupt_telemetry))
    assert cli.returncode == 1, cli.stdout + cli.stderr
    assert "no problems found" not in cli.stdout
    assert "missing from index idx_llm_session" in cli.stdout
    assert digest(corrupt_telemetry) == before


def test_doctor_names_a_corrupt_session_file(corrupt_sessions):
    cli = run_cli("doctor", "--store", "sessions", "--url", str(corrupt_sessions), "--json")
    assert cli.returncode == 1
    problems = json.loads(cli.stdout)["sessions"]["problems"]
    assert any("corrupt" in p and str(corrupt_sessions) in p for p in problems)


def test_settled_store_is_not_checked_again(tmp_path, monkeypatch):
    """A settled open reads the version and nothing else: no O(size) check on that path."""
    db = tmp_path / "t.db"
    migrate.upgrade("telemetry", db)
    calls = []
    real = migrate.sqlite_check
    monkeypatch.setattr(migrate, "sqlite_check", lambda *a: calls.append(a[1]) or real(*a))
    assert migrate.upgrade("telemetry", db).up_to_date
    assert calls == []


# --------------------------------------------------------------------------- identity rule
@pytest.mark.parametrize("relpath", sorted(
    f"{p.parent.name}/{p.name}" for folder in ("legacy-sessions", "legacy-sessions-history")
    for p in (FIXTURES / folder).glob("*.db")))
def test_every_upstream_state_db_is_a_session_store(relpath):
    con = sqlite3.connect(f"{(FIXTURES / relpath).as_uri()}?mode=ro", uri=True)
    try:
        assert identify_session_store(con) == "upstream"
    finally:
        con.close()


@pytest.mark.parametrize("make", ["other-app", "telemetry-legacy", "telemetry-ours", "text"])
def test_foreign_files_are_refused_by_the_session_store(tmp_path, make):
    from hermes_data import SessionStore

    if make == "other-app":
        db = other_application_db(tmp_path / "app.db")
    elif make == "telemetry-legacy":
        db = writable_copy(TELEMETRY_V16, tmp_path)
    elif make == "telemetry-ours":
        db = tmp_path / "telemetry.db"
        migrate.upgrade("telemetry", db)
    else:
        db = tmp_path / "notes.db"
        db.write_text("just some text, long enough to be looked at by SQLite\n" * 40)
    before = digest(db)
    mode = stat.S_IMODE(db.stat().st_mode)
    for args in (("upgrade", "--store", "sessions", "--url", str(db)),
                 ("search", "anything", "--url", str(db))):
        cli = run_cli(*args)
        assert cli.returncode == 2, (args, cli.stdout, cli.stderr)
        line = cli.stderr.strip().splitlines()[-1]
        assert str(db) in line and ("not a session store" in line or "not an SQLite" in line)
        assert digest(db) == before and stat.S_IMODE(db.stat().st_mode) == mode
    status = run_cli("status", "--store", "sessions", "--url", str(db))
    assert status.returncode == 2 and str(db) in status.stderr
    doctor = run_cli("doctor", "--store", "sessions", "--url", str(db))
    assert doctor.returncode == 1 and str(db) in doctor.stdout
    # Both open paths: identified on the writer (this build's default policy writes nothing
    # on connect) and by the read-only probe (configured WAL would rewrite the header).
    from hermes_data.engine import SqliteSettings

    for settings in (None, SqliteSettings(journal_mode="wal"), SqliteSettings(journal_mode="delete"),
                     SqliteSettings(journal_mode="wal", sqlite_version=(3, 51, 3))):
        with pytest.raises(NotAHermesDatabaseError, match=str(db)):
            SessionStore(db, settings=settings)
        assert digest(db) == before and stat.S_IMODE(db.stat().st_mode) == mode


def test_zero_byte_file_is_created_as_a_session_store(tmp_path):
    db = tmp_path / "state.db"
    db.touch()
    assert run_cli("upgrade", "--store", "sessions", "--url", str(db)).returncode == 0
    assert migrate.check("sessions", db) is not None
    assert stat.S_IMODE(db.stat().st_mode) == 0o600


# --------------------------------------------------------------------------- looking commands
@pytest.mark.parametrize("args", [
    ("check",), ("check", "--store", "sessions"), ("search", "x"), ("prune",),
    ("copy", "--from", "{home}/missing.db", "--to", "{home}/target.db"),
    ("copy", "--store", "sessions", "--from", "{home}/missing.db", "--to", "{home}/target.db"),
])
def test_looking_commands_create_nothing(_isolated_home, args):
    home = _isolated_home
    cli = run_cli(*(a.format(home=home) for a in args))
    assert cli.returncode == 2, cli.stdout + cli.stderr
    assert "not created yet" in cli.stderr and "hermes-data upgrade" in cli.stderr
    assert list(home.iterdir()) == []


@pytest.mark.parametrize("args", [("status",), ("doctor",), ("status", "--json"), ("doctor", "--json")])
def test_status_and_doctor_on_a_fresh_home_say_not_created(_isolated_home, args):
    cli = run_cli(*args)
    assert cli.returncode == 0, cli.stdout + cli.stderr
    if "--json" not in args:
        assert "not created yet" in cli.stdout
    assert list(_isolated_home.iterdir()) == []


def test_telemetry_store_on_a_missing_file_creates_it_owner_only(tmp_path):
    from hermes_data.telemetry import TelemetryStore, record_llm_call, start_run, stats_summary

    db = tmp_path / "sub" / "telemetry.db"
    with TelemetryStore(db) as store:
        start_run(store, "s1", "m", "cli", None)
        record_llm_call(store, "s1", None, "m", "p", tokens_in=1, tokens_out=2, cost_usd=0.0,
                        latency_ms=1)
        assert stats_summary(store, 24).tokens_out == 2
    assert stat.S_IMODE(db.stat().st_mode) == 0o600
    assert migrate.status("telemetry", db).revision == migrate.head_revision("telemetry")


def test_export_writes_owner_only(tmp_path):
    from hermes_data import SessionStore

    db = tmp_path / "state.db"
    with SessionStore(db) as store:
        store.create_session("abc", "cli")
        store.append_messages_batch("abc", [{"role": "user", "content": "hi"}])
    out = tmp_path / "t.jsonl"
    out.write_text("old")
    out.chmod(0o644)
    cli = run_cli("export", "abc", "--url", str(db), "-o", str(out))
    assert cli.returncode == 0, cli.stderr
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert json.loads(out.read_text().splitlines()[0])["content"] == "hi"
    fresh = tmp_path / "fresh.jsonl"
    assert run_cli("export", "abc", "--url", str(db), "-o", str(fresh)).returncode == 0
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o600


# --------------------------------------------------------------------------- symbolic links
def test_dangling_link_is_refused_everywhere(tmp_path):
    from hermes_data import SessionStore
    from hermes_data.telemetry import TelemetryStore

    link = tmp_path / "state.db"
    link.symlink_to(tmp_path / "elsewhere" / "real.db")
    with pytest.raises(StoreLinkError, match="dangling"):
        SessionStore(link)
    with pytest.raises(StoreLinkError, match="dangling"):
        TelemetryStore(link)
    for store in ("sessions", "telemetry"):
        cli = run_cli("upgrade", "--store", store, "--url", str(link))
        assert cli.returncode == 2 and "dangling symbolic link" in cli.stderr
        doc = run_cli("doctor", "--store", store, "--url", str(link))
        assert doc.returncode == 1 and "dangling symbolic link" in doc.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.db"]


def test_a_link_is_followed_to_its_target_and_named(tmp_path):
    from hermes_data import SessionStore

    real_dir = tmp_path / "real"
    real_dir.mkdir()
    target = real_dir / "state.db"
    migrate.upgrade("sessions", target)
    target.chmod(0o644)
    link = tmp_path / "state.db"
    link.symlink_to(target)
    with SessionStore(link) as store:
        store.create_session("abc", "cli")
    with SessionStore(target, read_only=True) as direct:
        assert direct.get_session("abc") is not None  # the write went to the target
    assert link.is_symlink()
    assert stat.S_IMODE(target.stat().st_mode) == 0o600  # permissions set on the target
    st = migrate.status("sessions", link)
    assert st.link_target == str(target.resolve())
    doc = run_cli("doctor", "--store", "sessions", "--url", str(link), "--json")
    report = json.loads(doc.stdout)["sessions"]
    assert report["facts"]["files"]["link_target"] == str(target.resolve())
    assert any("symbolic link" in w and str(link) in w for w in report["warnings"])
    human = run_cli("status", "--store", "sessions", "--url", str(link))
    assert human.returncode == 0
    assert f"symbolic link to: {target.resolve()}" in human.stdout


def test_not_created_error_is_a_hermes_data_error(tmp_path):
    with pytest.raises(StoreNotCreatedError, match="hermes-data upgrade"):
        migrate.check("sessions", tmp_path / "missing.db")
    assert not (tmp_path / "missing.db").exists()


HOLD_EXCLUSIVE = """
import sqlite3, sys, time
con = sqlite3.connect(sys.argv[1], isolation_level=None)
con.execute("BEGIN EXCLUSIVE")
print("held", flush=True)
time.sleep(float(sys.argv[2]))
con.execute("ROLLBACK")
"""


def test_a_locked_file_is_contention_not_corruption(tmp_path):
    """The identity probe meets a lock: the open waits and succeeds, it never calls it corrupt."""
    import subprocess
    import sys

    from hermes_data import SessionStore
    from hermes_data.engine import SqliteSettings

    db = tmp_path / "state.db"
    with SessionStore(db, settings=SqliteSettings(journal_mode="delete")) as store:
        store.create_session("abc", "cli")
    holder = subprocess.Popen([sys.executable, "-c", HOLD_EXCLUSIVE, str(db), "2.5"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with SessionStore(db, settings=SqliteSettings(journal_mode="delete"),
                          open_patience_s=20) as store:
            assert store.get_session("abc") is not None
    finally:
        holder.wait(30)
