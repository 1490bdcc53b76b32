"""Statements of export and import (docs/sessions-ui.md §4.11–§4.12). Column lists come
from the live table's catalogue or fixed allow-lists and are quoted; every value is bound."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.sql.elements import TextClause

from hermes_data.sessions.sql.core import MESSAGE_COLS, quote_ident

#: A session's live rows for export, by id.
EXPORT_MESSAGES = text(f"SELECT {', '.join(MESSAGE_COLS)} FROM messages "
                       "WHERE session_id = :s AND active = 1 ORDER BY id")
#: Does a session exist?
SESSION_EXISTS = text("SELECT 1 FROM sessions WHERE id = :id")
#: Stored parent links of the given ids (lineage checks of an import).
STORED_PARENT = text("SELECT parent_session_id FROM sessions WHERE id = :id")
#: Link an imported child to its parent.
SET_PARENT = text("UPDATE sessions SET parent_session_id = :p WHERE id = :id")
#: Title an imported session (inside a SAVEPOINT: the unique index may refuse it).
SET_TITLE = text("UPDATE sessions SET title = :t WHERE id = :id")
#: Counters of an imported session: what was inserted.
SET_COUNTERS = text("UPDATE sessions SET message_count = :m, tool_call_count = :t WHERE id = :id")


def export_session_row(columns: list[str]) -> TextClause:
    """One session's columns (``columns``: the live catalogue's) and its resolved prompt."""
    cols = ", ".join(f"s.{quote_ident(c)}" for c in columns)
    return text(f"SELECT {cols}, COALESCE(sp.prompt, s.system_prompt) FROM sessions s "
                "LEFT JOIN system_prompts sp ON sp.hash = s.system_prompt_hash WHERE s.id = :id")


def export_keys_page(with_source: bool, include_archived: bool) -> TextClause:
    """Keyset page of session ids in ``started_at, id`` order after (:t, :id)."""
    where = "(started_at > :t OR (started_at = :t AND id > :id))"
    if with_source:
        where += " AND source = :source"
    if not include_archived:
        where += " AND COALESCE(archived, 0) = 0"
    return text(f"SELECT id, started_at FROM sessions WHERE {where} "
                "ORDER BY started_at, id LIMIT :n")


def insert_session(columns: list[str]) -> TextClause:
    """Insert an imported session (``columns``: allow-listed or catalogue names, bound as
    :c0, :c1, …)."""
    cols = ", ".join(quote_ident(c) for c in columns)
    marks = ", ".join(f":c{i}" for i in range(len(columns)))
    return text(f"INSERT INTO sessions ({cols}) VALUES ({marks})")
