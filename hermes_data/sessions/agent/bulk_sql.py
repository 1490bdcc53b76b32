"""Statements of the agent turn API's listing and bulk helpers
(docs/sessions-agent.md §3.11): counts by source, lifecycle statuses, cron job runs."""

from __future__ import annotations

from functools import cached_property, lru_cache
from typing import Any

import sqlalchemy as sa
from sqlalchemy import text
from sqlalchemy.sql.elements import TextClause

from hermes_data.sessions.schema import messages, sessions, system_prompts
from hermes_data.sessions.sql.constructs import bp, const
from hermes_data.sessions.sql.core import SESSION_ROW_COLS
from hermes_data.sessions.sql.dialect import Statements
from hermes_data.sessions.sql.predicates import last_active_of, preview_of
from hermes_data.statements import DriverPrepared

#: Ids per lifecycle-status statement.
STATUS_CHUNK = 900


def count_by_source(where: str) -> TextClause:
    """Sessions per source (blank or NULL counted as ``cli``) under a listing WHERE over ``s``."""
    src = "COALESCE(NULLIF(s.source, ''), 'cli')"
    # not Core: spliced with SessionFilter.where()'s text, which the recursive sidebar CTE
    # (list_ids, raw by rule) shares; converts together with that filter.
    return text(f"SELECT {src} AS src, COUNT(*) AS n FROM sessions s WHERE {where} "
                f"GROUP BY {src} ORDER BY n DESC, src")


class BulkStatements(Statements):
    """The listing/bulk statements of one dialect."""

    def __init__(self, d: str) -> None:
        super().__init__(d)
        pg = d == "postgresql"
        #: Whether the suffix test binds its start position once (PostgreSQL) or twice.
        self.CRON_SUFFIX_BINDS = 1 if pg else 2
        if pg:
            #: Newest active row of each id (role, tool_calls, finish_reason).
            # not Core: one array bind unnested with a column alias (unnest(...) AS i(sid))
            # under JOIN LATERAL; kept as the measured PostgreSQL form.
            self.LAST_ACTIVE_ROWS = self.render((
                "SELECT i.sid, m.role, m.tool_calls, m.finish_reason FROM "
                "unnest(CAST(? AS text[])) AS i(sid) JOIN LATERAL (SELECT role, tool_calls, "
                "finish_reason FROM messages WHERE session_id = i.sid AND active = 1 "
                "ORDER BY id DESC LIMIT 1) m ON true"))

    @cached_property
    def CRON_RUNS(self) -> str:
        """Runs of one cron job (binary id range, digits-and-underscores suffix), newest
        first: binds lo, hi, the suffix start (:attr:`CRON_SUFFIX_BINDS` times), limit,
        offset. Compiled on first use."""
        starts = ("start",) if self.dialect == "postgresql" else ("start", "start_again")
        return _CRON_RUNS.positional_sql(self.dialect, ("lo", "hi", *starts, "limit", "offset"))

    def existing_ids(self, n: int) -> str:
        """Which of ``n`` bound ids are sessions."""
        return _existing_ids(n).for_dialect(self.dialect).sql

    def last_active_rows(self, n: int) -> str:
        """SQLite: newest active row of each of ``n`` bound ids (a bounded seek per id)."""
        return _last_active_rows(n).positional_sql(self.dialect,
                                                   tuple(f"i{i}" for i in range(n)))


def _cron_runs(d: str) -> sa.Select:
    """The cron runs' statement on ``d``: the id range compared bytewise (``COLLATE "C"`` on
    PostgreSQL), the suffix after the job prefix digits and underscores only."""
    s = sessions.alias("s")
    sp = system_prompts.alias("sp")
    pg = d == "postgresql"
    ident = s.c.id.collate("C") if pg else s.c.id
    if pg:
        suffix: Any = sa.func.substr(s.c.id, bp("start")).op("~")(const("^[0-9_]+$"))
    else:
        suffix = sa.and_(sa.func.substr(s.c.id, bp("start")) != const(""),
                         sa.not_(sa.func.substr(s.c.id, bp("start_again"))
                                 .op("GLOB")(const("*[^0-9_]*"))))
    return (sa.select(*(s.c[c] for c in SESSION_ROW_COLS),
                      sa.func.coalesce(sp.c.prompt, s.c.system_prompt), preview_of(s, d),
                      last_active_of(s))
            .select_from(s.outerjoin(sp, sp.c.hash == s.c.system_prompt_hash))
            .where(s.c.source == const("cron"), ident >= bp("lo"), ident < bp("hi"), suffix)
            .order_by(s.c.started_at.desc(), s.c.id.desc())
            .limit(bp("limit")).offset(bp("offset")))


_CRON_RUNS = DriverPrepared.per_dialect("cron_runs", _cron_runs)


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
