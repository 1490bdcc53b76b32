"""Session store: :class:`SessionStore`, its typed rows and its errors.

Names are re-exported lazily (importing the package loads neither a backend nor the query
modules); type checkers see the real definitions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hermes_data.lazy import lazy_exports

if TYPE_CHECKING:
    from hermes_data.sessions.errors import (CompressionPublishError, CompressionSessionBusyError,
                         CompressionSessionClosedError, DeletedWalGenerationError,
                         SchemaBehindError, SessionExportTooLargeError,
                         SessionNotFoundError, SessionResumeTooLargeError, SessionStoreError,
                         StateDbCorruptError, StateDbPermissionError, StateDbReplacedError)
    from hermes_data.sessions.rows import (MessageRow, NewMessage, PublishResult, RecentSessionRow, SessionListRow,
                       SessionRow)
    from hermes_data.sessions.rows import (ActivitySnapshot, CwdUsage, ModelRoute, PurgeReport, ScopeIdentity,
                             SessionRichRow, SessionStatus, TokenDelta, UsageTotals)
    from hermes_data.sessions.agent.projections import ConversationHooks
    from hermes_data.sessions.search.plan import ContextMessage, SearchResult
    from hermes_data.sessions.store import SessionStore
    # Coordination (docs/sessions-coordination.md §3.7, §3.12, §3.15–§3.18).
    from hermes_data.sessions.rows import RewindResult, TranscriptRewrite
    from hermes_data.sessions.coordination.cooldowns import CooldownRow, CooldownState
    from hermes_data.sessions.errors import (CooldownRestoreError, SessionCompressionInProgressError,
                         SessionTurnLeaseLostError, TranscriptChangedError)
    from hermes_data.sessions.coordination.sweeps import AutoArchiveReport
    from hermes_data.sessions.core.persistence_errors import (PERSISTENCE_ERROR_CAUSES,
                                                             classify_persistence_error,
                                                             is_disk_full_error)
    from hermes_data.sessions.async_store import AsyncSessionDB, AsyncSessionStore
    from hermes_data.sessions.store import reconcile_state_schema
    # Storage resilience (docs/sessions-storage.md §3.2–§3.5).
    from hermes_data.sessions.errors import LiveConnectionError, StateDbMalformedError, StateDbZeroedError
    from hermes_data.sessions.store import acquire, release
    # Storage (docs/sessions-storage.md §3.6).
    from hermes_data.sessions.storage.fts.layout import OptimizeProgress, OptimizeStorageResult
    from hermes_data.sessions.rows import FtsRebuildStatus
    # Upstream's SessionDB class constants, as module names (issue 33).
    from hermes_data.sessions.core.titles import (CANONICAL_BOT_CHAT_TITLE, TITLE_SOURCE_DERIVED,
                                                 TITLE_SOURCE_LLM, TITLE_SOURCE_USER)
    from hermes_data.sessions.core.encoding import MAX_TITLE_LENGTH
    from hermes_data.sessions.ui.reactions import REACTIONS_METADATA_KEY
    from hermes_data.sessions.agent.identity_sql import RECOVERABLE_END_REASONS
    # Upstream's module functions (issue 33).
    from hermes_data.sessions.core.lifecycle import is_automatic_end_reason
    from hermes_data.sessions.store import (resolved_max_export_messages,
                                            resolved_max_resume_messages)
    from hermes_data.sessions.storage.handle_guards import refuse_deleted_wal_generation
    from hermes_data.sessions.storage.opening import resolve_synchronous_level
    # Transcript diversion (docs/sessions-storage.md §3.11).
    from hermes_data.sessions.storage.diversion import divert_session_transcript_jsonl

_EXPORTS = {
    "SessionStore": "store",
    "LiveConnectionError": "errors", "StateDbMalformedError": "errors",
    "StateDbZeroedError": "errors", "acquire": "store", "release": "store",
    "MessageRow": "rows", "NewMessage": "rows", "PublishResult": "rows",
    "RecentSessionRow": "rows", "SessionListRow": "rows", "SessionRow": "rows",
    "ContextMessage": "search.plan", "SearchResult": "search.plan",
    "CompressionPublishError": "errors", "CompressionSessionBusyError": "errors",
    "CompressionSessionClosedError": "errors", "DeletedWalGenerationError": "errors",
    "SchemaBehindError": "errors", "SessionExportTooLargeError": "errors",
    "SessionNotFoundError": "errors", "SessionResumeTooLargeError": "errors",
    "SessionStoreError": "errors", "StateDbCorruptError": "errors",
    "StateDbPermissionError": "errors", "StateDbReplacedError": "errors",
    # Agent turn API (docs/sessions-agent.md §2.6, §3.5).
    "ActivitySnapshot": "rows", "CwdUsage": "rows", "ModelRoute": "rows",
    "PurgeReport": "rows", "ScopeIdentity": "rows", "SessionRichRow": "rows",
    "SessionStatus": "rows", "TokenDelta": "rows", "UsageTotals": "rows",
    "ConversationHooks": "agent.projections",
    # Coordination (docs/sessions-coordination.md §3.7, §3.12, §3.15–§3.18).
    "CooldownRestoreError": "errors", "SessionCompressionInProgressError": "errors",
    "SessionTurnLeaseLostError": "errors", "TranscriptChangedError": "errors",
    "RewindResult": "rows", "TranscriptRewrite": "rows",
    "CooldownRow": "coordination.cooldowns", "CooldownState": "coordination.cooldowns",
    "AutoArchiveReport": "coordination.sweeps",
    "classify_persistence_error": "core.persistence_errors",
    "is_disk_full_error": "core.persistence_errors",
    "PERSISTENCE_ERROR_CAUSES": "core.persistence_errors",
    # User-interface reads (docs/sessions-ui.md §4.15).
    "AsyncSessionStore": "async_store", "AsyncSessionDB": "async_store",
    # Gateway (docs/sessions-gateway.md §3.10).
    "reconcile_state_schema": "store",
    # Storage (docs/sessions-storage.md §3.6).
    "FtsRebuildStatus": "rows", "OptimizeProgress": "storage.fts.layout",
    "OptimizeStorageResult": "storage.fts.layout",
    # Upstream's SessionDB class constants, as module names (issue 33).
    "TITLE_SOURCE_DERIVED": "core.titles", "TITLE_SOURCE_LLM": "core.titles",
    "TITLE_SOURCE_USER": "core.titles", "CANONICAL_BOT_CHAT_TITLE": "core.titles",
    "MAX_TITLE_LENGTH": "core.encoding", "REACTIONS_METADATA_KEY": "ui.reactions",
    "RECOVERABLE_END_REASONS": "agent.identity_sql",
    # Upstream's module functions (issue 33).
    "is_automatic_end_reason": "core.lifecycle",
    "resolved_max_resume_messages": "store", "resolved_max_export_messages": "store",
    "refuse_deleted_wal_generation": "storage.handle_guards",
    "resolve_synchronous_level": "storage.opening",
    # Transcript diversion (docs/sessions-storage.md §3.11).
    "divert_session_transcript_jsonl": "storage.diversion",
}

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_exports(__name__, _EXPORTS, globals())  # hermes_data/lazy.py
