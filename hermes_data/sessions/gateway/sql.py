"""Statements of the gateway family (docs/sessions-gateway.md §3.1, §3.2, §3.6, §3.7):
the routing index, hygiene streaks, handoff transitions and backend heartbeats.

No SQLite statement here uses ``RETURNING`` (absent below SQLite 3.35); PostgreSQL may
(amendment A6). ``MAX(a, b)`` is ``GREATEST`` there.

Core constructs over :mod:`hermes_data.sessions.schema`, compiled once per dialect
(:class:`hermes_data.sessions.sql.dialect.driver_statement`, or a
:class:`hermes_data.statements.DriverPrepared` per bound-list length); callers pass
positional tuples in each statement's declared order. ``with_for_update()`` renders
nothing on SQLite.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import sqlalchemy as sa

from hermes_data.sessions.schema import (gateway_heartbeats, gateway_hygiene_state,
                                         gateway_routing, messages, sessions)
from hermes_data.sessions.sql.constructs import bp, const, dialect_insert
from hermes_data.sessions.sql.core import session_row_select
from hermes_data.sessions.sql.dialect import Statements, driver_statement
from hermes_data.statements import DriverPrepared

#: Ids or keys per ``IN (…)`` list (SQLite's old 999-variable ceiling; spec behaviour 42).
CHUNK = 900

_rt, _hy, _hb, _ss = gateway_routing, gateway_hygiene_state, gateway_heartbeats, sessions
_ROUTING_ORDER = ("scope", "key", "entry", "at")
_HANDOFF_COLS = ("handoff_state", "handoff_platform", "handoff_error", "handoff_requested_at",
                 "handoff_claimed_by", "handoff_claimed_at")


def _routing_insert(d: str) -> Any:
    return dialect_insert(d)(_rt).values(scope=bp("scope"), session_key=bp("key"),
                                          entry_json=bp("entry"), updated_at=bp("at"))


def _routing_upsert(d: str) -> Any:
    ins = _routing_insert(d)
    return ins.on_conflict_do_update(index_elements=[_rt.c.scope, _rt.c.session_key], set_={
        "entry_json": ins.excluded.entry_json, "updated_at": ins.excluded.updated_at})


def _routing_load(d: str) -> sa.Select:
    # Byte order on both dialects (PostgreSQL's default collation is not SQLite's).
    key = _rt.c.session_key.collate("C") if d == "postgresql" else _rt.c.session_key
    return sa.select(_rt.c.session_key, _rt.c.entry_json).where(
        _rt.c.scope == bp("scope")).order_by(key)


def _hygiene_bump(d: str) -> Any:
    ins = dialect_insert(d)(_hy).values(session_key=bp("key"), failure_streak=const(1))
    up = ins.on_conflict_do_update(index_elements=[_hy.c.session_key], set_={
        "failure_streak": _hy.c.failure_streak + const(1)})
    return up.returning(_hy.c.failure_streak) if d == "postgresql" else up


def _hb_upsert(d: str) -> Any:
    ins = dialect_insert(d)(_hb).values(backend_id=bp("id"), pid=bp("pid"),
                                         started_at=bp("start"), last_heartbeat=bp("hb"),
                                         profile=bp("profile"), host=bp("host"))
    x = ins.excluded
    greatest = sa.func.greatest if d == "postgresql" else sa.func.max
    beat = sa.case((sa.and_(_hb.c.pid == x.pid, _hb.c.started_at == x.started_at),
                    greatest(_hb.c.last_heartbeat, x.last_heartbeat)),
                   else_=x.last_heartbeat)
    return ins.on_conflict_do_update(index_elements=[_hb.c.backend_id], set_={
        "last_heartbeat": beat, "pid": x.pid, "started_at": x.started_at,
        "profile": x.profile, "host": x.host})


def _hb_prune(d: str) -> Any:
    stmt = sa.delete(_hb).where(_hb.c.last_heartbeat < bp("cutoff"))
    return stmt.returning(_hb.c.backend_id) if d == "postgresql" else stmt


def _handoff_state(locked: bool) -> Any:
    def build(d: str) -> sa.Select:
        stmt = sa.select(*[_ss.c[c] for c in _HANDOFF_COLS]).where(_ss.c.id == bp("id"))
        return stmt.with_for_update() if locked else stmt
    return driver_statement(build, "id")


def _state_is(state: str) -> Any:
    return _ss.c.handoff_state == const(state)


def _set_state(state: str, *more: tuple[Any, Any]) -> sa.Update:
    return sa.update(_ss).ordered_values((_ss.c.handoff_state, const(state)), *more)


def _handoff_complete(by: bool) -> Any:
    return driver_statement(lambda d: _set_state(
        "completed", (_ss.c.handoff_error, sa.null())).where(
        _ss.c.id == bp("id"), _state_is("running"),
        *([_ss.c.handoff_claimed_by == bp("by")] if by else [])),
        "id", *(("by",) if by else ()))


class GatewayStatements(Statements):
    """The gateway statements of one dialect (Core constructs, compiled on first use)."""

    #: A4: the first row of a session holding a platform message id (any ``active``).
    PMID_SEEK = driver_statement(lambda d: sa.select(messages.c.id).where(
        messages.c.session_id == bp("sid"), messages.c.platform_message_id == bp("pmid"))
        .order_by(messages.c.id).limit(const(1)), "sid", "pmid")

    # -- routing index (docs/sessions-gateway.md §3.1)
    ROUTING_UPSERT = driver_statement(_routing_upsert, *_ROUTING_ORDER)
    ROUTING_INSERT_NEW = driver_statement(lambda d: _routing_insert(d).on_conflict_do_nothing(
        index_elements=[_rt.c.scope, _rt.c.session_key]), *_ROUTING_ORDER)
    ROUTING_INSERT = driver_statement(lambda d: sa.insert(_rt).values(
        scope=bp("scope"), session_key=bp("key"), entry_json=bp("entry"),
        updated_at=bp("at")), *_ROUTING_ORDER)
    #: Compare-and-set on the stored entry (``if_current``).
    ROUTING_CAS = driver_statement(lambda d: sa.update(_rt).ordered_values(
        (_rt.c.entry_json, bp("entry")), (_rt.c.updated_at, bp("at"))).where(
        _rt.c.scope == bp("scope"), _rt.c.session_key == bp("key"),
        _rt.c.entry_json == bp("current")), "entry", "at", "scope", "key", "current")
    ROUTING_GET = driver_statement(lambda d: sa.select(_rt.c.entry_json).where(
        _rt.c.scope == bp("scope"), _rt.c.session_key == bp("key")), "scope", "key")
    ROUTING_LOAD = driver_statement(_routing_load, "scope")
    ROUTING_CLEAR_SCOPE = driver_statement(lambda d: sa.delete(_rt).where(
        _rt.c.scope == bp("scope")), "scope")

    # -- hygiene (docs/sessions-gateway.md §3.2)
    HYGIENE_BUMP = driver_statement(_hygiene_bump, "key")
    HYGIENE_GET = driver_statement(lambda d: sa.select(_hy.c.failure_streak).where(
        _hy.c.session_key == bp("key")), "key")
    HYGIENE_RESET = driver_statement(lambda d: sa.delete(_hy).where(
        _hy.c.session_key == bp("key")), "key")

    # -- heartbeats (docs/sessions-gateway.md §3.7)
    HB_UPSERT = driver_statement(_hb_upsert, "id", "pid", "start", "hb", "profile", "host")
    HB_DELETE = driver_statement(lambda d: sa.delete(_hb).where(_hb.c.backend_id == bp("id")),
                                 "id")
    HB_STALE = driver_statement(lambda d: sa.select(_hb.c.backend_id).where(
        _hb.c.last_heartbeat < bp("cutoff")).order_by(_hb.c.backend_id), "cutoff")
    HB_PRUNE = driver_statement(_hb_prune, "cutoff")
    HB_LIST = driver_statement(lambda d: sa.select(
        _hb.c.backend_id, _hb.c.pid, _hb.c.started_at, _hb.c.last_heartbeat, _hb.c.profile,
        _hb.c.host).order_by(_hb.c.last_heartbeat.desc(), _hb.c.backend_id))
    #: Backends whose heartbeat is at least as new as the cutoff.
    HB_FRESH = driver_statement(lambda d: sa.select(_hb.c.backend_id).where(
        _hb.c.last_heartbeat >= bp("cutoff")), "cutoff")

    # -- handoffs (docs/sessions-gateway.md §3.6): each transition one conditional UPDATE
    HANDOFF_STATE = _handoff_state(locked=False)
    HANDOFF_STATE_LOCKED = _handoff_state(locked=True)
    HANDOFF_REQUEST = driver_statement(lambda d: _set_state(
        "pending", (_ss.c.handoff_platform, bp("platform")), (_ss.c.handoff_error, sa.null()),
        (_ss.c.handoff_requested_at, bp("at")), (_ss.c.handoff_claimed_by, sa.null()),
        (_ss.c.handoff_claimed_at, sa.null())).where(
        _ss.c.id == bp("id"), sa.or_(_ss.c.handoff_state.is_(None), _ss.c.handoff_state.in_(
            [const("completed"), const("failed")]))), "platform", "at", "id")
    HANDOFF_CLAIM = driver_statement(lambda d: _set_state(
        "running", (_ss.c.handoff_claimed_by, bp("by")), (_ss.c.handoff_claimed_at, bp("at")))
        .where(_ss.c.id == bp("id"), _state_is("pending")), "by", "at", "id")
    HANDOFF_COMPLETE = _handoff_complete(by=False)
    HANDOFF_COMPLETE_BY = _handoff_complete(by=True)
    HANDOFF_FAIL_BY = driver_statement(lambda d: _set_state(
        "failed", (_ss.c.handoff_error, bp("error"))).where(
        _ss.c.id == bp("id"), _state_is("running"), _ss.c.handoff_claimed_by == bp("by")),
        "error", "id", "by")
    #: Running handoffs not claimed by the caller (reclaim candidates), locked on PG.
    HANDOFF_RUNNING_OTHERS = driver_statement(lambda d: sa.select(
        _ss.c.id, _ss.c.handoff_claimed_by, _ss.c.handoff_claimed_at).where(
        _state_is("running"), sa.or_(_ss.c.handoff_claimed_by.is_(None),
                                     _ss.c.handoff_claimed_by != bp("by")))
        .order_by(_ss.c.id).with_for_update(), "by")
    HANDOFF_RUNNING_IDS = driver_statement(lambda d: sa.select(_ss.c.id).where(
        _state_is("running")).order_by(_ss.c.id).with_for_update())

    def handoff_fail_from(self, states: tuple[str, ...]) -> str:
        """Fail a handoff in one of ``states`` (fixed names, never input)."""
        return _handoff_fail_from(self.dialect, tuple(states))

    def handoff_reclaim(self, n: int) -> str:
        """Fail ``n`` running handoffs by id."""
        return _handoff_reclaim(self.dialect, n)

    def pending_handoffs(self, n_platforms: int | None) -> str:
        """Pending handoff rows, FIFO by request (optionally of ``n_platforms`` platforms)."""
        return _pending_handoffs(self.dialect, n_platforms)

    def routing_delete(self, n: int) -> str:
        """Delete ``n`` keys of one scope."""
        return _routing_delete(self.dialect, n)


def _ids(n: int, prefix: str = "i") -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


# The variable statements: one construct per shape, its compiled string cached per dialect
# (the parameter order checked once, on compilation).

@lru_cache(maxsize=256)
def _handoff_fail_from(d: str, states: tuple[str, ...]) -> str:
    return DriverPrepared("handoff_fail_from", lambda: _set_state(
        "failed", (_ss.c.handoff_error, bp("error"))).where(
        _ss.c.id == bp("id"), _ss.c.handoff_state.in_([const(s) for s in states])),
    ).positional_sql(d, ("error", "id"))


_HANDOFF_RECLAIM = DriverPrepared("handoff_reclaim", lambda: _set_state(
    "failed", (_ss.c.handoff_error, bp("error"))).where(
    _state_is("running"), _ss.c.id.in_(sa.bindparam("ids", expanding=True))))


def _handoff_reclaim(d: str, n: int) -> str:
    return _HANDOFF_RECLAIM.expanded_sql(d, ("error", "ids"), n)


@lru_cache(maxsize=256)
def _pending_handoffs(d: str, n_platforms: int | None) -> str:
    def build() -> sa.Select:
        s = _ss.alias("s")
        conds = [s.c.handoff_state == const("pending")]
        if n_platforms is not None:
            conds.append(sa.func.lower(s.c.handoff_platform).in_(
                [bp(p) for p in _ids(n_platforms, "p")]))
        return session_row_select(s).where(*conds).order_by(
            sa.func.coalesce(s.c.handoff_requested_at, s.c.started_at), s.c.id)
    return DriverPrepared("pending_handoffs", build).positional_sql(
        d, tuple(_ids(n_platforms or 0, "p")))


_ROUTING_DELETE = DriverPrepared("routing_delete", lambda: sa.delete(_rt).where(
    _rt.c.scope == bp("scope"), _rt.c.session_key.in_(sa.bindparam("keys", expanding=True))))


def _routing_delete(d: str, n: int) -> str:
    return _ROUTING_DELETE.expanded_sql(d, ("scope", "keys"), n)


#: The GatewayStatements of a dialect (built once per process).
for_dialect = GatewayStatements.for_dialect
