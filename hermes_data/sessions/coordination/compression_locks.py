"""Compression locks (docs/sessions-coordination.md §3.10): try-acquire, refresh,
release, the live holder, and the lease-required publication of a compression child.

A lock is keyed by the session being compressed and held for the summary call plus the
publication, so two paths never rotate one session into two children. Operations take the
store first (the facade delegates through :mod:`.coordination_api`); statements are in
:mod:`.sql.coordination`; the liveness rule and claim protocol are :mod:`.guard_rows`'.
"""

from __future__ import annotations

import logging
import sqlite3
from typing import Any, Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from hermes_data.storable import check_texts
from hermes_data.errors import DatabaseBusyError
from hermes_data.sessions.core import lifecycle
from hermes_data.sessions.core import messages as msg
from hermes_data.sessions.backends import ROUTINE_PATIENCE_S, TRANSCRIPT_PATIENCE_S
from hermes_data.sessions.backends.base import Driver
from hermes_data.sessions.core.display_order import store_split
from hermes_data.sessions.errors import CompressionPublishError, CompressionSessionBusyError
from hermes_data.sessions.coordination.lock_rows import DEFAULT_TTL_S, Clock, check_ttl, claim, usable_holder
from hermes_data.sessions.handle import StoreHandle
from hermes_data.sessions.rows import NewMessage, PublishResult
from hermes_data.sessions.coordination.sql import CoordinationStatements, for_dialect

log = logging.getLogger("hermes_data.sessions.coordination.compression_locks")

#: Patience of a lock operation's transaction (docs/sessions-coordination.md §3.9: routine); a module attribute so tests
#: can shorten it.
LOCK_PATIENCE_S = ROUTINE_PATIENCE_S
#: Failures an acquire / refresh / release reports as "no lock" (WARNING) instead of raising:
#: driver errors and an exhausted busy budget. Sticky handle errors (replaced, split WAL,
#: corrupt, closed, read-only) are not among them and propagate.
STORAGE_FAILURES = (DatabaseBusyError, sa.exc.DBAPIError, sqlite3.Error)


def _cs(store: StoreHandle) -> CoordinationStatements:
    return for_dialect(store.backend.dialect)


def try_acquire_compression_lock(store: StoreHandle, session_id: str, holder: str,
                                 ttl_seconds: float = DEFAULT_TTL_S) -> bool:
    """Take the compression lock of ``session_id`` for ``holder`` (one transaction): a stale
    row (expired, or its holder provably dead) is reclaimed with a WARNING, an own live row
    is extended to ``max(expires_at, now + ttl)``. Returns whether ``holder`` owns it.

    Blank id or holder ⇒ ``False`` without a transaction; storage failures ⇒ WARNING and
    ``False`` (the caller skips compression). No session row is required."""
    ttl = check_ttl(ttl_seconds)
    check_texts((("session_id", session_id), ("holder", holder)))
    if not session_id or not usable_holder(holder):
        return False
    cs = _cs(store)
    clock = Clock(store, cs)

    def work(tx: Driver) -> tuple[bool, str | None]:
        ex = tx.execute
        return claim(ex, cs.lock, clock, session_id, holder, ttl, clock.now(ex))

    try:
        owned, reclaimed = store.backend.write_driver(work, patience=LOCK_PATIENCE_S,
                                                      header_in_fn=False)
    except STORAGE_FAILURES as exc:
        log.warning("compression lock on %r not acquired for %r: %s", session_id, holder, exc)
        return False
    if reclaimed is not None:
        log.warning("compression lock on %r reclaimed from stale holder %r", session_id,
                    reclaimed)
    return owned


def refresh_compression_lock(store: StoreHandle, session_id: str, holder: str,
                             ttl_seconds: float = DEFAULT_TTL_S) -> bool:
    """Extend ``holder``'s lock to ``now + ttl`` — holder-matched, with no expiry predicate
    (an owner starved past its TTL revives its own unreclaimed row). ``False`` once
    reclaimed or released; storage failures ⇒ WARNING and ``False``."""
    ttl = check_ttl(ttl_seconds)
    check_texts((("session_id", session_id), ("holder", holder)))
    if not session_id or not usable_holder(holder):
        return False
    cs = _cs(store)
    clock = Clock(store, cs)

    def work(tx: Driver) -> bool:
        ex = tx.execute
        return ex(cs.lock.REFRESH, (clock.now(ex) + ttl, session_id, holder)).rowcount == 1

    try:
        return bool(store.backend.write_driver(work, patience=LOCK_PATIENCE_S,
                                               header_in_fn=False))
    except STORAGE_FAILURES as exc:
        log.warning("compression lock on %r not refreshed for %r: %s", session_id, holder, exc)
        return False


def release_compression_lock(store: StoreHandle, session_id: str, holder: str) -> None:
    """Delete ``holder``'s lock (holder-matched, idempotent: a late returner never deletes a
    successor's lock); storage failures ⇒ WARNING."""
    check_texts((("session_id", session_id), ("holder", holder)))
    if not session_id or not usable_holder(holder):
        return
    cs = _cs(store)
    try:
        store.backend.write_driver(lambda tx: tx.execute(cs.lock.RELEASE, (session_id, holder)),
                                   patience=LOCK_PATIENCE_S, header_in_fn=False)
    except STORAGE_FAILURES as exc:
        log.warning("compression lock on %r not released for %r: %s", session_id, holder, exc)


def get_compression_lock_holder(store: StoreHandle, session_id: str) -> str | None:
    """The holder of a LIVE lock on ``session_id`` (None for none, expired or dead)."""
    if not session_id:
        return None
    cs = _cs(store)
    clock = Clock(store, cs)

    def read(conn: Connection) -> str | None:
        ex = conn.exec_driver_sql
        row = ex(cs.lock.PEEK, (session_id,)).fetchone()
        return str(row[0]) if row is not None and clock.live(row, clock.now(ex)) else None

    return store.backend.read(read)


def check_publish_lease(conn: Connection, cs: CoordinationStatements, clock: Clock,
                        parent_id: str, holder: str | None, required: bool, refresh: bool,
                        ttl: float) -> None:
    """docs/sessions-coordination.md §3.10 lease-required publish, inside the publish transaction before the parent
    checks: the optional last-chance refresh, then (if required) the row must exist, name
    ``holder`` and not be expired — else :class:`CompressionSessionBusyError`."""
    ex = conn.exec_driver_sql
    if cs.dialect == "postgresql":
        ex(cs.LOCK_SESSION, (parent_id,))  # W4e lock order: sessions → compression_locks
    now = clock.now(ex)
    if refresh and holder:
        ex(cs.lock.REFRESH, (now + ttl, parent_id, holder))
    if not required:
        return
    row = ex(cs.lock.READ, (parent_id,)).fetchone()
    if holder is None or row is None or row[0] != holder or float(row[1]) <= now:
        raise CompressionSessionBusyError(
            f"compression lease lost before publication: {holder!r} holds no live compression "
            f"lease on {parent_id!r}")


def publish_compression_child(store: Any, parent_session_id: str, child_session_id: str,
                              source: str, messages: Sequence[NewMessage], *,
                              model: str | None = None, model_config: Any = None,
                              system_prompt: str | None = None, cwd: str | None = None,
                              profile_name: str | None = None, watermark: int | None = None,
                              watermark_ceiling: int | None = None, carry_title: bool = True,
                              lease_holder: str | None = None,
                              compression_lock_holder: str | None = None,
                              require_compression_lease: bool | None = None,
                              require_lease_refresh: bool = False,
                              lease_ttl_seconds: float = DEFAULT_TTL_S) -> PublishResult:
    """Atomically end ``parent`` with ``compression`` and publish its continuation (core
    docs/sessions.md §4.3, amended by docs/sessions-coordination.md §3.10): with a lock holder (``compression_lock_holder``,
    alias ``lease_holder``) the publication requires that holder's live lock unless
    ``require_compression_lease=False``; ``require_lease_refresh`` renews it first. An
    automatic end stamp on the parent (``orphaned_compression`` included) is cleared."""
    if lease_holder is not None and compression_lock_holder is not None \
            and lease_holder != compression_lock_holder:
        raise ValueError(f"lease_holder {lease_holder!r} and compression_lock_holder "
                         f"{compression_lock_holder!r} name different holders")
    check_texts((("parent_session_id", parent_session_id),
                 ("child_session_id", child_session_id), ("source", source), ("model", model),
                 ("model_config", model_config), ("system_prompt", system_prompt), ("cwd", cwd),
                 ("profile_name", profile_name), ("lease_holder", lease_holder),
                 ("compression_lock_holder", compression_lock_holder)))
    holder = compression_lock_holder if compression_lock_holder is not None else lease_holder
    required = (holder is not None) if require_compression_lease is None \
        else bool(require_compression_lease)
    ttl = check_ttl(lease_ttl_seconds, "lease_ttl_seconds")
    if not messages:
        raise CompressionPublishError("publish_compression_child needs a non-empty handoff")
    backend = store.backend
    q = backend.sql
    split = store_split(store)
    rows = [msg.encode_row(m, i, q.dialect, split=split) for i, m in enumerate(messages)]
    c = lifecycle.Continuation(
        parent_session_id, child_session_id, source, rows, model, model_config,
        system_prompt, cwd, profile_name, store.owner_profile(), watermark,
        watermark_ceiling, carry_title, None)
    cs = _cs(store)
    clock = Clock(store, cs)

    def work(conn: Connection) -> PublishResult:
        check_publish_lease(conn, cs, clock, parent_session_id, holder, required,
                            require_lease_refresh, ttl)
        return lifecycle.publish_compression_child(conn, q, c)

    return backend.write(work, patience=TRANSCRIPT_PATIENCE_S)
