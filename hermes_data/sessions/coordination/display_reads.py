"""Display reads with compacted generations (docs/sessions-coordination.md §3.17):
``get_messages(…, include_compacted=True)``.

In-place compaction keeps summarized rows (``compacted = 1``) and carries the verbatim tail
into every generation, so a display of the whole history would repeat the tail. The
selection (active or compacted rows; every row with ``include_inactive``) is read in keyset
pages of 1000 and de-duplicated with the agent's display-generation key — ``(role, C,
timestamp, tool_call_id, tool_calls, tool_name)``, ``C`` the stored content, or for a user
carrier the encoded live content its split yields — keeping the row with the greatest
``(active, id)``; ``latest`` / ``offset`` / ``limit`` then apply to the result.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import Connection

from hermes_data.sessions.core import encoding as enc
from hermes_data.sessions.core import messages as msg
from hermes_data.sessions.agent.projections import ConversationHooks
from hermes_data.sessions.rows import MessageRow
from hermes_data.sessions.coordination.sql import for_dialect

#: Rows per keyset page.
PAGE_ROWS = 1000
# Positions inside a MESSAGE_COLS row.
_ROLE, _CONTENT, _CALL_ID, _CALLS, _NAME, _TS, _ACTIVE = 2, 3, 4, 5, 6, 7, 19


def _key(raw: tuple[Any, ...], row: MessageRow, hooks: ConversationHooks,
         dialect: str) -> tuple[Any, ...]:
    content = raw[_CONTENT]
    if raw[_ROLE] == "user":
        view = {"role": row.role, "content": row.content, "display_kind": row.display_kind,
                "display_metadata": row.display_metadata,
                "_compressed_summary": row.compressed_summary}
        handoff, live = hooks.split_user_turn(view)
        if handoff is not None and live is not None:
            live_content = live.get("content") if isinstance(live, dict) else live
            content = enc.encode_content(live_content, dialect)
    return (raw[_ROLE], content, raw[_TS], raw[_CALL_ID], raw[_CALLS], raw[_NAME])


def get_messages_with_compacted(store: Any, session_id: str, *, include_inactive: bool,
                                limit: int | None, offset: int,
                                latest: bool) -> list[MessageRow]:
    """The de-duplicated display history of ``session_id`` in id order (module docstring)."""
    dialect = store.backend.dialect
    cs = for_dialect(dialect)
    stmt = cs.DISPLAY_PAGE_ALL if include_inactive else cs.DISPLAY_PAGE
    hooks = getattr(store, "conversation_hooks", None) or ConversationHooks()

    def read(conn: Connection) -> list[tuple[Any, ...]]:
        out: list[tuple[Any, ...]] = []
        after = -1
        while True:
            page = [tuple(r) for r in conn.exec_driver_sql(stmt, (session_id, after, PAGE_ROWS))]
            out.extend(page)
            if len(page) < PAGE_ROWS:
                return out
            after = int(page[-1][0])

    raws = store.backend.read(read)
    best: dict[tuple[Any, ...], tuple[tuple[Any, ...], MessageRow]] = {}
    for raw, row in zip(raws, msg.message_rows(raws, dialect)):
        key = _key(raw, row, hooks, dialect)
        cur = best.get(key)
        if cur is None or (bool(raw[_ACTIVE]), raw[0]) > (bool(cur[0][_ACTIVE]), cur[0][0]):
            best[key] = (raw, row)
    rows = [r for _, r in sorted(best.values(), key=lambda p: p[0][0])]
    if latest:
        rows.reverse()
    start = max(0, int(offset or 0))
    rows = rows[start:] if limit is None else rows[start:start + max(0, int(limit))]
    if latest:
        rows.reverse()
    return rows
