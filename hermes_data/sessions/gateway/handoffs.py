"""Cross-platform handoffs (docs/sessions-gateway.md §3.6).

::

  · / completed / failed --request--> pending --claim--> running --complete--> completed
  pending --fail (waiter only_states=('pending',), or no claimant)--> failed
  running --fail (owning claimant, or no claimant)--> failed
  running --reclaim (stale claim)--> failed

Each transition is one conditional UPDATE (compare-and-set) plus, when nothing changed, a
re-read in the same transaction that recognises the caller's own applied transition (a
replay after an unknown outcome returns ``True``). The first terminal state wins until the
next request. Times a sibling compares (``handoff_requested_at``, ``handoff_claimed_at``)
are stamped with ``db_now`` (the server clock on PostgreSQL, M2).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Iterable

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from hermes_data.storable import check_texts
from hermes_data.errors import DatabaseBusyError
from hermes_data.sessions.core import listing
from hermes_data.sessions.core.encoding import scrub_label
from hermes_data.sessions.gateway.common import chunks, db_now, finite, ids_of
from hermes_data.sessions.coordination.lock_rows import holder_is_provably_dead, make_holder
from hermes_data.sessions.handle import StoreHandle
from hermes_data.sessions.rows import SessionRow
from hermes_data.sessions.gateway.sql import GatewayStatements, for_dialect

log = logging.getLogger("hermes_data.sessions.gateway")

#: Longest stored handoff error.
MAX_ERROR_CHARS = 500
DEFAULT_ERROR = "handoff failed"
_FAILABLE = ("pending", "running")

@dataclass(frozen=True)
class HandoffState:
    """A session's handoff columns (all None for an untouched row)."""

    state: str | None
    platform: str | None
    error: str | None
    requested_at: float | None
    claimed_by: str | None
    claimed_at: float | None

    def as_dict(self) -> dict[str, Any]:
        """Upstream's keys (``state``, ``platform``, ``error``) plus the extension's."""
        return {"state": self.state, "platform": self.platform, "error": self.error,
                "requested_at": self.requested_at, "claimed_by": self.claimed_by,
                "claimed_at": self.claimed_at}


def default_claimant(store: StoreHandle) -> str:
    """One ``make_holder('handoff')`` per store handle (stable, so replays match; kept in
    the handle state's ``handoff_claimant``)."""
    state = store.backend.state
    holder = state.handoff_claimant
    if holder is None:
        holder = state.handoff_claimant = make_holder("handoff")
    return holder


def _g(store: StoreHandle) -> GatewayStatements:
    return for_dialect(store.backend.dialect)


def _state(conn: Connection, g: GatewayStatements, session_id: str,
           locked: bool = False) -> HandoffState | None:
    row = conn.exec_driver_sql(g.HANDOFF_STATE_LOCKED if locked else g.HANDOFF_STATE,
                               (session_id,)).first()
    return None if row is None else HandoffState(*row)


def request_handoff(store: StoreHandle, session_id: str, platform: str, *,
                    accept_replay: bool = True) -> bool:
    """Ask for a handoff of ``session_id`` to ``platform``: ``pending`` from nothing or a
    terminal state. ``True`` when set, or already ``pending``/``running`` for the same
    platform (a replay, so a retry after a lost reply answers as its first attempt did);
    ``False`` for a missing row or a handoff in flight elsewhere. ``accept_replay=False``:
    upstream's answer — ``False`` for any handoff in flight, the same platform's too."""
    check_texts((("session_id", session_id), ("platform", platform)))
    plat = (platform or "").strip() if isinstance(platform, str) else ""
    if not plat:
        raise ValueError(f"handoff platform must be a non-empty string, got {platform!r}")
    g, d = _g(store), store.backend.dialect

    def run(conn: Connection) -> bool:
        if conn.exec_driver_sql(g.HANDOFF_REQUEST,
                                (plat, db_now(conn, d), session_id)).rowcount:
            return True
        if not accept_replay:
            return False
        st = _state(conn, g, session_id)
        return st is not None and st.state in _FAILABLE and st.platform == plat

    return store.backend.write(run)


def claim_handoff(store: StoreHandle, session_id: str, *, claimant: str | None = None,
                  accept_replay: bool = True) -> bool:
    """``pending`` ⇒ ``running`` for ``claimant`` (default: this handle's holder). Exactly
    one of concurrent claimers gets ``True``; a replay by the owner is ``True`` (a retry
    after a lost reply answers as its first attempt did). ``accept_replay=False``:
    upstream's answer — ``True`` only when this call moved the row out of ``pending``."""
    check_texts((("session_id", session_id), ("claimant", claimant)))
    who = claimant or default_claimant(store)
    g, d = _g(store), store.backend.dialect

    def run(conn: Connection) -> bool:
        if conn.exec_driver_sql(g.HANDOFF_CLAIM, (who, db_now(conn, d), session_id)).rowcount:
            return True
        if not accept_replay:
            return False
        st = _state(conn, g, session_id)
        return st is not None and st.state == "running" and st.claimed_by == who

    return store.backend.write(run)


def complete_handoff(store: StoreHandle, session_id: str, *,
                     claimant: str | None = None) -> bool:
    """``running`` (claimed by ``claimant`` when given) ⇒ ``completed``. A replay is
    ``True``; otherwise ``False`` with a WARNING (reclaimed or failed meanwhile)."""
    check_texts((("session_id", session_id), ("claimant", claimant)))
    g = _g(store)

    def run(conn: Connection) -> bool:
        if claimant:
            n = conn.exec_driver_sql(g.HANDOFF_COMPLETE_BY, (session_id, claimant)).rowcount
        else:
            n = conn.exec_driver_sql(g.HANDOFF_COMPLETE, (session_id,)).rowcount
        if n:
            return True
        st = _state(conn, g, session_id)
        return st is not None and st.state == "completed" and (
            not claimant or st.claimed_by == claimant)

    done = store.backend.write(run)
    if not done:
        log.warning("handoff of %s not completed: it is no longer running for %s",
                    session_id, claimant or "any claimant")
    return done


def _error_text(error: Any) -> str:
    text = (scrub_label(str(error)) or "").strip() if error is not None else ""
    return text[:MAX_ERROR_CHARS] if text else DEFAULT_ERROR


def fail_handoff(store: StoreHandle, session_id: str, error: Any, *,
                 only_states: Iterable[str] | None = None, claimant: str | None = None) -> bool:
    """Fail a handoff with ``error`` (stripped, scrubbed, ≤ 500 characters; blank/None ⇒
    ``'handoff failed'``). Allowed from ``only_states`` ∩ {pending, running} (waiters pass
    ``('pending',)``); NUL in ``error`` becomes U+FFFD like a lone surrogate; with ``claimant``
    from ``running`` claimed by it; with neither from
    pending or running. A replay (already failed with the same error) is ``True``."""
    check_texts((("session_id", session_id), ("claimant", claimant)))
    text = _error_text(error)
    if only_states is not None:
        if isinstance(only_states, str):
            raise TypeError("only_states must be a collection of states, not a bare str")
        states = tuple(s for s in _FAILABLE if s in set(only_states))
    else:
        states = _FAILABLE
    if not states:
        return False
    g = _g(store)

    def run(conn: Connection) -> bool:
        if claimant:
            if "running" not in states:
                return False
            n = conn.exec_driver_sql(g.HANDOFF_FAIL_BY, (text, session_id, claimant)).rowcount
        else:
            n = conn.exec_driver_sql(g.handoff_fail_from(states), (text, session_id)).rowcount
        if n:
            return True
        st = _state(conn, g, session_id)
        return st is not None and st.state == "failed" and st.error == text

    return store.backend.write(run)


def get_handoff_state(store: StoreHandle, session_id: str) -> HandoffState | None:
    """The handoff columns, or None for a missing row (storage errors propagate)."""
    g = _g(store)
    return store.backend.read(lambda c: _state(c, g, session_id))


def list_pending_handoffs(store: StoreHandle, *,
                          platforms: Iterable[str] | None = None) -> list[SessionRow]:
    """``pending`` rows, FIFO by request time (then id); ``platforms`` (case-insensitive)
    restricts to the platforms a watcher serves."""
    plats = None
    if platforms is not None:
        if isinstance(platforms, str):
            raise TypeError("platforms must be a collection of names, not a bare str")
        plats = sorted({p.strip().lower() for p in platforms if p and p.strip()})
        if not plats:
            return []
    g = _g(store)
    st = g.pending_handoffs(None if plats is None else len(plats))
    rows = store.backend.read(lambda c: c.exec_driver_sql(st, tuple(plats or ())).fetchall())
    return [listing.session_row(r) for r in rows]


def reclaim_stale_running_handoffs(store: StoreHandle, error: Any, *,
                                   claimant: str | None = None,
                                   heartbeat_staleness_seconds: float | None = None,
                                   max_running_seconds: float = 900.0,
                                   include_live_claims: bool = False) -> list[str]:
    """Fail ``running`` handoffs whose claim is stale — claimed by someone other than
    ``claimant`` (default: this handle's) and (a) unclaimed (an upstream writer), (b) a
    same-host claimant whose process is gone, (c) with ``heartbeat_staleness_seconds``, a
    claimant without a fresh heartbeat row, or (d) claimed longer than
    ``max_running_seconds`` ago. Never re-queued. Returns the ids failed; a storage error is
    a WARNING and ``[]`` (sticky handle errors propagate). ``include_live_claims=True``:
    upstream's sweep — every ``running`` row fails, a live sibling's and this handle's own
    claims too (the staleness arguments are not consulted)."""
    check_texts((("claimant", claimant),))
    who = claimant or default_claimant(store)
    stale_hb = (None if heartbeat_staleness_seconds is None
                else finite("heartbeat_staleness_seconds", heartbeat_staleness_seconds))
    max_run = finite("max_running_seconds", max_running_seconds)
    text = _error_text(error)
    g, d = _g(store), store.backend.dialect
    pg = d == "postgresql"

    def run(conn: Connection) -> list[str]:
        if include_live_claims:
            every = ids_of(conn.exec_driver_sql(g.HANDOFF_RUNNING_IDS))
            for part in chunks(every):
                conn.exec_driver_sql(g.handoff_reclaim(len(part)), (text, *part))
            return every
        now = db_now(conn, d)
        rows = conn.exec_driver_sql(g.HANDOFF_RUNNING_OTHERS, (who,)).fetchall()
        if not rows:
            return []
        fresh: set[str] | None = None
        if stale_hb is not None:
            fresh = set(ids_of(conn.exec_driver_sql(g.HB_FRESH, (now - stale_hb,))))
        stale = []
        for sid, by, at in rows:
            if (by is None or holder_is_provably_dead(by, dialect="postgresql" if pg else "sqlite")
                    or (fresh is not None and by not in fresh)
                    or (max_run > 0 and at is not None and float(at) < now - max_run)):
                stale.append(str(sid))
        for part in chunks(stale):
            conn.exec_driver_sql(g.handoff_reclaim(len(part)), (text, *part))
        return stale

    try:
        return store.backend.write(run)
    except (DatabaseBusyError, sa.exc.DBAPIError):
        # A stranded running row blocks later handoffs: report and let the next start retry.
        # Sticky handle errors (closed, replaced, corrupt files) are not caught.
        log.warning("reclaiming stale handoffs failed; will retry on the next start",
                    exc_info=True)
        return []
