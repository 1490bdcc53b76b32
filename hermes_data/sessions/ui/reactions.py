"""Message reactions (docs/sessions-ui.md §4.10): Tapback-style, one per author per
message, stored in the row's ``display_metadata`` under ``reactions`` so they travel with the
row through clones. Presentation metadata only: allowed on rows of compression-ended
sessions, no display or FTS trigger fires (D2), a rewind is never invalidated.

Unseen reactions are announced on the next user turn (never by rewriting the reacted
message): marking is exactly-once (concurrent callers split them), delivery at-most-once.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, TypedDict

from sqlalchemy.engine import Connection

from hermes_data.storable import check_text
from hermes_data.sessions.core import encoding as enc
from hermes_data.sessions.handle import StoreHandle
from hermes_data.sessions.ui import reactions_sql as q
from hermes_data.sessions.ui.reactions_sql import REACTIONS_METADATA_KEY

log = logging.getLogger("hermes_data.sessions.ui.reactions")

#: Longest emoji and author accepted.
MAX_EMOJI = 64
MAX_AUTHOR = 128


class Reaction(TypedDict, total=False):
    """One stored reaction (``seen`` once announced)."""

    emoji: str
    author: str
    at: float
    seen: bool


@dataclass(frozen=True)
class UnseenReaction:
    """A reaction not announced yet: the reacted row, its role and text."""

    row_id: int
    role: str
    emoji: str
    text: str


def _check_emoji(emoji: Any) -> str | None:
    if emoji is None:
        return None
    if not isinstance(emoji, str):
        raise ValueError(f"emoji must be a string or None, got {type(emoji).__name__}")
    emoji = enc.scrub(emoji) or ""
    if len(emoji) > MAX_EMOJI or any(ord(ch) < 32 or ord(ch) == 127 for ch in emoji):
        raise ValueError(f"emoji must be at most {MAX_EMOJI} characters without control "
                         f"characters, got {emoji[:80]!r} ({len(emoji)} characters)")
    return emoji


def _check_author(author: Any) -> str:
    if not isinstance(author, str) or not author or len(author) > MAX_AUTHOR:
        raise ValueError(f"author must be a non-empty string of at most {MAX_AUTHOR} "
                         f"characters, got {author!r}")
    return author


def _row_id(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"message_row_id must be an int, got {type(value).__name__} {value!r}")
    return value


def _decode(raw: Any, row_id: int) -> dict[str, Any]:
    if raw is None:
        return {}
    meta = enc.decode_display_metadata(raw)
    if meta is None:
        log.warning("message %s: display_metadata is not a JSON object; treated as empty",
                    row_id)
        return {}
    return meta


def _entries(meta: dict[str, Any]) -> list[dict[str, Any]]:
    value = meta.get(REACTIONS_METADATA_KEY)
    return [r for r in value if isinstance(r, dict)] if isinstance(value, list) else []


def _encode(meta: dict[str, Any]) -> str | None:
    return json.dumps(meta, ensure_ascii=False) if meta else None


def set_message_reaction(store: StoreHandle, session_id: str, message_row_id: Any,
                         emoji: str | None, *, author: str = "user") -> list[Reaction] | None:
    """Set, toggle or clear ``author``'s reaction on one row (docs/sessions-ui.md §4.10); returns the list
    written, or None (no write) for an empty session id, a None row or a row that is not in
    ``session_id``. A new or changed emoji is a new, unseen reaction; the same emoji again
    toggles it off; None/``''`` clears. Other authors' reactions are kept."""
    emoji = _check_emoji(emoji)
    author = _check_author(author)
    check_text("session_id", session_id)
    if not session_id or message_row_id is None:
        return None
    row_id = _row_id(message_row_id)
    def work(conn: Connection) -> list[Reaction] | None:
        row = q.META_FOR_UPDATE.run(conn, {"id": row_id, "s": session_id}).first()
        if row is None:
            return None
        meta = _decode(row[0], row_id)
        entries = _entries(meta)
        mine = [r for r in entries if r.get("author") == author]
        kept: list[Any] = [r for r in entries if r.get("author") != author]
        previous = mine[0] if mine else None
        if emoji and (previous is None or previous.get("emoji") != emoji):
            kept.append({"emoji": emoji, "author": author, "at": enc.now()})
        if kept:
            meta[REACTIONS_METADATA_KEY] = kept
        else:
            meta.pop(REACTIONS_METADATA_KEY, None)
        q.SET_META.run(conn, {"m": _encode(meta), "id": row_id})
        return kept

    return store.backend.write(work)


def get_message_reactions(store: StoreHandle, session_id: str,
                          message_row_id: Any) -> list[Reaction]:
    """The row's reactions (dict entries only); ``[]`` for a missing row, key or a non-list."""
    if not session_id or message_row_id is None:
        return []
    row_id = _row_id(message_row_id)
    row = store.backend.read(lambda c: q.GET_META.run(c, {"id": row_id,
                                                             "s": session_id}).first())
    if row is None or row[0] is None:
        return []
    meta = enc.decode_display_metadata(row[0])
    return _entries(meta) if meta is not None else []  # type: ignore[return-value]


def take_unseen_reactions(store: StoreHandle, session_id: str, *,
                          author: str = "user") -> list[UnseenReaction]:
    """Mark ``author``'s unseen reactions on active rows of ``session_id`` as seen and return
    them by row id (one write transaction; rewound rows neither returned nor marked)."""
    author = _check_author(author)
    check_text("session_id", session_id)
    if not session_id:
        return []
    d = store.backend.dialect

    def work(conn: Connection) -> list[UnseenReaction]:
        out: list[UnseenReaction] = []
        for rid, role, raw_content, raw_meta in q.UNSEEN_CANDIDATES.run(conn, {"s": session_id}).fetchall():
            meta = enc.decode_display_metadata(raw_meta)
            changed = False
            for entry in _entries(meta) if meta is not None else []:
                if entry.get("author") != author or entry.get("seen"):
                    continue
                entry["seen"] = True
                changed = True
                content = enc.decode_content(raw_content, d)
                emoji = entry.get("emoji")
                out.append(UnseenReaction(int(rid), str(role),
                                          emoji if isinstance(emoji, str) else "",
                                          content if isinstance(content, str) else ""))
            if changed and meta is not None:
                q.SET_META.run(conn, {"m": _encode(meta), "id": rid})
        return out

    return store.backend.write(work)
