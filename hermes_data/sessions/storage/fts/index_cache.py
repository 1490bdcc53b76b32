"""What is cached about one engine's search indexes: the PostgreSQL search indexes present
(read by :mod:`hermes_data.sessions.search.capabilities`) and their element statistics (read
by :mod:`hermes_data.sessions.search.stats`).

Index knowledge, so it lives with the indexes: storage drops it (:func:`forget`) when it
changes them (``rebuild_fts``), without knowing search; search reads and fills it.

Search query functions receive a SQLAlchemy ``Connection`` only (the backend contract of
:mod:`hermes_data.sessions.backends.base`: query functions never see the handle), so what
they cache hangs off ``conn.engine``. One engine serves one store handle and is collected
with it.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field

from sqlalchemy.engine import Engine

__all__ = ["EngineSearchCache", "cache_of", "forget", "lock"]

#: Per engine and statistics: (read at, the parsed row or ``None`` — never analysed).
ElementStats = dict[tuple[str, str], tuple[float, object]]


@dataclass
class EngineSearchCache:
    """What the search layer remembers about one engine's database."""

    #: search.capabilities: the PostgreSQL search index names present (None: not read yet).
    pg_indexes: frozenset[str] | None = None
    #: search.stats: element statistics per (table, attribute), with when they were read.
    element_stats: ElementStats = field(default_factory=dict)


#: Guards :data:`_caches` and the caches in it.
lock = threading.Lock()
# A registry, not a handle field: the query functions that fill it get a Connection, never
# the handle (see the module docstring); weakly keyed, so a closed handle's engine takes its
# cache with it.
_caches: "weakref.WeakKeyDictionary[Engine, EngineSearchCache]" = weakref.WeakKeyDictionary()


def cache_of(engine: Engine) -> EngineSearchCache:
    """The cache of ``engine`` (made on first use); call with :data:`lock` held."""
    cache = _caches.get(engine)
    if cache is None:
        cache = _caches[engine] = EngineSearchCache()
    return cache


def forget(engine: Engine | None) -> None:
    """Drop everything cached for ``engine`` (its schema changed)."""
    if engine is None:
        return
    with lock:
        _caches.pop(engine, None)
