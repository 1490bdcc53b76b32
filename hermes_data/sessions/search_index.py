"""Search objects a PostgreSQL writable open ensures (issue 16 item 5: accent folding).

:func:`ensure_pg_search_objects` is idempotent and cheap when everything exists (one
catalogue read). It creates, under a transaction-scoped advisory lock, the ``unaccent``
extension, the IMMUTABLE wrapper ``hermes_unaccent`` and the GIN index
``messages_fts_folded`` of :mod:`hermes_data.sessions.sql.search_index`. When the role may
not create the extension, folding stays unavailable: logged at WARNING, and search keeps the
unfolded standard route (``read_capabilities`` sees no ``messages_fts_folded``).
"""

from __future__ import annotations

import logging

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from .search_caps import forget_capabilities
from .sql import search_index as q

log = logging.getLogger("hermes_data.sessions.search_index")


def ensure_pg_search_objects(engine: Engine) -> list[str]:
    """Create the accent-folding objects when absent; returns what was created."""
    with engine.begin() as conn:
        functions, indexes = conn.execute(q.PG_FOLD_PRESENT).one()
        if functions and indexes:
            return []
        conn.execute(q.PG_FOLD_LOCK)
        functions, indexes = conn.execute(q.PG_FOLD_PRESENT).one()
        done: list[str] = []
        if not functions:
            try:
                with conn.begin_nested():
                    conn.execute(q.PG_CREATE_UNACCENT)
            except sa.exc.DBAPIError as exc:
                log.warning("accent folding unavailable on PostgreSQL (the unaccent extension "
                            "cannot be created: %s); search does not fold diacritics",
                            exc.orig)
                return []
            schema = conn.execute(q.PG_UNACCENT_SCHEMA).scalar_one()
            conn.execute(q.pg_fold_function_ddl(schema))
            done.append(f"created function {q.PG_FOLD_FUNCTION}")
        if not indexes:
            conn.execute(q.PG_FOLDED_INDEX_DDL)
            done.append(f"created index {q.PG_FOLDED_INDEX}")
    if done:
        forget_capabilities(engine)  # the index set the search reads changed
    for line in done:
        log.info("search objects: %s", line)
    return done
