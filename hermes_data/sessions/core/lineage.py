"""Compression lineage (docs/sessions.md §4.4, §4.6): walks as one recursive statement each
(chain, tip, root, lineage, resume target and path), and the lineage-wide flags.
"""

from __future__ import annotations

from typing import Any, Callable, cast

from sqlalchemy.engine import Connection

from hermes_data.sessions.sql import Fragments


def chain(conn: Connection, q: Fragments, session_id: str) -> list[str]:
    """Ids from ``session_id`` forward to its compression tip."""
    return [r[0] for r in conn.execute(q.CHAIN_FROM, {"start": session_id})]


def tip(conn: Connection, q: Fragments, session_id: str) -> str:
    """The live end of the compression chain through ``session_id``."""
    return cast(str, conn.execute(q.TIP_OF, {"start": session_id}).scalar())  # the walk always holds its seed


def root(conn: Connection, q: Fragments, session_id: str) -> str:
    """The first segment of the compression chain holding ``session_id``."""
    return cast(str, conn.execute(q.ROOT_OF, {"id": session_id}).scalar())  # the walk always holds its seed


def lineage_ids(conn: Connection, q: Fragments, session_id: str) -> list[str]:
    """Every segment of the compression lineage of ``session_id``, root first."""
    return [r[0] for r in conn.execute(q.LINEAGE_OF, {"id": session_id})]


def resume_lineage_ids(conn: Connection, q: Fragments, session_id: str) -> list[str]:
    """The compression path root … ``session_id`` (what a full resume materialises)."""
    return [r[0] for r in conn.execute(q.RESUME_LINEAGE_OF, {"id": session_id})]


def resume_target(conn: Connection, q: Fragments, session_id: str) -> str:
    """Where resuming ``session_id`` lands: the tip, or a newer non-fork continuation."""
    return cast(str, conn.execute(q.RESUME_TARGET_OF, {"start": session_id}).scalar())  # the walk always holds its seed


def ancestors(conn: Connection, q: Fragments, session_id: str) -> set[str]:
    """Compression ancestors of ``session_id`` (excluding itself)."""
    return {r[0] for r in conn.execute(q.ANCESTORS_OF, {"id": session_id})}


Changes = Callable[[Connection, Any], int]


def set_flag(conn: Connection, q: Fragments, changes: Changes, session_id: str, flag: str,
             value: Any) -> bool:
    """Set ``flag`` (archived / hidden / pinned / last_read_at) on the whole lineage."""
    stmt = q.LINEAGE_FLAG_UPDATE[flag]
    return changes(conn, conn.execute(stmt, {"id": session_id, "value": value})) > 0


def set_pinned(conn: Connection, q: Fragments, changes: Changes, session_id: str,
               pinned: bool) -> bool:
    """Pin/unpin the lineage; pinning also un-hides it unless it holds a hidden 'Bot Chat'."""
    value = int(bool(pinned))
    changed = changes(conn, conn.execute(q.LINEAGE_FLAG_UPDATE["pinned"],
                                         {"id": session_id, "value": value}))
    if value and not conn.execute(q.LINEAGE_HAS_HIDDEN_BOT_CHAT, {"id": session_id}).scalar():
        changed += changes(conn, conn.execute(q.LINEAGE_UNHIDE, {"id": session_id}))
    return changed > 0
