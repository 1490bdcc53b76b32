"""Statements of the agent turn API's accounting (docs/sessions-agent.md §3.2–§3.4):
the session summary counters, ``session_model_usage`` upserts, the dominant route and the
store-wide totals.

Core constructs compiled once per dialect (``driver_statement``), run as driver strings with
positional values. A value that may be NULL and is tested with ``IS NULL`` is cast, so
PostgreSQL can type it.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from hermes_data.sessions.schema import messages, session_model_usage
from hermes_data.sessions.schema import sessions as s
from hermes_data.sessions.sql.constructs import bp, const, dialect_insert
from hermes_data.sessions.sql.dialect import Statements, driver_statement


#: The counters of one token delta (``update_token_counts`` keywords), summed by coalescing.
COUNTERS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
            "reasoning_tokens", "api_call_count")
#: The five token counters (the seed and dominant-route token sum).
TOKEN_COUNTERS = COUNTERS[:5]
#: The route / task key of ``session_model_usage``.
USAGE_KEY = ("session_id", "model", "billing_provider", "billing_base_url", "billing_mode",
             "task")
USAGE_COLS = (*USAGE_KEY, *COUNTERS[5:], *COUNTERS[:5], "estimated_cost_usd",
              "actual_cost_usd", "cost_status", "cost_source", "first_seen", "last_seen")


_BY_ID = s.c.id == bp("id")
#: ``CAST(? AS <real>)``: SQLite's REAL, PostgreSQL's DOUBLE PRECISION (typing a NULL-able
#: bound value for an ``IS NULL`` test).
_REAL: Any = sa.REAL().with_variant(sa.DOUBLE_PRECISION(), "postgresql")
_ROUTE = ("model", "billing_provider", "billing_base_url", "billing_mode")


def _route(*extra: str, lock: bool = False) -> Any:
    def build(d: str) -> sa.Select:
        stmt = sa.select(*[s.c[c] for c in (*_ROUTE, *extra)]).where(_BY_ID)
        return stmt.with_for_update() if lock else stmt
    return driver_statement(build, "id")


def _tail() -> list[tuple[Any, Any]]:
    # Cost labels when given; the route only where still unset.
    return [(s.c.cost_status, sa.func.coalesce(bp("cost_status"), s.c.cost_status)),
            (s.c.cost_source, sa.func.coalesce(bp("cost_source"), s.c.cost_source)),
            (s.c.pricing_version, sa.func.coalesce(bp("pricing_version"), s.c.pricing_version)),
            *[(s.c[c], sa.func.coalesce(s.c[c], bp(f"r_{c}")))
              for c in ("billing_provider", "billing_base_url", "billing_mode", "model")]]


_TAIL_ORDER = ("cost_status", "cost_source", "pricing_version", "r_billing_provider",
               "r_billing_base_url", "r_billing_mode", "r_model", "id")
_ZERO = const(0)


def _summary(add: bool) -> Any:
    def build(d: str) -> sa.Update:
        counters = [(s.c[c], (sa.func.coalesce(s.c[c], _ZERO) + bp(f"d_{c}")) if add
                     else bp(f"d_{c}")) for c in COUNTERS]
        est = sa.func.coalesce(bp("estimated"), _ZERO)
        actual_sum = sa.func.coalesce(s.c.actual_cost_usd, _ZERO) + bp("actual2") if add \
            else bp("actual2")
        costs = [(s.c.estimated_cost_usd,
                  sa.func.coalesce(s.c.estimated_cost_usd, _ZERO) + est if add else est),
                 (s.c.actual_cost_usd, sa.case(
                     (sa.cast(bp("actual"), _REAL).is_(None), s.c.actual_cost_usd),
                     else_=actual_sum))]
        return sa.update(s).ordered_values(*counters, *costs, *_tail()).where(_BY_ID)
    return driver_statement(build, *[f"d_{c}" for c in COUNTERS], "estimated", "actual",
                            "actual2", *_TAIL_ORDER)


def _usage_upsert(d: str) -> Any:
    insert = dialect_insert(d)
    u = session_model_usage
    stmt = insert(u).values({c: bp(f"v_{c}") for c in USAGE_COLS})
    x = stmt.excluded
    set_: dict[str, Any] = {c: u.c[c] + x[c]
                            for c in (*COUNTERS, "estimated_cost_usd", "actual_cost_usd")}
    set_.update(cost_status=sa.func.coalesce(x.cost_status, u.c.cost_status),
                cost_source=sa.func.coalesce(x.cost_source, u.c.cost_source),
                last_seen=x.last_seen)
    return stmt.on_conflict_do_update(index_elements=[u.c[c] for c in USAGE_KEY], set_=set_)


def _totals(unarchived: bool) -> Any:
    def build(d: str) -> sa.Select:
        tokens = sa.func.coalesce(s.c.input_tokens, _ZERO) + sa.func.coalesce(s.c.output_tokens,
                                                                              _ZERO)
        cost = sa.func.coalesce(s.c.actual_cost_usd, s.c.estimated_cost_usd, _ZERO)
        conds = [s.c.parent_session_id.is_(None),
                 sa.func.coalesce(s.c.message_count, _ZERO) >= bp("min_messages")]
        if unarchived:
            conds.append(sa.func.coalesce(s.c.archived, _ZERO) == _ZERO)
        return sa.select(sa.func.coalesce(sa.func.sum(tokens), _ZERO),
                         sa.func.coalesce(sa.func.sum(cost), _ZERO)).where(*conds)
    return driver_statement(build, "min_messages")


def _dominant_route(d: str) -> sa.Select:
    u = session_model_usage
    tokens = sa.Grouping(sum((u.c[c] for c in TOKEN_COUNTERS[1:]), start=u.c[TOKEN_COUNTERS[0]]))
    return (sa.select(*[u.c[c] for c in (*_ROUTE, "api_call_count")])
            .where(u.c.session_id == bp("sid"), u.c.task == const(""),
                   u.c.model != const("unknown"), u.c.billing_provider != const(""))
            .order_by(u.c.api_call_count.desc(), tokens.desc(),
                      sa.func.coalesce(u.c.last_seen, _ZERO).desc(),
                      *[u.c[c] for c in _ROUTE]).limit(const(1)))


class AccountingStatements(Statements):
    """The accounting statements of one dialect (Core constructs over ``sessions`` and
    ``session_model_usage``, compiled on first use; callers pass positional tuples in each
    statement's declared order)."""

    #: The route columns of one session (read-modify-write: locked on PostgreSQL).
    ROUTE_FOR_UPDATE = _route("api_call_count", lock=True)
    #: The route columns, after the summary update (what a usage row falls back to).
    ROUTE = _route()
    #: Stamp the route that served the first accounted call.
    SET_FIRST_ROUTE = driver_statement(lambda d: sa.update(s).ordered_values(
        *[(s.c[c], bp(f"r_{c}")) for c in _ROUTE]).where(_BY_ID),
        *[f"r_{c}" for c in _ROUTE], "id")
    #: Incremental summary: counters add (legacy NULL cells count as 0), costs add.
    SUMMARY_ADD = _summary(add=True)
    #: Absolute summary: counters set; an absolute write without estimate resets it.
    SUMMARY_SET = _summary(add=False)
    #: Add one delta to its (session, route, task) usage row.
    USAGE_UPSERT = driver_statement(_usage_upsert, *[f"v_{c}" for c in USAGE_COLS])
    #: The main-loop route that served most calls (then tokens, recency, route order).
    DOMINANT_ROUTE = driver_statement(_dominant_route, "sid")
    #: Store-wide totals over root sessions (archived ones included).
    USAGE_TOTALS_ALL = _totals(unarchived=False)
    #: Store-wide totals over unarchived root sessions.
    USAGE_TOTALS = _totals(unarchived=True)
    #: ``unknown`` takes a real source while the session has no message rows.
    UPGRADE_UNKNOWN_SOURCE = driver_statement(lambda d: sa.update(s).values(
        source=bp("source")).where(
        _BY_ID, s.c.source == const("unknown"),
        ~sa.select(const(1)).where(messages.c.session_id == bp("sid")).exists()),
        "source", "id", "sid")
    #: Usage rows of one session (tests, exports).
    USAGE_OF = driver_statement(lambda d: sa.select(
        *[session_model_usage.c[c] for c in USAGE_COLS]).where(
        session_model_usage.c.session_id == bp("sid")).order_by(
        *[session_model_usage.c[c] for c in ("task", *_ROUTE)]), "sid")


#: The AccountingStatements of a dialect (built once per process).
for_dialect = AccountingStatements.for_dialect
