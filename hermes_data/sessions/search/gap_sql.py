"""Statements of search's gap supplement during an FTS backfill
(docs/sessions-storage.md §3.6, amending docs/sessions.md §7.2; :mod:`hermes_data.sessions.search.gap`): the rows of the window
``(progress, high_water]`` are in ``messages`` but not yet in the FTS tables.

SQLite only; named parameters like the other search pages (the
window's markers are read with :mod:`hermes_data.sessions.storage.fts.layout_sql`). Every
value is bound; table names come only from :data:`FTS_VIRTUAL_TABLES`.
"""

from __future__ import annotations

from hermes_data.sessions.search.sql import (LIKE_SNIPPET, TRI_SESSION_S, gap_window, hit_page,
                                             not_tool)
from hermes_data.statements import DriverPrepared
from hermes_data.sessions.storage.fts.ddl import FTS_VIRTUAL_TABLES


def gap_page(matches: str, where: str, sort: str | None, *,
             scoped: bool = False) -> DriverPrepared:
    """LIKE hits of the unindexed window ``(:gap_lo, :gap_hi]`` (``matches`` from
    ``pattern_where``, ``where`` from ``filter_where``), newest first (oldest first for
    ``sort='oldest'``), with the LIKE snippet as a ninth column; ``m.content`` is never
    selected whole. ``scoped``: only the rows the trigram index holds (the trigram route).
    A Core page (:func:`~hermes_data.sessions.search.sql.hit_page`)."""
    scope = (not_tool, TRI_SESSION_S) if scoped else ()
    return hit_page(LIKE_SNIPPET, (*scope, gap_window, f"({matches})", where),
                    ("timestamp", "id"), sort != "oldest")


def fts_match_count(table: str, where: str) -> str:
    """How many rows ``table MATCH :q`` finds under the filters, counted up to ``:bound``
    only (the offset a gap page must skip)."""
    if table not in FTS_VIRTUAL_TABLES:
        raise ValueError(f"unknown FTS table {table!r}")
    return (f"SELECT COUNT(*) FROM (SELECT 1 FROM {table} JOIN messages m ON m.id = "
            f"{table}.rowid JOIN sessions s ON s.id = m.session_id WHERE {table} MATCH :q "
            f"AND {where} LIMIT :bound)")
