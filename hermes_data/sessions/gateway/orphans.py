"""Orphaned gateway sessions (docs/sessions-gateway.md §3.5; the offline ``hermes
sessions repair-routing``, #82616): unkeyed sessions with messages whose gateway identity was
lost, and the keyed predecessor ("donor") they continue.

Never guess: a mis-adoption splices one person's conversation into another's chat, so every
ambiguity — two predecessors in the window, two orphans claiming one predecessor — makes the
candidates non-adoptable with the reason stated.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy.engine import Connection

from hermes_data.storable import check_texts
from hermes_data.sessions.gateway.common import finite, wall
from hermes_data.sessions.handle import StoreHandle
from hermes_data.sessions.agent.identity_sql import RECOVERABLE_END_REASONS
from hermes_data.sessions.sql.predicates import AUTOMATIC_END_REASONS
from hermes_data.sessions.gateway.repair_sql import for_dialect

log = logging.getLogger("hermes_data.sessions.gateway")

#: Default contiguity window (seconds) around an orphan's start.
_ORPHAN_ADOPTION_MAX_GAP_S = 900.0
#: Donor reasons that adoption overwrites with ``superseded_by_repair``.
_SUPERSEDABLE = frozenset(AUTOMATIC_END_REASONS) | {"orphaned_compression"}
_NO_LINEAGE = "parent session carries no gateway identity of this source"
_AMBIGUOUS_WINDOW = "ambiguous: more than one keyed predecessor matches this window"
_CONTESTED = "ambiguous: more than one unkeyed session claims this predecessor"


@dataclass(frozen=True)
class OrphanCandidate:
    """One orphan and what repair would do with it."""

    orphan_id: str
    source: str
    message_count: int
    started_at: float
    last_active: float | None
    donor_id: str | None
    session_key: str | None
    evidence: str
    adoptable: bool
    reason: str

    def as_dict(self) -> dict[str, Any]:
        """The record's fields by name."""
        return asdict(self)


def find_orphaned_gateway_sessions(store: StoreHandle, *,
                                   max_gap_s: float | None = None) -> list[OrphanCandidate]:
    """Unkeyed sessions with messages (not tool runs, branches or delegates), oldest first,
    each with its donor — the keyed same-source parent (lineage), or the one keyed
    same-source predecessor that fell quiet within ``max_gap_s`` (default 900) of the
    orphan's start (contiguity) — or the reason none is adoptable."""
    gap = _ORPHAN_ADOPTION_MAX_GAP_S if max_gap_s is None else finite("max_gap_s", max_gap_s)
    if gap < 0:
        raise ValueError(f"max_gap_s must be >= 0, got {max_gap_s!r}")
    r = for_dialect(store.backend.dialect)

    def run(conn: Connection) -> list[OrphanCandidate]:
        out = []
        for oid, source, count, started, last, parent, user in conn.exec_driver_sql(
                r.ORPHANS).fetchall():
            donor = key = None
            evidence, reason = "", ""
            if parent is not None:
                hit = conn.exec_driver_sql(r.PARENT_DONOR, (parent, source)).first()
                if hit is None:
                    reason = _NO_LINEAGE
                else:
                    donor, key, evidence = str(hit[0]), str(hit[1]), "lineage"
            else:
                hits = [] if last is None else conn.exec_driver_sql(
                    r.CONTIGUOUS_DONORS, (oid, source, user, user, float(started) - gap,
                                          float(started) + gap, float(last))).fetchall()
                if not hits:
                    reason = (f"no keyed predecessor fell quiet within {gap:g}s of this "
                              "session's start")
                elif len(hits) > 1:
                    reason = _AMBIGUOUS_WINDOW
                else:
                    donor, key, evidence = str(hits[0][0]), str(hits[0][1]), "contiguity"
            out.append(OrphanCandidate(str(oid), str(source), int(count), float(started),
                                       None if last is None else float(last), donor, key,
                                       evidence, donor is not None, reason))
        claims: dict[str, int] = {}
        for c in out:
            if c.adoptable and c.donor_id is not None:
                claims[c.donor_id] = claims.get(c.donor_id, 0) + 1
        return [OrphanCandidate(**{**asdict(c), "adoptable": False, "reason": _CONTESTED})
                if c.adoptable and claims.get(c.donor_id or "", 0) > 1 else c for c in out]

    return store.backend.read(run)


def adopt_orphaned_gateway_session(store: StoreHandle, orphan_id: str, donor_id: str, *,
                                   accept_replay: bool = True) -> bool:
    """Give ``orphan_id`` the donor's key and fill its NULL routing columns from the donor
    (``parent_session_id`` unchanged); an open or automatically-ended donor ends
    ``superseded_by_repair`` (a deliberate reason such as ``session_reset`` is kept). A replay
    ⇒ ``True`` (a retry after a lost reply answers as its first attempt did); a missing row,
    an unkeyed donor, a keyed orphan or another source ⇒ ``False`` with nothing written.
    ``accept_replay=False``: upstream's answer — a repeated adoption finds the orphan keyed,
    ``False``."""
    check_texts((("orphan_id", orphan_id), ("donor_id", donor_id)))
    if not orphan_id or not donor_id or orphan_id == donor_id:
        return False
    r = for_dialect(store.backend.dialect)

    def run(conn: Connection) -> bool:
        rows = {str(row[0]): row for row in conn.exec_driver_sql(
            r.ADOPT_ROWS, (orphan_id, donor_id)).fetchall()}
        orphan, donor = rows.get(orphan_id), rows.get(donor_id)
        if orphan is None or donor is None:
            return False
        _, o_source, o_key, _, _ = orphan
        _, d_source, d_key, d_ended, d_reason = donor
        recoverable = d_ended is None or d_reason in RECOVERABLE_END_REASONS
        if accept_replay and d_key and o_key == d_key and not recoverable:
            return True  # the earlier attempt landed
        if not d_key or o_key is not None or o_source != d_source:
            return False
        fill = conn.exec_driver_sql(r.DONOR_ROUTING, (donor_id,)).first()
        assert fill is not None
        if conn.exec_driver_sql(r.ADOPT_ORPHAN, (d_key, *fill, orphan_id)).rowcount != 1:
            return False
        if d_ended is None or d_reason in _SUPERSEDABLE:
            conn.exec_driver_sql(r.SUPERSEDE_DONOR, (wall(), donor_id))
        log.info("orphan %s adopted the routing identity of %s", orphan_id, donor_id)
        return True

    return store.backend.write(run)
