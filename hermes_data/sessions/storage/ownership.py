"""Process-wide bookkeeping of :class:`~hermes_data.sessions.store.SessionStore` instances:
registry ownership, the fork rule (docs/sessions-storage.md §3.2) and the last failed
construction (what ``format_session_db_unavailable`` words, docs/sessions-agent.md §3.12).

The store facade calls two hooks — :func:`track` at the end of a successful construction
and :func:`intercept_close` first thing in ``close()`` — and holds no other logic for
them. The shared-handle registry (:mod:`.registry`) marks the stores it owns here and
installs its ``release``; ``close()`` on an owned store is then a release, so
``with acquire(path) as store:`` works.

Fork rule ``[D]``: one ``os.register_at_fork(after_in_child=…)`` hook marks every store
this process had (registry-owned or not) as *forked* in the child: its backend is replaced
by one whose every use raises :class:`~hermes_data.errors.ConfigurationError`, and
``close()`` becomes a no-op. The inherited backend — connections that belong to the parent
— is kept referenced for the child's lifetime, so neither ``close()`` nor garbage collection
checkpoints it or unlinks the parent's ``-wal``/``-shm`` sidecars. (The token writers'
own at-fork hook still empties their queues: :mod:`.token_writer`.)
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from typing import Any, Callable, NoReturn

from hermes_data.errors import ConfigurationError

__all__ = ["ForkedBackend", "install_release", "intercept_close", "is_forked", "is_owned",
           "last_init_error", "record_init_error", "set_owned", "track"]

log = logging.getLogger("hermes_data.sessions.storage.ownership")

_lock = threading.Lock()
#: Every store constructed in this process (weakly).
_instances: "weakref.WeakSet[Any]" = weakref.WeakSet()
#: Stores the registry owns: ``close()`` releases them.
_owned: "weakref.WeakSet[Any]" = weakref.WeakSet()
#: Stores inherited across ``os.fork()``: unusable, ``close()`` a no-op.
_forked: "weakref.WeakSet[Any]" = weakref.WeakSet()
#: The backends inherited from the parent, never closed nor collected in the child.
_inherited: list[Any] = []
#: The registry's release, installed when :mod:`.registry` is imported.
_release: Callable[[Any], bool] | None = None


class ForkedBackend:
    """Stands in for the backend of a store inherited across ``os.fork()``: every attribute
    access raises :class:`ConfigurationError` naming the store and both processes."""

    def __init__(self, where: str, parent_pid: int) -> None:
        self.__dict__["_message"] = (
            f"{where}: this session store was opened by process {parent_pid} and inherited "
            f"across os.fork() by process {os.getpid()}; its connections are the parent's. "
            "Open a new store (or registry.acquire()) in the child")

    def __getattr__(self, name: str) -> NoReturn:
        raise ConfigurationError(self.__dict__["_message"])

    def __setattr__(self, name: str, value: Any) -> NoReturn:
        raise ConfigurationError(self.__dict__["_message"])


def track(store: Any) -> None:
    """Record a newly opened store (the fork rule covers every tracked store)."""
    _instances.add(store)


def install_release(release: Callable[[Any], bool]) -> None:
    """Install the registry's ``release(store) -> bool`` used by owned stores' ``close()``."""
    global _release
    _release = release


def set_owned(store: Any, owned: bool) -> None:
    """Mark (or unmark) ``store`` as owned by the shared-handle registry."""
    with _lock:
        if owned:
            _owned.add(store)
        else:
            _owned.discard(store)


def is_owned(store: Any) -> bool:
    """Whether the registry owns ``store`` (its ``close()`` is a release)."""
    return store in _owned


def is_forked(store: Any) -> bool:
    """Whether ``store`` was inherited across ``os.fork()`` by this process."""
    return store in _forked


def intercept_close(store: Any) -> bool:
    """The ``close()`` hook: True when the call is handled here — a forked store (no-op) or
    a registry-owned one (released) — and the store must not close itself."""
    if store in _forked:
        log.debug("close() of a store inherited across fork: no-op (pid %d)", os.getpid())
        return True
    if store in _owned and _release is not None:
        if _release(store):
            return True
        set_owned(store, False)  # unknown to the registry: an ordinary close
    return False


def _after_fork_in_child() -> None:
    # The child runs one thread: a fresh lock (the parent's may have been held at fork).
    global _lock
    _lock = threading.Lock()
    parent = os.getppid()
    for store in list(_instances):
        if store in _forked:
            continue
        backend = store.__dict__.get("_backend")
        if backend is None:
            continue
        _inherited.append(backend)
        where = str(getattr(backend, "path", "session store"))
        store.__dict__["_backend"] = ForkedBackend(where, parent)
        _forked.add(store)
        _owned.discard(store)


os.register_at_fork(after_in_child=_after_fork_in_child)


_init_error_lock = threading.Lock()
_last_init_error: tuple[str, BaseException] | None = None


def last_init_error() -> tuple[str, BaseException] | None:
    """``(path, exception)`` of the most recent failed :class:`SessionStore` construction in
    this process (never cleared by a later success: another thread's cause must survive)."""
    with _init_error_lock:
        return _last_init_error


def record_init_error(where: str, exc: BaseException) -> None:
    """Remember a failed construction of the store at ``where`` (the constructor calls it)."""
    global _last_init_error
    with _init_error_lock:
        _last_init_error = (where, exc)
