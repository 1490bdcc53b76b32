"""Gateway peer recovery (docs/sessions-gateway.md §3.3): the routing identity on the
durable row (#9006) with self-heal (#82616), recovery of a chat's session behind the reset
fence (#68539), origin lookups and the live mapping per peer.

Every recovery read runs in one snapshot; the fence uses the one ``RESET_END_REASONS``
constant; the tuple fallback is fenced by the owner profile (seed 003 #74285; on PostgreSQL
the owner is the one the store was opened with).
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy.engine import Connection

from hermes_data.storable import check_texts
from hermes_data.sessions.core import listing
from hermes_data.sessions.backends.base import Driver
from hermes_data.sessions.gateway.common import wall
from hermes_data.sessions.handle import StoreHandle
from hermes_data.sessions.ui.pickers import SessionActivityRow
from hermes_data.sessions.rows import SessionRow
from hermes_data.sessions.gateway.peers_sql import for_dialect, tuple_params

log = logging.getLogger("hermes_data.sessions.gateway")

#: Compression ancestors stamped with ``include_compression_ancestors`` (hops up).
MAX_ANCESTOR_HOPS = 100
_TRIGRAM_SIDE = ("cron", "subagent")


def _s(value: Any) -> str | None:
    return None if value is None else str(value)


def find_latest_gateway_session_for_peer(store: StoreHandle, *, source: str,
                                         user_id: Any = None, session_key: str | None = None,
                                         chat_id: Any = None, chat_type: str | None = None,
                                         thread_id: Any = None) -> SessionRow | None:
    """The session a gateway should resume for a peer, or None: the exact key first (rows
    with messages preferred, then the latest activity), else — with ``chat_id`` and
    ``chat_type`` — the latest same-tuple row with messages of this owner profile. Rows
    behind a reset boundary of the same peer are never returned."""
    if not session_key or not str(session_key).strip():
        return None
    backend = store.backend
    p = for_dialect(backend.dialect)
    by_key = (session_key, source)

    def key_only(tx: Driver) -> Any:  # at the DB-API level: ~60 columns of result metadata
        return tx.execute(p.BY_KEY, by_key).fetchone()  # cost more than the lookup

    if chat_id is None or chat_type is None:  # no tuple to fall back on: one statement
        row = backend.read_driver(key_only, single_statement=True)
        return None if row is None else listing.session_row(row)
    owner = store.owner_profile()

    def run(tx: Driver) -> SessionRow | None:
        row = key_only(tx)
        if row is None:
            values = tuple(str(x) if x is not None else "" for x in
                           (user_id, chat_id, chat_type, thread_id))
            present, args = tuple_params(source, values, owner)
            row = tx.execute(p.by_tuple(present, owner is not None), args).fetchone()
        return None if row is None else listing.session_row(row)

    if p.dialect != "sqlite":
        return backend.read_driver(run)
    # SQLite: the key alone first, one statement (its own snapshot, no BEGIN/COMMIT); a miss
    # reads key and tuple again in one snapshot, so an answer never mixes two snapshots.
    row = backend.read_driver(key_only, single_statement=True)
    return listing.session_row(row) if row is not None else backend.read_driver(run)


def record_gateway_session_peer(store: StoreHandle, session_id: str, *, source: str,
                                user_id: Any = None, session_key: str | None = None,
                                chat_id: Any = None, chat_type: str | None = None,
                                thread_id: Any = None, display_name: str | None = None,
                                origin_json: str | None = None,
                                include_compression_ancestors: bool = False) -> int:
    """Stamp a peer's routing identity on ``session_id`` (and, with
    ``include_compression_ancestors``, on its compression ancestors): key and tuple are
    authoritative (None clears), display name and origin only fill; ``source`` changes only
    where the trigram invariant allows (else kept, WARNING). A missing id is created with the
    owner profile. Returns rows updated + inserted; blank id or key ⇒ 0."""
    check_texts((("session_id", session_id), ("source", source), ("user_id", user_id),
                 ("session_key", session_key), ("chat_id", chat_id), ("chat_type", chat_type),
                 ("thread_id", thread_id), ("display_name", display_name),
                 ("origin_json", origin_json)))
    if not session_id or not session_key or not str(session_key).strip():
        return 0
    if not source or not str(source).strip():
        raise ValueError(f"source must be a non-empty string, got {source!r}")
    p = for_dialect(store.backend.dialect)
    ident = (session_key, _s(user_id), _s(chat_id), chat_type, _s(thread_id))

    def run(conn: Connection) -> int:
        targets = [session_id]
        if include_compression_ancestors:
            cur = session_id
            for _ in range(MAX_ANCESTOR_HOPS):
                up = conn.exec_driver_sql(p.EDGE_PARENT, (cur,)).scalar()
                if up is None or up in targets:
                    break
                targets.append(str(up))
                cur = str(up)
        n = 0
        for sid in targets:
            row = conn.exec_driver_sql(p.TARGET, (sid,)).first()
            if row is None:
                if sid == session_id:
                    conn.exec_driver_sql(p.CREATE, (sid, source, *ident, display_name,
                                                    origin_json, store.owner_profile(), wall()))
                    n += 1
                continue
            old, has_messages = str(row[0]), bool(row[1])
            new_source = source
            if has_messages and old != source and \
                    (old in _TRIGRAM_SIDE) != (source in _TRIGRAM_SIDE):
                log.warning("session %s keeps source %r: it has messages and %r is across the "
                            "trigram boundary (docs/sessions.md §2.6)", sid, old, source)
                new_source = old
            n += conn.exec_driver_sql(p.STAMP, (new_source, *ident, display_name, origin_json,
                                                sid)).rowcount
        return n

    return store.backend.write(run)


def find_session_by_origin(store: StoreHandle, *, platform: str, chat_id: Any,
                           thread_id: Any = None, user_id: Any = None) -> str | None:
    """The open keyed session of a chat (and thread) on ``platform``, or None. With
    ``user_id`` the newest exact sender wins, else a single row only; without it, None when
    the rows carry more than one participant. Never another participant's session."""
    if not platform or not str(platform).strip() or chat_id is None or str(chat_id) == "":
        return None
    p = for_dialect(store.backend.dialect)
    args: tuple[str, ...]
    if thread_id is None:
        st, args = p.BY_ORIGIN, (platform, str(chat_id))
    else:
        st, args = p.BY_ORIGIN_THREAD, (platform, str(chat_id), str(thread_id))
    rows = store.backend.read(lambda c: c.exec_driver_sql(st, args).fetchall())
    if not rows:
        return None
    if user_id is not None:
        for sid, uid in rows:
            if uid is not None and str(uid) == str(user_id):
                return str(sid)
        return None if len(rows) > 1 else str(rows[0][0])
    users = {str(uid) for _, uid in rows if uid is not None and str(uid).strip()}
    return None if len(users) > 1 else str(rows[0][0])


def list_gateway_sessions(store: Any, *, platform: str | None = None,
                          active_only: bool = True) -> list[SessionActivityRow]:
    """One live mapping per ``(source, session_key)``: the newest row of each peer (omitted
    when it ended and ``active_only``), optionally of one platform; most recent first.
    Queued token counts are flushed first."""
    store.flush_token_counts()
    p = for_dialect(store.backend.dialect)
    st = p.gateway_sessions(platform is not None, active_only)
    args = () if platform is None else (platform,)
    rows = store.backend.read(lambda c: c.exec_driver_sql(st, args).fetchall())
    n = len(listing.SESSION_ROW_COLS)
    return [SessionActivityRow(**listing.session_fields(r), last_active=r[n + 1]) for r in rows]
