"""Damaged copies of the shared legacy ``state.db`` (``state_fork_v21``) and logical digests
for the repair and quarantine tests (storage spec §3.3–§3.4)."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
import tempfile
from pathlib import Path

from tests.conftest import copy_fixture

LEGACY_REL = "legacy-sessions/state_fork_v21.db"
_SKIP = ("sqlite_", "messages_fts", "messages_cjk_", "fts_v22_trash_")


def legacy_copy(directory: Path, name: str = "state.db") -> Path:
    """A fresh copy of the legacy fixture named ``name`` in ``directory``."""
    src = copy_fixture(LEGACY_REL, directory)
    dest = directory / name
    if src != dest:
        src.rename(dest)
    dest.chmod(0o600)
    return dest


def duplicate_schema_row(path: Path, name: str = "messages_fts", *, differ: bool = False) -> None:
    """Insert a second ``sqlite_master`` row for ``name`` (``differ``: with other SQL text) —
    from then on every statement on the file fails with ``malformed database schema``."""
    con = sqlite3.connect(path, isolation_level=None)
    try:
        con.execute("PRAGMA writable_schema = ON")
        extra = " || ' /* copy */'" if differ else ""
        con.execute("INSERT INTO sqlite_master (type, name, tbl_name, rootpage, sql) "
                    f"SELECT type, name, tbl_name, rootpage, sql{extra} FROM sqlite_master "
                    "WHERE name = ? AND type = 'table'", (name,))
    finally:
        con.close()


def truncate(path: Path, fraction: float = 0.5) -> None:
    """Cut the file to ``fraction`` of its pages (a lost tail)."""
    size = path.stat().st_size
    page = 4096
    with open(path, "r+b") as f:
        f.truncate(max(page, int(size * fraction) // page * page))


def zero(path: Path) -> None:
    """Overwrite the whole file with NUL bytes (same size)."""
    size = path.stat().st_size
    path.write_bytes(bytes(size))


def file_digest(path: Path) -> str | None:
    """SHA-256 of the bytes (None when absent)."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


def table_digests(path: Path) -> dict[str, tuple[int, str] | None]:
    """``{table: (rows, sha256 of the rows in rowid order)}`` for every readable ordinary table
    (None: unreadable), read from a *copy* (db and ``-wal``) with ``writable_schema=ON``, so the
    file itself is never opened."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "copy.db"
        shutil.copyfile(path, copy)
        wal = Path(f"{path}-wal")
        if wal.exists():
            shutil.copyfile(wal, Path(f"{copy}-wal"))
        con = sqlite3.connect(copy)
        out: dict[str, tuple[int, str] | None] = {}
        try:
            con.execute("PRAGMA writable_schema = ON")
            names = [r[0] for r in con.execute(
                "SELECT DISTINCT name FROM sqlite_master WHERE type = 'table' AND rootpage <> 0")]
            for name in sorted(n for n in names if not n.startswith(_SKIP)):
                try:
                    rows = con.execute(f'SELECT * FROM "{name}" ORDER BY rowid').fetchall()
                except sqlite3.DatabaseError:
                    out[name] = None
                    continue
                out[name] = (len(rows), hashlib.sha256(repr(rows).encode()).hexdigest())
        except sqlite3.DatabaseError:
            return {}
        finally:
            con.close()
        return out


def opens_without_error(path: Path) -> bool:
    """A copy answers ``integrity_check`` = ok and counts ``messages``."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "copy.db"
        shutil.copyfile(path, copy)
        wal = Path(f"{path}-wal")
        if wal.exists():
            shutil.copyfile(wal, Path(f"{copy}-wal"))
        con = sqlite3.connect(copy)
        try:
            ok = con.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
            con.execute("SELECT COUNT(*) FROM messages").fetchone()
            return ok
        except sqlite3.DatabaseError:
            return False
        finally:
            con.close()
