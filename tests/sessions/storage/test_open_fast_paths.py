"""The settled open's fast paths (issue 14) give the answers of the steps they shortcut: the
one-stat-per-path preflight, the owner-only step skipped only when nothing is left for it,
the zero probe through the header lease, the rollback-journal header answering the stamp
match. Meaningful in both journal modes (the policy's default, or a forced WAL)."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import pytest

from hermes_data.files import header_descriptors
from hermes_data import tracked
from hermes_data.sessions.storage import writability
from hermes_data.sessions.backends import open_file
from hermes_data.sessions.store import SessionStore


def _mode(path: Path | str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def _settled(tmp_path: Path) -> Path:
    path = tmp_path / "state.db"
    with SessionStore(path) as s:
        s.create_session("a", "cli")
    SessionStore(path).close()  # the stamp's path from now on
    return path


def test_settled_facts_match_the_full_preflight(tmp_path):
    base = str(tmp_path / "state.db")
    assert writability.settled_facts(base) == (False, False)  # absent: nothing to repair
    Path(base).touch(mode=0o600)
    assert writability.settled_facts(base) == (True, True)
    Path(f"{base}-wal").touch(mode=0o644)
    os.chmod(f"{base}-wal", 0o644)
    assert writability.settled_facts(base) == (True, False)  # bits fine, not owner-only
    os.chmod(base, 0o400)
    assert writability.settled_facts(base) is None  # lacks owner write: the full preflight
    assert writability.settled_facts(str(tmp_path / "missing" / "state.db")) is None


def test_a_group_readable_sidecar_is_still_made_owner_only(tmp_path):
    path = _settled(tmp_path)
    side = Path(f"{path}-shm")
    side.write_bytes(b"")
    os.chmod(side, 0o644)  # an open with nothing to repair must still harden it
    os.chmod(path, 0o640)
    with SessionStore(path):
        pass
    assert _mode(path) == 0o600
    if side.exists():  # a WAL connection's last close may remove it
        assert _mode(side) == 0o600


def test_a_linked_store_hardens_the_target_and_its_sidecars(tmp_path):
    real = _settled(tmp_path)
    link = tmp_path / "link.db"
    link.symlink_to(real)
    side = Path(f"{real}-wal")
    if not side.exists():
        side.write_bytes(b"")  # an empty WAL: SQLite treats it as no frames
    os.chmod(side, 0o644)
    with SessionStore(link) as s:  # the path has a link: the owner-only step runs
        s.create_session("b", "cli")
    assert _mode(real) == 0o600
    if side.exists():
        assert _mode(side) == 0o600


def test_the_lease_probe_answers_like_the_plain_probe(tmp_path):
    class Handle:
        _header = None

    path = _settled(tmp_path)
    h = Handle()
    assert open_file.zero_probe(h, path) is False
    assert h._header is not None  # the open that follows keeps this lease
    h._header.release()
    zeroed = tmp_path / "zeroed.db"
    zeroed.write_bytes(b"\0" * 8192)
    h = Handle()
    assert open_file.zero_probe(h, zeroed) is True
    assert h._header is None  # given back before the quarantine may move the file
    empty = tmp_path / "empty.db"
    empty.touch()
    assert open_file.zero_probe(Handle(), empty) is True
    os.mkfifo(tmp_path / "fifo.db")
    assert open_file.zero_probe(Handle(), tmp_path / "fifo.db") is False  # never opened


def test_a_live_connection_defers_to_the_plain_probe(tmp_path, monkeypatch):
    class Handle:
        _header = None

    path = _settled(tmp_path)
    calls = []
    monkeypatch.setattr(open_file, "is_zeroed_state_db", lambda p: calls.append(p) or False)
    con = tracked.tracked_connect(str(path))
    try:
        h = Handle()
        assert open_file.zero_probe(h, path) is False
        assert calls == [path]
    finally:
        con.close()
        if h._header is not None:
            h._header.release()


def test_zeroed_file_is_still_quarantined_at_open(tmp_path):
    path = tmp_path / "state.db"
    path.write_bytes(b"\0" * 4096)
    with SessionStore(path) as s:
        assert any("zeroed" in r for r in s.open_repairs), s.open_repairs
        s.create_session("a", "cli")
    assert header_descriptors() == (0, 0)


def test_rollback_header_answers_only_rollback_files(tmp_path):
    path = _settled(tmp_path)
    con = sqlite3.connect(path)
    mode = con.execute("PRAGMA journal_mode").fetchone()[0]
    cookie = con.execute("PRAGMA schema_version").fetchone()[0]
    app_id = con.execute("PRAGMA application_id").fetchone()[0]
    con.close()

    class Header:
        def read(self) -> bytes:
            with open(path, "rb") as f:  # no connection of this process is open now
                return f.read(100)

    got = open_file.rollback_header_stamp(Header())  # type: ignore[arg-type]
    if mode == "wal":
        assert got is None  # page 1 may be newer in the WAL: the connection answers
    else:
        assert got == (cookie, app_id)
    assert open_file.rollback_header_stamp(None) is None


@pytest.mark.parametrize("journal", ["delete", "wal"])
def test_a_settled_open_counts_its_writer_under_the_resolved_path(tmp_path, journal):
    from hermes_data.engine import SqliteSettings
    path = tmp_path / "state.db"
    settings = SqliteSettings(busy_timeout_ms=1000, journal_mode=journal)
    with SessionStore(path, settings=settings) as s:
        s.create_session("a", "cli")
    link = tmp_path / "alias.db"
    link.symlink_to(path)
    with SessionStore(link, settings=settings):
        assert tracked.live_connections(path) >= 1
        assert tracked.live_connections(link) >= 1  # the same resolved key
    assert tracked.live_connections(path) == 0


def test_a_zeroed_verdict_of_the_plain_probe_also_gives_the_lease_back(tmp_path, monkeypatch):
    class Handle:
        _header = None

    zeroed = tmp_path / "zeroed.db"
    zeroed.write_bytes(b"\0" * 4096)
    monkeypatch.setattr(open_file, "unclaimed", lambda key: False)  # as if another thread
    monkeypatch.setattr(open_file, "is_zeroed_state_db", lambda p: True)  # examined it
    h = Handle()
    assert open_file.zero_probe(h, zeroed) is True
    assert h._header is None
