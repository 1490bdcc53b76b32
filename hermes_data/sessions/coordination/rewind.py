"""Rewind and its undo (docs/sessions-coordination.md §3.16): ``rewind_to_message``
(``/undo``, ``/retry``) and ``restore_rewound``.

Each is one fenced transaction with every check before any change. Rewound rows stay as
``active = 0, compacted = 0`` (content, never deleted); ``restore_rewound`` undoes only the
latest rewind(s), never reactivating compacted or superseded rows.
"""

from __future__ import annotations

from typing import Any, Sequence

from sqlalchemy.engine import Connection

from hermes_data.storable import check_text
from hermes_data.sessions.core import messages as msg
from hermes_data.sessions.backends import TRANSCRIPT_PATIENCE_S
from hermes_data.sessions.rows import RewindResult
from hermes_data.sessions.core.display_order import store_split
from hermes_data.sessions.errors import TranscriptChangedError
from hermes_data.sessions.coordination.lock_rows import Clock
from hermes_data.sessions.agent.projections import ConversationHooks
from hermes_data.sessions.coordination.rewrites import (check_session, cs_of, encode_new, fence, insert_new, set_active_counts,
                       write_w1)


def _split(store: Any, row: Any) -> tuple[Any, Any]:
    hooks = getattr(store, "conversation_hooks", None) or ConversationHooks()
    view = {"role": row.role, "content": row.content, "display_kind": row.display_kind,
            "display_metadata": row.display_metadata,
            "_compressed_summary": row.compressed_summary}
    return hooks.split_user_turn(view)


def _normalize(store: Any, value: Any) -> Any:
    hooks = getattr(store, "conversation_hooks", None) or ConversationHooks()
    return hooks.normalize_user_text(value)


def rewind_to_message(store: Any, session_id: str, target_message_id: int, *,
                      preserve_compaction_handoff: bool = False,
                      expected_active_ids: Sequence[int] | None = None,
                      expected_target_content: Any = None) -> RewindResult:
    """Deactivate the user row ``target_message_id`` and every later active row (one fenced
    transaction); ``rewind_count`` counts the operation, counters follow the active rows.

    ``expected_active_ids`` must equal the active ids in order and ``expected_target_content``
    the target's normalized live text (else :class:`TranscriptChangedError`);
    ``preserve_compaction_handoff`` re-inserts the target's compaction handoff (split by the
    store's ``conversation_hooks``) as the new head. A target outside the session, not a user
    row, or (with those options) not active / not splittable ⇒ ``ValueError``."""
    check_text("session_id", session_id)
    backend = store.backend
    q = backend.sql
    cs = cs_of(store)
    clock = Clock(store, cs)
    expected = None if expected_active_ids is None else [int(i) for i in expected_active_ids]
    check_target = preserve_compaction_handoff or expected_target_content is not None

    def work(conn: Connection) -> RewindResult:
        ex = conn.exec_driver_sql
        if cs.dialect == "postgresql":
            ex(cs.LOCK_SESSION, (session_id,))  # W4e lock order
        fence(conn, cs, clock, session_id)
        check_session(conn, cs, session_id)
        if expected is not None:
            active = [int(r[0]) for r in ex(cs.ACTIVE_IDS, (session_id,))]
            if active != expected:
                raise TranscriptChangedError(session_id, "the active message ids differ")
        raw = ex(cs.MESSAGE_OF, (int(target_message_id), session_id)).first()
        if raw is None:
            raise ValueError(f"message {target_message_id!r} is not a row of session "
                             f"{session_id!r}")
        target = msg.message_row(tuple(raw), q.dialect)
        if target.role != "user":
            raise ValueError(f"rewind target {target.id} is a {target.role!r} row, not a "
                             "'user' row")
        handoff_rows: list[msg.EncodedRow] = []
        if check_target:
            if not target.active:
                raise ValueError(f"rewind target {target.id} is not active")
            handoff, live = _split(store, target)
            if live is None:
                raise ValueError(f"rewind target {target.id} is not user-originated text")
            if expected_target_content is not None:
                content = live.get("content") if isinstance(live, dict) else live
                if _normalize(store, content) != _normalize(store, expected_target_content):
                    raise TranscriptChangedError(session_id, "the target's content differs")
            if preserve_compaction_handoff:
                if handoff is None:
                    raise ValueError(f"rewind target {target.id} carries no compaction "
                                     "handoff to preserve")
                handoff_rows = encode_new([handoff], q.dialect, store_split(store))
        rewound = [int(r[0]) for r in ex(cs.ACTIVE_IDS, (session_id,))
                   if int(r[0]) >= target.id]
        ex(cs.REWIND_FROM, (session_id, target.id))
        replacement = insert_new(conn, q, session_id, handoff_rows)[0] if handoff_rows else None
        ex(cs.BUMP_REWIND, (session_id,))
        set_active_counts(conn, cs, session_id)
        head = ex(cs.MAX_ACTIVE, (session_id,)).scalar()
        return RewindResult(len(rewound), tuple(rewound), target,
                            None if head is None else int(head), replacement)

    return write_w1(store, work, patience=TRANSCRIPT_PATIENCE_S)


def restore_rewound(store: Any, session_id: str, since_message_id: int) -> int:
    """Undo the latest rewind(s): reactivate the rows from ``since_message_id`` on (one
    fenced transaction); returns rows restored. ``ValueError`` when the transcript moved on
    (an active row at or above it), when a compacted row lies at or above it, or when a
    rewound row between the head and it would stay a hole; ``rewind_count`` is unchanged."""
    check_text("session_id", session_id)
    since = int(since_message_id)
    cs = cs_of(store)
    clock = Clock(store, cs)

    def work(conn: Connection) -> int:
        ex = conn.exec_driver_sql
        if cs.dialect == "postgresql":
            ex(cs.LOCK_SESSION, (session_id,))  # W4e lock order
        fence(conn, cs, clock, session_id)
        check_session(conn, cs, session_id)
        head = int(ex(cs.MAX_ACTIVE, (session_id,)).scalar() or 0)
        if since <= head:
            raise ValueError(f"cannot restore from message {since} of {session_id!r}: the "
                             f"transcript moved on (active head {head})")
        blocker = ex(cs.RESTORE_BLOCKER, (session_id, since, head, since)).scalar()
        if blocker is not None:
            raise ValueError(f"cannot restore from message {since} of {session_id!r}: row "
                             f"{blocker} is compacted or an earlier rewind's (restore the "
                             "latest rewind first, from its first row)")
        n = int(ex(cs.RESTORE_FROM, (session_id, since)).rowcount)
        set_active_counts(conn, cs, session_id)
        return n

    return int(write_w1(store, work, patience=TRANSCRIPT_PATIENCE_S))
