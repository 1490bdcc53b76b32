"""Live-handle guards on the transcript hot path (§8.11): the one-``stat`` fast path and the
``application_id`` read folded into the admission statement keep every guarantee."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from hermes_data.engine import SqliteSettings
from hermes_data.sessions.errors import DeletedWalGenerationError, StateDbReplacedError
from hermes_data.sessions.store import SessionStore


pytestmark = pytest.mark.sqlite_only("replaced-file / WAL-generation guards")

WAL = SqliteSettings(busy_timeout_ms=1000, journal_mode="wal")


def _settle(s: SessionStore) -> None:
    """Let the directory timestamp age past the settle margin and take one full check."""
    time.sleep(0.08)
    s.append_message("a", "user", "settling write")
    assert s.backend._identity._dir_ok is not None  # the fast path is armed


def test_fast_path_costs_one_stat_per_write(tmp_path, monkeypatch):
    with SessionStore(tmp_path / "state.db", settings=WAL) as s:
        s.create_session("a", "cli")
        _settle(s)
        calls = []
        real = os.stat
        monkeypatch.setattr(os, "stat", lambda p, *a, **k: calls.append(str(p)) or real(p, *a, **k))
        for i in range(5):
            s.append_message("a", "user", f"m{i}")
        monkeypatch.undo()
        assert calls == [str(tmp_path)] * 5


def test_replacing_the_file_is_caught_with_the_fast_path_armed(tmp_path):
    path, other = tmp_path / "state.db", tmp_path / "restored.db"
    with SessionStore(other):
        pass
    with SessionStore(path, settings=WAL) as s:
        s.create_session("a", "cli")
        _settle(s)
        os.replace(other, path)
        with pytest.raises(StateDbReplacedError, match="replaced"):
            s.append_message("a", "user", "lost?")


def test_a_moved_wal_is_caught_with_the_fast_path_armed(tmp_path):
    path = tmp_path / "state.db"
    with SessionStore(path, settings=WAL) as s:
        s.create_session("a", "cli")
        _settle(s)
        wal = Path(f"{path}-wal")
        os.rename(wal, f"{wal}.moved")
        try:
            with pytest.raises(DeletedWalGenerationError):
                s.append_message("a", "user", "x")
        finally:
            os.rename(f"{wal}.moved", wal)


def test_a_fresh_directory_change_disarms_the_fast_path(tmp_path):
    with SessionStore(tmp_path / "state.db", settings=WAL) as s:
        s.create_session("a", "cli")
        _settle(s)
        (tmp_path / "neighbour.txt").write_text("x")  # any entry change in the directory
        s.append_message("a", "user", "full check again")
        assert s.backend._identity._dir_ok is None  # the new timestamp is too recent to trust


COPY_OVER = textwrap.dedent("""
    import shutil, sys
    shutil.copyfile(sys.argv[1], sys.argv[2])   # same inode, other file's bytes
""")


@pytest.mark.parametrize("batch", [False, True], ids=["single", "batch"])
def test_a_copy_over_the_same_inode_is_caught_by_the_folded_header_read(tmp_path, batch):
    path, other = tmp_path / "state.db", tmp_path / "other.db"
    with SessionStore(other) as o:
        o.create_session("a", "cli")
        o.create_session("z", "cli")  # a different change counter: SQLite drops its page cache
    with SessionStore(path) as s:  # in WAL the -wal keeps this file's pages: only the pread sees it
        s.create_session("a", "cli")
        inode = os.stat(path).st_ino
        # Another process overwrites the file in place (this one never opens it).
        subprocess.run([sys.executable, "-c", COPY_OVER, str(other), str(path)], check=True,
                       timeout=30)
        assert os.stat(path).st_ino == inode
        with pytest.raises(StateDbReplacedError, match="application_id"):
            if batch:
                s.append_messages_batch("a", [{"role": "user", "content": "x"}])
            else:
                s.append_message("a", "user", "x")
        with pytest.raises(StateDbReplacedError):  # sticky
            s.create_session("b", "cli")
    with SessionStore(other) as o:
        assert o.message_count("a") == 0  # nothing was committed into the copied file
