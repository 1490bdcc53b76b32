"""``state_meta`` (docs/sessions.md §7.7): the store's small key/value table."""

from __future__ import annotations

from sqlalchemy.engine import Connection

from hermes_data.sessions.core import encoding as enc
from hermes_data.sessions.sql import Fragments


def get_meta(conn: Connection, q: Fragments, key: str) -> str | None:
    """One value, or None."""
    row = conn.exec_driver_sql(q.GET_META, (key,)).first()
    return None if row is None else row[0]


def set_meta(conn: Connection, q: Fragments, key: str, value: str | None) -> None:
    """Upsert one value."""
    conn.exec_driver_sql(q.SET_META, (key, value))


def list_meta_prefix(conn: Connection, q: Fragments, prefix: str) -> dict[str, str | None]:
    """Every key starting with ``prefix`` (escaped LIKE), in key order; an empty prefix
    lists nothing (as upstream: enumerating a namespace needs one)."""
    if not prefix:
        return {}
    rows = conn.exec_driver_sql(q.LIST_META_PREFIX, (enc.escape_like(prefix) + "%",)).fetchall()
    return {k: v for k, v in rows}
