"""Display identity and display order (docs/sessions-ui.md §3.4, §4.14).

``display_identity`` = SHA-256 of ``repr(KEY)`` with ``KEY = (role, content, timestamp,
tool_call_id, tool_calls, tool_name)`` *as stored* — upstream's formula, so rows written by
either implementation dedupe together. ``-0.0`` hashes as ``0.0`` (SQLite returns both as
``0.0``). A user row the store's ``ConversationHooks.split_user_turn`` splits into handoff and
live view is keyed by the encoding of its live content (docs/sessions-agent.md §3.5's display dedupe key), so
``display_order`` groups equal the Python dedupe of the projections.

Every message INSERT names ``display_identity`` (computed here once its timestamp is known);
``display_order`` is left to the insert trigger, except on a SQLite batch append, which
computes it as that trigger would (:class:`BatchOrder`). Rows pending since an adoption or a
key edit are keyed by :func:`ensure_display_order`, one session per write transaction.
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
from typing import Any, Callable, Mapping, Sequence

from sqlalchemy.engine import Connection

from hermes_data.storable import check_text
from hermes_data.sessions.core import encoding as enc
from hermes_data.sessions.agent.projections import ConversationHooks, display_content
from hermes_data.sessions.sql import Fragments
from hermes_data.sessions.storage import display_sql as q

log = logging.getLogger("hermes_data.sessions.core.display_order")

#: Length of a display identity (SHA-256).
IDENTITY_BYTES = 32

#: Positions inside an encoded row (``INSERT_COLS`` without ``session_id``).
_ROLE, _CONTENT, _TOOL_CALL_ID, _TOOL_CALLS, _TOOL_NAME, _TS = range(6)

#: ``split_user_turn`` of a store (``None``: the default, which never splits).
Split = Callable[[Any], tuple[Any, Any]] | None


def identity(role: Any, content: Any, timestamp: Any, tool_call_id: Any, tool_calls: Any,
             tool_name: Any) -> bytes:
    """The 32-byte identity of one stored key (docs/sessions-ui.md §3.4)."""
    ts = timestamp
    if isinstance(ts, (int, float)) and not isinstance(ts, bool):
        ts = float(ts) + 0.0  # -0.0 -> 0.0; an integral REAL as SQLite returns it
    key = (role, content, ts, tool_call_id, tool_calls, tool_name)
    return hashlib.sha256(repr(key).encode("utf-8", "surrogatepass")).digest()


def supplied_identity(value: Any) -> bytes | None:
    """A caller-supplied identity: None, or exactly 32 bytes (else :class:`ValueError`)."""
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray, memoryview)) and len(value) == IDENTITY_BYTES:
        return bytes(value)
    size = len(value) if isinstance(value, (bytes, bytearray, memoryview, str)) else None
    raise ValueError(f"display_identity must be exactly {IDENTITY_BYTES} bytes, got "
                     f"{type(value).__name__}" + ("" if size is None else f" of length {size}"))


class KeyContent:
    """Placeholder of a row whose timestamp is not assigned yet: the content its key uses."""

    __slots__ = ("content",)

    def __init__(self, content: Any) -> None:
        self.content = content


def key_content(m: Mapping[str, Any], role: str, stored: Any, split: Split) -> Any:
    """The content a row's key uses: the stored encoding, or for a user row that ``split``
    reduces to a live view, the encoding of that live content."""
    if split is None or role != "user":
        return stored
    return display_content(dict(m), ConversationHooks(split_user_turn=split), stored)


def pending(m: Mapping[str, Any], row: tuple[Any, ...], split: Split) -> Any:
    """The trailing identity element of a freshly encoded row (before timestamps)."""
    given = supplied_identity(m.get("display_identity"))
    if given is not None:
        return given
    return KeyContent(key_content(m, row[_ROLE], row[_CONTENT], split))


def finish(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """``row`` with its trailing identity computed (its timestamp is assigned by now)."""
    last = row[-1]
    if not isinstance(last, KeyContent):
        return row
    return row[:-1] + (identity(row[_ROLE], last.content, row[_TS], row[_TOOL_CALL_ID],
                                row[_TOOL_CALLS], row[_TOOL_NAME]),)


# ---------------------------------------------------------------------------------------
# The batch append's own ordering (SQLite)
# ---------------------------------------------------------------------------------------

#: Lookups per peer statement (bound values stay far below any build's variable limit).
PEER_LOOKUP_CHUNK = 400
_CANONICAL_INSERT = q.normalise(q.INSERT_TRIGGER_DDL)
_INSERT_TRIGGER = q.TRIGGER_NAMES[0]
#: The event clause of a trigger firing on an ``UPDATE`` of any column.
_UPDATE_ANY = re.compile(r"\bUPDATE\s+ON\b", re.IGNORECASE)


class BatchOrder:
    """Ids and ``display_order`` of a SQLite batch's rows, computed as the canonical insert
    trigger ``messages_display_order_insert`` would set them, so the rows go in ordered and
    the trigger's ``WHEN new.display_order IS NULL`` skips them (no ``UPDATE`` of each row
    just inserted).

    Sound only inside the batch's own write transaction: SQLite holds the database's write
    lock, so nothing else inserts between the rows. The transaction's first row goes in the
    usual way (SQLite picks its id — ``AUTOINCREMENT``'s ``sqlite_sequence`` or the largest
    rowid — and the trigger orders it); every later row takes the next id explicitly, the id
    SQLite would have given it either way (an explicit id above the sequence advances
    ``sqlite_sequence`` as an assigned one does). A row's order is the smallest order of the
    session's visible rows sharing its identity — one set-based lookup per
    :data:`PEER_LOOKUP_CHUNK` identities, rows inserted earlier in the batch included —
    else its own id (the trigger's ``COALESCE(_PEER_ORDER, new.id)``); an invisible row is
    ordered the same way but is nobody's peer, and a row without identity has none."""

    __slots__ = ("next_id", "_ident", "_active")

    def __init__(self, ident_at: int, active_at: int) -> None:
        self.next_id: int | None = None
        self._ident = ident_at
        self._active = active_at

    @classmethod
    def for_triggers(cls, triggers: Sequence[Sequence[Any]], ident_at: int,
                     active_at: int) -> "BatchOrder | None":
        """An orderer when the stored insert trigger (``triggers``: ``(name, sql)`` of the
        table's triggers) is exactly the canonical one and no other trigger could tell the
        difference (one naming ``display_order``, or an ``UPDATE`` trigger without a column
        list, which the trigger's ``UPDATE`` would fire); else None: a variant, a missing
        trigger or such a foreign one keeps the plain insert, whatever they do."""
        canonical = False
        for name, ddl in triggers:
            text = q.normalise(ddl or "")
            if name == _INSERT_TRIGGER:
                canonical = text == _CANONICAL_INSERT
            elif name not in q.TRIGGER_NAMES and ("display_order" in text.lower()
                                                 or _UPDATE_ANY.search(text)):
                return None
        return cls(ident_at, active_at) if canonical else None

    def insert(self, tx: Any, fq: Fragments, session_id: str,
               rows: Sequence[tuple[Any, ...]]) -> None:
        """Insert encoded ``rows`` (``INSERT_MESSAGE`` order without the session id)."""
        if not rows:
            return
        if self.next_id is None:
            first = tx.execute(fq.INSERT_MESSAGE_RETURNING, (session_id, *rows[0])).fetchone()
            self.next_id = int(first[0]) + 1
            rows = rows[1:]
        if not rows:
            return
        if self.next_id + len(rows) - 1 > q.MAX_ROWID:  # SQLite's own rule from here on
            self.next_id = q.MAX_ROWID + 1
            tx.executemany(fq.INSERT_MESSAGE, [(session_id, *r) for r in rows])
            return
        known = self._peers(tx, session_id, rows)
        ident_at, active_at = self._ident, self._active
        out = []
        rid = self.next_id
        for r in rows:
            ident = r[ident_at]
            order = rid if ident is None else known.get(ident, rid)
            if ident is not None and r[active_at] == 1:
                known.setdefault(ident, order)
            out.append((rid, session_id, *r, order))
            rid += 1
        self.next_id = rid
        tx.executemany(fq.INSERT_MESSAGE_ORDERED, out)

    def _peers(self, tx: Any, session_id: str, rows: Sequence[tuple[Any, ...]]) -> dict:
        """identity -> smallest order of the session's visible rows holding it (rows with a
        NULL order only: absent, as ``MIN`` ignores them)."""
        idents = list(dict.fromkeys(r[self._ident] for r in rows if r[self._ident] is not None))
        known: dict[bytes, int] = {}
        for lo in range(0, len(idents), PEER_LOOKUP_CHUNK):
            part = idents[lo:lo + PEER_LOOKUP_CHUNK]
            for ident, order in tx.execute(q.peer_orders(len(part)),
                                           (session_id, *part)).fetchall():
                if order is not None:
                    known[bytes(ident)] = int(order)
        return known


# ---------------------------------------------------------------------------------------
# docs/sessions-ui.md §4.14 ensure_display_order
# ---------------------------------------------------------------------------------------


def has_pending(conn: Connection, session_id: str) -> bool:
    """Does ``session_id`` have a visible row without order or identity? (index probe)"""
    return q.PENDING_PROBE.run(conn, {"sid": session_id}).first() is not None


def _row_key_content(r: Sequence[Any], d: str, split: Split) -> Any:
    if split is None or r[1] != "user":
        return r[2]
    return key_content({"role": "user", "content": enc.decode_content(r[2], d)}, "user", r[2],
                       split)


def fill_session(conn: Connection, q_: Fragments, session_id: str, split: Split) -> int:
    """Key every visible row of a session and set ``(order, identity) = (first id of its key,
    identity)`` where either differs; returns the rows written (caller's write transaction)."""
    rows = q.VISIBLE_KEY_ROWS.run(conn, {"sid": session_id}).fetchall()
    first: dict[bytes, int] = {}
    updates = []
    for r in rows:
        ident = identity(r[1], _row_key_content(r, q_.dialect, split), r[3], r[4], r[5], r[6])
        order = first.setdefault(ident, r[0])
        if r[7] != order or (None if r[8] is None else bytes(r[8])) != ident:
            updates.append({"id": r[0], "o": order, "i": ident})
    if updates:
        q.SET_DISPLAY.runmany(conn, updates)
    return len(updates)


def pending_sessions(conn: Connection, limit: int) -> list[str]:
    """Up to ``limit`` sessions with a pending visible row."""
    return [str(r[0]) for r in q.PENDING_SESSIONS.run(conn, {"n": limit}).fetchall()]


def backfill(store: Any, split: Split, max_sessions: int = 50,
             time_budget_s: float = 1.0) -> int:
    """Drain pending sessions, one write transaction each, within the budgets; returns the
    sessions keyed. Read-only handles key nothing."""
    if store.read_only:
        return 0
    deadline = time.monotonic() + max(0.0, float(time_budget_s))
    todo = store.backend.read(lambda c: pending_sessions(c, max(0, int(max_sessions))))
    done = 0
    for sid in todo:
        if time.monotonic() > deadline:
            break
        ensure_display_order(store, sid)
        done += 1
    return done

def store_split(store: Any) -> Split:
    """The store's ``split_user_turn``, or None for the default (which never splits)."""
    hooks = getattr(store, "conversation_hooks", None)
    fn = getattr(hooks, "split_user_turn", None)
    return None if fn is None or fn is _DEFAULT_SPLIT else fn


_DEFAULT_SPLIT = ConversationHooks().split_user_turn


def ensure_display_order(store: Any, session_id: str) -> bool:
    """Key a session's pending visible rows (docs/sessions-ui.md §4.14): True when none is pending (any more);
    False on a read-only handle with pending rows (the caller dedupes in Python with docs/sessions-ui.md §3.4
    keys). One write transaction: re-probe, key every visible row, set each row's order to
    its key's first id and its identity — D1 holds afterwards."""
    if not isinstance(session_id, str) or not session_id:
        raise ValueError(f"session_id must be a non-empty string, got {session_id!r}")
    check_text("session_id", session_id)
    if not store.backend.read(lambda c: has_pending(c, session_id)):
        return True
    if store.read_only:
        return False
    split = store_split(store)
    q_ = store.backend.sql

    def work(conn: Connection) -> int:
        if q_.dialect == "postgresql":
            conn.execute(q.PG_SESSION_LOCK, {"sid": session_id})  # the triggers' lock
        if not has_pending(conn, session_id):
            return 0
        return fill_session(conn, q_, session_id, split)

    n = store.backend.write(work)
    if n:
        log.debug("display order: keyed %d row(s) of %s", n, session_id)
    return True


def backfill_display_order(store: Any, max_sessions: int = 50,
                           time_budget_s: float = 1.0) -> int:
    """Drain up to ``max_sessions`` pending sessions within ``time_budget_s`` (one write
    transaction each); returns the sessions keyed (0 on a read-only handle)."""
    return backfill(store, store_split(store), max_sessions, time_budget_s)
