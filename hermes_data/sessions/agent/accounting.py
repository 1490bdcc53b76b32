"""Token and cost accounting of the agent turn API (docs/sessions-agent.md §3.2–§3.4):
``update_token_counts`` and its usage rows, auxiliary usage, the billing route, the dominant
route, store-wide totals and ``ensure_session``.

Operations take the :class:`~hermes_data.sessions.store.SessionStore` first (the facade
delegates to them) and run through its backend's ``write`` / ``read``; the statements are
in :mod:`.sql.accounting`. The asynchronous writer behind ``queue_token_counts`` is
:mod:`.token_writer`.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Mapping

from sqlalchemy.engine import Connection

from hermes_data.storable import check_text, check_texts
from hermes_data.sessions.core import encoding as enc
from hermes_data.sessions.core import lifecycle
from hermes_data.sessions.rows import ModelRoute, UsageTotals
from hermes_data.sessions.handle import StoreHandle
from hermes_data.sessions.sql import Fragments
from hermes_data.sessions.agent.accounting_sql import COUNTERS, AccountingStatements, for_dialect

log = logging.getLogger("hermes_data.sessions.agent.accounting")

#: Cost keywords of a delta (None or a finite number).
COSTS = ("estimated_cost_usd", "actual_cost_usd")
#: Text keywords of a delta (None or a string).
TEXTS = ("model", "cost_status", "cost_source", "pricing_version", "billing_provider",
         "billing_base_url", "billing_mode")
#: Every keyword ``update_token_counts`` / ``queue_token_counts`` accept.
DELTA_KEYS = frozenset((*COUNTERS, *COSTS, *TEXTS, "absolute"))


def validate_delta(delta: Mapping[str, Any]) -> dict[str, Any]:
    """A complete, checked delta: unknown keyword ⇒ ``TypeError``; a counter that is not an
    ``int`` ≥ 0 (bools refused), a cost that is not None or a finite number, a text that is
    not None or a string ⇒ ``ValueError`` naming the keyword and value (NUL or a lone
    surrogate in a text: :class:`~hermes_data.errors.UnstorableValueError`, issue 31)."""
    unknown = sorted(set(delta) - DELTA_KEYS)
    if unknown:
        raise TypeError(f"unexpected token-count keyword(s): {', '.join(unknown)}")
    out: dict[str, Any] = {}
    for key in COUNTERS:
        v = delta.get(key, 0)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"{key} must be an int >= 0, not {v!r}")
        out[key] = v
    for key in COSTS:
        v = delta.get(key)
        if v is not None:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ValueError(f"{key} must be None or a finite number, not {v!r}")
            v = float(v)
        out[key] = v
    for key in TEXTS:
        v = delta.get(key)
        if v is not None and not isinstance(v, str):
            raise ValueError(f"{key} must be None or a string, not {v!r}")
        check_text(key, v)
        out[key] = v
    out["absolute"] = bool(delta.get("absolute", False))
    return out


def _accounted(d: Mapping[str, Any]) -> bool:
    return any(d[c] for c in COUNTERS) or bool(d["estimated_cost_usd"]) \
        or bool(d["actual_cost_usd"])


def ensure_row(conn: Connection, q: Fragments, session_id: str, model: str | None,
               owner: str | None) -> None:
    """docs/sessions-agent.md §3.2 step 1: the core upsert with ``source='unknown'`` (the initial ``create_session``
    may have lost a lock race), ``model`` filled only where NULL, the owner profile stamped."""
    lifecycle.create_session(conn, q, lifecycle.NewSession(
        session_id, "unknown", {"model": model}, None, owner, False, False))


def record_model_usage(conn: Connection, a: AccountingStatements, session_id: str,
                       d: Mapping[str, Any], task: str) -> None:
    """``_record_model_usage``: add one delta to its (route, task) row. The main loop
    (``task=''``) falls back to the session's route; an auxiliary task never borrows it."""
    route = [d["model"], d["billing_provider"], d["billing_base_url"], d["billing_mode"]]
    if task == "":
        row = conn.exec_driver_sql(a.ROUTE, (session_id,)).first()
        if row is not None:
            route = [given or stored for given, stored in zip(route, row)]
    model = route[0] or "unknown"
    now = enc.now()
    conn.exec_driver_sql(a.USAGE_UPSERT, (
        session_id, model, route[1] or "", route[2] or "", route[3] or "", task,
        d["api_call_count"], *(d[c] for c in COUNTERS[:5]),
        d["estimated_cost_usd"] or 0.0, d["actual_cost_usd"] or 0.0,
        d["cost_status"], d["cost_source"], now, now))


def apply_token_delta(conn: Connection, q: Fragments, session_id: str, d: Mapping[str, Any],
                      owner: str | None) -> None:
    """docs/sessions-agent.md §3.2 in the caller's one transaction: ensure the row, stamp the first accounted route,
    update the summary, record the usage row (incremental writes only)."""
    a = for_dialect(q.dialect)
    ensure_row(conn, q, session_id, d["model"], owner)
    model, provider, _url, _mode, calls = conn.exec_driver_sql(
        a.ROUTE_FOR_UPDATE, (session_id,)).one()
    accounted = _accounted(d)
    if not calls and accounted and d["model"] and d["billing_provider"] \
            and (d["model"], d["billing_provider"]) != (model, provider):
        conn.exec_driver_sql(a.SET_FIRST_ROUTE, (d["model"], d["billing_provider"],
                                                 d["billing_base_url"], d["billing_mode"],
                                                 session_id))
    route = [d[k] if accounted else None
             for k in ("billing_provider", "billing_base_url", "billing_mode", "model")]
    tail = (d["cost_status"], d["cost_source"], d["pricing_version"], *route, session_id)
    counters = tuple(d[c] for c in COUNTERS)
    actual = d["actual_cost_usd"]
    if d["absolute"]:
        conn.exec_driver_sql(a.SUMMARY_SET, (*counters, d["estimated_cost_usd"], actual,
                                             actual, *tail))
        return
    conn.exec_driver_sql(a.SUMMARY_ADD, (*counters, d["estimated_cost_usd"], actual, actual,
                                         *tail))
    if accounted:
        record_model_usage(conn, a, session_id, d, "")


def update_token_counts(store: StoreHandle, session_id: str, **delta: Any) -> None:
    """Account one API call's tokens and cost on ``session_id`` synchronously (docs/sessions-agent.md §3.2), in one
    transaction: the row is ensured (``source='unknown'``), the first accounted route is
    stamped, counters add (``absolute=True``: are set), and the usage row of the route gains
    the delta. An empty id is a no-op."""
    check_text("session_id", session_id)
    d = validate_delta(delta)
    if not session_id:
        return
    owner = store.owner_profile()
    store.backend.write(lambda c: apply_token_delta(c, store.backend.sql, session_id, d, owner))


def queue_token_counts(store: StoreHandle, session_id: str, **delta: Any) -> None:
    """Queue one API call's accounting for the handle's background writer (docs/sessions-agent.md §3.1): validated
    now (``TypeError`` / ``ValueError`` / ``ConfigurationError`` at the call site), applied
    in enqueue order, adjacent same-route deltas merged. Read-your-writes through the token
    barrier (``get_session``, ``usage_totals`` … flush first)."""
    check_text("session_id", session_id)
    d = validate_delta(delta)
    if store.read_only:
        from hermes_data.errors import ConfigurationError

        raise ConfigurationError(f"{store.path}: the session store is read-only")
    if not session_id:
        return
    store.token_writer.enqueue(session_id, d)


def flush_token_counts(store: StoreHandle, timeout: float = 5.0) -> bool:
    """Wait until every queued delta of this handle is written (docs/sessions-agent.md §3.1). Returns False on
    timeout; never raises; True at once on the writer thread itself."""
    return store.token_writer.flush(timeout)


def record_auxiliary_usage(store: StoreHandle, session_id: str, task: str, *,
                           model: str | None = None, billing_provider: str | None = None,
                           billing_base_url: str | None = None, input_tokens: int = 0,
                           output_tokens: int = 0, cache_read_tokens: int = 0,
                           cache_write_tokens: int = 0, reasoning_tokens: int = 0,
                           estimated_cost_usd: float | None = None,
                           api_call_count: int | None = 1) -> bool:
    """Record an auxiliary call (vision, compression, title generation, background review …)
    as its own ``task`` usage row, on its own route (never the session's); the session
    counters are not touched. Best effort: any failure is a WARNING and False."""
    if not session_id or not (task or "").strip():
        return False
    try:
        check_texts((("session_id", session_id), ("task", task)))  # NUL: False, nothing written
        d = validate_delta(dict(
            model=model, billing_provider=billing_provider, billing_base_url=billing_base_url,
            input_tokens=input_tokens, output_tokens=output_tokens,
            cache_read_tokens=cache_read_tokens, cache_write_tokens=cache_write_tokens,
            reasoning_tokens=reasoning_tokens, estimated_cost_usd=estimated_cost_usd,
            api_call_count=1 if api_call_count is None else int(api_call_count)))
        owner = store.owner_profile()

        def work(conn: Connection) -> None:
            q = store.backend.sql
            ensure_row(conn, q, session_id, None, owner)
            record_model_usage(conn, for_dialect(q.dialect), session_id, d, task.strip())

        store.backend.write(work)
        return True
    except Exception as exc:  # noqa: BLE001 — an aux call never fails because accounting did
        log.warning("auxiliary usage of session %s (task %r) not recorded: %s", session_id,
                    task, exc)
        return False


def get_dominant_session_model_route(store: StoreHandle, session_id: str) -> ModelRoute | None:
    """The main-loop route that served most calls of ``session_id`` (ties: tokens, recency,
    then route order), ignoring auxiliary, ``unknown`` and provider-less rows; None if none."""
    if not session_id:
        return None
    store.token_writer.flush()
    a = for_dialect(store.backend.dialect)
    row = store.backend.read(lambda c: c.exec_driver_sql(a.DOMINANT_ROUTE, (session_id,)).first())
    return None if row is None else ModelRoute(row[0], row[1], row[2], row[3], int(row[4]))


def usage_totals(store: StoreHandle, *, min_message_count: int = 1,
                 include_archived: bool = False) -> UsageTotals:
    """Tokens (input + output) and cost (actual, else estimated) over root sessions with at
    least ``min_message_count`` messages. Roots only: absolute-mode writers store cumulative
    totals on continuations, which adding would double count."""
    store.token_writer.flush()
    a = for_dialect(store.backend.dialect)
    st = a.USAGE_TOTALS_ALL if include_archived else a.USAGE_TOTALS
    tokens, cost = store.backend.read(
        lambda c: c.exec_driver_sql(st, (int(min_message_count),)).one())
    return UsageTotals(int(tokens or 0), float(cost or 0.0))


def update_session_billing_route(store: StoreHandle, session_id: str, *, provider: str | None,
                                 base_url: str | None, billing_mode: str | None = None) -> None:
    """Set the session's billing provider and base URL (``billing_mode`` only when given);
    the system prompt snapshot is dropped (its footer names the route) and unreferenced
    prompts are removed."""
    from hermes_data.sessions.agent import session_meta

    check_texts((("session_id", session_id), ("provider", provider), ("base_url", base_url),
                 ("billing_mode", billing_mode)))
    if not session_id:
        return
    store.token_writer.flush()
    store.backend.write(lambda c: session_meta.set_billing_route(
        c, store.backend.sql, session_id, provider, base_url, billing_mode))


def ensure_session(store: Any, session_id: str, source: str = "unknown",
                   model: str | None = None, **fields: Any) -> str:
    """``create_session`` under the transcript patience (60 s); a row still at
    ``source='unknown'`` takes a real source while it has no message rows."""
    return store.create_session(session_id, source, model=model, **fields)
