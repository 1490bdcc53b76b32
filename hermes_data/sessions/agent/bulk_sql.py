"""Statements of the agent turn API's listing and bulk helpers
(docs/sessions-agent.md §3.11): counts by source, lifecycle statuses, cron job runs."""

from __future__ import annotations

from functools import lru_cache

import sqlalchemy as sa
from sqlalchemy import text
from sqlalchemy.sql.elements import TextClause

from hermes_data.sessions.schema import messages, sessions
from hermes_data.sessions.sql.constructs import bp, const
from hermes_data.sessions.sql.core import SESSION_ROW_COLS
from hermes_data.sessions.sql.dialect import Statements
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
        return _last_active_rows(n).positional_sql(self.dialect,
                                                   tuple(f"i{i}" for i in range(n)))


@lru_cache(maxsize=64)
def _existing_ids(n: int) -> DriverPrepared:
    return DriverPrepared("existing_ids", lambda: sa.select(sessions.c.id).where(
        sessions.c.id.in_([bp(f"i{i}") for i in range(n)])))


@lru_cache(maxsize=64)
def _last_active_rows(n: int) -> DriverPrepared:
    """``WITH ids(sid) AS (VALUES …), last AS (…)``: per id one bounded seek for its newest
    active row (a correlated ``LIMIT 1``), then that row's columns."""
    def build() -> sa.Select:
        ids = sa.values(sa.column("sid"), name="ids").data(
            [(bp(f"i{i}"),) for i in range(n)]).cte("ids")
        seek = messages.alias("lm")
        newest = (sa.select(seek.c.id).where(seek.c.session_id == ids.c.sid,
                                               seek.c.active == const(1))
                  .order_by(seek.c.id.desc()).limit(const(1)).scalar_subquery())
        last = sa.select(ids.c.sid, newest.label("mid")).cte("last")
        m = messages.alias("m")
        return (sa.select(last.c.sid, m.c.role, m.c.tool_calls, m.c.finish_reason)
                .select_from(last.join(m, m.c.id == last.c.mid)))
    return DriverPrepared("last_active_rows", build)


#: The BulkStatements of a dialect (built once per process).
for_dialect = BulkStatements.for_dialect
