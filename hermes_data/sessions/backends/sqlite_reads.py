"""The SQLite read route at the DB-API level (docs/sessions.md §8.6 reads, unchanged).

:func:`read_driver` runs a read function on a pooled ``mode=ro`` reader's own ``sqlite3``
connection inside ``BEGIN`` … ``COMMIT`` — the transaction :meth:`SqliteBackend.reading`
opens through SQLAlchemy, without its pool checkout, ``Connection`` and transaction objects,
which cost more than a keyed lookup's statement. What a read may do is unchanged: the same
reader (LIFO, under the path and process budgets), the same retry of lock conflicts and
schema changes for the read patience, then :class:`DatabaseBusyError`. When no reader can be
had from the pool (budget, descriptors, back-off) the read takes the SQLAlchemy route
(:meth:`SqliteBackend.read`: peer eviction, else the writer) with the same function on that
connection's ``sqlite3`` connection. A handle without a read pool (rollback journal,
read-only handle) reads on the writer's own ``sqlite3`` connection under the handle's lock,
as :meth:`SqliteBackend.reading_on_writer` does — without making the SQLAlchemy engine a
settled open otherwise never needs.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from pathlib import Path
from typing import Any, Callable, Protocol, TypeVar

import sqlalchemy as sa
from hermes_data.locking import is_lock_conflict
from hermes_data.sessions.storage.handle_guards import NoReadPermit, ReadPool
from hermes_data.sessions.backends import sql as q
from hermes_data.sessions.backends.base import driver_connection
from hermes_data.sessions.backends.locks import Patience

log = logging.getLogger("hermes_data.sessions.backends.sqlite")

T = TypeVar("T")

#: Errors a read retries besides lock conflicts (:func:`is_busy`): the schema changing under
#: it (VACUUM rewrote the file; an FTS table's constructor failed while its shadow tables
#: were being rewritten).
READ_RETRY = ("schema has changed", "vtable constructor failed")


class ReadingBackend(Protocol):
    """What the route needs of :class:`SqliteBackend` (not imported here: it imports this)."""

    path: Path

    @property
    def read_pool(self) -> ReadPool | None: ...

    def read(self, fn: Callable[[Any], T]) -> T: ...

    def on_writer_raw(self, fn: Callable[[sqlite3.Connection], T]) -> T: ...


def is_busy(exc: BaseException) -> bool:
    """A lock conflict, worth a retry: ``SQLITE_BUSY`` / ``SQLITE_LOCKED`` by result code
    (an FTS5 table whose constructor could not read its config under a sibling's lock says
    "vtable constructor failed" with ``SQLITE_BUSY``), or SQLite's lock message
    (:func:`hermes_data.locking.is_lock_conflict`). The retry loops have always also taken
    "no more rows available" (``SQLITE_DONE``'s text on a step that lost its lock) as busy:
    kept as ``sqlite_done_means_busy``."""
    return is_lock_conflict(exc, sqlite_done_means_busy=True)


def read_retryable(exc: BaseException) -> bool:
    """Whether a read that failed with ``exc`` is retried (:data:`READ_RETRY`, busy)."""
    if not isinstance(exc, (sa.exc.OperationalError, sqlite3.OperationalError)):
        return False
    msg = str(getattr(exc, "orig", exc)).lower()
    return any(m in msg for m in READ_RETRY) or is_busy(exc)


def busy_message(backend: ReadingBackend, patience_s: float) -> str:
    """The :class:`DatabaseBusyError` text of a read that ran out of patience."""
    return (f"{backend.path}: another process kept the database locked for over "
            f"{patience_s:.1f} s while reading; the database is healthy, retry later")


def in_read_transaction(con: sqlite3.Connection, fn: Callable[[Any], T],
                        single_statement: bool = False) -> T:
    """``fn(con)`` inside ``BEGIN`` … ``COMMIT`` (rolled back if ``fn`` raises); with
    ``single_statement`` in autocommit — one statement is its own read transaction."""
    if single_statement:
        return fn(con)
    con.execute(q.BEGIN)
    try:
        result = fn(con)
    except BaseException:
        try:
            if con.in_transaction:
                con.execute(q.ROLLBACK)
        except sqlite3.Error as exc:  # the read's own error is the one to report
            log.debug("rollback of a read failed: %s", exc)
        raise
    con.execute(q.COMMIT)
    return result


def read_driver(backend: ReadingBackend, fn: Callable[[Any], T], patience_s: float,
                single_statement: bool = False) -> T:
    """Run ``fn(sqlite3 connection)`` in one read transaction (see the module docstring).
    ``single_statement``: ``fn`` sends one statement, run in autocommit — SQLite gives a
    statement its own read transaction, the same snapshot ``BEGIN`` … ``COMMIT`` would."""
    start = time.monotonic()  # the budget runs from the call, as :meth:`SqliteBackend.read`'s
    patience: Patience | None = None
    while True:
        pool = backend.read_pool
        record = None
        if pool is not None:
            try:
                record = pool.take()
            except NoReadPermit:
                record = None
        con = None if record is None else record.dbapi_connection
        if con is None and record is not None:
            pool.give_back(record)  # type: ignore[union-attr]
            record = None
        if con is None and pool is not None:  # a budget miss: this route evicts a peer's reader
            return backend.read(lambda conn: fn(driver_connection(conn)))
        try:
            if con is None:  # no read pool (rollback journal, read-only): the writer serves
                return backend.on_writer_raw(
                    lambda w: in_read_transaction(w, fn, single_statement))
            return in_read_transaction(con, fn, single_statement)
        except sqlite3.OperationalError as exc:
            if not read_retryable(exc):
                raise
            err = exc
        finally:
            if record is not None:
                pool.give_back(record)  # type: ignore[union-attr]
        if patience is None:
            patience = Patience(patience_s, start=start)
        patience.wait(err, busy_message(backend, patience_s))
