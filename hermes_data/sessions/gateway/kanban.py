"""Kanban worker retagging (docs/sessions-gateway.md §3.9): legacy kanban workers left
untitled ``cli`` rows, one per attempt, in every sidebar; once per workspaces root they move
to ``kanban``. ``cli`` and ``kanban`` share the trigram side, so the change is allowed after
messages (docs/sessions.md §2.6); compression continuations share ``cwd`` and move with their root.
"""

from __future__ import annotations

import logging
import os

from sqlalchemy.engine import Connection

from hermes_data.storable import check_text
from hermes_data.sessions.handle import StoreHandle
from hermes_data.sessions.gateway.repair_sql import for_dialect

log = logging.getLogger("hermes_data.sessions.gateway")

GATE_PREFIX = "kanban_worker_source_retagged:"


def retag_kanban_worker_sessions(store: StoreHandle, workspaces_root: str | os.PathLike[str]
                                 ) -> int:
    """Move ``cli`` rows whose ``cwd`` is ``workspaces_root`` or below it (``/`` or ``\\``
    separated; exact and case-sensitive) to source ``kanban``, once per root (a
    ``state_meta`` gate set in the same transaction, even for 0 rows). Returns rows changed;
    an empty root or a set gate ⇒ 0 without a write."""
    p = str(workspaces_root).rstrip("/\\")
    check_text("workspaces_root", p)
    if not p:
        return 0
    r = for_dialect(store.backend.dialect)
    gate = GATE_PREFIX + p
    if store.backend.read(lambda c: c.exec_driver_sql(r.META_GET, (gate,)).scalar()) == "1":
        return 0

    def run(conn: Connection) -> int:
        if conn.exec_driver_sql(r.META_GET, (gate,)).scalar() == "1":
            return 0
        n = conn.exec_driver_sql(r.RETAG_KANBAN, (p, len(p) + 1, p + "/", p + "\\")).rowcount
        conn.exec_driver_sql(r.META_SET, (gate, "1"))
        return n

    n = store.backend.write(run)
    if n:
        log.info("retagged %d kanban worker session(s) under %s", n, p)
    return n
