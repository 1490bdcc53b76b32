"""Statements of session-store maintenance (docs/sessions.md §7.4–§7.6): the prune/archive
filter, candidate lists and counts, the chunked delete over a temp table of doomed ids,
guard-row fences and the stale-open sweep. Statements are Core constructs compiled once per
dialect (and per filter shape, :class:`PruneWhere`); identifiers come only from the fixed
names here.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any, Callable

import sqlalchemy as sa

from hermes_data.sessions.core.encoding import escape_like
from hermes_data.sessions.core.listing_sql import count_sessions
from hermes_data.sessions.schema import (compression_locks, messages, session_turn_leases,
                                         sessions, system_prompts)
from hermes_data.sessions.sql.constructs import bp, const, dialect_insert, json_marker
from hermes_data.sessions.sql.dialect import Statements, driver_statement
from hermes_data.statements import DriverPrepared
from hermes_data.sessions.sql.predicates import last_active_of

#: What the sweep writes as the end reason of a stale open automation session.
SWEEP_END_REASON = "startup_orphan_reap"
#: Automation sources whose stale open rows the auto-maintenance sweep may close.
SWEEPABLE_SOURCES = ("cli", "cron", "kanban", "acp", "api_server", "subagent", "tool")


def _activity(s: Any) -> Any:
    # Last message time, else the start.
    m = messages.alias("m")
    newest = sa.select(sa.func.max(m.c.timestamp)).where(m.c.session_id == s.c.id)
    return sa.func.coalesce(newest.scalar_subquery(), s.c.started_at)


#: Columns of the range filters: ``min_<key>`` / ``max_<key>`` bound ``expr >= / <=``.
_RANGES: dict[str, Callable[[Any], Any]] = {
    "messages": lambda s: sa.func.coalesce(s.c.message_count, const(0)),
    "tokens": lambda s: sa.func.coalesce(s.c.input_tokens, const(0))
    + sa.func.coalesce(s.c.output_tokens, const(0)),
    "cost": lambda s: sa.func.coalesce(s.c.actual_cost_usd, s.c.estimated_cost_usd, const(0)),
    "tool_calls": lambda s: sa.func.coalesce(s.c.tool_call_count, const(0)),
}


@dataclass(frozen=True)
class PruneWhere:
    """The shape of a prune/archive filter over alias ``s``: which clauses, in order (each
    binds the parameters of its name), and whether it is the open twin. Hashable: a shape's
    statements are built and compiled once per dialect."""

    terms: tuple[str, ...]
    open: bool = False

    def conditions(self, s: Any) -> list[Any]:
        """The clauses over ``s``, the ended guard first (only ended sessions are ever
        deleted; the open twin has ``ended_at IS NULL`` there instead)."""
        conds = [s.c.ended_at.is_(None) if self.open else s.c.ended_at.is_not(None)]
        blank = const("")
        for t in self.terms:
            if t == "last_active_before":
                conds.append(sa.and_(_activity(s) < bp("la_before"), sa.or_(
                    sa.func.coalesce(s.c.end_reason, blank) != const(SWEEP_END_REASON),
                    s.c.ended_at < bp("la_before"))))
            elif t == "last_active_after":
                conds.append(_activity(s) >= bp("la_after"))
            elif t == "started_before":
                conds.append(s.c.started_at < bp(t))
            elif t == "started_after":
                conds.append(s.c.started_at >= bp(t))
            elif t == "provider":
                conds.append(sa.func.lower(sa.func.coalesce(s.c.billing_provider, blank))
                             == sa.func.lower(bp("provider")))
            elif t in _LIKE_COLUMNS:
                conds.append(sa.func.lower(sa.func.coalesce(s.c[_LIKE_COLUMNS[t]], blank))
                             .like(bp(t), escape="\\"))
            elif t == "cwd_prefix":
                conds.append(sa.or_(s.c.cwd == bp("cwd"),
                                    s.c.cwd.like(bp("cwd_child"), escape="\\"),
                                    s.c.cwd.like(bp("cwd_winchild"), escape="\\")))
            elif t == "archived":
                conds.append(s.c.archived == bp("archived"))
            elif t == "unpinned":
                conds.append(sa.func.coalesce(s.c.pinned, const(0)) == const(0))
            elif t.startswith(("min_", "max_")):
                expr = _RANGES[t[4:]](s)
                conds.append(expr >= bp(t) if t.startswith("min_") else expr <= bp(t))
            else:  # an equality filter on its own column
                conds.append(s.c[t] == bp(t))
        return conds


#: The substring filters and their columns (matched lower-cased).
_LIKE_COLUMNS = {"title_like": "title", "model_like": "model", "branch_like": "git_branch"}


def prune_where(**filters: Any) -> tuple[PruneWhere, dict[str, Any]]:
    """The prune/archive filter over alias ``s`` (its shape, :class:`PruneWhere`) and its
    parameters (docs/sessions.md §7.5).

    Always starts with the ended guard. Unknown filter names raise ``TypeError`` (as an
    unexpected keyword argument does; upstream's raised it there). As upstream's: an empty
    text filter (``source=""``) filters nothing, and ``archived`` filters only when it is
    ``True`` or ``False`` itself (None or any other value: both).
    """
    terms: list[str] = []
    params: dict[str, Any] = {}
    f = dict(filters)

    def take(name: str) -> Any:
        return f.pop(name, None)

    v = take("last_active_before")
    if v is not None:
        terms.append("last_active_before")
        params["la_before"] = float(v)
    v = take("last_active_after")
    if v is not None:
        terms.append("last_active_after")
        params["la_after"] = float(v)
    for name in ("started_before", "started_after"):
        v = take(name)
        if v is not None:
            terms.append(name)
            params[name] = float(v)
    for col in ("source", "end_reason", "user_id", "chat_id", "chat_type"):
        v = take(col)
        if v:
            terms.append(col)
            params[col] = v
    v = take("provider")
    if v:
        terms.append("provider")
        params["provider"] = v
    for name in _LIKE_COLUMNS:
        v = take(name)
        if v:
            terms.append(name)
            params[name] = "%" + escape_like(str(v).lower()) + "%"
    v = take("cwd_prefix")
    if v:
        p = v.rstrip("/\\") or v
        terms.append("cwd_prefix")
        params.update(cwd=p, cwd_child=escape_like(p) + "/%",
                      cwd_winchild=escape_like(p) + "\\\\%")
    for key in _RANGES:
        for bound in ("min", "max"):
            v = take(f"{bound}_{key}")
            if v is not None:
                terms.append(f"{bound}_{key}")
                params[f"{bound}_{key}"] = v
    archived = take("archived")
    if archived is True or archived is False:
        terms.append("archived")
        params["archived"] = int(archived)
    if not take("include_pinned"):
        terms.append("unpinned")
    if f:
        raise TypeError(f"unknown prune filter(s): {', '.join(sorted(f))}")
    return PruneWhere(tuple(terms)), params


def open_twin(where: PruneWhere) -> PruneWhere:
    """The same filter over *open* sessions (for "N open sessions were spared")."""
    return replace(where, open=True)


@lru_cache(maxsize=128)
def prune_candidates(where: PruneWhere) -> DriverPrepared:
    """Dry-run rows of a prune, least recently active first."""
    def build() -> Any:
        s = sessions.alias("s")
        la = last_active_of(s).label("la")
        return (sa.select(s.c.id, s.c.source, s.c.title, s.c.model, s.c.started_at, la,
                          s.c.ended_at, sa.func.coalesce(s.c.message_count, const(0)),
                          s.c.archived)
                .where(*where.conditions(s)).order_by(la.asc(), s.c.started_at.asc()))
    return DriverPrepared("prune_candidates", build)


#: Sessions the prune filter matches (the listing's count over a ``PruneWhere``).
count_matches = count_sessions


@lru_cache(maxsize=128)
def still_matching(where: PruneWhere) -> DriverPrepared:
    """Which of a step's ids (the expanding list ``step_ids``) the filter still matches:
    a paced prune re-checks each step inside its write transaction (a session resumed
    or pinned since the plan was read is spared)."""
    def build() -> Any:
        s = sessions.alias("s")
        return sa.select(s.c.id).where(*where.conditions(s),
                                       s.c.id.in_(sa.bindparam("step_ids", expanding=True)))
    return DriverPrepared("prune_still_matching", build)


def doomed_table(dialect: str) -> str:
    """The temp table of doomed ids, schema-qualified per dialect."""
    return "pg_temp.doomed" if dialect == "postgresql" else "temp.doomed"


def _doomed(d: str) -> Any:
    # The per-connection temp table of doomed ids: created by CREATE_DOOMED, never part of the
    # metadata (a temp object), so a lightweight table clause schema-qualified per dialect.
    schema, _, name = doomed_table(d).partition(".")
    return sa.table(name, sa.column("id"), schema=schema)


class MaintenanceStatements(Statements):
    """The maintenance driver statements of one dialect (Core constructs compiled on first
    access; callers pass positional tuples in each statement's declared order)."""

    #: The temp table of doomed ids (per connection; kept between runs, emptied first).
    CREATE_DOOMED = "CREATE TEMP TABLE IF NOT EXISTS doomed (id TEXT PRIMARY KEY)"
    #: Empty it.
    CLEAR_DOOMED = driver_statement(lambda d: sa.delete(_doomed(d)))
    #: Fill it (executemany).
    ADD_DOOMED = driver_statement(lambda d: dialect_insert(d)(_doomed(d)).values(
        id=bp("id")).on_conflict_do_nothing(), "id")
    #: Claim the next chunk of doomed ids above the high-water mark.
    NEXT_DOOMED = driver_statement(lambda d: (lambda t: sa.select(t.c.id).where(
        t.c.id > bp("hwm")).order_by(t.c.id).limit(bp("n")))(_doomed(d)), "hwm", "n")
    #: Prompts no session references any more.
    DROP_UNUSED_PROMPTS = driver_statement(lambda d: sa.delete(system_prompts).where(
        ~sa.select(const(1)).where(_S.c.system_prompt_hash == system_prompts.c.hash).exists()))
    #: Live compression locks and turn leases (expires_at > now).
    LIVE_LOCKS = driver_statement(lambda d: sa.select(
        compression_locks.c.session_id, compression_locks.c.holder).where(
        compression_locks.c.expires_at > bp("now")), "now")
    LIVE_LEASES = driver_statement(lambda d: sa.select(
        session_turn_leases.c.conversation_id, session_turn_leases.c.holder).where(
        session_turn_leases.c.expires_at > bp("now")), "now")

    def delete_chunk(self, n: int) -> tuple[str, str, str, str]:
        """Orphan children, delete messages, detach and delete ``n`` sessions (ids bound
        positionally; the first statement binds them twice)."""
        return _delete_chunk(self.dialect, n)

    def fence_guards(self, n: int) -> tuple[str, str]:
        """Delete the compression locks and turn leases of ``n`` doomed sessions."""
        return _fence_guards(self.dialect, n)

    def delegates_of(self, n: int) -> str:
        """Delegate children of ``n`` sessions (by marker, or by parent with any marker;
        the ids bound twice)."""
        return _delegates_of(self.dialect, n)


#: ``sessions`` as ``s`` (the alias the correlated prompt check names).
_S: Any = sessions.alias("s")


def _ids(name: str) -> Any:
    # An IN list spread per call (Prepared.expanded_sql): compiled once whatever its length.
    return sa.bindparam(name, expanding=True)


_S_ALL = sessions
#: The chunked delete (its lists spread per chunk length): orphan the chunk's children outside
#: it, delete its messages, detach and delete its sessions.
_DELETE_CHUNK = (
    (DriverPrepared("orphan_children", lambda: sa.update(_S_ALL).values(
        parent_session_id=sa.null()).where(_S_ALL.c.parent_session_id.in_(_ids("ids")),
                                           _S_ALL.c.id.not_in(_ids("again")))),
     ("ids", "again")),
    (DriverPrepared("delete_messages", lambda: sa.delete(messages).where(
        messages.c.session_id.in_(_ids("ids")))), ("ids",)),
    (DriverPrepared("detach_sessions", lambda: sa.update(_S_ALL).values(
        parent_session_id=sa.null()).where(_S_ALL.c.id.in_(_ids("ids")))), ("ids",)),
    (DriverPrepared("delete_sessions", lambda: sa.delete(_S_ALL).where(
        _S_ALL.c.id.in_(_ids("ids")))), ("ids",)))


def _delete_chunk(d: str, n: int) -> tuple[str, str, str, str]:
    return tuple(p.expanded_sql(d, o, n) for p, o in _DELETE_CHUNK)  # type: ignore[return-value]


_MARK = json_marker(_S_ALL.c.model_config, "_delegate_from")
#: Delegate runs of a list of sessions: by marker, or by parent with a marker.
_DELEGATES_OF = DriverPrepared("delegates_of", lambda: sa.select(_S_ALL.c.id).where(sa.or_(
    _MARK.in_(_ids("ids")), sa.and_(_S_ALL.c.parent_session_id.in_(_ids("again")),
                                    _MARK.is_not(None)))))


def _delegates_of(d: str, n: int) -> str:
    return _DELEGATES_OF.expanded_sql(d, ("ids", "again"), n)


_FENCE_GUARDS = (
    DriverPrepared("fence_locks", lambda: sa.delete(compression_locks).where(
        compression_locks.c.session_id.in_(_ids("ids")))),
    DriverPrepared("fence_leases", lambda: sa.delete(session_turn_leases).where(
        session_turn_leases.c.conversation_id.in_(_ids("ids")))))


def _fence_guards(d: str, n: int) -> tuple[str, str]:
    locks, leases = (p.expanded_sql(d, ("ids",), n) for p in _FENCE_GUARDS)
    return locks, leases


#: Conversations holding a live turn lease (:now).
LIVE_LEASE_CONVERSATIONS = DriverPrepared(
    "live_lease_conversations", lambda: sa.select(session_turn_leases.c.conversation_id)
    .where(session_turn_leases.c.expires_at > bp("now")))


#: Copy the whole database into a new file (a consistent backup; SQLite).
VACUUM_INTO = "VACUUM INTO ?"
