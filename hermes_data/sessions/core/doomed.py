"""Deleting a set of sessions inside one write transaction (docs/sessions.md §7.4), shared by
maintenance (delete, prune) and the empty/ghost cleanup (docs/sessions-coordination.md §3.19):
the doomed ids go to a temp table, are deleted chunk by chunk claimed by an id high-water
mark (O(n), at most 900 ids per statement), children outside the set are orphaned, unused
prompts dropped; transcript files are removed after the commit.
"""

from __future__ import annotations

import glob
import os
from pathlib import Path
from typing import Callable

from sqlalchemy.engine import Connection

from hermes_data.sessions.core.maintenance_sql import MaintenanceStatements

#: Ids per ``IN (…)`` list / per delete chunk (SQLite's old 999-variable ceiling).
CHUNK_IDS = 900

Progress = Callable[[int, int], None]


def delete_claimed(conn: Connection, ms: MaintenanceStatements, progress: Progress | None,
                   total: int, *, drop_prompts: bool = True) -> int:
    """Delete the sessions listed in the doomed temp table chunk by chunk, each chunk claimed
    by the id high-water mark (O(n)); orphan their children; drop unreferenced prompts
    (unless ``drop_prompts`` is False: a paced prune drops them once, after its last step)."""
    hwm = ""
    done = 0
    while True:
        ids = [r[0] for r in conn.exec_driver_sql(ms.NEXT_DOOMED, (hwm, CHUNK_IDS))]
        if not ids:
            break
        orphan, del_messages, detach, del_sessions = ms.delete_chunk(len(ids))
        conn.exec_driver_sql(orphan, (*ids, *ids))
        conn.exec_driver_sql(del_messages, tuple(ids))
        conn.exec_driver_sql(detach, tuple(ids))
        conn.exec_driver_sql(del_sessions, tuple(ids))
        hwm = ids[-1]
        done += len(ids)
        if progress is not None:
            progress(done, total)
    if drop_prompts:
        conn.exec_driver_sql(ms.DROP_UNUSED_PROMPTS)
    return done


def fill_doomed(conn: Connection, ms: MaintenanceStatements, ids: list[str]) -> None:
    """List ``ids`` in the (emptied) doomed temp table."""
    conn.exec_driver_sql(ms.CREATE_DOOMED)
    conn.exec_driver_sql(ms.CLEAR_DOOMED)
    conn.exec_driver_sql(ms.ADD_DOOMED, [(i,) for i in ids])


def remove_transcripts(sessions_dir: str | os.PathLike[str] | None, ids: list[str]) -> None:
    """Remove the transcript files of deleted ``ids`` under ``sessions_dir`` (errors swallowed)."""
    if sessions_dir is None:
        return
    base = Path(sessions_dir)
    for sid in ids:
        paths = [base / f"{sid}.json", base / f"{sid}.jsonl",
                 *map(Path, glob.glob(str(base / f"request_dump_{glob.escape(sid)}_*.json")))]
        for p in paths:
            try:
                p.unlink()
            except OSError:
                pass  # file errors are swallowed (docs/sessions.md §7.4)
