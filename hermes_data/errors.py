"""Exception hierarchy of hermes-data.

Every message names the offending object or value and, where there is one, the way out.
"""

from __future__ import annotations

import errno as errno_codes
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


class WalUnsupportedError(HermesDataError):
    """WAL was required but the filesystem holding the database refuses it."""


if TYPE_CHECKING:
    from alembic.util import CommandError

    class ForwardOnlyError(HermesDataError, CommandError):
        """A downgrade was requested; the schema history only moves forward."""

    class OfflineModeError(ConfigurationError, CommandError):
        """Alembic's offline (``--sql``) mode was requested; migrations need the live database."""


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


#: Exceptions that are also Alembic ``CommandError``s, built on first use (see above).
_ALEMBIC_ERRORS = {"ForwardOnlyError": _forward_only_error, "OfflineModeError": _offline_mode_error}


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
    automatic rollback caused (docs/sqlite-policy.md "I/O errors"). :meth:`from_error` is the
    one translation of a driver error into this type."""

    #: What the operator should do, appended to the message.
    advice = "check the disk and the kernel log, then retry"
    #: The ``errno`` the error carries.
    code = errno_codes.EIO

    def __init__(self, path: str, operation: str, orig: BaseException | None = None) -> None:
        self.path, self.operation, self.orig = path, operation, orig
        driver = f" ({orig})" if orig is not None else ""
        super().__init__(f"{path}: {operation} failed: {self.describe()}{driver}; nothing of it "
                         f"was written — {self.advice}")
        self.errno = self.code

    def describe(self) -> str:
        """What went wrong, in a few words (the subclasses name their case)."""
        return "an I/O error on the storage"

    @staticmethod
    def first_fault(exc: BaseException, *, writing: bool = True) -> BaseException | None:
        """The first I/O fault behind ``exc`` (docs/sqlite-policy.md "I/O errors"): the earliest
        error of its chain (``__cause__``/``__context__``, each unwrapped to the driver's
        error) that is ``SQLITE_IOERR``, ``SQLITE_FULL`` or an ``OSError`` with
        ``EIO``/``ENOSPC``/``EDQUOT``/``EFBIG`` — and, when ``writing``, ``SQLITE_CANTOPEN``
        or a plain ``SQLITE_READONLY`` (what a failed open of the journal gives: SQLite
        reopens it read-only) or ``SQLITE_READONLY_CANTINIT`` (the ``-shm``); else a
        secondary error of SQLite's automatic rollback ("no such savepoint", "cannot commit -
        no transaction is active"); else None. A lock conflict is never one, and neither is
        one of our typed errors. A ``SQLITE_READONLY``/``SQLITE_CANTOPEN`` may be a
        permission problem: the caller rules that out first
        (:func:`hermes_data.migrate.runner.not_writable`)."""
        from hermes_data.locking import driver_error, is_lock_conflict

        if isinstance(exc, HermesDataError):
            return None
        if not isinstance(driver_error(exc), OSError) and is_lock_conflict(exc):
            return None  # contention, waited out by the caller: never a fault
        primary = secondary = None
        seen: set[int] = set()
        link: BaseException | None = exc
        while link is not None and id(link) not in seen and len(seen) < 16:
            seen.add(id(link))
            orig = driver_error(link)
            kind = _fault_kind(orig, writing)
            if kind == "secondary" and secondary is None:
                secondary = orig
            elif kind is not None:
                primary = orig  # keep walking: an earlier one wins
            link = link.__cause__ or link.__context__
        return primary or secondary

    @classmethod
    def from_error(cls, path: str, operation: str, exc: BaseException, *,
                   writing: bool = True) -> "StoreIOError | None":
        """The typed error for ``exc`` — :class:`StoreFullError` when its first fault is a
        full disk, else :class:`StoreIOError` — or None when ``exc`` is no I/O fault
        (:meth:`first_fault`)."""
        orig = cls.first_fault(exc, writing=writing)
        if orig is None:
            return None
        full = _fault_kind(orig, writing) == "full"
        return (StoreFullError if full else StoreIOError)(path, operation, orig)


class StoreFullError(StoreIOError):
    """:class:`StoreIOError` for a full filesystem or a file-size limit (SQLite's "database
    or disk is full", ``ENOSPC``, ``EDQUOT``, ``EFBIG``): free space and retry."""

    advice = "free space on its filesystem, then retry"
    code = errno_codes.ENOSPC

    def describe(self) -> str:
        """What went wrong, in a few words."""
        return "the disk is full"


#: SQLite primary result codes of an I/O fault (docs/sqlite-policy.md "I/O errors").
SQLITE_READONLY, SQLITE_IOERR, SQLITE_FULL, SQLITE_CANTOPEN = 8, 10, 13, 14
#: ``SQLITE_READONLY`` codes a failed open of the journal or ``-shm`` gives during a write
#: (plain 8: the journal was reopened read-only after its read-write open failed; 1288
#: READONLY_CANTINIT). READONLY_ROLLBACK (776: a hot journal met by a read-only
#: connection), READONLY_DIRECTORY (1544) and READONLY_DBMOVED (1032) are no I/O fault.
_READONLY_FAULTS = frozenset({SQLITE_READONLY, 1288})
_FULL_ERRNOS = frozenset({errno_codes.ENOSPC, errno_codes.EDQUOT, errno_codes.EFBIG})
_IO_ERRNOS = _FULL_ERRNOS | {errno_codes.EIO}
#: What SQLite answers after it rolled a transaction back by itself (an I/O error or a full
#: disk does that): the statement that follows fails with one of these.
_AFTER_ROLLBACK = ("no such savepoint", "cannot commit - no transaction is active",
                   "cannot rollback - no transaction is active")


def _fault_kind(orig: BaseException, writing: bool = True) -> str | None:
    """``"full"``, ``"io"``, ``"secondary"`` or None for one driver error (unwrapped)."""
    code = getattr(orig, "sqlite_errorcode", None)
    if isinstance(code, int):
        primary = code & 0xFF
        if primary == SQLITE_FULL:
            return "full"
        if primary == SQLITE_IOERR or (writing and (primary == SQLITE_CANTOPEN
                                                    or code in _READONLY_FAULTS)):
            return "io"
        text = str(orig).lower()
        return "secondary" if any(p in text for p in _AFTER_ROLLBACK) else None
    if isinstance(orig, OSError) and orig.errno in _IO_ERRNOS:
        return "full" if orig.errno in _FULL_ERRNOS else "io"
    return None
