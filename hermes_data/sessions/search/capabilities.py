"""Which indexes can answer a search now (:func:`read_capabilities`; docs/sessions.md §7.2).

SQLite: read on every search (the ``fts_stale`` flag is a primary-key read and changes at
run time). PostgreSQL: the search GIN indexes present on ``messages`` are read once per
engine and kept (a ``pg_indexes`` query on every search cost ~1 ms, more on a loaded
server). The cache is dropped by :func:`forget_capabilities` wherever this process changes
those indexes — the writable open after its migrations, ``rebuild_fts``. An index another
process creates later (a revision) is seen by the next handle; until then this one keeps the
route it had. A database a revision behind (a read-only handle does not upgrade) simply
lacks the newer indexes: its search takes the routes the present ones offer (without
``messages_fts_fold`` of s09, no accent-folded tier). :func:`forget_capabilities` also
drops the element statistics of :mod:`~hermes_data.sessions.search.stats`.
"""

from __future__ import annotations

from sqlalchemy.engine import Connection, Engine

from hermes_data.sessions.storage import opening
from hermes_data.sessions.search.plan import SearchCapabilities
from hermes_data.sessions.storage.fts import index_cache
from hermes_data.sessions.storage.fts import sql as fts_sql
from hermes_data.sessions.search import sql as q

__all__ = ["forget_capabilities", "read_capabilities"]

def forget_capabilities(engine: Engine | None) -> None:
    """Drop the cached PostgreSQL index set of ``engine`` and its element statistics (the
    schema changed)."""
    index_cache.forget(engine)


def _pg_index_names(conn: Connection) -> frozenset[str]:
    engine = conn.engine
    with index_cache.lock:  # the engine's EngineSearchCache.pg_indexes
        names = index_cache.cache_of(engine).pg_indexes
    if names is None:
        names = frozenset(r[0] for r in conn.exec_driver_sql(q.PG_SEARCH_INDEXES))
        with index_cache.lock:
            index_cache.cache_of(engine).pg_indexes = names
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
                                  folded=fts and "messages_fts_fold" in names,
                                  bigram="messages_cjk_grams" in names,
                                  symbols=tri and "messages_symbol_grams" in names)
    caps = opening.capabilities(conn)
    names_s = {r[0] for r in conn.exec_driver_sql(q.SQLITE_FTS_TABLES)}
    stale = conn.exec_driver_sql(fts_sql.READ_FTS_STALE).first() is not None
    fts5 = caps.fts5 and "messages_fts" in names_s
    return SearchCapabilities(fts5=fts5, trigram=fts5 and caps.trigram
                              and "messages_fts_trigram" in names_s, stale=stale)
