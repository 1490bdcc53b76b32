"""Statements of the session pickers (docs/sessions-ui.md §3.6, §4.7): the MRU list for
``hermes -c`` / ``--resume`` with its workspace match. Every value is bound."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import sqlalchemy as sa
from hermes_data.sessions.schema import sessions, system_prompts
from hermes_data.sessions.sql.constructs import bp, const, json_marker
from hermes_data.sessions.sql.core import SESSION_ROW_COLS
from hermes_data.sessions.sql.predicates import last_active_of
from hermes_data.statements import DriverPrepared

#: The separators a repository root loses at its end.
_SEPARATORS = "/\\"


def _repo(s: Any) -> Any:
    """REPO(s): the trimmed root without trailing separators (the trimmed root when that
    empties it)."""
    trimmed = sa.func.trim(s.c.git_repo_root)
    stripped = sa.func.rtrim(trimmed, const(_SEPARATORS))
    return sa.case((stripped == const(""), trimmed), else_=stripped)


def ws_match(s: Any) -> Any:
    """WS_MATCH(s, :ws): the repository root, or (no root) the escaped cwd prefix
    (:ws_slash, :ws_bslash; docs/sessions.md §7.5)."""
    return sa.or_(_repo(s) == bp("ws"), sa.and_(
        sa.func.trim(sa.func.coalesce(s.c.git_repo_root, const(""))) == const(""),
        sa.or_(s.c.cwd == bp("ws"), s.c.cwd.like(bp("ws_slash"), escape="\\"),
               s.c.cwd.like(bp("ws_bslash"), escape="\\"))))


@lru_cache(maxsize=None)
def search_sessions(dialect: str, with_source: bool, with_workspace: bool,
                    include_archived: bool, include_delegates: bool) -> DriverPrepared:
    """Sessions by ``LAST_ACTIVE`` (NULL last), then start and id, newest first; the
    session-row columns, the resolved prompt and the activity (:limit, :offset)."""
    def build() -> sa.Select:
        f = sessions.alias("s")
        conds = []
        if with_source:
            conds.append(f.c.source == bp("source"))
        if with_workspace:
            conds.append(ws_match(f))
        if not include_archived:
            conds.append(sa.func.coalesce(f.c.archived, const(0)) == const(0))
        if not include_delegates:
            conds.append(json_marker(f.c.model_config, "_delegate_from").is_(None))
        a = sa.select(f.c.id.label("sid"), last_active_of(f).label("la")).where(*conds) \
            .subquery("a")
        s = sessions.alias("s")
        sp = system_prompts.alias("sp")
        la = a.c.la.desc()
        return (sa.select(*(s.c[c] for c in SESSION_ROW_COLS),
                          sa.func.coalesce(sp.c.prompt, s.c.system_prompt), a.c.la)
                .select_from(a.join(s, s.c.id == a.c.sid)
                             .outerjoin(sp, sp.c.hash == s.c.system_prompt_hash))
                .order_by(la.nulls_last() if dialect == "postgresql" else la,
                          s.c.started_at.desc(), s.c.id.desc())
                .limit(bp("limit")).offset(bp("offset")))
    return DriverPrepared("search_sessions", build)


@lru_cache(maxsize=None)
def id_candidates(tier: str, include_archived: bool) -> DriverPrepared:
    """Session ids matching :needle (lower-cased) exactly, as a prefix (:pattern) or as a
    substring (:pattern), freshest first (:n); hidden sessions never match."""
    if tier not in ("exact", "prefix", "substring"):
        raise ValueError(f"id match tier must be exact, prefix or substring, not {tier!r}")

    def build() -> sa.Select:
        s = sessions.alias("s")
        lowered = sa.func.lower(s.c.id)
        conds = [lowered == bp("needle") if tier == "exact"
                 else lowered.like(bp("pattern"), escape="\\"), s.c.hidden == const(0)]
        if not include_archived:
            conds.append(s.c.archived == const(0))
        return (sa.select(s.c.id).where(*conds)
                .order_by(sa.func.coalesce(s.c.last_activity_at, s.c.started_at).desc(),
                          s.c.id.desc()).limit(bp("n")))
    return DriverPrepared(f"id_candidates_{tier}", build)


def rich_rows(count: int, compact: bool, extras: tuple[str, ...], d: str) -> str:
    """Session-row columns of ``count`` ids (driver text; values: the ids), the resolved
    prompt unless ``compact`` (then neither the prompt column nor ``system_prompts`` is read),
    then ``extras`` (catalogue names: columns outside the metadata, quoted by the compiler).
    Compiled once per shape and dialect whatever ``count`` is (``expanded_sql``)."""
    return _rich_rows(compact, extras).expanded_sql(d, ("ids",), count)


@lru_cache(maxsize=256)
def _rich_rows(compact: bool, extras: tuple[str, ...]) -> DriverPrepared:
    def build() -> sa.Select:
        s = sessions.alias("s")
        cols: list[Any] = [s.c[c] for c in SESSION_ROW_COLS]
        src: Any = s
        if not compact:
            sp = system_prompts.alias("sp")
            cols.append(sa.func.coalesce(sp.c.prompt, s.c.system_prompt))
            src = s.outerjoin(sp, sp.c.hash == s.c.system_prompt_hash)
        cols += [sa.column(c, _selectable=s) for c in extras]
        return (sa.select(*cols).select_from(src)
                .where(s.c.id.in_(sa.bindparam("ids", expanding=True))))
    return DriverPrepared("rich_rows", build)
