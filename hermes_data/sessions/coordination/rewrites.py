"""Transcript rewrites (docs/sessions-coordination.md §3.15): ``replace_messages``,
``clear_messages`` and in-place compaction (``archive_and_compact``), with the shared
pieces rewind uses too — the session check ``P``, the destructive-mutation fence ``F``,
fresh-row insertion ``INS``, the I2 counters and the W1 retry.

Every operation is one write transaction; the fence and the mutation it authorizes share
it (W3). Statements are in :mod:`.sql.coordination`.
"""

from __future__ import annotations

import math
import random
import time
from typing import Any, Callable, Mapping, Sequence, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from hermes_data.storable import check_text, check_texts
from hermes_data.sessions.core import encoding as enc
from hermes_data.sessions.core import messages as msg
from hermes_data.sessions.backends import ROUTINE_PATIENCE_S, TRANSCRIPT_PATIENCE_S
from hermes_data.sessions.rows import TranscriptRewrite
from hermes_data.sessions.core.display_order import store_split
from hermes_data.sessions.errors import (CompressionSessionBusyError, CompressionSessionClosedError,
                     SessionCompressionInProgressError, SessionNotFoundError,
                     SessionTurnLeaseLostError)
from hermes_data.sessions.coordination.lock_rows import Clock, clear_stale, conversation_key
from hermes_data.sessions.agent.session_meta import LINEAGE_MARKERS, merge_model_config_json
from hermes_data.sessions.coordination.sql import CoordinationStatements, for_dialect
from hermes_data.sessions.sql import for_dialect as core_statements

T = TypeVar("T")

#: How long a fenced mutation waits out a live foreign compression lock (W1).
COMPRESSION_BUSY_WAIT_S = 5.0
#: Ids per ``IN`` list (W5).
CHUNK_IDS = 900
#: Columns a clone never copies (the new row gets its own; display order is the ui's).
_NOT_CLONED = ("id", "active", "compacted", "display_order")


def cs_of(store: Any) -> CoordinationStatements:
    """The coordination statements of the store's dialect."""
    return for_dialect(store.backend.dialect)


def write_w1(store: Any, fn: Callable[[Connection], T], *,
             patience: float = ROUTINE_PATIENCE_S) -> T:
    """Run ``fn`` in one write transaction; a :class:`SessionCompressionInProgressError`
    rolls back and is retried after a jittered sleep (nothing held) while
    ``mono() < min(first collision + 5 s, patience deadline)``, then re-raised (W1)."""
    mono = getattr(store, "mono", time.monotonic)
    deadline = mono() + patience
    first: float | None = None
    while True:
        try:
            return store.backend.write(fn, patience=patience)
        except SessionCompressionInProgressError:
            now = mono()
            if first is None:
                first = now
            limit = min(first + COMPRESSION_BUSY_WAIT_S, deadline)
            if now >= limit:
                raise
            time.sleep(min(random.uniform(0.05, 0.25), max(0.0, limit - now)))


def check_session(conn: Connection, cs: CoordinationStatements, session_id: str) -> Any:
    """``P(s)``: the row exists (else :class:`SessionNotFoundError`) and did not end with
    ``compression`` (else :class:`CompressionSessionClosedError`). Returns the row's
    ``(ended_at, end_reason, model_config, rewind_count)``; locks it on PostgreSQL."""
    row = conn.exec_driver_sql(cs.SESSION_STATE, (session_id,)).first()
    if row is None:
        raise SessionNotFoundError(session_id)
    if row[0] is not None and row[1] == "compression":
        raise CompressionSessionClosedError(session_id)
    return row


def fence(conn: Connection, cs: CoordinationStatements, clock: Clock, session_id: str) -> None:
    """``F(s)``: a STALE lock on ``s`` or lease on ``KEY(s)`` is compare-and-deleted; a LIVE
    lock ⇒ :class:`SessionCompressionInProgressError`; a LIVE lease (anyone's) ⇒
    :class:`SessionTurnLeaseLostError`."""
    ex = conn.exec_driver_sql
    now = clock.now(ex)
    live = clear_stale(ex, cs.lock, clock, session_id, now)
    if live is not None:
        raise SessionCompressionInProgressError(session_id, live[0])
    key = conversation_key(ex, cs, session_id)
    live = clear_stale(ex, cs.lease, clock, key, now)
    if live is not None:
        raise SessionTurnLeaseLostError(session_id, key, None, live[0])


def encode_new(rows: Sequence[Any], dialect: str,
               split: Any = None) -> list[msg.EncodedRow]:
    """Validate and encode fresh rows before any statement (``ValueError`` names the row);
    caller dicts are never mutated. ``split``: the store's ``split_user_turn`` for the
    display identity (:func:`.display.store_split`)."""
    if isinstance(rows, (str, bytes)) or not isinstance(rows, Sequence):
        raise ValueError(f"messages must be a sequence of mappings, not {type(rows).__name__}")
    return msg.with_timestamps([msg.encode_row(m, i, dialect, split=split)
                                for i, m in enumerate(rows)])


def insert_new(conn: Connection, q: Any, session_id: str,
               rows: list[msg.EncodedRow]) -> list[int]:
    """``INS``: insert encoded rows as ``active = 1, compacted = 0``; ids in input order."""
    stmt = q.INSERT_MESSAGE_RETURNING
    return [int(conn.exec_driver_sql(stmt, (session_id, *r)).scalar_one()) for r in rows]


def set_active_counts(conn: Connection, cs: CoordinationStatements, session_id: str) -> int:
    """I2: ``message_count`` / ``tool_call_count`` = the counts over the active rows (core
    docs/sessions.md §6.1's tool-call rule). Returns the active count."""
    ex = conn.exec_driver_sql
    core = core_statements(cs.dialect)
    n = int(ex(core.COUNT_ACTIVE, (session_id,)).scalar() or 0)
    tools = sum(enc.count_tool_calls(r[0]) for r in ex(cs.ACTIVE_TOOL_CALLS, (session_id,)))
    ex(core.SET_COUNTS, (n, tools, session_id))
    return n


def replace_messages(store: Any, session_id: str, messages: Sequence[Any],
                     active_only: bool = False, archive_dropped: bool = False,
                     reject_active_turn_lease: bool = False) -> TranscriptRewrite:
    """Replace the transcript of ``session_id`` with ``messages`` in one transaction.

    Default: every row of the session (compaction-preserved and rewound included) is
    deleted; ``active_only`` deletes only the active rows; ``archive_dropped`` keeps the old
    active rows as ``active = 0, compacted = 0`` (readable with ``include_inactive``; implies
    ``active_only``). Rewrites of a session in-place compaction may share must pass
    ``active_only`` or ``archive_dropped``. ``reject_active_turn_lease`` fences the rewrite
    (a live lease ⇒ :class:`SessionTurnLeaseLostError`; a live compression lock ⇒
    :class:`SessionCompressionInProgressError` after ≈5 s of retries). Unknown session ⇒
    :class:`SessionNotFoundError`; compression-ended ⇒ :class:`CompressionSessionClosedError`."""
    check_text("session_id", session_id)
    backend = store.backend
    q = backend.sql
    rows = encode_new(messages, q.dialect, store_split(store))
    cs = cs_of(store)
    clock = Clock(store, cs)

    def work(conn: Connection) -> TranscriptRewrite:
        if cs.dialect == "postgresql":
            conn.exec_driver_sql(cs.LOCK_SESSION, (session_id,))  # W4e lock order
        if reject_active_turn_lease:
            fence(conn, cs, clock, session_id)
        check_session(conn, cs, session_id)
        ex = conn.exec_driver_sql
        removed = archived = 0
        if archive_dropped:
            archived = ex(cs.ARCHIVE_ACTIVE, (session_id,)).rowcount
        else:
            removed = ex(cs.DELETE_ACTIVE if active_only else cs.DELETE_ALL,
                         (session_id,)).rowcount
        ids = insert_new(conn, q, session_id, rows)
        set_active_counts(conn, cs, session_id)
        return TranscriptRewrite(removed, archived, tuple(ids))

    return write_w1(store, work, patience=TRANSCRIPT_PATIENCE_S)


def clear_messages(store: Any, session_id: str, *, allow_compression_parent: bool = False) -> int:
    """Delete every row of ``session_id`` (counters 0) in one transaction; returns rows
    deleted. Unknown id ⇒ 0; compression-ended ⇒ :class:`CompressionSessionClosedError`
    (it would erase the lineage's pre-compaction history) unless
    ``allow_compression_parent`` (upstream's behaviour: cleared like any row). No lease
    fence."""
    check_text("session_id", session_id)
    cs = cs_of(store)

    def work(conn: Connection) -> int:
        try:
            check_session(conn, cs, session_id)
        except SessionNotFoundError:
            return 0
        except CompressionSessionClosedError:
            if not allow_compression_parent:
                raise
        n = conn.exec_driver_sql(cs.DELETE_ALL, (session_id,)).rowcount
        conn.exec_driver_sql(core_statements(cs.dialect).SET_COUNTS, (0, 0, session_id))
        return int(n)

    return int(store.backend.write(work, patience=TRANSCRIPT_PATIENCE_S))


def _check_compaction(compacted_messages: Any, tail_count: Any, watermark: Any,
                      patch: Any) -> None:
    if isinstance(compacted_messages, (str, bytes)) or not isinstance(compacted_messages,
                                                                      Sequence) \
            or not compacted_messages:
        raise ValueError("archive_and_compact needs a non-empty sequence of compacted messages")
    if isinstance(tail_count, bool) or not isinstance(tail_count, int) \
            or not 0 <= tail_count <= len(compacted_messages):
        raise ValueError(f"tail_count must be an int in 0..{len(compacted_messages)}, "
                         f"not {tail_count!r}")
    if watermark is not None and (isinstance(watermark, bool) or not isinstance(watermark, int)
                                  or watermark < 0):
        raise ValueError(f"watermark must be None or an int >= 0, not {watermark!r}")
    if patch is not None:
        if not isinstance(patch, Mapping):
            raise ValueError(f"model_config_patch must be a mapping, not {type(patch).__name__}")
        touched = LINEAGE_MARKERS.intersection(patch)
        if touched:
            raise ValueError(f"model_config_patch cannot name lineage marker(s) "
                             f"{', '.join(sorted(touched))}")


def _clone_columns(conn: Connection) -> list[str]:
    return [c["name"] for c in sa.inspect(conn).get_columns("messages")
            if c["name"] not in _NOT_CLONED and c["name"] != "session_id"
            and not c.get("computed")]


def archive_and_compact(store: Any, session_id: str, compacted_messages: Sequence[Any],
                        model_config_patch: Mapping[str, Any] | None = None,
                        watermark: int | None = None, lock_holder: str | None = None,
                        tail_count: int = 0) -> int:
    """In-place compaction keeping the session id (docs/sessions-coordination.md §3.15); returns the new active count.

    In one transaction: with ``lock_holder`` its compression lock must exist, name it and
    not be expired (else :class:`CompressionSessionBusyError`, at once); rows appended above
    ``watermark`` during the summary (``T``) and the originals of the verbatim tail (``R``:
    the ``tail_count`` newest active rows at or below it) become ``active = 0, compacted =
    0``; the other active rows ``active = 0, compacted = 1`` (summarized away, still found
    by search); ``compacted_messages`` are inserted, then ``T`` cloned after them (new ids,
    column-exact); counters and the merged ``model_config_patch`` are written."""
    _check_compaction(compacted_messages, tail_count, watermark, model_config_patch)
    check_texts((("session_id", session_id), ("lock_holder", lock_holder)))
    backend = store.backend
    q = backend.sql
    rows = encode_new(compacted_messages, q.dialect, store_split(store))
    cs = cs_of(store)
    clock = Clock(store, cs)

    def work(conn: Connection) -> int:
        ex = conn.exec_driver_sql
        if cs.dialect == "postgresql":
            ex(cs.LOCK_SESSION, (session_id,))  # W4e: sessions before compression_locks
        if lock_holder is not None:
            now = clock.now(ex)
            row = ex(cs.lock.READ, (session_id,)).fetchone()
            if row is None or row[0] != lock_holder or float(row[1]) <= now:
                raise CompressionSessionBusyError(
                    f"compression lease of {lock_holder!r} on {session_id!r} was lost "
                    f"(held by {None if row is None else row[0]!r}); nothing was compacted")
        check_session(conn, cs, session_id)
        if model_config_patch:
            merge_model_config_json(conn, q, session_id, model_config_patch)
        wm = math.inf if watermark is None else watermark
        above = [] if watermark is None else \
            [int(r[0]) for r in ex(cs.ACTIVE_ABOVE, (session_id, watermark))]
        if tail_count > 0:
            bound = watermark if watermark is not None else 2 ** 62
            start = ex(cs.TAIL_START, (session_id, bound, tail_count - 1)).scalar()
            cut = 0 if start is None else int(start)
        else:
            cut = 2 ** 62 if wm == math.inf else int(wm) + 1
        ex(cs.COMPACT_BELOW, (session_id, cut))
        ex(cs.SUPERSEDE_ACTIVE, (session_id,))
        insert_new(conn, q, session_id, rows)
        if above:
            cols = _clone_columns(conn)
            for i in range(0, len(above), CHUNK_IDS):
                part = above[i:i + CHUNK_IDS]
                ex(cs.clone_by_ids(cols, len(part)), tuple(part))
        return set_active_counts(conn, cs, session_id)

    return int(backend.write(work, patience=TRANSCRIPT_PATIENCE_S))
