"""Empty and ghost sessions (docs/sessions-coordination.md §3.19).

``EMPTY(s)``: no messages at all (rewound or compacted rows are content), ended, not
archived, not pinned, not a lineage segment, and no unexpired lock or lease row on its id —
pure SQL, so the count and the delete agree. Deletes orphan children, remove messages, rows
and unreferenced prompts in one transaction (at most 900 ids per statement), then the
transcript files (errors swallowed).
"""

from __future__ import annotations

import os
import time
from typing import Any

from sqlalchemy.engine import Connection

from hermes_data.storable import check_text
from hermes_data.sessions.core.doomed import delete_claimed, fill_doomed, remove_transcripts
from hermes_data.sessions.coordination.lock_rows import conversation_key
from hermes_data.sessions.coordination.sql import CoordinationStatements, for_dialect
from hermes_data.sessions.core.maintenance_sql import MaintenanceStatements

#: A ghost TUI row is older than this (one day).
GHOST_AGE_S = 86400.0


def _cs(store: Any) -> CoordinationStatements:
    return for_dialect(store.backend.dialect)


def _wall(store: Any) -> float:
    return float(getattr(store, "wall", time.time)())


def _empty(store: Any, include_protected: bool) -> tuple[str, str, tuple[Any, ...]]:
    # (count, ids, binds) of EMPTY, or of upstream's wider rule.
    cs = _cs(store)
    if include_protected:
        return cs.COUNT_EMPTY_ANY, cs.EMPTY_ANY_IDS, ()
    now = _wall(store)
    return cs.COUNT_EMPTY, cs.EMPTY_IDS, (now, now)


def count_empty_sessions(store: Any, *, include_protected: bool = False) -> int:
    """How many sessions ``delete_empty_sessions`` (with the same ``include_protected``)
    would delete now."""
    stmt, _, params = _empty(store, include_protected)
    return int(store.backend.read(lambda c: c.exec_driver_sql(stmt, params).scalar()) or 0)


def _delete_selected(store: Any, stmt: str, params: tuple[Any, ...],
                     sessions_dir: str | os.PathLike[str] | None) -> int:
    ms = MaintenanceStatements.for_dialect(store.backend.dialect)
    deleted: list[str] = []

    def work(conn: Connection) -> int:
        ids = [r[0] for r in conn.exec_driver_sql(stmt, params)]
        if not ids:
            return 0
        fill_doomed(conn, ms, ids)
        n = delete_claimed(conn, ms, None, len(ids))
        deleted[:] = ids
        return n

    n = int(store.backend.write(work))
    remove_transcripts(sessions_dir, deleted)
    return n


def delete_empty_sessions(store: Any, sessions_dir: str | os.PathLike[str] | None = None, *,
                          include_protected: bool = False) -> int:
    """Delete every ``EMPTY`` session in one transaction (children orphaned); returns how
    many. Transcript files under ``sessions_dir`` go after the commit.
    ``include_protected=True``: upstream's rule — empty, ended, unarchived rows even when
    pinned, a compression-lineage segment, or under an unexpired lock or lease."""
    _, stmt, params = _empty(store, include_protected)
    return _delete_selected(store, stmt, params, sessions_dir)


def delete_session_if_empty(store: Any, session_id: str,
                            sessions_dir: str | os.PathLike[str] | None = None) -> bool:
    """Delete ``session_id`` when it is untitled, has no messages and no children, is not
    pinned and holds no unexpired lock or lease — open rows qualify (a CLI exiting before
    its first message). One conditional DELETE; ``<id>.json`` goes after the commit."""
    check_text("session_id", session_id)
    if not session_id:
        return False
    cs = _cs(store)
    now = _wall(store)

    def work(conn: Connection) -> bool:
        ex = conn.exec_driver_sql
        key = conversation_key(ex, cs, session_id)
        return ex(cs.DELETE_IF_EMPTY, (session_id, now, key, now)).rowcount == 1

    done = bool(store.backend.write(work))
    if done:
        remove_transcripts(sessions_dir, [session_id])
    return done


def prune_empty_ghost_sessions(store: Any,
                               sessions_dir: str | os.PathLike[str] | None = None) -> int:
    """Delete ended, untitled, message-less, childless, unpinned ``tui`` rows started more
    than a day ago (one transaction, any number of rows); returns how many."""
    cutoff = _wall(store) - GHOST_AGE_S
    return _delete_selected(store, _cs(store).GHOST_IDS, (cutoff,), sessions_dir)
