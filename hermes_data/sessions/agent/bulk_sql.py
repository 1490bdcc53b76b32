"""Statements of the agent turn API's listing and bulk helpers
(docs/sessions-agent.md §3.11): counts by source, lifecycle statuses, cron job runs."""

from __future__ import annotations

from functools import lru_cache

import sqlalchemy as sa
from sqlalchemy import text
from sqlalchemy.sql.elements import TextClause

from hermes_data.sessions.schema import sessions
from hermes_data.sessions.sql.constructs import bp
from hermes_data.sessions.sql.core import SESSION_ROW_COLS
from hermes_data.sessions.sql.dialect import Statements, value_rows
from hermes_data.sessions.sql.predicates import last_active, preview_sql
from hermes_data.statements import DriverPrepared

#: Ids per lifecycle-status statement.
STATUS_CHUNK = 900


def count_by_source(where: str) -> TextClause:
    """Sessions per source (blank or NULL counted as ``cli``) under a listing WHERE over ``s``."""
    src = "COALESCE(NULLIF(s.source, ''), 'cli')"
    return text(f"SELECT {src} AS src, COUNT(*) AS n FROM sessions s WHERE {where} "
                f"GROUP BY {src} ORDER BY n DESC, src")


class BulkStatements(Statements):
    """The listing/bulk statements of one dialect."""

    def __init__(self, d: str) -> None:
        super().__init__(d)
        pg = d == "postgresql"
        cols = ", ".join("s." + c for c in SESSION_ROW_COLS)
        ident = 's.id COLLATE "C"' if pg else "s.id"
        suffix = "substr(s.id, ?) ~ '^[0-9_]+$'" if pg else \
            "substr(s.id, ?) <> '' AND substr(s.id, ?) NOT GLOB '*[^0-9_]*'"
        #: Runs of one cron job (binary id range, digits-and-underscores suffix), newest first.
        self.CRON_RUNS = self.render((
            f"SELECT {cols}, COALESCE(sp.prompt, s.system_prompt), {preview_sql('s', d)}, "
            f"{last_active('s')} FROM sessions s LEFT JOIN system_prompts sp "
            f"ON sp.hash = s.system_prompt_hash WHERE s.source = 'cron' AND {ident} >= ? "
            f"AND {ident} < ? AND {suffix} "
            "ORDER BY s.started_at DESC, s.id DESC LIMIT ? OFFSET ?"))
        #: Whether the suffix test binds its start position once (PostgreSQL) or twice.
        self.CRON_SUFFIX_BINDS = 1 if pg else 2
        if pg:
            #: Newest active row of each id (role, tool_calls, finish_reason).
            self.LAST_ACTIVE_ROWS = self.render((
                "SELECT i.sid, m.role, m.tool_calls, m.finish_reason FROM "
                "unnest(CAST(? AS text[])) AS i(sid) JOIN LATERAL (SELECT role, tool_calls, "
                "finish_reason FROM messages WHERE session_id = i.sid AND active = 1 "
                "ORDER BY id DESC LIMIT 1) m ON true"))

    def existing_ids(self, n: int) -> str:
        """Which of ``n`` bound ids are sessions."""
        return _existing_ids(n).for_dialect(self.dialect).sql

    def last_active_rows(self, n: int) -> str:
        """SQLite: newest active row of each of ``n`` bound ids (a bounded seek per id)."""
        values = value_rows(n, 1)
        return (f"WITH ids(sid) AS (VALUES {values}), last AS (SELECT sid, (SELECT m.id FROM "
                "messages m WHERE m.session_id = ids.sid AND m.active = 1 ORDER BY m.id DESC "
                "LIMIT 1) AS mid FROM ids) SELECT last.sid, m.role, m.tool_calls, "
                "m.finish_reason FROM last JOIN messages m ON m.id = last.mid")


@lru_cache(maxsize=64)
def _existing_ids(n: int) -> DriverPrepared:
    return DriverPrepared("existing_ids", lambda: sa.select(sessions.c.id).where(
        sessions.c.id.in_([bp(f"i{i}") for i in range(n)])))


#: The BulkStatements of a dialect (built once per process).
for_dialect = BulkStatements.for_dialect
