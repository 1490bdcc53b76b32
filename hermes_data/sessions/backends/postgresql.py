"""The PostgreSQL backend of the session store (``postgresql+psycopg://…``).

What differs from SQLite is gated here, once:

* **Connections.** A pooled engine; the handle keeps one writer connection (writes are
  serialised by the handle's lock, as on SQLite) and reads check out pooled connections.
  None of the SQLite machinery applies: no PRAGMAs, no ``mode=ro`` read pool, no WAL /
  replaced-file guards, no ``application_id``, no FTS5 stale/rebuild (full-text search is
  index-maintained by the server).
* **Driver statements** come from ``sql.for_dialect("postgresql")``, rendered once in
  psycopg's paramstyle; nothing is rewritten per call.
* **Transactions** are plain ``BEGIN`` … ``COMMIT`` (row locks, not a database write lock);
  a serialization failure or deadlock is retried with the same patience budget as a busy
  SQLite file.
* **The server going away** (docs/postgresql.md, "When the server goes away"): a connection
  the server closed while idle — the held writer, a pooled reader — is replaced before use
  (:func:`hermes_data.connectivity.idle_connection_dropped`, a socket poll instead of a
  pre-ping round trip per read); a read that loses its connection anyway runs once more on
  a new one; a write never reruns. What escapes as a connection loss or a canceled
  statement is raised here, and only here, as
  :class:`~hermes_data.errors.DatabaseUnavailableError` /
  :class:`~hermes_data.errors.StatementTimeoutError` (:func:`hermes_data.connectivity.translated`).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence, TypeVar

import sqlalchemy as sa
from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine, URL

from hermes_data.migrate import runner as migrate
from hermes_data.engine import create_engine_for
from hermes_data import storable
from hermes_data.connectivity import idle_connection_dropped, translated, typed_error
from hermes_data.errors import ConfigurationError, DatabaseBusyError, DatabaseUnavailableError
from hermes_data.locking import PG_LOCK_KINDS, driver_error, is_lock_conflict
from hermes_data.sessions.backends import sql as q
from hermes_data.sessions.storage.display_schema import ensure_pg_display_objects
from hermes_data.sessions.search.capabilities import forget_capabilities
from hermes_data.sessions.sql import for_dialect
from hermes_data.sessions.backends.locks import AdvisoryLock
from hermes_data.sessions.backends.base import (ROUTINE_PATIENCE_S, TRANSCRIPT_PATIENCE_S, Driver, HandleState,
                                               OpenOptions, SessionBackend)

log = logging.getLogger("hermes_data.sessions.backends.postgresql")

T = TypeVar("T")


class PgDriver:
    """:class:`~hermes_data.sessions.backends.base.Driver` over a SQLAlchemy connection:
    driver statements go straight to psycopg (``exec_driver_sql``)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    def execute(self, statement: str, parameters: Sequence[Any] = ()) -> Any:
        """Run one statement with positional values."""
        return self._conn.exec_driver_sql(statement, tuple(parameters))

    def executemany(self, statement: str, rows: Sequence[Sequence[Any]]) -> Any:
        """Run one statement for every row."""
        return self._conn.exec_driver_sql(statement, [tuple(r) for r in rows])


class PostgresBackend(SessionBackend):
    """A session store in a PostgreSQL database (see the module docstring)."""

    dialect = "postgresql"
    sql = for_dialect("postgresql")

    def __init__(self, url: URL, *, read_only: bool = False, pool_size: int = 8,
                 open_options: OpenOptions | None = None) -> None:
        self.state = HandleState(open_options or OpenOptions())
        self.url = url
        self.path = Path(url.render_as_string(hide_password=True))
        #: How errors name this store (the URL as written, password hidden).
        self.where = f"session store {url.render_as_string(hide_password=True)}"
        self.read_only = read_only
        self._lock = threading.RLock()
        self._closed = False
        self.quarantined = False
        self.open_repairs: list[str] = []
        #: Full-text search is index-maintained: always available.
        self.fts_available = {"messages_fts": True, "messages_fts_trigram": True}
        # No pre-ping: a ping per read cost ~25 % of a hot read here; the pool's checkout
        # poll and the one rerun of a read (read()) stand in for it.
        self._engine: Engine | None = create_engine_for(
            "sessions", url, pool_size=pool_size, max_overflow=32, pool_timeout=60,
            pool_pre_ping=False)
        try:
            if not read_only:
                spec = migrate.store_spec("sessions")
                with self._engine.connect() as conn:
                    rev = migrate.current_revision(conn, spec.version_table_for(conn))
                if rev != migrate.head_revision("sessions"):
                    report = migrate.upgrade("sessions", url, hook_options=self.state.options)
                    self.open_repairs.extend(report.repairs)
                    forget_capabilities(self._engine)  # the search indexes may be new
                ensure_pg_display_objects(self._engine)  # docs/sessions-ui.md §2.4: display twins
            self._writer: Connection | None = self._engine.connect()
        except BaseException:
            self._engine.dispose()
            raise

    # -- handle ------------------------------------------------------------------------

    def close(self) -> None:
        """Close the writer and dispose of the pool. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._writer is not None:
                self._writer.close()
                self._writer = None
            if self._engine is not None:
                self._engine.dispose()
                self._engine = None

    def checkpoint(self) -> None:
        """No-op: checkpoints are the server's business on PostgreSQL."""

    @property
    def journal_mode(self) -> str:
        """``n/a``: PostgreSQL has no journal mode."""
        return "n/a"

    # -- transactions ------------------------------------------------------------------

    def _live_writer(self) -> Connection:
        """The writer connection (under ``self._lock``), replaced first when the server
        closed it while it was idle: a write after a restart does not fail on it."""
        writer = self._writer
        if writer is None:
            raise ConfigurationError(f"{self.path}: the session store is closed")
        if not writer.invalidated and not writer.in_transaction() \
                and idle_connection_dropped(writer.connection.driver_connection):
            log.info("%s: the server closed the idle writer connection; reconnecting",
                     self.where)
            writer.invalidate()  # the next begin() connects anew
        return writer

    def write(self, fn: Callable[[Connection], T], *,
              patience: float = ROUTINE_PATIENCE_S) -> T:
        """Run ``fn`` in one transaction on the writer; retry serialization failures and
        deadlocks with jitter until ``patience`` runs out."""
        if self.read_only:
            raise ConfigurationError(f"{self.path}: this session store handle is read-only")
        start = time.monotonic()
        deadline = start + patience
        while True:
            with self._lock:
                writer = self._live_writer()
                committing = False
                try:
                    with writer.begin():
                        result = fn(writer)
                        committing = True  # fn is done: leaving the block sends COMMIT
                    return result
                except (UnicodeEncodeError, sa.exc.DataError) as exc:
                    _raise_unstorable(exc)
                    raise
                except sa.exc.DBAPIError as exc:
                    # Retried like a busy SQLite file: serialization_failure,
                    # deadlock_detected, lock_not_available.
                    if not is_lock_conflict(exc, kinds=PG_LOCK_KINDS):
                        # Never rerun: the server lost or canceled it (typed), or it failed.
                        typed = typed_error(exc, self.where, "commit" if committing else "write")
                        if typed is not None:
                            raise typed from driver_error(exc)
                        raise
                    err = exc
            now = time.monotonic()
            if now >= deadline:
                raise DatabaseBusyError(
                    f"{self.path}: write kept conflicting for over {patience:.1f} s; retry later"
                ) from err
            time.sleep(min(random.uniform(0.02, 0.15), deadline - now))

    def write_driver(self, fn: Callable[[Driver], T], *,
                     patience: float = TRANSCRIPT_PATIENCE_S, header_in_fn: bool = True) -> T:
        """:meth:`write` with the connection wrapped as a :class:`PgDriver` (no file header:
        ``header_in_fn`` does not apply)."""
        return self.write(lambda conn: fn(PgDriver(conn)), patience=patience)

    def read_driver(self, fn: Callable[[Driver], T], *, single_statement: bool = False) -> T:
        """:meth:`read` with the connection wrapped as a :class:`PgDriver` (always in the
        read transaction: ``single_statement`` changes nothing here)."""
        return self.read(lambda conn: fn(PgDriver(conn)))

    @contextmanager
    def reading_on_writer(self) -> Iterator[Connection]:
        """The writer connection in a transaction (sees this handle's commits)."""
        with self._lock:
            writer = self._live_writer()
            try:
                with translated(self.where, "read"), writer.begin():
                    yield writer
            except (UnicodeEncodeError, sa.exc.DataError) as exc:
                _raise_unstorable(exc)
                raise

    @contextmanager
    def reading(self) -> Iterator[Connection]:
        """A pooled connection in a read transaction."""
        if self._engine is None:
            raise ConfigurationError(f"{self.path}: the session store is closed")
        try:
            with translated(self.where, "read"), self._engine.connect() as conn, conn.begin():
                yield conn
        except (UnicodeEncodeError, sa.exc.DataError) as exc:
            _raise_unstorable(exc)
            raise

    def read(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn`` on :meth:`reading`'s connection; when the server drops the connection
        under it, once more on a new one (a read changes nothing, so it may rerun)."""
        try:
            with self.reading() as conn:
                return fn(conn)
        except DatabaseUnavailableError as exc:
            log.info("%s: the connection was lost during a read (%s); reading again",
                     self.where, exc.sqlstate or "no SQLSTATE")
        with self.reading() as conn:
            return fn(conn)

    def read_bounded(self, fn: Callable[[Connection], T], timeout_s: float) -> T:
        """Run ``fn`` under ``SET LOCAL statement_timeout``: past it the server cancels the
        read, raised as :class:`~hermes_data.errors.StatementTimeoutError` (a
        ``TimeoutError``)."""
        with self.reading() as conn:
            conn.exec_driver_sql(q.pg_statement_timeout(timeout_s))
            return fn(conn)

    def changes(self, conn: Connection, result: Any) -> int:
        """PostgreSQL reports the rows a WITH … UPDATE changed in its rowcount."""
        return max(0, int(result.rowcount or 0))

    # -- maintenance -------------------------------------------------------------------

    @staticmethod
    def _tables() -> list[str]:
        from hermes_data.sessions.schema import metadata

        return [t.name for t in metadata.sorted_tables]

    def logical_size_bytes(self) -> int:
        """The summed ``pg_total_relation_size`` of the store's tables."""
        names = self._tables()
        params = {f"t{i}": n for i, n in enumerate(names)}
        return int(self.read(lambda c: c.execute(text(q.pg_relation_size(len(names))),
                                                  params).scalar()) or 0)

    def freelist_ratio(self) -> float | None:
        """None: PostgreSQL has no freelist."""
        return None

    def vacuum(self) -> None:
        """``VACUUM (ANALYZE)`` of the store's tables on an autocommit connection (VACUUM
        cannot run in a transaction block). It returns space inside the tables to
        PostgreSQL for reuse and refreshes planner statistics; it does not shrink files
        (``VACUUM FULL`` would take exclusive locks on a shared server)."""
        if self.read_only:
            raise ConfigurationError(f"{self.path}: this session store handle is read-only")
        with translated(self.where, "write"), self.engine.connect() as conn:
            conn = conn.execution_options(isolation_level="AUTOCOMMIT")
            conn.exec_driver_sql(q.pg_vacuum(self._tables()))

    def maintenance_lock(self) -> AdvisoryLock:
        """A session-level ``pg_try_advisory_lock`` held on a connection of its own (the
        store is shared by several hosts; a lock file would not be)."""
        return AdvisoryLock(self.engine)


def _raise_unstorable(exc: BaseException) -> None:
    """Raise the typed error for a text parameter the driver refused (a lone surrogate, NUL:
    :func:`hermes_data.storable.from_driver_error`); return for any other error."""
    typed = storable.from_driver_error(exc)
    if typed is not None:
        raise typed from exc
