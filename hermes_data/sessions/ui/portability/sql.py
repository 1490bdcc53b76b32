"""Statements of export and import (docs/sessions-ui.md §4.11–§4.12). Column lists come
from the live table's catalogue or fixed allow-lists (quoted by the compiler); every value
is bound.

Core constructs over :mod:`hermes_data.sessions.schema`, compiled once per dialect and
column list (:class:`hermes_data.statements.DriverPrepared`). A catalogue column list may name
columns a newer writer added, outside the metadata: those statements select from / insert
into a lightweight ``table("sessions", …)`` of exactly those names.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Sequence

import sqlalchemy as sa

from hermes_data.sessions.schema import messages as m
from hermes_data.sessions.schema import sessions, system_prompts
from hermes_data.sessions.sql.constructs import bp, const
from hermes_data.sessions.sql.core import MESSAGE_COLS
from hermes_data.statements import DriverPrepared

#: A session's live rows for export, by id.
EXPORT_MESSAGES = DriverPrepared("export_messages", lambda: sa.select(
    *[m.c[c] for c in MESSAGE_COLS]).where(
    m.c.session_id == bp("s"), m.c.active == const(1)).order_by(m.c.id))
#: Stored parent links of the given ids (lineage checks of an import).
STORED_PARENT = DriverPrepared("stored_parent", lambda: sa.select(
    sessions.c.parent_session_id).where(sessions.c.id == bp("id")))
#: Link an imported child to its parent.
SET_PARENT = DriverPrepared("set_parent", lambda: sa.update(sessions).values(
    parent_session_id=bp("p")).where(sessions.c.id == bp("id")))
#: Title an imported session (inside a SAVEPOINT: the unique index may refuse it).
SET_TITLE = DriverPrepared("set_title", lambda: sa.update(sessions).values(
    title=bp("t")).where(sessions.c.id == bp("id")))
#: Counters of an imported session: what was inserted.
SET_COUNTERS = DriverPrepared("set_counters", lambda: sa.update(sessions).values(
    message_count=bp("m"), tool_call_count=bp("t")).where(sessions.c.id == bp("id")))


def _catalogue_sessions(columns: Sequence[str]) -> Any:
    """``sessions`` as a lightweight table of exactly ``columns`` (catalogue names)."""
    return sa.table(sessions.name, *[sa.column(c) for c in columns])


def export_session_row(columns: list[str]) -> DriverPrepared:
    """One session's columns (``columns``: the live catalogue's) and its resolved prompt."""
    return _export_session_row(tuple(columns))


@lru_cache(maxsize=64)
def _export_session_row(columns: tuple[str, ...]) -> DriverPrepared:
    def build() -> sa.Select:
        names = tuple(dict.fromkeys(columns + ("system_prompt", "system_prompt_hash", "id")))
        s = _catalogue_sessions(names).alias("s")
        sp = system_prompts.alias("sp")
        return (sa.select(*[s.c[c] for c in columns],
                          sa.func.coalesce(sp.c.prompt, s.c.system_prompt))
                .select_from(s.outerjoin(sp, sp.c.hash == s.c.system_prompt_hash))
                .where(s.c.id == bp("id")))
    return DriverPrepared("export_session_row", build)


@lru_cache(maxsize=None)
def export_keys_page(with_source: bool, include_archived: bool) -> DriverPrepared:
    """Keyset page of session ids in ``started_at, id`` order after (:t, :id)."""
    def build() -> sa.Select:
        s = sessions
        conds = [sa.or_(s.c.started_at > bp("t"),
                        sa.and_(s.c.started_at == bp("t"), s.c.id > bp("id")))]
        if with_source:
            conds.append(s.c.source == bp("source"))
        if not include_archived:
            conds.append(sa.func.coalesce(s.c.archived, const(0)) == const(0))
        return (sa.select(s.c.id, s.c.started_at).where(*conds)
                .order_by(s.c.started_at, s.c.id).limit(bp("n")))
    return DriverPrepared("export_keys_page", build)


def insert_session(columns: list[str]) -> DriverPrepared:
    """Insert an imported session (``columns``: allow-listed or catalogue names, bound as
    :c0, :c1, …)."""
    return _insert_session(tuple(columns))


@lru_cache(maxsize=64)
def _insert_session(columns: tuple[str, ...]) -> DriverPrepared:
    return DriverPrepared("insert_session", lambda: sa.insert(_catalogue_sessions(columns)).values(
        {c: bp(f"c{i}") for i, c in enumerate(columns)}))
