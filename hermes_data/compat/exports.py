"""The module-level names of upstream's ``hermes_state`` that :mod:`hermes_data.compat`
provides besides ``SessionDB`` / ``AsyncSessionDB`` (the table: :data:`.names.MODULE_NAMES`;
docs/compat.md "Module-level names").

Most are our own public objects under upstream's name (our exceptions already subclass the
builtin bases upstream's did). Four registry functions and ``repair_state_db_schema`` are
adapted: upstream's hand out and take back ``SessionDB`` handles and return a report dict, so
these wrap the typed functions in the one place that converts shapes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from hermes_data.compat.maintenance_methods import AUTO_VACUUM_MIN_FREELIST_RATIO
from hermes_data.compat.session_db import SessionDB
from hermes_data.compat.shapes import as_dict
from hermes_data.config import default_db_path, hermes_home
from hermes_data.engine import (apply_wal_with_fallback, is_wal_reset_vulnerable,
                                linked_sqlite_version, sqlite_source_id)
from hermes_data.errors import WalUnsupportedError
from hermes_data.files import deleted_sidecar_holders
from hermes_data.locking import is_advisory_lock_contention
from hermes_data.sessions.agent.bulk import classify_session_status
from hermes_data.sessions.agent.unavailable import format_session_db_unavailable
from hermes_data.sessions.core.lifecycle import is_automatic_end_reason
from hermes_data.sessions.core.persistence_errors import (PERSISTENCE_ERROR_CAUSES,
                                                         classify_persistence_error,
                                                         is_disk_full_error)
from hermes_data.sessions.errors import (CompressionSessionBusyError,
                                         CompressionSessionClosedError,
                                         DeletedWalGenerationError, LiveConnectionError,
                                         SessionCompressionInProgressError,
                                         SessionExportTooLargeError,
                                         SessionResumeTooLargeError, SessionTurnLeaseLostError,
                                         StateDbCorruptError, StateDbReplacedError)
from hermes_data.sessions.storage import registry
from hermes_data.sessions.storage.diversion import divert_session_transcript_jsonl
from hermes_data.sessions.storage.handle_guards import refuse_deleted_wal_generation
from hermes_data.sessions.storage.opening import resolve_synchronous_level
from hermes_data.sessions.storage.writability import writability_preflight
from hermes_data.sessions.storage.filesafety import offline_file_access
from hermes_data.sessions.storage.quarantine import (is_zeroed_state_db,
                                                     quarantine_cross_process_lock,
                                                     quarantine_zeroed_state_db)
from hermes_data.sessions.storage.repair import procedure
from hermes_data.sessions.storage.repair.procedure import (is_malformed_db_error,
                                                           is_malformed_schema_error)
from hermes_data.sessions.store import (DEFAULT_MAX_EXPORT_MESSAGES,
                                        DEFAULT_MAX_RESUME_MESSAGES,
                                        is_transient_sqlite_error, last_init_error,
                                        resolved_max_export_messages,
                                        resolved_max_resume_messages)
from hermes_data.sessions.ui.pickers import workspace_key

__all__ = [
    "AUTO_VACUUM_MIN_FREELIST_RATIO", "CompressionSessionBusyError",
    "CompressionSessionClosedError", "DEFAULT_DB_PATH", "DeletedWalGenerationError",
    "LiveConnectionError", "MAX_SAFE_EXPORT_MESSAGES", "MAX_SAFE_RESUME_MESSAGES",
    "PERSISTENCE_ERROR_CAUSES", "SESSION_STATUS_COMPLETE", "SESSION_STATUS_EMPTY",
    "SESSION_STATUS_ERROR", "SESSION_STATUS_INTERRUPTED", "SessionCompressionInProgressError",
    "SessionExportTooLargeError", "SessionResumeTooLargeError", "SessionTurnLeaseLostError",
    "StateDbCorruptError", "StateDbReplacedError", "WalUnsupportedError",
    "apply_wal_with_fallback", "classify_persistence_error", "classify_session_status",
    "close_shared_session_dbs", "format_session_db_unavailable", "get_shared_session_db",
    "is_disk_full_error", "is_malformed_db_error", "is_malformed_schema_error",
    "is_transient_sqlite_error", "is_zeroed_state_db", "offline_file_access",
    "quarantine_cross_process_lock", "quarantine_zeroed_state_db", "release_or_close",
    "release_shared_session_db", "repair_state_db_schema", "workspace_key",
    "get_last_init_error", "is_advisory_lock_contention", "is_automatic_end_reason",
    "is_sqlite_wal_reset_vulnerable", "iter_deleted_sqlite_sidecar_holders",
    "preflight_db_writability", "refuse_deleted_wal_generation", "resolve_synchronous_level",
    "resolved_max_export_messages", "resolved_max_resume_messages",
    "divert_session_transcript_jsonl", "sqlite_source_id",
]

#: Upstream's size-guard defaults (``SessionStore``'s, docs/sessions.md §6.5).
MAX_SAFE_RESUME_MESSAGES = DEFAULT_MAX_RESUME_MESSAGES
MAX_SAFE_EXPORT_MESSAGES = DEFAULT_MAX_EXPORT_MESSAGES

#: The default ``state.db``, resolved once at import as upstream's constant is
#: (``SessionDB()`` itself resolves it at call time).
DEFAULT_DB_PATH = default_db_path()

#: The statuses ``session_lifecycle_statuses`` answers (``SessionStatus``'s values).
SESSION_STATUS_COMPLETE = "complete"
SESSION_STATUS_INTERRUPTED = "interrupted"
SESSION_STATUS_ERROR = "error"
SESSION_STATUS_EMPTY = "empty"

#: Upstream's name of the registry's ``close_all``: retire and close every shared store.
close_shared_session_dbs = registry.close_all


def get_shared_session_db(db_path: str | os.PathLike[str] | None = None,
                          **open_kwargs: Any) -> SessionDB:
    """Upstream hands out the process's shared writable handle for ``db_path`` (one
    reference; give it back with :func:`release_shared_session_db` or ``close()``); calls
    :func:`hermes_data.sessions.storage.registry.acquire` and wraps the store."""
    return SessionDB.over(registry.acquire(db_path, **open_kwargs))


def release_shared_session_db(db: SessionDB) -> bool:
    """Upstream gives back one reference of a shared handle (False when the registry does
    not know it); calls :func:`hermes_data.sessions.storage.registry.release`."""
    return registry.release(db.store)


def release_or_close(db: SessionDB) -> None:
    """Upstream releases a shared handle, else closes one the caller owns; calls
    :func:`hermes_data.sessions.storage.registry.release_or_close`."""
    registry.release_or_close(db.store)


def repair_state_db_schema(db_path: str | os.PathLike[str], *,
                           backup: bool = True) -> dict[str, Any]:
    """Upstream repairs a malformed ``state.db`` schema and reports ``{repaired, strategy,
    backup_path, error}`` (our report adds its other fields); calls
    :func:`hermes_data.sessions.storage.repair.procedure.repair_state_db_schema`."""
    return as_dict(procedure.repair_state_db_schema(  # type: ignore[return-value]
        db_path, backup=backup))


def is_sqlite_wal_reset_vulnerable(version_info: tuple[int, ...] | None = None) -> bool:
    """Upstream tells whether a SQLite version (default: the linked library) has the WAL-reset
    bug; calls :func:`hermes_data.engine.is_wal_reset_vulnerable`."""
    version = linked_sqlite_version() if version_info is None else version_info
    return is_wal_reset_vulnerable(tuple(version[:3]))  # type: ignore[arg-type]


def get_last_init_error() -> str | None:
    """Upstream's text of the most recent failed ``SessionDB`` construction in this process
    (``None`` when none failed); calls :func:`hermes_data.sessions.store.last_init_error`."""
    failure = last_init_error()
    return None if failure is None else str(failure[1])


def preflight_db_writability(db_path: str | os.PathLike[str], *,
                             db_label: str = "state.db") -> None:
    """Upstream repairs the owner's permission bits of a database and its sidecars inside the
    Hermes home, and refuses one outside it; calls
    :func:`hermes_data.sessions.storage.writability.writability_preflight` (which raises
    ``StateDbPermissionError`` naming the file; ``db_label`` is upstream's name for it in
    messages, which name the path instead)."""
    writability_preflight(Path(db_path), hermes_home)


def iter_deleted_sqlite_sidecar_holders(db_path: str | os.PathLike[str]) -> list[tuple[int, str]]:
    """Upstream lists ``(pid, path)`` of processes (this one included) holding a deleted
    ``-wal``/``-shm`` of ``db_path``; calls :func:`hermes_data.files.deleted_sidecar_holders`."""
    return deleted_sidecar_holders(Path(db_path))
