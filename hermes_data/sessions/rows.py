"""Typed rows of the session store (never ``dict[str, Any]``): the core rows, the agent turn
API's records (docs/sessions-agent.md §2.6) and the coordination results
(docs/sessions-coordination.md §3.12, §3.15, §3.16)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Literal, NamedTuple, Sequence, TypedDict


@dataclass(frozen=True)
class SessionRow:
    """One session with its core columns and the resolved system prompt (docs/sessions.md §5.1)."""

    id: str
    source: str
    user_id: str | None
    session_key: str | None
    chat_id: str | None
    chat_type: str | None
    thread_id: str | None
    display_name: str | None
    origin_json: str | None
    model: str | None
    model_config: str | None
    system_prompt: str | None  # COALESCE(system_prompts.prompt, sessions.system_prompt)
    system_prompt_hash: str | None
    parent_session_id: str | None
    started_at: float
    ended_at: float | None
    end_reason: str | None
    message_count: int
    tool_call_count: int
    input_tokens: int
    output_tokens: int
    cwd: str | None
    git_branch: str | None
    git_repo_root: str | None
    billing_provider: str | None
    estimated_cost_usd: float | None
    actual_cost_usd: float | None
    title: str | None
    title_source: str | None
    last_activity_at: float | None
    profile_name: str | None
    archived: bool
    pinned: bool
    hidden: bool
    last_read_at: float | None
    # The agent turn API's columns (docs/sessions-agent.md §2.6), with defaults so existing
    # constructors keep working; ``tool_names`` is the decoded JSON array.
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    api_call_count: int = 0
    billing_base_url: str | None = None
    billing_mode: str | None = None
    cost_status: str | None = None
    cost_source: str | None = None
    pricing_version: str | None = None
    last_activity_description: str | None = None
    last_activity_provenance: str | None = None
    git_metadata_generation: int = 0
    tool_names: tuple[str, ...] | None = None
    expiry_finalized: bool = False
    # The gateway's handoff columns (docs/sessions-gateway.md §2.2, amendment A1).
    handoff_state: str | None = None
    handoff_platform: str | None = None
    handoff_error: str | None = None
    handoff_requested_at: float | None = None
    handoff_claimed_by: str | None = None
    handoff_claimed_at: float | None = None
    # The coordination columns (docs/sessions-coordination.md §2.1), as upstream's get_session
    # returns them: the compression-failure cooldown and its error, the streak counters, the
    # recovery deadline and the rewind counter.
    compression_failure_cooldown_until: float | None = None
    compression_failure_error: str | None = None
    compression_fallback_streak: int = 0
    compression_ineffective_count: int = 0
    compression_recovery_deadline: float | None = None
    compression_overload_streak: int = 0
    rewind_count: int = 0


@dataclass(frozen=True)
class SessionListRow:
    """A listing row (docs/sessions.md §5.2), projected onto its compression tip when it has one."""

    id: str
    source: str
    model: str | None
    title: str | None
    started_at: float
    ended_at: float | None
    end_reason: str | None
    message_count: int
    tool_call_count: int
    last_active: float | None
    preview: str | None
    cwd: str | None
    git_branch: str | None
    git_repo_root: str | None
    session_key: str | None
    parent_session_id: str | None
    profile_name: str | None
    archived: bool
    pinned: bool
    hidden: bool
    last_read_at: float | None
    unread: bool
    lineage_root_id: str | None = None
    lineage_ids: tuple[str, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class RecentSessionRow:
    """A row of :meth:`SessionStore.list_recent_sessions_bounded` (docs/sessions.md §5.3)."""

    id: str
    source: str
    model: str | None
    title: str | None
    started_at: float
    ended_at: float | None
    end_reason: str | None
    message_count: int
    tool_call_count: int
    last_active: float | None
    preview: str | None
    lineage_root_id: str | None
    unread: bool


@dataclass(frozen=True)
class MessageRow:
    """One transcript row, decoded per docs/sessions.md §6.1."""

    id: int
    session_id: str
    role: str
    content: Any  # str, multimodal parts (list/dict), bytes, number or None
    tool_call_id: str | None
    tool_calls: list[Any] | None
    tool_name: str | None
    timestamp: float
    token_count: int | None
    finish_reason: str | None
    reasoning: str | None
    reasoning_content: str | None
    reasoning_details: str | None
    codex_reasoning_items: str | None
    codex_message_items: str | None
    platform_message_id: str | None
    observed: int
    compressed_summary: bool
    effect_disposition: str | None
    active: bool
    compacted: bool
    api_content: str | None
    display_kind: str | None
    display_metadata: dict[str, Any] | None

    def to_dict(self) -> dict[str, Any]:
        """The fields as a new dict in field order (what ``dataclasses.asdict`` gives, without
        its recursive deep copy: nested values are shared, not copied)."""
        return dict(self.__dict__)


#: The fields of :class:`MessageRow`, in ``MESSAGE_COLS`` order.
MESSAGE_ROW_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(MessageRow))


def new_message_row(values: Sequence[Any]) -> MessageRow:
    """A :class:`MessageRow` from already-decoded values in field order.

    The generated ``__init__`` of a frozen dataclass sets each of the 24 fields through
    ``object.__setattr__``; on the transcript read path that was over half the time of a
    page. A new instance whose ``__dict__`` is filled with every field in field order is the
    same object (equality, hash, ``repr``, ``asdict`` and :meth:`MessageRow.to_dict` agree);
    :func:`hermes_data.sessions.core.messages.message_rows` builds rows this way, so
    :class:`MessageRow` keeps a ``__dict__`` (no ``__slots__``) and no ``__post_init__``."""
    row = object.__new__(MessageRow)
    row.__dict__.update(zip(MESSAGE_ROW_FIELDS, values))
    return row


class NewMessage(TypedDict, total=False):
    """Input row of :meth:`SessionStore.append_messages_batch` (``role`` is required)."""

    role: str
    content: Any
    tool_call_id: str | None
    tool_calls: Any
    tool_name: str | None
    timestamp: Any
    token_count: int | None
    finish_reason: str | None
    reasoning: str | None
    reasoning_content: str | None
    reasoning_details: Any
    codex_reasoning_items: Any
    codex_message_items: Any
    platform_message_id: str | None
    message_id: str | None  # alias of platform_message_id
    observed: int
    _compressed_summary: bool
    effect_disposition: str | None
    api_content: str | None
    display_kind: str | None
    display_metadata: Any
    display_identity: bytes | None  # docs/sessions-ui.md §3.4: exactly 32 bytes; computed when absent


@dataclass(frozen=True)
class PublishResult:
    """Outcome of :meth:`SessionStore.publish_compression_child`."""

    child_session_id: str
    handoff_rows: int
    cloned_rows: int
    title_moved: bool


@dataclass(frozen=True)
class FtsRebuildStatus:
    """A backfill window (docs/sessions-storage.md §3.6, §3.9.2): ``total`` = high water, ``indexed`` =
    progress, ``percent`` = ``min(100, 100 * indexed // total)``."""

    pending: bool
    total: int
    indexed: int
    percent: int

    @classmethod
    def window(cls, progress: int, high_water: int) -> "FtsRebuildStatus":
        """The status of the window ``(progress, high_water]`` (``high_water`` > 0)."""
        return cls(progress < high_water, high_water, progress,
                   min(100, 100 * progress // high_water))


# -- the agent turn API's records (docs/sessions-agent.md §2.6)

#: Lifecycle status of a session's newest active row (docs/sessions-agent.md §3.11).
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
    """A :class:`SessionRow` with its listing preview and ``LAST_ACTIVE`` (docs/sessions-agent.md §2.6); the UI's
    rich listing (docs/sessions-ui.md §4.6) also fills ``unread``, the lineage and ``extra`` (the
    upstream-only ``sessions`` columns this file has)."""

    preview: str | None = None
    last_active: float | None = None
    unread: bool = False
    lineage_root_id: str | None = None
    lineage_ids: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)


# -- coordination results (docs/sessions-coordination.md §3.12, §3.15, §3.16)

@dataclass(frozen=True)
class TranscriptRewrite:
    """What ``replace_messages`` did: rows deleted, rows archived, new row ids in input order."""

    removed: int
    archived: int
    inserted_ids: tuple[int, ...]


@dataclass(frozen=True)
class RewindResult:
    """What ``rewind_to_message`` did. ``target_message`` is the row as read before the rewind;
    ``new_head_id`` the highest active id afterwards (None when none);
    ``replacement_message_id`` the preserved compaction handoff's new row, if any."""

    rewound_count: int
    rewound_ids: tuple[int, ...]
    target_message: MessageRow
    new_head_id: int | None
    replacement_message_id: int | None
