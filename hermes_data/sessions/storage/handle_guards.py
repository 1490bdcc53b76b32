"""File safety of the session store: read pool, descriptor budget and live-handle guards.

Spec docs/sessions.md §8.6–§8.11:

* :class:`ReadPool` — a per-handle LIFO pool of ``mode=ro`` connections (WAL only). Each live
  read connection holds a permit from its database path's budget (8) and from the process
  budget (24) for its whole life; permits are taken non-blocking after a descriptor-headroom
  check (psutil), and released when the connection closes. A miss is never an error: the
  caller serves the read on its writer connection.
* :func:`deleted_sidecar_holders` (from :mod:`hermes_data.files`) — processes (this one
  included) holding a *deleted* ``-wal``/``-shm``: a second opener would mint a second WAL
  generation.
* :class:`FileIdentity` — ``(st_dev, st_ino)`` of the database and its sidecars, recorded at
  open and compared before each write (replaced-file and WAL-generation guards).
* :func:`disk_header_changed` — the on-disk ``application_id`` (``pread``) against the open's.
* :func:`is_transient_sqlite_error`, :func:`is_fts_corruption`, :func:`is_structural_corruption`.
  Quarantine follows SQLite's corruption errors, the same in both journal modes: damage to a
  page SQLite reads from the main file is seen as soon as the page is read (after any commit,
  every connection drops its page cache). In WAL mode a main-file page whose current version
  is a WAL frame is not what SQLite serves, and the checkpoint writes that frame over it: a
  healthy database, never quarantined.

Nothing here opens the database file with ``open()``: closing any descriptor of it would drop
every POSIX lock this process holds on it (seed 003). Files are examined by ``stat``/readlink;
the header is read with ``pread`` through the process's per-path descriptor
(:class:`hermes_data.files.FileHeader`).
"""

from __future__ import annotations

import functools
import logging
import os
import sqlite3
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable
from urllib.parse import quote

import sqlalchemy as sa

from hermes_data.locking import SQLITE_LOCK_KINDS, is_lock_conflict

# Re-exported: the store and the tests reach these through this module.
from hermes_data.files import deleted_sidecar_holders, descriptor_headroom_ok, reset_descriptor_cache  # noqa: F401
from hermes_data.files import APPLICATION_ID_OFFSET, SQLITE_MAGIC, FileHeader, application_id
from hermes_data.tracked import TrackedConnection
from hermes_data.sessions.errors import DeletedWalGenerationError
from hermes_data.sessions.storage import opening_sql as open_sql

log = logging.getLogger("hermes_data.sessions.storage.handle_guards")

#: Read connections per database path (shared by every handle on it) and per process.
PATH_READ_BUDGET = 8
PROCESS_READ_BUDGET = 24
#: A failed read open suppresses further read opens on that handle for this long.
READ_OPEN_BACKOFF_S = 60.0
#: More live handles than this on one path in one process ⇒ one warning.
MAX_HANDLES_PER_PATH = 4


def _sqlite_code(exc: BaseException) -> int | None:
    return getattr(getattr(exc, "orig", exc), "sqlite_errorcode", None)


def _message(exc: BaseException) -> str:
    return str(getattr(exc, "orig", exc)).lower()


def is_transient_sqlite_error(exc: BaseException) -> bool:
    """True for an ``OperationalError`` meaning "busy, retry" (never "empty" or "corrupt").

    Callers map it to e.g. HTTP 503 so a client keeps what it has. Corruption is deliberately
    not transient.
    """
    orig = getattr(exc, "orig", exc)
    if not isinstance(orig, sqlite3.OperationalError) and not isinstance(exc, sa.exc.OperationalError):
        return False
    # SQLite kinds only: the name promises SQLite, and a PostgreSQL lock error reaching a
    # caller here has never been "transient" (its backend retries it, then DatabaseBusyError).
    # A disk I/O error is transient too, though no lock conflict (matched by message, as ever).
    return (is_lock_conflict(exc, kinds=SQLITE_LOCK_KINDS)
            or "disk i/o error" in _message(exc))


def is_disk_io_error(exc: BaseException) -> bool:
    """``SQLITE_IOERR`` (any extended code) or a ``disk i/o error`` message."""
    code = _sqlite_code(exc)
    return (code is not None and code & 0xFF == 10) or "disk i/o error" in _message(exc)


def is_fts_corruption(exc: BaseException) -> bool:
    """An FTS-scoped corruption: ``SQLITE_CORRUPT_VTAB`` (267) or an ``fts5`` message."""
    return _sqlite_code(exc) == 267 or "fts5" in _message(exc)


def is_fts_unavailable(exc: BaseException) -> bool:
    """An FTS table this SQLite build cannot load (``no such tokenizer`` / ``no such module``)."""
    msg = _message(exc)
    return "no such tokenizer" in msg or "no such module: fts5" in msg


_CORRUPT_MARKERS = ("malformed", "file is not a database", "not a database", "database corruption")


def is_structural_corruption(exc: BaseException) -> bool:
    """Bare ``SQLITE_CORRUPT`` / ``SQLITE_NOTADB`` (or their messages) that is not FTS-scoped."""
    if is_fts_corruption(exc):
        return False
    code = _sqlite_code(exc)
    if code is not None and code & 0xFF in (11, 26):
        return True
    return any(m in _message(exc) for m in _CORRUPT_MARKERS)


# ---------------------------------------------------------------------------------------
# Holders and identities
# ---------------------------------------------------------------------------------------


def refuse_deleted_wal_generation(db_path: str | os.PathLike[str], *, fd: int | None = None,
                                  what: str = "open it") -> None:
    """Raise :class:`~hermes_data.sessions.errors.DeletedWalGenerationError` (naming each
    holder) when any process, this one included, holds a deleted ``-wal``/``-shm`` of
    ``db_path``: opening the database now would mint a second WAL generation beside the one
    still being written (docs/sessions.md §8.10). ``fd``: a descriptor on the database that
    narrows the scan (:func:`hermes_data.files.deleted_sidecar_holders`); ``what`` words the
    refusal. Upstream's name, for a caller about to open the file by other means."""
    holders = deleted_sidecar_holders(Path(db_path), fd)
    if holders:
        pids = ", ".join(f"pid {pid} holds {p}" for pid, p in holders)
        raise DeletedWalGenerationError(str(db_path), f"refusing to {what}: {pids} (deleted)")


def _ident(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    if st.st_dev == 0 or st.st_ino == 0:
        return None
    return st.st_dev, st.st_ino


#: A directory timestamp is trusted for the fast path once it is this much older than the
#: clock: one kernel tick covers sub-second filesystems; whole-second stamps (ext3, HFS+,
#: FAT's 2 s) need more than their granularity.
_DIR_SETTLE_FINE_NS = 50_000_000
_DIR_SETTLE_COARSE_NS = 2_500_000_000


def _dir_state(directory: str) -> tuple[int, int, int, int] | None:
    try:
        st = os.stat(directory)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns


def _settled(state: tuple[int, int, int, int]) -> bool:
    newest = max(state[2], state[3])
    coarse = state[2] % 1_000_000_000 == 0 and state[3] % 1_000_000_000 == 0
    margin = _DIR_SETTLE_COARSE_NS if coarse else _DIR_SETTLE_FINE_NS
    return time.time_ns() - newest > margin


@dataclass
class FileIdentity:
    """What the open recorded about the file: inode of the database and its sidecars.

    :meth:`check` is called before every write. Its full form stats the database and each
    recorded sidecar. Replacing, removing or renaming any of them changes an entry of the
    containing directory, which updates that directory's mtime/ctime; so once a full check
    passed, the directory's state taken *before* it is remembered, and while one ``stat`` of
    the directory returns exactly that state the files cannot have changed identity. The
    fast path is used only in WAL mode (sidecars recorded; in DELETE mode the rollback
    journal churns the directory on every write), only when no component of the path is a
    symlink, and only for a directory timestamp old enough that a later change cannot carry
    the same value (see ``_settled``). A same-inode overwrite (``cp`` over the file) is not a
    directory change: :func:`disk_header_changed` (the header read from the file itself)
    and, in rollback-journal mode, the in-transaction ``application_id`` read cover it.
    """

    db: tuple[int, int] | None
    sidecars: dict[str, tuple[int, int]]
    _directory: str | None = None
    _dir_ok: tuple[int, int, int, int] | None = None

    @classmethod
    def record(cls, path: Path, *, wal: bool, real: str | None = None) -> "FileIdentity":
        """Stat the database (and in WAL mode its ``-wal``/``-shm``) by path. ``real``: the
        path's ``os.path.realpath`` when the caller just resolved it (the open's header lease)."""
        sidecars: dict[str, tuple[int, int]] = {}
        if wal:
            for suffix in ("-wal", "-shm"):
                ident = _ident(f"{path}{suffix}")
                if ident is not None:
                    sidecars[suffix] = ident
        directory = None
        name = str(path)
        if real is None:
            real = os.path.realpath(name)
        # A resolved path is absolute and normal: equal to the name, it is the name's abspath.
        if real == name or real == os.path.abspath(name):
            directory = os.path.dirname(real)
        return cls(_ident(name), sidecars, directory)

    def replaced(self, path: Path) -> str | None:
        """Why the database no longer is the recorded file, or None."""
        if self.db is None:
            return None
        now = _ident(str(path))
        if now is None:
            return "the database file was removed under a live handle"
        if now != self.db:
            return (f"the database file was replaced under a live handle (inode {self.db[1]} "
                    f"is now {now[1]})")
        return None

    def split_generation(self, path: Path) -> str | None:
        """Why the recorded WAL generation is gone, or None."""
        for suffix, ident in self.sidecars.items():
            now = _ident(f"{path}{suffix}")
            if now != ident:
                return (f"{path}{suffix} was deleted or replaced while this handle held it "
                        "(a split WAL generation)")
        return None

    def forget_sidecars(self) -> None:
        """Stop checking the sidecars (a clean last close may unlink them)."""
        self.sidecars.clear()
        self._dir_ok = None

    def check(self, path: Path) -> tuple[str, str] | None:
        """``("replaced" | "split", why)`` when the file or its WAL generation changed, else None.

        One ``stat`` of the directory while it is unchanged since the last full check;
        otherwise the full check (see the class docstring).
        """
        directory = self._directory
        fast = directory is not None and bool(self.sidecars) and self.db is not None
        if fast and directory is not None and self._dir_ok is not None \
                and _dir_state(directory) == self._dir_ok:
            return None
        before = _dir_state(directory) if fast and directory is not None else None
        why = self.replaced(path)
        if why is not None:
            self._dir_ok = None
            return "replaced", why
        why = self.split_generation(path)
        if why is not None:
            self._dir_ok = None
            return "split", why
        self._dir_ok = before if before is not None and _settled(before) else None
        return None


@functools.lru_cache(maxsize=64)
def _id_bytes(app_id: int) -> bytes | None:
    """``app_id`` as the header stores it (big-endian), None when it has no such form."""
    return app_id.to_bytes(4, "big") if 0 < app_id < 1 << 32 else None


def disk_header_changed(header: FileHeader | None, app_id: int) -> tuple[str, str] | None:
    """``("replaced", why)`` when the header on disk (``pread``, docs/sessions.md §8.9) contradicts the open's
    ``application_id``, else None. A copy over the same inode changes no ``stat`` field
    :class:`FileIdentity` compares, and in WAL mode SQLite serves page 1 from the WAL, so
    only the file's own bytes show it. A file shorter than a header (a fresh WAL database
    before its first checkpoint) or an ``application_id`` of 0 has no say (docs/sessions.md §8.11: "non-zero
    and differs")."""
    if header is None or not app_id:
        return None
    data = header.read()
    if data[APPLICATION_ID_OFFSET:APPLICATION_ID_OFFSET + 4] == _id_bytes(app_id) \
            and data.startswith(SQLITE_MAGIC):
        return None  # the common case, decided on the bytes (a full header: 72 < 100 bytes)
    disk_id = application_id(data)
    if disk_id is None:
        return None
    if not data.startswith(SQLITE_MAGIC):
        return "replaced", ("the file on disk no longer starts with an SQLite header: it was "
                            "overwritten under a live handle (application_id unreadable)")
    if disk_id and disk_id != app_id:
        return "replaced", (f"the file's application_id changed on disk ({app_id} -> "
                            f"{disk_id}): it was replaced under a live handle")
    return None


# ---------------------------------------------------------------------------------------
# Descriptor budget and permits
# ---------------------------------------------------------------------------------------

class Budget:
    """A non-blocking counting permit with a high-water mark (for tests and doctor)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.used = 0
        self.peak = 0
        self.denied = 0
        self._lock = threading.Lock()

    def try_acquire(self) -> bool:
        """Take a permit if one is free (never waits)."""
        with self._lock:
            if self.used >= self.size:
                self.denied += 1
                return False
            self.used += 1
            self.peak = max(self.peak, self.used)
            return True

    def release(self) -> None:
        """Give a permit back."""
        with self._lock:
            self.used = max(0, self.used - 1)


PROCESS_BUDGET = Budget(PROCESS_READ_BUDGET)
_path_budgets: dict[str, Budget] = {}
_pools: "dict[str, weakref.WeakSet[ReadPool]]" = {}
#: The live WAL handles per resolved path (:class:`LazyReadPool`: the many-handles warning).
_handles: "dict[str, weakref.WeakSet[LazyReadPool]]" = {}
_registry_lock = threading.Lock()
descriptor_denials = 0


def path_budget(path: Path, key: str | None = None) -> Budget:
    """The read budget shared by every handle on ``path`` (keyed by the resolved path;
    ``key``: that path when the caller already resolved it)."""
    key = str(path.resolve()) if key is None else key
    with _registry_lock:
        return _path_budgets.setdefault(key, Budget(PATH_READ_BUDGET))


class NoReadPermit(Exception):
    """No read connection could be opened now (budget, descriptors or back-off)."""

    def __init__(self, scope: str) -> None:
        super().__init__(scope)
        self.scope = scope


class _ReadConnection(TrackedConnection):
    """A ``mode=ro`` connection that gives its permits back when it closes."""

    _permits: tuple[Budget, ...] = ()

    def close(self) -> None:  # noqa: D401 - sqlite3 API
        try:
            super().close()
        finally:
            permits, self._permits = self._permits, ()
            for p in permits:
                p.release()


#: The busy timeout of a read-only connection, seconds.
READ_ONLY_TIMEOUT_S = 1.0


def connect_read_only(path: Path, *, factory: type[sqlite3.Connection] = TrackedConnection,
                      timeout: float = READ_ONLY_TIMEOUT_S) -> sqlite3.Connection:
    """``file:<path>?mode=ro`` with a 1 s busy timeout and driver transactions off."""
    uri = f"file:{quote(str(path))}?mode=ro"
    return sqlite3.connect(uri, uri=True, timeout=timeout, check_same_thread=False,
                           isolation_level=None, factory=factory)


class ReadPool(sa.pool.Pool):
    """Per-handle LIFO pool of read-only connections under the path and process budgets."""

    def __init__(self, path: Path, *, pragmas: tuple[str, ...] = (), key: str | None = None,
                 **kw: Any) -> None:
        self.db_path = path
        #: The resolved path the budget and the peer registry are keyed by (``key``: the
        #: caller's, when it just resolved it).
        self.path_key = key = str(path.resolve()) if key is None else key
        self.pragmas = pragmas  # configured pragmas (docs/sessions.md §8.3), run on every read connection
        self.budget = path_budget(path, key)
        self._idle: list[Any] = []
        self._lock = threading.Lock()
        self._closed = False
        self._suppressed_until = 0.0
        super().__init__(self._open_reader, **kw)  # type: ignore[arg-type]  # sqlite3 is a DB-API connection
        with _registry_lock:
            _pools.setdefault(key, weakref.WeakSet()).add(self)

    def _should_wrap_creator(self, creator: Any) -> Any:
        # SQLAlchemy's hook: our creator takes no argument (skips its signature inspection,
        # made at every store open in WAL mode).
        return lambda _record: creator()

    def _open_reader(self) -> sqlite3.Connection:
        global descriptor_denials
        if self._closed:
            raise NoReadPermit("closed")
        if time.monotonic() < self._suppressed_until:
            raise NoReadPermit("suppressed")
        if not descriptor_headroom_ok():
            descriptor_denials += 1
            raise NoReadPermit("descriptors")
        if not self.budget.try_acquire():
            raise NoReadPermit("path")
        if not PROCESS_BUDGET.try_acquire():
            self.budget.release()
            raise NoReadPermit("process")
        con: sqlite3.Connection | None = None
        try:
            con = connect_read_only(self.db_path, factory=_ReadConnection)
            con._permits = (self.budget, PROCESS_BUDGET)  # type: ignore[attr-defined]
            con.execute(open_sql.FOREIGN_KEYS_ON)
            for stmt in self.pragmas:  # best-effort: config failures never break an open
                try:
                    con.execute(stmt).fetchall()
                except sqlite3.Error as exc:
                    log.warning("%s: configured %s failed on a read connection (%s); skipped",
                                self.db_path, stmt, exc)
            return con
        except BaseException as exc:
            if con is not None:
                con.close()  # releases the permits
            else:
                self.budget.release()
                PROCESS_BUDGET.release()
            self._suppressed_until = time.monotonic() + READ_OPEN_BACKOFF_S
            log.warning("%s: read connection failed to open (%s); reads use the writer for %.0f s",
                        self.db_path, exc, READ_OPEN_BACKOFF_S)
            raise NoReadPermit("failed") from exc

    # -- sa.pool.Pool protocol ---------------------------------------------------------

    def status(self) -> str:
        return f"ReadPool({self.db_path}, idle={len(self._idle)}, closed={self._closed})"

    def _do_get(self):
        with self._lock:
            if self._idle:
                return self._idle.pop()  # LIFO: the warmest connection
        return self._create_connection()

    def _do_return_conn(self, record) -> None:
        with self._lock:
            if not self._closed:
                self._idle.append(record)
                return
        record.close()  # returned after close(): the reader closes its own connection

    #: The pool record of an idle (else a new) reader, outside SQLAlchemy's checkout — the
    #: driver read route (:mod:`.backends.sqlite_reads`); :class:`NoReadPermit` when none can
    #: be had. ``give_back`` returns it (closed instead once the pool is closed).
    take = _do_get
    give_back = _do_return_conn

    def evict_idle(self) -> bool:
        """Close this pool's oldest idle connection (frees its permits); False if none."""
        with self._lock:
            record = self._idle.pop(0) if self._idle else None
        if record is None:
            return False
        record.close()
        return True

    def dispose(self) -> None:
        with _registry_lock:
            peers = _pools.get(self.path_key)
            if peers is not None:
                peers.discard(self)
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for record in idle:
            record.close()
        # Closed for good (``_open_reader`` refuses from now on): a creator that refuses
        # without holding this pool, whose own bound method was a reference cycle that left
        # every closed WAL handle to the garbage collector.
        self._creator = _closed_reader  # type: ignore[assignment]  # a DB-API connection

    def recreate(self) -> "ReadPool":
        raise NotImplementedError("a ReadPool is never recreated; open a new store handle")

    def idle_count(self) -> int:
        """Idle connections held."""
        return len(self._idle)


class LazyReadPool:
    """A WAL handle's :class:`ReadPool`, made by the first read that asks for it (issue 14:
    a settled open that never reads makes none). The handle is counted for the many-handles
    warning at once — more than :data:`MAX_HANDLES_PER_PATH` live on one resolved path
    ``key`` warn, each holding its own writer connection — and uncounted by :meth:`dispose`,
    after which no pool is made any more."""

    def __init__(self, path: Path, pragmas: tuple[str, ...], key: str) -> None:
        self.path, self.pragmas, self.key = path, pragmas, key
        self._pool: ReadPool | None = None
        self._disposed = False
        self._lock = threading.Lock()  # not the handle's lock: a read never waits on a write
        with _registry_lock:
            handles = _handles.setdefault(key, weakref.WeakSet())
            handles.add(self)
            live = len(handles)
        if live > MAX_HANDLES_PER_PATH:
            log.warning("%s: %d live session-store handles in this process; share one handle "
                        "per path (each holds its own writer connection)", path, live)

    def get(self) -> ReadPool | None:
        """The pool (made now when this is its first use); None once disposed."""
        pool = self._pool
        if pool is None and not self._disposed:
            with self._lock:
                if self._pool is None and not self._disposed:
                    self._pool = ReadPool(self.path, pragmas=self.pragmas, key=self.key)
                pool = self._pool
        return pool

    def dispose(self) -> None:
        """Uncount the handle and dispose the pool, if one was made (idempotent)."""
        with self._lock:
            self._disposed = True
            pool, self._pool = self._pool, None
        with _registry_lock:
            handles = _handles.get(self.key)
            if handles is not None:
                handles.discard(self)
        if pool is not None:
            pool.dispose()


def _closed_reader() -> sqlite3.Connection:
    raise NoReadPermit("closed")


def evict_peer(pool: ReadPool, scope: str) -> bool:
    """Close one idle connection of another pool: on the same path for a path-budget miss,
    on any path for a process-budget miss. True when one was closed."""
    key = pool.path_key
    with _registry_lock:
        if scope == "path":
            candidates = [p for p in _pools.get(key, ()) if p is not pool]
        else:
            candidates = [p for peers in _pools.values() for p in peers if p is not pool]
    return any(p.evict_idle() for p in candidates)


Opener = Callable[[], sqlite3.Connection]
