"""Statements of gateway peer recovery (docs/sessions-gateway.md §3.3).

Over a session row ``s``: ``RECOVERABLE(s)``, ``ACT(s)`` = ``COALESCE(LAST_ACTIVE(s),
s.started_at)``, ``HAS_MSG(s)`` and the reset fence ``FENCED(s, PEER)`` — a peer row ended
at a reset boundary after ``s``'s last activity fences ``s``, except its own parent when
``s`` is that parent's reset child.

Core constructs over :mod:`hermes_data.sessions.schema` (the kit predicates' Core twins from
:mod:`hermes_data.sessions.sql.predicates`), compiled once per dialect and variant; callers
pass positional tuples in each statement's declared order.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import sqlalchemy as sa

from hermes_data.sessions.agent.identity_sql import RECOVERABLE_END_REASONS
from hermes_data.sessions.sql.core import session_row_select
from hermes_data.sessions.schema import messages, sessions
from hermes_data.sessions.sql.constructs import bp, const, dialect_insert, unindexed
from hermes_data.sessions.sql.dialect import Statements, driver_statement
from hermes_data.sessions.sql.predicates import (RESET_END_REASONS, edge_of, last_active_of,
                                                 reset_child_of)
from hermes_data.statements import DriverPrepared

_TUPLE = ("user_id", "chat_id", "chat_type", "thread_id")
_BLANK = const("")


def act(s: Any) -> Any:
    """ACT(s): last activity, else start (``s`` an alias of ``sessions``)."""
    return sa.func.coalesce(last_active_of(s), s.c.started_at)


def has_msg(s: Any) -> Any:
    """HAS_MSG(s) as 1/0 (orderable on both dialects)."""
    hm = messages.alias("hm")
    return sa.case((sa.or_(sa.func.coalesce(s.c.message_count, const(0)) > const(0),
                           sa.select(const(1)).where(hm.c.session_id == s.c.id).exists()),
                    const(1)), else_=const(0))


def recoverable(s: Any) -> Any:
    """RECOVERABLE(s): open, or ended with a recoverable reason."""
    return sa.or_(s.c.ended_at.is_(None),
                  s.c.end_reason.in_([const(r) for r in RECOVERABLE_END_REASONS]))


def _fence(s: Any, fb: Any, match: list[Any]) -> Any:
    # FENCED(s, PEER): a peer ``fb`` (``match``) ended at a reset boundary after ACT(s),
    # unless ``s`` is the reset child of that very row.
    return sa.select(const(1)).where(
        *match, fb.c.ended_at.is_not(None),
        fb.c.end_reason.in_([const(r) for r in RESET_END_REASONS]), fb.c.ended_at > act(s),
        sa.not_(sa.and_(sa.func.coalesce(s.c.parent_session_id, _BLANK) == fb.c.id,
                        reset_child_of(s)))).exists()


def _by_key(d: str) -> sa.Select:
    s = sessions.alias("s")
    fb = sessions.alias("fb")
    fence = _fence(s, fb, [fb.c.session_key == s.c.session_key,
                           unindexed(fb.c.source) == s.c.source])
    return session_row_select(s).where(
        s.c.session_key == bp("key"), unindexed(s.c.source) == bp("source"), recoverable(s),
        sa.not_(fence)).order_by(has_msg(s).desc(), act(s).desc(), s.c.started_at.desc(),
                                 s.c.id.desc()).limit(const(1))


def _target(d: str) -> sa.Select:
    s = sessions.alias("s")
    return sa.select(s.c.source, has_msg(s)).where(s.c.id == bp("id")).with_for_update()


def _edge_parent(d: str) -> sa.Select:
    c, p = sessions.alias("c"), sessions.alias("p")
    return sa.select(p.c.id).select_from(c.join(p, p.c.id == c.c.parent_session_id)).where(
        c.c.id == bp("id"), edge_of(p, c))


_STAMPED = ("source", "session_key", "user_id", "chat_id", "chat_type", "thread_id")


def _stamp(d: str) -> sa.Update:
    t = sessions
    return sa.update(t).ordered_values(
        *[(t.c[c], bp(c)) for c in _STAMPED],
        (t.c.display_name, sa.func.coalesce(bp("display_name"), t.c.display_name)),
        (t.c.origin_json, sa.func.coalesce(bp("origin_json"), t.c.origin_json)),
    ).where(t.c.id == bp("id"))


_CREATED = ("id", "source", "session_key", "user_id", "chat_id", "chat_type", "thread_id",
            "display_name", "origin_json", "profile_name", "started_at")
_FILLED = ("session_key", "user_id", "chat_id", "chat_type", "thread_id", "display_name",
           "origin_json")


def _create(d: str) -> Any:
    # An INSERT compiles its columns in the table's order; callers bind them in _CREATED's,
    # so the statement names the ``sessions`` columns it writes in that order (a table
    # clause of the schema's own columns — name and type).
    t = sa.table(sessions.name, *[sa.column(c, sessions.c[c].type) for c in _CREATED])
    ins = dialect_insert(d)(t).values({c: bp(c) for c in _CREATED})
    return ins.on_conflict_do_update(index_elements=[t.c.id], set_={
        c: sa.func.coalesce(t.c[c], ins.excluded[c]) for c in _FILLED})


def _by_origin(thread: bool) -> Any:
    def build(d: str) -> sa.Select:
        t = sessions
        conds = [sa.func.lower(t.c.source) == sa.func.lower(bp("platform")),
                 t.c.session_key.is_not(None), t.c.chat_id == bp("chat"), t.c.ended_at.is_(None)]
        if thread:
            conds.append(sa.func.coalesce(t.c.thread_id, _BLANK) == bp("thread"))
        return sa.select(t.c.id, t.c.user_id).where(*conds).order_by(
            t.c.started_at.desc(), t.c.id.desc())
    return driver_statement(build, "platform", "chat", *(("thread",) if thread else ()))


class PeerStatements(Statements):
    """The peer-recovery statements of one dialect (Core constructs, compiled on first use)."""

    #: Exact-key recovery (step 1).
    BY_KEY = driver_statement(_by_key, "key", "source")
    #: A recording target: its source and whether it has messages (locked on PG).
    TARGET = driver_statement(_target, "id")
    #: The compression parent of a segment (one EDGE hop up).
    EDGE_PARENT = driver_statement(_edge_parent, "id")
    #: Stamp the routing identity on an existing row.
    STAMP = driver_statement(_stamp, *_STAMPED, "display_name", "origin_json", "id")
    #: Create a missing row (a racing create_session may win: fill its NULL columns).
    CREATE = driver_statement(_create, *_CREATED)
    #: Open keyed rows of one chat (optionally one thread), newest first.
    BY_ORIGIN = _by_origin(thread=False)
    BY_ORIGIN_THREAD = _by_origin(thread=True)

    def by_tuple(self, present: tuple[bool, ...], owned: bool) -> str:
        """Tuple fallback (step 2), without / with the owner-profile fence.

        ``present[i]``: whether the i-th of user, chat, chat type, thread is non-blank.
        A non-blank value is matched by plain equality so ``idx_sessions_gateway_peer``
        serves the lookup (``COALESCE(col, '') = ?`` would scan every row of the source); a
        blank one matches NULL or ''. The reset fence compares its peers with the same bound
        values (the candidate's own tuple equals them), so it is an index search too.
        Parameters: ``source``, the non-blank values, [``owner``, ``owner``], ``source``,
        the non-blank values (:func:`tuple_params`)."""
        return _by_tuple(self.dialect, tuple(present), owned)

    def gateway_sessions(self, platform: bool, active_only: bool) -> str:
        """One live mapping per ``(source, session_key)``: its newest row."""
        return _gateway_sessions(self.dialect, platform, active_only)


def _tuple_match(alias: Any, present: tuple[bool, ...]) -> list[Any]:
    return [alias.c.source == bp("source")] + [
        alias.c[c] == bp(c) if on else sa.func.coalesce(alias.c[c], _BLANK) == _BLANK
        for c, on in zip(_TUPLE, present)]


@lru_cache(maxsize=None)
def _by_tuple(d: str, present: tuple[bool, ...], owned: bool) -> str:
    if len(present) != len(_TUPLE):
        raise ValueError(f"present must flag {len(_TUPLE)} tuple columns, got {present!r}")

    def build() -> sa.Select:
        s = sessions.alias("s")
        fb = sessions.alias("fb")
        conds = [*_tuple_match(s, present), has_msg(s) == const(1), recoverable(s)]
        if owned:
            conds.append(sa.func.coalesce(s.c.profile_name, bp("owner")) == bp("owner"))
        conds.append(sa.not_(_fence(s, fb, _tuple_match(fb, present))))
        return session_row_select(s).where(*conds).order_by(
            act(s).desc(), s.c.started_at.desc(), s.c.id.desc()).limit(const(1))
    given = tuple(c for c, on in zip(_TUPLE, present) if on)
    order = ("source", *given, *(("owner", "owner") if owned else ()), "source", *given)
    return DriverPrepared("peer_by_tuple", build).positional_sql(d, order)


@lru_cache(maxsize=None)
def _gateway_sessions(d: str, platform: bool, active_only: bool) -> str:
    def build() -> sa.Select:
        s = sessions.alias("s")
        n = sessions.alias("n")
        newest = sa.select(const(1)).where(
            n.c.source == s.c.source, n.c.session_key == s.c.session_key,
            sa.or_(n.c.started_at > s.c.started_at,
                   sa.and_(n.c.started_at == s.c.started_at, n.c.id > s.c.id))).exists()
        la = last_active_of(s).label("la")
        conds = [s.c.session_key.is_not(None), sa.not_(newest)]
        if platform:
            conds.append(sa.func.lower(s.c.source) == sa.func.lower(bp("platform")))
        if active_only:
            conds.append(s.c.ended_at.is_(None))
        recent = la.desc().nulls_last() if d == "postgresql" else la.desc()
        return session_row_select(s).add_columns(la).where(*conds).order_by(recent, s.c.id)
    return DriverPrepared("gateway_sessions", build).positional_sql(
        d, ("platform",) if platform else ())


def tuple_params(source: str, values: tuple[str, ...],
                 owner: str | None) -> tuple[tuple[bool, ...], tuple[str, ...]]:
    """``(present, params)`` of :meth:`PeerStatements.by_tuple` for the tuple ``values``
    (strings, ``''`` for a missing value) and the owner profile (None: unfenced)."""
    present = tuple(v != "" for v in values)
    given = tuple(v for v in values if v != "")
    mid = () if owner is None else (owner, owner)
    return present, (source, *given, *mid, source, *given)


#: The PeerStatements of a dialect (built once per process).
for_dialect = PeerStatements.for_dialect
