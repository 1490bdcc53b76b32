"""Statements of the agent turn API's conversation projections
(docs/sessions-agent.md §3.5): transcript rows of a set of sessions in id order, and the resume count."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import sqlalchemy as sa

from hermes_data.sessions.schema import messages as m
from hermes_data.sessions.schema import sessions
from hermes_data.sessions.sql.constructs import bp, const
from hermes_data.sessions.sql.dialect import Statements, driver_statement
from hermes_data.statements import DriverPrepared


#: Columns a projection reads (no replayed message carries ``token_count`` or ``compacted``):
#: six every row uses, then the optional ones — first those any role can carry, then those
#: only an assistant message carries. The projection's hot path tests the optional columns
#: by position (``projections._messages``; the tests hold the two together).
PROJECTION_COLS = (
    "id", "session_id", "role", "content", "timestamp", "active",
    "tool_calls", "display_metadata", "api_content", "display_kind", "tool_call_id",
    "tool_name", "effect_disposition", "platform_message_id", "observed", "_compressed_summary",
    "reasoning_content", "reasoning_details", "codex_reasoning_items", "codex_message_items",
    "finish_reason", "reasoning",
)
#: Index of the first optional column of ``PROJECTION_COLS``.
OPTIONAL_FROM = 6
#: The optional columns a replayed message carries whenever they are not NULL (even empty:
#: ``reasoning_content=''`` is kept, ``tool_calls=''`` replays as ``[]``); the others are
#: carried only when truthy.
NONE_TESTED = frozenset({"tool_calls", "reasoning_content", "reasoning_details",
                         "codex_reasoning_items", "codex_message_items"})
#: Session ids per statement (SQLite's historical 999-variable limit, with headroom).
IN_CHUNK = 900
#: Row filters: every row, active rows, active or compacted rows (the names ``which`` takes).
FILTERS = ("all", "active", "compacted")


def _filter(which: str) -> list[Any]:
    # The statement's own constants inline (the partial active-rows index matches them).
    if which == "all":
        return []
    if which == "active":
        return [m.c.active == const(1)]
    if which == "compacted":
        return [sa.or_(m.c.active == const(1), m.c.compacted == const(1))]
    raise KeyError(which)


def _in_ids() -> Any:
    # An expanding list: one compilation per filter, n placeholders spliced per length.
    return m.c.session_id.in_(sa.bindparam("ids", expanding=True))


@lru_cache(maxsize=None)
def _rows(which: str) -> DriverPrepared:
    return DriverPrepared(f"ProjectionStatements.rows[{which}]", lambda: sa.select(
        *[m.c[c] for c in PROJECTION_COLS]).where(_in_ids(), *_filter(which)).order_by(m.c.id))


@lru_cache(maxsize=None)
def _count(which: str) -> DriverPrepared:
    return DriverPrepared(f"ProjectionStatements.count[{which}]", lambda: sa.select(
        sa.func.count()).select_from(m).where(_in_ids(), *_filter(which)))


class ProjectionStatements(Statements):
    """The projection statements of one dialect (Core constructs, compiled on first use;
    callers pass positional tuples: the parent's id, or the ``n`` session ids)."""

    #: One parent link (the conversation-root walk).
    PARENT = driver_statement(lambda d: sa.select(sessions.c.parent_session_id).where(
        sessions.c.id == bp("id")), "id")

    def rows(self, n: int, which: str) -> str:
        """``PROJECTION_COLS`` of the rows of ``n`` bound session ids under filter ``which``."""
        return _rows(which).expanded_sql(self.dialect, ("ids",), n)

    def count(self, n: int, which: str) -> str:
        """How many rows ``rows(n, which)`` returns."""
        return _count(which).expanded_sql(self.dialect, ("ids",), n)


#: The ProjectionStatements of a dialect (built once per process).
for_dialect = ProjectionStatements.for_dialect
