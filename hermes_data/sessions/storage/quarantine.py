"""Zeroed files, the startup quarantine lock and orphan sidecars
(docs/sessions-storage.md §3.4).

A ``state.db`` that is empty or all NUL bytes (a crash between ``creat`` and the first
commit, a filesystem that lost its blocks) used to become a fresh store silently. A writable
open now moves it aside to ``<db>.zeroed-<YYYYmmdd-HHMMSS>-<pid>[-n].bak`` (sidecars follow
with their suffix) under ``<db>.quarantine.lock`` — held from "the file is absent or zeroed"
through the first schema commit, so two processes creating one file never quarantine each
other's — and names the ``.bak`` in ``open_repairs``. A ``-wal``/``-shm``/``-journal``
without a main file is moved to ``*.orphan-<stamp>-<pid>`` first (a new file beside an old
WAL would replay its frames). Read-only opens of a zeroed file raise
:class:`~hermes_data.sessions.errors.StateDbZeroedError` and rename nothing.
"""

from __future__ import annotations

import logging
import os
import stat
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from hermes_data.errors import ConfigurationError
from hermes_data.files import SQLITE_MAGIC, make_private_dirs
from hermes_data.isolation import ensure_test_isolation
from hermes_data.sessions.errors import LiveConnectionError, StateDbZeroedError
from hermes_data.sessions.storage.filesafety import holder_scan, maintenance_flock, offline_file_access

log = logging.getLogger("hermes_data.sessions.storage.quarantine")

#: ``<db>.quarantine.lock`` patience and poll (seconds).
QUARANTINE_LOCK_TIMEOUT_S = 5.0
QUARANTINE_LOCK_POLL_S = 0.02
SIDECAR_SUFFIXES = ("-wal", "-shm", "-journal")

#: Injectable wall clock (names of moved files).
now: Callable[[], float] = time.time


def _refuse_url(path: str | os.PathLike[str]) -> None:
    text = os.fspath(path)
    if isinstance(text, str) and text.startswith(("postgresql", "postgres:")):
        raise ConfigurationError(f"{text}: file quarantine is SQLite only (docs/sessions-storage.md §3.10)")


def is_zeroed_state_db(path: str | os.PathLike[str], *, probe_bytes: int = 100,
                       force: bool = False) -> bool:
    """True for a regular file of size 0 or whose first ``max(16, probe_bytes)`` bytes are all
    NUL; False for anything else, a non-regular file (never blocks on a FIFO), a ``SQLite
    format 3`` header, or — without ``force`` — a file this process has a connection to."""
    p = Path(path)
    ensure_test_isolation(p)
    try:
        st = os.stat(p)
    except OSError:
        return False
    if not stat.S_ISREG(st.st_mode):
        return False
    if st.st_size == 0:
        return True
    n = max(16, probe_bytes)
    try:
        if force:
            data = _read_head(p, n)
        else:
            with offline_file_access(p, "probe for a zeroed file"):
                data = _read_head(p, n)
    except (LiveConnectionError, OSError):
        return False
    return zeroed_head(data)


def zeroed_head(data: bytes) -> bool:
    """The zero probe's verdict on a non-empty regular file's first bytes: all NUL (an
    ``SQLite format 3`` header, or any other byte, is not zeroed)."""
    if data.startswith(SQLITE_MAGIC):
        return False
    return bool(data) and data.count(0) == len(data)


def _read_head(p: Path, n: int) -> bytes:
    fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        return os.pread(fd, n, 0)
    finally:
        os.close(fd)


@contextmanager
def quarantine_cross_process_lock(path: str | os.PathLike[str],
                                  timeout: float | None = None) -> Iterator[bool]:
    """Hold ``<db>.quarantine.lock``; yields whether it was taken within ``timeout`` seconds
    (default :data:`QUARANTINE_LOCK_TIMEOUT_S`, 5 s)."""
    _refuse_url(path)
    p = Path(path)
    ensure_test_isolation(p)
    wait = QUARANTINE_LOCK_TIMEOUT_S if timeout is None else timeout
    with maintenance_flock(f"{p}.quarantine.lock", wait, QUARANTINE_LOCK_POLL_S) as got:
        yield got


def _stamp() -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.localtime(now()))


def _free_name(base: str, suffix: str, sidecars: bool) -> Path:
    n = 0
    while True:
        name = f"{base}{'' if n == 0 else f'-{n}'}{suffix}"
        parts = [name, *(f"{name}{s}" for s in SIDECAR_SUFFIXES)] if sidecars else [name]
        if not any(os.path.lexists(x) for x in parts):
            return Path(name)
        n += 1


def quarantine_zeroed_state_db(path: str | os.PathLike[str], *,
                               already_locked: bool = False) -> Path | None:
    """Move a zeroed database (and its sidecars) aside; returns the ``.bak`` path, or None
    when nothing was moved: the lock was not taken (ERROR), the file is gone or no longer
    zeroed (another process handled it), or another process holds it (ERROR: a rename under a
    live holder splits the store)."""
    _refuse_url(path)
    p = Path(path)
    ensure_test_isolation(p)
    if already_locked:
        return _quarantine_locked(p)
    with quarantine_cross_process_lock(p) as got:
        if not got:
            log.error("%s: zeroed file left in place: %s.quarantine.lock was not acquired", p, p)
            return None
        return _quarantine_locked(p)


def _quarantine_locked(p: Path) -> Path | None:
    if not is_zeroed_state_db(p):
        return None
    holders = holder_scan(p)
    if holders:
        log.error("%s: zeroed file left in place: held by %s", p,
                  ", ".join(f"pid {pid} {what}" if pid > 0 else what for pid, what in holders))
        return None
    with offline_file_access(p, "move the zeroed file aside"):
        size = os.stat(p).st_size
        target = _free_name(f"{p}.zeroed-{_stamp()}-{os.getpid()}", ".bak", sidecars=True)
        os.rename(p, target)
        for suffix in SIDECAR_SUFFIXES:
            side = Path(f"{p}{suffix}")
            if os.path.lexists(side):
                os.rename(side, f"{target}{suffix}")
        if os.path.lexists(p) or os.stat(target).st_size != size:
            raise OSError(f"{p}: quarantine to {target} could not be verified")
    log.error("%s: the database file was zeroed (%d bytes, no SQLite header); moved to %s",
              p, size, target)
    return target


def move_orphan_sidecars(path: str | os.PathLike[str]) -> list[Path]:
    """With no main file, move each ``-wal``/``-shm``/``-journal`` to
    ``<sidecar>.orphan-<stamp>-<pid>``; returns the new names."""
    p = Path(path)
    if os.path.lexists(p):
        return []
    moved = []
    with offline_file_access(p, "move orphan sidecars aside"):
        for suffix in SIDECAR_SUFFIXES:
            side = Path(f"{p}{suffix}")
            if not os.path.lexists(side):
                continue
            target = _free_name(f"{side}.orphan-{_stamp()}-{os.getpid()}", "", sidecars=False)
            os.rename(side, target)
            moved.append(target)
    for m in moved:
        log.error("%s: sidecar without a main file moved to %s (its frames are never replayed)",
                  p, m)
    return moved


def _needs_startup_lock(p: Path, zeroed: Callable[[Path], bool] = is_zeroed_state_db) -> bool:
    return not os.path.lexists(p) or zeroed(p)


def writable_open(path: Path, open_once: Callable[[], None], repairs: list[str], *,
                  zeroed: Callable[[Path], bool] | None = None) -> None:
    """A writable open's start (amends docs/sessions.md §8.1 steps 1–3): an absent or zeroed file holds
    the quarantine lock through ``open_once`` (its exclusive create and first schema
    commit); orphan sidecars move first; a zeroed file is quarantined, or
    :class:`StateDbZeroedError` when it could not be and is still zeroed. ``zeroed``: the
    first probe (default :func:`is_zeroed_state_db`; a handle passes one giving the same
    answers through its header lease); inside the lock the default one decides."""
    if not _needs_startup_lock(path, zeroed or is_zeroed_state_db):
        open_once()
        return
    make_private_dirs(path.parent)  # new directories 0700 whatever the umask (issue 31)
    with quarantine_cross_process_lock(path) as locked:
        if not locked:
            log.warning("%s: %s.quarantine.lock not acquired within %.0f s; opening without it",
                        path, path, QUARANTINE_LOCK_TIMEOUT_S)
        if not os.path.lexists(path):
            for moved in move_orphan_sidecars(path):
                repairs.append(f"orphan sidecar moved aside to {moved}")
        elif is_zeroed_state_db(path):
            if locked:
                bak = quarantine_zeroed_state_db(path, already_locked=True)
            else:
                log.error("%s: zeroed file left in place: the quarantine lock was not acquired",
                          path)
                bak = None
            if bak is None:
                if is_zeroed_state_db(path):
                    raise StateDbZeroedError(str(path), "another process holds it, or the "
                                             "quarantine lock was busy")
            else:
                repairs.append(f"zeroed database file moved aside to {bak}; a fresh store was "
                               "created")
        open_once()


def check_read_only(path: Path) -> None:
    """Read-only opens of a zeroed file raise :class:`StateDbZeroedError` (nothing renamed)."""
    if is_zeroed_state_db(path):
        raise StateDbZeroedError(str(path), "a read-only open never moves it")
