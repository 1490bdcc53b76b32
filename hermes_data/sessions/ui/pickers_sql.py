"""Statements of the session pickers (docs/sessions-ui.md §3.6, §4.7): the MRU list for
``hermes -c`` / ``--resume`` with its workspace match. Every value is bound."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import sqlalchemy as sa
from sqlalchemy import text
from sqlalchemy.sql.elements import TextClause

from hermes_data.sessions.schema import sessions, system_prompts
from hermes_data.sessions.sql.constructs import bp, const
from hermes_data.sessions.sql.core import SESSION_ROW_COLS
from hermes_data.sessions.sql.predicates import J, last_active
from hermes_data.statements import DriverPrepared

#: REPO(s): the trimmed root without trailing separators (the trimmed root when that empties it).
_REPO = ("CASE WHEN rtrim(trim(s.git_repo_root), '/\\') = '' THEN trim(s.git_repo_root) "
         "ELSE rtrim(trim(s.git_repo_root), '/\\') END")
#: WS_MATCH(s, :ws): the repository root, or (no root) the escaped cwd prefix (docs/sessions.md §7.5).
WS_MATCH = (f"({_REPO} = :ws OR (trim(COALESCE(s.git_repo_root, '')) = '' AND "
            "(s.cwd = :ws OR s.cwd LIKE :ws_slash ESCAPE '\\' "
            "OR s.cwd LIKE :ws_bslash ESCAPE '\\')))")


@lru_cache(maxsize=None)
def search_sessions(dialect: str, with_source: bool, with_workspace: bool,
                    include_archived: bool, include_delegates: bool) -> TextClause:
    """Sessions by ``LAST_ACTIVE`` (NULL last), then start and id, newest first; the
    session-row columns, the resolved prompt and the activity (:limit, :offset)."""
    conds = []
    if with_source:
        conds.append("s.source = :source")
    if with_workspace:
        conds.append(WS_MATCH)
    if not include_archived:
        conds.append("COALESCE(s.archived, 0) = 0")
    if not include_delegates:
        conds.append(f"{J('s.model_config', '_delegate_from', dialect)} IS NULL")
    where = " AND ".join(conds) or "1 = 1"
    nulls = " NULLS LAST" if dialect == "postgresql" else ""
    cols = ", ".join("s." + c for c in SESSION_ROW_COLS)
    # not Core: built on the WS_MATCH workspace-match text (named binds, rtrim/trim of the
    # root) and the string kit; not converted in issue 32's round 2 (time), nothing blocks it.
    return text(f"SELECT {cols}, COALESCE(sp.prompt, s.system_prompt), a.la FROM "
                f"(SELECT s.id AS sid, {last_active('s')} AS la FROM sessions s WHERE {where}) a "
                "JOIN sessions s ON s.id = a.sid "
                "LEFT JOIN system_prompts sp ON sp.hash = s.system_prompt_hash "
                f"ORDER BY a.la DESC{nulls}, s.started_at DESC, s.id DESC "
                "LIMIT :limit OFFSET :offset")


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


@lru_cache(maxsize=256)
def rich_rows(count: int, compact: bool, extras: tuple[str, ...]) -> DriverPrepared:
    """Session-row columns of :i0 … (``count`` ids), the resolved prompt unless ``compact``
    (then neither the prompt column nor ``system_prompts`` is read), then ``extras`` (catalogue
    names: columns outside the metadata, quoted by the compiler)."""
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
                .where(s.c.id.in_([bp(f"i{i}") for i in range(count)])))
    return DriverPrepared("rich_rows", build)
