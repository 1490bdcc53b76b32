"""Element statistics of the search indexes on PostgreSQL (how a page finds its rows, never
which rows): :func:`element_rows` bounds the rows holding a set of elements — symbol grams
(s08), CJK grams (s07), document lexemes — from ``pg_stats`` (``ANALYZE``'s most common
elements). Read once per engine and re-read every :data:`STATS_TTL_S` (autovacuum
re-analyses a growing table; a store opened empty gets its first statistics later);
:func:`forget_statistics` drops them (``forget_capabilities`` drops them with the rest of
the engine's :class:`~hermes_data.sessions.storage.fts.index_cache.EngineSearchCache`).
"""

from __future__ import annotations

import time

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from hermes_data.sessions.storage.fts import index_cache
from hermes_data.sessions.search import sql as q

__all__ = ["CJK_GRAMS", "DOCUMENT_WORDS", "SYMBOL_GRAMS", "element_rows", "forget_statistics",
           "joint_rows", "table_rows"]

def forget_statistics(engine: Engine | None) -> None:
    """Drop the cached element statistics of ``engine``."""
    if engine is None:
        return
    with index_cache.lock:
        index_cache.cache_of(engine).element_stats.clear()


#: The element statistics read: symbol grams (s08's index expression), CJK grams (s07's),
#: document lexemes.
SYMBOL_GRAMS = ("messages_symbol_grams", "hermes_symbol_grams")
CJK_GRAMS = ("messages_cjk_grams", "hermes_cjk_grams")
DOCUMENT_WORDS = ("messages", "fts_document")
_Stats = tuple[dict[str, float], float, float]  # frequencies, unlisted bound, table rows
#: Element statistics are read again after this many seconds (autovacuum re-analyses a
#: growing table; a store opened empty gets its first statistics later).
STATS_TTL_S = 600.0


def _read_stats(conn: Connection, which: tuple[str, str]) -> _Stats | None:
    engine = conn.engine
    now = time.monotonic()
    with index_cache.lock:  # the engine's EngineSearchCache.element_stats
        per = index_cache.cache_of(engine).element_stats
        if which in per and now - per[which][0] < STATS_TTL_S:
            return per[which][1]  # type: ignore[return-value]
    row = conn.execute(sa.text(q.PG_ELEMENT_STATS), {"t": which[0], "a": which[1]}).first()
    stats = None
    if row is not None and row[0] and row[1] and row[2] and row[2] > 0:
        elems = list(row[0])
        freqs = [float(f) for f in row[1][:len(elems)]]
        stats = (dict(zip(elems, freqs)), min(freqs), float(row[2]))
    with index_cache.lock:
        index_cache.cache_of(engine).element_stats[which] = (now, stats)
    return stats


def element_rows(conn: Connection, which: tuple[str, str], elements: list[str]) -> float | None:
    """An upper bound of the rows holding every one of ``elements`` (symbol grams or document
    lexemes, ``which``): the rarest one's rows by the column's element statistics — one
    missing from the most-common list is at most as frequent as the least common listed.
    ``None`` without statistics (never analysed) or without an element."""
    stats = _read_stats(conn, which)
    if stats is None or not elements:
        return None
    freqs, unlisted, rows = stats
    return min(freqs.get(e, unlisted) for e in elements) * rows


def joint_rows(conn: Connection, which: tuple[str, str], elements: list[str]) -> float | None:
    """The rows holding every one of ``elements`` were they independent: the table's rows
    times each element's frequency (:func:`element_rows`'s statistics). An estimate, not a
    bound — words that go together (``of the``) co-occur more often (~1.5× here); ``None``
    without statistics or without an element."""
    stats = _read_stats(conn, which)
    if stats is None or not elements:
        return None
    freqs, unlisted, rows = stats
    for e in set(elements):
        rows *= freqs.get(e, unlisted)
    return rows


def table_rows(conn: Connection, which: tuple[str, str]) -> float | None:
    """The table's rows when its statistics were read (``None`` without statistics)."""
    stats = _read_stats(conn, which)
    return None if stats is None else stats[2]
