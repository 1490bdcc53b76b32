"""Lineage recovery (docs/sessions-coordination.md §3.11): the live continuation of a
compression parent, reopening a parent an older non-atomic publisher left childless, and
closing week-old continuations nobody used — plus the core amendment A8 (``reopen_session``
refuses a compression parent with a continuation: two live heads would re-key the lease).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from sqlalchemy.engine import Connection

from hermes_data.storable import check_text
from hermes_data.sessions.core import listing
from hermes_data.sessions.coordination.lock_rows import Clock, conversation_key
from hermes_data.sessions.rows import SessionRow
from hermes_data.sessions.coordination.sql import CoordinationStatements, for_dialect

log = logging.getLogger("hermes_data.sessions.coordination.recovery")

#: A continuation unused this long is finalized (one week).
ORPHAN_AGE_S = 604800.0


def _cs(store: Any) -> CoordinationStatements:
    return for_dialect(store.backend.dialect)


def find_live_compression_child(store: Any, parent_session_id: str) -> SessionRow | None:
    """The one open continuation of a parent that ended with ``compression`` (branch, reset,
    delegate-of-parent and tool children excluded), with its resolved prompt; None when the
    parent is missing or not compression-ended, or when there are none or several."""
    if not parent_session_id:
        return None
    cs = _cs(store)
    q = store.backend.sql

    def read(conn: Connection) -> SessionRow | None:
        ids = [r[0] for r in conn.exec_driver_sql(cs.OPEN_CONTINUATIONS, (parent_session_id,))]
        return listing.get_session(conn.exec_driver_sql, q, ids[0]) if len(ids) == 1 else None

    return store.backend.read(read)


class _Refused(Exception):
    """Rolls the recovery transaction back after its stale-lock delete."""


def reopen_orphaned_compression_session(store: Any, session_id: str) -> bool:
    """Reopen a parent ended with ``compression`` that has no continuation child (ended or
    not) and no LIVE compression lock; a STALE lock is compare-and-deleted first (its old
    owner's refresh then returns False and its lease-required publish fails). One
    transaction; ``False`` — with nothing committed — when any condition fails."""
    check_text("session_id", session_id)
    if not session_id:
        return False
    cs = _cs(store)
    clock = Clock(store, cs)

    def work(conn: Connection) -> bool:
        ex = conn.exec_driver_sql
        if ex(cs.ENDED_COMPRESSION, (session_id,)).first() is None:
            return False
        if ex(cs.ANY_CONTINUATION, (session_id,)).first() is not None:
            return False
        row = ex(cs.lock.READ, (session_id,)).fetchone()
        if row is not None:
            if clock.live(row, clock.now(ex)):
                return False
            if ex(cs.lock.DELETE_STALE, (session_id, row[0], row[1])).rowcount != 1:
                raise _Refused
        if ex(cs.REOPEN_COMPRESSION, (session_id,)).rowcount != 1:
            raise _Refused  # never commit the delete without the reopen
        return True

    try:
        return bool(store.backend.write(work))
    except _Refused:
        return False


def finalize_orphaned_compression_sessions(store: Any) -> int:
    """Close (``orphaned_compression``) open compression continuations a week old by start
    and by last activity, with messages but no API calls, not pinned, under no LIVE lock on
    the id nor LIVE lease on its conversation key. One transaction; returns rows changed."""
    cs = _cs(store)
    clock = Clock(store, cs)
    now = float(getattr(store, "wall", time.time)())
    cutoff = now - ORPHAN_AGE_S

    def work(conn: Connection) -> int:
        ex = conn.exec_driver_sql
        ids = [r[0] for r in ex(cs.ORPHAN_CONTINUATIONS, (cutoff, cutoff))]
        guard_now = clock.now(ex)
        n = 0
        for sid in ids:
            if clock.live(ex(cs.lock.PEEK, (sid,)).fetchone(), guard_now):
                continue
            if clock.live(ex(cs.lease.PEEK, (conversation_key(ex, cs, sid),)).fetchone(),
                          guard_now):
                continue
            n += ex(cs.FINALIZE_ORPHAN, (now, sid, cutoff, cutoff)).rowcount
        return n

    n = int(store.backend.write(work))
    if n:
        log.info("%s: closed %d unused compression continuation(s) as orphaned_compression",
                 store.path, n)
    return n
