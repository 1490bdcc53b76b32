"""Statements of the session listings (docs/sessions.md §5.2–§5.3): the shared session
filter, the sidebar list projected onto compression tips, counts and the bounded recent
browse. Builders take the filter values and return SQL text plus bound parameters; every
value is bound, identifiers come from the fixed tuples here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Iterable

import sqlalchemy as sa
from sqlalchemy import text
from sqlalchemy.sql.elements import TextClause

from hermes_data.sessions.core.encoding import escape_like
from hermes_data.sessions.schema import sessions
from hermes_data.sessions.sql.constructs import bp
from hermes_data.sessions.sql.predicates import (J, edge, last_active, last_active_of, listable,
                                                 preview_of, preview_sql)
from hermes_data.statements import DriverPrepared

#: Columns of a sidebar row (:class:`~hermes_data.sessions.rows.SessionListRow`).
LIST_COLS = ("id", "source", "model", "title", "started_at", "ended_at", "end_reason",
             "message_count", "tool_call_count", "cwd", "git_branch", "git_repo_root",
             "session_key", "parent_session_id", "profile_name", "archived", "pinned",
             "hidden", "last_read_at")


@dataclass(frozen=True)
class SessionFilter:
    """The WHERE of ``list_sessions`` / ``session_count`` over alias ``s``."""

    source: str | None = None
    sources: tuple[str, ...] = ()
    exclude_sources: tuple[str, ...] = ()
    cwd_prefix: str | None = None
    session_key: str | None = None
    min_message_count: int = 0
    include_children: bool = False
    include_archived: bool = False
    archived_only: bool = False
    include_hidden: bool = False

    @staticmethod
    def of(source: str | None = None, sources: Iterable[str] | None = None,
           exclude_sources: Iterable[str] | None = None, **flags: Any) -> "SessionFilter":
        """Build a filter from the public keyword arguments (iterables copied to tuples)."""
        return SessionFilter(source=source, sources=tuple(sources or ()),
                             exclude_sources=tuple(exclude_sources or ()), **flags)

    def where(self, d: str) -> tuple[str, dict[str, Any]]:
        """The condition text and its bound parameters for dialect ``d``."""
        conds: list[str] = []
        params: dict[str, Any] = {}
        if not self.include_children:
            conds.append(listable("s", d))
        wanted = list(self.sources) + ([self.source] if self.source else [])
        if wanted:
            conds.append(f"s.source IN ({_binds('src', wanted, params)})")
        if self.exclude_sources:
            conds.append(f"s.source NOT IN ({_binds('xsrc', self.exclude_sources, params)})")
        if self.session_key is not None:
            conds.append("s.session_key = :session_key")
            params["session_key"] = self.session_key
        if self.cwd_prefix:
            prefix = self.cwd_prefix.rstrip("/\\") or self.cwd_prefix
            conds.append("(s.cwd = :cwd OR s.cwd LIKE :cwd_slash ESCAPE '\\' "
                         "OR s.cwd LIKE :cwd_bslash ESCAPE '\\')")
            params.update(cwd=prefix, cwd_slash=escape_like(prefix + "/") + "%",
                          cwd_bslash=escape_like(prefix + "\\") + "%")
        if self.min_message_count:
            conds.append("COALESCE(s.message_count, 0) >= :min_count")
            params["min_count"] = int(self.min_message_count)
        if self.archived_only:
            conds.append("s.archived = 1")
        elif not self.include_archived:
            conds.append("s.archived = 0")
        if not self.include_hidden:
            conds.append("s.hidden = 0")
        return (" AND ".join(conds) or "1 = 1"), params


def _binds(prefix: str, values: Iterable[str], params: dict[str, Any]) -> str:
    # One named bind per value: ":src0, :src1, …".
    names = []
    for i, value in enumerate(values):
        names.append(f"{prefix}{i}")
        params[f"{prefix}{i}"] = value
    return ", ".join(":" + n for n in names)


def list_ids(where: str, d: str, *, by_last_active: bool, search_query: str | None,
             id_query: str | None, params: dict[str, Any]) -> TextClause:
    """Ids of one sidebar page (:limit, :offset): by start time, or by the lineage's freshest
    activity with optional title / id matches anywhere in the lineage."""
    if not by_last_active:
        # not Core: spliced with SessionFilter.where()'s text, which the recursive sidebar CTE
        # (list_ids, raw by rule) shares; converts together with that filter.
        return text(f"SELECT s.id FROM sessions s WHERE {where} "
                    "ORDER BY s.started_at DESC LIMIT :limit OFFSET :offset")
    match = ""
    if search_query:
        needle = search_query.lower()
        stripped = re.sub(r"[\W_]", "", needle)
        params["needle"] = "%" + escape_like(needle) + "%"
        params["needle_stripped"] = "%" + escape_like(stripped) + "%" if stripped else None
        match += (" AND EXISTS (SELECT 1 FROM ch m JOIN sessions ms ON ms.id = m.id "
                  "WHERE m.root = adm.id AND (lower(COALESCE(ms.title, '')) LIKE :needle "
                  "ESCAPE '\\' OR lower(ms.id) LIKE :needle ESCAPE '\\' OR (CAST(:needle_stripped "
                  "AS TEXT) IS NOT NULL AND replace(replace(replace(replace(lower(COALESCE("
                  "ms.title, '')), '-', ''), '_', ''), '.', ''), ' ', '') LIKE :needle_stripped "
                  "ESCAPE '\\')))")
    if id_query:
        params["idq"] = "%" + escape_like(id_query) + "%"
        match += (" AND EXISTS (SELECT 1 FROM ch m WHERE m.root = adm.id "
                  "AND m.id LIKE :idq ESCAPE '\\')")
    return text(
        f"WITH RECURSIVE adm AS (SELECT s.id, s.started_at FROM sessions s WHERE {where}), "
        "ch(root, id) AS (SELECT id, id FROM adm UNION SELECT ch.root, c.id FROM ch "
        "JOIN sessions p ON p.id = ch.id JOIN sessions c ON c.parent_session_id = p.id "
        f"WHERE {edge('p', 'c', d)}), "
        f"eff AS (SELECT ch.root, MAX({last_active('x')}) AS e FROM ch "
        "JOIN sessions x ON x.id = ch.id GROUP BY ch.root) "
        f"SELECT adm.id FROM adm JOIN eff ON eff.root = adm.id WHERE 1 = 1{match} "
        "ORDER BY eff.e DESC, adm.started_at DESC, adm.id DESC LIMIT :limit OFFSET :offset")


def pinned_ids(where: str) -> TextClause:
    """Pinned sessions matching the filter, newest first."""
    # not Core: spliced with SessionFilter.where()'s text, which the recursive sidebar CTE
    # (list_ids, raw by rule) shares; converts together with that filter.
    return text(f"SELECT s.id FROM sessions s WHERE {where} AND s.pinned = 1 "
                "ORDER BY s.started_at DESC")


def count_sessions(where: str) -> TextClause:
    """Sessions matching the filter."""
    # not Core: spliced with SessionFilter.where()'s text, which the recursive sidebar CTE
    # (list_ids, raw by rule) shares; converts together with that filter.
    return text(f"SELECT COUNT(*) FROM sessions s WHERE {where}")


def list_rows(n: int, d: str) -> DriverPrepared:
    """Sidebar columns, activity and preview of ``n`` sessions (binds :i0 … :i{n-1})."""
    return _list_rows(n, d)


@lru_cache(maxsize=256)
def _list_rows(n: int, d: str) -> DriverPrepared:
    def build() -> Any:
        s = sessions.alias("s")
        return (sa.select(*(s.c[c] for c in LIST_COLS), last_active_of(s).label("last_active"),
                          preview_of(s, d).label("preview"))
                .where(s.c.id.in_([bp(f"i{k}") for k in range(n)])))
    return DriverPrepared("list_rows", build)


def recent_sessions(d: str, excluded: int) -> TextClause:
    """The bounded recent browse (docs/sessions.md §5.3): newest candidates (:cand), their lineages walked
    both ways, one row per lineage at its freshest segment (:limit). SQLite also caps the
    lineage walks at :lin rows; PostgreSQL rejects LIMIT inside a recursive CTE, so there the
    walks are bounded by their UNION (each session once) and the statement timeout. Binds
    :x0 … for the ``excluded`` sources."""
    lin = "" if d == "postgresql" else " LIMIT :lin"
    excl = ""
    if excluded:
        excl = f" AND s.source NOT IN ({', '.join(f':x{i}' for i in range(excluded))})"
    return text(
        "WITH RECURSIVE "
        "cand(id) AS (SELECT s.id FROM sessions s WHERE s.archived = 0 AND s.hidden = 0 "
        f"AND {J('s.model_config', '_delegate_from', d)} IS NULL{excl} "
        "ORDER BY COALESCE(s.last_activity_at, s.started_at) DESC, s.started_at DESC, s.id DESC "
        "LIMIT :cand), "
        "anc(id) AS (SELECT id FROM cand UNION SELECT p.id FROM anc JOIN sessions c ON c.id = anc.id "
        f"JOIN sessions p ON p.id = c.parent_session_id WHERE {edge('p', 'c', d)}{lin}), "
        "roots(id) AS (SELECT a.id FROM anc a JOIN sessions r ON r.id = a.id WHERE NOT EXISTS "
        f"(SELECT 1 FROM sessions p WHERE p.id = r.parent_session_id AND {edge('p', 'r', d)})), "
        "chains(root, id) AS (SELECT id, id FROM roots UNION SELECT chains.root, c.id FROM chains "
        "JOIN sessions p ON p.id = chains.id JOIN sessions c ON c.parent_session_id = p.id "
        f"WHERE {edge('p', 'c', d)}{lin}), "
        f"act AS (SELECT chains.root, chains.id, {last_active('t')} AS la, t.started_at AS st "
        "FROM chains JOIN sessions t ON t.id = chains.id), "
        "ranked AS (SELECT root, id, la, ROW_NUMBER() OVER (PARTITION BY root ORDER BY "
        "la DESC, st DESC, id DESC) AS rn FROM act) "
        "SELECT t.id, t.source, t.model, COALESCE(t.title, r.title), r.started_at, t.ended_at, "
        f"t.end_reason, t.message_count, t.tool_call_count, ranked.la, {preview_sql('t', d)}, "
        "r.id, t.last_read_at FROM ranked JOIN sessions t ON t.id = ranked.id "
        "JOIN sessions r ON r.id = ranked.root WHERE ranked.rn = 1 AND r.archived = 0 "
        f"AND r.hidden = 0 AND {listable('r', d)} ORDER BY ranked.la DESC, r.started_at DESC "
        "LIMIT :limit")
