"""Statements over ``state_meta`` shared by the storage and search modules (issue 32): one
upsert and the key predicate, built from :mod:`hermes_data.sessions.schema` (kept out of
:mod:`hermes_data.sessions.sql.constructs`, which the schema's own dependencies import)."""

from __future__ import annotations

from typing import Any

from sqlalchemy.sql.elements import ColumnElement

from hermes_data.sessions.schema import state_meta
from hermes_data.sessions.sql.constructs import bp, const
from hermes_data.statements import dialect_insert

__all__ = ["meta_keys", "meta_upsert"]


def meta_upsert(dialect: str) -> Any:
    """Set one ``state_meta`` key: ``INSERT … ON CONFLICT (key) DO UPDATE SET value =
    excluded.value`` (bound: key, value)."""
    stmt = dialect_insert(dialect)(state_meta).values(key=bp("key"), value=bp("value"))
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
