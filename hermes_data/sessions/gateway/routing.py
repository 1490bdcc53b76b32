"""The gateway's durable routing index and hygiene streaks
(docs/sessions-gateway.md §3.1–§3.2).

``gateway_routing`` is the durable ``sessions.json`` (#9006): ``scope`` namespaces one
gateway's index and is compared exactly; ``entry_json`` is opaque (stored and returned
byte for byte). Nothing here checkpoints. Operations take the store first (the facade
delegates through :mod:`.gateway_api`); statements are in :mod:`.sql.gateway`.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

from sqlalchemy.engine import Connection

from hermes_data.storable import check_text, check_texts
from hermes_data.sessions.backends import ROUTINE_PATIENCE_S
from hermes_data.sessions.backends.base import Driver
from hermes_data.sessions.gateway.common import chunks, db_now, driver_now, str_collection, text_arg
from hermes_data.sessions.handle import StoreHandle
from hermes_data.sessions.gateway.sql import GatewayStatements, for_dialect

log = logging.getLogger("hermes_data.sessions.gateway")

_OMITTED: Any = object()


def _g(store: StoreHandle) -> GatewayStatements:
    return for_dialect(store.backend.dialect)


def save_gateway_routing_entry(store: StoreHandle, session_key: str, entry_json: str, *,
                               scope: str = "", if_current: Any = _OMITTED) -> bool:
    """Store one routing entry of ``scope``; blank key or entry ⇒ ``False`` (no write).

    Without ``if_current``: upsert, last writer wins (upstream), ``True``. With
    ``if_current`` (the entry the caller last read, or None = "no row expected"): a
    compare-and-set in one transaction; when nothing changed, ``True`` only if the stored
    entry already equals ``entry_json`` (a replay of an attempt that landed), else ``False``
    (someone moved the entry: re-read and decide)."""
    text_arg("entry_json", entry_json)
    if if_current is not _OMITTED and if_current is not None:
        text_arg("if_current", if_current)
    check_texts((("session_key", session_key), ("entry_json", entry_json), ("scope", scope),
                 ("if_current", if_current)))
    if not session_key or not session_key.strip() or not entry_json.strip():
        return False
    g, d = _g(store), store.backend.dialect

    def run(tx: Driver) -> bool:  # DB-API level: one upsert is the gateway's hot write
        now = driver_now(tx, d)
        if if_current is _OMITTED:
            tx.execute(g.ROUTING_UPSERT, (scope, session_key, entry_json, now))
            return True
        if if_current is None:
            changed = tx.execute(g.ROUTING_INSERT_NEW,
                                 (scope, session_key, entry_json, now)).rowcount
        else:
            changed = tx.execute(g.ROUTING_CAS,
                                 (entry_json, now, scope, session_key, if_current)).rowcount
        if changed:
            return True
        stored = tx.execute(g.ROUTING_GET, (scope, session_key)).fetchone()
        return stored is not None and stored[0] == entry_json

    return store.backend.write_driver(run, patience=ROUTINE_PATIENCE_S, header_in_fn=False)


def replace_gateway_routing_entries(store: StoreHandle, entries: Mapping[str, str], *,
                                    scope: str = "") -> int:
    """Rewrite ``scope`` to exactly ``entries`` (``str → str``; blank keys/values skipped) in
    one transaction with one ``updated_at``; other scopes untouched; returns rows written.
    Writers of one scope must serialize (it reverts saves committed after the snapshot)."""
    if not isinstance(entries, Mapping):
        raise TypeError(f"entries must be a mapping of str to str, got {type(entries).__name__}")
    pairs = []
    for k, v in entries.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise TypeError(f"entries must map str to str, got {k!r}: {type(v).__name__}")
        if k.strip() and v.strip():
            pairs.append((k, v))
    check_texts((("scope", scope), *(("entries", v) for p in pairs for v in p)))
    g, d = _g(store), store.backend.dialect

    def run(conn: Connection) -> int:
        now = db_now(conn, d)
        conn.exec_driver_sql(g.ROUTING_CLEAR_SCOPE, (scope,))
        if pairs:
            conn.exec_driver_sql(g.ROUTING_INSERT, [(scope, k, v, now) for k, v in pairs])
        return len(pairs)

    return store.backend.write(run)


def load_gateway_routing_entries(store: StoreHandle, *, scope: str = "") -> dict[str, str]:
    """Every entry of ``scope`` as ``{session_key: entry_json}``, ordered by key."""
    g = _g(store)
    return store.backend.read_driver(lambda tx: {str(k): str(v) for k, v in tx.execute(
        g.ROUTING_LOAD, (scope,)).fetchall()}, single_statement=True)


def delete_gateway_routing_entries(store: StoreHandle, session_keys: Any, *,
                                   scope: str = "") -> int:
    """Delete keys of ``scope`` (an iterable of ``str``; a bare ``str`` ⇒ ``TypeError``);
    blanks skipped, duplicates once, ≤ 900 per statement; returns rows deleted."""
    keys = str_collection("session_keys", session_keys)
    check_texts((("scope", scope), *(("session_keys", k) for k in keys)))
    if not keys:
        return 0
    g = _g(store)

    def run(conn: Connection) -> int:
        return sum(conn.exec_driver_sql(g.routing_delete(len(part)), (scope, *part)).rowcount
                   for part in chunks(keys))

    return store.backend.write(run)


def increment_hygiene_failure_streak(store: StoreHandle, session_key: str) -> int:
    """Count one more hygiene failure for a chat and return the streak; blank ⇒ 1, no write.
    Not idempotent (each call counts)."""
    check_text("session_key", session_key)
    if not session_key or not session_key.strip():
        return 1
    g = _g(store)

    def run(conn: Connection) -> int:
        res = conn.exec_driver_sql(g.HYGIENE_BUMP, (session_key,))
        if store.backend.dialect == "postgresql":
            value = res.scalar()
        else:
            value = conn.exec_driver_sql(g.HYGIENE_GET, (session_key,)).scalar()
        return int(value or 0)

    return store.backend.write(run)


def reset_hygiene_failure_streak(store: StoreHandle, session_key: str) -> None:
    """Forget a chat's hygiene streak; blank ⇒ no-op."""
    check_text("session_key", session_key)
    if not session_key or not session_key.strip():
        return
    g = _g(store)
    store.backend.write(lambda c: c.exec_driver_sql(g.HYGIENE_RESET, (session_key,)))
