"""The PostgreSQL server going away: the one classification of its errors, the typed error
each becomes, and the cheap check that an idle connection was dropped (docs/postgresql.md, "When the server goes away").

Every "did the server go away / cancel the statement?" decision of both stores calls
:func:`server_fault` (and :func:`typed_error`, which builds the error a caller sees); no other
module matches the SQLSTATEs below. The rule, from the driver's exception
(:func:`hermes_data.locking.driver_error`):

* SQLSTATE ``57014`` query_canceled (``statement_timeout``, ``pg_cancel_backend``) is
  :attr:`ServerFault.CANCELED`: the connection stays usable, the transaction was rolled back.
* SQLSTATE ``57P01`` admin_shutdown (a fast or smart shutdown, ``pg_terminate_backend``),
  ``57P02`` crash_shutdown (an immediate shutdown, another backend crashed), ``57P03``
  cannot_connect_now (the server is starting or stopping) and class ``08`` (connection
  exceptions) are :attr:`ServerFault.GONE`.
* No SQLSTATE: a psycopg ``OperationalError`` (libpq's own "server closed the connection
  unexpectedly", "connection refused", "the connection is closed") and an error SQLAlchemy
  flagged ``connection_invalidated`` (it found the connection dead) are GONE too.

Imports no driver (duck-typed on the exception), like :mod:`hermes_data.locking`.
"""

from __future__ import annotations

import enum
import select
from contextlib import contextmanager
from typing import Any, Iterator

from hermes_data.errors import DatabaseUnavailableError, HermesDataError, StatementTimeoutError
from hermes_data.locking import driver_error, sqlstate

__all__ = ["ServerFault", "QUERY_CANCELED", "SERVER_GONE_SQLSTATES", "server_fault",
           "typed_error", "translated", "idle_connection_dropped"]

#: query_canceled: ``statement_timeout`` expired, or someone ran ``pg_cancel_backend``.
QUERY_CANCELED = "57014"
#: admin_shutdown, crash_shutdown, cannot_connect_now (class ``08`` is matched as a class).
SERVER_GONE_SQLSTATES = frozenset({"57P01", "57P02", "57P03"})


class ServerFault(str, enum.Enum):
    """What :func:`server_fault` found (see the module docstring)."""

    #: The connection is lost or cannot be made: the server stopped, restarted, crashed,
    #: terminated this backend, or cannot be reached.
    GONE = "gone"
    #: The server canceled the statement (``statement_timeout``, ``pg_cancel_backend``).
    CANCELED = "canceled"


def _is_psycopg_operational(orig: BaseException) -> bool:
    return any(c.__name__ == "OperationalError" and c.__module__.startswith("psycopg")
               for c in type(orig).__mro__)


def server_fault(exc: BaseException) -> ServerFault | None:
    """The :class:`ServerFault` ``exc`` is (a psycopg error, wrapped by SQLAlchemy or not),
    or ``None`` when it is none (a lock conflict, a bad statement, a constraint …)."""
    if isinstance(exc, HermesDataError) and not hasattr(exc, "orig"):
        return None
    state = sqlstate(exc)
    if state == QUERY_CANCELED:
        return ServerFault.CANCELED
    if state is not None:
        return ServerFault.GONE if state in SERVER_GONE_SQLSTATES or state.startswith("08") \
            else None
    if getattr(exc, "connection_invalidated", False):
        return ServerFault.GONE
    orig = driver_error(exc)
    return ServerFault.GONE if _is_psycopg_operational(orig) else None


def _server_message(orig: BaseException) -> str:
    """The server's (or libpq's) own words, one line: never the statement or its values."""
    diag = getattr(orig, "diag", None)
    primary = getattr(diag, "message_primary", None)
    text = primary if isinstance(primary, str) and primary else str(orig)
    line = (text.strip().splitlines() or ["no message"])[0]
    return line if len(line) <= 200 else line[:197] + "..."


#: What happened to the call's work, by the phase it was in when the server went away.
_OUTCOME = {
    "connect": "nothing was sent",
    "read": "nothing was changed",
    "write": "the transaction was rolled back: nothing of it was written",
    "commit": ("the server went away while the transaction was committing: it may or may "
               "not have been applied; check before repeating it"),
}


def typed_error(exc: BaseException, where: str, during: str = "read") -> HermesDataError | None:
    """The typed error for ``exc`` when it is a :class:`ServerFault`, else ``None``.

    ``where`` names the store and its URL (password hidden); ``during`` is the phase the
    call was in: ``connect``, ``read``, ``write`` (before ``COMMIT`` was sent: the server rolled the
    transaction back) or ``commit`` (the outcome is unknown). The message carries the
    SQLSTATE and the server's one-line reason, never the statement or its values."""
    fault = server_fault(exc)
    if fault is None:
        return None
    orig = driver_error(exc)
    state = sqlstate(exc)
    reason = _server_message(orig) + (f" (SQLSTATE {state})" if state else "")
    if fault is ServerFault.CANCELED:
        return StatementTimeoutError(
            where, f"{where}: the server canceled the statement: {reason}; "
            f"{_OUTCOME['write' if during == 'commit' else during]}; the store stays usable",
            sqlstate=state)
    return DatabaseUnavailableError(
        where, f"{where}: the PostgreSQL server went away or cannot be reached: {reason}; "
        f"{_OUTCOME[during]}; the next call reconnects", sqlstate=state,
        outcome_unknown=during == "commit")


@contextmanager
def translated(where: str, during: str = "read") -> Iterator[None]:
    """Raise :func:`typed_error`'s error for a :class:`ServerFault` escaping the block (chained
    to the driver's exception, so no statement text travels with it); anything else
    propagates unchanged."""
    try:
        yield
    except Exception as exc:
        typed = typed_error(exc, where, during)
        if typed is None:
            raise
        raise typed from driver_error(exc)


def idle_connection_dropped(dbapi_connection: Any) -> bool:
    """True when a psycopg connection that should be idle cannot be used as it is: it is
    closed, or the server sent something while nobody asked (a backend ends its connection
    with a FATAL message: shutdown, restart, ``pg_terminate_backend``).

    A poll of the socket, no round trip (a pre-ping costs one per use). Only an idle
    connection outside a transaction is judged; a rare unsolicited message on a live one (a
    ``NOTICE``, a changed server parameter) only costs a reconnect. A server that vanished
    without closing the socket (a network partition) is not seen here: the next statement
    fails with :class:`~hermes_data.errors.DatabaseUnavailableError`."""
    try:
        if dbapi_connection.closed:
            return True
        if dbapi_connection.info.transaction_status != 0:  # not IDLE: a transaction is open
            return False
        fd = dbapi_connection.fileno()
    except Exception:  # a connection in a state we cannot read is no connection to reuse
        return True
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLPRI)
    return bool(poller.poll(0))
