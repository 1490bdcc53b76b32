"""The SQLite backend of the session store: one ``state.db`` file.

Open path (docs/sessions.md §8.1): writability preflight, owner-only creation, the
deleted-sidecar refusal, the engine policy (busy timeout first, journal mode, configured
pragmas, foreign keys), a read-gated upgrade or adoption, read-gated open-time heals, the
file identity for the live-handle guards, and — in WAL — a bounded ``mode=ro`` read pool.

Transactions (docs/sessions.md §8.5): one writer connection per handle, every write inside
``BEGIN IMMEDIATE``, SQLite's busy handler capped at 1 s and an application-level jittered
retry up to a patience budget (20 s routine, 60 s for transcript writes). An I/O error at
``BEGIN IMMEDIATE`` itself is retried once on the same connection. A writer closed under a
running write by a racing ``close()`` is reopened once. Structural corruption quarantines
the handle; FTS-scoped corruption drops the FTS triggers and marks the index stale
(fail-open), and the write is retried once. An I/O fault (a failed write, fsync or journal
open; a full disk) in a write, a read or the open is rolled back and raised as one
``StoreIOError`` / ``StoreFullError`` naming the file, never retried (:meth:`typed_fault`,
docs/sqlite-policy.md "I/O errors").
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine, URL

from hermes_data.migrate import reading
from hermes_data.migrate import runner as migrate
from hermes_data.engine import HandleEngine, JournalState, SqliteSettings, create_handle_engine
from hermes_data import storable
from hermes_data.errors import ConfigurationError, HermesDataError, store_io_error
from hermes_data.locking import driver_error
from hermes_data.files import FileHeader, make_owner_only
from hermes_data.sessions.storage import filesafety
from hermes_data.sessions.storage import handle_guards as guards
from hermes_data.sessions.storage import opening
from hermes_data.sessions.storage.repair import procedure as repair
from hermes_data.sessions.storage.fts import upstream_cjk
from hermes_data.sessions.errors import (DeletedWalGenerationError, SchemaBehindError, StateDbCorruptError,
                      StateDbPermissionError, StateDbReplacedError)
from hermes_data.sessions.storage.adoption import BUSY_TIMEOUT_MS, missing_core
from hermes_data.sessions.sql import for_dialect
from hermes_data.sessions.backends import sql as q
from hermes_data.sessions.backends import open_file, sqlite_open, sqlite_reads
from hermes_data.sessions.backends.sqlite_reads import is_busy
from hermes_data.sessions.backends.locks import FileLock, Pacer, Patience
from hermes_data.sessions.backends.base import (OPEN_PATIENCE_S, ROUTINE_PATIENCE_S, TRANSCRIPT_PATIENCE_S, Driver,
                   HandleState, OpenOptions, SessionBackend)

log = logging.getLogger("hermes_data.sessions.backends.sqlite")

T = TypeVar("T")

#: Best-effort PASSIVE checkpoint cadence (successful writes).
CHECKPOINT_EVERY = 50
#: Read-only opens: transient I/O errors retried this many times, this far apart (docs/sessions.md §8.6).
READ_ONLY_OPEN_RETRIES = 3
READ_ONLY_RETRY_PAUSE_S = 0.05
#: Reads wait this long in all for a writer holding the file (rollback-journal modes: a
#: committing writer, VACUUM or a prune blocks readers), then DatabaseBusyError.
READ_PATIENCE_S = 20.0
#: The paced incremental vacuum (docs/sessions.md §7.6): first step's pages, the write-lock
#: time a step aims at, and the pause between steps (``max(min, factor × step)``; 100 ms is
#: the longest sleep of SQLite's busy handler). Tests zero the pause.
VACUUM_FIRST_STEP_PAGES = 2000
VACUUM_STEP_TARGET_S = 0.1
VACUUM_PAUSE_MIN_S = 0.1
VACUUM_PAUSE_FACTOR = 1.0


def _free_pages(conn: Connection) -> int:
    return int(conn.exec_driver_sql(q.FREELIST_COUNT).scalar() or 0)


class SqliteBackend(SessionBackend):
    """A session-store SQLite file (see the module docstring)."""

    dialect = "sqlite"
    sql = for_dialect("sqlite")

    #: Test seam: called right before every ``BEGIN IMMEDIATE`` (fault injection).
    _before_begin: Callable[[], None] | None = None
    #: The handle's one reopen after a ``close()`` race has been used (docs/sessions.md §8.5).
    _race_reopened = False
    zero_probe = open_file.zero_probe  # the writable open's zero probe, by its header lease
    _owner_only = False  # set by open_file.prepare_file

    def __init__(self, url: URL, path: Path, *, settings: SqliteSettings | None = None,
                 pragmas: list[str] | None = None, open_patience_s: float = OPEN_PATIENCE_S,
                 read_only: bool = False, open_options: OpenOptions | None = None) -> None:
        self.state = HandleState(open_options or OpenOptions())
        self.url = url
        self.path = path
        self.read_only = read_only
        self._settings = settings or SqliteSettings(busy_timeout_ms=BUSY_TIMEOUT_MS)
        self._pragmas = list(pragmas or [])
        self._lock = threading.RLock()
        self._writes = 0
        self._closed = False
        self._engine: Engine | None = None
        self._writer_conn: Connection | None = None
        #: Makes the engine and the writer's SQLAlchemy connection on first use (issue 14: a
        #: settled open runs on the DB-API connection alone).
        self._engine_maker: Callable[[], Engine] | None = None
        self._journal = JournalState()
        self._raw: sqlite3.Connection | None = None
        self._reads: guards.LazyReadPool | None = None  # WAL: the read pool, made at first use
        self._identity: guards.FileIdentity | None = None
        self._header: FileHeader | None = None  # the on-disk header, by pread (docs/sessions.md §8.9)
        self._app_id = 0
        self._sticky: BaseException | None = None  # replaced / split WAL / corrupt
        self.quarantined = False
        self.fts_available = {"messages_fts": False, "messages_fts_trigram": False}
        self.open_repairs: list[str] = []
        initialized = False
        try:
            try:
                self._open_with_patience(open_patience_s, repair.open_hook(  # docs/sessions-storage.md §3.3-§3.4
                    self, self._open_read_only if read_only else self._open))
            except Exception as exc:
                if (typed := self.typed_fault("open", exc, writing=not read_only)) is not None:
                    raise typed from exc
                raise
            initialized = True
        finally:
            if not initialized:  # every exception path closes what it opened (docs/sessions.md §8.12)
                self._dispose()

    # -- open / close ------------------------------------------------------------------

    def _open_with_patience(self, open_patience_s: float, open_once: Callable[[], None]) -> None:
        patience = Patience(open_patience_s)
        while True:
            try:
                open_once()
                return
            except BaseException as exc:
                self._dispose()
                if not isinstance(exc, (sa.exc.OperationalError, sqlite3.OperationalError)) \
                        or not is_busy(exc):
                    raise
                patience.wait(exc, f"{self.path}: another process held the write lock for over "
                              f"{open_patience_s:.0f} s while opening; the database is healthy, "
                              "retry")

    def _open(self) -> None:
        # docs/sessions.md §8.1 steps 1–2: directory, writability preflight, owner-only creation, header lease.
        existing = open_file.prepare_file(self)
        self._refuse_deleted_sidecars("open")
        # Identity rule (README "What is refused, and how") on the writer's connection, ahead
        # of the policy: a foreign file stays byte-identical. A file this process found settled
        # with the same schema cookie and application_id skips it (sqlite_open's stamps).
        spec = migrate.store_spec("sessions")
        options = self.state.options
        ident = sqlite_open.Identification(spec, self.path, self._header, options)
        existing = existing and os.stat(self.path).st_size > 0
        if not existing:  # at the head before the writer's WAL switch fills it (else: Alembic)
            self.open_repairs.extend(migrate.upgrade(  # the open's patience retries busy
                "sessions", self.url, settings=self._settings, patience_s=0,
                hook_options=self.state.options).repairs)
        try:
            self._connect_writer(identify=ident if existing else None)
        except sqlite3.DatabaseError as exc:
            ident.refuse(exc)  # the identity rule's refusal, when a stamp let it be skipped
            raise
        assert self._raw is not None
        stamp, key = ident.stamp, ident.key
        plan = None if stamp is None else sqlite_open.settled_plan(self._raw, stamp, spec.head,
                                                                   ident.header)
        behind = False
        if plan is None:
            with self.reading_on_writer() as conn:  # one read transaction on a settled file
                revision = migrate.current_revision(conn)
                behind = revision != spec.head or bool(missing_core(self._raw))
                if not behind:
                    plan, facts = sqlite_open.plan_open_checks(conn, self._raw, options)
                    sqlite_open.remember(key, plan, facts, spec.head, options)
        if behind:  # adopt/upgrade: the corruption check, read-only, before any write
            checked = existing and migrate.probe_file(spec, self.path).revision != spec.head
            report = migrate.upgrade("sessions", self.url, probed=checked,
                                     settings=self._settings, patience_s=0,
                                     hook_options=options)
            self.open_repairs.extend(report.repairs)
        self._open_checks(plan)
        wal = self._journal.mode == "wal"
        real = None if self._header is None else self._header.key  # resolved once per open
        self._identity = guards.FileIdentity.record(self.path, wal=wal, real=real)
        if not self._owner_only:  # open_file.prepare_file saw every path 0600 already
            self._harden_permissions()
        if wal:
            self._reads = guards.LazyReadPool(self.path, tuple(self._pragmas),
                                              real or str(self.path.resolve()))

    def _harden_permissions(self) -> None:
        # chmod by path only: opening+closing the file would drop this process's POSIX locks.
        make_owner_only(self.path, on_error=lambda p, exc: log.debug("could not chmod %s: %s",
                                                                     p, exc))

    def _refuse_deleted_sidecars(self, what: str) -> None:
        try:  # a second opener would mint a second WAL generation (docs/sessions.md §8.10)
            guards.refuse_deleted_wal_generation(
                self.path, fd=None if self._header is None else self._header.fd, what=what)
        except DeletedWalGenerationError as exc:
            self._sticky = exc
            raise

    def _connect_read_only(self) -> sqlite3.Connection:
        """One ``mode=ro`` connection attempt (a seam: tests inject transient I/O errors),
        through the one reader that never writes the file: a hot rollback journal is read
        through a private rolled-back snapshot, and the ``-wal``/``-shm`` a reader makes
        beside a WAL file that had none go when it closes (docs/cli.md "Reading a store
        without writing it")."""
        return reading.connect(self.path, timeout=guards.READ_ONLY_TIMEOUT_S,
                               check_same_thread=False, isolation_level=None)

    def _open_read_only(self) -> None:
        """``mode=ro``, 1 s timeout, no DDL, no write lock ever (docs/sessions.md §8.6). A transient ``disk i/o
        error`` (a reader cannot run WAL recovery) is retried 3 times, 50 ms apart."""
        migrate.require_created("sessions", self.path)  # never create a file by reading it
        try:
            con = opening.connect_read_only_retrying(
                self._connect_read_only, self.path, self._pragmas,
                retries=READ_ONLY_OPEN_RETRIES, pause_s=READ_ONLY_RETRY_PAUSE_S)
        except sqlite3.OperationalError as exc:
            # A WAL store in a directory this process cannot write: unwritable, not damage.
            if (err := migrate.not_writable(self.path, exc)) is not None:
                raise StateDbPermissionError(err.path, err.command, str(err)) from exc
            raise
        self._raw = con
        self._engine = sa.create_engine("sqlite://", creator=lambda: con,
                                        poolclass=sa.pool.StaticPool)

        @event.listens_for(self._engine, "begin")
        def _begin(conn: Connection) -> None:
            conn.exec_driver_sql(q.BEGIN)

        self._writer_conn = self._engine.connect()
        if missing := missing_core(con):  # one catalogue statement: its own snapshot
            raise SchemaBehindError(", ".join(missing), str(self.path))
        self.fts_available = opening.probe_fts_tables(con)

    def _open_checks(self, plan: tuple | None = None) -> None:
        """Read-gated open-time heals (docs/sessions.md §8.4, :func:`sqlite_open.open_heals`): zero writes on a
        settled database (``plan``: the reads, when the caller already made them)."""
        if plan is None:
            assert self._raw is not None
            with self.reading_on_writer() as conn:
                plan = sqlite_open.plan_open_checks(conn, self._raw, self.state.options)[0]
        fts, app_id, _present, *needs = plan
        if app_id and not any(needs):
            self.fts_available, self._app_id = fts, app_id  # settled: nothing written
            return

        work = sqlite_open.open_heals(self.path, plan, self.open_repairs, self.state.options)
        # Inside the open's patience loop: busy propagates to it (no nested retry budget).
        self._attempt(work, raw=False, guarded=False)
        assert self._raw is not None
        self._app_id = int(self._raw.execute(q.APPLICATION_ID).fetchone()[0] or 0)
        self.fts_available = opening.probe_fts_tables(self._raw)

    def _dispose(self) -> None:
        if self._reads is not None:
            self._reads.dispose()
            self._reads = None
        raw_pooled = self._writer_conn is not None  # else the handle owns the DB-API connection
        if self._writer_conn is not None:
            try:
                self._writer_conn.close()
            except Exception as exc:  # noqa: BLE001 - closing must go on
                log.debug("closing the writer failed: %s", exc)
            finally:
                self._writer_conn = None
        if self._raw is not None and (self.read_only or not raw_pooled):
            self._raw.close()
        self._raw = None
        self._engine_maker = None
        if self._engine is not None:  # closes the pooled connections (no new pool: done)
            if isinstance(self._engine, HandleEngine):
                self._engine.pool.dispose()
            else:
                self._engine.dispose()
            self._engine = None
        if self._header is not None:  # after every connection of the handle is closed
            self._header.release()
            self._header = None

    def close(self) -> None:
        """PASSIVE checkpoint (not on read-only or quarantined handles), close every
        connection, forget the sidecar identity. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if (self._raw is not None and not self.read_only and not self.quarantined
                    and self._journal.mode == "wal"):
                self.checkpoint()
            if self._identity is not None:
                self._identity.forget_sidecars()  # a clean last close may unlink them
            self._dispose()

    def checkpoint(self) -> None:
        """Best-effort ``PRAGMA wal_checkpoint(PASSIVE)`` outside any transaction (never raises).

        Sent on the writer's DBAPI connection (driver transactions are off), so no BEGIN
        wraps it; PASSIVE is the only mode this library issues (docs/sessions.md §8.8).
        """
        if self.quarantined or self._raw is None:
            return
        try:
            self._raw.execute(q.CHECKPOINT_PASSIVE).fetchall()
        except sqlite3.Error as exc:
            log.debug("PASSIVE checkpoint skipped: %s", exc)

    @property
    def journal_mode(self) -> str:
        """Journal mode the engine policy settled on (``wal`` / ``delete``)."""
        if self.read_only:
            assert self._raw is not None
            return str(self._raw.execute(q.JOURNAL_MODE).fetchone()[0]).lower()
        return self._journal.mode

    @property
    def read_pool(self) -> guards.ReadPool | None:
        """The handle's read pool (WAL writable handles only; made on first use: a read, or
        this property)."""
        return None if self._reads is None else self._reads.get()

    def owner_profile(self, root: Path) -> str | None:
        """``<root>/state.db`` → ``default``; ``<root>/profiles/<name>/state.db`` → ``<name>``."""
        return opening.owner_profile(self.path, root)

    # -- transactions ------------------------------------------------------------------

    def guard(self) -> None:
        """Live-handle guards before a write (docs/sessions.md §8.11): sticky failures, replaced file, split WAL."""
        if self._sticky is not None:
            raise self._sticky
        if self._identity is None:
            return
        found = self._identity.check(self.path) or guards.disk_header_changed(
            self._header, self._app_id)
        if found is not None:
            kind, why = found
            self._sticky = (StateDbReplacedError if kind == "replaced"
                            else DeletedWalGenerationError)(str(self.path), why)
            raise self._sticky

    def check_header(self, application_id: int | None) -> None:
        """Refuse (stickily) a file whose ``application_id`` changed since the open."""
        if application_id and self._app_id and application_id != self._app_id:
            self._sticky = StateDbReplacedError(
                str(self.path), f"the file's application_id changed ({self._app_id} -> "
                f"{application_id}): it was replaced under a live handle")
            raise self._sticky

    def _attempt(self, fn: Callable[[Any], T], *, raw: bool, guarded: bool = True,
                 header_in_fn: bool = False) -> T:
        """One write transaction: ``BEGIN IMMEDIATE`` → ``fn`` → ``COMMIT`` (docs/sessions.md §8.5).

        ``header_in_fn``: ``fn`` itself passes the file's ``application_id`` to
        :meth:`check_header` before the transaction can commit, so the separate header read
        is skipped. An I/O error raised by ``BEGIN IMMEDIATE`` itself (``fn`` not started,
        nothing mutated) is retried once on the same connection; once ``fn`` has started,
        every error rolls back and propagates. Never closes the connection to heal anything.
        """
        if self._raw is None:
            raise ConfigurationError(f"{self.path}: the session store is closed")
        if self.read_only:
            raise ConfigurationError(f"{self.path}: this session store handle is read-only")
        if guarded:
            self.guard()
        con = self._raw
        tx = None
        for attempt in (0, 1):
            try:
                if self._before_begin is not None:
                    self._before_begin()
                if raw:
                    con.execute(q.BEGIN_IMMEDIATE)
                else:
                    tx = self._sa_writer().begin()
                break
            except (sqlite3.OperationalError, sa.exc.OperationalError) as exc:
                if attempt == 0 and guards.is_disk_io_error(exc):
                    log.warning("%s: I/O error at BEGIN IMMEDIATE (%s); retrying once on the "
                                "same connection", self.path, exc)
                    continue
                raise
        try:
            if guarded and self._app_id and not header_in_fn:
                self.check_header(con.execute(q.APPLICATION_ID).fetchone()[0])
            result = fn(con if raw else self._sa_writer())
            if raw:
                con.execute(q.COMMIT)
            else:
                assert tx is not None
                tx.commit()
        except BaseException:
            try:  # a COMMIT refused busy (DELETE: readers) leaves SQLite's transaction open
                if tx is not None:
                    tx.rollback()  # also clears a transaction SQLAlchemy deactivated
                if con.in_transaction:
                    con.execute(q.ROLLBACK)
            except (sqlite3.Error, sa.exc.DBAPIError) as exc:
                log.debug("rollback failed: %s", exc)
            raise
        return result

    def _connect_writer(self, identify: Callable[[sqlite3.Connection], None] | None = None
                        ) -> None:
        """docs/sessions.md §8.1 steps 4–5: the engine (busy timeout, manual transactions, journal-mode policy),
        configured pragmas and foreign keys on every connection, and the writer connection.
        No schema work: the open runs that next. ``identify`` runs once, first.

        The header lease is taken first, before any connection holds a lock on the file, and
        given back by :meth:`_dispose` after the connections are closed (docs/sessions.md §8.9)."""
        if self._header is None:
            self._header = FileHeader(self.path)
        state = JournalState()
        con = sqlite_open.connect(self.path, self._settings, self._header)
        try:
            if identify is not None:
                identify(con)
            sqlite_open.configure(con, self.path, self._settings, self._pragmas, state)
        except BaseException:
            con.close()
            raise
        connector = sqlite_open.configured_connector(self.path, self._settings, self._pragmas,
                                                     state)
        self._journal, self._raw = state, con
        self._engine_maker = lambda: create_handle_engine(self.path, self._settings, connector,
                                                          state, first=con)

    def _sa_writer(self) -> Connection:
        """The writer's SQLAlchemy connection, made (with the engine) on first use: the
        engine's first pool connection is the writer's DB-API connection. Call while open."""
        with self._lock:
            if self._writer_conn is None:
                if self._engine_maker is None:
                    raise ConfigurationError(f"{self.path}: the session store is closed")
                self._engine = self._engine_maker()
                self._engine_maker = None
                self._writer_conn = self._engine.connect().execution_options(
                    hermes_begin="IMMEDIATE")
            return self._writer_conn

    @property
    def _writer(self) -> Connection | None:
        """The writer's SQLAlchemy connection (made on first use); None once closed."""
        return None if self._raw is None else self._writer_conn or self._sa_writer()

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine (made on first use; raises once closed)."""
        if self._engine is None and self._engine_maker is not None:
            self._sa_writer()
        return super().engine

    def _reopen_after_close_race(self) -> bool:
        """``close()`` raced a write still running on another thread: the writer is gone.

        Reopen once per handle with the same connection setup and no schema work (docs/sessions.md §8.5), so
        the in-flight write lands instead of vanishing; the caller closes the connection again
        when that write is done (the handle stays closed). Refused — with the handle's sticky
        error or a "closed" error, never a silent loss — for read-only, replaced, corrupt or
        WAL-split handles, a handle that was never opened, and a second race. Call under
        ``self._lock``.
        """
        closed = f"{self.path}: the session store is closed"
        if self._sticky is not None:  # replaced / split WAL / quarantined (corrupt)
            raise self._sticky
        if self.read_only:
            raise ConfigurationError(f"{closed}; a read-only handle is never reopened")
        if not self._closed or self._identity is None:
            raise ConfigurationError(closed)
        if self._race_reopened:
            raise ConfigurationError(
                f"{closed}; close() ran while writes were still in flight and the one reopen "
                "it allows was already used: stop writing before closing the store")
        self.guard()  # a file replaced since the close must not be written
        self._refuse_deleted_sidecars("reopen")  # same refusal as the open (docs/sessions.md §8.10)
        self._race_reopened = True
        log.warning("%s: close() raced a still-running writer (a write was in flight when the "
                    "handle closed); reopening the writer connection once, without schema work, "
                    "to finish it", self.path)
        try:
            self._connect_writer()
        except BaseException:
            self._dispose()
            raise
        return True

    def _end_close_race(self) -> None:
        """Close the connection a close-race reopen made (PASSIVE checkpoint first, as close())."""
        with self._lock:
            if self._raw is not None and not self.quarantined and self._journal.mode == "wal":
                self.checkpoint()
            self._dispose()

    def write(self, fn: Callable[[Connection], T], *,
              patience: float = ROUTINE_PATIENCE_S) -> T:
        """Run ``fn`` inside ``BEGIN IMMEDIATE`` on the writer; retry busy with jitter."""
        return self._write(fn, patience=patience, raw=False, header_in_fn=False)

    def write_driver(self, fn: Callable[[Driver], T], *,
                     patience: float = TRANSCRIPT_PATIENCE_S, header_in_fn: bool = True) -> T:
        """Run ``fn`` on the writer's sqlite3 connection inside ``BEGIN IMMEDIATE`` (statements
        prepared once by sqlite3's cache, no SQLAlchemy execution per call)."""
        return self._write(fn, patience=patience, raw=True, header_in_fn=header_in_fn)

    def _write(self, fn: Callable[[Any], T], *, patience: float, raw: bool,
               header_in_fn: bool) -> T:
        start = time.monotonic()  # the budget runs from the call; a Patience only once busy
        budget: Patience | None = None
        fts_healed = False
        reopened = False
        try:
            while True:
                with self._lock:
                    if self._raw is None and not reopened:
                        reopened = self._reopen_after_close_race()
                    try:
                        result = self._attempt(fn, raw=raw, header_in_fn=header_in_fn)
                        self._writes += 1
                        if self._writes % CHECKPOINT_EVERY == 0 and self.journal_mode == "wal":
                            self.checkpoint()
                        return result
                    except (sa.exc.DBAPIError, sqlite3.Error) as exc:
                        if (guards.is_fts_corruption(exc) or guards.is_fts_unavailable(exc)) \
                                and not fts_healed:
                            self._fail_open_fts(exc)
                            fts_healed = True
                            continue
                        if guards.is_structural_corruption(exc):
                            self.guard()  # a replaced file explains it better than "corrupt"
                            self._quarantine(exc)
                        if not is_busy(exc):
                            raise
                        err = exc
                if budget is None:
                    budget = Patience(patience, start=start)
                budget.wait(err, f"{self.path}: another process held the write lock for over "
                            f"{patience:.1f} s; the database is healthy, retry later")
        except UnicodeEncodeError as exc:  # a text parameter sqlite3 cannot bind (issue 31)
            raise storable.from_driver_error(exc) from exc
        except Exception as exc:  # an I/O fault: one typed error, never retried (issue 31)
            if (typed := self.typed_fault("write", exc)) is not None:
                raise typed from exc
            raise
        finally:
            if reopened:
                self._end_close_race()

    def typed_fault(self, operation: str, exc: BaseException, *,
                    writing: bool = True) -> HermesDataError | None:
        """The one typed error for an I/O fault under ``exc`` (docs/sqlite-policy.md "I/O
        errors"), or None when it is none: a ``SQLITE_READONLY``/``SQLITE_CANTOPEN`` that is
        a permission problem is :class:`StateDbPermissionError`, any other fault
        :class:`StoreIOError` / :class:`~hermes_data.errors.StoreFullError` naming the file
        (its ``orig`` the first driver error, not what SQLite's automatic rollback caused
        after it). Lock conflicts and our own typed errors are never faults; ``writing``
        False (a read): neither is a readonly / cannot-open error."""
        typed = store_io_error(exc, str(self.path), operation, writing=writing)
        if typed is None:
            if writing and (err := migrate.not_writable(self.path, driver_error(exc))) is not None:
                return StateDbPermissionError(err.path, err.command, str(err))
            return None
        log.warning("%s: %s failed on an I/O fault: %s", self.path, operation, typed.orig)
        return typed

    def _fail_open_fts(self, exc: BaseException) -> None:
        """FTS-scoped corruption during a write: mark ``fts_stale`` and drop the FTS triggers
        in one transaction (search falls back to LIKE); the caller retries its write once.
        Never rebuilds from the live write path (docs/sessions.md §8.11). Upstream's CJK triggers firing here
        (``no such tokenizer: cjk_unicode61``) are healed alone (docs/sessions-storage.md §3.9.1)."""
        if upstream_cjk.is_cjk_tokenizer_error(exc):
            return self._attempt(upstream_cjk.heal_after_write_failure, raw=False)
        log.error("%s: FTS index corrupt (%s): FTS triggers dropped, fts_stale set; search uses "
                  "LIKE until an exclusive open rebuilds the index", self.path, exc)

        def work(conn: Connection) -> None:
            opening.mark_stale(conn)
            opening.drop_fts_triggers(conn, opening.read_fts_state(conn))
            upstream_cjk.heal(conn)

        self._attempt(work, raw=False)
        self.fts_available = {t: False for t in self.fts_available}

    def _quarantine(self, exc: BaseException) -> None:
        if self._sticky is None:
            log.error("%s: structural corruption (%s): handle quarantined", self.path, exc)
            self.quarantined = True
            self._sticky = StateDbCorruptError(str(self.path), exc)
            filesafety.no_checkpoint_on_close(self._raw, self.path)  # docs/sessions-storage.md §3.5
        raise self._sticky from exc

    @contextmanager
    def reading_on_writer(self) -> Iterator[Connection]:
        """The handle's own connection, in a deferred transaction, under the handle's lock."""
        with self._lock:
            if self._raw is None:
                raise ConfigurationError(f"{self.path}: the session store is closed")
            w = self._sa_writer()  # read-only: the connection the open made
            if not self.read_only:
                w.execution_options(hermes_begin="DEFERRED")
            try:
                with w.begin():
                    yield w
            except UnicodeEncodeError as exc:  # a text parameter sqlite3 cannot bind (issue 31)
                raise storable.from_driver_error(exc) from exc
            finally:
                if not self.read_only:
                    w.execution_options(hermes_begin="IMMEDIATE")

    @contextmanager
    def reading(self) -> Iterator[Connection]:
        """A connection for a read: a pooled ``mode=ro`` reader (WAL), else the writer.

        A budget miss first closes one idle reader of a peer handle and retries once; still
        nothing ⇒ the writer serves the read (slower, never an error, never a blocking wait).
        """
        pool = self.read_pool
        engine = None if pool is None or self._raw is None else self.engine
        conn = None
        if pool is not None and engine is not None:
            for attempt in (0, 1):
                try:  # the store's one engine, on a pooled reader: no second engine
                    conn = Connection(engine, connection=pool.connect())
                    break
                except guards.NoReadPermit as miss:
                    if attempt or miss.scope not in ("path", "process") \
                            or not guards.evict_peer(pool, miss.scope):
                        break
        if conn is None:
            with self.reading_on_writer() as w:
                yield w
            return
        try:
            with conn.begin():
                yield conn
        finally:
            conn.close()

    def read(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn`` in a read transaction; a lock conflict (or the schema changing under a
        VACUUM) retries the whole read with jitter for up to :data:`READ_PATIENCE_S`, then
        :class:`DatabaseBusyError` — never a raw driver error."""
        return self._patient_read(self.reading, fn)

    def read_on_writer(self, fn: Callable[[Connection], T]) -> T:
        """:meth:`read` on the writer's own connection (sees this handle's commits): in
        rollback-journal mode a sibling's VACUUM or long commit holds the file past the busy
        timeout, and the read waits it out like any other instead of failing raw."""
        return self._patient_read(self.reading_on_writer, fn)

    def _patient_read(self, connect: Callable[[], Any], fn: Callable[[Connection], T]) -> T:
        patience = Patience(READ_PATIENCE_S)
        while True:
            try:
                with connect() as conn:
                    return fn(conn)
            except UnicodeEncodeError as exc:  # a text parameter sqlite3 cannot bind (issue 31)
                raise storable.from_driver_error(exc) from exc
            except (sa.exc.OperationalError, sqlite3.OperationalError) as exc:
                if not sqlite_reads.read_retryable(exc):
                    if (typed := self.typed_fault("read", exc, writing=False)) is not None:
                        raise typed from exc
                    raise
                err = exc
            patience.wait(err, sqlite_reads.busy_message(self, READ_PATIENCE_S))

    def on_writer_raw(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn`` on the writer's own ``sqlite3`` connection under the handle's lock."""
        with self._lock:
            if self._raw is None:
                raise ConfigurationError(f"{self.path}: the session store is closed")
            return fn(self._raw)

    def read_driver(self, fn: Callable[[Driver], T], *, single_statement: bool = False) -> T:
        """:meth:`read` on the reader's ``sqlite3`` connection (:mod:`.sqlite_reads`)."""
        try:
            return sqlite_reads.read_driver(self, fn, READ_PATIENCE_S, single_statement)
        except UnicodeEncodeError as exc:  # a text parameter sqlite3 cannot bind (issue 31)
            raise storable.from_driver_error(exc) from exc
        except sqlite3.OperationalError as exc:  # an I/O fault: one typed error (issue 31)
            if (typed := self.typed_fault("read", exc, writing=False)) is not None:
                raise typed from exc
            raise

    def read_bounded(self, fn: Callable[[Connection], T], timeout_s: float) -> T:
        """Run ``fn`` with a progress handler that interrupts it past ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        with self.reading() as conn:
            raw = conn.connection.driver_connection
            assert raw is not None
            raw.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, 1000)
            try:
                return fn(conn)
            except sa.exc.OperationalError as exc:
                if "interrupted" in str(exc.orig).lower():
                    raise TimeoutError(f"read exceeded {timeout_s} s") from exc
                raise
            finally:
                raw.set_progress_handler(None, 0)

    def changes(self, conn: Connection, result: Any) -> int:
        """pysqlite reports rowcount -1 for a DML statement that starts with WITH: ask SQLite."""
        return int(conn.exec_driver_sql(q.CHANGES).scalar() or 0)

    # -- maintenance -------------------------------------------------------------------

    def logical_size_bytes(self) -> int:
        """``page_count × page_size`` (never ``stat``: a live reader blocks the fold-back of
        the WAL and stat-based deltas came out negative)."""
        def size(c: Connection) -> int:
            return int(c.exec_driver_sql(q.PAGE_COUNT).scalar() or 0) \
                * int(c.exec_driver_sql(q.PAGE_SIZE).scalar() or 0)

        return self.read(size)

    def freelist_ratio(self) -> float | None:
        """``freelist_count / page_count``; None when unreadable."""
        try:
            free, pages = self.read(lambda c: (c.exec_driver_sql(q.FREELIST_COUNT).scalar(),
                                               c.exec_driver_sql(q.PAGE_COUNT).scalar()))
        except Exception as exc:  # noqa: BLE001 - unknown ratio falls back to the time throttle
            log.info("freelist ratio unreadable: %s", exc)
            return None
        return (free / pages) if pages else None

    def vacuum(self) -> None:
        """Return the file's free pages (core ``vacuum()`` optimizes the FTS indexes first,
        docs/sessions-storage.md §3.7); refused on quarantined or replaced handles.

        A file in INCREMENTAL auto-vacuum mode (every file this package creates) gets paced
        ``incremental_vacuum`` steps, each its own write transaction of about
        :data:`VACUUM_STEP_TARGET_S` (docs/sessions.md §7.6). Any other file gets one
        ``VACUUM`` (one write-lock hold for the whole rewrite); a NONE file is converted to
        INCREMENTAL by it, so its later vacuums are paced. A PASSIVE checkpoint before and
        after either."""
        self.guard()
        mode = self.read_on_writer(lambda c: int(c.exec_driver_sql(q.AUTO_VACUUM).scalar() or 0))
        if mode == 2:
            self._vacuum_paced()
        else:
            self._vacuum_whole(convert=mode == 0)
        with self._lock:
            self.checkpoint()
            if self._identity is not None:  # VACUUM may have recreated the sidecars
                self._identity = guards.FileIdentity.record(self.path,
                                                            wal=self.journal_mode == "wal")

    def _vacuum_whole(self, *, convert: bool) -> None:
        def run(raw: sqlite3.Connection) -> None:
            self.checkpoint()
            if convert:
                raw.execute(q.AUTO_VACUUM_INCREMENTAL)  # takes effect in this VACUUM
            raw.execute(q.VACUUM)  # outside any transaction; takes the write lock itself

        self._raw_outside_transaction(run, "VACUUM")
        if convert:
            log.info("%s: converted to incremental auto-vacuum by this VACUUM; later vacuums "
                     "run in paced steps", self.path)

    def _vacuum_paced(self) -> None:
        pacer = Pacer(VACUUM_FIRST_STEP_PAGES, target_s=VACUUM_STEP_TARGET_S,
                      min_pause_s=VACUUM_PAUSE_MIN_S, factor=VACUUM_PAUSE_FACTOR)
        with self._lock:
            self.checkpoint()
        steps = 0
        free = self.read_on_writer(_free_pages)
        while free:
            started = self._raw_outside_transaction(
                lambda raw: raw.executescript(q.incremental_vacuum_step(pacer.size)),
                "a vacuum step")
            steps += 1
            free = self.read_on_writer(_free_pages)
            pacer.step_done(started, more=bool(free))
        log.info("%s: incremental vacuum: %d steps, longest %.0f ms", self.path, steps,
                 pacer.longest_s * 1000)

    def _raw_outside_transaction(self, run: Callable[[sqlite3.Connection], Any],
                                 what: str) -> float:
        """``run`` on the writer's DB-API connection outside any driver transaction (a
        VACUUM, a vacuum step's script), waiting out other processes' write locks like any
        writer; returns when the attempt that succeeded began (``time.monotonic``)."""
        patience = Patience(ROUTINE_PATIENCE_S)
        while True:
            with self._lock:
                raw = self._raw
                if raw is None:
                    raise ConfigurationError(f"{self.path}: the session store is closed")
                started = time.monotonic()
                try:
                    run(raw)
                    return started
                except sqlite3.OperationalError as exc:
                    if raw.in_transaction:  # a script stopped inside its BEGIN
                        raw.execute(q.ROLLBACK)
                    # In WAL a sibling's commit between VACUUM's read and its write lock is
                    # SQLITE_BUSY at once (no busy handler): wait like any writer.
                    if not is_busy(exc):
                        raise
                    err = exc
            patience.wait(err, f"{self.path}: other processes kept writing for over "
                          f"{ROUTINE_PATIENCE_S:.1f} s while {what} waited; the database is "
                          "healthy, retry later")

    def maintenance_lock(self) -> FileLock:
        """``flock`` on ``<db>.auto-maintenance.lock`` (never on the database file itself)."""
        return FileLock(Path(f"{self.path}.auto-maintenance.lock"))

