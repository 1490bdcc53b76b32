"""Write API of the telemetry store: every function is one atomic transaction.

The first argument is a :class:`~hermes_data.telemetry.store.TelemetryStore` (fast path: held
per-thread connection, statements compiled once) or a SQLAlchemy ``Connection`` / ``Engine``
(the same Core constructs run through SQLAlchemy; a ``Connection`` already in a transaction
writes inside it).

Timestamps are canonical UTC ISO-8601 text, ``datetime.isoformat()`` of an aware UTC
datetime (docs/telemetry.md §1.3) — the form every existing row holds. Functions that take a ``ts`` /
``now`` accept such a string or a ``datetime`` (converted to UTC) and default to now.

Text from hook payloads is made storable, never rejected: a lone UTF-16 surrogate (which
SQLite cannot encode as UTF-8) becomes U+FFFD, a valid surrogate *pair* becomes the character
it encodes, a NUL character (which PostgreSQL text cannot hold) becomes U+FFFD on both
backends, and non-string values are stored as ``str(value)``.

Every statement is built (on first use) twice where the dialects differ — upserts through the
dialect's own ``insert`` (``INSERT … ON CONFLICT`` on both), ``RETURNING id`` on PostgreSQL where
SQLite reads ``lastrowid`` — and the two share their bind names and order (the hot ones checked
by tests/telemetry/test_cold_start.py), so the same argument tuples serve both backends.
"""

from __future__ import annotations

import logging
import math
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Iterable, Mapping, cast

import sqlalchemy as sa
from sqlalchemy import bindparam as bp, func, literal_column

from hermes_data.telemetry.schema import (
    budget_alerts, endpoint_payload_cache, free_paid_transitions, known_free_models,
    llm_call_errors, llm_calls, model_efficiency_cache, model_unavailable_alerts,
    pricing_snapshots, runs, subagent_edges, tool_calls,
)
from hermes_data.telemetry.keys import efficiency_cache_key
from hermes_data.statements import Prepared, upsert_statement
from hermes_data.telemetry.store import PgTelemetryStore, Target, TelemetryStore, write_tx
if TYPE_CHECKING:  # imported where built: recording calls never loads the read API's types
    from hermes_data.telemetry.types import ApiErrorOutcome, ModelUnavailable, PricingEntry
from hermes_data.telemetry.values import (LLM_CALL_TEXT, TERMINAL_STATUSES, TOOL_CALL_TEXT, check_texts,
                     clean_text, cron_job_id_from_session_id, duration_ms_from_seconds, opt_int,
                     opt_text, retryable_flag, to_iso)

log = logging.getLogger("hermes_data.telemetry.writes")

#: The ledger's bound on ``llm_call_errors.error_message`` (applied here, at the write boundary).
ERROR_MESSAGE_MAX = 500
#: Dashboard cache retention: entries older than this are evicted on write …
CACHE_MAX_AGE = timedelta(hours=6)
#: … and at most this many entries are kept (per cache name for the endpoint cache).
CACHE_MAX_ENTRIES = 64

# --------------------------------------------------------------------------- statements
_both = upsert_statement


def _ms_between(end: Any, start: Any) -> Any:
    from hermes_data.telemetry.sql import ms_between  # the read API's fragments: not loaded to record calls

    return ms_between(end, start)


_LLM_COLS = (
    "session_id", "ts", "model", "provider", "tokens_in", "tokens_out", "cost_usd",
    "latency_ms", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens", "estimated",
    "provider_assumed", "moa_preset", "turn_id", "task_id", "api_request_id",
)
_ins_llm = lambda: sa.insert(llm_calls).values({c: bp(c) for c in _LLM_COLS})
INSERT_LLM_CALL = Prepared("insert_llm_call", _ins_llm,
                           lambda: _ins_llm().returning(llm_calls.c.id))


def _add(col: str) -> sa.ColumnElement:
    return func.coalesce(runs.c[col], literal_column("0")) + literal_column(f"excluded.{col}")


def _first(col: str) -> sa.ColumnElement:
    return func.coalesce(runs.c[col], literal_column(f"excluded.{col}"))


# The run row of a recorded call, created lazily (started_at = the call's ts) or updated:
# counters accumulate, model / provider / sender / profile keep the first non-null value.
_RUN_FOR_CALL_COLS = (
    "session_id", "model", "provider", "started_at", "tokens_in", "tokens_out", "cost_usd",
    "estimated_llm_calls", "sender_id", "cache_read_tokens", "cache_write_tokens",
    "provider_assumed_calls", "moa_calls", "profile",
)
_counters = ("tokens_in", "tokens_out", "cost_usd", "api_calls", "estimated_llm_calls",
             "cache_read_tokens", "cache_write_tokens", "provider_assumed_calls", "moa_calls")
def _run_for_call(firsts: tuple[str, ...]):
    def build(insert):
        return insert(runs).values(
            {**{c: bp(c) for c in _RUN_FOR_CALL_COLS},
             "status": literal_column("'running'"), "api_calls": literal_column("1")},
        ).on_conflict_do_update(
            index_elements=[runs.c.session_id],
            set_={**{c: _add(c) for c in _counters}, **{c: _first(c) for c in firsts}})
    return build


UPSERT_RUN_FOR_CALL_ATTRIBUTED = _both("upsert_run_for_call_attributed", _run_for_call(
    ("model", "provider", "sender_id", "profile")))
# The common case (no sender / profile with the call) leaves the indexed sender_id / profile
# columns out of the SET list: SQLite then skips maintaining idx_runs_sender / idx_runs_profile
# (measured ≈ 15 % of the call's cost). The excluded values are NULL anyway.
UPSERT_RUN_FOR_CALL = _both("upsert_run_for_call", _run_for_call(("model", "provider")))

_TOOL_COLS = ("session_id", "ts", "tool_name", "ok", "latency_ms", "turn_id", "tool_call_id")
_ins_tool = lambda: sa.insert(tool_calls).values({c: bp(c) for c in _TOOL_COLS})
INSERT_TOOL_CALL = Prepared("insert_tool_call", _ins_tool,
                            lambda: _ins_tool().returning(tool_calls.c.id))
BUMP_RUN_TOOL_CALLS = Prepared("bump_run_tool_calls", lambda: sa.update(runs).where(
    runs.c.session_id == bp("sid")).values(tool_calls=func.coalesce(runs.c.tool_calls, literal_column("0")) + literal_column("1")))

#: The hot paths build their argument tuples in these orders; tests/telemetry/test_cold_start.py
#: checks both dialects' bind orders (checking at import compiled five statements per process).
HOT_BIND_ORDERS = ((INSERT_LLM_CALL, _LLM_COLS), (UPSERT_RUN_FOR_CALL, _RUN_FOR_CALL_COLS),
                   (UPSERT_RUN_FOR_CALL_ATTRIBUTED, _RUN_FOR_CALL_COLS),
                   (INSERT_TOOL_CALL, _TOOL_COLS), (BUMP_RUN_TOOL_CALLS, ("sid",)))

# start_run: insert the row; on an existing (e.g. lazily created) row only fill NULL facts.
START_RUN = _both("start_run", lambda insert: insert(runs).values(
    session_id=bp("session_id"), platform=bp("platform"), cron_job_id=bp("cron_job_id"),
    model=bp("model"), started_at=bp("started_at"), status=literal_column("'running'"),
    parent_session_id=bp("parent_session_id"), profile=bp("profile"),
).on_conflict_do_update(
    index_elements=[runs.c.session_id],
    set_={c: _first(c) for c in ("platform", "cron_job_id", "model", "parent_session_id",
                                  "profile")},
))

# end_run: one upsert; the lazily created row gets started_at = ended_at (duration 0).
_excl_status: sa.ColumnElement[Any] = literal_column("excluded.status")
END_RUN = _both("end_run", lambda insert: insert(runs).values(
    session_id=bp("session_id"), started_at=bp("end_ts"), ended_at=bp("end_ts"),
    status=bp("new_status"), duration_ms=literal_column("0"),
).on_conflict_do_update(
    index_elements=[runs.c.session_id],
    set_={
        "ended_at": literal_column("excluded.ended_at"),
        "status": sa.case(
            (sa.and_(_excl_status == literal_column("'ok'"),
                     runs.c.status.in_([literal_column(f"'{s}'") for s in TERMINAL_STATUSES]),
                     bp("force", type_=sa.Integer) == 0), runs.c.status),
            else_=_excl_status),
        "duration_ms": _ms_between(literal_column("excluded.ended_at"), runs.c.started_at),
    },
))

SET_SENDER = Prepared("set_sender", lambda: sa.update(runs).where(runs.c.session_id == bp("sid"))
                      .values(sender_id=func.coalesce(runs.c.sender_id, bp("value"))))
SET_PROFILE = Prepared("set_profile", lambda: sa.update(runs).where(runs.c.session_id == bp("sid"))
                       .values(profile=func.coalesce(runs.c.profile, bp("value"))))

_edge_cols = ("child_session_id", "parent_session_id", "parent_turn_id", "parent_subagent_id",
              "child_subagent_id", "child_role", "started_at")
INSERT_EDGE = _both("insert_edge", lambda insert: insert(subagent_edges).values(
    {c: bp(c) for c in _edge_cols}).on_conflict_do_nothing())
STOP_EDGE = Prepared("stop_edge", lambda: sa.update(subagent_edges)
                     .where(subagent_edges.c.child_session_id == bp("child"))
                     .values(stopped_at=bp("stopped"), child_status=bp("status"),
                             child_role=func.coalesce(subagent_edges.c.child_role, bp("role"))))
BACKFILL_EDGE = _both("backfill_edge", lambda insert: insert(subagent_edges).values(
    child_session_id=bp("child"), parent_session_id=bp("parent"), started_at=bp("stopped"),
    stopped_at=bp("stopped"), child_status=bp("status"), child_role=bp("role"),
).on_conflict_do_nothing())

INSERT_BUDGET_ALERT = _both("insert_budget_alert", lambda insert: insert(budget_alerts).values(
    {c: bp(c) for c in ("scope", "scope_id", "window", "period_key", "level", "fired_at",
                        "spent_usd", "limit_usd")}).on_conflict_do_nothing())

INSERT_FREE_MODEL = _both("insert_free_model", lambda insert: insert(known_free_models).values(
    model=bp("model"), provider=bp("provider"), first_seen_at=bp("now")).on_conflict_do_nothing())

# First flip per (model, provider) wins; first_free_seen_at from the same model's known-free
# row, the provider-specific one preferred over the wildcard ('').
_kfm = known_free_models
_first_free = lambda: (sa.select(_kfm.c.first_seen_at)
               .where(_kfm.c.model == bp("model"), _kfm.c.provider.in_([bp("provider"), ""]))
               .order_by((_kfm.c.provider == "").asc()).limit(1).scalar_subquery())
INSERT_FREE_PAID = _both("insert_free_paid", lambda insert: insert(free_paid_transitions).values(
    model=bp("model"), provider=bp("provider"), detected_at=bp("now"),
    session_id=bp("session_id"), first_paid_cost_usd=bp("cost"), first_free_seen_at=_first_free(),
).on_conflict_do_nothing())

_mua = model_unavailable_alerts
UPSERT_MODEL_UNAVAILABLE = _both("upsert_model_unavailable", lambda insert: insert(_mua).values(
    model=bp("model"), provider=bp("provider"), error_code=bp("code"), error_message=bp("msg"),
    first_seen_at=bp("now"), last_seen_at=bp("now"), occurrences=literal_column("1"),
).on_conflict_do_update(
    index_elements=[_mua.c.model, _mua.c.provider],
    set_={"last_seen_at": literal_column("excluded.last_seen_at"),
          "error_code": literal_column("excluded.error_code"),
          "error_message": literal_column("excluded.error_message"),
          "occurrences": _mua.c.occurrences + 1},
).returning(*_mua.c))

_ERR_COLS = ("ts", "session_id", "turn_id", "task_id", "api_request_id", "api_call_count",
             "model", "status_code", "error_type", "error_message", "reason", "retryable",
             "retry_count", "max_retries", "duration_ms")
# provider: the given one, else the session's runs.provider, else ''.
_err_provider = lambda: func.coalesce(
    func.nullif(bp("provider"), ""),
    sa.select(runs.c.provider).where(runs.c.session_id == bp("session_id")).scalar_subquery(),
    "")
INSERT_LLM_CALL_ERROR = Prepared("insert_llm_call_error", lambda: sa.insert(llm_call_errors).values(
    {**{c: bp(c) for c in _ERR_COLS}, "provider": _err_provider()},
).returning(llm_call_errors.c.id, llm_call_errors.c.provider))

_ps = pricing_snapshots
_RATE_FIELDS = ("input_cost_per_million", "output_cost_per_million",
                "cache_read_cost_per_million", "cache_write_cost_per_million", "request_cost")
_SNAP_COLS = tuple(c.name for c in _ps.c if c.name != "id")
LATEST_SNAPSHOT_FOR_CHANGE = Prepared("latest_snapshot_for_change", lambda: sa.select(
    *(_ps.c[f] for f in (*_RATE_FIELDS, "pricing_version", "source", "resolved_model")))
    .where(_ps.c.provider == bp("provider"), _ps.c.model == bp("model"))
    .order_by(_ps.c.id.desc()).limit(1))
# PostgreSQL: check-then-append must be serialised per table, as BEGIN IMMEDIATE does on
# SQLite (SHARE ROW EXCLUSIVE conflicts with itself, not with readers).
LOCK_SNAPSHOTS = Prepared("lock_snapshots", sa.text("SELECT 1"),
                          sa.text("LOCK TABLE pricing_snapshots IN SHARE ROW EXCLUSIVE MODE"))
INSERT_SNAPSHOT = Prepared("insert_snapshot", lambda: sa.insert(_ps).values(
    {c: bp(c) for c in _SNAP_COLS}))

_epc = endpoint_payload_cache
UPSERT_ENDPOINT_CACHE = _both("upsert_endpoint_cache", lambda insert: insert(_epc).values(
    {c.name: bp(c.name) for c in _epc.c}).on_conflict_do_update(
    index_elements=[_epc.c.cache_name, _epc.c.cache_key],
    set_={c: literal_column(f"excluded.{c}") for c in ("payload_json", "rows_count", "built_at")}))
EVICT_ENDPOINT_OLD = Prepared("evict_endpoint_old", lambda: sa.delete(_epc).where(
    _epc.c.cache_name == bp("name"), _epc.c.built_at < bp("cutoff")))
EVICT_ENDPOINT_EXCESS = Prepared("evict_endpoint_excess", lambda: sa.delete(_epc).where(
    _epc.c.cache_name == bp("name"),
    _epc.c.cache_key.not_in(sa.select(_epc.c.cache_key).where(_epc.c.cache_name == bp("name"))
                            .order_by(_epc.c.built_at.desc()).limit(bp("keep")))))

_mec = model_efficiency_cache
UPSERT_EFFICIENCY_CACHE = _both("upsert_efficiency_cache", lambda insert: insert(_mec).values(
    {c.name: bp(c.name) for c in _mec.c}).on_conflict_do_update(
    index_elements=[_mec.c.cache_key],
    set_={c: literal_column(f"excluded.{c}")
          for c in ("window_hours", "include_deleted", "limit_n", "payload_json", "rows_count",
                    "built_at")}))
EVICT_EFFICIENCY_OLD = Prepared("evict_efficiency_old", lambda: sa.delete(_mec).where(
    _mec.c.built_at < bp("cutoff")))
EVICT_EFFICIENCY_EXCESS = Prepared("evict_efficiency_excess", lambda: sa.delete(_mec).where(
    _mec.c.cache_key.not_in(sa.select(_mec.c.cache_key).order_by(_mec.c.built_at.desc())
                            .limit(bp("keep")))))


# --------------------------------------------------------------------------- runs
def start_run(target: Target, session_id: str, model: str | None = None,
              platform: str | None = None, cron_job_id: str | None = None,
              parent_session_id: str | None = None, profile: str | None = None,
              *, started_at: str | datetime | None = None) -> None:
    """Create the run row of a session (``status='running'``, ``started_at`` now).

    Idempotent. On an existing row — e.g. one a call created lazily — nothing is
    overwritten; only facts still NULL (platform, cron job, model, parent, profile) are filled.

    ``cron_job_id`` left ``None`` on a run whose ``platform`` is ``'cron'`` is read from the
    session id as upstream's hook layer reads it (``cron_<job>_<YYYYMMDD>_<HHMMSS>`` → ``<job>``,
    :func:`~hermes_data.telemetry.values.cron_job_id_from_session_id`); an id that does not
    read so leaves it NULL with a warning. A ``cron_job_id`` the caller passes always wins
    (``''`` stores NULL and reads nothing), and other platforms are never parsed
    (docs/telemetry.md §5.2).
    """
    check_texts(("session_id",), (session_id,))
    if cron_job_id is None and platform == "cron":
        cron_job_id = cron_job_id_from_session_id(session_id)
        if cron_job_id is None:
            log.warning("cron run %r: the session id is not cron_<job>_<YYYYMMDD>_<HHMMSS>; "
                        "its cron_job_id stays NULL", session_id)
    params = {"session_id": session_id, "platform": opt_text(platform),
              "cron_job_id": opt_text(cron_job_id), "model": opt_text(model),
              "started_at": to_iso(started_at), "parent_session_id": opt_text(parent_session_id),
              "profile": opt_text(profile)}
    with write_tx(target) as tx:
        tx.run(START_RUN, params)


def end_run(target: Target, session_id: str, status: str, ended_at: str | datetime | None = None,
            *, overwrite_terminal: bool = False) -> None:
    """Close (or refresh, after each turn) a session's run row.

    Sets ``ended_at`` (given or now), ``status`` and ``duration_ms = ended_at − started_at``;
    creates the row if the start was missed (duration 0). A terminal status already
    recorded (``error``, ``interrupted``) is *not* replaced by ``ok`` — the finalize hook's
    late ``ok`` would hide a failure — unless ``overwrite_terminal=True`` (docs/telemetry.md §8.5).
    """
    check_texts(("session_id", "status"), (session_id, status))
    params = {"session_id": session_id, "end_ts": to_iso(ended_at), "new_status": status,
              "force": 1 if overwrite_terminal else 0}
    with write_tx(target) as tx:
        tx.run(END_RUN, params)


def llm_call_rows(session_id: str, ts: str | datetime | None, model: str | None,
                  provider: str | None, tokens_in: int, tokens_out: int, cost_usd: float,
                  latency_ms: int | None, cache_read_tokens: int, cache_write_tokens: int,
                  reasoning_tokens: int, estimated: bool, provider_assumed: bool,
                  moa_preset: str | None, turn_id: str | None, task_id: str | None,
                  api_request_id: str | None, sender_id: str | None,
                  profile: str | None) -> tuple[tuple, tuple]:
    """Normalise one call into the parameter rows of ``INSERT_LLM_CALL`` and of the run
    upsert (shared by the synchronous and the buffered writer, so both store the same).
    Identifiers holding NUL or a lone surrogate ⇒
    :class:`~hermes_data.errors.UnstorableValueError` naming the argument (issue 31)."""
    ts = ts if type(ts) is str else to_iso(ts)
    check_texts(LLM_CALL_TEXT, (session_id, ts, model, provider, moa_preset, turn_id, task_id,
                                api_request_id, sender_id, profile))
    tokens_in = tokens_in or 0
    tokens_out = tokens_out or 0
    cost_usd = cost_usd or 0.0
    cache_read_tokens = cache_read_tokens or 0
    cache_write_tokens = cache_write_tokens or 0
    est = 1 if estimated else 0
    assumed = 1 if provider_assumed else 0
    moa_preset = moa_preset or None
    call = (session_id, ts, model, provider, tokens_in, tokens_out, cost_usd, latency_ms,
            cache_read_tokens, cache_write_tokens, reasoning_tokens or 0, est, assumed,
            moa_preset, turn_id or None, task_id or None, api_request_id or None)
    run = (session_id, model, provider, ts, tokens_in, tokens_out, cost_usd, est,
           sender_id or None, cache_read_tokens, cache_write_tokens, assumed,
           1 if moa_preset else 0, profile or None)
    return call, run


def record_llm_call(target: Target, session_id: str, ts: str | datetime | None, model: str | None,
                    provider: str | None, tokens_in: int = 0, tokens_out: int = 0,
                    cost_usd: float = 0.0, latency_ms: int | None = None,
                    cache_read_tokens: int = 0, cache_write_tokens: int = 0,
                    reasoning_tokens: int = 0, estimated: bool = False,
                    provider_assumed: bool = False, moa_preset: str | None = None, *,
                    turn_id: str | None = None, task_id: str | None = None,
                    api_request_id: str | None = None, sender_id: str | None = None,
                    profile: str | None = None) -> int:
    """Record one successful API call and fold it into its run; returns the call's id.

    One ``BEGIN IMMEDIATE`` transaction of two statements: the ``llm_calls`` insert and an
    upsert of the run row, which creates the row lazily (``status='running'``,
    ``started_at`` = ``ts``) when the session's start was missed, adds tokens / cache tokens /
    cost, counts the call (and ``estimated`` / ``provider_assumed`` / MoA calls), and keeps the
    first non-null model, provider, sender and profile. Empty turn / task / request ids and
    an empty ``moa_preset`` are stored as NULL. A concurrent reader never sees the call
    without its run totals (upstream's three autocommit statements could be torn).
    """
    call, run = llm_call_rows(session_id, ts, model, provider, tokens_in, tokens_out, cost_usd,
                              latency_ms, cache_read_tokens, cache_write_tokens, reasoning_tokens,
                              estimated, provider_assumed, moa_preset, turn_id, task_id,
                              api_request_id, sender_id, profile)
    upsert = UPSERT_RUN_FOR_CALL_ATTRIBUTED if (sender_id or profile) else UPSERT_RUN_FOR_CALL
    if type(target) is TelemetryStore:
        return target.execute_pair(INSERT_LLM_CALL.sql, call, upsert.sql, run)
    if isinstance(target, TelemetryStore):  # PostgreSQL store
        return cast(PgTelemetryStore, target).execute_prepared_pair(INSERT_LLM_CALL, call, upsert, run)
    with write_tx(target) as tx:
        res = tx.run(INSERT_LLM_CALL, dict(zip(_LLM_COLS, call)))
        rowid = tx.inserted_id(res)
        tx.run(upsert, dict(zip(_RUN_FOR_CALL_COLS, run)))
        return rowid


def record_tool_call(target: Target, session_id: str, ts: str | datetime | None, tool_name: str,
                     ok: bool = True, latency_ms: int | None = None, *,
                     turn_id: str | None = None, tool_call_id: str | None = None) -> int:
    """Record one tool execution and count it on the run (no run row is created: a tool
    call alone does not make a session, as upstream). Returns the row id. Text holding NUL
    or a lone surrogate ⇒ :class:`~hermes_data.errors.UnstorableValueError`, nothing written."""
    ts = ts if type(ts) is str else to_iso(ts)
    check_texts(TOOL_CALL_TEXT, (session_id, ts, tool_name, turn_id, tool_call_id))
    call = (session_id, ts, tool_name, 1 if ok else 0, latency_ms, turn_id or None,
            tool_call_id or None)
    if type(target) is TelemetryStore:
        return target.execute_pair(INSERT_TOOL_CALL.sql, call, BUMP_RUN_TOOL_CALLS.sql,
                                   (session_id,))
    if isinstance(target, TelemetryStore):  # PostgreSQL store
        return cast(PgTelemetryStore, target).execute_prepared_pair(
            INSERT_TOOL_CALL, call, BUMP_RUN_TOOL_CALLS, (session_id,))
    with write_tx(target) as tx:
        res = tx.run(INSERT_TOOL_CALL, dict(zip(_TOOL_COLS, call)))
        rowid = tx.inserted_id(res)
        tx.run(BUMP_RUN_TOOL_CALLS, {"sid": session_id})
        return rowid


def set_sender(target: Target, session_id: str, sender_id: str | None) -> None:
    """Attach the sender to the run; the first non-empty sender wins, empty is ignored."""
    if sender_id:
        with write_tx(target) as tx:
            tx.run(SET_SENDER, {"sid": session_id, "value": clean_text(sender_id)})


def set_profile(target: Target, session_id: str, profile: str | None) -> None:
    """Attach the Hermes profile to the run; the first non-empty profile wins."""
    if profile:
        with write_tx(target) as tx:
            tx.run(SET_PROFILE, {"sid": session_id, "value": clean_text(profile)})


# --------------------------------------------------------------------------- subagents
def record_subagent_start(target: Target, child_session_id: str, parent_session_id: str,
                          parent_turn_id: str | None = None,
                          parent_subagent_id: str | None = None,
                          child_subagent_id: str | None = None, child_role: str | None = None,
                          started_at: str | datetime | None = None) -> bool:
    """Record a delegation edge parent → child; the first edge for a child wins.

    Returns False (and writes nothing) when either session id is empty. Empty optional
    strings are stored as NULL. Returns True iff a row was inserted.
    """
    if not child_session_id or not parent_session_id:
        return False
    params = {"child_session_id": child_session_id, "parent_session_id": parent_session_id,
              "parent_turn_id": opt_text(parent_turn_id),
              "parent_subagent_id": opt_text(parent_subagent_id),
              "child_subagent_id": opt_text(child_subagent_id),
              "child_role": opt_text(child_role), "started_at": to_iso(started_at)}
    with write_tx(target) as tx:
        return tx.run(INSERT_EDGE, params).rowcount == 1


def record_subagent_stop(target: Target, child_session_id: str, parent_session_id: str = "",
                         child_status: str | None = None, child_role: str | None = None,
                         stopped_at: str | datetime | None = None) -> None:
    """Finalize a child's edge (stopped_at, status; role only if unknown so far).

    When no edge exists (the start was missed) and ``parent_session_id`` is given, an edge is
    backfilled with ``started_at = stopped_at``. Atomic: update and backfill share one
    transaction.
    """
    if not child_session_id:
        return
    params = {"child": child_session_id, "parent": parent_session_id,
              "stopped": to_iso(stopped_at), "status": opt_text(child_status),
              "role": opt_text(child_role)}
    with write_tx(target) as tx:
        if tx.run(STOP_EDGE, params).rowcount == 0 and parent_session_id:
            tx.run(BACKFILL_EDGE, params)


# --------------------------------------------------------------------------- budget
def try_budget_alert(target: Target, scope: str, scope_id: str | None, window: str,
                     period_key: str, level: str, spent_usd: float | None,
                     limit_usd: float | None, *, now: str | datetime | None = None) -> bool:
    """Claim the (scope, scope_id, window, period_key, level) alert; True iff this call fired
    it (the UNIQUE key makes every alert fire once, across threads and processes)."""
    params = {"scope": scope, "scope_id": scope_id or "", "window": window,
              "period_key": period_key, "level": level, "fired_at": to_iso(now),
              "spent_usd": spent_usd, "limit_usd": limit_usd}
    with write_tx(target) as tx:
        return tx.run(INSERT_BUDGET_ALERT, params).rowcount == 1


# --------------------------------------------------------------------------- free models
def record_free_model(target: Target, model: str, provider: str = "", *,
                      now: str | datetime | None = None) -> bool:
    """Remember ``(model, provider)`` as genuinely free (``provider=''`` is the wildcard).

    ``first_seen_at`` is never overwritten. Returns True iff a row was inserted. Call it only
    for an explicitly priced $0 model (an unknown model at $0 is not "free").
    """
    with write_tx(target) as tx:
        return tx.run(INSERT_FREE_MODEL, {"model": model, "provider": provider or "",
                                          "now": to_iso(now)}).rowcount == 1


def backfill_known_free_models(target: Target, models: Iterable[str], *,
                               now: str | datetime | None = None) -> int:
    """Insert a wildcard row for each model (pricing table's $0 models); returns how many
    were new. Existing rows — wildcard or provider-specific — are left alone."""
    stamp = to_iso(now)
    inserted = 0
    with write_tx(target) as tx:
        for model in dict.fromkeys(m for m in models if m):
            inserted += tx.run(INSERT_FREE_MODEL,
                               {"model": model, "provider": "", "now": stamp}).rowcount
    return inserted


def record_free_paid_transition(target: Target, model: str, provider: str,
                                session_id: str | None, first_paid_cost_usd: float, *,
                                now: str | datetime | None = None) -> bool:
    """Record the first free → paid flip of ``(model, provider)`` (later flips are ignored).

    ``first_free_seen_at`` comes from the same model's known-free row (provider-specific
    preferred over the wildcard) in the same statement; NULL for id-change transitions.
    Returns True iff a row was inserted.
    """
    params = {"model": model, "provider": provider or "", "now": to_iso(now),
              "session_id": session_id, "cost": float(first_paid_cost_usd or 0.0)}
    with write_tx(target) as tx:
        return tx.run(INSERT_FREE_PAID, params).rowcount == 1


# --------------------------------------------------------------------------- model unavailable
def _mua_row(row) -> ModelUnavailable:
    from hermes_data.telemetry.types import ModelUnavailable

    return ModelUnavailable(*row)


def record_model_unavailable(target: Target, model: str, provider: str, error_code: int,
                             error_message: str | None = None, *,
                             now: str | datetime | None = None) -> ModelUnavailable:
    """Upsert the 404-class alert of ``(model, provider)``: first occurrence inserts with
    ``occurrences=1``; a repeat refreshes last_seen_at / code / message and counts it.
    ``first_seen_at`` is preserved. Returns the row as it now stands."""
    params = {"model": model, "provider": provider or "", "code": int(error_code),
              "msg": None if error_message is None else clean_text(error_message),
              "now": to_iso(now)}
    with write_tx(target) as tx:
        return _mua_row(tx.run(UPSERT_MODEL_UNAVAILABLE, params).fetchone())


# --------------------------------------------------------------------------- failure ledger
def record_llm_call_error(target: Target, *, session_id: str | None, model: object = "",
                          provider: object = "", status_code: object = None,
                          error_type: object = "", error_message: object = "",
                          reason: object = "", retryable: object = None,
                          duration_ms: object = None, turn_id: object = None,
                          task_id: object = None, api_request_id: object = None,
                          api_call_count: object = None, retry_count: object = None,
                          max_retries: object = None,
                          ts: str | datetime | None = None) -> tuple[int, str]:
    """Append one failed attempt to ``llm_call_errors``; returns ``(id, provider stored)``.

    Normalisation happens here, at the write boundary, so every caller inherits it:
    ``error_message`` is cut to 500 characters; omitted text (None) is stored as ``''``;
    empty turn / task / request ids become NULL; ``retryable`` True/False/None → 1/0/NULL
    (anything else → NULL); integers that are not plain integers → NULL. An empty provider
    falls back to the session's ``runs.provider``, then ``''``.
    """
    params = {
        "ts": to_iso(ts), "session_id": clean_text(session_id),
        "turn_id": opt_text(turn_id), "task_id": opt_text(task_id),
        "api_request_id": opt_text(api_request_id), "api_call_count": opt_int(api_call_count),
        "model": clean_text(model), "provider": clean_text(provider),
        "status_code": opt_int(status_code), "error_type": clean_text(error_type),
        "error_message": clean_text(error_message)[:ERROR_MESSAGE_MAX],
        "reason": clean_text(reason), "retryable": retryable_flag(retryable),
        "retry_count": opt_int(retry_count), "max_retries": opt_int(max_retries),
        "duration_ms": opt_int(duration_ms),
    }
    with write_tx(target) as tx:
        row = tx.run(INSERT_LLM_CALL_ERROR, params).fetchone()
    return int(row[0]), row[1]


def _get(mapping: object, key: str) -> object:
    return mapping.get(key) if isinstance(mapping, Mapping) else None


def _first_present(*values: object) -> object:
    for value in values:
        if value is not None and value != "":
            return value
    return None


def record_api_request_error(target: Target, payload: Mapping[str, object]) -> ApiErrorOutcome:
    """Handle one ``api_request_error`` hook firing: ledger row, then the 404 alert.

    Reads the payload as the host sends it — nested first, flat names as the fallback for
    older hosts: ``error = {"type", "message"}`` (else ``error_type`` / ``error_message``),
    the model from ``request["body"]["model"]`` (else ``api_kwargs["model"]``, else
    ``model``), ``api_duration`` in **seconds** (→ ``duration_ms``; unreadable → NULL).

    1. One ``llm_call_errors`` row for every firing (any status, retryable or not).
    2. Alert only when ``status_code == 404`` and ``retryable is False`` — an identity test:
       None ("the host did not say") and True never alert. Then ``model_unavailable_alerts``
       is upserted with the same nested-first model and message.

    Never raises: each write has its own error handling (logged), so a failed alert does not
    lose the ledger row and a failed ledger row does not suppress the alert.
    """
    payload = payload if isinstance(payload, Mapping) else {}
    error = payload.get("error")
    error_type = _first_present(_get(error, "type"), payload.get("error_type"))
    message = _first_present(_get(error, "message"), payload.get("error_message"),
                             error if isinstance(error, str) else None)
    model = _first_present(_get(_get(payload.get("request"), "body"), "model"),
                           _get(payload.get("api_kwargs"), "model"), payload.get("model"))
    retryable = payload.get("retryable")
    status_code = opt_int(payload.get("status_code"))
    duration_ms = duration_ms_from_seconds(payload.get("api_duration"))
    # Passed through as the host sent it (a str or absent).
    session_id = cast("str | None", payload.get("session_id"))
    model_text = clean_text(model)
    message_text = clean_text(message)[:ERROR_MESSAGE_MAX]

    error_id: int | None = None
    provider = clean_text(payload.get("provider"))
    try:
        error_id, provider = record_llm_call_error(
            target, session_id=session_id, model=model_text, provider=provider,
            status_code=status_code, error_type=error_type, error_message=message_text,
            reason=payload.get("reason"), retryable=retryable, duration_ms=duration_ms,
            turn_id=payload.get("turn_id"), task_id=payload.get("task_id"),
            api_request_id=payload.get("api_request_id"),
            api_call_count=payload.get("api_call_count"),
            retry_count=payload.get("retry_count"), max_retries=payload.get("max_retries"))
    except Exception:
        log.exception("llm_call_errors: could not record the failed call of session %r",
                      session_id)

    alert: ModelUnavailable | None = None
    if status_code == 404 and retryable is False and model_text:
        try:
            if error_id is None and not provider and session_id:
                from hermes_data.telemetry.reads import get_run  # fallback provider when the ledger write failed
                run = get_run(target, clean_text(session_id))
                provider = (run.provider if run and run.provider else "")
            alert = record_model_unavailable(target, model_text, provider, 404,
                                             message_text or None)
        except Exception:
            log.exception("model_unavailable_alerts: could not record %r/%r", model_text, provider)
    from hermes_data.telemetry.types import ApiErrorOutcome

    return ApiErrorOutcome(error_id=error_id, alert=alert, model=model_text, provider=provider,
                           status_code=status_code,
                           retryable=retryable if isinstance(retryable, bool) else None,
                           duration_ms=duration_ms)


# --------------------------------------------------------------------------- pricing
def _rate_changed(old: float | None, new: float | None) -> bool:
    if old is None or new is None:
        return (old is None) != (new is None)
    return abs(float(old) - float(new)) > 1e-9


def _as_rate(value: object) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        rate = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return rate if math.isfinite(rate) else None


def record_pricing_snapshot(target: Target, provider: str, model: str, snap: PricingEntry,
                            base_url: str = "", api_mode: str = "",
                            resolved_model: str | None = None, *,
                            now: str | datetime | None = None) -> bool:
    """Append a pricing snapshot if the tariff changed; True iff a row was written.

    A change is: no earlier row for (provider, model); a rate flipping NULL↔value or moving
    by more than 1e-9; a different ``pricing_version``, ``source`` or ``resolved_model``
    (NULL-aware). ``base_url``, ``api_mode``, ``source_url``, ``fetched_at`` never trigger a
    row. Check and insert share one ``BEGIN IMMEDIATE`` transaction, so concurrent writers
    cannot both append the same change.
    """
    rates = {f: _as_rate(snap.get(f)) for f in _RATE_FIELDS}
    source, version = snap.get("source"), snap.get("pricing_version")
    with write_tx(target) as tx:
        if tx.dialect != "sqlite":
            tx.run(LOCK_SNAPSHOTS)
        latest = tx.run(LATEST_SNAPSHOT_FOR_CHANGE,
                        {"provider": provider, "model": model}).fetchone()
        if latest is not None:
            old_rates, (old_version, old_source, old_resolved) = latest[:5], latest[5:]
            if not (any(_rate_changed(o, rates[f]) for o, f in zip(old_rates, _RATE_FIELDS))
                    or old_version != version or old_source != source
                    or old_resolved != resolved_model):
                return False
        tx.run(INSERT_SNAPSHOT, {
            **rates, "provider": provider, "model": model, "source": source,
            "source_url": snap.get("source_url"), "pricing_version": version,
            "fetched_at": snap.get("fetched_at"), "captured_at": to_iso(now),
            "base_url": base_url or "", "api_mode": api_mode or "",
            "resolved_model": resolved_model})
    return True


# --------------------------------------------------------------------------- dashboard caches
def _now_dt(now: str | datetime | None) -> datetime:
    if now is None:
        return datetime.now(timezone.utc)
    if isinstance(now, str):
        return datetime.fromisoformat(now).astimezone(timezone.utc)
    return now.astimezone(timezone.utc)


def put_endpoint_payload_cache(target: Target, cache_name: str, cache_key: str,
                               payload_json: str, rows_count: int, *,
                               now: str | datetime | None = None) -> None:
    """Store a dashboard endpoint payload, then evict that cache's entries older than 6 h and
    all but its newest 64 — in one transaction."""
    at = _now_dt(now)
    with write_tx(target) as tx:
        tx.run(UPSERT_ENDPOINT_CACHE, {"cache_name": cache_name, "cache_key": cache_key,
                                       "payload_json": payload_json, "rows_count": rows_count,
                                       "built_at": at.isoformat()})
        tx.run(EVICT_ENDPOINT_OLD, {"name": cache_name,
                                    "cutoff": (at - CACHE_MAX_AGE).isoformat()})
        tx.run(EVICT_ENDPOINT_EXCESS, {"name": cache_name, "keep": CACHE_MAX_ENTRIES})


def put_model_efficiency_cache(target: Target, window_hours: int, include_deleted: bool,
                               limit_n: int, payload_json: str, rows_count: int, *,
                               now: str | datetime | None = None) -> None:
    """Store a model-efficiency payload, then evict entries older than 6 h and all but the
    newest 64 — in one transaction."""
    at = _now_dt(now)
    with write_tx(target) as tx:
        tx.run(UPSERT_EFFICIENCY_CACHE, {
            "cache_key": efficiency_cache_key(window_hours, include_deleted, limit_n),
            "window_hours": int(window_hours), "include_deleted": 1 if include_deleted else 0,
            "limit_n": int(limit_n), "payload_json": payload_json, "rows_count": rows_count,
            "built_at": at.isoformat()})
        tx.run(EVICT_EFFICIENCY_OLD, {"cutoff": (at - CACHE_MAX_AGE).isoformat()})
        tx.run(EVICT_EFFICIENCY_EXCESS, {"keep": CACHE_MAX_ENTRIES})
