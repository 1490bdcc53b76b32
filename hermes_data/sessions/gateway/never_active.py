"""Never-active keyed sessions (docs/sessions-gateway.md §3.4, #82770): gateway rows
created for a chat that never spoke — keyed, open, untitled, without activity, counters,
messages, children, pin, archive or Telegram binding. Bulk prune cannot reach them (it
requires an ended row).

The prune re-checks each candidate in its own transaction, so a chat answered since the
listing keeps its row, and deletes the row with its routing entries of every scope together
(upstream deleted all entries first and the sessions later, unchecked).
"""

from __future__ import annotations

import glob
import logging
import os
from pathlib import Path
from dataclasses import dataclass
from typing import Any, NamedTuple

from sqlalchemy.engine import Connection

from hermes_data.sessions.gateway.common import db_now, finite, wall
from hermes_data.sessions.coordination.lock_rows import holder_is_provably_dead
from hermes_data.sessions.coordination.sql import for_dialect as coordination_sql
from hermes_data.sessions.handle import StoreHandle
from hermes_data.sessions.core import maintenance_sql
from hermes_data.sessions.gateway.peers_sql import for_dialect as peer_sql
from hermes_data.sessions.gateway.repair_sql import RepairStatements, for_dialect

log = logging.getLogger("hermes_data.sessions.gateway")

_KEY_HOPS = 100


@dataclass(frozen=True)
class NeverActiveSession:
    """A keyed session that never became active."""

    id: str
    session_key: str
    source: str
    chat_id: str | None
    chat_type: str | None
    user_id: str | None
    started_at: float

    def as_dict(self) -> dict[str, Any]:
        """Upstream's dict keys."""
        return {"id": self.id, "session_key": self.session_key, "source": self.source,
                "chat_id": self.chat_id, "chat_type": self.chat_type, "user_id": self.user_id,
                "started_at": self.started_at}


class NeverActivePruneResult(NamedTuple):
    """What a prune deleted."""

    sessions_deleted: int
    routing_entries_deleted: int


def _cutoff(older_than_days: Any) -> float:
    days = finite("older_than_days", older_than_days)
    if days < 0:
        raise ValueError(f"older_than_days must be >= 0, got {older_than_days!r}")
    return wall() - days * 86400


def has_bindings_table(conn: Connection, r: RepairStatements) -> bool:
    """Whether the opt-in Telegram bindings table exists (inspection, never a caught error)."""
    return conn.exec_driver_sql(r.TABLE_EXISTS, ("telegram_dm_topic_bindings",)).first() \
        is not None


def _list(conn: Connection, r: RepairStatements, cutoff: float) -> list[NeverActiveSession]:
    st = r.NEVER_ACTIVE[has_bindings_table(conn, r)]
    return [NeverActiveSession(str(a), str(b), str(c), d, e, f, float(g))
            for a, b, c, d, e, f, g in conn.exec_driver_sql(st, (cutoff,)).fetchall()]


def list_never_active_keyed_sessions(store: StoreHandle, *,
                                     older_than_days: float) -> list[NeverActiveSession]:
    """Never-active keyed sessions started more than ``older_than_days`` ago (finite, ≥ 0),
    oldest first."""
    cutoff = _cutoff(older_than_days)
    r = for_dialect(store.backend.dialect)
    return store.backend.read(lambda c: _list(c, r, cutoff))


def _after_listing(candidates: list[NeverActiveSession]) -> None:
    """Test seam: runs between the listing and the per-candidate transactions."""


def _remove_transcripts(sessions_dir: str | os.PathLike[str] | None, sid: str) -> None:
    if sessions_dir is None:
        return
    base = Path(sessions_dir)
    for p in [base / f"{sid}.json", base / f"{sid}.jsonl",
              *map(Path, glob.glob(str(base / f"request_dump_{glob.escape(sid)}_*.json")))]:
        try:
            p.unlink()
        except OSError:
            pass  # file errors are swallowed (docs/sessions.md §7.4)


def _live(row: Any, now: float, pg: bool) -> bool:
    return row is not None and float(row[1]) > now and not holder_is_provably_dead(
        row[0], dialect="postgresql" if pg else "sqlite")


def _conversation_key(conn: Connection, d: str, sid: str) -> str:
    edge_parent = peer_sql(d).EDGE_PARENT
    cur = sid
    for _ in range(_KEY_HOPS):
        up = conn.exec_driver_sql(edge_parent, (cur,)).scalar()
        if up is None:
            break
        cur = str(up)
    return cur


def prune_never_active_keyed_sessions(store: StoreHandle, *, older_than_days: float,
                                      sessions_dir: str | os.PathLike[str] | None = None
                                      ) -> NeverActivePruneResult:
    """Delete the never-active keyed sessions older than ``older_than_days`` with their
    routing entries of every scope, one transaction per candidate (re-checked inside it; a
    live compression lock on the id or a live turn lease on its conversation keeps it).
    Transcript files go after each commit (errors swallowed)."""
    cutoff = _cutoff(older_than_days)
    d = store.backend.dialect
    r = for_dialect(d)
    pg = d == "postgresql"
    candidates = store.backend.read(lambda c: _list(c, r, cutoff))
    _after_listing(candidates)
    ms = maintenance_sql.MaintenanceStatements.for_dialect(d)
    guards = coordination_sql(d)  # the guard rows' unlocked reads (``PEEK``)
    sessions = entries = 0
    for cand in candidates:
        def run(conn: Connection) -> int | None:
            st = r.NEVER_ACTIVE_ONE[has_bindings_table(conn, r)]
            if conn.exec_driver_sql(st, (cand.id, cutoff)).first() is None:
                return None
            now = db_now(conn, d)
            if _live(conn.exec_driver_sql(guards.lock.PEEK, (cand.id,)).first(), now, pg) or _live(
                    conn.exec_driver_sql(guards.lease.PEEK, (_conversation_key(conn, d, cand.id),))
                    .first(), now, pg):
                return None
            n = conn.exec_driver_sql(r.ROUTING_FOR_SESSION, (cand.id,)).rowcount
            # The core delete path's statements for one session (no messages, no children
            # by the re-check; usage rows and Telegram bindings go by their cascades).
            orphan, del_messages, detach, del_session = ms.delete_chunk(1)
            conn.exec_driver_sql(orphan, (cand.id, cand.id))
            conn.exec_driver_sql(del_messages, (cand.id,))
            conn.exec_driver_sql(detach, (cand.id,))
            conn.exec_driver_sql(del_session, (cand.id,))
            conn.exec_driver_sql(ms.DROP_UNUSED_PROMPTS)
            return n

        removed = store.backend.write(run)
        if removed is None:
            log.info("never-active session %s kept: active, locked or leased since listing",
                     cand.id)
            continue
        sessions += 1
        entries += removed
        _remove_transcripts(sessions_dir, cand.id)
    return NeverActivePruneResult(sessions, entries)
