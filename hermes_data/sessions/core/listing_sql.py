"""Statements of the session listings (docs/sessions.md §5.2–§5.3): the shared session
filter, the sidebar list projected onto compression tips, counts and the bounded recent
browse. The filter's clauses are Core constructs keyed by its shape (:class:`FilterShape`),
its values bound by name (:meth:`SessionFilter.params`); each statement is compiled once per
shape and dialect (``DriverPrepared``). The bounded recent browse stays a recursive CTE in
text. Every value is bound, identifiers come from the fixed tuples here.
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
from hermes_data.sessions.sql.constructs import bp, const
from hermes_data.sessions.sql.predicates import (J, edge, edge_of, last_active, last_active_of,
                                                 listable, listable_of, preview_of, preview_sql)
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

    def shape(self) -> "FilterShape":
        """Which clauses this filter has (its values aside): the key its statements are
        built and compiled under, once per dialect."""
        return FilterShape(len(self._sources()), len(self.exclude_sources),
                           self.session_key is not None, bool(self.cwd_prefix),
                           bool(self.min_message_count), self.include_children,
                           self.include_archived, self.archived_only, self.include_hidden)

    def _sources(self) -> list[str]:
        return list(self.sources) + ([self.source] if self.source else [])

    def params(self) -> dict[str, Any]:
        """The bound values of :meth:`shape`'s clauses, by parameter name."""
        params: dict[str, Any] = {}
        params.update({f"src{i}": v for i, v in enumerate(self._sources())})
        params.update({f"xsrc{i}": v for i, v in enumerate(self.exclude_sources)})
        if self.session_key is not None:
            params["session_key"] = self.session_key
        if self.cwd_prefix:
            prefix = self.cwd_prefix.rstrip("/\\") or self.cwd_prefix
            params.update(cwd=prefix, cwd_slash=escape_like(prefix + "/") + "%",
                          cwd_bslash=escape_like(prefix + "\\") + "%")
        if self.min_message_count:
            params["min_count"] = int(self.min_message_count)
        return params


@dataclass(frozen=True)
class FilterShape:
    """The clauses of a :class:`SessionFilter` over alias ``s``, without their values."""

    sources: int
    excluded: int
    session_key: bool
    cwd: bool
    min_count: bool
    include_children: bool
    include_archived: bool
    archived_only: bool
    include_hidden: bool

    def conditions(self, s: Any) -> list[Any]:
        """The clauses over ``s`` (constants inline, values bound by name)."""
        conds: list[Any] = []
        if not self.include_children:
            conds.append(listable_of(s))
        if self.sources:
            conds.append(s.c.source.in_([bp(f"src{i}") for i in range(self.sources)]))
        if self.excluded:
            conds.append(s.c.source.not_in([bp(f"xsrc{i}") for i in range(self.excluded)]))
        if self.session_key:
            conds.append(s.c.session_key == bp("session_key"))
        if self.cwd:
            conds.append(sa.or_(s.c.cwd == bp("cwd"), s.c.cwd.like(bp("cwd_slash"), escape="\\"),
                                s.c.cwd.like(bp("cwd_bslash"), escape="\\")))
        if self.min_count:
            conds.append(sa.func.coalesce(s.c.message_count, const(0)) >= bp("min_count"))
        if self.archived_only:
            conds.append(s.c.archived == const(1))
        elif not self.include_archived:
            conds.append(s.c.archived == const(0))
        if not self.include_hidden:
            conds.append(s.c.hidden == const(0))
        return conds


@lru_cache(maxsize=256)
def list_ids(shape: FilterShape, *, by_last_active: bool, search: bool,
             search_stripped: bool, by_id: bool) -> DriverPrepared:
    """Ids of one sidebar page (:limit, :offset): by start time, or by the lineage's freshest
    activity with optional title (``search``: :needle, and :needle_stripped when
    ``search_stripped``) / id (``by_id``: :idq) matches anywhere in the lineage."""
    def by_start() -> Any:
        s = sessions.alias("s")
        return (sa.select(s.c.id).where(*shape.conditions(s)).order_by(s.c.started_at.desc())
                .limit(bp("limit")).offset(bp("offset")))

    def by_activity() -> Any:
        s = sessions.alias("s")
        adm = sa.select(s.c.id, s.c.started_at).where(*shape.conditions(s)).cte("adm")
        ch = sa.select(adm.c.id.label("root"), adm.c.id.label("id")).cte("ch", recursive=True)
        p, c = sessions.alias("p"), sessions.alias("c")
        ch = ch.union(sa.select(ch.c.root, c.c.id).select_from(
            ch.join(p, p.c.id == ch.c.id).join(c, c.c.parent_session_id == p.c.id))
            .where(edge_of(p, c)))
        x = sessions.alias("x")
        eff = (sa.select(ch.c.root, sa.func.max(last_active_of(x)).label("e"))
               .select_from(ch.join(x, x.c.id == ch.c.id)).group_by(ch.c.root).cte("eff"))
        match: list[Any] = []
        if search:
            m, ms = ch.alias("m"), sessions.alias("ms")
            title = sa.func.lower(sa.func.coalesce(ms.c.title, const("")))
            hit = [title.like(bp("needle"), escape="\\"),
                   sa.func.lower(ms.c.id).like(bp("needle"), escape="\\")]
            if search_stripped:
                squashed = title
                for ch_ in ("-", "_", ".", " "):
                    squashed = sa.func.replace(squashed, const(ch_), const(""))
                hit.append(squashed.like(bp("needle_stripped"), escape="\\"))
            match.append(sa.select(const(1)).select_from(m.join(ms, ms.c.id == m.c.id))
                         .where(m.c.root == adm.c.id, sa.or_(*hit)).exists())
        if by_id:
            m = ch.alias("mi")
            match.append(sa.select(const(1)).select_from(m).where(
                m.c.root == adm.c.id, m.c.id.like(bp("idq"), escape="\\")).exists())
        return (sa.select(adm.c.id).select_from(adm.join(eff, eff.c.root == adm.c.id))
                .where(*match).order_by(eff.c.e.desc(), adm.c.started_at.desc(),
                                        adm.c.id.desc())
                .limit(bp("limit")).offset(bp("offset")))
    return DriverPrepared("list_ids", by_activity if by_last_active else by_start)


def search_params(search_query: str | None, id_query: str | None) -> dict[str, Any]:
    """The bound values of :func:`list_ids`' title / id matches."""
    params: dict[str, Any] = {}
    if search_query:
        needle = search_query.lower()
        stripped = re.sub(r"[\W_]", "", needle)
        params["needle"] = "%" + escape_like(needle) + "%"
        if stripped:
            params["needle_stripped"] = "%" + escape_like(stripped) + "%"
    if id_query:
        params["idq"] = "%" + escape_like(id_query) + "%"
    return params


@lru_cache(maxsize=128)
def pinned_ids(shape: FilterShape) -> DriverPrepared:
    """Pinned sessions matching the filter, newest first."""
    def build() -> Any:
        s = sessions.alias("s")
        return (sa.select(s.c.id).where(*shape.conditions(s), s.c.pinned == const(1))
                .order_by(s.c.started_at.desc()))
    return DriverPrepared("pinned_ids", build)


@lru_cache(maxsize=128)
def count_sessions(shape: Any) -> DriverPrepared:
    """Sessions matching a filter shape: anything whose ``conditions(s)`` gives the WHERE
    terms over an alias ``s`` of ``sessions`` (the listing's :class:`FilterShape`, the
    prune's ``PruneWhere``)."""
    def build() -> Any:
        s = sessions.alias("s")
        return sa.select(sa.func.count()).select_from(s).where(*shape.conditions(s))
    return DriverPrepared("count_sessions", build)


def list_rows(n: int, d: str) -> str:
    """Sidebar columns, activity and preview of ``n`` sessions (driver text; values: the
    ``n`` ids), compiled once per dialect whatever ``n`` is."""
    return _LIST_ROWS.expanded_sql(d, ("ids",), n)


def _list_rows(d: str) -> Any:
    s = sessions.alias("s")
    return (sa.select(*(s.c[c] for c in LIST_COLS), last_active_of(s).label("last_active"),
                      preview_of(s, d).label("preview"))
            .where(s.c.id.in_(sa.bindparam("ids", expanding=True))))


_LIST_ROWS = DriverPrepared.per_dialect("list_rows", _list_rows)


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
