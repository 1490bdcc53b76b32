"""Statements of the agent turn API's listing and bulk helpers
(docs/sessions-agent.md §3.11): counts by source, lifecycle statuses, cron job runs."""

from __future__ import annotations

from functools import cached_property, lru_cache
from typing import Any

import sqlalchemy as sa

from hermes_data.sessions.core.listing_sql import FilterShape
from hermes_data.sessions.schema import messages, sessions, system_prompts
from hermes_data.sessions.sql.constructs import bp, const
from hermes_data.sessions.sql.core import SESSION_ROW_COLS
from hermes_data.sessions.sql.dialect import Statements, driver_statement
from hermes_data.sessions.sql.predicates import last_active_of, preview_of
from hermes_data.statements import DriverPrepared

#: Ids per lifecycle-status statement.
STATUS_CHUNK = 900


@lru_cache(maxsize=64)
def count_by_source(shape: FilterShape) -> DriverPrepared:
    """Sessions per source (blank or NULL counted as ``cli``) under a listing filter over
    ``s``, most first."""
    def build() -> sa.Select:
        s = sessions.alias("s")
        src = sa.func.coalesce(sa.func.nullif(s.c.source, const("")), const("cli")).label("src")
        n = sa.func.count().label("n")
        return (sa.select(src, n).where(*shape.conditions(s)).group_by(src)
                .order_by(n.desc(), src))
    return DriverPrepared("count_by_source", build)


class BulkStatements(Statements):
    """The listing/bulk statements of one dialect."""

    def __init__(self, d: str) -> None:
        super().__init__(d)
        pg = d == "postgresql"
        #: Whether the suffix test binds its start position once (PostgreSQL) or twice.
        self.CRON_SUFFIX_BINDS = 1 if pg else 2

    #: PostgreSQL: the newest active row of each id of one array bind (role, tool_calls,
    #: finish_reason), a LATERAL seek per id.
    LAST_ACTIVE_ROWS = driver_statement(lambda d: _last_active_rows_pg(), "ids")

    @cached_property
    def CRON_RUNS(self) -> str:
        """Runs of one cron job (binary id range, digits-and-underscores suffix), newest
        first: binds lo, hi, the suffix start (:attr:`CRON_SUFFIX_BINDS` times), limit,
        offset. Compiled on first use."""
        starts = ("start",) if self.dialect == "postgresql" else ("start", "start_again")
        return _CRON_RUNS.positional_sql(self.dialect, ("lo", "hi", *starts, "limit", "offset"))

    def existing_ids(self, n: int) -> str:
        """Which of ``n`` bound ids are sessions."""
        return _EXISTING_IDS.expanded_sql(self.dialect, ("ids",), n)

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


def _last_active_rows_pg() -> sa.Select:
    """``unnest(CAST(%s AS TEXT[])) AS i(sid) JOIN LATERAL (newest active row of sid) m``."""
    i = sa.func.unnest(sa.cast(bp("ids"), sa.ARRAY(sa.Text()))).table_valued("sid") \
        .render_derived(name="i")
    newest = (sa.select(messages.c.role, messages.c.tool_calls, messages.c.finish_reason)
              .where(messages.c.session_id == i.c.sid, messages.c.active == const(1))
              .order_by(messages.c.id.desc()).limit(const(1)).lateral("m"))
    return (sa.select(i.c.sid, newest.c.role, newest.c.tool_calls, newest.c.finish_reason)
            .select_from(i.join(newest, sa.true())))


#: The ids among a list that exist (the list spread per call: Prepared.expanded_sql).
_EXISTING_IDS = DriverPrepared("existing_ids", lambda: sa.select(sessions.c.id).where(
    sessions.c.id.in_(sa.bindparam("ids", expanding=True))))


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
