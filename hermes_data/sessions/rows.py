"""Typed rows of the session store (never ``dict[str, Any]``)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Sequence, TypedDict


@dataclass(frozen=True)
class SessionRow:
    """One session with its core columns and the resolved system prompt (§5.1)."""

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
    # The agent turn API's columns (sessions-ext-agent §2.6), with defaults so existing
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
    # The gateway's handoff columns (sessions-ext-gateway §2.2, amendment A1).
    handoff_state: str | None = None
    handoff_platform: str | None = None
    handoff_error: str | None = None
    handoff_requested_at: float | None = None
    handoff_claimed_by: str | None = None
    handoff_claimed_at: float | None = None


@dataclass(frozen=True)
class SessionListRow:
    """A listing row (§5.2), projected onto its compression tip when it has one."""

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
    """A row of :meth:`SessionStore.list_recent_sessions_bounded` (§5.3)."""

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
    """One transcript row, decoded per §6.1."""

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
    :func:`hermes_data.sessions.messages.message_rows` builds rows this way, so
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
    display_identity: bytes | None  # ui §3.4: exactly 32 bytes; computed when absent


@dataclass(frozen=True)
class PublishResult:
    """Outcome of :meth:`SessionStore.publish_compression_child`."""

    child_session_id: str
    handoff_rows: int
    cloned_rows: int
    title_moved: bool


@dataclass(frozen=True)
class FtsRebuildStatus:
    """A backfill window (storage §3.6, §3.9.2): ``total`` = high water, ``indexed`` =
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
