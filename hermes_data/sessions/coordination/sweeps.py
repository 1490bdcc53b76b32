"""Sweeps and archive (docs/sessions-coordination.md §3.18): closing rows a dead gateway
left open, unarchiving a recoverable conversation, archiving stale lineages and the
interval-gated automatic archive.

Sweeps never delete: they close or archive, skip rows under LIVE guards, and re-apply their
predicates in each UPDATE (docs/sessions-coordination.md §3.20).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Any, Iterable

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from hermes_data.storable import check_text, check_texts
from hermes_data.sessions.coordination.lock_rows import Clock, clear_stale, conversation_key
from hermes_data.sessions.coordination.sql import CoordinationStatements, for_dialect
from hermes_data.sessions.agent.identity_sql import RECOVERABLE_END_REASONS

log = logging.getLogger("hermes_data.sessions.coordination.sweeps")

#: ``state_meta`` key of the last automatic archive (wall epoch seconds).
LAST_AUTO_ARCHIVE = "last_auto_archive"


def _cs(store: Any) -> CoordinationStatements:
    return for_dialect(store.backend.dialect)


def _wall(store: Any) -> float:
    return float(getattr(store, "wall", time.time)())


def _guarded(ex: Any, cs: CoordinationStatements, clock: Clock, sid: str, now: float) -> bool:
    """A LIVE lock on ``sid`` or LIVE lease on ``KEY(sid)`` (STALE ones are removed)."""
    if clear_stale(ex, cs.lock, clock, sid, now) is not None:
        return True
    return clear_stale(ex, cs.lease, clock, conversation_key(ex, cs, sid), now) is not None


def sweep_orphaned_sessions(store: Any, *, max_idle_seconds: float,
                            sources: Iterable[str] = ("tui", "desktop", "subagent"),
                            exclude_ids: Iterable[str] = (), exclude_pinned: bool = False,
                            heartbeat_staleness_seconds: float | None = None,
                            heartbeat_ownership_grace_seconds: float | None = None,
                            respect_gateway_heartbeats: bool = True) -> list[str]:
    """Close (``startup_orphan_reap``) open rows of ``sources`` idle — by start and by last
    activity — longer than ``max_idle_seconds``, sparing excluded ids, pinned rows (with
    ``exclude_pinned``), rows under LIVE guards and, when the heartbeat table exists and
    ``respect_gateway_heartbeats``, rows a fresh-heartbeat gateway may own. Returns the ids
    actually closed (one transaction)."""
    srcs = [s for s in dict.fromkeys(sources or ()) if isinstance(s, str) and s]
    excluded = set(exclude_ids or ())
    check_texts((*(("sources", s) for s in srcs), *(("exclude_ids", x) for x in excluded)))
    if not srcs or isinstance(max_idle_seconds, bool) \
            or not isinstance(max_idle_seconds, (int, float)) \
            or not math.isfinite(max_idle_seconds) or max_idle_seconds <= 0:
        return []
    hb_stale = heartbeat_staleness_seconds if heartbeat_staleness_seconds is not None \
        and heartbeat_staleness_seconds > 0 else 2 * max_idle_seconds
    hb_grace = heartbeat_ownership_grace_seconds if heartbeat_ownership_grace_seconds \
        is not None and heartbeat_ownership_grace_seconds >= 0 else hb_stale
    cs = _cs(store)
    clock = Clock(store, cs)
    now = _wall(store)
    cutoff = now - float(max_idle_seconds)

    def work(conn: Connection) -> list[str]:
        ex = conn.exec_driver_sql
        heartbeat = respect_gateway_heartbeats and sa.inspect(conn).has_table(
            "gateway_heartbeats")
        params: tuple[Any, ...] = (*srcs, cutoff, cutoff)
        if heartbeat:  # PostgreSQL: the heartbeat cutoff from the server clock (H1)
            hb_now = clock.now(ex) if cs.dialect == "postgresql" else now
            params += (hb_now - hb_stale, hb_grace)
        shape = {"pinned": exclude_pinned, "heartbeat": heartbeat}
        ids = [r[0] for r in ex(cs.orphan_ids(len(srcs), **shape), params)
               if r[0] not in excluded]
        guard_now = clock.now(ex)
        close = cs.orphan_close(len(srcs), **shape)
        closed = []
        for sid in ids:
            if _guarded(ex, cs, clock, sid, guard_now):
                continue
            if ex(close, (now, sid, *params)).rowcount == 1:
                closed.append(sid)
        return closed

    return list(store.backend.write(work))


def unarchive_recoverable_session(store: Any, session_id: str) -> bool:
    """Unarchive an archived conversation whose tip ended with a recoverable reason
    (``agent_close``, ``ws_orphan_reap`` …), clearing the tip's end fields — one transaction;
    ``False`` (unchanged) otherwise. Storage errors propagate."""
    check_text("session_id", session_id)
    if not session_id:
        return False
    cs = _cs(store)
    q = store.backend.sql

    def work(conn: Connection) -> bool:
        ex = conn.exec_driver_sql
        row = ex(cs.ARCHIVED_OF, (session_id,)).first()
        if row is None or not row[0]:
            return False
        tip = conn.execute(q.TIP_OF, {"start": session_id}).scalar()
        tip_row = ex(cs.ARCHIVED_OF, (tip,)).first()
        reason = None if tip_row is None else tip_row[1]
        if reason not in RECOVERABLE_END_REASONS:
            return False
        res = conn.execute(q.LINEAGE_FLAG_UPDATE["archived"], {"id": session_id, "value": 0})
        if store.backend.changes(conn, res) == 0:
            return False
        ex(cs.CLEAR_TIP_END, (tip, reason))
        return True

    return bool(store.backend.write(work))


def archive_stale_sessions(store: Any, idle_days: float | None, *,
                           exclude_pinned: bool = True) -> int:
    """Archive the whole lineage of every tip or standalone row idle longer than
    ``idle_days`` (one transaction per candidate, predicate re-checked), sparing lineages
    under a LIVE lock or lease and those holding a hidden ``Bot Chat`` row. ``idle_days``
    None, non-finite or ≤ 0 ⇒ 0. Rows are archived, never ended or deleted."""
    if idle_days is None or isinstance(idle_days, bool) \
            or not isinstance(idle_days, (int, float)) or not math.isfinite(idle_days) \
            or idle_days <= 0:
        return 0
    cs = _cs(store)
    q = store.backend.sql
    clock = Clock(store, cs)
    cutoff = _wall(store) - float(idle_days) * 86400
    select = cs.STALE_ARCHIVE_UNPINNED if exclude_pinned else cs.STALE_ARCHIVE
    recheck = cs.STALE_RECHECK_UNPINNED if exclude_pinned else cs.STALE_RECHECK
    ids = store.backend.read(lambda c: [r[0] for r in c.exec_driver_sql(select, (cutoff,))])

    def one(conn: Connection, sid: str) -> bool:
        ex = conn.exec_driver_sql
        if ex(recheck, (sid, cutoff)).first() is None:
            return False
        if _guarded(ex, cs, clock, sid, clock.now(ex)):
            return False
        if conn.execute(q.LINEAGE_HAS_HIDDEN_BOT_CHAT, {"id": sid}).scalar():
            return False
        res = conn.execute(q.LINEAGE_FLAG_UPDATE["archived"], {"id": sid, "value": 1})
        return store.backend.changes(conn, res) > 0

    return sum(1 for sid in ids if store.backend.write(lambda c, s=sid: one(c, s)))


@dataclass(frozen=True)
class AutoArchiveReport:
    """What ``maybe_auto_archive`` did: skipped (not due), lineages archived, error text."""

    skipped: bool
    archived: int
    error: str | None = None


def maybe_auto_archive(store: Any, idle_days: float = 3, min_interval_hours: float = 24,
                       exclude_pinned: bool = True) -> AutoArchiveReport:
    """Run :func:`archive_stale_sessions` when due — the stamp ``last_auto_archive`` absent,
    unparsable, older than the interval or more than the interval in the future (a clock
    stepped back) — and record the stamp, even for 0. Never raises (WARNING + ``error``)."""
    try:
        now = _wall(store)
        interval = float(min_interval_hours) * 3600
        raw = store.get_meta(LAST_AUTO_ARCHIVE)
        try:
            last = float(raw) if raw is not None else None
        except ValueError:
            last = None
        if last is not None and math.isfinite(last) and abs(now - last) < interval:
            return AutoArchiveReport(True, 0)
        n = archive_stale_sessions(store, idle_days, exclude_pinned=exclude_pinned)
        store.set_meta(LAST_AUTO_ARCHIVE, repr(now))
        if n:
            log.info("%s: auto-archived %d stale conversation(s)", store.path, n)
        return AutoArchiveReport(False, n)
    except Exception as exc:  # noqa: BLE001 - automatic maintenance never raises
        log.warning("%s: auto-archive failed: %s", store.path, exc)
        return AutoArchiveReport(False, 0, f"{type(exc).__name__}: {exc}")
