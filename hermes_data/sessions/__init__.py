"""Session store: :class:`SessionStore`, its typed rows and its errors.

Names are re-exported lazily (importing the package loads neither a backend nor the query
modules); type checkers see the real definitions.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .errors import (CompressionPublishError, CompressionSessionBusyError,
                         CompressionSessionClosedError, DeletedWalGenerationError,
                         SchemaBehindError, SessionExportTooLargeError,
                         SessionNotFoundError, SessionResumeTooLargeError, SessionStoreError,
                         StateDbCorruptError, StateDbPermissionError, StateDbReplacedError)
    from .rows import (MessageRow, NewMessage, PublishResult, RecentSessionRow, SessionListRow,
                       SessionRow)
    from .agent_rows import (ActivitySnapshot, CwdUsage, ModelRoute, PurgeReport, ScopeIdentity,
                             SessionRichRow, SessionStatus, TokenDelta, UsageTotals)
    from .projections import ConversationHooks
    from .search_plan import ContextMessage, SearchResult
    from .store import SessionStore
    # Coordination (sessions-ext-coordination.md §3.7, §3.12, §3.15–§3.18).
    from .coord_rows import RewindResult, TranscriptRewrite
    from .cooldowns import CooldownRow, CooldownState
    from .errors import (CooldownRestoreError, SessionCompressionInProgressError,
                         SessionTurnLeaseLostError, TranscriptChangedError)
    from .sweeps import AutoArchiveReport
    from .async_store import AsyncSessionDB, AsyncSessionStore
    from .delegations import reconcile_state_schema
    # Storage resilience (sessions-ext-storage.md §3.2–§3.5).
    from .errors import LiveConnectionError, StateDbMalformedError, StateDbZeroedError
    from .registry import acquire, release
    # Storage (sessions-ext-storage.md §3.6).
    from .fts_storage import OptimizeProgress, OptimizeStorageResult
    from .rows import FtsRebuildStatus

_EXPORTS = {
    "SessionStore": "store",
    "LiveConnectionError": "errors", "StateDbMalformedError": "errors",
    "StateDbZeroedError": "errors", "acquire": "registry", "release": "registry",
    "MessageRow": "rows", "NewMessage": "rows", "PublishResult": "rows",
    "RecentSessionRow": "rows", "SessionListRow": "rows", "SessionRow": "rows",
    "ContextMessage": "search_plan", "SearchResult": "search_plan",
    "CompressionPublishError": "errors", "CompressionSessionBusyError": "errors",
    "CompressionSessionClosedError": "errors", "DeletedWalGenerationError": "errors",
    "SchemaBehindError": "errors", "SessionExportTooLargeError": "errors",
    "SessionNotFoundError": "errors", "SessionResumeTooLargeError": "errors",
    "SessionStoreError": "errors", "StateDbCorruptError": "errors",
    "StateDbPermissionError": "errors", "StateDbReplacedError": "errors",
    # Agent turn API (sessions-ext-agent.md §2.6, §3.5).
    "ActivitySnapshot": "agent_rows", "CwdUsage": "agent_rows", "ModelRoute": "agent_rows",
    "PurgeReport": "agent_rows", "ScopeIdentity": "agent_rows", "SessionRichRow": "agent_rows",
    "SessionStatus": "agent_rows", "TokenDelta": "agent_rows", "UsageTotals": "agent_rows",
    "ConversationHooks": "projections",
    # Coordination (sessions-ext-coordination.md §3.7, §3.12, §3.15–§3.18).
    "CooldownRestoreError": "errors", "SessionCompressionInProgressError": "errors",
    "SessionTurnLeaseLostError": "errors", "TranscriptChangedError": "errors",
    "RewindResult": "coord_rows", "TranscriptRewrite": "coord_rows",
    "CooldownRow": "cooldowns", "CooldownState": "cooldowns",
    "AutoArchiveReport": "sweeps",
    # User-interface reads (sessions-ext-ui.md §4.15).
    "AsyncSessionStore": "async_store", "AsyncSessionDB": "async_store",
    # Gateway (sessions-ext-gateway.md §3.10).
    "reconcile_state_schema": "delegations",
    # Storage (sessions-ext-storage.md §3.6).
    "FtsRebuildStatus": "rows", "OptimizeProgress": "fts_storage",
    "OptimizeStorageResult": "fts_storage",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
