"""Statements of the transcript windows (docs/sessions-ui.md §4.1–§4.4): hit-anchored
windows, bookends, the recent-user list and the PR-URL scan. Every value is bound; the only
variable parts are fixed predicates and the count of bound role/id parameters.

Core constructs over :mod:`hermes_data.sessions.schema`, compiled once per dialect and
variant (:class:`hermes_data.statements.DriverPrepared`, cached per argument tuple).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import sqlalchemy as sa
from sqlalchemy import text

from hermes_data.sessions.schema import messages as m
from hermes_data.sessions.sql.constructs import bp, ci_like, const
from hermes_data.sessions.sql.core import MESSAGE_COLS
from hermes_data.statements import DriverPrepared

#: PostgreSQL: one snapshot for a multi-statement read (first statement of its transaction).
#: Not Core: a transaction-control statement, no table.
PG_SNAPSHOT = text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")


def _cols() -> list[Any]:
    return [m.c[c] for c in MESSAGE_COLS]


def _vis(include_inactive: bool) -> list[Any]:
    # VIS (storage/display_sql.py): active, or preserved by a compaction.
    return [] if include_inactive else [sa.or_(m.c.active == const(1), m.c.compacted == const(1))]


@lru_cache(maxsize=None)
def anchor(include_inactive: bool) -> DriverPrepared:
    """Is :a a row of session :s (visible unless ``include_inactive``)?"""
    return DriverPrepared("view_anchor", lambda: sa.select(m.c.id).where(
        m.c.id == bp("a"), m.c.session_id == bp("s"), *_vis(include_inactive)))


@lru_cache(maxsize=None)
def before(include_inactive: bool) -> DriverPrepared:
    """The anchor and up to :n - 1 rows before it, newest first."""
    return DriverPrepared("view_before", lambda: sa.select(*_cols()).where(
        m.c.session_id == bp("s"), m.c.id <= bp("a"), *_vis(include_inactive),
    ).order_by(m.c.id.desc()).limit(bp("n")))


@lru_cache(maxsize=None)
def after(include_inactive: bool) -> DriverPrepared:
    """Up to :n rows after the anchor, oldest first."""
    return DriverPrepared("view_after", lambda: sa.select(*_cols()).where(
        m.c.session_id == bp("s"), m.c.id > bp("a"), *_vis(include_inactive),
    ).order_by(m.c.id).limit(bp("n")))


def role_params(count: int) -> list[str]:
    """Bound parameter names of a role list."""
    return [f"r{i}" for i in range(count)]


@lru_cache(maxsize=None)
def bookend(include_inactive: bool, roles: int | None, head: bool) -> DriverPrepared:
    """Non-empty rows strictly before :edge (``head``, ascending) or after it (descending),
    with ``roles`` bound role parameters (None: any role)."""
    def build() -> sa.Select:
        conds = [m.c.session_id == bp("s"),
                 m.c.id < bp("edge") if head else m.c.id > bp("edge"),
                 *_vis(include_inactive)]
        if roles is not None:
            conds.append(m.c.role.in_([bp(p) for p in role_params(roles)]))
        conds.append(sa.func.length(m.c.content) > const(0))
        return (sa.select(*_cols()).where(*conds)
                .order_by(m.c.id.asc() if head else m.c.id.desc()).limit(bp("n")))
    return DriverPrepared("view_bookend", build)


@lru_cache(maxsize=None)
def recent_users(include_inactive: bool) -> DriverPrepared:
    """One keyset page of user-originated rows (display kind none, '' or 'steer'), newest
    first, below id :before."""
    def build() -> sa.Select:
        conds = [m.c.session_id == bp("s"), m.c.role == const("user")]
        if not include_inactive:
            conds.append(m.c.active == const(1))
        conds += [sa.or_(m.c.display_kind.is_(None),
                         m.c.display_kind.in_([const(""), const("steer")])),
                  m.c.id < bp("before")]
        return (sa.select(m.c.id, m.c.timestamp, m.c.content).where(*conds)
                .order_by(m.c.id.desc()).limit(bp("n")))
    return DriverPrepared("view_recent_users", build)


#: Tool rows of a list of sessions whose content mentions ``/pull/`` (any case, any
#: ``active``), oldest first (the list spread per call: ``expanded_sql``).
_PR_URLS = DriverPrepared("view_pr_urls", lambda: sa.select(
    m.c.id, m.c.session_id, m.c.content).where(
    m.c.session_id.in_(sa.bindparam("ids", expanding=True)), m.c.role == const("tool"),
    ci_like(m.c.content, const("%/pull/%"))).order_by(m.c.id))


def pr_urls(count: int, d: str) -> str:
    """:data:`_PR_URLS` for ``count`` session ids on dialect ``d`` (driver text)."""
    return _PR_URLS.expanded_sql(d, ("ids",), count)
