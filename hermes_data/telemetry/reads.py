"""Read API of the telemetry store: typed rows, exact windows, index-friendly SQL.

The first argument is a :class:`~hermes_data.telemetry.store.TelemetryStore` (statements
compiled once, run on this thread's held connection) or a SQLAlchemy ``Connection`` /
``Engine``.

Both backends
    Every function runs unchanged on SQLite and PostgreSQL and returns the same Python
    values: integer sums and averages are cast back from PostgreSQL's ``numeric``
    (:mod:`.sql`'s ``int_sum`` / ``float_avg`` / ``round6``), timestamps stay canonical TEXT
    on both (compared as text; PostgreSQL databases use a byte-order collation such as
    ``C.UTF-8`` for that order to equal SQLite's).

Windows (docs/telemetry.md §8.1)
    A window of N hours means rows with timestamp ``>= now − N h``. The cutoff is computed
    in Python and bound as text in the canonical stored form (``datetime.isoformat()`` of a
    UTC datetime), so the comparison is exact — upstream compared against SQLite's
    ``datetime('now', …)`` (space separator) and silently admitted the cutoff's whole day —
    and it still runs on ``idx_llm_ts`` / ``idx_runs_started``. ``date_from`` / ``date_to``
    (a ``date``, an aware ``datetime`` or stored-form text) take precedence over
    ``window_hours``; ``date_to`` is exclusive and honoured even without ``date_from``.
"""

from __future__ import annotations

import json
from datetime import date, datetime, time, timedelta, timezone
from typing import Iterable

import sqlalchemy as sa
from sqlalchemy import bindparam as bp, func

from hermes_data.errors import ConfigurationError
from hermes_data.telemetry import sql as fragments
from hermes_data.telemetry.schema import (
    endpoint_payload_cache, free_paid_transitions, known_free_models, llm_call_errors,
    llm_calls, model_efficiency_cache, model_unavailable_alerts, pricing_snapshots, runs,
    subagent_edges,
)
from hermes_data.telemetry.keys import efficiency_cache_key
from hermes_data.statements import Prepared
from hermes_data.telemetry.store import Target, TelemetryStore, read_tx
from hermes_data.telemetry.types import (
    CachedPayload, DailySpend, DelegationJoin, DelegationLink, EfficiencyRun,
    FreePaidTransition, JobCost, LlmCallError, ModelStats, ModelUnavailable, PricingSnapshot,
    ProviderStats, RunRow, ScopeSpend, StatsSummary, SubagentEdge, ToolUsage, TurnAggregate,
    UnattributedChildCost,
)

#: Upper bound used when a window has no end: sorts after every stored timestamp.
OPEN_END = "9999-12-31T23:59:59.999999+00:00"
#: Window of the reporting reads when none is given (upstream default).
DEFAULT_WINDOW_HOURS = 24
#: Scopes accepted by the spend reads.
SCOPES = ("global", "cron_job", "sender", "profile")


# --------------------------------------------------------------------------- windows
def iso_utc(value: datetime) -> str:
    """Canonical stored form of an aware datetime."""
    if value.tzinfo is None:
        raise ValueError(f"naive datetime {value!r}: pass an aware datetime (UTC)")
    return value.astimezone(timezone.utc).isoformat()


def _bound(value: date | datetime | str) -> str:
    if isinstance(value, datetime):
        return iso_utc(value)
    if isinstance(value, date):
        return value.isoformat()  # 'YYYY-MM-DD' sorts before every time of that day
    return str(value)


def window_bounds(window_hours: float | None = None, *, date_from: date | datetime | str | None = None,
                  date_to: date | datetime | str | None = None, now: datetime | None = None,
                  default_hours: float = DEFAULT_WINDOW_HOURS) -> tuple[str, str]:
    """``(since, until)`` in stored form: rows match ``since <= ts < until``.

    ``window_hours <= 0`` means no lower bound.
    """
    if date_from is not None or date_to is not None:
        since = _bound(date_from) if date_from is not None else ""
        until = _bound(date_to) if date_to is not None else OPEN_END
        return since, until
    hours = default_hours if window_hours is None else window_hours
    if hours <= 0:
        return "", OPEN_END
    now = now or datetime.now(timezone.utc)
    return iso_utc(now - timedelta(hours=hours)), OPEN_END


def _all(target: Target, p: Prepared, params: dict = {}) -> list:
    """Rows of one statement; on a store straight on this thread's connection (no context
    managers, no transaction: a single SELECT is its own snapshot)."""
    if type(target) is TelemetryStore:
        return target.connection().execute(p.sql, p.args(params)).fetchall()
    with read_tx(target) as tx:
        return list(tx.run(p, params).fetchall())


def _one(target: Target, p: Prepared, params: dict = {}):
    if type(target) is TelemetryStore:
        return target.connection().execute(p.sql, p.args(params)).fetchone()
    with read_tx(target) as tx:
        return tx.run(p, params).fetchone()


def _since(since: datetime | str) -> str:
    return iso_utc(since) if isinstance(since, datetime) else since


def _in_window(col: sa.ColumnElement) -> sa.ColumnElement:
    return sa.and_(col >= bp("since"), col < bp("until"))


def _pct(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


# --------------------------------------------------------------------------- runs
GET_RUN = Prepared("get_run", sa.select(*runs.c).where(runs.c.session_id == bp("sid")))


def get_run(target: Target, session_id: str) -> RunRow | None:
    """The run row of ``session_id``, or None."""
    row = _one(target, GET_RUN, {"sid": session_id})
    return RunRow(*row) if row is not None else None


def _z(col: sa.ColumnElement) -> sa.ColumnElement:
    """SUM over an empty set → 0; integer sums stay integers on PostgreSQL."""
    summed = fragments.int_sum(col) if isinstance(col.type, sa.Integer) else func.sum(col)
    return func.coalesce(summed, 0)


SUMMARY_RUNS = Prepared("summary_runs", sa.select(
    func.count(),
    _z(sa.case((runs.c.status == "ok", 1), else_=0)),
    _z(sa.case((sa.and_(runs.c.status != "ok", runs.c.status != "running"), 1), else_=0)),
    _z(runs.c.tokens_in), _z(runs.c.tokens_out), fragments.round6(_z(runs.c.cost_usd)),
    fragments.float_avg(runs.c.duration_ms), _z(runs.c.tool_calls), _z(runs.c.estimated_llm_calls),
    _z(runs.c.moa_calls),
).where(_in_window(runs.c.started_at)))
SUMMARY_CALLS = Prepared("summary_calls", sa.select(
    func.count(), fragments.float_avg(llm_calls.c.latency_ms)).where(_in_window(llm_calls.c.ts)))
TOP_TOOLS = Prepared("top_tools", fragments.TOP_TOOLS, fragments.PG_TOP_TOOLS)


def stats_summary(target: Target, window_hours: float | None = None, *,
                  date_from: date | datetime | str | None = None,
                  date_to: date | datetime | str | None = None,
                  now: datetime | None = None, top_n: int = 10) -> StatsSummary:
    """Headline numbers of ``/stats``: runs started in the window (counts, tokens, cost,
    duration, tools, estimated / MoA calls), calls made in it (count, latency) and the top
    tools of those runs — all from one read snapshot, each query on its time index."""
    since, until = window_bounds(window_hours, date_from=date_from, date_to=date_to, now=now)
    params = {"since": since, "until": until}
    with read_tx(target, snapshot=True) as tx:
        r = tx.run(SUMMARY_RUNS, params).fetchone()
        c = tx.run(SUMMARY_CALLS, params).fetchone()
        tools = tx.run(TOP_TOOLS, {**params, "limit": top_n}).fetchall()
    return StatsSummary(
        total_runs=r[0], ok_runs=r[1], failed_runs=r[2], tokens_in=r[3], tokens_out=r[4],
        cost_usd=float(r[5]), avg_duration_ms=r[6], tool_calls=r[7], estimated_llm_calls=r[8],
        moa_calls=r[9], api_calls=c[0], avg_latency_ms=c[1],
        top_tools=tuple(ToolUsage(*t) for t in tools), since=since or None,
        until=None if until == OPEN_END else until, window_hours=window_hours,
        date_from=None if date_from is None else _bound(date_from),
        date_to=None if date_to is None else _bound(date_to))


COST_BY_JOB = Prepared("cost_by_job", sa.select(
    runs.c.cron_job_id, func.count(), _z(sa.case((runs.c.status == "ok", 1), else_=0)),
    _z(sa.case((runs.c.status == "error", 1), else_=0)), _z(runs.c.tokens_in),
    _z(runs.c.tokens_out), fragments.round6(_z(runs.c.cost_usd)).label("cost"),
    fragments.float_avg(runs.c.duration_ms), func.max(runs.c.started_at),
).where(_in_window(runs.c.started_at), runs.c.cron_job_id.is_not(None))
    .group_by(runs.c.cron_job_id).order_by(sa.desc("cost"), runs.c.cron_job_id))


def cost_by_job(target: Target, window_hours: float | None = None, *,
                date_from: date | datetime | str | None = None,
                date_to: date | datetime | str | None = None,
                now: datetime | None = None) -> list[JobCost]:
    """Per cron job totals of the root runs started in the window, most expensive first
    (``failed_runs`` counts status ``error`` only; subagent children are not included)."""
    since, until = window_bounds(window_hours, date_from=date_from, date_to=date_to, now=now)
    rows = _all(target, COST_BY_JOB, {"since": since, "until": until})
    return [JobCost(r[0], r[1], r[2], r[3], r[4], r[5], float(r[6]), r[7], r[8]) for r in rows]


RECENT_RUNS = Prepared("recent_runs", sa.select(*runs.c).where(_in_window(runs.c.started_at))
                       .order_by(runs.c.started_at.desc()).limit(bp("limit")))


def recent_runs(target: Target, limit: int = 20, *, window_hours: float | None = None,
                date_from: date | datetime | str | None = None,
                date_to: date | datetime | str | None = None,
                now: datetime | None = None) -> list[RunRow]:
    """The newest ``limit`` runs started in the window, newest first."""
    since, until = window_bounds(window_hours, date_from=date_from, date_to=date_to, now=now)
    rows = _all(target, RECENT_RUNS, {"since": since, "until": until, "limit": limit})
    return [RunRow(*r) for r in rows]


_provider = func.coalesce(llm_calls.c.provider, "(unknown)")
_model = func.coalesce(llm_calls.c.model, "(unknown)")
_call_counts = (
    func.count().label("calls"), _z(sa.case((llm_calls.c.estimated == 0, 1), else_=0)),
    _z(sa.case((llm_calls.c.estimated == 1, 1), else_=0)),
    _z(sa.case((llm_calls.c.provider_assumed == 1, 1), else_=0)),
    fragments.round6(_z(llm_calls.c.cost_usd)).label("cost"),
)
BY_PROVIDER = Prepared("stats_by_provider", sa.select(_provider.label("p"), *_call_counts)
                       .where(_in_window(llm_calls.c.ts)).group_by(sa.literal_column("p"))
                       .order_by(sa.desc("cost"), sa.literal_column("p")))
BY_MODEL = Prepared("stats_by_model", sa.select(_provider.label("p"), _model.label("m"),
                                                 *_call_counts)
                    .where(_in_window(llm_calls.c.ts))
                    .group_by(sa.literal_column("p"), sa.literal_column("m"))
                    .order_by(sa.literal_column("p"), sa.desc("calls"), sa.literal_column("m")))


def stats_by_provider(target: Target, window_hours: float | None = None, *,
                      date_from: date | datetime | str | None = None,
                      date_to: date | datetime | str | None = None,
                      now: datetime | None = None) -> list[ProviderStats]:
    """Calls made in the window per provider (NULL → ``(unknown)``), most expensive first,
    with the estimated and provider-assumed shares."""
    since, until = window_bounds(window_hours, date_from=date_from, date_to=date_to, now=now)
    rows = _all(target, BY_PROVIDER, {"since": since, "until": until})
    return [ProviderStats(p, n, real, est, assumed, float(cost), _pct(est, n), _pct(assumed, n))
            for p, n, real, est, assumed, cost in rows]


def stats_by_model(target: Target, window_hours: float | None = None, *,
                   date_from: date | datetime | str | None = None,
                   date_to: date | datetime | str | None = None,
                   now: datetime | None = None) -> list[ModelStats]:
    """Calls made in the window per (provider, model), by provider then most calls."""
    since, until = window_bounds(window_hours, date_from=date_from, date_to=date_to, now=now)
    rows = _all(target, BY_MODEL, {"since": since, "until": until})
    return [ModelStats(p, m, n, real, est, assumed, float(cost), _pct(est, n), _pct(assumed, n))
            for p, m, n, real, est, assumed, cost in rows]


EFFICIENCY = Prepared("efficiency_runs", sa.select(
    runs.c.session_id, func.coalesce(runs.c.cron_job_id, ""),
    func.coalesce(runs.c.status, "running"), func.coalesce(runs.c.tokens_in, 0),
    func.coalesce(runs.c.tokens_out, 0), func.coalesce(runs.c.api_calls, 0),
    func.coalesce(runs.c.cost_usd, 0.0), runs.c.started_at,
).where(_in_window(runs.c.started_at), runs.c.status != "running")
    .order_by(runs.c.started_at.desc()).limit(bp("limit")))

_STATUS_PENALTY = {"error": 30.0, "interrupted": 10.0}


def efficiency_score(tokens_in: int, tokens_out: int, status: str, api_calls: int) -> float:
    """Upstream's 0–100 efficiency score of a run (output ratio, status, call count)."""
    ratio = min(60.0, 40.0 * tokens_out / tokens_in) if tokens_in > 0 else 0.0
    score = 40.0 + ratio - _STATUS_PENALTY.get(status, 0.0) - min(30.0, 1.5 * api_calls)
    return round(max(0.0, min(100.0, score)), 1)


def efficiency_runs(target: Target, window_hours: float | None = None, *,
                    date_from: date | datetime | str | None = None,
                    date_to: date | datetime | str | None = None,
                    now: datetime | None = None, limit: int = 100) -> list[EfficiencyRun]:
    """The newest ``limit`` finished runs of the window, scored, best score first."""
    since, until = window_bounds(window_hours, date_from=date_from, date_to=date_to, now=now)
    rows = _all(target, EFFICIENCY, {"since": since, "until": until, "limit": limit})
    out = [EfficiencyRun(sid, job, st, ti, to, calls, float(cost),
                         efficiency_score(ti, to, st, calls), started)
           for sid, job, st, ti, to, calls, cost, started in rows]
    out.sort(key=lambda e: e.efficiency_score, reverse=True)
    return out


_child, _parent = runs.alias("child"), runs.alias("parent")


def _unattributed() -> sa.Select:
    return sa.select(
        func.coalesce(func.sum(_child.c.cost_usd), 0.0), func.count(),
    ).select_from(subagent_edges.join(_child, _child.c.session_id == subagent_edges.c.child_session_id)
                  ).where(_child.c.started_at >= bp("since"),
                          ~sa.exists().where(_parent.c.session_id == subagent_edges.c.parent_session_id))


def _pg_unattributed() -> sa.Select:
    # PostgreSQL: the parent looked up by key per edge (an EXISTS whose subquery has an OFFSET
    # stays a per-row probe); as an anti-join it hashed every run (docs/telemetry.md §8.8).
    has_parent = (sa.select(sa.literal_column("1")).select_from(_parent)
                  .where(_parent.c.session_id == subagent_edges.c.parent_session_id)
                  .offset(fragments.NO_FLATTEN).exists())
    return sa.select(
        func.coalesce(func.sum(_child.c.cost_usd), 0.0), func.count(),
    ).select_from(subagent_edges.join(_child, _child.c.session_id == subagent_edges.c.child_session_id)
                  ).where(_child.c.started_at >= bp("since"), ~has_parent)


UNATTRIBUTED = Prepared("unattributed_child_cost", _unattributed(), _pg_unattributed)


def unattributed_child_cost(target: Target, since: datetime | str) -> UnattributedChildCost:
    """Cost and number of delegation edges whose child started at/after ``since`` but whose
    parent has no run row — spend a cron subtree cannot attribute."""
    cost, edges = _one(target, UNATTRIBUTED, {"since": _since(since)})
    return UnattributedChildCost(float(cost), edges)


# --------------------------------------------------------------------------- budget
_spend_cols = (func.coalesce(func.sum(runs.c.cost_usd), 0.0),
               _z(runs.c.estimated_llm_calls), _z(runs.c.api_calls))
_SCOPE_FILTER = {"sender": runs.c.sender_id, "profile": runs.c.profile}
SPEND = {
    "global": Prepared("spend_global", sa.select(*_spend_cols)
                       .where(runs.c.started_at >= bp("since"))),
    **{scope: Prepared(f"spend_{scope}", sa.select(*_spend_cols).where(
        runs.c.started_at >= bp("since"), col == bp("scope_id")))
       for scope, col in _SCOPE_FILTER.items()},
    "cron_job": Prepared("spend_cron_job", fragments.SPEND_CRON_JOB, fragments.PG_SPEND_CRON_JOB),
}


def _check_scope(scope: str) -> None:
    if scope not in SCOPES:
        raise ConfigurationError(f"unknown budget scope {scope!r}; expected one of {', '.join(SCOPES)}")


def spend_by_scope(target: Target, scope: str, scope_id: str | None,
                   since: datetime | str) -> ScopeSpend:
    """Spend of a budget scope over runs started at/after ``since``.

    ``global``: every run once. ``sender`` / ``profile``: runs carrying that id (NULL never
    matches). ``cron_job``: the job's runs *and all their delegated descendants* (recursive
    CTE over ``subagent_edges``, :data:`hermes_data.telemetry.sql.CRON_SUBTREE_CTE`).
    """
    _check_scope(scope)
    spent, est, total = _one(target, SPEND[scope], {"since": _since(since),
                                                    "scope_id": scope_id or ""})
    return ScopeSpend(float(spent), est, total, _pct(est, total))


_day = func.substr(runs.c.started_at, 1, 10).label("day")
_daily = sa.select(_day, func.coalesce(func.sum(runs.c.cost_usd), 0.0))
DAILY = {
    "global": Prepared("daily_global", _daily.where(runs.c.started_at >= bp("since"))
                       .group_by(sa.literal_column("day"))),
    **{scope: Prepared(f"daily_{scope}", _daily.where(runs.c.started_at >= bp("since"),
                                                       col == bp("scope_id"))
                       .group_by(sa.literal_column("day")))
       for scope, col in _SCOPE_FILTER.items()},
    "cron_job": Prepared("daily_cron_job", fragments.DAILY_SPEND_CRON_JOB,
                         fragments.PG_DAILY_SPEND_CRON_JOB),
}


def daily_spend_series(target: Target, scope: str, scope_id: str | None, days: int,
                       now: datetime | None = None) -> list[DailySpend]:
    """``days`` UTC days of spend for a scope, oldest first, zero-filled.

    The series starts at UTC midnight of ``now − (days − 1)``. Every scope is honoured,
    including ``profile`` (upstream silently used the global series) and ``cron_job``, which
    covers the job's delegated descendants exactly like :func:`spend_by_scope`.
    """
    _check_scope(scope)
    if days <= 0:
        return []
    now = (now or datetime.now(timezone.utc)).astimezone(timezone.utc)
    first = (now - timedelta(days=days - 1)).date()
    start = datetime.combine(first, time(0, tzinfo=timezone.utc))
    rows = _all(target, DAILY[scope], {"since": iso_utc(start), "scope_id": scope_id or ""})
    by_day = {day: float(cost) for day, cost in rows}
    series = []
    for i in range(days):
        day = (first + timedelta(days=i)).isoformat()
        series.append(DailySpend(day, by_day.get(day, 0.0)))
    return series


_share_cols = (func.count(), _z(sa.case(
    (fragments.in_json_array(llm_calls.c.model, bp("models")), 1), else_=0)))
_share_from = runs.join(llm_calls, llm_calls.c.session_id == runs.c.session_id)


def _pg_share(*scope: sa.ColumnElement) -> sa.Select:
    # PostgreSQL: each run's calls through idx_llm_session, pinned by a LATERAL subquery the
    # planner cannot flatten (OFFSET 0); as a join it hashed all of llm_calls for a day's runs
    # (docs/telemetry.md §8.8). Same rows, same aggregates.
    calls = (sa.select(llm_calls.c.model).where(llm_calls.c.session_id == runs.c.session_id)
             .offset(fragments.NO_FLATTEN).lateral("lc"))
    return (sa.select(func.count(), _z(sa.case(
        (fragments.in_json_array(calls.c.model, bp("models")), 1), else_=0)))
        .select_from(runs.join(calls, sa.true()))
        .where(runs.c.started_at >= bp("since"), *scope))


SHARE = {
    "global": Prepared("share_global", sa.select(*_share_cols).select_from(_share_from)
                       .where(runs.c.started_at >= bp("since")), _pg_share),
    **{scope: Prepared(f"share_{scope}", sa.select(*_share_cols).select_from(_share_from)
                       .where(runs.c.started_at >= bp("since"), col == bp("scope_id")),
                       lambda col=col: _pg_share(col == bp("scope_id")))
       for scope, col in _SCOPE_FILTER.items()},
    "cron_job": Prepared("share_cron_job", fragments.ESTIMATED_SHARE_CRON_JOB,
                         fragments.PG_ESTIMATED_SHARE_CRON_JOB),
}


def estimated_price_share(target: Target, scope: str, scope_id: str | None,
                          since: datetime | str, estimated_models: Iterable[str]) -> float:
    """Fraction (0..1) of the scope's calls (runs started at/after ``since``) whose model is
    priced by estimate (``_meta.estimated_price_models`` of ``pricing.yaml``, passed in by
    the caller). The model list is bound as one JSON parameter, never spliced into SQL."""
    _check_scope(scope)
    models = sorted({m for m in estimated_models if m})
    if not models:
        return 0.0
    total, hits = _one(target, SHARE[scope], {"since": _since(since), "scope_id": scope_id or "",
                                              "models": json.dumps(models)})
    return _pct(hits, total)


def _distinct_ids(col: sa.Column, name: str, *, skip_empty: bool) -> Prepared:
    conds = [runs.c.started_at >= bp("since"), col.is_not(None)]
    if skip_empty:
        conds.append(col != "")
    return Prepared(name, sa.select(col).distinct().where(*conds).order_by(col))


LIST_CRON_JOBS = _distinct_ids(runs.c.cron_job_id, "list_cron_job_ids", skip_empty=False)
LIST_SENDERS = _distinct_ids(runs.c.sender_id, "list_sender_ids", skip_empty=True)
LIST_PROFILES = _distinct_ids(runs.c.profile, "list_profiles", skip_empty=True)


def list_cron_job_ids(target: Target, since: datetime | str) -> list[str]:
    """Distinct cron job ids of runs started at/after ``since``."""
    return [r[0] for r in _all(target, LIST_CRON_JOBS, {"since": _since(since)})]


def list_sender_ids(target: Target, since: datetime | str) -> list[str]:
    """Distinct non-empty sender ids of runs started at/after ``since``."""
    return [r[0] for r in _all(target, LIST_SENDERS, {"since": _since(since)})]


def list_profiles(target: Target, since: datetime | str) -> list[str]:
    """Distinct non-empty profiles of runs started at/after ``since`` (no upstream twin)."""
    return [r[0] for r in _all(target, LIST_PROFILES, {"since": _since(since)})]


# --------------------------------------------------------------------------- turns & delegation
TURNS = Prepared("turn_summary", sa.select(
    llm_calls.c.turn_id, func.count(), func.coalesce(func.sum(llm_calls.c.cost_usd), 0.0),
    _z(func.coalesce(llm_calls.c.tokens_in, 0) + func.coalesce(llm_calls.c.tokens_out, 0)),
).where(llm_calls.c.session_id == bp("sid")).group_by(llm_calls.c.turn_id)
    .order_by(func.min(llm_calls.c.id)))


def turn_summary(target: Target, session_id: str) -> list[TurnAggregate]:
    """Per-turn aggregation of a session's calls (``GROUP BY turn_id``), in turn order.
    Calls recorded without a turn id (historical rows) form one ``turn_id=None`` group."""
    rows = _all(target, TURNS, {"sid": session_id})
    return [TurnAggregate(t, n, float(cost), tokens) for t, n, cost, tokens in rows]


_se = subagent_edges
EDGE_COUNTS = Prepared("edge_counts", sa.select(
    func.count(), _z(sa.case((_se.c.parent_turn_id > "", 1), else_=0))))
DELEGATION_LINKS = Prepared("delegation_links", sa.select(
    _se.c.child_session_id, _se.c.parent_session_id, _se.c.parent_turn_id, llm_calls.c.id,
).select_from(_se.join(llm_calls, llm_calls.c.turn_id == _se.c.parent_turn_id))
    .where(_se.c.parent_turn_id > "").order_by(_se.c.child_session_id, llm_calls.c.id))


def delegation_join(target: Target) -> DelegationJoin:
    """The delegation tree joined to the parent turn's calls, with its precondition.

    Only edges with ``parent_turn_id > ''`` can join ``llm_calls.turn_id`` (NULL and ``''``
    never can; ``> 0`` would be wrong for TEXT). The result reports how many edges are
    joinable and how many did join, so a health check compares those two numbers.
    """
    with read_tx(target, snapshot=True) as tx:
        total, joinable = tx.run(EDGE_COUNTS).fetchone()
        links = tuple(DelegationLink(*r) for r in tx.run(DELEGATION_LINKS).fetchall())
    return DelegationJoin(total, joinable, len({l.child_session_id for l in links}), links)


EDGES_OF = Prepared("edges_of", sa.select(*_se.c).where(_se.c.parent_session_id == bp("parent"))
                    .order_by(_se.c.started_at, _se.c.child_session_id))
EDGE = Prepared("edge", sa.select(*_se.c).where(_se.c.child_session_id == bp("child")))


def get_subagent_edge(target: Target, child_session_id: str) -> SubagentEdge | None:
    """The delegation edge of a child session, or None."""
    row = _one(target, EDGE, {"child": child_session_id})
    return SubagentEdge(*row) if row else None


def list_subagent_edges(target: Target, parent_session_id: str) -> list[SubagentEdge]:
    """Direct children of a session, oldest first."""
    return [SubagentEdge(*r) for r in _all(target, EDGES_OF, {"parent": parent_session_id})]


# --------------------------------------------------------------------------- free models
_kfm = known_free_models
IS_KNOWN_FREE = Prepared("is_known_free", sa.select(sa.literal_column("1")).where(
    _kfm.c.model == bp("model"), _kfm.c.provider.in_([bp("provider"), ""])).limit(1))
FREE_VARIANTS = Prepared("free_variants", sa.select(_kfm.c.model).where(
    _kfm.c.model.like("%:free"), _kfm.c.provider.in_([bp("provider"), ""])))


def is_known_free_model(target: Target, model: str, provider: str = "") -> bool:
    """True if ``model`` is known free for ``provider`` or for any provider (wildcard row)."""
    return _one(target, IS_KNOWN_FREE, {"model": model, "provider": provider or ""}) is not None


_BOUNDARY = "-:/_"


def is_free_tier_transition(target: Target, model: str, provider: str = "") -> bool:
    """True if a paid ``model`` is the paid twin of a known ``:free`` model.

    Either ``model + ':free'`` is known free (same provider or wildcard), or a known
    ``<base>:free`` has a non-empty ``<base>`` that prefixes ``model`` at a token boundary
    (followed by one of ``- : / _`` or the end).
    """
    free_ids = [r[0] for r in _all(target, FREE_VARIANTS, {"provider": provider or ""})]
    for free_id in free_ids:
        if free_id == model + ":free":
            return True
        base = free_id[: -len(":free")]
        if base and model.startswith(base) and (len(model) == len(base) or model[len(base)] in _BOUNDARY):
            return True
    return False


_fpt = free_paid_transitions
RECENT_TRANSITIONS = Prepared("recent_transitions", sa.select(*_fpt.c).where(
    _fpt.c.detected_at >= bp("since")).order_by(_fpt.c.detected_at.desc()))


def recent_free_paid_transitions(target: Target, window_hours: float = 72, *,
                                 now: datetime | None = None) -> list[FreePaidTransition]:
    """Free → paid flips detected in the window (all of them if ``window_hours <= 0``),
    newest first."""
    since, _ = window_bounds(window_hours, now=now)
    return [FreePaidTransition(*r) for r in _all(target, RECENT_TRANSITIONS, {"since": since})]


# --------------------------------------------------------------------------- model unavailable
_mua = model_unavailable_alerts
GET_UNAVAILABLE = Prepared("get_unavailable", sa.select(*_mua.c).where(
    _mua.c.model == bp("model"), _mua.c.provider == bp("provider")))
RECENT_UNAVAILABLE = Prepared("recent_unavailable", sa.select(*_mua.c).where(
    _mua.c.last_seen_at >= bp("since")).order_by(_mua.c.last_seen_at.desc()))


def get_model_unavailable(target: Target, model: str, provider: str = "") -> ModelUnavailable | None:
    """The alert row of exactly ``(model, provider)`` (no wildcard), or None."""
    row = _one(target, GET_UNAVAILABLE, {"model": model, "provider": provider or ""})
    return ModelUnavailable(*row) if row else None


def recent_model_unavailable(target: Target, window_hours: float = 72, *,
                             now: datetime | None = None) -> list[ModelUnavailable]:
    """Unavailable models last seen in the window (all if ``window_hours <= 0``), newest first."""
    since, _ = window_bounds(window_hours, now=now)
    return [ModelUnavailable(*r) for r in _all(target, RECENT_UNAVAILABLE, {"since": since})]


_lce = llm_call_errors
ERRORS_OF_SESSION = Prepared("errors_of_session", sa.select(*_lce.c).where(
    _lce.c.session_id == bp("sid")).order_by(_lce.c.id))


def llm_call_errors_for_session(target: Target, session_id: str) -> list[LlmCallError]:
    """The failure ledger of one session, oldest first."""
    return [LlmCallError(*r) for r in _all(target, ERRORS_OF_SESSION, {"sid": session_id})]


# --------------------------------------------------------------------------- pricing
_ps = pricing_snapshots
LATEST_SNAPSHOT = Prepared("latest_snapshot", sa.select(*_ps.c).where(
    _ps.c.provider == bp("provider"), _ps.c.model == bp("model")).order_by(_ps.c.id.desc()).limit(1))
_latest_ids = sa.select(func.max(_ps.c.id)).group_by(_ps.c.provider, _ps.c.model)
LATEST_SNAPSHOTS = Prepared("latest_snapshots", sa.select(*_ps.c).where(_ps.c.id.in_(_latest_ids))
                            .order_by(_ps.c.provider, _ps.c.model))
COUNT_MODELS = Prepared("count_models", sa.select(func.count()).select_from(
    sa.select(llm_calls.c.provider, llm_calls.c.model).distinct()
    .where(llm_calls.c.model.is_not(None), llm_calls.c.model != "").subquery()))
NEEDING_SNAPSHOT = Prepared("needing_snapshot", sa.select(llm_calls.c.provider, llm_calls.c.model)
                            .distinct().where(
    llm_calls.c.model.is_not(None), llm_calls.c.model != "",
    ~sa.exists().where(_ps.c.model == llm_calls.c.model,
                       _ps.c.provider.is_not_distinct_from(llm_calls.c.provider)),
).order_by(llm_calls.c.provider.nulls_first(), llm_calls.c.model))  # SQLite's NULL order, on both


def get_latest_pricing_snapshot(target: Target, provider: str, model: str) -> PricingSnapshot | None:
    """The newest snapshot of ``(provider, model)``, or None."""
    row = _one(target, LATEST_SNAPSHOT, {"provider": provider, "model": model})
    return PricingSnapshot(*row) if row else None


def list_latest_pricing_snapshots(target: Target) -> list[PricingSnapshot]:
    """The newest snapshot of every (provider, model), ordered by provider, model."""
    return [PricingSnapshot(*r) for r in _all(target, LATEST_SNAPSHOTS)]


def count_distinct_llm_models(target: Target) -> int:
    """Number of distinct (provider, model) pairs with a non-empty model in ``llm_calls``."""
    return _one(target, COUNT_MODELS)[0]


def models_needing_pricing_snapshot(target: Target) -> list[tuple[str | None, str]]:
    """Distinct (provider, model) of ``llm_calls`` with no snapshot (NULL-safe provider match)."""
    return [(p, m) for p, m in _all(target, NEEDING_SNAPSHOT)]


# --------------------------------------------------------------------------- dashboard caches
_epc, _mec = endpoint_payload_cache, model_efficiency_cache
GET_ENDPOINT_CACHE = Prepared("get_endpoint_cache", sa.select(
    _epc.c.payload_json, _epc.c.rows_count, _epc.c.built_at).where(
    _epc.c.cache_name == bp("name"), _epc.c.cache_key == bp("key")))
GET_EFFICIENCY_CACHE = Prepared("get_efficiency_cache", sa.select(
    _mec.c.payload_json, _mec.c.rows_count, _mec.c.built_at).where(_mec.c.cache_key == bp("key")))


def get_endpoint_payload_cache(target: Target, cache_name: str, cache_key: str) -> CachedPayload | None:
    """A cached dashboard endpoint payload, or None (freshness is the caller's decision)."""
    row = _one(target, GET_ENDPOINT_CACHE, {"name": cache_name, "key": cache_key})
    return CachedPayload(*row) if row else None


def get_model_efficiency_cache(target: Target, window_hours: int, include_deleted: bool,
                               limit_n: int) -> CachedPayload | None:
    """A cached model-efficiency payload, or None."""
    key = efficiency_cache_key(window_hours, include_deleted, limit_n)
    row = _one(target, GET_EFFICIENCY_CACHE, {"key": key})
    return CachedPayload(*row) if row else None


#: The statements whose best plan depends on the bound time cutoff (``since``): an aggregate
#: over a window reads an hour's rows through the time index and a month's by a scan.
#: PostgreSQL plans each call of these with its values (:attr:`Prepared.plan_per_call`),
#: never a generic plan blind to the window (docs/telemetry.md §8.8). The other statements
#: binding ``since`` (:data:`NEWEST_FIRST`) walk the time index backwards under a LIMIT or
#: read a small table: one plan fits every cutoff, so they keep the prepared plan.
#: tests/telemetry/test_read_plans.py keeps the two lists complete.
WINDOWED = (SUMMARY_RUNS, SUMMARY_CALLS, TOP_TOOLS, COST_BY_JOB, BY_PROVIDER, BY_MODEL,
            UNATTRIBUTED, *SPEND.values(), *DAILY.values(), *SHARE.values(), LIST_CRON_JOBS,
            LIST_SENDERS, LIST_PROFILES)
NEWEST_FIRST = (RECENT_RUNS, EFFICIENCY, RECENT_TRANSITIONS, RECENT_UNAVAILABLE)
for _windowed in WINDOWED:
    _windowed.plan_per_call = True
