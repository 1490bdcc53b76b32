"""The telemetry store object: an Engine plus one held DBAPI connection per thread.

Why not ``engine.begin()`` per call: with SQLAlchemy 2.1 a pool checkout, the ``begin``
event and statement compilation cost more than the two SQLite statements of a recorded call
(the issue measured ``engine.begin()`` + Core at ≈ 0.3× the raw upstream sequence). The store
therefore

* checks one connection out of the engine's pool **per thread, once**, and keeps it (the
  connect event has applied busy_timeout, the journal policy, ``synchronous`` …);
* runs statements that were **compiled once** from the Core constructs of
  :mod:`hermes_data.telemetry.schema` (:class:`Prepared`) straight on the DBAPI cursor, so
  the schema stays the single authority and no SQL is written twice;
* serialises writers *of this process* on a per-file lock before ``BEGIN IMMEDIATE``:
  SQLite admits one writer at a time anyway, and a lock hand-off is far cheaper than the
  busy handler's sleep-and-retry. Other processes still meet in ``busy_timeout``.

Readers never take the lock. The functions of :mod:`.writes` / :mod:`.reads` also accept a
SQLAlchemy ``Connection`` or ``Engine``; they then run the same Core constructs through
SQLAlchemy (slower, but inside the caller's transaction when there is one).

PostgreSQL
    ``TelemetryStore("postgresql+psycopg://…")`` returns a :class:`PgTelemetryStore`: the same
    API over a pooled engine, one held psycopg connection per thread (in autocommit mode, so
    a lone SELECT leaves no idle transaction behind), writes in plain ``BEGIN … COMMIT``
    transactions (row locks and ``ON CONFLICT`` make the upserts race-free; no process-wide
    writer lock). Every :class:`Prepared` statement also compiles — lazily, once — for
    PostgreSQL from its PostgreSQL construct (``INSERT … ON CONFLICT`` via the dialect's
    ``insert``; ``RETURNING id`` where SQLite reads ``lastrowid``). The SQLite fast path is
    untouched: the query functions test ``type(target) is TelemetryStore`` first.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import weakref
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence, cast

from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy import select as sa_select
from sqlalchemy.exc import DBAPIError

from hermes_data.config import resolve_url, sqlite_path
from hermes_data.connectivity import idle_connection_dropped, translated, typed_error
from hermes_data.engine import SqliteSettings, create_engine_for, create_sqlite_engine, journal_state
from hermes_data.errors import (ConfigurationError, NotAHermesDatabaseError, StoreBehindError,
                                store_io_error)
from hermes_data.isolation import ensure_test_isolation
from hermes_data.telemetry.sql import NO_JIT, RESET_JIT
from hermes_data.locking import driver_error
from hermes_data.statements import Prepared

log = logging.getLogger("hermes_data.telemetry.store")

class _Held:
    """This thread's checked-out connection; returned to the pool when the thread ends."""

    __slots__ = ("fairy", "dbapi", "cursor", "__weakref__")

    def __init__(self, fairy: Any) -> None:
        self.fairy = fairy
        self.dbapi: sqlite3.Connection = fairy.driver_connection
        #: One cursor for the hot path (:meth:`TelemetryStore.execute_pair`): a
        #: ``Connection.execute`` builds and drops a cursor per statement.
        self.cursor: sqlite3.Cursor = self.dbapi.cursor()

    def close(self) -> None:
        fairy, self.fairy = self.fairy, None
        if fairy is not None:
            try:
                fairy.close()
            except Exception:  # pragma: no cover - interpreter shutdown
                pass

    def discard(self) -> None:
        """Drop the connection for good (the pool closes it instead of reusing it): after a
        rollback that failed too, its state is unknown; the thread's next call checks out a
        fresh one."""
        fairy, self.fairy = self.fairy, None
        if fairy is not None:
            try:
                fairy.invalidate()
            except Exception:  # pragma: no cover - already broken
                pass

    def __del__(self) -> None:
        self.close()


def _roll_back(held: _Held | None, conn: sqlite3.Connection) -> None:
    """Roll back an open transaction after a failure; when even that fails (the storage is
    still failing), discard the connection so nothing of the transaction survives on it."""
    if not conn.in_transaction:
        return  # SQLite rolled back by itself (an I/O error, a full disk)
    try:
        conn.rollback()
    except sqlite3.Error:
        log.warning("rollback after a failed telemetry write failed too; the connection is "
                    "discarded", exc_info=True)
        if held is not None:
            held.discard()
        else:
            conn.close()


def failed_write(exc: BaseException, path: str, operation: str) -> BaseException:
    """What a failed SQLite write of the telemetry store raises: ``exc`` translated to a
    :class:`~hermes_data.errors.StoreIOError` / ``StoreFullError`` naming ``path`` when it is
    an I/O fault (docs/telemetry-api.md "Errors a write can raise"), else ``exc`` itself. The
    one translation of the store's write transactions (:meth:`TelemetryStore.execute_pair`,
    :meth:`TelemetryStore.write`, :func:`write_tx`); only ever called on the except path."""
    err = store_io_error(exc, path, operation)
    if err is None:
        return exc
    log.debug("%s", err)  # the caller gets it raised; a warning would report it twice
    return err


_locks_guard = threading.Lock()
_write_locks: dict[str, threading.RLock] = {}


def _write_lock_for(path: str) -> threading.RLock:
    with _locks_guard:
        return _write_locks.setdefault(path, threading.RLock())


class _DbapiTx:
    """Executes :class:`Prepared` statements on a DBAPI connection inside a transaction."""

    __slots__ = ("conn",)
    dialect = "sqlite"

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def run(self, p: Prepared, params: Mapping[str, Any] = {}) -> sqlite3.Cursor:
        return self.conn.execute(p.sql, p.args(params))

    def runmany(self, p: Prepared, rows: Sequence[Mapping[str, Any]]) -> None:
        self.conn.executemany(p.sql, [p.args(r) for r in rows])

    @staticmethod
    def inserted_id(res: sqlite3.Cursor) -> int:
        """The rowid the last INSERT of ``res`` created."""
        return cast(int, res.lastrowid)  # set by every INSERT on sqlite3


class _PgTx:
    """Executes :class:`Prepared` statements (PostgreSQL form) on a psycopg connection."""

    __slots__ = ("conn",)
    dialect = "postgresql"

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def run(self, p: Prepared, params: Mapping[str, Any] = {}):
        c = p.pg
        if p.plan_per_call:  # unnamed: planned with these values (docs/telemetry.md §8.8)
            return self.conn.execute(c.sql, c.args(params), prepare=False)
        return self.conn.execute(c.sql, c.args(params))

    def runmany(self, p: Prepared, rows: Sequence[Mapping[str, Any]]) -> None:
        if rows:
            c = p.pg
            with self.conn.cursor() as cur:
                cur.executemany(c.sql, [c.args(r) for r in rows])

    @staticmethod
    def inserted_id(res: Any) -> int:
        """The id an ``INSERT … RETURNING id`` produced."""
        return res.fetchone()[0]


class _SaTx:
    """Executes :class:`Prepared` statements through a SQLAlchemy ``Connection``."""

    __slots__ = ("conn", "dialect")

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.dialect = conn.dialect.name

    def run(self, p: Prepared, params: Mapping[str, Any] = {}):
        return self.conn.execute(p.stmt_for(self.dialect), p.sa_params(params))

    def runmany(self, p: Prepared, rows: Sequence[Mapping[str, Any]]) -> None:
        if rows:
            self.conn.execute(p.stmt_for(self.dialect), [p.sa_params(r) for r in rows])

    def inserted_id(self, res: Any) -> int:
        """The id of the row an insert created (``lastrowid`` on SQLite, ``RETURNING``
        elsewhere)."""
        return res.lastrowid if self.dialect == "sqlite" else res.scalar_one()


def migrate_if_missing(path: Path, settings: SqliteSettings | None = None) -> bool:
    """Create the store at ``path`` when the file is missing or empty (never leave a 0-byte
    file behind): the same upgrade ``hermes-data upgrade`` runs, owner-only, with the
    caller's engine ``settings`` (journal mode …). Returns True when it created the store.
    Existing files are left to the caller (zero cost)."""
    try:
        if path.stat().st_size > 0:
            return False  # the common case: no migration module is even imported
    except FileNotFoundError:
        pass
    from hermes_data.migrate import runner as migrate

    migrate.upgrade("telemetry", path, settings=settings)  # refuses a dangling link first
    return True


class TelemetryStore:
    """The telemetry database: use as ``with TelemetryStore(path) as store: ...``.

    ``url`` is a path or SQLAlchemy URL (default: the configured telemetry location, see
    :mod:`hermes_data.config`); ``engine`` reuses an existing engine instead (the store then
    does not dispose it). A missing (or zero-byte) file is created and upgraded to the head,
    owner-only, like ``SessionStore`` does; an existing file must already be at head
    (``hermes-data upgrade``) — the store never alters an existing file's tables. A dangling
    symbolic link is refused (:class:`~hermes_data.errors.StoreLinkError`).

    A ``postgresql+psycopg://`` URL (or a PostgreSQL engine) gives a
    :class:`PgTelemetryStore` with the same API.
    """

    #: Dialect name of the store's engine.
    dialect = "sqlite"
    #: What a store without any revision is, in the refusal's words.
    _kind = "legacy file"

    def __new__(cls, url: str | os.PathLike | URL | None = None, *,
                settings: SqliteSettings | None = None, engine: Engine | None = None):
        if cls is TelemetryStore:
            backend = (engine.dialect.name if engine is not None
                       else resolve_url("telemetry", url).get_backend_name())
            if backend == "postgresql":
                cls = PgTelemetryStore
        return object.__new__(cls)

    def __init__(self, url: str | os.PathLike | URL | None = None, *,
                 settings: SqliteSettings | None = None, engine: Engine | None = None) -> None:
        if engine is None:
            resolved = resolve_url("telemetry", url)
            path = sqlite_path(resolved)
            if resolved.get_backend_name() != "sqlite" or path is None:
                raise ConfigurationError(
                    f"{resolved!s}: TelemetryStore drives SQLite files; for another backend pass "
                    "a SQLAlchemy Connection to the query functions instead"
                )
            ensure_test_isolation(path)  # first: before any mkdir or connection
            if migrate_if_missing(path, settings):
                log.info("%s: created the telemetry store (owner-only, at head)", path)
            # Generous pool: each thread holds one connection for its lifetime.
            settings = settings or SqliteSettings()
            settings = replace(settings, pool_size=max(settings.pool_size, 16),
                               max_overflow=max(settings.max_overflow, 240))
            engine = create_sqlite_engine(path, settings)
            self._owns_engine = True
        else:
            if engine.dialect.name != "sqlite":
                raise ConfigurationError(
                    f"engine dialect {engine.dialect.name!r}: TelemetryStore drives SQLite only")
            self._owns_engine = False
        self.engine: Engine = engine
        self.path: str = str(engine.url.database)
        self._local = threading.local()
        self._held: weakref.WeakSet[_Held | _PgHeld] = weakref.WeakSet()
        self._held_guard = threading.Lock()
        #: The file was found at the head revision (checked on the first connection).
        self._at_head = False
        # Chosen lazily, once a connection has settled the journal mode (see writer_queue).
        self._write_lock: AbstractContextManager | None = None
        self._closed = False

    # -- connections -------------------------------------------------------------------
    def connection(self) -> sqlite3.Connection:
        """This thread's DBAPI connection (checked out once, then held)."""
        held = getattr(self._local, "held", None)
        if held is None or held.fairy is None:
            if self._closed:
                raise ConfigurationError(f"{self.path}: the telemetry store is closed")
            held = self._probe_connection()
            if not self._at_head:
                self._check_head(held)
            self._local.held = held
            with self._held_guard:
                self._held.add(held)
        return held.dbapi

    def _check_head(self, held: _Held | _PgHeld) -> None:
        """Refuse a store behind (or beyond) the head revision, once per store, before its
        first statement: an older shape would fail the first write with a raw "no such
        column" (issue 33). The store never migrates an existing file itself; the message
        names the command that does. A check on the first connection, not per call."""
        from hermes_data.telemetry.schema import HEAD_REVISION, alembic_version

        sql = str(sa_select(alembic_version.c.version_num).compile(dialect=self.engine.dialect))
        try:
            found = self._stored_revision(held, sql)
        except BaseException:
            held.close()
            raise
        if found != HEAD_REVISION:
            held.close()
            raise StoreBehindError(
                f"{self.path}: the telemetry store is at revision "
                f"{found or f'none (a {self._kind} never upgraded)'}, not the head "
                f"{HEAD_REVISION}; run `hermes-data upgrade --store telemetry --url "
                f"{self.path}` first. Nothing was written")
        self._at_head = True

    @staticmethod
    def _stored_revision(held: Any, sql: str) -> str | None:
        """The Alembic revision the file records (``None``: no ``alembic_version`` table)."""
        try:
            row = held.dbapi.execute(sql).fetchone()
        except sqlite3.OperationalError as exc:
            if "no such table" not in str(exc).lower():
                raise
            return None
        return None if row is None else row[0]

    def require_head(self) -> None:
        """Check now, on a connection of its own, that the store is at the head revision:
        :class:`~hermes_data.errors.StoreBehindError` (naming ``hermes-data upgrade``)
        otherwise. What the first connection of a thread checks anyway; for a caller that
        wants the refusal before its first operation (:class:`~.buffered.BufferedWriter`,
        whose writes run on a thread of its own). Once per store."""
        if self._at_head:
            return
        if self._closed:
            raise ConfigurationError(f"{self.path}: the telemetry store is closed")
        held = self._probe_connection()
        try:
            self._check_head(held)
        finally:
            held.close()

    def _probe_connection(self) -> Any:
        """A new connection out of the engine's pool (a foreign file: one refusal naming it,
        not the driver's "file is not a database" from the connection policy's first PRAGMA)."""
        try:
            return _Held(self.engine.raw_connection())
        except sqlite3.DatabaseError as exc:
            if "not a database" not in str(exc):
                raise
            raise NotAHermesDatabaseError(
                f"{self.path}: not an SQLite database ({exc}); refused, the file was left "
                "unchanged") from exc

    @property
    def writer_queue(self) -> AbstractContextManager:
        """The context writers of this process enter around ``BEGIN IMMEDIATE … COMMIT``."""
        queue = self._write_lock
        if queue is None:
            queue = self._write_lock = self._writer_queue()
        return queue

    def _writer_queue(self) -> AbstractContextManager:
        """How this process's writers on the file take turns.

        In a rollback-journal mode every commit fsyncs and SQLite's busy handler sleeps
        between retries, so writers queue on one in-process lock per file (measured here:
        +20 % at 8 threads). Under WAL a commit is cheap and SQLite's own hand-off of the
        write lock beats a Python-level queue (8 threads: 1.13x the baseline without the
        lock, 0.90x with it), so there is none.
        """
        if journal_state(self.engine).mode == "wal":
            return nullcontext()
        return _write_lock_for(os.path.realpath(self.path))

    def release_thread_connection(self) -> None:
        """Return this thread's held connection to the pool (upstream ``close_thread_conn``)."""
        held = getattr(self._local, "held", None)
        if held is not None:
            held.close()
            self._local.held = None

    def close(self) -> None:
        """Release every held connection and dispose the engine if the store created it."""
        self._closed = True
        with self._held_guard:
            helds = list(self._held)
        for held in helds:
            held.close()
        self._local = threading.local()
        if self._owns_engine:
            self.engine.dispose()

    def __enter__(self) -> "TelemetryStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- transactions ------------------------------------------------------------------
    @contextmanager
    def write(self, operation: str = "a telemetry write") -> Iterator[_DbapiTx | _PgTx]:
        """``BEGIN IMMEDIATE … COMMIT`` on this thread's connection (rolled back on error).

        An I/O fault of the storage (at ``BEGIN``, any statement or the ``COMMIT``) reaches
        the caller as :class:`~hermes_data.errors.StoreIOError` / ``StoreFullError`` naming
        the file and ``operation``; the transaction is rolled back (or its connection
        discarded) and the next call starts clean."""
        conn = self.connection()
        with self.writer_queue:
            try:
                conn.execute("BEGIN IMMEDIATE")
                yield _DbapiTx(conn)
                conn.commit()
            except BaseException as exc:  # BEGIN, the caller's body or COMMIT: rolled back once
                _roll_back(getattr(self._local, "held", None), conn)
                err = failed_write(exc, self.path, operation) if isinstance(exc, sqlite3.Error) \
                    else exc
                if err is exc:
                    raise
                self._drop_faulted_connection()
                raise err from exc

    @contextmanager
    def read(self, snapshot: bool = True) -> Iterator[_DbapiTx | _PgTx]:
        """Reads on this thread's connection; with ``snapshot`` inside a deferred
        ``BEGIN … COMMIT`` so several SELECTs see one state of the database."""
        conn = self.connection()
        if not snapshot or conn.in_transaction:  # one statement, or nested in a transaction
            yield _DbapiTx(conn)
            return
        conn.execute("BEGIN")
        try:
            yield _DbapiTx(conn)
        finally:
            conn.commit()

    def execute_pair(self, sql1: str, args1: tuple, sql2: str, args2: tuple) -> int:
        """Hot path: two statements in one ``BEGIN IMMEDIATE`` transaction; returns the first
        statement's ``lastrowid``.

        Lean on purpose (issue 14, ``record_tool_call`` at parity with upstream's two bare
        statements): this thread's held cursor, no context manager in WAL (no queue there).
        """
        held = getattr(self._local, "held", None)
        if held is None or held.fairy is None:
            self.connection()
            held = self._local.held
        queue = self._write_lock
        if queue is None:
            queue = self.writer_queue
        try:  # free on success (zero-cost try); the translation is the except path only
            if type(queue) is nullcontext:  # WAL: SQLite hands the write lock over itself
                return _pair(held, sql1, args1, sql2, args2)
            with queue:
                return _pair(held, sql1, args1, sql2, args2)
        except sqlite3.Error as exc:
            err = failed_write(exc, self.path, "a telemetry write to " + sql1.split()[2])
            if err is exc:
                raise
            self._drop_faulted_connection()
            raise err from exc

    def _drop_faulted_connection(self) -> None:
        """After an I/O fault, this thread's connection is not reused: the fault may have left
        it degraded for good (SQLite opens the file read-only when its read-write open
        fails), and a fresh one costs one open on an already failing path."""
        held = getattr(self._local, "held", None)
        if held is not None:
            held.discard()
            with self._held_guard:
                self._held.discard(held)
            self._local.held = None


def _pair(held: _Held, sql1: str, args1: tuple, sql2: str, args2: tuple) -> int:
    cur = held.cursor
    try:
        cur.execute("BEGIN IMMEDIATE")
        rowid = cast(int, cur.execute(sql1, args1).lastrowid)  # set by every INSERT
        cur.execute(sql2, args2)
        # COMMIT through the cursor's statement cache (Connection.commit prepares it anew
        # each time); a COMMIT that fails (busy past the timeout) rolls back like the rest.
        cur.execute("COMMIT")
    except BaseException:
        _roll_back(held, held.dbapi)
        raise
    return rowid


#: What the query functions accept as their first argument.
Target = TelemetryStore | Connection | Engine


@contextmanager
def write_tx(target: Target) -> Iterator[_DbapiTx | _PgTx | _SaTx]:
    """A write transaction on any :data:`Target` (``BEGIN IMMEDIATE`` on SQLite).

    A ``Connection`` already inside a transaction is used as is (the caller commits). On
    SQLite an I/O fault reaches the caller as :class:`~hermes_data.errors.StoreIOError` /
    ``StoreFullError`` naming the file (:func:`failed_write`).
    """
    if isinstance(target, TelemetryStore):
        with target.write() as tx:
            yield tx
        return
    if not isinstance(target, (Connection, Engine)):
        raise TypeError(f"expected TelemetryStore, Connection or Engine, got {type(target).__name__}")
    try:
        if isinstance(target, Connection):
            if target.in_transaction():
                yield _SaTx(target)
            else:
                target.execution_options(hermes_begin="IMMEDIATE")
                with target.begin():
                    yield _SaTx(target)
        else:
            with target.connect() as conn:
                conn.execution_options(hermes_begin="IMMEDIATE")
                with conn.begin():
                    yield _SaTx(conn)
    except DBAPIError as exc:
        if target.dialect.name != "sqlite":
            raise
        err = failed_write(exc, str(target.engine.url.database), "a telemetry write")
        if err is exc:
            raise
        raise err from exc


@contextmanager
def read_tx(target: Target, snapshot: bool = False) -> Iterator[_DbapiTx | _PgTx | _SaTx]:
    """Reads on any :data:`Target` (``snapshot``: one transaction for several SELECTs)."""
    if isinstance(target, TelemetryStore):
        with target.read(snapshot) as tx:
            yield tx
    elif isinstance(target, Connection):
        yield _SaTx(target)
    elif isinstance(target, Engine):
        with target.connect() as conn:
            yield _SaTx(conn)
    else:
        raise TypeError(f"expected TelemetryStore, Connection or Engine, got {type(target).__name__}")


class _PgHeld:
    """This thread's checked-out psycopg connection, in autocommit mode while held."""

    __slots__ = ("fairy", "dbapi", "__weakref__")

    def __init__(self, fairy: Any) -> None:
        self.fairy = fairy
        self.dbapi = fairy.driver_connection
        self.dbapi.autocommit = True  # transactions are explicit: conn.transaction()
        # No JIT on the store's connections (docs/telemetry.md §8.8): its reads take
        # milliseconds, and a join of a long window costed past jit_above_cost paid tens of
        # milliseconds compiling before it ran. Reset when the connection goes back.
        self.dbapi.execute(NO_JIT)

    def invalidate(self) -> None:
        """The server closed this connection: drop it from the pool instead of returning it."""
        fairy, self.fairy = self.fairy, None
        if fairy is not None:
            try:
                fairy.invalidate()
            except Exception:  # pragma: no cover - already gone
                pass

    def close(self) -> None:
        fairy, self.fairy = self.fairy, None
        if fairy is not None:
            try:
                if self.dbapi.info.transaction_status == 0:  # IDLE: hand it back as it came
                    try:
                        self.dbapi.execute(RESET_JIT)
                    except Exception:  # the server went away: never back into the pool
                        fairy.invalidate()
                        return
                    self.dbapi.autocommit = False
                fairy.close()
            except Exception:  # pragma: no cover - interpreter shutdown / broken connection
                pass

    def __del__(self) -> None:
        self.close()


class PgTelemetryStore(TelemetryStore):
    """The telemetry store on PostgreSQL (what ``TelemetryStore(postgresql_url)`` returns).

    One psycopg connection per thread, checked out of a QueuePool once and held (autocommit
    between transactions); writes run in ``BEGIN … COMMIT`` (PostgreSQL has row locks, so
    there is no process-wide writer lock and no ``BEGIN IMMEDIATE``); snapshot reads run in
    one ``REPEATABLE READ READ ONLY`` transaction. The schema must be at head
    (``hermes-data upgrade --url …``): the first connection refuses a database behind it
    (:class:`~hermes_data.errors.StoreBehindError`), as the SQLite store does.

    The server going away (docs/postgresql.md, "When the server goes away"): a held
    connection the server closed while it was idle is replaced at the next call
    (:func:`hermes_data.connectivity.idle_connection_dropped`); a connection loss or a
    canceled statement during a call raises
    :class:`~hermes_data.errors.DatabaseUnavailableError` /
    :class:`~hermes_data.errors.StatementTimeoutError` from :meth:`write`, :meth:`read` and
    :meth:`execute_prepared_pair` — the store's only ways to the database — and nothing is
    rerun.
    """

    dialect = "postgresql"
    _kind = "database"

    def __init__(self, url: str | os.PathLike | URL | None = None, *,
                 settings: SqliteSettings | None = None, engine: Engine | None = None) -> None:
        if engine is None:
            resolved = resolve_url("telemetry", url)
            engine = create_engine_for("telemetry", resolved, pool_size=16, max_overflow=240,
                                       pool_timeout=60)
            self._owns_engine = True
        else:
            self._owns_engine = False
        if engine.dialect.driver != "psycopg":
            raise ConfigurationError(
                f"{engine.url.render_as_string(hide_password=True)}: the PostgreSQL telemetry "
                "store needs the psycopg (3) driver: postgresql+psycopg://…")
        self.engine = engine
        self.path = engine.url.render_as_string(hide_password=True)
        #: How errors name this store.
        self.where = f"telemetry store {self.path}"
        self._local = threading.local()
        self._held = weakref.WeakSet()
        self._held_guard = threading.Lock()
        # Only the buffered writer takes it (one group commit at a time per store).
        self._write_lock = threading.RLock()
        #: The database was found at the head revision (checked on the first connection).
        self._at_head = False
        self._closed = False

    def connection(self) -> Any:
        """This thread's psycopg connection (checked out once, then held; autocommit). One the
        server closed while it was held idle (a restart, ``pg_terminate_backend``) is
        replaced by a new one."""
        held = getattr(self._local, "held", None)
        if held is not None and held.fairy is not None and idle_connection_dropped(held.dbapi):
            log.info("%s: the server closed this thread's idle connection; reconnecting",
                     self.where)
            held.invalidate()
        if held is None or held.fairy is None:
            if self._closed:
                raise ConfigurationError(f"{self.path}: the telemetry store is closed")
            held = self._probe_connection()
            if not self._at_head:
                self._check_head(held)
            self._local.held = held
            with self._held_guard:
                self._held.add(held)
        return held.dbapi

    def _probe_connection(self) -> Any:
        with translated(self.where, "connect"):
            return _PgHeld(self.engine.raw_connection())

    @staticmethod
    def _stored_revision(held: Any, sql: str) -> str | None:
        # Autocommit: a failed SELECT leaves no aborted transaction behind.
        try:
            row = held.dbapi.execute(sql).fetchone()
        except Exception as exc:
            if getattr(exc, "sqlstate", None) != "42P01":  # undefined_table
                raise
            return None
        return None if row is None else row[0]

    def _raise_typed(self, exc: Exception, during: str) -> None:
        """Raise the typed error for a lost server or a canceled statement (dropping this
        thread's connection when the server closed it); return for any other error."""
        typed = typed_error(exc, self.where, during)
        if typed is None:
            return
        held = getattr(self._local, "held", None)
        if held is not None and held.fairy is not None and held.dbapi.closed:
            held.invalidate()
        raise typed from driver_error(exc)

    @contextmanager
    def write(self, operation: str = "a telemetry write") -> Iterator[_PgTx]:
        """``BEGIN … COMMIT`` on this thread's connection (rolled back on error); nested in
        an open transaction it becomes a savepoint. A lost server or a canceled statement
        raises typed (see the class docstring; ``operation`` is the SQLite store's wording
        and unused here); the write is not repeated."""
        conn = self.connection()
        committing = False
        try:
            with conn.transaction():
                yield _PgTx(conn)
                committing = True  # the body is done: leaving the block sends COMMIT
        except Exception as exc:
            self._raise_typed(exc, "commit" if committing else "write")
            raise

    @contextmanager
    def read(self, snapshot: bool = True) -> Iterator[_PgTx]:
        """Reads on this thread's connection; with ``snapshot`` inside one
        ``REPEATABLE READ READ ONLY`` transaction so several SELECTs see one state."""
        conn = self.connection()
        try:
            if not snapshot or conn.info.transaction_status != 0:
                yield _PgTx(conn)
                return
            with conn.transaction():
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                yield _PgTx(conn)
        except Exception as exc:
            self._raise_typed(exc, "read")
            raise

    def execute_prepared_pair(self, first: Prepared, args1: tuple, second: Prepared,
                              args2: tuple) -> int:
        """Two statements in one transaction; ``first`` must return the new id
        (``INSERT … RETURNING id``)."""
        conn = self.connection()
        committing = False
        try:
            with conn.transaction():
                rowid = conn.execute(first.pg.sql, args1).fetchone()[0]
                conn.execute(second.pg.sql, args2)
                committing = True
        except Exception as exc:
            self._raise_typed(exc, "commit" if committing else "write")
            raise
        return rowid

    def execute_pair(self, sql1: str, args1: tuple, sql2: str, args2: tuple) -> int:
        raise ConfigurationError("execute_pair takes SQLite SQL; use execute_prepared_pair")
