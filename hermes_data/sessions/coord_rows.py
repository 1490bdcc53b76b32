"""Typed results of transcript editing and coordination (spec sessions-ext-coordination.md
§3.12, §3.15, §3.16)."""

from __future__ import annotations

from dataclasses import dataclass

from .rows import MessageRow


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
