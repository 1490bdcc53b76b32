"""Search's gap supplement during an FTS backfill (docs/sessions-storage.md §3.6,
amending docs/sessions.md §7.2; upstream's ``_search_unindexed_gap``).

While ``optimize-storage`` backfills the index, the rows of the window ``(progress,
high_water]`` are in ``messages`` but not yet in the FTS tables (the gated triggers index
everything newer at once). After an FTS route (base, trigram, or the zero-result trigram
fallback) returns a short page, the core LIKE compilation of the query — its OR-groups with
``NOT`` — runs over that window with the shared filters and fills the page:
``LIMIT limit − len(page) OFFSET g``, ``g = max(0, offset − fts_total)``, where
``fts_total`` is ``offset + len(page)`` when the page has rows and otherwise the FTS match
count, counted up to ``offset`` only (upstream ignored the offset, so page 2 repeated page
1, and read ``NOT x`` as ``x``). With ``sort`` newest/oldest the two sources are merged by
time instead (a page of one timeline). Only ids not on the page are added; an
``OperationalError`` skips the supplement. ``m.content`` is never selected whole (the LIKE
snippet window).
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from hermes_data.locking import is_lock_conflict
from hermes_data.sessions.search.plan import LikeTerm
from hermes_data.sessions.search import gap_sql as gq
from hermes_data.sessions.storage.fts import layout_sql as q
from hermes_data.sessions.search.sql import LIKE_COLS, pattern_where

log = logging.getLogger("hermes_data.sessions.search.messages")


def gap_window(conn: Connection) -> tuple[int, int] | None:
    """``(progress, high_water)`` of an open backfill window (high water > 0), else None."""
    meta: dict[str, str] = dict(conn.exec_driver_sql(q.READ_GATE).fetchall())
    try:
        high = int(meta[q.HIGH_WATER_KEY]) if q.HIGH_WATER_KEY in meta else 0
        progress = int(meta.get(q.PROGRESS_KEY) or 0)
    except ValueError:
        return None
    if high <= 0 or progress >= high:
        return None
    return max(0, progress), high


def match_count(conn: Connection, table: str, match: str,
                filters: Callable[[dict[str, Any]], str], bound: int) -> int:
    """Rows ``table MATCH match`` finds under the filters, counted up to ``bound``."""
    params: dict[str, Any] = {"q": match, "bound": bound}
    where = filters(params)
    return int(conn.execute(sa.text(gq.fts_match_count(table, where)), params).scalar() or 0)


def supplement(conn: Connection, page: list[Any], groups: Sequence[Sequence[LikeTerm]],
               filters: Callable[[dict[str, Any]], str], limit: int, offset: int,
               sort: str | None, fts_total: Callable[[], int],
               make: Callable[[Sequence[Any]], Any], *, scoped: bool = False,
               refetch: Callable[[int], list[Any]] | None = None) -> list[Any]:
    """``page`` (hits with ``id`` and ``timestamp``) completed by the window's LIKE hits
    when a backfill is pending (see the module docstring). ``fts_total()`` counts the FTS
    matches up to ``offset`` (called only for an empty page on a later offset); ``make``
    turns a row (nine columns, snippet last) into a hit; ``scoped`` keeps the window to the
    rows the trigram index holds (after the trigram route).

    Relevance order: a short page is followed by ``limit − len(page)`` window rows from
    ``max(0, offset − fts_total)``. ``sort`` newest/oldest: the FTS hits and the window's
    are one timeline, so the first ``offset + limit`` of each (``refetch(n)`` = the FTS
    route's first ``n``) are merged by ``(timestamp, id)`` and the page cut from that."""
    timeline = sort in ("newest", "oldest") and refetch is not None
    if (len(page) >= limit and not timeline) or not groups:
        return page
    try:
        window = gap_window(conn)
        if window is None:
            return page
        if timeline:
            total, want, skip = 0, offset + limit, 0
        else:
            total = offset + len(page) if page else (fts_total() if offset else 0)
            want, skip = limit - len(page), max(0, offset - total)
        params: dict[str, Any] = {"gap_lo": window[0], "gap_hi": window[1],
                                  "limit": want, "offset": skip}
        matches = pattern_where(groups, LIKE_COLS, params)
        where = filters(params)
        rows = gq.gap_page(matches, where, sort, scoped=scoped).run(conn, params).fetchall()
    except sa.exc.OperationalError as exc:
        if is_lock_conflict(exc):
            raise
        log.debug("gap supplement skipped: %s", exc.orig)
        return page
    if timeline:
        assert refetch is not None
        head = refetch(offset + limit)
        seen = {h.id for h in head}
        merged = head + [make(r) for r in rows if r[0] not in seen]
        merged.sort(key=lambda h: (h.timestamp or 0.0, h.id or 0), reverse=sort == "newest")
        return merged[offset:offset + limit]
    seen = {h.id for h in page}
    return page + [make(r) for r in rows if r[0] not in seen]
