"""Statements of session-store maintenance (docs/sessions.md §7.4–§7.6): the prune/archive
filter, candidate lists and counts, the chunked delete over a temp table of doomed ids,
guard-row fences and the stale-open sweep. Driver statements are rendered per dialect
(:class:`~hermes_data.sessions.sql.dialect.Statements`); identifiers come only from the
fixed names here.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Callable

import sqlalchemy as sa
from sqlalchemy import text
from sqlalchemy.sql.elements import TextClause

from hermes_data.sessions.core.encoding import escape_like
from hermes_data.sessions.schema import (compression_locks, messages, session_turn_leases,
                                         sessions, system_prompts)
from hermes_data.sessions.sql.constructs import bp, const, dialect_insert
from hermes_data.sessions.sql.dialect import Statements, driver_statement, marks
from hermes_data.statements import DriverPrepared
from hermes_data.sessions.sql.predicates import last_active

#: The first clause of every prune filter: only ended sessions are ever deleted.
ENDED_GUARD = "s.ended_at IS NOT NULL"
#: What the sweep writes as the end reason of a stale open automation session.
SWEEP_END_REASON = "startup_orphan_reap"
#: Automation sources whose stale open rows the auto-maintenance sweep may close.
SWEEPABLE_SOURCES = ("cli", "cron", "kanban", "acp", "api_server", "subagent", "tool")


def _activity(s: str = "s") -> str:
    # Last message time, else the start.
    return (f"COALESCE((SELECT MAX(m.timestamp) FROM messages m WHERE m.session_id = {s}.id), "
            f"{s}.started_at)")


def prune_where(**filters: Any) -> tuple[str, dict[str, Any]]:
    """The prune/archive WHERE over alias ``s`` and its parameters (docs/sessions.md §7.5).

    Always starts with the ended guard. Unknown filter names raise ``TypeError`` (as an
    unexpected keyword argument does; upstream's raised it there). As upstream's: an empty
    text filter (``source=""``) filters nothing, and ``archived`` filters only when it is
    ``True`` or ``False`` itself (None or any other value: both).
    """
    conds = [ENDED_GUARD]
    params: dict[str, Any] = {}
    f = dict(filters)

    def take(name: str) -> Any:
        return f.pop(name, None)

    v = take("last_active_before")
    if v is not None:
        conds.append(f"{_activity()} < :la_before AND (COALESCE(s.end_reason, '') <> "
                     f"'{SWEEP_END_REASON}' OR s.ended_at < :la_before)")
        params["la_before"] = float(v)
    v = take("last_active_after")
    if v is not None:
        conds.append(f"{_activity()} >= :la_after")
        params["la_after"] = float(v)
    for name, op in (("started_before", "<"), ("started_after", ">=")):
        v = take(name)
        if v is not None:
            conds.append(f"s.started_at {op} :{name}")
            params[name] = float(v)
    for col in ("source", "end_reason", "user_id", "chat_id", "chat_type"):
        v = take(col)
        if v:
            conds.append(f"s.{col} = :{col}")
            params[col] = v
    v = take("provider")
    if v:
        conds.append("LOWER(COALESCE(s.billing_provider, '')) = lower(:provider)")
        params["provider"] = v
    for name, col in (("title_like", "title"), ("model_like", "model"),
                      ("branch_like", "git_branch")):
        v = take(name)
        if v:
            conds.append(f"LOWER(COALESCE(s.{col}, '')) LIKE :{name} ESCAPE '\\'")
            params[name] = "%" + escape_like(str(v).lower()) + "%"
    v = take("cwd_prefix")
    if v:
        p = v.rstrip("/\\") or v
        conds.append("(s.cwd = :cwd OR s.cwd LIKE :cwd_child ESCAPE '\\' "
                     "OR s.cwd LIKE :cwd_winchild ESCAPE '\\')")
        params.update(cwd=p, cwd_child=escape_like(p) + "/%",
                      cwd_winchild=escape_like(p) + "\\\\%")
    ranges = {"messages": "COALESCE(s.message_count, 0)",
              "tokens": "COALESCE(s.input_tokens, 0) + COALESCE(s.output_tokens, 0)",
              "cost": "COALESCE(s.actual_cost_usd, s.estimated_cost_usd, 0)",
              "tool_calls": "COALESCE(s.tool_call_count, 0)"}
    for key, expr in ranges.items():
        for bound, op in (("min", ">="), ("max", "<=")):
            v = take(f"{bound}_{key}")
            if v is not None:
                conds.append(f"{expr} {op} :{bound}_{key}")
                params[f"{bound}_{key}"] = v
    archived = take("archived")
    if archived is True or archived is False:
        conds.append("s.archived = :archived")
        params["archived"] = int(archived)
    if not take("include_pinned"):
        conds.append("COALESCE(s.pinned, 0) = 0")
    if f:
        raise TypeError(f"unknown prune filter(s): {', '.join(sorted(f))}")
    return " AND ".join(conds), params


def open_twin(where: str) -> str:
    """The same filter over *open* sessions (for "N open sessions were spared")."""
    if not where.startswith(ENDED_GUARD):
        raise ValueError("the ended guard must lead every prune filter")
    return "s.ended_at IS NULL" + where[len(ENDED_GUARD):]


def prune_candidates(where: str) -> TextClause:
    """Dry-run rows of a prune, least recently active first."""
    return text(f"SELECT s.id, s.source, s.title, s.model, s.started_at, {last_active('s')}, "
                f"s.ended_at, COALESCE(s.message_count, 0), s.archived FROM sessions s "
                f"WHERE {where} ORDER BY 6 ASC, s.started_at ASC")


def count_matches(where: str) -> TextClause:
    """Sessions the filter matches."""
    return text(f"SELECT COUNT(*) FROM sessions s WHERE {where}")


def matching_ids(where: str) -> TextClause:
    """Ids the filter matches."""
    return text(f"SELECT s.id FROM sessions s WHERE {where}")


def doomed_table(dialect: str) -> str:
    """The temp table of doomed ids, schema-qualified per dialect."""
    return "pg_temp.doomed" if dialect == "postgresql" else "temp.doomed"


def _doomed(d: str) -> Any:
    # The per-connection temp table of doomed ids: created by CREATE_DOOMED, never part of the
    # metadata (a temp object), so a lightweight table clause schema-qualified per dialect.
    schema, _, name = doomed_table(d).partition(".")
    return sa.table(name, sa.column("id"), schema=schema)


def _ids(prefix: str, n: int) -> list[Any]:
    # ``n`` bound ids named ``{prefix}0`` … in positional order.
    return [bp(f"{prefix}{k}") for k in range(n)]


def _names(prefix: str, n: int) -> tuple[str, ...]:
    return tuple(f"{prefix}{k}" for k in range(n))


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
    #: Does a session exist?
    SESSION_EXISTS = driver_statement(lambda d: sa.select(const(1)).select_from(sessions)
                                      .where(sessions.c.id == bp("id")), "id")
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

    def delegates_of(self, n: int, j: Callable[[str, str], str]) -> str:
        """Delegate children of ``n`` sessions (by marker, or by parent with any marker)."""
        ids = marks(n)
        mark = j("model_config", "_delegate_from")
        return self.render(f"SELECT id FROM sessions WHERE {mark} IN ({ids}) "
                           f"OR (parent_session_id IN ({ids}) AND {mark} IS NOT NULL)")


#: ``sessions`` as ``s`` (the alias the correlated prompt check names).
_S = sessions.alias("s")


@lru_cache(maxsize=64)
def _delete_chunk(d: str, n: int) -> tuple[str, str, str, str]:
    s = sessions
    ids, again = _names("i", n), _names("j", n)
    stmts = (
        DriverPrepared("orphan_children", lambda: sa.update(s).values(
            parent_session_id=sa.null()).where(s.c.parent_session_id.in_(_ids("i", n)),
                                               s.c.id.not_in(_ids("j", n)))),
        DriverPrepared("delete_messages", lambda: sa.delete(messages).where(
            messages.c.session_id.in_(_ids("i", n)))),
        DriverPrepared("detach_sessions", lambda: sa.update(s).values(
            parent_session_id=sa.null()).where(s.c.id.in_(_ids("i", n)))),
        DriverPrepared("delete_sessions", lambda: sa.delete(s).where(
            s.c.id.in_(_ids("i", n)))))
    orders = (ids + again, ids, ids, ids)
    return tuple(p.positional_sql(d, o) for p, o in zip(stmts, orders))  # type: ignore[return-value]


@lru_cache(maxsize=64)
def _fence_guards(d: str, n: int) -> tuple[str, str]:
    ids = _names("i", n)
    locks = DriverPrepared("fence_locks", lambda: sa.delete(compression_locks).where(
        compression_locks.c.session_id.in_(_ids("i", n))))
    leases = DriverPrepared("fence_leases", lambda: sa.delete(session_turn_leases).where(
        session_turn_leases.c.conversation_id.in_(_ids("i", n))))
    return locks.positional_sql(d, ids), leases.positional_sql(d, ids)


def sweep_predicate() -> str:
    """Stale open automation sessions without a live compression lock (:cutoff, :now)."""
    srcs = ", ".join(f"'{s}'" for s in SWEEPABLE_SOURCES)
    return (f"s.ended_at IS NULL AND s.source IN ({srcs}) AND COALESCE(s.pinned, 0) = 0 "
            f"AND s.started_at < :cutoff AND {last_active('s')} < :cutoff "
            "AND NOT EXISTS (SELECT 1 FROM compression_locks l WHERE l.session_id = s.id "
            "AND l.expires_at > :now)")


#: Conversations holding a live turn lease (:now).
LIVE_LEASE_CONVERSATIONS = DriverPrepared(
    "live_lease_conversations", lambda: sa.select(session_turn_leases.c.conversation_id)
    .where(session_turn_leases.c.expires_at > bp("now")))


#: Copy the whole database into a new file (a consistent backup; SQLite).
VACUUM_INTO = "VACUUM INTO ?"
