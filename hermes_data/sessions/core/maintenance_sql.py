"""Statements of session-store maintenance (docs/sessions.md §7.4–§7.6): the prune/archive
filter, candidate lists and counts, the chunked delete over a temp table of doomed ids,
guard-row fences and the stale-open sweep. Driver statements are rendered per dialect
(:class:`~hermes_data.sessions.sql.dialect.Statements`); identifiers come only from the
fixed names here.
"""

from __future__ import annotations

from typing import Any, Callable

from sqlalchemy import text
from sqlalchemy.sql.elements import TextClause

from hermes_data.sessions.core.encoding import escape_like
from hermes_data.sessions.sql.dialect import Statements, marks
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


class MaintenanceStatements(Statements):
    """The maintenance driver statements of one dialect."""

    def __init__(self, dialect: str) -> None:
        super().__init__(dialect)
        doomed = doomed_table(dialect)
        render = self.render
        #: The temp table of doomed ids (per connection; kept between runs, emptied first).
        self.CREATE_DOOMED = "CREATE TEMP TABLE IF NOT EXISTS doomed (id TEXT PRIMARY KEY)"
        #: Empty it.
        self.CLEAR_DOOMED = f"DELETE FROM {doomed}"
        #: Fill it (executemany).
        self.ADD_DOOMED = render(f"INSERT INTO {doomed}(id) VALUES (?) ON CONFLICT DO NOTHING")
        #: Claim the next chunk of doomed ids above the high-water mark.
        self.NEXT_DOOMED = render(f"SELECT id FROM {doomed} WHERE id > ? ORDER BY id LIMIT ?")
        #: Prompts no session references any more.
        self.DROP_UNUSED_PROMPTS = (
            "DELETE FROM system_prompts WHERE NOT EXISTS (SELECT 1 FROM sessions s "
            "WHERE s.system_prompt_hash = system_prompts.hash)")
        #: Does a session exist?
        self.SESSION_EXISTS = render("SELECT 1 FROM sessions WHERE id = ?")
        #: Live compression locks and turn leases (expires_at > now).
        self.LIVE_LOCKS = render("SELECT session_id, holder FROM compression_locks "
                                 "WHERE expires_at > ?")
        self.LIVE_LEASES = render("SELECT conversation_id, holder FROM session_turn_leases "
                                  "WHERE expires_at > ?")

    def delete_chunk(self, n: int) -> tuple[str, str, str, str]:
        """Orphan children, delete messages, detach and delete ``n`` sessions (ids bound
        positionally; the first statement binds them twice)."""
        ids = marks(n)
        r = self.render
        return (r(f"UPDATE sessions SET parent_session_id = NULL WHERE parent_session_id "
                  f"IN ({ids}) AND id NOT IN ({ids})"),
                r(f"DELETE FROM messages WHERE session_id IN ({ids})"),
                r(f"UPDATE sessions SET parent_session_id = NULL WHERE id IN ({ids})"),
                r(f"DELETE FROM sessions WHERE id IN ({ids})"))

    def fence_guards(self, n: int) -> tuple[str, str]:
        """Delete the compression locks and turn leases of ``n`` doomed sessions."""
        ids = marks(n)
        return (self.render(f"DELETE FROM compression_locks WHERE session_id IN ({ids})"),
                self.render(f"DELETE FROM session_turn_leases WHERE conversation_id IN ({ids})"))

    def delegates_of(self, n: int, j: Callable[[str, str], str]) -> str:
        """Delegate children of ``n`` sessions (by marker, or by parent with any marker)."""
        ids = marks(n)
        mark = j("model_config", "_delegate_from")
        return self.render(f"SELECT id FROM sessions WHERE {mark} IN ({ids}) "
                           f"OR (parent_session_id IN ({ids}) AND {mark} IS NOT NULL)")


def sweep_predicate() -> str:
    """Stale open automation sessions without a live compression lock (:cutoff, :now)."""
    srcs = ", ".join(f"'{s}'" for s in SWEEPABLE_SOURCES)
    return (f"s.ended_at IS NULL AND s.source IN ({srcs}) AND COALESCE(s.pinned, 0) = 0 "
            f"AND s.started_at < :cutoff AND {last_active('s')} < :cutoff "
            "AND NOT EXISTS (SELECT 1 FROM compression_locks l WHERE l.session_id = s.id "
            "AND l.expires_at > :now)")


#: Conversations holding a live turn lease (:now).
LIVE_LEASE_CONVERSATIONS = text("SELECT conversation_id FROM session_turn_leases "
                                "WHERE expires_at > :now")


#: Copy the whole database into a new file (a consistent backup; SQLite).
VACUUM_INTO = "VACUUM INTO ?"
