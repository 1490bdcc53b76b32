"""Statements of the transcript windows (docs/sessions-ui.md §4.1–§4.4): hit-anchored
windows, bookends, the recent-user list and the PR-URL scan. Every value is bound; the only
variable parts are fixed predicates and the count of bound role/id parameters."""

from __future__ import annotations

from functools import lru_cache

from sqlalchemy import text
from sqlalchemy.sql.elements import TextClause

from hermes_data.sessions.sql.core import MESSAGE_COLS
from hermes_data.sessions.storage.display_sql import VIS

_COLS = ", ".join(MESSAGE_COLS)

#: PostgreSQL: one snapshot for a multi-statement read (first statement of its transaction).
PG_SNAPSHOT = text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")


def _vis(include_inactive: bool) -> str:
    return "" if include_inactive else f" AND {VIS}"


@lru_cache(maxsize=None)
def anchor(include_inactive: bool) -> TextClause:
    """Is :a a row of session :s (visible unless ``include_inactive``)?"""
    return text(f"SELECT id FROM messages WHERE id = :a AND session_id = :s"
                f"{_vis(include_inactive)}")


@lru_cache(maxsize=None)
def before(include_inactive: bool) -> TextClause:
    """The anchor and up to :n - 1 rows before it, newest first."""
    return text(f"SELECT {_COLS} FROM messages WHERE session_id = :s AND id <= :a"
                f"{_vis(include_inactive)} ORDER BY id DESC LIMIT :n")


@lru_cache(maxsize=None)
def after(include_inactive: bool) -> TextClause:
    """Up to :n rows after the anchor, oldest first."""
    return text(f"SELECT {_COLS} FROM messages WHERE session_id = :s AND id > :a"
                f"{_vis(include_inactive)} ORDER BY id LIMIT :n")


def role_params(count: int) -> list[str]:
    """Bound parameter names of a role list."""
    return [f"r{i}" for i in range(count)]


@lru_cache(maxsize=None)
def bookend(include_inactive: bool, roles: int | None, head: bool) -> TextClause:
    """Non-empty rows strictly before :edge (``head``, ascending) or after it (descending),
    with ``roles`` bound role parameters (None: any role)."""
    where = f"session_id = :s AND id {'<' if head else '>'} :edge{_vis(include_inactive)}"
    if roles is not None:
        where += f" AND role IN ({', '.join(':' + p for p in role_params(roles))})"
    return text(f"SELECT {_COLS} FROM messages WHERE {where} AND length(content) > 0 "
                f"ORDER BY id {'ASC' if head else 'DESC'} LIMIT :n")


@lru_cache(maxsize=None)
def recent_users(include_inactive: bool) -> TextClause:
    """One keyset page of user-originated rows (display kind none, '' or 'steer'), newest
    first, below id :before."""
    active = "" if include_inactive else " AND active = 1"
    return text("SELECT id, timestamp, content FROM messages WHERE session_id = :s "
                f"AND role = 'user'{active} AND (display_kind IS NULL OR display_kind IN "
                "('', 'steer')) AND id < :before ORDER BY id DESC LIMIT :n")


@lru_cache(maxsize=None)
def pr_urls(dialect: str, count: int) -> TextClause:
    """Tool rows of the :i0… sessions whose content mentions ``/pull/`` (any case, any
    ``active``), oldest first."""
    ids = ", ".join(f":i{i}" for i in range(count))
    like = "ILIKE" if dialect == "postgresql" else "LIKE"
    return text(f"SELECT id, session_id, content FROM messages WHERE session_id IN ({ids}) "
                f"AND role = 'tool' AND content {like} '%/pull/%' ORDER BY id")
