"""``search_messages(include_reasoning=True)`` (docs/sessions-ui.md §4.9): after the blank
check and the core sanitizer, always the canonical LIKE route (the typed text compiled into
OR-groups of AND-ed terms, ``NOT`` negating the next one), with the reasoning columns of
assistant rows searched too. The core filters, result shape, ``fields`` and ``context`` apply
unchanged; the statements are in :mod:`hermes_data.sessions.search.reasoning_sql`."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Iterable, Sequence

from sqlalchemy.engine import Connection

from hermes_data.sessions.search.execute import Filters, result_row
from hermes_data.sessions.search.messages import (RESULT_FIELDS, SORTS, SearchResult, attach_context,
                     check_fields, literal_groups, literal_text, name_list, sanitize_fts_query)
from hermes_data.sessions.search import reasoning_sql as rq
from hermes_data.sessions.search import sql as q


def search_with_reasoning(conn: Connection, query: str | None, *,
                          source_filter: str | Iterable[str] | None = None,
                          exclude_sources: str | Iterable[str] | None = None,
                          role_filter: str | Iterable[str] | None = None,
                          limit: int = 20, offset: int = 0, sort: str | None = None,
                          include_inactive: bool = False,
                          fields: Sequence[str] | None = None) -> list[SearchResult]:
    """The reasoning route (see the module docstring); never raises for any query text."""
    names = check_fields(fields)
    if sort not in SORTS:
        raise ValueError(f"sort must be one of {SORTS[1:]} or None, not {sort!r}")
    limit, offset = max(0, int(limit)), max(0, int(offset))
    literal = literal_text(query)
    if literal is None or sanitize_fts_query(query) is None or not limit:
        return []
    groups = literal_groups(literal)
    if not groups:
        return []
    d = conn.dialect.name
    filters = Filters(name_list(source_filter), name_list(exclude_sources),
                       name_list(role_filter), include_inactive)
    params: dict[str, Any] = {"limit": limit, "offset": offset}
    matches = q.pattern_where(groups, rq.templates(d), params)
    where = filters.sql(params)
    rows = rq.page(matches, where, sort, d).run(conn, params).fetchall()
    hits = [result_row(r, r[8], "like") for r in rows]
    if hits and "context" in names:
        hits = attach_context(conn, hits, include_inactive)
    if fields is not None:
        blank: dict[str, Any] = {n: None for n in RESULT_FIELDS if n not in names}
        hits = [replace(h, **blank) for h in hits]
    return hits
