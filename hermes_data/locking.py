"""The one classification of lock-conflict errors (SQLite and PostgreSQL).

Every "is this a lock conflict — wait and retry, never 'empty', 'corrupt' or 'bad query'"
decision in hermes-data calls :func:`is_lock_conflict` / :func:`lock_conflict_kind`; no other
module matches ``locked`` / ``busy`` text or lock SQLSTATEs itself
(``tests/test_lock_errors.py`` fails when a second classifier appears).

The rule, most reliable signal first:

1. Unwrap: SQLAlchemy's ``DBAPIError.orig`` (and any hermes-data error carrying the driver
   error as ``orig``) down to the driver's exception.
2. SQLite result code (``sqlite3.Error.sqlite_errorcode``, extended codes masked with
   ``0xFF``): ``SQLITE_BUSY`` (5) is :attr:`LockConflict.BUSY` — another connection holds a
   file lock ("database is locked"); ``SQLITE_LOCKED`` (6) is :attr:`LockConflict.LOCKED` —
   a conflict inside one connection or a shared cache ("database table is locked",
   "database schema is locked"). Any other code is not a lock conflict unless its message is
   one of those exact SQLite phrases (a lock reported through another statement's code).
3. PostgreSQL SQLSTATE (psycopg ``sqlstate``, psycopg2 ``pgcode``): ``55P03``
   lock_not_available (``NOWAIT``, ``lock_timeout``), ``40P01`` deadlock_detected,
   ``40001`` serialization_failure. Any other SQLSTATE is not a lock conflict.
4. No code at all (a message-only error, or a plain string): the message decides —
   "table/schema is locked" ⇒ LOCKED, any other ``locked`` / ``busy`` ⇒ BUSY, and the
   PostgreSQL phrases ``deadlock``, ``could not serialize``, ``lock not available`` /
   ``could not obtain lock`` / ``lock timeout``.

Imports nothing (duck-typed on the driver attributes), so the generic layer and every
store can use it without loading a driver.
"""

from __future__ import annotations

import enum
import errno
from typing import Collection

__all__ = ["LockConflict", "SQLITE_BUSY", "SQLITE_LOCKED", "SQLITE_DONE",
           "PG_LOCK_NOT_AVAILABLE", "SQLITE_LOCK_KINDS", "PG_LOCK_KINDS", "PG_DEADLOCK_DETECTED", "PG_SERIALIZATION_FAILURE",
           "driver_error", "sqlite_result_code", "sqlstate", "lock_conflict_kind",
           "is_lock_conflict", "is_advisory_lock_contention"]


class LockConflict(str, enum.Enum):
    """What kind of lock conflict an error is (see the module docstring)."""

    #: SQLITE_BUSY: another connection or process holds the file lock ("database is locked").
    BUSY = "busy"
    #: SQLITE_LOCKED: a conflict inside one connection / shared cache ("database table is
    #: locked", "database schema is locked").
    LOCKED = "locked"
    #: PostgreSQL 55P03: ``NOWAIT`` met a held lock, or ``lock_timeout`` expired.
    LOCK_NOT_AVAILABLE = "lock_not_available"
    #: PostgreSQL 40P01: the server chose this transaction as a deadlock victim.
    DEADLOCK = "deadlock"
    #: PostgreSQL 40001: a serializable / repeatable-read transaction lost a conflict.
    SERIALIZATION = "serialization"


#: The SQLite kinds: what a caller that only ever handled SQLite's "locked"/"busy" passes as
#: ``kinds`` where a PostgreSQL error can reach it and must keep its old outcome.
SQLITE_LOCK_KINDS = frozenset({LockConflict.BUSY, LockConflict.LOCKED})
#: The PostgreSQL kinds: the SQLSTATEs a PostgreSQL write retries like a busy SQLite file.
PG_LOCK_KINDS = frozenset({LockConflict.LOCK_NOT_AVAILABLE, LockConflict.DEADLOCK,
                           LockConflict.SERIALIZATION})

#: SQLite primary result codes.
SQLITE_BUSY = 5
SQLITE_LOCKED = 6
SQLITE_DONE = 101
#: PostgreSQL SQLSTATEs.
PG_LOCK_NOT_AVAILABLE = "55P03"
PG_DEADLOCK_DETECTED = "40P01"
PG_SERIALIZATION_FAILURE = "40001"

_SQLITE_CODES = {SQLITE_BUSY: LockConflict.BUSY, SQLITE_LOCKED: LockConflict.LOCKED}
_PG_STATES = {PG_LOCK_NOT_AVAILABLE: LockConflict.LOCK_NOT_AVAILABLE,
              PG_DEADLOCK_DETECTED: LockConflict.DEADLOCK,
              PG_SERIALIZATION_FAILURE: LockConflict.SERIALIZATION}
#: SQLite's own lock messages: trusted whatever result code travels with them.
_SQLITE_PHRASES = (("database table is locked", LockConflict.LOCKED),
                   ("database schema is locked", LockConflict.LOCKED),
                   ("database is locked", LockConflict.BUSY))
#: Message-only errors (no result code, no SQLSTATE), checked in this order.
_LOOSE_PHRASES = (("deadlock", LockConflict.DEADLOCK),
                  ("could not serialize", LockConflict.SERIALIZATION),
                  ("lock not available", LockConflict.LOCK_NOT_AVAILABLE),
                  ("could not obtain lock", LockConflict.LOCK_NOT_AVAILABLE),
                  ("lock timeout", LockConflict.LOCK_NOT_AVAILABLE),
                  ("locked", LockConflict.BUSY),
                  ("busy", LockConflict.BUSY))
#: sqlite3_errstr(SQLITE_DONE), see ``sqlite_done_means_busy``.
_SQLITE_DONE_MESSAGE = "no more rows available"


def driver_error(exc: BaseException) -> BaseException:
    """The driver's exception under ``exc``: ``exc.orig`` followed down (SQLAlchemy's
    ``DBAPIError``/``StatementError``, hermes-data errors that keep the cause as ``orig``);
    ``exc`` itself when it carries none."""
    seen = 0
    while seen < 8:  # a bounded walk: an ``orig`` cycle cannot loop forever
        inner = getattr(exc, "orig", None)
        if not isinstance(inner, BaseException) or inner is exc:
            return exc
        exc, seen = inner, seen + 1
    return exc


def sqlite_result_code(exc: BaseException) -> int | None:
    """The SQLite primary result code of ``exc`` (wrapped or not; extended codes masked
    with ``0xFF``), or ``None`` when it carries none."""
    code = getattr(driver_error(exc), "sqlite_errorcode", None)
    return code & 0xFF if isinstance(code, int) else None


def sqlstate(exc: BaseException) -> str | None:
    """The PostgreSQL SQLSTATE of ``exc`` (wrapped or not; psycopg ``sqlstate`` or
    psycopg2 ``pgcode``), or ``None``."""
    orig = driver_error(exc)
    state = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    return state if isinstance(state, str) else None


def _message(orig: BaseException | str) -> str:
    return (orig if isinstance(orig, str) else str(orig)).lower()


def lock_conflict_kind(exc: BaseException | str, *,
                       sqlite_done_means_busy: bool = False) -> LockConflict | None:
    """The :class:`LockConflict` ``exc`` is (an exception, wrapped or not, or a message),
    or ``None`` when it is no lock conflict; the rule is the module docstring's.

    ``sqlite_done_means_busy``: also count SQLite's "no more rows available" (the text of
    ``SQLITE_DONE``, 101) as BUSY. The SQLite read and write retry loops of the session store
    have always done so: the driver can report a step that lost its lock with the text of
    the connection's last result instead of ``SQLITE_BUSY``; elsewhere the text is no lock
    conflict."""
    if isinstance(exc, str):
        return _from_message(_message(exc), loose=True, done=sqlite_done_means_busy)
    orig = driver_error(exc)
    code = sqlite_result_code(orig)
    if code is not None:
        kind = _SQLITE_CODES.get(code)
        if kind is not None:
            return kind
        return _from_message(_message(orig), loose=False, done=sqlite_done_means_busy)
    state = sqlstate(orig)
    if state is not None:
        return _PG_STATES.get(state)
    return _from_message(_message(orig), loose=True, done=sqlite_done_means_busy)


def _from_message(msg: str, *, loose: bool, done: bool) -> LockConflict | None:
    for phrase, kind in _SQLITE_PHRASES:
        if phrase in msg:
            return kind
    if done and _SQLITE_DONE_MESSAGE in msg:
        return LockConflict.BUSY
    if loose:
        for phrase, kind in _LOOSE_PHRASES:
            if phrase in msg:
                return kind
    return None


def is_lock_conflict(exc: BaseException | str, *, kinds: Collection[LockConflict] | None = None,
                     sqlite_done_means_busy: bool = False) -> bool:
    """Whether ``exc`` (an exception, wrapped or not, or a message) is a lock conflict —
    busy/locked SQLite, or a PostgreSQL lock_not_available / deadlock / serialization
    failure: contention worth waiting out, never damage or a wrong query.

    ``kinds``: only these :class:`LockConflict` kinds count (default: all), e.g.
    :data:`SQLITE_LOCK_KINDS` for a caller whose PostgreSQL errors must keep their old
    outcome. See :func:`lock_conflict_kind` for ``sqlite_done_means_busy``."""
    kind = lock_conflict_kind(exc, sqlite_done_means_busy=sqlite_done_means_busy)
    return kind is not None and (kinds is None or kind in kinds)


#: The ``errno`` values a non-blocking advisory lock (``flock``/``fcntl`` with ``LOCK_NB``,
#: Windows ``msvcrt.locking(LK_NBLCK)``) reports when another holder has it.
_ADVISORY_CONTENTION = frozenset(
    {errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES, errno.EDEADLK,
     getattr(errno, "EDEADLOCK", errno.EDEADLK)})


def is_advisory_lock_contention(exc: BaseException) -> bool:
    """Whether ``exc``, raised by a non-blocking advisory file lock, means "someone else holds
    it" (wait or give up) rather than a real failure (a bad descriptor, no lock support):
    ``BlockingIOError``, or an ``OSError`` whose ``errno`` is EAGAIN / EWOULDBLOCK / EACCES /
    EDEADLK (``msvcrt`` reports a held range as EACCES or EDEADLOCK). Upstream's name."""
    if isinstance(exc, BlockingIOError):
        return True
    return isinstance(exc, OSError) and exc.errno in _ADVISORY_CONTENTION
