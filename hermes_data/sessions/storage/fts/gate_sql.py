"""The batch append's FTS rebuild-gate bookkeeping over ``state_meta`` and ``messages``
(docs/sessions.md §2.6; issue 32): Core constructs compiled for SQLite on first read, exposed
as plain string module attributes (the batch runs them on its raw ``sqlite3`` cursor, ``?``
placeholders in the declared order). Kept apart from :mod:`~hermes_data.sessions.storage.fts.ddl`,
which the schema's PostgreSQL declarations import."""

from __future__ import annotations

import sqlalchemy as sa

from hermes_data.sessions.schema import state_meta
from hermes_data.sessions.sql.constructs import module_statement
from hermes_data.sessions.sql.dialect import driver_statement
from hermes_data.sessions.sql.meta_sql import MetaStatements, meta_delete, meta_keys
from hermes_data.sessions.storage.fts.ddl import GATE_KEYS


class GateStatements(MetaStatements):
    """The rebuild gate's bookkeeping over ``state_meta`` and ``messages`` (issue 32;
    ``SET_META`` / ``DELETE_META`` / ``MAX_MESSAGE_ID`` inherited), for the batch path, the
    layout migration and the open path's markers (their statement classes inherit it):
    Core constructs compiled for SQLite on first read, exposed as plain string module
    attributes of the same name (:func:`__getattr__`; the batch runs them on its raw
    ``sqlite3`` cursor, ``?`` placeholders in the declared order)."""

    #: The gate markers as stored (key, value).
    READ_GATE = driver_statement(lambda d: sa.select(state_meta.c.key, state_meta.c.value)
                                 .where(meta_keys(*GATE_KEYS)))
    #: Delete both gate markers (a full rebuild, a finished or abandoned backfill).
    CLEAR_REBUILD_MARKERS = driver_statement(lambda d: meta_delete(*GATE_KEYS))


def __getattr__(name: str) -> str:
    """:class:`GateStatements`' statements as module attributes (PEP 562), compiled for
    SQLite on first read."""
    return module_statement(globals(), GateStatements, name)
