"""File safety for raw operations on a SQLite session store (docs/sessions-storage.md §3.0).

* **Connection tracking.** Every SQLite connection the session store opens (writer, its
  engine's pool, the ``mode=ro`` read pool and read-only handles, repair's guard, scratch and
  probe connections) is a :class:`~hermes_data.tracked.TrackedConnection`, counted per
  resolved path, process-wide (the tracking is :mod:`hermes_data.tracked`, re-exported here).
  Foreign code's connections are invisible (a documented limit).
* :func:`offline_file_access` refuses with
  :class:`~hermes_data.sessions.errors.LiveConnectionError` while this process has a
  connection to the file, and holds back new tracked opens of that file (other threads wait)
  for its body. Every raw read of a database (zero probe, fingerprint, backup copy, hash) and
  every rename of a database or a sidecar runs inside it: closing a descriptor drops every
  POSIX lock the process holds on that inode, SQLite's included.
* :func:`maintenance_flock`: a bounded, non-blocking ``flock`` on a sidecar lock file whose
  holder records ``{"pid", "start_ticks"}``; a provably dead holder's lock is broken and
  retaken on a fresh inode.
* :func:`holder_scan`: who else holds ``<db>``, ``-wal`` or ``-shm`` (fail closed), with an
  injectable scanner (:func:`set_holder_scanner`).
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from hermes_data import files
from hermes_data.errors import UnsafeLockFileError
from hermes_data.locking import is_advisory_lock_contention
# The connection tracking (TrackedConnection, tracked_connect, live_connections) lives in
# the generic layer, hermes_data/tracked.py: the engine and the migration runner use it too.
from hermes_data.tracked import offline_access, path_key

log = logging.getLogger("hermes_data.sessions.storage.filesafety")

@contextmanager
def offline_file_access(path: str | os.PathLike[str], what: str) -> Iterator[None]:
    """Run the body with no tracked connection to ``path`` in this process: raise
    :class:`LiveConnectionError` (naming ``what`` was refused) when one is open, and make
    every other thread's new connection to ``path`` wait until the body ends (connections to
    other files are not held up). Re-entrant on one thread."""
    def refuse(n: int) -> BaseException:
        # Imported here: a telemetry process loads the tracking (every SQLite connection is
        # tracked) but never the session store's errors (issue 14, cold start).
        from hermes_data.sessions.errors import LiveConnectionError

        return LiveConnectionError(str(path), what, n)

    with offline_access(path, refuse):
        yield


def no_checkpoint_on_close(con: sqlite3.Connection | None, path: Any) -> bool:
    """Set ``SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE`` on a quarantined writer (docs/sessions-storage.md §3.5: SQLite's own
    last-connection checkpoint must not write a damaged image). Python < 3.12 has no
    ``Connection.setconfig``: logs that the close checkpoint remains and returns False."""
    flag = getattr(sqlite3, "SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE", None)
    setconfig = getattr(con, "setconfig", None)
    if con is None or flag is None or setconfig is None:
        log.warning("%s: SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE is not available on Python %s; "
                    "SQLite's own checkpoint at the last close of the quarantined handle "
                    "remains", path, sys.version.split()[0])
        return False
    try:
        setconfig(flag, True)
        return True
    except sqlite3.Error as exc:
        log.warning("%s: could not disable the close checkpoint (%s)", path, exc)
        return False


# ---------------------------------------------------------------------------------------
# Holder scans (fail closed)
# ---------------------------------------------------------------------------------------

HolderScanner = Callable[[Path], "list[tuple[int, str]]"]


def _names_hermes_elsewhere(argv: list[str], home: str) -> bool | None:
    """Does ``argv`` name Hermes / hermes-data (True), and another Hermes home (None)?"""
    text = " ".join(argv).lower()
    if "hermes" not in text:
        return False
    for token in argv:
        if os.path.isabs(token) and "hermes" in token.lower() \
                and not os.path.realpath(token).startswith(home):
            return None  # another Hermes home: not this file's process
    return True


def _default_scan(path: Path) -> list[tuple[int, str]]:
    """psutil over every process: descriptors on the file or its sidecars (deleted inodes
    too); an uninspectable process whose argv names Hermes and no other home counts."""
    import psutil

    base = path_key(path)
    targets = {base, f"{base}-wal", f"{base}-shm"}
    home = os.path.dirname(base)
    me = os.getpid()
    found: set[tuple[int, str]] = set()
    try:
        procs = list(psutil.process_iter(["pid", "cmdline"]))
    except (psutil.Error, OSError) as exc:
        return [(-1, f"the process table could not be read ({exc})")]
    for proc in procs:
        pid = proc.info["pid"]
        if pid == me:
            continue
        try:
            paths = [f.path for f in proc.open_files()]
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
        except psutil.AccessDenied:
            if _names_hermes_elsewhere(list(proc.info.get("cmdline") or []), home):
                found.add((pid, "uninspectable"))
            continue
        found.update((pid, p) for p in paths if p in targets)
        found.update((pid, p) for p in files.deleted_descriptors(pid) if p in targets)
    return sorted(found)


_scanner: HolderScanner = _default_scan


def set_holder_scanner(fn: HolderScanner | None) -> None:
    """Replace the holder scan (tests inject holders); ``None`` restores the psutil scan."""
    global _scanner
    _scanner = fn or _default_scan


def holder_scan(path: str | os.PathLike[str]) -> list[tuple[int, str]]:
    """``(pid, path)`` of other processes holding ``path``, ``-wal`` or ``-shm`` (deleted
    inodes too); ``(-1, reason)`` for a failed scan. Any entry means held (fail closed)."""
    try:
        return list(_scanner(Path(path)))
    except Exception as exc:  # noqa: BLE001 - fail closed
        return [(-1, f"holder scan failed: {exc}")]


# ---------------------------------------------------------------------------------------
# maintenance_flock
# ---------------------------------------------------------------------------------------


def start_ticks(pid: int) -> int | None:
    """Field 22 of ``/proc/<pid>/stat`` (process start time in clock ticks); None unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    try:
        return int(data[data.rindex(b")") + 2:].split()[19])
    except (ValueError, IndexError):
        return None


def holder_dead(record: dict[str, Any]) -> bool:
    """True only when the recorded holder provably died (no such pid, or other start ticks).
    Any doubt answers False (alive)."""
    try:
        pid = int(record["pid"])
    except (KeyError, TypeError, ValueError):
        return False
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    recorded = record.get("start_ticks")
    now = start_ticks(pid)
    return recorded is not None and now is not None and int(recorded) != now


def _read_record(fd: int) -> dict[str, Any] | None:
    try:
        raw = os.pread(fd, 256, 0)
        record = json.loads(raw.decode() or "null")
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return record if isinstance(record, dict) else None


def _write_record(fd: int) -> None:
    body = json.dumps({"pid": os.getpid(), "start_ticks": start_ticks(os.getpid())}).encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, body, 0)


def _same_inode(fd: int, path: str) -> bool:
    try:
        st, fst = os.lstat(path), os.fstat(fd)  # lstat: a link swapped in is not our inode
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (fst.st_dev, fst.st_ino)


def _try_lock(fd: int) -> bool:
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError as exc:
        if is_advisory_lock_contention(exc):
            return False
        raise


@contextmanager
def maintenance_flock(path: str | os.PathLike[str], timeout: float, poll: float = 0.02, *,
                      clock: Callable[[], float] = time.monotonic,
                      sleep: Callable[[float], None] = time.sleep) -> Iterator[bool]:
    """Hold the ``flock`` of the lock file ``path`` (mode 0600); yields whether it was taken
    within ``timeout`` seconds (polled every ``poll``).

    The holder writes ``{"pid", "start_ticks"}`` and erases it before a normal release. On
    contention a provably dead recorded holder's file is unlinked and the lock retaken on a
    fresh inode (a forked child may keep an inherited flock on the old one); each acquire
    checks that its inode still names ``path``. An unopenable lock file is not acquired; a
    symbolic link, hard-linked or non-regular file at ``path`` raises
    :class:`~hermes_data.errors.UnsafeLockFileError` (never followed or written, issue 31)."""
    name = os.fspath(path)
    deadline = clock() + timeout
    fd = -1
    taken = False
    try:
        while True:
            if fd < 0:
                try:  # O_NOFOLLOW, never truncated by the open, 0600 (issue 31)
                    fd = files.open_lock_file(name)
                except UnsafeLockFileError:
                    raise  # a planted link: refused, never "not acquired"
                except OSError as exc:
                    log.warning("%s: lock file unopenable (%s); not acquired", name, exc)
                    break
            if _try_lock(fd):
                if _same_inode(fd, name):
                    _write_record(fd)
                    taken = True
                    break
                os.close(fd)  # the path was unlinked and retaken meanwhile: use the new one
                fd = -1
                continue
            record = _read_record(fd)
            if record is not None and holder_dead(record) and _same_inode(fd, name):
                log.warning("%s: holder pid %s died without releasing; breaking the lock",
                            name, record.get("pid"))
                try:
                    os.unlink(name)
                except FileNotFoundError:
                    pass
                os.close(fd)
                fd = -1
                continue
            if clock() >= deadline:
                break
            sleep(poll)
        yield taken
    finally:
        if fd >= 0:
            if taken:
                try:
                    os.ftruncate(fd, 0)
                except OSError:
                    pass
            os.close(fd)  # closing the descriptor releases the flock
