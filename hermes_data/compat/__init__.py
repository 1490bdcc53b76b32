"""A drop-in for the agent's ``hermes_state`` module: ``from hermes_data.compat import
SessionDB`` gives upstream's class, method names, signatures, defaults, return shapes and
exceptions over :class:`~hermes_data.sessions.store.SessionStore` (docs/compat.md).

The layer is a thin adapter: no SQL, no database connection, no behaviour of its own beyond
adapting names and shapes (``tests/compat/test_compat_rules.py``). The names it covers are
the table in :mod:`hermes_data.compat.names`; those it deliberately leaves out are its
:data:`~hermes_data.compat.names.NOT_PROVIDED`, each with the reason.

Names are re-exported lazily (hermes_data/lazy.py): ``import hermes_data.compat`` loads
neither the store nor a backend until a name is used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hermes_data.compat.names import NOT_PROVIDED
from hermes_data.lazy import lazy_exports

if TYPE_CHECKING:
    from hermes_data.compat.async_db import AsyncSessionDB
    from hermes_data.compat.exports import (
        AUTO_VACUUM_MIN_FREELIST_RATIO, DEFAULT_DB_PATH, MAX_SAFE_EXPORT_MESSAGES,
        MAX_SAFE_RESUME_MESSAGES, PERSISTENCE_ERROR_CAUSES, SESSION_STATUS_COMPLETE,
        SESSION_STATUS_EMPTY, SESSION_STATUS_ERROR, SESSION_STATUS_INTERRUPTED,
        CompressionSessionBusyError, CompressionSessionClosedError, DeletedWalGenerationError,
        LiveConnectionError, SessionCompressionInProgressError, SessionExportTooLargeError,
        SessionResumeTooLargeError, SessionTurnLeaseLostError, StateDbCorruptError,
        StateDbReplacedError, WalUnsupportedError, apply_wal_with_fallback,
        classify_persistence_error, classify_session_status, close_shared_session_dbs,
        format_session_db_unavailable, get_shared_session_db, is_disk_full_error,
        is_malformed_db_error, is_malformed_schema_error, is_transient_sqlite_error,
        is_zeroed_state_db, offline_file_access, quarantine_cross_process_lock,
        quarantine_zeroed_state_db, release_or_close, release_shared_session_db,
        repair_state_db_schema, workspace_key, get_last_init_error,
        is_advisory_lock_contention, is_automatic_end_reason, is_sqlite_wal_reset_vulnerable,
        iter_deleted_sqlite_sidecar_holders, preflight_db_writability,
        refuse_deleted_wal_generation, resolve_synchronous_level, resolved_max_export_messages,
        resolved_max_resume_messages, divert_session_transcript_jsonl, sqlite_source_id)
    from hermes_data.compat.session_db import SessionDB

__all__ = [
    "SessionDB", "AsyncSessionDB",
    # classes and exceptions
    "SessionResumeTooLargeError", "SessionExportTooLargeError", "WalUnsupportedError",
    "LiveConnectionError", "CompressionSessionClosedError", "CompressionSessionBusyError",
    "SessionCompressionInProgressError", "SessionTurnLeaseLostError", "StateDbReplacedError",
    "DeletedWalGenerationError", "StateDbCorruptError",
    # functions
    "apply_wal_with_fallback", "classify_persistence_error", "classify_session_status",
    "format_session_db_unavailable", "is_disk_full_error", "is_malformed_db_error",
    "is_malformed_schema_error", "is_transient_sqlite_error", "is_zeroed_state_db",
    "offline_file_access", "quarantine_cross_process_lock", "quarantine_zeroed_state_db",
    "repair_state_db_schema", "workspace_key", "get_last_init_error",
    "is_advisory_lock_contention", "is_automatic_end_reason", "is_sqlite_wal_reset_vulnerable",
    "iter_deleted_sqlite_sidecar_holders", "preflight_db_writability",
    "refuse_deleted_wal_generation", "resolve_synchronous_level", "resolved_max_export_messages",
    "resolved_max_resume_messages", "divert_session_transcript_jsonl", "sqlite_source_id",
    # the shared-handle registry
    "get_shared_session_db", "release_shared_session_db", "close_shared_session_dbs",
    "release_or_close",
    # constants
    "AUTO_VACUUM_MIN_FREELIST_RATIO", "DEFAULT_DB_PATH", "MAX_SAFE_EXPORT_MESSAGES",
    "MAX_SAFE_RESUME_MESSAGES", "PERSISTENCE_ERROR_CAUSES", "SESSION_STATUS_COMPLETE",
    "SESSION_STATUS_EMPTY", "SESSION_STATUS_ERROR", "SESSION_STATUS_INTERRUPTED",
]

#: Where each name is defined: the two classes in their modules, the rest in :mod:`.exports`.
_EXPORTS = {name: {"SessionDB": "session_db", "AsyncSessionDB": "async_db"}.get(name, "exports")
            for name in __all__}


_resolve = lazy_exports(__name__, _EXPORTS, globals())  # hermes_data/lazy.py


def __getattr__(name: str) -> object:
    """A re-exported name (imported on first use); a name of :data:`NOT_PROVIDED` raises
    ``AttributeError`` saying why it is left out (``from … import`` turns it into Python's
    ``ImportError``)."""
    reason = NOT_PROVIDED.get(name)
    if reason is not None:
        raise AttributeError(f"hermes_data.compat does not provide {name!r}: {reason} "
                             "(docs/compat.md \"Not provided\")")
    return _resolve(name)
