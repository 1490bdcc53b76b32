"""Which indexes can answer a search now (:func:`read_capabilities`; spec sessions.md §7.2).

SQLite: read on every search (the ``fts_stale`` flag is a primary-key read and changes at
run time). PostgreSQL: the search GIN indexes present on ``messages`` are read once per
engine and kept (a ``pg_indexes`` query on every search cost ~1 ms, more on a loaded
server). The cache is dropped by :func:`forget_capabilities` wherever this process changes
those indexes — the writable open after its migrations and the search objects it ensures
(:mod:`~hermes_data.sessions.search_index`), ``rebuild_fts``. An index another process
creates or drops later is seen by the next handle: a stale entry only changes the speed of a
route, never its rows (every index-backed route verifies its candidates with the core
predicate, and the functions the routes call are never dropped).
"""

from __future__ import annotations

import threading
import weakref

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from . import opening
from .search_plan import SearchCapabilities
from .sql import search as q

__all__ = ["DOCUMENT_WORDS", "SYMBOL_GRAMS", "element_rows", "forget_capabilities",
           "read_capabilities"]

#: PostgreSQL: the search index names present, per engine.
_pg_indexes: "weakref.WeakKeyDictionary[Engine, frozenset[str]]" = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def forget_capabilities(engine: Engine | None) -> None:
    """Drop the cached PostgreSQL index set of ``engine`` (the schema changed)."""
    if engine is None:
        return
    with _lock:
        _pg_indexes.pop(engine, None)
        _elem_stats.pop(engine, None)


def _pg_index_names(conn: Connection) -> frozenset[str]:
    engine = conn.engine
    with _lock:
        names = _pg_indexes.get(engine)
    if names is None:
        names = frozenset(r[0] for r in conn.exec_driver_sql(q.PG_SEARCH_INDEXES))
        with _lock:
            _pg_indexes[engine] = names
    return names


def read_capabilities(conn: Connection) -> SearchCapabilities:
    """Which indexes can answer now: FTS5 module, tables present, ``fts_stale`` (PK read).

    PostgreSQL: the GIN indexes of the head (server-maintained, never stale; cached per
    engine, see the module docstring); a capability override of
    :func:`opening.force_capabilities` applies to both backends."""
    if conn.dialect.name == "postgresql":
        forced = opening.forced_capabilities()
        names = _pg_index_names(conn)
        fts = "messages_fts_document" in names and (forced is None or forced.fts5)
        tri = fts and "messages_fts_trgm" in names and (forced is None or forced.trigram)
        return SearchCapabilities(fts5=fts, trigram=tri, stale=False,
                                  folded=fts and "messages_fts_folded" in names,
                                  bigram="messages_cjk_grams" in names,
                                  symbols=tri and "messages_symbol_grams" in names)
    caps = opening.capabilities(conn)
    names_s = {r[0] for r in conn.exec_driver_sql(q.SQLITE_FTS_TABLES)}
    stale = conn.exec_driver_sql(q.FTS_STALE).first() is not None
    fts5 = caps.fts5 and "messages_fts" in names_s
    return SearchCapabilities(fts5=fts5, trigram=fts5 and caps.trigram
                              and "messages_fts_trigram" in names_s, stale=stale)


# -------------------------------------------------------------------------------------
# PostgreSQL: how common an element is (how a page finds its rows)
# -------------------------------------------------------------------------------------

#: The element statistics read: symbol grams (s08's index expression), document lexemes.
SYMBOL_GRAMS = ("messages_symbol_grams", "hermes_symbol_grams")
DOCUMENT_WORDS = ("messages", "fts_document")
_Stats = tuple[dict[str, float], float, float]  # frequencies, unlisted bound, table rows
#: Per engine and statistics: the parsed row, ``None`` when there are none (never analysed).
_elem_stats: "weakref.WeakKeyDictionary[Engine, dict[tuple[str, str], _Stats | None]]" = \
    weakref.WeakKeyDictionary()


def _read_stats(conn: Connection, which: tuple[str, str]) -> _Stats | None:
    engine = conn.engine
    with _lock:
        per = _elem_stats.setdefault(engine, {})
        if which in per:
            return per[which]
    row = conn.execute(sa.text(q.PG_ELEMENT_STATS), {"t": which[0], "a": which[1]}).first()
    stats = None
    if row is not None and row[0] and row[1] and row[2] and row[2] > 0:
        elems = list(row[0])
        freqs = [float(f) for f in row[1][:len(elems)]]
        stats = (dict(zip(elems, freqs)), min(freqs), float(row[2]))
    with _lock:
        _elem_stats.setdefault(engine, {})[which] = stats
    return stats


def element_rows(conn: Connection, which: tuple[str, str], elements: list[str]) -> float | None:
    """An upper bound of the rows holding every one of ``elements`` (symbol grams or document
    lexemes, ``which``): the rarest one's rows by the column's element statistics — one
    missing from the most-common list is at most as frequent as the least common listed.
    ``None`` without statistics (never analysed) or without an element. Read once per engine
    (dropped with :func:`forget_capabilities`)."""
    stats = _read_stats(conn, which)
    if stats is None or not elements:
        return None
    freqs, unlisted, rows = stats
    return min(freqs.get(e, unlisted) for e in elements) * rows
