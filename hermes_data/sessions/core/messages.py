"""The transcript (docs/sessions.md §6): encoding rows, admission, appends, reads, counts
and the size guards' bounded counts.

Query functions take a SQLAlchemy ``Connection`` (or, on the append hot path, a DB-API
level :class:`~hermes_data.sessions.backends.base.Driver`) and the dialect's
:class:`~hermes_data.sessions.sql.Fragments`; they run unchanged on SQLite and PostgreSQL.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Callable, Iterable, Mapping, Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from hermes_data import storable
from hermes_data.sessions.core import display_order as display
from hermes_data.sessions.core import encoding as enc
from hermes_data.sessions.errors import CompressionSessionClosedError, SessionNotFoundError
from hermes_data.sessions.backends.base import driver_connection
from hermes_data.sessions.rows import MessageRow
from hermes_data.sessions.sql import Fragments
from hermes_data.sessions.storage.fts import ddl as fts
from hermes_data.sessions.storage.fts import gate_sql as gate
from hermes_data.sessions.sql.core import INSERT_COLS
from hermes_data.sessions.sql.ddl import squash
from hermes_data.sessions.gateway.sql import for_dialect as gateway_sql

#: A message row as bound by ``INSERT_MESSAGE`` (without the leading session id).
EncodedRow = tuple[Any, ...]
#: Position of ``timestamp`` and ``tool_calls`` inside an :data:`EncodedRow`.
_TS = 5
_TOOL_CALLS = 3
#: Position of ``active`` and ``display_identity`` inside an :data:`EncodedRow`.
_ACTIVE = INSERT_COLS.index("active") - 1
_IDENTITY = INSERT_COLS.index("display_identity") - 1
#: Positions of an :data:`EncodedRow` the storable-text check covers (issue 31): every text
#: column but ``content``, whose encoding stores any string (docs/sessions.md §6.1).
_CHECKED = tuple(i for i, c in enumerate(INSERT_COLS[1:-1]) if c != "content")


def encode_row(m: Mapping[str, Any], index: int, dialect: str, *, batch: bool = True,
               default_ts: float | None = None, split: display.Split = None) -> EncodedRow:
    """Validate and encode one message mapping (see
    :class:`~hermes_data.sessions.rows.NewMessage`) into the ``INSERT_MESSAGE`` order.

    Reasoning fields are kept on assistant rows of a batch (and on every single append). The
    trailing ``display_identity`` (docs/sessions-ui.md §3.4; ``split``: the store's ``split_user_turn``) is
    computed once the timestamp is known (here, or where defaults are stamped)."""
    if type(m) is not dict and not isinstance(m, Mapping):
        raise ValueError(f"message #{index} is not a mapping: {type(m).__name__}")
    role = m.get("role")
    if not isinstance(role, str) or not role:
        raise ValueError(f"message #{index} has no role")
    assistant = role == "assistant" or not batch
    platform_id = m.get("platform_message_id", m.get("message_id"))
    ts = enc.coerce_timestamp(m.get("timestamp"))
    row: EncodedRow = (
        role, enc.encode_content(m.get("content"), dialect), m.get("tool_call_id"),
        enc.encode_tool_calls(m.get("tool_calls")), enc.scrub(m.get("tool_name")),
        ts if ts is not None else default_ts, m.get("token_count"), m.get("finish_reason"),
        enc.scrub(m.get("reasoning")) if assistant else None,
        enc.scrub(m.get("reasoning_content")) if assistant else None,
        enc.encode_json_text(m.get("reasoning_details")) if assistant else None,
        enc.encode_json_text(m.get("codex_reasoning_items")) if assistant else None,
        enc.encode_json_text(m.get("codex_message_items")) if assistant else None,
        None if platform_id is None else str(platform_id), int(m.get("observed") or 0),
        1 if m.get("_compressed_summary") else 0, m.get("effect_disposition"), 1,
        enc.scrub(m.get("api_content")), enc.scrub(m.get("display_kind")),
        enc.encode_display_metadata(m.get("display_metadata")),
    )
    for i in _CHECKED:  # the storable-text check: two C scans per text value (issue 31)
        v = row[i]
        if v.__class__ is str and ("\x00" in v or not v.isascii()):  # else no call at all
            storable.check_text(INSERT_COLS[i + 1] if not batch
                                else f"messages[{index}].{INSERT_COLS[i + 1]}", v)
    row += (display.pending(m, row, split),)
    return row if row[_TS] is None else display.finish(row)


def with_timestamps(rows: list[EncodedRow]) -> list[EncodedRow]:
    """Rows without a timestamp get strictly increasing defaults (≥ 1 µs apart)."""
    out = []
    prev: float | None = None
    now = enc.now()
    for r in rows:
        ts = r[_TS]
        if ts is None:
            ts = now if prev is None else max(now, prev + 1e-6)
            r = display.finish(r[:_TS] + (ts,) + r[_TS + 1:])
        prev = ts
        out.append(r)
    return out


def tool_call_count(rows: Sequence[EncodedRow]) -> int:
    """Tool calls carried by encoded rows (the ``tool_call_count`` increment)."""
    return sum(enc.count_tool_calls(r[_TOOL_CALLS]) for r in rows)


def admit(tx: Any, q: Fragments, check_header: Callable[[int | None], None],
          session_id: str, count: int, tools: int) -> None:
    """Admission + counters in one statement (hot path). Missing session →
    :class:`SessionNotFoundError`; continued by compression →
    :class:`CompressionSessionClosedError`; the file header it returns goes to
    ``check_header`` (the caller's transaction rolls back if it no longer matches)."""
    row = tx.execute(q.ADMIT_AND_COUNT, (count, tools, session_id)).fetchone()
    if row is None:  # a replaced file explains a missing session better than "not found"
        check_header(tx.execute(q.FILE_HEADER).fetchone()[0])
        raise SessionNotFoundError(session_id)
    ended_at, end_reason, app_id = row
    check_header(app_id)
    if ended_at is not None and end_reason == "compression":
        raise CompressionSessionClosedError(session_id)


def append_one(tx: Any, q: Fragments, check_header: Callable[[int | None], None],
               session_id: str, row: EncodedRow, *, skip_pmid: Any = None) -> int:
    """Admit and insert one encoded row; returns its id. With a non-empty ``skip_pmid``
    (gateway A4) a row of the session already holding that platform message id (any
    ``active``) is returned instead, seeked after the admission, before the insert."""
    admit(tx, q, check_header, session_id, 1, tool_call_count((row,)))
    if skip_pmid is not None and str(skip_pmid) != "":
        found = tx.execute(gateway_sql(q.dialect).PMID_SEEK,
                           (session_id, str(skip_pmid))).fetchone()
        if found is not None:
            return int(found[0])
    return int(tx.execute(q.INSERT_MESSAGE_RETURNING, (session_id, *row)).fetchone()[0])


# -- the batch append (docs/sessions.md §6.3) -----------------------------------------------------------

#: Rows encoded and sent per ``executemany`` inside one batch transaction: a 50,000-row call
#: never holds more than this many encoded rows (the input itself is the caller's).
ENCODE_CHUNK = 1000
#: Smallest transaction whose FTS entries the batch path writes itself (SQLite, current
#: layout); below it the per-row triggers cost less than the gate bookkeeping.
BULK_FTS_MIN_ROWS = 4

#: What a batch transaction reports back: rows inserted and the last timestamp assigned.
_Progress = tuple[int, "float | None"]


_BULK_TRIGGERS = {name: squash(ddl) for name, ddl in fts.BULK_INSERT_TRIGGERS.items()}
_CANONICAL = {name: squash(ddl) for name, ddl in fts.CANONICAL_TRIGGER_SQL.items()}


def bulk_fts_plan(tx: Any, triggers: Sequence[Sequence[Any]] | None = None
                  ) -> tuple[bool, bool] | None:
    """Which indexes (base, trigram) a batch on this SQLite file may fill itself, or None
    when the triggers must do it row by row: only a current-layout insert trigger is
    replaced, and only when every trigger reading the rebuild gate is a current-layout one
    (a trigger of another shape that reads the gate would be silenced by closing it).
    ``triggers``: the ``(name, sql)`` rows of ``fts.MESSAGE_TRIGGERS`` if already read."""
    base = trigram = False
    if triggers is None:
        triggers = tx.execute(fts.MESSAGE_TRIGGERS).fetchall()
    for name, ddl in triggers:
        text = squash(ddl)
        if _CANONICAL.get(name) == text:
            base = base or (name == "messages_fts_insert" and _BULK_TRIGGERS[name] == text)
            trigram = trigram or (name == "messages_fts_trigram_insert"
                                  and _BULK_TRIGGERS[name] == text)
        elif any(key in text for key in fts.GATE_KEYS):
            return None
    return (base, trigram) if base or trigram else None


class _Gate:
    """The rebuild gate closed over the ids a batch is about to insert (SQLite)."""

    __slots__ = ("saved", "last_id", "base", "trigram")

    def __init__(self, tx: Any, plan: tuple[bool, bool]) -> None:
        self.base, self.trigram = plan
        self.saved = dict(tx.execute(gate.READ_GATE).fetchall())
        last = tx.execute(gate.MAX_MESSAGE_ID).fetchone()[0]
        self.last_id = -1 if last is None else int(last)
        # GATE(r) is false for last_id < r.id <= high water: the insert triggers skip them.
        tx.executemany(gate.SET_META, ((fts.GATE_KEYS[0], fts.GATE_CLOSED_HIGH_WATER),
                                             (fts.GATE_KEYS[1], self.last_id)))

    def reopen_and_fill(self, tx: Any) -> None:
        """Put the markers back as they were, then index the new rows the triggers would have
        indexed under them (the fills apply GATE themselves)."""
        for key in fts.GATE_KEYS:
            if key in self.saved:
                tx.execute(gate.SET_META, (key, self.saved[key]))
            else:
                tx.execute(gate.DELETE_META, (key,))
        if self.base:
            tx.execute(fts.BULK_FTS_FILL, (self.last_id,))
        if self.trigram:
            tx.execute(fts.BULK_FTS_TRIGRAM_FILL, (self.last_id,))


def open_bulk_fts(tx: Any, dialect: str, rows: int) -> _Gate | None:
    """Close the rebuild gate before inserting about ``rows`` rows in this transaction when
    the batch may fill the FTS indexes itself (SQLite, current layout, enough rows); the
    caller inserts, then calls ``reopen_and_fill(tx)`` on the returned gate in the same
    transaction. None: the per-row triggers index as usual."""
    if dialect != "sqlite" or rows < BULK_FTS_MIN_ROWS:
        return None
    plan = bulk_fts_plan(tx)
    return None if plan is None else _Gate(tx, plan)


class ConnectionDriver:
    """A :class:`~hermes_data.sessions.backends.base.Driver` over a SQLAlchemy connection
    already inside its write transaction (driver text, positional values)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    def execute(self, statement: str, parameters: Sequence[Any] = ()) -> Any:
        """Run one statement; returns its result (``fetchone``/``fetchall``)."""
        return self._conn.exec_driver_sql(statement, tuple(parameters) if parameters else None)

    def executemany(self, statement: str, rows: Sequence[Sequence[Any]]) -> Any:
        """Run one statement over many rows."""
        return self._conn.exec_driver_sql(statement, [tuple(r) for r in rows])


def check_rows(messages: Sequence[Any]) -> None:
    """The checks :func:`encode_row` makes before anything is written (mapping, role), over
    the whole input, so an invalid row anywhere fails the call before its transaction."""
    for i, m in enumerate(messages):
        if type(m) is not dict and not isinstance(m, Mapping):
            raise ValueError(f"message #{i} is not a mapping: {type(m).__name__}")
        role = m.get("role")
        if not isinstance(role, str) or not role:
            raise ValueError(f"message #{i} has no role")


def _stamp(rows: list[EncodedRow], now: float, prev: float | None) -> float | None:
    """Default missing timestamps in place (strictly increasing, ≥ 1 µs apart, never before
    ``now``), continuing after ``prev``; returns the last timestamp."""
    finish = display.finish
    for i, r in enumerate(rows):
        ts = r[_TS]
        if ts is None:
            ts = now if prev is None else max(now, prev + 1e-6)
            rows[i] = finish((*r[:_TS], ts, *r[_TS + 1:]))
        prev = ts
    return prev


def _batch_tx(tx: Any, *, q: Fragments, check_header: Callable[[int | None], None],
              session_id: str, messages: Sequence[Any], start: int, stop: int, now: float,
              prev: float | None, encoded: list[EncodedRow] | None,
              split: display.Split = None,
              fence: Callable[[Any], None] | None = None) -> _Progress:
    """One batch transaction over ``messages[start:stop]``: encoded :data:`ENCODE_CHUNK` rows
    at a time (or taken from ``encoded``), admitted, inserted and — on SQLite with the
    current layout — indexed in bulk; on SQLite with the canonical display insert trigger the
    rows go in with their ids and ``display_order`` (:class:`display.BatchOrder`).
    Re-runnable: a busy retry starts again from ``start`` (with a new orderer).
    ``fence`` (a turn-lease check) runs first, inside the transaction."""
    if fence is not None:
        fence(tx)
    gate: _Gate | None = None
    order: display.BatchOrder | None = None
    want_bulk = q.dialect == "sqlite" and stop - start >= BULK_FTS_MIN_ROWS
    for lo in range(start, stop, ENCODE_CHUNK):
        hi = min(lo + ENCODE_CHUNK, stop)
        if encoded is not None:
            rows = encoded[lo:hi]
        else:
            rows = [encode_row(messages[i], i, q.dialect, split=split) for i in range(lo, hi)]
        prev = _stamp(rows, now, prev)
        admit(tx, q, check_header, session_id, len(rows), tool_call_count(rows))
        if want_bulk and lo == start:
            triggers = tx.execute(fts.MESSAGE_TRIGGERS).fetchall()
            plan = bulk_fts_plan(tx, triggers)
            gate = None if plan is None else _Gate(tx, plan)
            order = display.BatchOrder.for_triggers(triggers, _IDENTITY, _ACTIVE)
        if order is not None:
            order.insert(tx, q, session_id, rows)
        else:
            tx.executemany(q.INSERT_MESSAGE, [(session_id, *r) for r in rows])
    if gate is not None:
        gate.reopen_and_fill(tx)
    return stop - start, prev


def append_batch(write: Callable[[Callable[[Any], _Progress]], _Progress],
                 check_header: Callable[[int | None], None], q: Fragments, session_id: str,
                 messages: Sequence[Any], chunk_rows: int | None = None,
                 split: display.Split = None,
                 fence: Callable[[Any], None] | None = None) -> int:
    """Append ``messages`` (docs/sessions.md §6.3): one transaction for the whole call — all-or-nothing — or
    one per ``chunk_rows`` rows. ``write`` runs a function on a :class:`Driver` inside a
    write transaction (the backend's ``write_driver``). Returns the rows inserted.

    Memory stays bounded in the single-transaction case: rows are encoded
    :data:`ENCODE_CHUNK` at a time inside the transaction (the cheap checks run over the
    whole input first, so an invalid row still fails before anything is written). With
    ``chunk_rows`` every row is encoded before the first commit, as before: an encoding
    failure must not leave earlier chunks behind."""
    if not isinstance(messages, Sequence):
        messages = list(messages)  # a busy retry re-reads its rows
    total = len(messages)
    if not total:
        return 0
    size = total if not chunk_rows or chunk_rows <= 0 else min(int(chunk_rows), total)
    encoded: list[EncodedRow] | None = None
    if size < total:
        encoded = [encode_row(m, i, q.dialect, split=split) for i, m in enumerate(messages)]
    else:
        check_rows(messages)
    now = enc.now()
    prev: float | None = None
    inserted = 0
    for start in range(0, total, size):
        n, prev = write(partial(_batch_tx, q=q, check_header=check_header,
                                session_id=session_id, messages=messages, start=start,
                                stop=min(start + size, total), now=now, prev=prev,
                                encoded=encoded, split=split, fence=fence))
        inserted += n
    return inserted


def insert_rows(conn: Connection, q: Fragments, session_id: str,
                rows: list[EncodedRow]) -> int:
    """Insert encoded rows (timestamps defaulted) without admission; returns their tool calls."""
    rows = with_timestamps(rows)
    conn.exec_driver_sql(q.INSERT_MESSAGE, [(session_id, *r) for r in rows])
    return tool_call_count(rows)


def clone_rows(conn: Connection, q: Fragments, parent: str, child: str, watermark: int,
               ceiling: int | None) -> tuple[int, int]:
    """Copy the parent's active rows above ``watermark`` (up to ``ceiling``) into ``child``,
    column-exact (upstream extra columns included) except id / session_id / active /
    compacted, ``display_order`` (the insert trigger assigns it from the copied identity,
    docs/sessions-ui.md §3.4) and generated columns. Returns (rows, tool calls)."""
    cols = [c["name"] for c in sa.inspect(conn).get_columns("messages")
            if c["name"] not in ("id", "session_id", "active", "compacted", "display_order")
            and not c.get("computed")]
    rows = conn.exec_driver_sql(q.CLONE_TOOL_CALLS, (parent, watermark, ceiling, ceiling))
    tools = sum(enc.count_tool_calls(r[0]) for r in rows)
    n = q.clone_messages(cols).run(conn, {"parent": parent, "watermark": watermark,
                                          "ceiling": ceiling, "child": child}).rowcount
    return n, tools


def message_rows(rows: Iterable[Sequence[Any]], dialect: str) -> list[MessageRow]:
    """:class:`MessageRow` objects from ``MESSAGE_COLS`` rows, decoded per docs/sessions.md §6.1.

    The transcript read path (a 50,000-row export pages through here): each row's values go
    straight into a new instance's ``__dict__`` (the construction
    :func:`~hermes_data.sessions.rows.new_message_row` documents) and only the columns that
    need it are decoded."""
    prefix = enc.content_prefix(dialect)
    decode_content, decode_tool_calls = enc.decode_content, enc.decode_tool_calls
    decode_metadata = enc.decode_display_metadata
    new, cls, as_bool = object.__new__, MessageRow, bool
    out: list[MessageRow] = []
    append = out.append
    for (id_, sid, role, content, tool_call_id, tool_calls, tool_name, ts, tokens, finish,
         reasoning, reasoning_content, reasoning_details, codex_reasoning, codex_message,
         platform_id, observed, summary, effect, active, compacted, api_content, display_kind,
         metadata) in rows:
        if content.__class__ is str and content.startswith(prefix):
            content = decode_content(content, dialect)
        if tool_calls is not None:
            tool_calls = decode_tool_calls(tool_calls)
        if metadata is not None:
            metadata = decode_metadata(metadata)
        row = new(cls)
        row.__dict__.update(
            id=id_, session_id=sid, role=role, content=content, tool_call_id=tool_call_id,
            tool_calls=tool_calls, tool_name=tool_name, timestamp=ts, token_count=tokens,
            finish_reason=finish, reasoning=reasoning, reasoning_content=reasoning_content,
            reasoning_details=reasoning_details, codex_reasoning_items=codex_reasoning,
            codex_message_items=codex_message, platform_message_id=platform_id,
            observed=observed or 0, compressed_summary=as_bool(summary),
            effect_disposition=effect, active=as_bool(active), compacted=as_bool(compacted),
            api_content=api_content, display_kind=display_kind, display_metadata=metadata)
        append(row)
    return out


def message_row(r: Sequence[Any], dialect: str) -> MessageRow:
    """A :class:`MessageRow` from one ``MESSAGE_COLS`` row."""
    return message_rows((r,), dialect)[0]


def _fetch_all(conn: Connection, q: Fragments, stmt: str, params: tuple[Any, ...]) -> list[Any]:
    """Plain tuples of a driver statement. SQLite: straight on the DB-API connection inside
    the caller's read transaction (no result-metadata or ``Row`` objects per page)."""
    if q.dialect == "sqlite":
        return driver_connection(conn).execute(stmt, params).fetchall()
    return list(conn.exec_driver_sql(stmt, params).fetchall())


def get_messages(conn: Connection, q: Fragments, session_id: str, *, include_inactive: bool,
                 limit: int | None, offset: int, latest: bool,
                 after_id: int | None) -> list[MessageRow]:
    """Transcript rows in insertion (id) order; ``after_id`` is keyset paging (docs/sessions.md §6.4)."""
    params: list[Any] = [session_id]
    if after_id is not None:
        params.append(int(after_id))
    paged = limit is not None or bool(offset)
    if paged:
        params += [q.NO_LIMIT if limit is None else int(limit), int(offset or 0)]
    stmt = q.select_messages(include_inactive=include_inactive, after_id=after_id is not None,
                             latest=latest, paged=paged)
    rows = _fetch_all(conn, q, stmt, tuple(params))
    if latest:
        rows.reverse()
    return message_rows(rows, q.dialect)


def message_count(conn: Connection, q: Fragments, session_id: str,
                  include_inactive: bool) -> int:
    """Number of (active) message rows of one session."""
    stmt = q.COUNT_ALL if include_inactive else q.COUNT_ACTIVE
    return int(conn.exec_driver_sql(stmt, (session_id,)).scalar() or 0)


def bounded_count(conn: Connection, q: Fragments, session_id: str, cap: int, *,
                  lineage: bool) -> int:
    """Active rows of one session (or active/compacted rows of its resume lineage),
    counted only up to ``cap``."""
    if lineage:
        return int(conn.execute(q.RESUME_LINEAGE_COUNT, {"id": session_id, "cap": cap}).scalar()
                   or 0)
    return int(conn.exec_driver_sql(q.BOUNDED_ACTIVE_COUNT, (session_id, cap)).scalar() or 0)
