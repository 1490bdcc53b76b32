"""Typed records of the agent turn API (spec sessions-ext-agent.md §2.6)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, TypedDict

from .rows import SessionRow

#: Lifecycle status of a session's newest active row (§3.11).
SessionStatus = Literal["complete", "interrupted", "error", "empty"]


class ModelRoute(NamedTuple):
    """A main-loop billing route of a session and the calls it served."""

    model: str
    billing_provider: str
    billing_base_url: str
    billing_mode: str
    api_call_count: int


class UsageTotals(NamedTuple):
    """Store-wide token and cost totals over root sessions."""

    tokens: int
    cost_usd: float


class CwdUsage(NamedTuple):
    """One working directory, how many sessions used it and when it was last active."""

    cwd: str
    sessions: int
    last_active: float


class ScopeIdentity(NamedTuple):
    """Whether a session is an explicit fork child, and its (stripped) source."""

    is_fork: bool
    source: str


class ActivitySnapshot(NamedTuple):
    """The activity columns of one session and the seconds since its last activity."""

    last_activity_at: float | None
    last_activity_description: str | None
    last_activity_provenance: str | None
    seconds_since_activity: float | None

    def as_dict(self) -> dict[str, Any]:
        """The fields plus upstream's aliases (``last_activity_ts``, ``last_activity_desc``,
        ``description``, ``provenance``)."""
        out = self._asdict()
        out.update(last_activity_ts=self.last_activity_at,
                   last_activity_desc=self.last_activity_description,
                   description=self.last_activity_description,
                   provenance=self.last_activity_provenance)
        return out


class PurgeReport(NamedTuple):
    """What ``purge_stale_tool_call_markers`` found or changed."""

    dry_run: bool
    rows_affected: int
    row_ids: tuple[int, ...]
    backup_path: str | None


class TokenDelta(TypedDict, total=False):
    """The keyword parameters of ``update_token_counts`` / ``queue_token_counts``."""

    input_tokens: int
    output_tokens: int
    model: str | None
    cache_read_tokens: int
    cache_write_tokens: int
    reasoning_tokens: int
    estimated_cost_usd: float | None
    actual_cost_usd: float | None
    cost_status: str | None
    cost_source: str | None
    pricing_version: str | None
    billing_provider: str | None
    billing_base_url: str | None
    billing_mode: str | None
    api_call_count: int
    absolute: bool


@dataclass(frozen=True)
class SessionRichRow(SessionRow):
    """A :class:`SessionRow` with its listing preview and ``LAST_ACTIVE`` (§2.6); the UI's
    rich listing (sessions-ext-ui §4.6) also fills ``unread``, the lineage and ``extra`` (the
    upstream-only ``sessions`` columns this file has)."""

    preview: str | None = None
    last_active: float | None = None
    unread: bool = False
    lineage_root_id: str | None = None
    lineage_ids: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)
