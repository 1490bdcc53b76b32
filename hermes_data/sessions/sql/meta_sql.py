"""Statements over ``state_meta`` shared by the storage and search modules (issue 32): one
upsert and the key predicate, built from :mod:`hermes_data.sessions.schema` (kept out of
:mod:`hermes_data.sessions.sql.constructs`, which the schema's own dependencies import), and
:class:`MetaStatements`, the by-key reads and writes every concern's statement class
inherits."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.sql.elements import ColumnElement

from hermes_data.sessions.schema import messages, state_meta
from hermes_data.sessions.sql.constructs import bp, const
from hermes_data.sessions.sql.dialect import Statements, driver_statement
from hermes_data.statements import dialect_insert

__all__ = ["MetaStatements", "meta_delete", "meta_exists", "meta_get", "meta_keys", "meta_set",
           "meta_upsert", "meta_value"]


def meta_get(dialect: str) -> Any:
    """One ``state_meta`` value (bound: key)."""
    return sa.select(state_meta.c.value).where(meta_keys())


def meta_value(key: str) -> Any:
    """The value of the fixed key ``key`` (no row: none)."""
    return sa.select(state_meta.c.value).where(meta_keys(key))


def meta_exists(key: str) -> Any:
    """``SELECT 1`` when the fixed key ``key`` is set."""
    return sa.select(const(1)).where(meta_keys(key))


def meta_delete(*keys: str) -> Any:
    """Remove the fixed ``keys`` (none: the bound key)."""
    return sa.delete(state_meta).where(meta_keys(*keys))


def meta_upsert(dialect: str) -> Any:
    """Set one ``state_meta`` key: ``INSERT … ON CONFLICT (key) DO UPDATE SET value =
    excluded.value`` (bound: key, value)."""
    return meta_set(dialect)


def meta_set(dialect: str, key: str | None = None, value: str | None = None) -> Any:
    """:func:`meta_upsert` with the statement's own fixed ``key`` and/or ``value`` inline
    (each left out is bound, key before value)."""
    stmt = dialect_insert(dialect)(state_meta).values(
        key=bp("key") if key is None else const(key),
        value=bp("value") if value is None else const(value)).inline()  # no RETURNING key
    return stmt.on_conflict_do_update(index_elements=[state_meta.c.key],
                                      set_={"value": stmt.excluded.value})


def meta_keys(*keys: str) -> ColumnElement[Any]:
    """``key = '<k>'`` / ``key IN ('<k>', …)`` over ``state_meta`` for the statement's own
    fixed keys (inline constants); no key: ``key = ?`` (bound: key)."""
    if not keys:
        return state_meta.c.key == bp("key")
    if len(keys) == 1:
        return state_meta.c.key == const(keys[0])
    return state_meta.c.key.in_([const(k) for k in keys])


class MetaStatements(Statements):
    """``state_meta`` by key and the newest message id: the bookkeeping the core, the FTS
    layout migration, the batch's rebuild gate and the CJK index all send. Defined once here;
    each concern's statement class inherits them (compiled once per dialect, shared)."""

    #: One ``state_meta`` value (key).
    GET_META = driver_statement(meta_get, "key")
    #: Set one ``state_meta`` key (key, value).
    SET_META = driver_statement(meta_upsert, "key", "value")
    #: Delete one ``state_meta`` key (key).
    DELETE_META = driver_statement(lambda d: meta_delete(), "key")
    #: The largest message id (NULL on an empty table): the backfill high waters, the batch
    #: gate, the windowed pre-scans' upper end.
    MAX_MESSAGE_ID = driver_statement(lambda d: sa.select(sa.func.max(messages.c.id)))
