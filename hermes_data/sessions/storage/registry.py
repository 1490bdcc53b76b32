"""Shared session-store handles: one writable handle per file per process
(docs/sessions-storage.md §3.2).

Long-lived callers (gateway, agent loop, cron, tools) share one writable
:class:`~hermes_data.sessions.store.SessionStore` per database through :func:`acquire` /
:func:`release` instead of each opening their own (every handle costs a writer connection,
a read pool and descriptors). CLI one-shots, repair and read-only cross-profile reads open
and own their handles.

State, under one lock: *generations* ``key → (store, refcount, identity, retired)``, keyed by
the resolved file path (PostgreSQL: the URL), identity ``(st_dev, st_ino)`` of the file at
open (None when either is 0, and on PostgreSQL); retired generations by store; *opening
events* (one opener per key, the others wait); *teardown barriers* (a key's next open waits
until its last close — checkpoint, sidecar cleanup — is done); per-key *lifecycle locks*
(construction and real closes of one key never overlap). Stores are built and closed
outside the registry lock.

* A live generation whose file was replaced (another identity), or whose store is sticky
  (replaced, split WAL generation, quarantined) or closed, is *retired*: its holders keep
  it until their last release; the next :func:`acquire` opens a new generation.
* ``close()`` on a registry-owned store is :func:`release` (``with acquire(p) as s:``).
* After ``os.fork()`` the child's registry is empty; the inherited stores are unusable and
  their ``close()`` does nothing (:mod:`.ownership`).
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

if TYPE_CHECKING:  # for the annotations only: storage never imports the facade at run time
    from hermes_data.sessions.store import SessionStore

from hermes_data.config import resolve_url, sqlite_path
from hermes_data.errors import ConfigurationError
from hermes_data.isolation import ensure_test_isolation
from hermes_data.sessions.storage import ownership

__all__ = ["RegistryStats", "acquire", "borrow_live_shared_session_dbs", "borrow_live_stores",
           "close_all", "close_shared_session_dbs", "get_shared_session_db",
           "live_shared_session_dbs", "live_stores", "release", "release_or_close",
           "release_shared_session_db", "stats"]

log = logging.getLogger("hermes_data.sessions.storage.registry")

#: How long :func:`close_all` waits for other threads' in-flight teardowns.
CLOSE_ALL_WAIT_S = 30.0


@dataclass(frozen=True)
class RegistryStats:
    """What the registry holds: live generations, retired ones still held, and the sum of
    every generation's reference count."""

    live_generations: int
    retired_generations: int
    total_refcounts: int


@dataclass(eq=False)
class _Generation:
    key: str
    store: SessionStore
    identity: tuple[int, int] | None
    kwargs: dict[str, Any]
    refcount: int = 1
    retired: bool = False


@dataclass
class _State:
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: key → the live generation.
    live: dict[str, _Generation] = field(default_factory=dict)
    #: id(store) → every generation (live and retired).
    by_store: dict[int, _Generation] = field(default_factory=dict)
    #: key → the event its one opener sets when done.
    opening: dict[str, threading.Event] = field(default_factory=dict)
    #: key → events of its in-flight teardowns (set when each close is done).
    teardowns: dict[str, list[threading.Event]] = field(default_factory=dict)
    #: key → teardown barriers ever admitted (an opener notices one that began meanwhile).
    epochs: dict[str, int] = field(default_factory=dict)
    #: key → its lifecycle lock (construction and real closes).
    lifecycle: dict[str, threading.Lock] = field(default_factory=dict)
    #: Bumped by close_all: every opener in flight tears its store down.
    close_all_epoch: int = 0


_state = _State()


def _target(path_or_url: Any) -> tuple[str, Any, bool]:
    """``(key, what SessionStore opens, is a file)``; the guard runs first for files."""
    url = resolve_url("sessions", path_or_url)
    if url.get_backend_name() != "sqlite":
        rendered = url.render_as_string(hide_password=False)
        return rendered, rendered, False
    path = sqlite_path(url)
    if path is None:
        raise ConfigurationError(f"{url!s}: the shared-handle registry needs a SQLite file "
                                 "path or a PostgreSQL URL")
    ensure_test_isolation(path)  # first: before any stat, mkdir, lock or connection (docs/sessions-storage.md §3.0)
    return str(Path(path).expanduser().resolve()), path, True


def _identity(key: str, is_file: bool) -> tuple[int, int] | None:
    if not is_file:
        return None
    try:
        st = os.stat(key)
    except OSError:
        return None
    return None if not st.st_dev or not st.st_ino else (st.st_dev, st.st_ino)


def _unusable(gen: _Generation) -> str | None:
    """Why a live generation must not be handed out any more, or None."""
    backend = gen.store.backend
    if getattr(backend, "_closed", False):
        return "its store was closed"
    if gen.store.quarantined or getattr(backend, "_sticky", None) is not None:
        return f"its store is sticky ({getattr(backend, '_sticky', None) or 'quarantined'})"
    if gen.identity is not None:
        now = _identity(gen.key, True)
        if now != gen.identity:
            return f"the file was replaced (identity {gen.identity} is now {now})"
    return None


def _retire_locked(gen: _Generation, why: str) -> None:
    log.info("%s: shared handle retired: %s (%d holder(s) keep it)", gen.key, why,
             gen.refcount)
    gen.retired = True
    if _state.live.get(gen.key) is gen:
        del _state.live[gen.key]


def _admit_barrier_locked(key: str) -> threading.Event:
    barrier = threading.Event()
    _state.teardowns.setdefault(key, []).append(barrier)
    _state.epochs[key] = _state.epochs.get(key, 0) + 1
    return barrier


def _teardown(gen: _Generation, barrier: threading.Event, lifecycle: threading.Lock) -> None:
    """Really close ``gen``'s store under the key's lifecycle lock, then lift its barrier."""
    try:
        with lifecycle:
            ownership.set_owned(gen.store, False)
            gen.store.close()
    except Exception as exc:  # noqa: BLE001 - the barrier must lift; closing is best effort
        log.warning("%s: closing the shared handle failed: %s", gen.key, exc)
    finally:
        with _state.lock:
            pending = _state.teardowns.get(gen.key, [])
            if barrier in pending:
                pending.remove(barrier)
            if not pending:
                _state.teardowns.pop(gen.key, None)
        barrier.set()


#: What :func:`acquire` opens. The facade registers ``SessionStore`` when it is imported
#: (``hermes_data.sessions.store``): storage knows the registry's rules, not the facade
#: (docs/architecture.md "Layers").
_store_class: "Callable[..., SessionStore] | None" = None


def register_store_class(cls: "Callable[..., SessionStore]") -> None:
    """Make ``cls`` what :func:`acquire` constructs (the facade calls this once)."""
    global _store_class
    _store_class = cls


def acquire(path_or_url: str | os.PathLike[str] | None = None,
            **open_kwargs: Any) -> SessionStore:
    """The process's shared writable store for ``path_or_url`` (None: the configured
    default, ``$HERMES_HOME/state.db``), its reference count raised by one; give it back
    with :func:`release` (or ``close()``, or a ``with`` block).

    ``open_kwargs`` go to :class:`SessionStore` when this call opens the generation; a later
    caller's differing ones are ignored (DEBUG log). ``read_only=True`` is refused with
    :class:`ValueError` (shared handles write; open a read-only store yourself). A SQLite
    path passes the test isolation guard first.
    """
    if open_kwargs.get("read_only"):
        raise ValueError(f"acquire({path_or_url!r}, read_only=True): the registry shares "
                         "writable handles only; open SessionStore(path, read_only=True) "
                         "and close it yourself")
    key, target, is_file = _target(path_or_url)
    st = _state
    while True:
        with st.lock:
            gen = st.live.get(key)
            if gen is not None:
                why = _unusable(gen)
                if why is None:
                    gen.refcount += 1
                    if open_kwargs != gen.kwargs:
                        log.debug("%s: acquire() options %r ignored (opened with %r)", key,
                                  open_kwargs, gen.kwargs)
                    return gen.store
                _retire_locked(gen, why)
            busy = st.teardowns.get(key)
            wait_on = busy[0] if busy else st.opening.get(key)
            if wait_on is None:
                opened = st.opening[key] = threading.Event()
                epoch = (st.epochs.get(key, 0), st.close_all_epoch)
                lifecycle = st.lifecycle.setdefault(key, threading.Lock())
        if wait_on is not None:  # a teardown or another opener: wait, then look again
            wait_on.wait()
            continue
        store = _open(key, target, is_file, open_kwargs, opened, lifecycle)
        identity = _identity(key, is_file)
        with st.lock:
            if st.opening.get(key) is opened:
                del st.opening[key]
            opened.set()
            began = (st.epochs.get(key, 0), st.close_all_epoch) != epoch or key in st.teardowns
            current = st.live.get(key)
            if not began and current is None:
                gen = _Generation(key, store, identity, dict(open_kwargs))
                st.live[key] = st.by_store[id(store)] = gen
                return store
            if current is not None and not began:
                current.refcount += 1
            waits = list(st.teardowns.get(key, []))
        with lifecycle:  # ours is surplus: a teardown began, or a generation appeared
            ownership.set_owned(store, False)
            store.close()
        if current is not None and not began:
            return current.store
        for barrier in waits:
            barrier.wait()


def _open(key: str, target: Any, is_file: bool, open_kwargs: dict[str, Any],
          opened: threading.Event, lifecycle: threading.Lock) -> SessionStore:
    """Construct the generation's store under the key's lifecycle lock; a failure lifts the
    opening event (waiters retry and see the error themselves) and propagates."""
    try:
        if _store_class is None:
            raise ConfigurationError("the shared-handle registry has no store class: import "
                                     "hermes_data.sessions (or its store module) first")
        with lifecycle:
            store = _store_class(target, **open_kwargs)
            ownership.set_owned(store, True)
            return store
    except BaseException:
        with _state.lock:
            if _state.opening.get(key) is opened:
                del _state.opening[key]
        opened.set()
        raise


def release(store: SessionStore) -> bool:
    """Give back one reference of a store from :func:`acquire`. False when the registry
    does not know it (never acquired, already fully released, or closed by
    :func:`close_all`). The last release unregisters the generation and really closes it
    (after which the key's next open waits for that close)."""
    st = _state
    with st.lock:
        gen = st.by_store.get(id(store))
        if gen is None or gen.store is not store:
            return False
        gen.refcount -= 1
        if gen.refcount > 0:
            return True
        del st.by_store[id(store)]
        if st.live.get(gen.key) is gen:
            del st.live[gen.key]
        barrier = _admit_barrier_locked(gen.key)
        lifecycle = st.lifecycle.setdefault(gen.key, threading.Lock())
    _teardown(gen, barrier, lifecycle)
    return True


def release_or_close(store: SessionStore) -> None:
    """:func:`release` a registry store, else ``close()`` a store the caller owns."""
    if not release(store):
        store.close()


def close_all() -> int:
    """Retire and really close every generation (whatever its reference count), wait for
    in-flight teardowns, and return how many stores this call closed. Registered with
    ``atexit``; holders of a closed store get False from :func:`release`."""
    st = _state
    with st.lock:
        gens = list(st.by_store.values())
        st.by_store.clear()
        st.live.clear()
        st.close_all_epoch += 1
        others = [ev for events in st.teardowns.values() for ev in events]
        work = []
        for gen in gens:
            gen.retired = True
            work.append((gen, _admit_barrier_locked(gen.key),
                         st.lifecycle.setdefault(gen.key, threading.Lock())))
    for gen, barrier, lifecycle in work:
        _teardown(gen, barrier, lifecycle)
    for event in others:
        if not event.wait(CLOSE_ALL_WAIT_S):
            log.warning("close_all: a shared handle's teardown is still running after %.0f s",
                        CLOSE_ALL_WAIT_S)
    return len(gens)


def live_stores() -> list[SessionStore]:
    """The stores of the live generations (retired ones excluded), without new references."""
    with _state.lock:
        return [gen.store for gen in _state.live.values()]


@contextmanager
def borrow_live_stores() -> Iterator[list[SessionStore]]:
    """Hold a reference on every live store for the ``with`` body (housekeeping ticks), then
    release them in reverse order."""
    with _state.lock:
        gens = list(_state.live.values())
        for gen in gens:
            gen.refcount += 1
        stores = [gen.store for gen in gens]
    try:
        yield stores
    finally:
        for store in reversed(stores):
            release(store)


def stats() -> RegistryStats:
    """Counts of live and retired generations and the sum of their reference counts."""
    with _state.lock:
        gens = list(_state.by_store.values())
        return RegistryStats(live_generations=len(_state.live),
                             retired_generations=sum(1 for g in gens if g.retired),
                             total_refcounts=sum(g.refcount for g in gens))


def _after_fork_in_child() -> None:
    # The parent's generations (and its lock, which another thread may have held) stay the
    # parent's: the child starts empty; ownership marks the inherited stores forked.
    global _state
    _state = _State()


# Upstream names (hermes_state's shared SessionDB helpers).
get_shared_session_db = acquire
release_shared_session_db = release
close_shared_session_dbs = close_all
live_shared_session_dbs = live_stores
borrow_live_shared_session_dbs = borrow_live_stores

ownership.install_release(release)
os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(close_all)
