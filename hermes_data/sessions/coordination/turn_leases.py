"""Turn leases (docs/sessions-coordination.md §3.14): whole turns of one conversation
serialized across processes, keyed by the conversation key (the compression root, docs/sessions-coordination.md §3.3),
and the fenced appends that present them.

Leases fence only writers that present them: an append without ``turn_lease_holder``
reads no lease row (the hot path costs nothing more). With one, the append transaction
first checks the lease — missing or foreign ⇒ :class:`SessionTurnLeaseLostError`, nothing
written, never retried; the holder's own expired, unreclaimed row is renewed (expiry makes
a row reclaimable, it does not prove a takeover) — then runs the core admission and insert.
``compression_lock_holder`` is accepted and ignored: appends never consult compression
locks (the watermark protocol makes concurrent appends safe).
"""

from __future__ import annotations

import logging
import math
import sqlite3
import time
from typing import Any, Callable, Sequence

import sqlalchemy as sa

from hermes_data.errors import DatabaseBusyError
from hermes_data.locking import is_lock_conflict
from hermes_data.storable import check_texts
from hermes_data.sessions.storage.fts import cjk
from hermes_data.sessions.storage.fts import maintenance as fts_maintenance
from hermes_data.sessions.core import encoding as enc
from hermes_data.sessions.core import messages as msg
from hermes_data.sessions.backends import ROUTINE_PATIENCE_S
from hermes_data.sessions.backends.base import Driver
from hermes_data.sessions.core.display_order import store_split
from hermes_data.sessions.errors import SessionTurnLeaseLostError
from hermes_data.sessions.coordination.lock_rows import (DEFAULT_TTL_S, Clock, Execute, check_ttl, claim, conversation_key,
                         usable_holder)
from hermes_data.sessions.handle import StoreHandle
from hermes_data.sessions.rows import NewMessage
from hermes_data.sessions.coordination.sql import CoordinationStatements, for_dialect

log = logging.getLogger("hermes_data.sessions.coordination.turn_leases")


def _cs(store: StoreHandle) -> CoordinationStatements:
    return for_dialect(store.backend.dialect)


def _locked(exc: BaseException) -> bool:
    # A failed attempt of the wait loop: busy budget spent, or a lock-class driver error
    # (every kind, SQLite and PostgreSQL: the loop waits any of them out).
    return isinstance(exc, DatabaseBusyError) or is_lock_conflict(exc)


def try_acquire_session_turn_lease(store: StoreHandle, session_id: str, holder: str, *,
                                   ttl_seconds: float = DEFAULT_TTL_S,
                                   patience_s: float | None = None) -> bool:
    """Take the turn lease of ``session_id``'s conversation for ``holder`` in one
    transaction (``patience_s``: its busy budget, default routine): a stale row is
    compare-and-deleted, an own live row extended (never lowered). Returns ownership;
    blank id/holder ⇒ ``False``; errors propagate."""
    ttl = check_ttl(ttl_seconds)
    check_texts((("session_id", session_id), ("holder", holder)))
    if not session_id or not usable_holder(holder):
        return False
    cs = _cs(store)
    clock = Clock(store, cs)

    def work(tx: Driver) -> tuple[bool, str | None, str]:
        ex = tx.execute
        now = clock.now(ex)
        key = conversation_key(ex, cs, session_id)
        owned, reclaimed = claim(ex, cs.lease, clock, key, holder, ttl, now)
        return owned, reclaimed, key

    patience = ROUTINE_PATIENCE_S if patience_s is None else max(0.0, float(patience_s))
    owned, reclaimed, key = store.backend.write_driver(work, patience=patience,
                                                       header_in_fn=False)
    if reclaimed is not None:
        log.warning("turn lease of conversation %r reclaimed from stale holder %r", key,
                    reclaimed)
    return owned


def acquire_session_turn_lease(store: StoreHandle, session_id: str, holder: str, *,
                               ttl_seconds: float = DEFAULT_TTL_S,
                               wait_seconds: float = 1800.0,
                               poll_interval_seconds: float = 1.0,
                               on_wait: Callable[[float], Any] | None = None,
                               wait_notice_interval_seconds: float = 15.0,
                               should_abort: Callable[[], Any] | None = None,
                               acquire_patience_s: float = 0.5) -> bool:
    """Wait (monotonic budget ``wait_seconds``) for the turn lease: one attempt per poll,
    nothing held while sleeping. ``on_wait(elapsed)`` after the first failed attempt and
    then every notice interval; ``should_abort()`` true ⇒ ``False``. Lock-class failures
    count as a failed attempt; other errors propagate; callback errors are ignored."""
    if isinstance(wait_seconds, float) and math.isnan(wait_seconds):
        raise ValueError("wait_seconds must not be NaN")
    check_ttl(ttl_seconds)
    check_texts((("session_id", session_id), ("holder", holder)))
    mono = getattr(store, "mono", time.monotonic)
    start = mono()
    deadline = start + max(0.0, float(wait_seconds))
    last_notice: float | None = None
    while True:
        if should_abort is not None and _call(should_abort):
            return False
        try:
            if try_acquire_session_turn_lease(store, session_id, holder, ttl_seconds=ttl_seconds,
                                              patience_s=acquire_patience_s):
                return True
        except (DatabaseBusyError, sa.exc.DBAPIError, sqlite3.Error) as exc:
            if not _locked(exc):
                raise
        now = mono()
        remaining = deadline - now
        if remaining <= 0:
            return False
        if on_wait is not None and (last_notice is None
                                    or now - last_notice >= wait_notice_interval_seconds):
            last_notice = now
            _call(on_wait, now - start)
        time.sleep(min(max(0.01, float(poll_interval_seconds)), remaining))


def _call(fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - a caller's callback never breaks the wait
        log.debug("turn-lease wait callback %r failed: %s", fn, exc)
        return None


def refresh_session_turn_lease(store: StoreHandle, session_id: str, holder: str, *,
                               ttl_seconds: float = DEFAULT_TTL_S) -> bool:
    """Extend ``holder``'s lease to ``now + ttl`` (holder-matched, no expiry predicate);
    ``False`` after a reclaim, a release or a re-keying of the conversation."""
    ttl = check_ttl(ttl_seconds)
    check_texts((("session_id", session_id), ("holder", holder)))
    if not session_id or not usable_holder(holder):
        return False
    cs = _cs(store)
    clock = Clock(store, cs)

    def work(tx: Driver) -> bool:
        ex = tx.execute
        now = clock.now(ex)
        key = conversation_key(ex, cs, session_id)
        return ex(cs.lease.REFRESH, (now + ttl, key, holder)).rowcount == 1

    return bool(store.backend.write_driver(work, patience=ROUTINE_PATIENCE_S,
                                           header_in_fn=False))


def release_session_turn_lease(store: StoreHandle, session_id: str, holder: str) -> None:
    """Delete ``holder``'s lease of the conversation (holder-matched, idempotent)."""
    check_texts((("session_id", session_id), ("holder", holder)))
    if not session_id or not usable_holder(holder):
        return
    cs = _cs(store)

    def work(tx: Driver) -> None:
        ex = tx.execute
        ex(cs.lease.RELEASE, (conversation_key(ex, cs, session_id), holder))

    store.backend.write_driver(work, patience=ROUTINE_PATIENCE_S, header_in_fn=False)


def fence_append(ex: Execute, cs: CoordinationStatements, clock: Clock, session_id: str,
                 holder: str, ttl: float) -> None:
    """docs/sessions-coordination.md §3.14 step 1 inside an append transaction: the lease at ``KEY(session_id)`` must be
    ``holder``'s (else :class:`SessionTurnLeaseLostError`); an own expired row is renewed."""
    if cs.dialect == "postgresql":
        ex(cs.LOCK_SESSION, (session_id,))  # W4e lock order: sessions → leases
    now = clock.now(ex)
    key = conversation_key(ex, cs, session_id)
    row = ex(cs.lease.READ, (key,)).fetchone()
    if row is None or row[0] != holder:
        raise SessionTurnLeaseLostError(session_id, key, holder,
                                        None if row is None else str(row[0]))
    if float(row[1]) <= now:
        ex(cs.lease.REFRESH, (now + ttl, key, holder))


def append_message(store: Any, session_id: str, role: str, content: Any = None, *,
                   compression_lock_holder: str | None = None,
                   turn_lease_holder: str | None = None,
                   turn_lease_ttl_seconds: float = DEFAULT_TTL_S, **fields: Any) -> int:
    """Append one message in its own transaction; returns the new row id.

    Raises :class:`SessionNotFoundError` for an unknown session,
    :class:`CompressionSessionClosedError` when the session continued in a child and, with
    ``turn_lease_holder``, :class:`SessionTurnLeaseLostError` when that holder does not own
    the conversation's turn lease, and
    :class:`~hermes_data.errors.UnstorableValueError` (before writing) when ``session_id``,
    ``role`` or another text field holds NUL or a lone surrogate (``content`` is stored as
    given, its lone surrogates as U+FFFD, docs/sessions.md §6.1). Keyword fields are those of
    :class:`~hermes_data.sessions.rows.NewMessage`; ``compression_lock_holder`` is ignored.
    ``skip_if_platform_message_exists=True`` returns the id of a row already holding the
    non-empty ``platform_message_id`` instead, decided inside the append's transaction after
    the lease check and admission (gateway A4).
    """
    b = store.backend
    q = b.sql
    check_texts((("session_id", session_id), ("turn_lease_holder", turn_lease_holder)))
    skip = bool(fields.pop("skip_if_platform_message_exists", False))
    pmid = fields.get("platform_message_id", fields.get("message_id")) if skip else None
    row = msg.encode_row({**fields, "role": role, "content": content}, 0, q.dialect,
                         batch=False, default_ts=enc.now(), split=store_split(store))
    if turn_lease_holder is None:
        new_id = int(b.write_driver(lambda tx: msg.append_one(tx, q, b.check_header,
                                                              session_id, row, skip_pmid=pmid)))
    else:
        ttl = check_ttl(turn_lease_ttl_seconds, "turn_lease_ttl_seconds")
        cs = _cs(store)
        clock = Clock(store, cs)

        def fenced(tx: Any) -> int:
            fence_append(tx.execute, cs, clock, session_id, turn_lease_holder, ttl)
            return msg.append_one(tx, q, b.check_header, session_id, row, skip_pmid=pmid)

        new_id = int(b.write_driver(fenced))
    cjk.after_append(b, ({**fields, "role": role, "content": content},))  # post-commit drain
    fts_maintenance.after_append(store)  # post-commit merge cadence (docs/sessions-storage.md §3.7)
    return new_id


def append_messages_batch(store: Any, session_id: str, messages: Sequence[NewMessage],
                          chunk_rows: int | None = None, *,
                          compression_lock_holder: str | None = None,
                          turn_lease_holder: str | None = None,
                          turn_lease_ttl_seconds: float = DEFAULT_TTL_S) -> int:
    """Append ``messages`` all-or-nothing (or per chunk of ``chunk_rows``, each chunk
    re-checking the turn lease when ``turn_lease_holder`` is given); returns rows inserted.
    ``compression_lock_holder`` is ignored (appends never consult compression locks)."""
    check_texts((("session_id", session_id), ("turn_lease_holder", turn_lease_holder)))
    b = store.backend
    fence: Callable[[Any], None] | None = None
    if turn_lease_holder is not None:
        ttl = check_ttl(turn_lease_ttl_seconds, "turn_lease_ttl_seconds")
        cs = _cs(store)
        clock = Clock(store, cs)
        holder = turn_lease_holder

        def fence_tx(tx: Any) -> None:
            fence_append(tx.execute, cs, clock, session_id, holder, ttl)

        fence = fence_tx
    n = msg.append_batch(b.write_driver, b.check_header, b.sql, session_id, messages,
                         chunk_rows, split=store_split(store), fence=fence)
    cjk.after_append(b, messages)  # post-commit drain of the CJK-bigram queue
    fts_maintenance.after_append(store)  # post-commit merge cadence (docs/sessions-storage.md §3.7)
    return n


__all__ = ["acquire_session_turn_lease", "append_message", "append_messages_batch",
           "fence_append", "refresh_session_turn_lease", "release_session_turn_lease",
           "try_acquire_session_turn_lease"]
