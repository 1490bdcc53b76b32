"""Exceptions of the session store (docs/sessions.md §8.13, the ones that exist at this level)."""

from __future__ import annotations

import sqlite3
from typing import Any

from hermes_data.errors import HermesDataError, StoreNotWritableError


class SessionStoreError(HermesDataError):
    """Base class of the session store's errors."""


class SessionNotFoundError(SessionStoreError, LookupError):
    """A write targeted a session id that does not exist."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(f"session {session_id!r} does not exist; create it with create_session() first")


class CompressionSessionClosedError(SessionStoreError, RuntimeError):
    """A write targeted a session that already continued in a compression child."""

    def __init__(self, session_id: str, child_id: str | None = None) -> None:
        self.session_id = session_id
        self.child_id = child_id
        hint = f" (its continuation is {child_id!r})" if child_id else ""
        super().__init__(
            f"session {session_id!r} ended with 'compression'{hint}; append to the compression "
            "tip instead (get_compression_tip()). The store is healthy.")


class CompressionSessionBusyError(SessionStoreError, RuntimeError):
    """``publish_compression_child`` was given a lease holder that does not own a live lease."""


class CompressionPublishError(SessionStoreError, ValueError):
    """``publish_compression_child`` refused: missing/ended parent, empty handoff, or a race."""


class SessionResumeTooLargeError(SessionStoreError, ValueError):
    """A resume would materialise more messages than ``sessions.max_resume_messages`` allows."""

    def __init__(self, count: int, limit: int, scope: str) -> None:
        self.count, self.limit, self.scope = count, limit, scope
        super().__init__(
            f"session has more than {limit} messages {scope} (counted {count}); raise "
            "sessions.max_resume_messages (0 disables the guard) or resume the tip only")


class SessionExportTooLargeError(SessionStoreError, ValueError):
    """An export of one session would exceed ``sessions.max_export_messages``."""

    def __init__(self, session_id: str, count: int, limit: int) -> None:
        self.session_id, self.count, self.limit = session_id, count, limit
        super().__init__(
            f"session {session_id!r} has more than {limit} active messages (counted {count}); "
            "raise sessions.max_export_messages (0 disables the guard)")


class SchemaBehindError(SessionStoreError):
    """A read-only open found the database behind the head shape (no DDL was run)."""

    def __init__(self, missing: str, path: str = "the session store") -> None:
        self.missing = missing
        self.path = path
        super().__init__(
            f"{path} is behind the session-store schema: {missing} is missing; open it once "
            "writable (or run `hermes-data upgrade --store sessions`)")


class StateDbReplacedError(SessionStoreError, RuntimeError):
    """The database file was replaced under a live handle (docs/sessions.md §8.11); sticky.

    Out-of-band ``cp``/``mv``/restore must stop writes, never be "repaired" in place.
    """

    def __init__(self, path: str, why: str) -> None:
        self.path, self.why = path, why
        super().__init__(
            f"{path}: {why}; this handle stops writing. Close it and open the store again "
            "(if the file was restored on purpose, make sure no process still holds the old one)")


class DeletedWalGenerationError(StateDbReplacedError):
    """A process holds a deleted ``-wal``/``-shm`` of this database (a split WAL generation)."""

    def __init__(self, path: str, why: str) -> None:
        super().__init__(path, why)
        self.args = (f"{path}: {why}. A second WAL generation would split the database: stop "
                     "the processes holding the deleted sidecar (see `hermes-data doctor`); "
                     "do not delete the -wal file",)

    def __str__(self) -> str:
        return self.args[0]


class StateDbCorruptError(SessionStoreError, sqlite3.DatabaseError):
    """Structural corruption (SQLITE_CORRUPT / SQLITE_NOTADB) quarantined this handle; sticky.

    Also a :class:`sqlite3.DatabaseError` (docs/sessions-storage.md §3.5), so ``except sqlite3.Error``
    paths still catch it; ``sqlite_errorcode`` / ``sqlite_errorname`` are the cause's."""

    def __init__(self, path: str, cause: str | BaseException) -> None:
        self.path = path
        orig = getattr(cause, "orig", None) or cause
        self.sqlite_errorcode = getattr(orig, "sqlite_errorcode", None)
        self.sqlite_errorname = getattr(orig, "sqlite_errorname", None)
        super().__init__(
            f"{path}: the database is structurally corrupt ({orig}); this handle is quarantined "
            "and writes nothing more. Run `hermes-data doctor` and restore from a backup")


class StateDbMalformedError(SessionStoreError, sqlite3.DatabaseError):
    """A writable open met a malformed schema (``malformed database schema``) that the
    one repair per process and path did not fix (docs/sessions-storage.md §3.3). ``report`` is the
    :class:`~hermes_data.sessions.storage.repair.procedure.RepairReport` (None when the one-shot was used)."""

    def __init__(self, path: str, cause: BaseException, report: Any = None) -> None:
        self.path, self.report, self.cause = path, report, cause
        orig = getattr(cause, "orig", None) or cause
        self.sqlite_errorcode = getattr(orig, "sqlite_errorcode", None)
        self.sqlite_errorname = getattr(orig, "sqlite_errorname", None)
        why = ("the automatic repair was already tried by this process" if report is None
               else f"repair failed: {report.error}")
        super().__init__(
            f"{path}: malformed database schema ({orig}); {why}. Stop every Hermes process "
            f"using it and run `hermes-data repair --url {path} --apply`, or restore a backup")


class StateDbZeroedError(SessionStoreError, sqlite3.DatabaseError):
    """The database file is empty or all NUL bytes and could not be (or, read-only, is never)
    moved aside (docs/sessions-storage.md §3.4); nothing was renamed."""

    def __init__(self, path: str, why: str) -> None:
        self.path = path
        super().__init__(
            f"{path}: the database file is zeroed (empty or all NUL bytes) and was left in "
            f"place ({why}); restore it from a snapshot or stop the process holding it")


class LiveConnectionError(SessionStoreError, RuntimeError):
    """A raw file operation (read, hash, copy, rename) on a database was refused because this
    process still has SQLite connections to it (docs/sessions-storage.md §3.0)."""

    def __init__(self, path: str, what: str, count: int) -> None:
        self.path, self.what, self.count = path, what, count
        super().__init__(
            f"{path}: cannot {what} while this process has {count} open connection(s) to it; "
            "close every handle first")


class StateDbPermissionError(SessionStoreError, StoreNotWritableError):
    """The writability preflight (docs/sessions.md §8.1 step 2) found a file or directory it must not or
    could not repair; nothing was connected. ``path`` and ``command`` name the first one. Also
    raised by a read-only open of a WAL store whose directory (or ``-wal``/``-shm``) this
    process cannot write (issue 31): unwritable, not corrupt. A
    :class:`~hermes_data.errors.StoreNotWritableError` (so a :class:`PermissionError`)."""


# -- transcript editing and coordination (docs/sessions-coordination.md §3.7) ---------------


class SessionCompressionInProgressError(CompressionSessionBusyError):
    """A destructive transcript mutation met a live compression lock held by someone else
    (retried briefly by the writer, W1; the message says the session is being compressed)."""

    def __init__(self, session_id: str, holder: str) -> None:
        self.session_id, self.holder = session_id, holder
        super().__init__(f"session {session_id!r} is being compressed (lock held by "
                         f"{holder!r}); retry once the compression is published")


class SessionTurnLeaseLostError(SessionStoreError, RuntimeError):
    """The presented holder does not own the conversation's turn lease, or a fenced
    mutation met a live lease (never retried: a newer owner may be writing)."""

    def __init__(self, session_id: str, key: str, holder: str | None, owner: str | None) -> None:
        self.session_id, self.key, self.holder, self.owner = session_id, key, holder, owner
        who = "nobody" if owner is None else repr(owner)
        mine = "" if holder is None else f" {holder!r} does not own it:"
        super().__init__(f"turn lease of session {session_id!r} (conversation {key!r}) lost:"
                         f"{mine} held by {who}; nothing was written")


class TranscriptChangedError(SessionStoreError, RuntimeError):
    """A rewind's compare-and-swap failed: the transcript changed before the rewind."""

    def __init__(self, session_id: str, what: str) -> None:
        self.session_id = session_id
        super().__init__(f"session {session_id!r}: the transcript changed before the rewind "
                         f"({what}); nothing was changed")


class CooldownRestoreError(SessionStoreError, RuntimeError):
    """A compression failure cooldown rollback was not applied or not verified."""
