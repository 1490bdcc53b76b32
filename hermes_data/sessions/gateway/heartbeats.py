"""Backend heartbeats (docs/sessions-gateway.md §3.7, #94895): backends sharing a store
register at startup, refresh periodically and clear on a graceful exit; a crashed one ages
out. No heartbeat ``pid`` is ever probed (M1: a pid means nothing on another host).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import Connection

from hermes_data.storable import check_texts
from hermes_data.errors import DatabaseBusyError
from hermes_data.sessions.gateway.common import db_now, finite
from hermes_data.sessions.handle import StoreHandle
from hermes_data.sessions.gateway.sql import for_dialect

log = logging.getLogger("hermes_data.sessions.gateway")

#: Registration gives up quickly: the next refresh retries (docs/sessions-gateway.md §3.7).
REGISTER_PATIENCE_S = 5.0


@dataclass(frozen=True)
class BackendHeartbeat:
    """One registered backend."""

    backend_id: str
    pid: int
    started_at: float
    last_heartbeat: float
    profile: str
    host: str

    def as_dict(self) -> dict[str, Any]:
        """Upstream's dict keys."""
        return {"backend_id": self.backend_id, "pid": self.pid, "started_at": self.started_at,
                "last_heartbeat": self.last_heartbeat, "profile": self.profile,
                "host": self.host}


def register_backend_heartbeat(store: StoreHandle, *, backend_id: str, pid: int,
                               started_at: float, last_heartbeat: float | None = None,
                               profile: str | None = "", host: str | None = "") -> bool:
    """Register or refresh a backend. A late refresh never moves ``last_heartbeat`` back
    while ``pid`` and ``started_at`` are unchanged; a new incarnation takes all its values.
    ``last_heartbeat`` defaults to ``db_now`` (the server clock on PostgreSQL). Busy for
    5 s ⇒ ``False`` (DEBUG; the next refresh retries). Blank id ⇒ ``False``."""
    if isinstance(pid, bool) or not isinstance(pid, int) or pid < 0:
        raise ValueError(f"pid must be an int >= 0, got {pid!r}")
    start = finite("started_at", started_at)
    check_texts((("backend_id", backend_id), ("profile", profile), ("host", host)))
    beat = None if last_heartbeat is None else finite("last_heartbeat", last_heartbeat)
    if not backend_id or not str(backend_id).strip():
        return False
    g, d = for_dialect(store.backend.dialect), store.backend.dialect

    def run(conn: Connection) -> bool:
        hb = beat if beat is not None else db_now(conn, d)
        conn.exec_driver_sql(g.HB_UPSERT, (backend_id, pid, start, hb, profile or "",
                                           host or ""))
        return True

    try:
        return store.backend.write(run, patience=REGISTER_PATIENCE_S)
    except DatabaseBusyError as exc:
        log.debug("heartbeat of %s not registered (busy: %s); the next refresh retries",
                  backend_id, exc)
        return False


def clear_backend_heartbeat(store: StoreHandle, backend_id: str) -> bool:
    """Remove a backend's row (graceful exit); whether a row went."""
    check_texts((("backend_id", backend_id),))
    if not backend_id:
        return False
    g = for_dialect(store.backend.dialect)
    return store.backend.write(
        lambda c: c.exec_driver_sql(g.HB_DELETE, (backend_id,)).rowcount > 0)


def prune_stale_heartbeats(store: StoreHandle, *, max_age_seconds: float) -> list[str]:
    """Delete rows whose ``last_heartbeat`` is older than ``db_now − max_age_seconds`` and
    return exactly their ids (sorted); a non-finite or non-positive age ⇒ ``[]``."""
    if isinstance(max_age_seconds, bool) or not isinstance(max_age_seconds, (int, float)) \
            or not math.isfinite(max_age_seconds) or max_age_seconds <= 0:
        return []
    g, d = for_dialect(store.backend.dialect), store.backend.dialect

    def run(conn: Connection) -> list[str]:
        cutoff = db_now(conn, d) - float(max_age_seconds)
        if d == "postgresql":  # RETURNING: exactly what this statement removed
            return sorted(str(r[0]) for r in conn.exec_driver_sql(g.HB_PRUNE, (cutoff,)))
        # SQLite: the write lock is held from BEGIN IMMEDIATE, so the read names the rows
        # the delete removes (no RETURNING below 3.35).
        ids = [str(r[0]) for r in conn.exec_driver_sql(g.HB_STALE, (cutoff,))]
        if ids:
            conn.exec_driver_sql(g.HB_PRUNE, (cutoff,))
        return ids

    return store.backend.write(run)


def list_backend_heartbeats(store: StoreHandle) -> list[BackendHeartbeat]:
    """Every registered backend, newest heartbeat first."""
    g = for_dialect(store.backend.dialect)
    rows = store.backend.read(lambda c: c.exec_driver_sql(g.HB_LIST).fetchall())
    return [BackendHeartbeat(str(r[0]), int(r[1]), float(r[2]), float(r[3]), str(r[4]),
                             str(r[5])) for r in rows]
