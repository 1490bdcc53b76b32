"""``classify_persistence_error`` (docs/sessions.md §8.13, amended by
docs/sessions-coordination.md §3.7 / A7): one bucket name for an exception or message, so
callers (gateways, the agent) can decide between retry, rotate-to-tip and report.

Buckets: ``turn_lease``, ``compression_closed``, ``compression``, ``corrupt``, ``replaced``,
``locked``, ``disk``, ``unknown``. Typed errors decide first (a ``StoreIOError`` — so a
``StoreFullError`` — is ``disk`` whatever its driver error says); messages are matched by the
phrases the store's own errors use, the coordination ones before the corruption markers,
and those before the lock and disk buckets (``database disk image is malformed`` contains
"disk"). The lock bucket is :func:`hermes_data.locking.is_lock_conflict` (every kind); the
disk bucket takes a full disk (:func:`is_disk_full_error`), any other "disk" and a read-only
database ("readonly", "read-only"), as upstream's did.
"""

from __future__ import annotations

import errno

from hermes_data.errors import DatabaseBusyError, StoreFullError, StoreIOError
from hermes_data.locking import is_lock_conflict
from hermes_data.sessions.errors import (CompressionSessionBusyError, CompressionSessionClosedError,
                     SessionTurnLeaseLostError, StateDbCorruptError, StateDbReplacedError)

_TYPED = ((SessionTurnLeaseLostError, "turn_lease"),
          (CompressionSessionClosedError, "compression_closed"),
          (CompressionSessionBusyError, "compression"),
          (StateDbCorruptError, "corrupt"),
          (StateDbReplacedError, "replaced"),
          (DatabaseBusyError, "locked"),
          (StoreIOError, "disk"))  # StoreFullError too (docs/sqlite-policy.md "I/O errors")
#: Every bucket :func:`classify_persistence_error` answers, in the order it decides them, for
#: callers that enumerate them (a scheduler choosing an explanation per cause iterates this,
#: never a list of its own). Every bucket has a typed error, so the table above names them all.
PERSISTENCE_ERROR_CAUSES = tuple(bucket for _, bucket in _TYPED) + ("unknown",)
_PHRASES = (("turn lease", "turn_lease"),
            ("ended with 'compression'", "compression_closed"),
            ("closed by compression", "compression_closed"),
            ("being compressed", "compression"),
            ("compression lease", "compression"),
            ("malformed", "corrupt"), ("file is not a database", "corrupt"),
            ("not a database", "corrupt"), ("database corruption", "corrupt"),
            ("structurally corrupt", "corrupt"),
            ("replaced under a live handle", "replaced"), ("split wal", "replaced"),
            ("was replaced underneath", "replaced"), ("deleted state.db-wal", "replaced"),
            ("deleted state.db-shm", "replaced"))
#: Text of a full disk, whatever wrapped it (an RPC layer, a log line).
_FULL_PHRASES = ("no space left on device", "not enough space", "database or disk is full",
                 "disk full", "full disk", "enospc")
#: After the lock bucket: a failing, full or read-only disk.
_DISK_PHRASES = ("disk", "readonly", "read-only")


def is_disk_full_error(exc: BaseException | str | None) -> bool:
    """True when ``exc`` (an exception or its message) is a full disk: a
    :class:`~hermes_data.errors.StoreFullError`, an ``OSError`` with ``ENOSPC``, or a message
    naming it (SQLite's "database or disk is full", "no space left on device", ``ENOSPC``)."""
    if exc is None:
        return False
    if isinstance(exc, StoreFullError):
        return True
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return True
    text = str(exc).lower()
    return any(phrase in text for phrase in _FULL_PHRASES)


def classify_persistence_error(exc: BaseException | str | None) -> str:
    """The bucket of a persistence failure (an exception or its message); see the module
    docstring."""
    if exc is None:
        return "unknown"
    if isinstance(exc, BaseException):
        for kind, bucket in _TYPED:
            if isinstance(exc, kind):
                return bucket
        text = str(getattr(exc, "orig", None) or exc)
    else:
        text = str(exc)
    text = text.lower()
    for phrase, bucket in _PHRASES:
        if phrase in text:
            return bucket
    if is_lock_conflict(exc):
        return "locked"
    if is_disk_full_error(exc) or any(phrase in text for phrase in _DISK_PHRASES):
        return "disk"
    return "unknown"
