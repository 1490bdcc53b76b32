"""Whether a SQLite file is damaged, and how that is refused: the one check the upgrade
path, ``doctor`` and the session store's whole-file maintenance share (``PRAGMA
quick_check`` / ``integrity_check``, read-only), and the one-line refusal.

Its own module so a store can ask it without importing the migration runner (which names
the stores' migration modules): the import graph stays acyclic.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from hermes_data.errors import SQLITE_CANTOPEN, SQLITE_READONLY, CorruptDatabaseError

__all__ = ["CHECK_LINES", "cannot_open_or_write", "corrupt_error", "is_sqlite_lock_conflict",
           "sqlite_check"]

#: At most this many lines of a failing check are kept (the message names the first).
CHECK_LINES = 10


def sqlite_check(con: sqlite3.Connection, pragma: str) -> list[str]:
    """Run ``PRAGMA quick_check`` or ``integrity_check`` (read-only); ``[]`` when ``ok``,
    else SQLite's first :data:`CHECK_LINES` lines naming the damage."""
    if pragma not in ("quick_check", "integrity_check"):
        raise ValueError(pragma)
    try:
        rows = [str(r[0]) for r in con.execute(f"PRAGMA {pragma}({CHECK_LINES})").fetchall()]
    except sqlite3.DatabaseError as exc:  # e.g. "database disk image is malformed"
        if is_sqlite_lock_conflict(exc):
            raise  # contention, not damage: the caller's retry policy decides
        if cannot_open_or_write(exc):
            raise  # cannot open / read-only (issue 31), not damage: see not_writable()
        return [str(exc)]
    if rows == ["ok"]:
        return []
    lines = [line.strip() for row in rows for line in row.splitlines()]
    return [line for line in lines if line and not line.startswith("*** in database")]


def is_sqlite_lock_conflict(exc: BaseException) -> bool:
    """A SQLite lock conflict (busy or locked) — contention, never damage. The classifier is
    imported here: only a failed statement gets this far, and a cold start need not load it."""
    from hermes_data.locking import SQLITE_LOCK_KINDS, is_lock_conflict

    return is_lock_conflict(exc, kinds=SQLITE_LOCK_KINDS)


def corrupt_error(path: Path, pragma: str, problems: list[str], store: str) -> CorruptDatabaseError:
    """The one-line refusal of a damaged file."""
    shown = "; ".join(problems[:3]) + (" …" if len(problems) > 3 else "")
    return CorruptDatabaseError(
        f"{path}: corrupt (PRAGMA {pragma}: {shown}); refused, the file was left unchanged "
        f"(details: hermes-data doctor --store {store} --url {path})")


def cannot_open_or_write(exc: BaseException) -> bool:
    """Is ``exc`` SQLite's ``SQLITE_CANTOPEN`` / ``SQLITE_READONLY`` (any extended code)?"""
    from hermes_data.locking import driver_error, sqlite_result_code  # failure paths only

    orig = driver_error(exc)
    code = sqlite_result_code(orig)
    if code is not None:
        return code in (SQLITE_READONLY, SQLITE_CANTOPEN)
    text = str(orig).lower()
    return "unable to open database file" in text or "readonly database" in text
