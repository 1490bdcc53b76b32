"""File safety for raw operations on a SQLite session store (spec sessions-ext-storage.md §3.0).

* **Connection tracking.** Every SQLite connection the session store opens (writer, its
  engine's pool, the ``mode=ro`` read pool and read-only handles, repair's guard, scratch and
  probe connections) is a :class:`TrackedConnection`, counted per resolved path, process-wide.
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

import errno
import json
import logging
import os
import sqlite3
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator
from urllib.parse import unquote

from hermes_data import files

log = logging.getLogger("hermes_data.sessions.storage.filesafety")

_track_lock = threading.RLock()
_track_cond = threading.Condition(_track_lock)
_counts: dict[str, int] = {}
#: Paths inside :func:`offline_file_access` → the thread running its body.
_offline: dict[str, int] = {}


def path_key(path: str | os.PathLike[str]) -> str:
    """The key connections are counted under: the resolved absolute path."""
    return os.path.realpath(os.fspath(path))


def _database_key(database: Any, uri: bool) -> str | None:
    name = os.fspath(database)
    if isinstance(name, bytes):
        name = name.decode()
    if uri and name.startswith("file:"):
        name = unquote(name[5:].split("?", 1)[0])
        if name.startswith("//"):  # file:///abs/path
            name = name[2:]
    if not name or name == ":memory:" or name.startswith("file:"):
        return None
    return path_key(name)


def _release(key: str) -> None:
    with _track_lock:
        n = _counts.get(key, 0) - 1
        if n > 0:
            _counts[key] = n
        else:
            _counts.pop(key, None)


class TrackedConnection(sqlite3.Connection):
    """A :class:`sqlite3.Connection` counted under its resolved path until it closes (or is
    collected). Opening one waits while :func:`offline_file_access` runs on another thread."""

    def __init__(self, database: Any, *args: Any, **kwargs: Any) -> None:
        hint = getattr(_resolved, "hint", None)  # tracked_connect's resolved=
        if hint is not None and hint[0] == database and not kwargs.get("uri", False):
            key: str | None = hint[1]
        else:
            key = _database_key(database, bool(kwargs.get("uri", False)))
        me = threading.get_ident()
        with _track_cond:  # waits for an offline_file_access body of another thread
            while key is not None and _offline.get(key, me) != me:
                _track_cond.wait()
            super().__init__(database, *args, **kwargs)
            if key is not None:
                _counts[key] = _counts.get(key, 0) + 1
                self._tracked_key: str | None = key

    def _untrack(self) -> None:
        with _track_lock:  # the count drops exactly once (close, then collection)
            key = self.__dict__.pop("_tracked_key", None)
            if key is not None:
                _release(key)

    def close(self) -> None:  # noqa: D401 - sqlite3 API
        try:
            super().close()
        finally:
            self._untrack()

    def __del__(self) -> None:  # a connection collected without close() (SQLite closes it)
        self._untrack()


#: The path key :func:`tracked_connect` was handed for the connection being made (per thread).
_resolved = threading.local()


def tracked_connect(database: str | os.PathLike[str], *, resolved: str | None = None,
                    **kwargs: Any) -> sqlite3.Connection:
    """``sqlite3.connect`` through the tracking factory (``factory`` may name a subclass).
    ``resolved``: :func:`path_key` of ``database`` as the caller resolved it moments ago (a
    writable open's header lease is keyed by it), so the connection is counted under the
    same key without resolving the path again."""
    kwargs.setdefault("factory", TrackedConnection)
    if not issubclass(kwargs["factory"], TrackedConnection):
        raise TypeError(f"factory {kwargs['factory']!r} is not a TrackedConnection")
    if resolved is None:
        return sqlite3.connect(database, **kwargs)
    _resolved.hint = (database, resolved)
    try:
        return sqlite3.connect(database, **kwargs)
    finally:
        _resolved.hint = None


def unclaimed(key: str) -> bool:
    """No tracked connection to ``key`` (a path already resolved by :func:`path_key`) in this
    process and no other thread inside :func:`offline_file_access` for it: a byte-level
    probe through a descriptor that is never closed under a lock may read it now."""
    with _track_lock:
        return not _counts.get(key, 0) and _offline.get(key, threading.get_ident()) \
            == threading.get_ident()


def live_connections(path: str | os.PathLike[str] | None = None) -> int | dict[str, int]:
    """Open tracked connections to ``path`` in this process (all paths: a dict)."""
    with _track_lock:
        if path is None:
            return dict(_counts)
        return _counts.get(path_key(path), 0)


@contextmanager
def offline_file_access(path: str | os.PathLike[str], what: str) -> Iterator[None]:
    """Run the body with no tracked connection to ``path`` in this process: raise
    :class:`LiveConnectionError` (naming ``what`` was refused) when one is open, and make
    every other thread's new connection to ``path`` wait until the body ends (connections to
    other files are not held up). Re-entrant on one thread."""
    key = path_key(path)
    me = threading.get_ident()
    with _track_cond:
        while _offline.get(key, me) != me:
            _track_cond.wait()
        n = _counts.get(key, 0)
        if n:
            # Imported here: a telemetry process loads this module (every SQLite connection
            # is tracked) but never the session store's errors (issue 14, cold start).
            from hermes_data.sessions.errors import LiveConnectionError

            raise LiveConnectionError(str(path), what, n)
        outer = key in _offline
        _offline[key] = me
    try:
        yield
    finally:
        if not outer:
            with _track_cond:
                _offline.pop(key, None)
                _track_cond.notify_all()


def no_checkpoint_on_close(con: sqlite3.Connection | None, path: Any) -> bool:
    """Set ``SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE`` on a quarantined writer (§3.5: SQLite's own
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
        st, fst = os.stat(path), os.fstat(fd)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (fst.st_dev, fst.st_ino)


def _try_lock(fd: int) -> bool:
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
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
    checks that its inode still names ``path``. An unopenable lock file is not acquired."""
    name = os.fspath(path)
    deadline = clock() + timeout
    fd = -1
    taken = False
    try:
        while True:
            if fd < 0:
                try:
                    fd = os.open(name, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0),
                                 0o600)
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
