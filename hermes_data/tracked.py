"""Connection tracking for SQLite files (generic layer; docs/sessions-storage.md §3.0).

Every SQLite connection the stores open (the session store's writer, its engine's pool, read
pools and read-only handles, repair's guard, scratch and probe connections; the migration
runner's read-only probes; every engine :func:`hermes_data.engine.create_engine_for` makes) is
a :class:`TrackedConnection`, counted per resolved path, process-wide. Foreign code's
connections are invisible (a documented limit).

:func:`offline_access` runs a body while no tracked connection to a file is open and holds
back new tracked opens of that file (other threads wait); the session store's
:func:`hermes_data.sessions.storage.filesafety.offline_file_access` refuses with its own
error through it.

Lives outside ``hermes_data.sessions`` so the engine and the migration runner count their
connections without importing the session store.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator
from urllib.parse import unquote

__all__ = ["TrackedConnection", "live_connections", "offline_access", "path_key",
           "tracked_connect", "unclaimed"]

_track_lock = threading.RLock()
_track_cond = threading.Condition(_track_lock)
_counts: dict[str, int] = {}
#: Paths inside :func:`offline_access` → the thread running its body.
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
def offline_access(path: str | os.PathLike[str],
                   refuse: Callable[[int], BaseException]) -> Iterator[None]:
    """Run the body with no tracked connection to ``path`` in this process: raise
    ``refuse(n)`` (``n`` the open connections) when one is open, and make every other
    thread's new connection to ``path`` wait until the body ends (connections to other
    files are not held up). Re-entrant on one thread."""
    key = path_key(path)
    me = threading.get_ident()
    with _track_cond:
        while _offline.get(key, me) != me:
            _track_cond.wait()
        n = _counts.get(key, 0)
        if n:
            raise refuse(n)
        outer = key in _offline
        _offline[key] = me
    try:
        yield
    finally:
        if not outer:
            with _track_cond:
                _offline.pop(key, None)
                _track_cond.notify_all()
