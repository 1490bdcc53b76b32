"""Statements of message reactions (docs/sessions-ui.md §4.10): read-modify-write of a
row's ``display_metadata`` (PostgreSQL locks the rows it reads with ``FOR UPDATE``; SQLite
runs under ``BEGIN IMMEDIATE``). No display or FTS trigger watches ``display_metadata``."""

from __future__ import annotations

from functools import lru_cache

from sqlalchemy import text
from sqlalchemy.sql.elements import TextClause

#: The ``display_metadata`` key reactions are stored under (upstream's name; public as
#: :data:`hermes_data.sessions.ui.reactions.REACTIONS_METADATA_KEY`, the same object).
REACTIONS_METADATA_KEY = "reactions"

#: One row's metadata (any visibility).
GET_META = text("SELECT display_metadata FROM messages WHERE id = :id AND session_id = :s")
#: Store a row's metadata.
SET_META = text("UPDATE messages SET display_metadata = :m WHERE id = :id")


@lru_cache(maxsize=None)
def meta_for_update(dialect: str) -> TextClause:
    """One row's metadata inside the write transaction (locked on PostgreSQL)."""
    lock = " FOR UPDATE" if dialect == "postgresql" else ""
    return text("SELECT display_metadata FROM messages WHERE id = :id AND session_id = :s"
                + lock)


@lru_cache(maxsize=None)
def unseen_candidates(dialect: str) -> TextClause:
    """Active rows of :s whose metadata mentions ``reactions`` (others are never decoded),
    by id; locked on PostgreSQL."""
    pg = dialect == "postgresql"
    key = f"'{REACTIONS_METADATA_KEY}'"
    find = f"strpos(display_metadata, {key})" if pg else f"instr(display_metadata, {key})"
    return text("SELECT id, role, content, display_metadata FROM messages WHERE session_id = :s "
                f"AND active = 1 AND display_metadata IS NOT NULL AND {find} > 0 ORDER BY id"
                + (" FOR UPDATE" if pg else ""))
