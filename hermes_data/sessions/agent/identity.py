"""Identity and reset of the agent turn API (docs/sessions-agent.md §3.8): id prefix
resolution, explicit-fork checks, the unread rule, session-reset promotion and the
per-peer conversation generation (monotonic, never deleted).
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

from sqlalchemy.engine import Connection

from hermes_data.storable import check_text
from hermes_data.errors import DatabaseBusyError
from hermes_data.sessions.core import encoding as enc
from hermes_data.sessions.core.lineage import explicit_fork_row
from hermes_data.sessions.rows import ScopeIdentity
from hermes_data.sessions.handle import StoreHandle
from hermes_data.sessions.agent.identity_sql import RECOVERABLE_END_REASONS, RESET_REASONS, IdentityStatements, for_dialect

__all__ = ["RECOVERABLE_END_REASONS", "declared_scope_identity",
           "is_explicit_fork_child", "latest_conversation_boundary", "promote_to_session_reset",
           "resolve_session_id", "session_unread"]

log = logging.getLogger("hermes_data.sessions.agent.identity")


def _s(store: StoreHandle) -> IdentityStatements:
    return for_dialect(store.backend.dialect)


def resolve_session_id(store: StoreHandle, session_id_or_prefix: str | None) -> str | None:
    """An exact id, else the one session whose id starts with it (case-sensitive on both
    backends); empty, unknown or ambiguous ⇒ None."""
    x = session_id_or_prefix
    if not x:
        return None
    s = _s(store)

    def work(conn: Connection) -> str | None:
        if conn.exec_driver_sql(s.EXACT_ID, (x,)).first() is not None:
            return x
        rows = conn.exec_driver_sql(s.ID_PREFIX, (len(x), x)).fetchall()
        return rows[0][0] if len(rows) == 1 else None

    return store.backend.read(work)


def _scope_row(store: StoreHandle, session_id: str) -> Any:
    s = _s(store)
    return store.backend.read(lambda c: c.exec_driver_sql(s.SCOPE, (session_id,)).first())


def is_explicit_fork_child(store: StoreHandle, session_id: str) -> bool:
    """Whether ``session_id`` is an explicit fork: a ``tool`` child, or a branch/delegate
    marker naming its own parent (or, orphaned, any such marker). An inherited marker naming
    another row, and ``_reset_from``, are not forks. Database errors propagate."""
    row = _scope_row(store, session_id) if session_id else None
    return row is not None and explicit_fork_row(*row)


def declared_scope_identity(store: StoreHandle, session_id: str) -> ScopeIdentity:
    """``(is_fork, source)`` of ``session_id`` from one read; missing ⇒ ``(False, '')``."""
    row = _scope_row(store, session_id) if session_id else None
    if row is None:
        return ScopeIdentity(False, "")
    return ScopeIdentity(explicit_fork_row(*row), (row[0] or "").strip())


def session_unread(row: Any) -> bool:
    """Whether a session row (``SessionRow``, ``SessionListRow`` or mapping) has activity
    after it was last read; never read (``last_read_at`` NULL) ⇒ False."""
    get = row.get if isinstance(row, Mapping) else (lambda k: getattr(row, k, None))
    read_at = get("last_read_at")
    if read_at is None:
        return False
    return float(get("last_active") or get("started_at") or 0) > float(read_at)


def promote_to_session_reset(store: StoreHandle, session_id: str,
                             reason: str = "session_reset") -> bool:
    """End ``session_id`` as a reset boundary — a live row, or one closed with a recoverable
    reason (which recovery would otherwise resurrect) — and bump the peer's generation.
    Explicit boundaries are never overwritten. Busy ⇒ WARNING and False."""
    if reason not in RESET_REASONS | {"new_session"}:
        raise ValueError(f"{reason!r} is not a session-reset reason")
    check_text("session_id", session_id)
    if not session_id:
        return False
    s = _s(store)

    def work(conn: Connection) -> bool:
        changed = conn.exec_driver_sql(s.PROMOTE_RESET,
                                       (enc.now(), reason, session_id)).rowcount == 1
        if changed:
            conn.exec_driver_sql(s.BUMP_GENERATION, (session_id,))
        return changed

    try:
        return bool(store.backend.write(work))
    except DatabaseBusyError as exc:
        log.warning("session %s not promoted to a reset boundary: %s", session_id, exc)
        return False


def latest_conversation_boundary(store: StoreHandle, session_key: str | None,
                                 source: str | None) -> int | None:
    """The reset generation of the ``(source, session_key)`` peer when > 0, else None."""
    key, src = (session_key or "").strip(), (source or "").strip()
    if not key or not src:
        return None
    s = _s(store)
    row = store.backend.read(lambda c: c.exec_driver_sql(s.GENERATION, (src, key)).first())
    return int(row[0]) if row is not None and row[0] and row[0] > 0 else None
