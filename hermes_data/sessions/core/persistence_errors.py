"""``classify_persistence_error`` (docs/sessions.md §8.13, amended by
docs/sessions-coordination.md §3.7 / A7): one bucket name for an exception or message, so
callers (gateways, the agent) can decide between retry, rotate-to-tip and report.

Buckets: ``turn_lease``, ``compression_closed``, ``compression``, ``corrupt``, ``replaced``,
``locked``, ``disk``, ``unknown``. Typed errors decide first (a ``StoreIOError`` — so a
``StoreFullError`` — is ``disk`` whatever its driver error says); messages are matched by the
phrases the store's own errors use, the coordination ones before the corruption markers,
and those before the lock and disk buckets (``database disk image is malformed`` contains
"disk"). The lock bucket is :func:`hermes_data.locking.is_lock_conflict` (every kind).
"""

from __future__ import annotations

from hermes_data.errors import DatabaseBusyError, StoreIOError
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
_PHRASES = (("turn lease", "turn_lease"),
            ("ended with 'compression'", "compression_closed"),
            ("being compressed", "compression"),
            ("compression lease", "compression"),
            ("malformed", "corrupt"), ("file is not a database", "corrupt"),
            ("not a database", "corrupt"), ("database corruption", "corrupt"),
            ("structurally corrupt", "corrupt"),
            ("replaced under a live handle", "replaced"), ("split wal", "replaced"))
#: After the lock bucket.
_DISK_PHRASES = (("disk i/o error", "disk"), ("disk is full", "disk"), ("no space left", "disk"),
                 ("disk", "disk"))


def classify_persistence_error(exc: BaseException | str) -> str:
    """The bucket of a persistence failure (an exception or its message); see the module
    docstring."""
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
    for phrase, bucket in _DISK_PHRASES:
        if phrase in text:
            return bucket
    return "unknown"
