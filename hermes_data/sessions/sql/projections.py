"""Statements of the agent turn API's conversation projections (spec sessions-ext-agent.md
§3.5): transcript rows of a set of sessions in id order, and the resume count."""

from __future__ import annotations

from functools import lru_cache

from .core import MESSAGE_COLS

#: Session ids per statement (SQLite's historical 999-variable limit, with headroom).
IN_CHUNK = 900
#: Row filters: every row, active rows, active or compacted rows.
FILTERS = {"all": "", "active": " AND active = 1", "compacted": " AND (active = 1 OR compacted = 1)"}


def _render(d: str, statement: str) -> str:
    return statement.replace("%", "%%").replace("?", "%s") if d == "postgresql" else statement


class ProjectionStatements:
    """The projection statements of one dialect."""

    def __init__(self, d: str) -> None:
        self.dialect = d
        #: One parent link (the conversation-root walk).
        self.PARENT = _render(d, "SELECT parent_session_id FROM sessions WHERE id = ?")

    @lru_cache(maxsize=256)
    def rows(self, n: int, which: str) -> str:
        """``MESSAGE_COLS`` of the rows of ``n`` bound session ids under filter ``which``."""
        marks = ", ".join("?" * n)
        return _render(self.dialect, f"SELECT {', '.join(MESSAGE_COLS)} FROM messages "
                                     f"WHERE session_id IN ({marks}){FILTERS[which]} ORDER BY id")

    @lru_cache(maxsize=256)
    def count(self, n: int, which: str) -> str:
        """How many rows ``rows(n, which)`` returns."""
        marks = ", ".join("?" * n)
        return _render(self.dialect, "SELECT COUNT(*) FROM messages "
                                     f"WHERE session_id IN ({marks}){FILTERS[which]}")


@lru_cache(maxsize=None)
def for_dialect(d: str) -> ProjectionStatements:
    """The projection statements of ``d`` (built once per process)."""
    return ProjectionStatements(d)
