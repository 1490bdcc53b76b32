"""Engine factory: the SQLite connection and transaction policy shared by both stores.

Every setting below exists because its absence caused a production failure upstream; the
comment beside each one names that failure.

Transactions
    The pysqlite driver's own transaction handling is switched off (``isolation_level=None``
    on every DBAPI connection) and we emit ``BEGIN`` ourselves from SQLAlchemy's ``begin``
    event. The legacy driver mode never began a transaction before DDL, so a failing
    migration left half its DDL behind; with our own ``BEGIN`` DDL is transactional.
    A connection whose execution options carry ``hermes_begin="IMMEDIATE"`` (see
    :func:`write_transaction`) starts with ``BEGIN IMMEDIATE``: a deferred transaction that
    later writes gets ``SQLITE_BUSY`` at once, without the busy handler, after the caller's
    work already ran.

Journal mode
    WAL is what we want (one writer beside many readers), but SQLite builds
    ``3.7.0 <= v < 3.51.3`` (except the 3.44.6 and 3.50.7 back-ports) carry the WAL-reset
    corruption bug. On such a build a *fresh* or non-WAL file is kept in (or created in)
    DELETE mode, an *existing* WAL file stays WAL with a warning (a live downgrade would
    break other processes holding it), and ``HERMES_DATA_JOURNAL_MODE=wal|delete`` overrides
    the default. See :func:`decide_journal_mode`.

Rollback-journal flavour
    Where the *default* policy keeps a file out of WAL, each connection runs the rollback
    journal as ``TRUNCATE`` (:attr:`SqliteSettings.rollback_journal`): a commit truncates the
    journal instead of unlinking it, so it does not change the directory (measured on this
    machine, SQLite 3.40.1, one small transaction: DELETE 1.25–4.4 ms, TRUNCATE 1.0–1.1 ms,
    PERSIST 0.97–1.0 ms; ``benchmarks/telemetry_writes.py --rollback``). PERSIST is as fast
    but keeps up to ``journal_size_limit`` of old page images beside the database — pruned
    or deleted content would outlive its delete there — so TRUNCATE is the default. The
    rollback flavour is a per-connection setting (never stored in the file): other processes
    (upstream, in DELETE) share the file safely. An explicit
    ``HERMES_DATA_JOURNAL_MODE=delete`` / ``journal_mode="delete"`` gets exactly DELETE.

Checkpoints
    Only ``PASSIVE`` checkpoints are ever issued (:func:`passive_checkpoint`): a
    ``TRUNCATE`` checkpoint from a short-lived process raced a live writer and tore pages.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import sys
import threading
import time
import weakref
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator, cast

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.util import LRUCache

from hermes_data.config import resolve_url, sqlite_path
from hermes_data.connectivity import idle_connection_dropped
from hermes_data.errors import ConfigurationError, WalUnsupportedError
from hermes_data.files import FileHeader, make_private_dirs
from hermes_data.tracked import TrackedConnection

log = logging.getLogger("hermes_data.engine")

#: busy_timeout of the telemetry store (seed 000: covers slow CI / network filesystems).
TELEMETRY_BUSY_TIMEOUT_MS = 30_000
#: journal_size_limit: SQLite's default (-1) kept a 3 GB WAL beside a 3 GB database forever.
JOURNAL_SIZE_LIMIT = 64 * 1024 * 1024

JOURNAL_MODE_ENV = "HERMES_DATA_JOURNAL_MODE"
_VALID_MODES = ("wal", "delete")
#: Rollback-journal flavours for files the default policy keeps out of WAL.
ROLLBACK_JOURNALS = ("truncate", "delete", "persist")

VersionTuple = tuple[int, int, int]


_LINKED: VersionTuple = tuple(int(p) for p in sqlite3.sqlite_version.split(".")[:3])  # type: ignore[assignment]


def linked_sqlite_version() -> VersionTuple:
    """Version of the SQLite library this interpreter links."""
    return _LINKED


def sqlite_source_id() -> str:
    """The linked SQLite library's ``sqlite_source_id()`` (check-in date, time and hash, the
    exact build a bug report needs), or ``""`` when it cannot be read — upstream's module
    function of the same name. Opens a private ``:memory:`` database (no file is touched)."""
    try:
        con = sqlite3.connect(":memory:")
        try:
            row = con.execute("SELECT sqlite_source_id()").fetchone()
        finally:
            con.close()
    except sqlite3.Error:
        return ""
    if not row or row[0] is None:
        return ""
    return str(row[0])


def is_wal_reset_vulnerable(version: VersionTuple) -> bool:
    """True when ``version`` has the WAL-reset corruption bug (fixed in 3.51.3,
    back-ported to 3.50.7 and 3.44.6)."""
    if not ((3, 7, 0) <= version < (3, 51, 3)):
        return False
    if (3, 50, 7) <= version < (3, 51, 0):
        return False
    if (3, 44, 6) <= version < (3, 45, 0):
        return False
    return True


@dataclass(frozen=True)
class JournalDecision:
    """What the journal-mode policy decided for one file, and why."""

    target: str | None  # mode to switch to, or None to leave the file as it is
    reason: str
    warn: bool = False


def decide_journal_mode(
    current: str, *, has_pages: bool, vulnerable: bool, configured: str | None
) -> JournalDecision:
    """Pure journal-mode policy (no I/O), shared by both stores.

    ``current`` is the mode read from the file, ``has_pages`` whether the file holds any
    page yet, ``configured`` an explicit ``"wal"``/``"delete"`` or ``None`` for the default.
    """
    current = current.lower()
    if configured not in (None, *_VALID_MODES):
        raise ConfigurationError(
            f"journal mode {configured!r} is not supported; use one of {', '.join(_VALID_MODES)}"
        )
    if current == "wal":
        if configured == "delete":
            return JournalDecision(
                None,
                "file is in WAL mode and other processes may hold it; a live downgrade is refused "
                "(run PRAGMA journal_mode=DELETE offline, with no open connections)",
                warn=True,
            )
        if vulnerable and configured is None:
            return JournalDecision(
                None,
                "existing WAL file kept in WAL although this SQLite build has the WAL-reset bug; "
                "to act: upgrade SQLite to 3.51.3+ (or 3.50.7 / 3.44.6), or, with no process "
                "holding the file, run PRAGMA journal_mode=DELETE on it (this build then keeps it "
                f"in DELETE mode; {JOURNAL_MODE_ENV}=delete makes that explicit)",
                warn=True,
            )
        return JournalDecision(None, "already WAL")
    if configured == "delete":
        return JournalDecision("delete" if current != "delete" else None, "configured delete")
    if configured == "wal":
        return JournalDecision(
            "wal",
            "configured wal" + (" despite the WAL-reset bug of this SQLite build" if vulnerable else ""),
            warn=vulnerable,
        )
    if vulnerable:
        why = ("new file: rollback journal" if not has_pages else
               "rollback journal" + ("" if current == "delete" else f" (was {current.upper()})"))
        return JournalDecision(
            "delete" if current != "delete" else None,
            f"{why}, not WAL: this SQLite build has the WAL-reset bug "
            f"(set {JOURNAL_MODE_ENV}=wal to override)",
        )
    return JournalDecision("wal", "default WAL")


@dataclass
class SqliteSettings:
    """Per-engine SQLite settings.

    ``journal_mode`` ``None`` reads ``HERMES_DATA_JOURNAL_MODE`` and otherwise applies the
    default policy. ``sqlite_version`` injects the version used for the WAL-reset check
    (tests exercise both policies on any build).
    """

    busy_timeout_ms: int = TELEMETRY_BUSY_TIMEOUT_MS
    journal_mode: str | None = None
    synchronous: str = "NORMAL"
    journal_size_limit: int = JOURNAL_SIZE_LIMIT
    sqlite_version: VersionTuple | None = None
    #: Raise :class:`WalUnsupportedError` instead of running in another mode when the
    #: filesystem refuses WAL.
    require_wal: bool = False
    pool_size: int = 8
    max_overflow: int = 56
    extra_pragmas: dict[str, int | str] = field(default_factory=dict)
    #: ``sys.platform`` as the policy sees it (injectable: tests exercise macOS anywhere).
    platform: str | None = None
    #: How a connection runs the rollback journal when the *default* policy keeps the file
    #: out of WAL (see the module docstring): ``"truncate"``, ``"delete"`` or ``"persist"``.
    #: A configured ``journal_mode="delete"`` always gets DELETE.
    rollback_journal: str = "truncate"
    #: ``auto_vacuum`` of a file this connection creates (an empty file; an existing one is
    #: never changed here): ``"incremental"`` lets the session store's ``vacuum()`` return
    #: free pages in paced steps (docs/sessions.md §7.6); None leaves SQLite's default
    #: (NONE). Set before the journal policy: the first write fixes the mode.
    new_file_auto_vacuum: str | None = "incremental"

    def synchronous_for(self, mode: str) -> str:
        """The ``synchronous`` level for journal ``mode``: on macOS a WAL file gets FULL (its
        fsync does not reach the platter; docs/sessions.md §8.2), elsewhere the setting."""
        if mode == "wal" and (self.platform or sys.platform) == "darwin":
            return "FULL"
        return self.synchronous

    def configured_mode(self) -> str | None:
        mode = self.journal_mode or os.environ.get(JOURNAL_MODE_ENV, "").strip().lower() or None
        if mode is not None and mode not in _VALID_MODES:
            raise ConfigurationError(
                f"{JOURNAL_MODE_ENV}={mode!r} is not supported; use one of {', '.join(_VALID_MODES)}"
            )
        return mode

    def vulnerable(self) -> bool:
        return is_wal_reset_vulnerable(self.sqlite_version or linked_sqlite_version())


@dataclass
class JournalState:
    """Journal mode in effect for an engine's file, and the policy's reason (for status/doctor)."""

    mode: str = "unknown"
    reason: str = ""


#: Keyed weakly by engine: an engine's state goes with it (an ``id()`` key grew per engine and
#: could hand a recycled id a dead engine's settled mode). A registry, not a handle field: it
#: serves the plain engines of the generic layer (``create_engine_for``: migrations, the
#: telemetry store, the CLI), which have no store handle; a session-store handle's engine
#: (:class:`HandleEngine`) carries its own ``journal`` field instead.
_journal_states: "weakref.WeakKeyDictionary[Engine, JournalState]" = weakref.WeakKeyDictionary()
_states_lock = threading.Lock()
_warned: set[tuple[str, str]] = set()
_warned_lock = threading.Lock()


def journal_state(engine: Engine) -> JournalState:
    """The journal mode the policy settled on for ``engine`` (``unknown`` before a connect)."""
    if isinstance(engine, HandleEngine):
        return engine.journal
    with _states_lock:
        return _journal_states.setdefault(engine, JournalState())


def _warn_once(path: str, message: str) -> None:
    with _warned_lock:
        if (path, message) in _warned:
            return
        _warned.add((path, message))
    log.warning("%s: %s", path, message)


#: The (database label, kind) pairs whose degradation ERROR this process has logged: a real
#: loss of concurrency is logged at ERROR once per process and database, as upstream does
#: (its kanban opens a connection per operation; an ERROR per connection floods the log).
_errors_logged: set[tuple[str, str]] = set()
_errors_logged_lock = threading.Lock()
#: The kinds of :func:`_error_once`: WAL refused by the filesystem (raised or silent), and a
#: configured DELETE that an on-disk WAL file overrides.
WAL_REFUSED, DELETE_OVERRIDDEN = "wal refused", "configured delete overridden"


def _error_once(path: str, kind: str, message: str, *args: object) -> None:
    """Log ``message`` (``%``-formatted with ``args``) for the database ``path`` at ERROR the
    first time this process meets ``kind`` there, at DEBUG every later time (upstream logs
    nothing then; DEBUG keeps the repeat visible to whoever asks)."""
    key = (path, kind)
    with _errors_logged_lock:
        first = key not in _errors_logged
        _errors_logged.add(key)
    if first:
        log.error("%s: " + message + " (logged once per process and database)", path, *args)
    else:
        log.debug("%s: " + message + " (again)", path, *args)


_RETRYABLE_WAL_ERRORS = ("locking protocol", "not authorized", "disk i/o error")


def _read_journal_mode(cur: sqlite3.Cursor) -> str | None:
    """``PRAGMA journal_mode`` read, retried on transient I/O errors; ``None`` = unknown."""
    for attempt in range(5):
        try:
            return cur.execute("PRAGMA journal_mode").fetchone()[0].lower()
        except sqlite3.OperationalError as exc:
            if "disk i/o error" not in str(exc).lower() or attempt == 4:
                return None
            time.sleep(0.05)
    return None


def _switch_to_delete(cur: sqlite3.Cursor, path: str, settings: SqliteSettings, current: str) -> str:
    # A non-WAL switch must never sneak in between another writer's transactions: run it
    # without waiting, and on contention leave the mode alone ("not exclusively owned").
    cur.execute("PRAGMA busy_timeout=0")
    try:
        return cur.execute("PRAGMA journal_mode=DELETE").fetchone()[0].lower()
    except sqlite3.OperationalError as exc:
        _warn_once(path, f"could not switch to DELETE ({exc}); left in {current}")
        return current
    finally:
        cur.execute(f"PRAGMA busy_timeout={int(settings.busy_timeout_ms)}")


def _switch_to_wal(cur: sqlite3.Cursor, path: str, settings: SqliteSettings, current: str,
                   has_pages: bool) -> str:
    mode: str | None = None
    error: sqlite3.OperationalError | None = None
    for attempt in range(3):
        try:
            mode = cur.execute("PRAGMA journal_mode=WAL").fetchone()[0].lower()
            break
        except sqlite3.OperationalError as exc:
            message = str(exc).lower()
            if not any(m in message for m in _RETRYABLE_WAL_ERRORS):
                raise
            error = exc
            if "disk i/o error" in message and attempt < 2:
                time.sleep(0.05)  # transient EIO on some filesystems
                continue
            break
    if mode is None:
        # The filesystem refuses WAL (NFS/SMB/FUSE). Never downgrade a file that may be WAL.
        disk = _read_journal_mode(cur)
        if disk in (None, "wal"):
            raise error  # type: ignore[misc]
        if settings.require_wal:
            raise WalUnsupportedError(f"{path}: WAL is required but the filesystem refused it ({error})")
        _error_once(path, WAL_REFUSED, "WAL refused by the filesystem (%s); using DELETE mode",
                    error)
        return _switch_to_delete(cur, path, settings, disk)
    if mode != "wal":
        # The switch "succeeded" but returned another mode (network filesystems, overlays).
        if settings.require_wal:
            raise WalUnsupportedError(f"{path}: WAL is required but SQLite stayed in {mode} mode")
        _error_once(path, WAL_REFUSED,
                    "WAL refused, running in %s mode (readers will block on the writer)", mode)
    elif has_pages and current not in ("wal", "memory"):
        _warn_once(path, f"switched an existing {current} file to WAL (its header was rewritten); "
                         f"set {JOURNAL_MODE_ENV}=delete to keep it in DELETE mode")
    return mode


def _rollback_flavour(cur: sqlite3.Cursor, path: str, settings: SqliteSettings) -> str:
    """Switch this connection's rollback journal to ``settings.rollback_journal`` (a
    per-connection setting: no lock, nothing written to the file); the mode in effect."""
    flavour = settings.rollback_journal.lower()
    if flavour not in ROLLBACK_JOURNALS:
        raise ConfigurationError(f"rollback_journal {settings.rollback_journal!r} is not "
                                 f"supported; use one of {', '.join(ROLLBACK_JOURNALS)}")
    if flavour == "delete":
        return "delete"
    try:
        return cur.execute(f"PRAGMA journal_mode={flavour.upper()}").fetchone()[0].lower()
    except sqlite3.OperationalError as exc:
        _warn_once(path, f"could not use a {flavour.upper()} rollback journal ({exc}); "
                         "DELETE it is")
        return "delete"


def _apply_journal_policy(dbapi_conn: sqlite3.Connection, path: str, settings: SqliteSettings,
                          state: JournalState, *, created: bool = False) -> None:
    cur = dbapi_conn.cursor()
    try:
        configured = settings.configured_mode()
        current = _read_journal_mode(cur)
        if current is None:
            if configured == "delete":
                raise ConfigurationError(
                    f"{path}: journal mode could not be read, so DELETE cannot be verified"
                )
            _warn_once(path, "journal mode could not be read (I/O errors); left untouched")
            state.mode, state.reason = "unknown", "journal mode unreadable"
            return
        # Only a file that may switch to WAL (the warning) or whose rollback-journal reason
        # names a new file asks whether it holds pages: a WAL file and a configured DELETE on a
        # DELETE file never read it (a settled open skips one statement).
        has_pages = True
        if created:  # empty at connect: its one page is the auto_vacuum setting just made
            has_pages = False
        elif current != "wal" and configured != "delete":
            has_pages = cur.execute("PRAGMA page_count").fetchone()[0] > 0
        decision = decide_journal_mode(
            current, has_pages=has_pages, vulnerable=settings.vulnerable(), configured=configured,
        )
        mode = current
        if decision.target == "delete" and current != "delete":
            mode = _switch_to_delete(cur, path, settings, current)
            if configured == "delete" and mode != "delete":
                raise ConfigurationError(
                    f"{path}: journal mode DELETE was configured but the file stays in {mode} "
                    "(another connection holds it; retry when it is idle)"
                )
        elif decision.target == "wal" and current != "wal":
            mode = _switch_to_wal(cur, path, settings, current, has_pages)
        if mode == "delete" and configured is None:
            mode = _rollback_flavour(cur, path, settings)
        if decision.warn:
            if configured == "delete" and current == "wal":
                _error_once(path, DELETE_OVERRIDDEN, "%s", decision.reason)
            else:
                _warn_once(path, decision.reason)
        state.mode, state.reason = mode, _flavoured(mode, decision.reason)
    finally:
        cur.close()


def _flavoured(mode: str, reason: str) -> str:
    if mode in ROLLBACK_JOURNALS and mode != "delete":
        reason += f"; rollback journal {mode.upper()} (no directory change per commit)"
    return reason


def planned_journal_state(path: str, current: str, *, has_pages: bool,
                          settings: SqliteSettings) -> JournalState:
    """The journal mode (and reason) the connection policy would settle on for a file now in
    ``current`` mode at ``path``, decided without touching the file (its warning, if any, is
    logged like the policy's): what ``status`` and ``doctor`` report from their read-only
    connection (docs/cli.md "Reading a store without writing
    it"); the policy itself switches only on a writable open."""
    configured = settings.configured_mode()
    decision = decide_journal_mode(current, has_pages=has_pages, vulnerable=settings.vulnerable(),
                                   configured=configured)
    if decision.warn:  # the warning a writable open gives, once per process and file
        _warn_once(path, decision.reason)
    mode = decision.target or current
    if mode == "delete" and configured is None:
        flavour = settings.rollback_journal.lower()
        mode = flavour if flavour in ROLLBACK_JOURNALS else mode
    return JournalState(mode, _flavoured(mode, decision.reason))


#: The ``auto_vacuum`` settings a new file may get (the pragma's own spellings).
_AUTO_VACUUM = {"none": "NONE", "full": "FULL", "incremental": "INCREMENTAL"}


def _empty_file(path: str) -> bool:
    """Is ``path`` a file with no bytes yet (the connection just created it)?"""
    try:
        return os.stat(path).st_size == 0
    except (OSError, ValueError):
        return False  # in-memory, URI or unreadable: nothing to create here


def configure_sqlite_connection(dbapi_conn: sqlite3.Connection, path: str,
                                settings: SqliteSettings, state: JournalState, *,
                                busy_timeout_set: bool = False) -> None:
    """The connection policy of this module on one DB-API connection: driver transactions
    off, the busy timeout first, the journal-mode policy (``state`` records what it settled
    on), ``synchronous``, ``journal_size_limit`` and ``settings.extra_pragmas``.
    ``busy_timeout_set``: the driver's ``timeout`` already set exactly this busy timeout."""
    # Our own BEGIN (see the engines' begin event) instead of the driver's: DDL becomes
    # transactional.
    dbapi_conn.isolation_level = None
    if not busy_timeout_set:
        # First, before anything that may need a lock: a contested fresh file switching
        # journal mode otherwise fails at once with "database is locked".
        dbapi_conn.execute(f"PRAGMA busy_timeout={int(settings.busy_timeout_ms)}")
    created = bool(settings.new_file_auto_vacuum) and _empty_file(path)
    if created:
        av = _AUTO_VACUUM.get(str(settings.new_file_auto_vacuum).lower())
        if av is None:
            raise ConfigurationError(f"new_file_auto_vacuum={settings.new_file_auto_vacuum!r} "
                                     f"is not one of {', '.join(_AUTO_VACUUM)}")
        # Writes page 1 of the empty file (the mode lives there): before the journal switch,
        # which would write it first and fix the mode at NONE.
        dbapi_conn.execute(f"PRAGMA auto_vacuum={av}")
    # Read the mode first; switch only when the policy says so (a settled file sees no write).
    _apply_journal_policy(dbapi_conn, path, settings, state, created=created)
    cur = dbapi_conn.cursor()
    try:
        # NORMAL is durable at checkpoint level under WAL and much faster than FULL; macOS
        # in WAL needs FULL and a full fsync at checkpoints (its plain fsync does not flush).
        cur.execute(f"PRAGMA synchronous={settings.synchronous_for(state.mode)}")
        if state.mode == "wal" and (settings.platform or sys.platform) == "darwin":
            cur.execute("PRAGMA checkpoint_fullfsync=1")
        # Bound the WAL: the default (-1) let it grow to the size of the database.
        cur.execute(f"PRAGMA journal_size_limit={int(settings.journal_size_limit)}")
        for name, value in settings.extra_pragmas.items():
            cur.execute(f"PRAGMA {name}={value}")
    finally:
        cur.close()


def _begin(conn: Connection) -> None:
    # Writers take the write lock at BEGIN so contention surfaces before any work runs.
    mode = conn.get_execution_options().get("hermes_begin", "DEFERRED")
    conn.exec_driver_sql("BEGIN IMMEDIATE" if mode == "IMMEDIATE" else "BEGIN")


def _install_sqlite_events(engine: Engine, path: str, settings: SqliteSettings) -> None:
    state = journal_state(engine)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: sqlite3.Connection, _record) -> None:
        configure_sqlite_connection(dbapi_conn, path, settings, state)

    event.listen(engine, "begin", _begin)


def create_sqlite_engine(path: str | os.PathLike, settings: SqliteSettings | None = None,
                         *, echo: bool = False) -> Engine:
    """Create an Engine for the SQLite file at ``path`` with the policy of this module.

    The parent directory is created; the file itself is created by SQLite on first write.
    Connections come from a ``QueuePool`` sized for many threads: each thread checks out
    its own connection (never one connection shared behind a lock).
    """
    settings = settings or SqliteSettings()
    path = Path(path)
    make_private_dirs(path.parent)  # new directories 0700 whatever the umask (issue 31)
    engine = sa.create_engine(
        URL.create("sqlite", database=str(path)),
        echo=echo,
        poolclass=sa.pool.QueuePool,
        pool_size=settings.pool_size,
        max_overflow=settings.max_overflow,
        pool_timeout=60,
        connect_args={"check_same_thread": False, "timeout": settings.busy_timeout_ms / 1000,
                      "factory": TrackedConnection},  # counted per path (docs/sessions-storage.md §3.0)
    )
    _install_sqlite_events(engine, str(path), settings)
    return engine


class HandleEngine(Engine):
    """The engine of one store handle on one SQLite file (see :func:`create_handle_engine`):
    its journal state travels with it (:func:`journal_state`)."""

    journal: JournalState


# Class-level: every handle engine gets the BEGIN policy without a per-engine registration.
event.listen(HandleEngine, "begin", _begin)

_shared_lock = threading.Lock()
_shared_sqlite: tuple[Any, Callable[[sqlite3.Connection], None], Any] | None = None


def sqlite_dialect_kit() -> tuple[Any, Callable[[sqlite3.Connection], None], Any]:
    """This process's SQLite dialect (initialized once), the per-connection set-up it asks
    for (pysqlite's ``regexp`` and ``floor`` functions) and one compiled-statement cache shared
    by every handle engine: a handle opened per request compiles nothing its process already
    compiled (the cache keys carry the dialect, which is this one)."""
    global _shared_sqlite
    if _shared_sqlite is not None:  # made once per process (every handle open asks)
        return _shared_sqlite
    with _shared_lock:
        if _shared_sqlite is None:
            template = sa.create_engine("sqlite://", poolclass=sa.pool.NullPool)
            with template.connect():  # the dialect's first-connect initialization, once
                pass
            on_connect = template.dialect.on_connect() or (lambda _conn: None)
            _shared_sqlite = (template.dialect, on_connect, LRUCache(1000))
        return _shared_sqlite


def create_handle_engine(path: str | os.PathLike, settings: SqliteSettings,
                         connect: Callable[[], sqlite3.Connection], state: JournalState, *,
                         first: sqlite3.Connection | None = None) -> HandleEngine:
    """An engine whose pool takes its connections from ``connect`` (which must apply the
    connection policy itself, e.g. :func:`configure_sqlite_connection`) and hands out
    ``first`` — a connection the caller already opened and configured — before any other.

    Made in microseconds: the dialect and the compiled cache are the process's
    (:func:`sqlite_dialect_kit`), the BEGIN policy is a class-level listener, and no
    connect event runs (``connect`` does the set-up)."""
    dialect, on_connect, cache = sqlite_dialect_kit()
    pending = [first] if first is not None else []

    def creator() -> sqlite3.Connection:
        if pending:
            return pending.pop()
        con = connect()
        on_connect(con)
        return con

    pool = sa.pool.QueuePool(cast(Any, creator), dialect=dialect, pool_size=settings.pool_size,
                             max_overflow=settings.max_overflow, timeout=60)
    engine = HandleEngine(pool, dialect, URL.create("sqlite", database=str(path)),
                          query_cache_size=0, execution_options={"compiled_cache": cache})
    engine.journal = state
    return engine


def create_engine_for(store: str, url: str | os.PathLike | URL | None = None,
                      settings: SqliteSettings | None = None, **kwargs) -> Engine:
    """Engine for ``store`` at ``url`` (default: the store's configured location).

    A server engine (PostgreSQL) pings a pooled connection at checkout (``pool_pre_ping``,
    one round trip) unless the caller passes ``pool_pre_ping=False``, and always drops one
    the server closed while it sat in the pool
    (:func:`hermes_data.connectivity.idle_connection_dropped`, a socket poll): after a
    server restart the pool reconnects instead of handing out dead connections."""
    resolved = resolve_url(store, url)
    path = sqlite_path(resolved)
    if resolved.get_backend_name() == "sqlite":
        if path is None:
            raise ConfigurationError(
                f"{resolved!s}: in-memory SQLite hides WAL, locking and multi-process behaviour; "
                "use a file path"
            )
        return create_sqlite_engine(path, settings, **kwargs)
    kwargs.setdefault("pool_pre_ping", True)
    engine = sa.create_engine(resolved, **kwargs)
    if engine.dialect.driver == "psycopg":
        event.listen(engine, "checkout", _drop_if_closed_by_server)
    return engine


def _drop_if_closed_by_server(dbapi_connection: Any, record: Any, proxy: Any) -> None:
    """Pool checkout: a connection the server closed while it was idle is replaced (the pool
    invalidates it and checks out another on ``DisconnectionError``)."""
    if idle_connection_dropped(dbapi_connection):
        raise sa.exc.DisconnectionError("the server closed this pooled connection")


@contextmanager
def write_transaction(engine: Engine) -> Iterator[Connection]:
    """A connection inside a write transaction (``BEGIN IMMEDIATE`` on SQLite).

    Commits when the block ends normally, rolls back and re-raises otherwise.
    """
    with engine.connect() as conn:
        conn.execution_options(hermes_begin="IMMEDIATE")
        with conn.begin():
            yield conn


def is_sqlite(bind: Engine | Connection) -> bool:
    """True when ``bind`` talks to SQLite."""
    return bind.dialect.name == "sqlite"


def passive_checkpoint(conn: Connection) -> tuple[int, int, int] | None:
    """Run ``PRAGMA wal_checkpoint(PASSIVE)`` (the only checkpoint mode we issue).

    Returns ``(busy, log_frames, checkpointed_frames)`` or ``None`` off SQLite.
    """
    if not is_sqlite(conn):
        return None
    row = conn.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    return tuple(row) if row else None


#: Statement kinds that change a database (used by tests and diagnostics to trace writes).
WRITE_PREFIXES = ("INSERT", "UPDATE", "DELETE", "REPLACE", "CREATE", "ALTER", "DROP")


def trace_writes(engine: Engine) -> tuple[list[str], Callable[[], None]]:
    """Record every write statement ``engine`` sends from now on.

    Returns the list that fills up and a function that stops tracing.
    """
    seen: list[str] = []

    def _before(conn, cursor, statement, parameters, context, executemany):
        head = statement.lstrip().split(None, 1)[0].upper() if statement.strip() else ""
        if head in WRITE_PREFIXES or statement.lstrip().upper().startswith("BEGIN IMMEDIATE"):
            seen.append(statement)

    event.listen(engine, "before_cursor_execute", _before)
    return seen, lambda: event.remove(engine, "before_cursor_execute", _before)


def apply_wal_with_fallback(dbapi_conn: sqlite3.Connection, path: str | os.PathLike[str] = "",
                            settings: SqliteSettings | None = None) -> JournalState:
    """Apply the journal-mode policy (docs/sessions.md §8.2) to a caller's own DB-API
    connection: busy timeout first, then read the mode and switch only when the policy says so
    (WAL-reset-vulnerable builds keep fresh files in DELETE; an existing WAL file stays WAL;
    ``HERMES_DATA_JOURNAL_MODE`` overrides), then ``synchronous`` and ``journal_size_limit``.
    Returns the mode in effect and why. ``path`` only names the file in log lines; it is also
    the database label upstream keys its log deduplication on: a refused WAL (the filesystem
    raised or silently kept another mode) is an ERROR once per process and label, later
    refusals are DEBUG lines."""
    # The policy's fallback is DELETE (docs/sessions.md §8.2): a caller's own connection keeps it (the stores' TRUNCATE
    # flavour is their own choice, see the module docstring).
    settings = replace(settings or SqliteSettings(), rollback_journal="delete")
    label = str(path) or "<connection>"
    dbapi_conn.execute(f"PRAGMA busy_timeout={int(settings.busy_timeout_ms)}")
    state = JournalState()
    _apply_journal_policy(dbapi_conn, label, settings, state)
    dbapi_conn.execute(f"PRAGMA synchronous={settings.synchronous_for(state.mode)}")
    if state.mode == "wal" and (settings.platform or sys.platform) == "darwin":
        dbapi_conn.execute("PRAGMA checkpoint_fullfsync=1")
    dbapi_conn.execute(f"PRAGMA journal_size_limit={int(settings.journal_size_limit)}")
    return state


def keeping_journal_mode(path: Path, settings: SqliteSettings) -> SqliteSettings | None:
    """``settings`` with the journal mode the existing file at ``path`` is in, when ``settings``
    would switch it (its header says WAL or a rollback journal), else None: an engine made with
    them switches nothing, so a migration that is refused leaves the file byte-identical; the
    caller applies ``settings`` once the migration has committed."""
    # Through the process's shared header descriptor: opening and closing a descriptor of
    # the file here would drop every POSIX lock this process holds on it (a live handle's).
    lease = FileHeader(path)
    try:
        header = lease.read()
    finally:
        lease.release()
    current = "wal" if len(header) == 20 and header[18] == 2 and header[19] == 2 else "delete"
    wanted = settings.configured_mode()
    if wanted is None:  # the default policy moves a rollback-journal file to WAL only
        wanted = "wal" if current == "delete" and not settings.vulnerable() else current
    return None if wanted == current else replace(settings, journal_mode=current)
