"""Exception hierarchy of hermes-data.

Every message names the offending object or value and, where there is one, the way out.
"""

from __future__ import annotations

import errno
import os
import sqlite3
from typing import TYPE_CHECKING, Any


class HermesDataError(Exception):
    """Base class of every error raised by hermes-data."""


class ConfigurationError(HermesDataError):
    """A setting, URL or argument is not usable."""


class SchemaDriftError(HermesDataError):
    """The live schema differs from the head metadata."""


class NotAHermesDatabaseError(HermesDataError):
    """The file exists but is not a database of the expected store (or is corrupt)."""


class AdoptionError(HermesDataError):
    """A legacy database cannot be adopted safely; it was left unchanged."""


class DatabaseBusyError(HermesDataError):
    """Another process held the write lock for longer than the patience budget."""


class WalUnsupportedError(HermesDataError, sqlite3.OperationalError):
    """WAL was required but the filesystem holding the database refuses it. Also a
    ``sqlite3.OperationalError``, what the upstream store raised for it."""


if TYPE_CHECKING:
    from alembic.util import CommandError

    class ForwardOnlyError(HermesDataError, CommandError):
        """A downgrade was requested; the schema history only moves forward."""

    class OfflineModeError(ConfigurationError, CommandError):
        """Alembic's offline (``--sql``) mode was requested; migrations need the live database."""

    class ProductionStateDbCommandError(ProductionStateDbError, CommandError):
        """A bare ``alembic`` run from a test process resolved a production store."""


def _forward_only_error() -> type:
    from alembic.util import CommandError

    class ForwardOnlyError(HermesDataError, CommandError):
        """A downgrade was requested; the schema history only moves forward.

        Also an Alembic ``CommandError``, so the ``alembic`` command line reports a refused
        ``downgrade`` as one ``FAILED:`` line instead of a traceback. Built on first use, so
        that importing :mod:`hermes_data.errors` does not import Alembic (a settled upgrade
        never loads it).
        """

    return ForwardOnlyError


def _offline_mode_error() -> type:
    from alembic.util import CommandError

    class OfflineModeError(ConfigurationError, CommandError):
        """Alembic's offline (``--sql``) mode was requested; migrations need the live database
        (adoption and every revision inspect it), so no SQL script can stand in for them.

        Also an Alembic ``CommandError``, so ``alembic upgrade head --sql`` prints one
        ``FAILED:`` line instead of a traceback; built on first use, like ForwardOnlyError.
        """

    return OfflineModeError


def _production_state_db_command_error() -> type:
    from alembic.util import CommandError

    class ProductionStateDbCommandError(ProductionStateDbError, CommandError):
        """:class:`ProductionStateDbError` raised by a store's Alembic ``env.py``: a bare
        ``alembic upgrade head`` (or any ``alembic`` command) run from a test process
        resolved a production store (issue 31 item 5). Nothing was created, read or opened.

        Also an Alembic ``CommandError``, so the ``alembic`` command line prints one
        ``FAILED:`` line and exits non-zero; built on first use, like ForwardOnlyError.
        """

    return ProductionStateDbCommandError


#: Exceptions that are also Alembic ``CommandError``s, built on first use (see above).
_ALEMBIC_ERRORS = {"ForwardOnlyError": _forward_only_error, "OfflineModeError": _offline_mode_error,
                   "ProductionStateDbCommandError": _production_state_db_command_error}


def __getattr__(name: str) -> Any:
    if name in _ALEMBIC_ERRORS:
        cls = _ALEMBIC_ERRORS[name]()
        cls.__module__, cls.__qualname__ = __name__, name
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class CorruptDatabaseError(NotAHermesDatabaseError):
    """SQLite's own check (``quick_check`` / ``integrity_check``) reports damage; the file
    was refused and left byte-for-byte unchanged."""


class ProductionStateDbError(HermesDataError, RuntimeError):
    """A test run tried to open a production store (the real ``~/.hermes`` tree or a deny
    root, :func:`hermes_data.isolation.ensure_test_isolation`); nothing was created, locked
    or opened. The message names the path, the root and both bypasses."""

    def __init__(self, path: str, root: str) -> None:
        self.path, self.root = path, root
        super().__init__(
            f"{path}: refusing to open a production store from a test run (it lives under "
            f"{root}); point HERMES_HOME at a temporary directory. Bypass on purpose with "
            "hermes_data.isolation.STATE_DB_GUARD_BYPASS = True (pytest marker "
            "live_system_guard_bypass) or HERMES_STATE_DB_GUARD_BYPASS=1 in the environment")


class StoreNotCreatedError(HermesDataError):
    """A command that only looks was pointed at a store that does not exist yet; nothing
    was created (the message names the command that creates it)."""


class StoreBehindError(HermesDataError):
    """A store is not at the head (a legacy file not yet adopted, an older revision, an
    SQLite file without any table) where the caller may not change it: a command that only
    looks, or a ``TelemetryStore`` opened on an existing file (it never migrates one). It is
    refused unchanged and the message names the file and ``hermes-data upgrade``."""


class StoreLinkError(HermesDataError):
    """The store's path is a symbolic link we refuse (a dangling one: following it would
    create a store somewhere nobody chose)."""


class UnsafeLockFileError(StoreLinkError, PermissionError):
    """A sidecar lock file of a store (``<db>.repair.lock``, ``<db>.quarantine.lock``, …) is
    a symbolic link, a hard-linked file or not a regular file (issue 31): it is never
    followed, written or truncated — someone may have planted it to make a privileged
    maintenance run empty another file. ``path`` names the lock file."""

    def __init__(self, path: str, why: str) -> None:
        self.path = path
        super().__init__(
            f"{path}: the lock file is {why}; refused, nothing was followed or written "
            "(remove it if nobody planted it on purpose, and check who can write its directory)")


class StoreNotWritableError(HermesDataError, PermissionError):
    """A store's directory or file cannot be written by this process — not damage (issue 31:
    a WAL database in a read-only directory, where SQLite cannot create ``-shm``/``-wal``).
    ``path`` names what lacks write access and ``command`` a way out."""

    def __init__(self, path: str, command: str, message: str) -> None:
        self.path, self.command = path, command
        super().__init__(message)


class UnstorableValueError(HermesDataError, ValueError):
    """A text argument holds a character the database cannot store — a lone surrogate
    (``"\\ud800"``: UTF-8 has no encoding for it, on either backend) or NUL (``"\\x00"``:
    PostgreSQL ``text`` refuses it, and both backends refuse it alike so that a store copies
    between them unchanged). Raised before the call writes anything; also a ``ValueError``,
    the error bad input gives. ``argument`` names the argument or column, ``value`` is the
    offending value (shown with ``repr``, truncated), ``reason`` what is wrong with it
    (:mod:`hermes_data.storable`)."""

    def __init__(self, argument: str, value: object, reason: str) -> None:
        self.argument, self.value, self.reason = argument, value, reason
        shown = repr(value)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        super().__init__(f"{argument}={shown} cannot be stored: {reason}; nothing was written")


class StoreIOError(HermesDataError, OSError):
    """The storage beneath a store failed an I/O operation — SQLite's "disk I/O error"
    (``SQLITE_IOERR``: a failed ``write``/``fsync``/``open``) or the like — while an operation
    ran (issue 31). The operation was rolled back as a whole (nothing of it is visible), every
    write acknowledged before it is intact, and the same call succeeds once the fault is gone.
    Also an ``OSError`` (``errno`` ``EIO``, ``ENOSPC`` for :class:`StoreFullError`). ``path``
    names the database file, ``operation`` what was running and ``orig`` the first driver
    error of the failure — not a secondary one such as "no such savepoint" that SQLite's
    automatic rollback caused (docs/sqlite-policy.md "I/O errors"). :func:`store_io_error` is the
    one translation of a driver error into this type."""

    #: What the operator should do, appended to the message.
    advice = "check the disk and the kernel log, then retry"
    #: The ``errno`` the error carries.
    code = errno.EIO

    def __init__(self, path: str, operation: str, orig: BaseException | None = None) -> None:
        self.path, self.operation, self.orig = path, operation, orig
        driver = f" ({orig})" if orig is not None else ""
        super().__init__(f"{path}: {operation} failed: {self.describe()}{driver}; nothing of it "
                         f"was written — {self.advice}")
        self.errno = self.code

    def describe(self) -> str:
        """What went wrong, in a few words (the subclasses name their case)."""
        return "an I/O error on the storage"


class StoreFullError(StoreIOError):
    """:class:`StoreIOError` for a full filesystem or a file-size limit (SQLite's "database
    or disk is full", ``ENOSPC``, ``EDQUOT``, ``EFBIG``): free space and retry."""

    advice = "free space on its filesystem, then retry"
    code = errno.ENOSPC

    def describe(self) -> str:
        """What went wrong, in a few words."""
        return "the disk is full"


# -- The PostgreSQL server going away (issue 31). Classified once, in
# -- hermes_data/connectivity.py; raised by both stores' PostgreSQL paths.


class DatabaseUnavailableError(HermesDataError):
    """The PostgreSQL server went away during a call or cannot be reached: it was stopped,
    restarted or crashed, it terminated this connection (``pg_terminate_backend``), it is
    still starting (SQLSTATEs ``57P01``–``57P03``, class ``08``, libpq's own connection
    errors). ``where`` names the store and its URL (password hidden), ``sqlstate`` is the
    server's code when it sent one.

    Nothing is half-written: a transaction the server lost was rolled back — except when it
    went away while the transaction was committing, where ``outcome_unknown`` is True and the
    message says to check before repeating the write. Writes are never repeated
    automatically; the store reconnects by itself at the next call (docs/postgresql.md,
    "When the server goes away")."""

    def __init__(self, where: str, message: str, *, sqlstate: str | None = None,
                 outcome_unknown: bool = False) -> None:
        self.where, self.sqlstate, self.outcome_unknown = where, sqlstate, outcome_unknown
        super().__init__(message)


class StatementTimeoutError(HermesDataError, TimeoutError):
    """The PostgreSQL server canceled a statement (SQLSTATE ``57014`` query_canceled): it ran
    past ``statement_timeout`` — waiting on a lock another connection held counts — or an
    administrator canceled it (``pg_cancel_backend``). The call's transaction was rolled
    back and the store stays usable. Also a ``TimeoutError``, what a bounded read raised
    before. ``where`` names the store and its URL (password hidden)."""

    def __init__(self, where: str, message: str, *, sqlstate: str | None = None) -> None:
        self.where, self.sqlstate = where, sqlstate
        super().__init__(message)


#: SQLite primary result codes that mean the storage failed a write (docs/telemetry-api.md
#: "Errors a write can raise"): SQLITE_IOERR (10), SQLITE_FULL (13), SQLITE_CANTOPEN (14:
#: a journal or WAL file could not be opened while writing).
SQLITE_READONLY, SQLITE_IOERR, SQLITE_FULL, SQLITE_CANTOPEN = 8, 10, 13, 14
#: What SQLite answers to the commit or savepoint release that follows its automatic
#: rollback of a transaction an I/O error broke: secondary, never the cause.
_AFTER_ROLLBACK = ("cannot commit - no transaction is active", "no such savepoint",
                   "cannot rollback - no transaction is active")


def _usable(path: str, mode: int) -> bool:
    """``path`` is a regular file this process may open with ``mode`` in a directory it may
    write: an open that failed anyway failed in the storage, not on a permission."""
    return bool(path) and os.path.isfile(path) and os.access(path, mode) and \
        os.access(os.path.dirname(os.path.abspath(path)), os.W_OK | os.X_OK)


def _is_io_code(code: int | None, path: str, writing: bool = True) -> bool:
    if code in (SQLITE_IOERR, SQLITE_FULL):
        return True
    if code == SQLITE_CANTOPEN:
        # Writing: a journal or WAL file could not be opened. Reading: only when the file and
        # its directory are usable (else it is a missing file or a permission, worded by the
        # caller — e.g. a WAL file in a read-only directory).
        return writing or _usable(path, os.R_OK)
    # SQLITE_READONLY from a writable file in a writable directory: the journal's open failed
    # and SQLite fell back to a read-only descriptor (an I/O fault, gone on the next try). A
    # file or directory this process cannot write stays what it is: read-only.
    return writing and code == SQLITE_READONLY and _usable(path, os.R_OK | os.W_OK)


#: ``OSError`` errnos of a failing or full storage (a file the operation had to read or write).
_IO_ERRNOS = {errno.EIO: False, errno.ENOSPC: True, errno.EDQUOT: True, errno.EFBIG: True}


def store_io_error(exc: BaseException, path: str, operation: str, *,
                   writing: bool = True) -> StoreIOError | None:
    """The :class:`StoreIOError` (or :class:`StoreFullError`) a failed SQLite write ``exc``
    (wrapped or not) stands for, or ``None`` when it is something else — a lock conflict
    (never I/O: the caller's busy-retry keeps it), a constraint, a read-only file.

    Classified by result code (``sqlite_errorcode``, extended codes masked): SQLITE_IOERR,
    SQLITE_FULL, SQLITE_CANTOPEN, and SQLITE_READONLY while ``path`` and its directory are
    writable (a failed journal open). SQLite's secondary complaints after the automatic
    rollback an I/O error causes ("cannot commit - no transaction is active", "no such
    savepoint") count as the I/O error found in ``exc``'s ``__context__`` chain. ``orig`` is
    always the FIRST driver error of that chain. A plain ``OSError`` (a file the operation
    reads or writes beside the database) counts when its errno is EIO, ENOSPC, EDQUOT or
    EFBIG. ``writing=False`` (a read-only open or probe): SQLITE_IOERR and SQLITE_FULL count,
    and SQLITE_CANTOPEN only on a readable regular file in a writable directory — otherwise
    it is a path or permission problem the caller words itself; READONLY never. Our own
    errors (a :class:`HermesDataError` other than this one) are never re-classified.
    For the except path: nothing here runs on success (nor loads the classifiers it uses)."""
    from hermes_data.locking import driver_error, is_lock_conflict, sqlite_result_code

    if isinstance(exc, StoreIOError):
        return exc
    if isinstance(exc, HermesDataError):
        return None  # already ours, and says what is wrong (e.g. StoreNotWritableError)
    first: BaseException | None = None
    full = False
    seen = 0
    link: BaseException | None = exc
    while link is not None and seen < 16:  # the chain: exc, then what it interrupted …
        orig = driver_error(link)
        code = sqlite_result_code(orig)
        if isinstance(link, StoreIOError):
            first, full = link.orig or link, isinstance(link, StoreFullError)
        elif code is not None and not is_lock_conflict(orig) and _is_io_code(code, path, writing):
            first, full = orig, code == SQLITE_FULL
        elif code is None and isinstance(orig, OSError) and orig.errno in _IO_ERRNOS:
            first, full = orig, _IO_ERRNOS[orig.errno]
        link, seen = link.__context__, seen + 1
    if first is None:
        return None
    outer = driver_error(exc)
    if outer is not first:  # a later failure: only SQLite's echo of the I/O error counts
        code = sqlite_result_code(outer)
        if code is not None and not _is_io_code(code, path, writing) and \
                not any(p in str(outer).lower() for p in _AFTER_ROLLBACK):
            return None
        if code is None and isinstance(outer, OSError) and outer.errno not in _IO_ERRNOS:
            return None
    return (StoreFullError if full else StoreIOError)(path, operation, first)
