"""Statements of the agent turn API's conversation projections
(docs/sessions-agent.md §3.5): transcript rows of a set of sessions in id order, and the resume count."""

from __future__ import annotations

from functools import lru_cache

from hermes_data.sessions.sql.dialect import Statements, marks


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
#: Row filters: every row, active rows, active or compacted rows.
FILTERS = {"all": "", "active": " AND active = 1", "compacted": " AND (active = 1 OR compacted = 1)"}


class ProjectionStatements(Statements):
    """The projection statements of one dialect."""

    def __init__(self, d: str) -> None:
        super().__init__(d)
        #: One parent link (the conversation-root walk).
        self.PARENT = self.render("SELECT parent_session_id FROM sessions WHERE id = ?")

    @lru_cache(maxsize=256)
    def rows(self, n: int, which: str) -> str:
        """``PROJECTION_COLS`` of the rows of ``n`` bound session ids under filter ``which``."""
        return self.render(f"SELECT {', '.join(PROJECTION_COLS)} FROM messages "
                           f"WHERE session_id IN ({marks(n)}){FILTERS[which]} ORDER BY id")

    @lru_cache(maxsize=256)
    def count(self, n: int, which: str) -> str:
        """How many rows ``rows(n, which)`` returns."""
        return self.render("SELECT COUNT(*) FROM messages "
                           f"WHERE session_id IN ({marks(n)}){FILTERS[which]}")


#: The ProjectionStatements of a dialect (built once per process).
for_dialect = ProjectionStatements.for_dialect
