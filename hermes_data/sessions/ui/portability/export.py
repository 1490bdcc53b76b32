"""Export of sessions (docs/sessions-ui.md §4.11): one session, a compression lineage, or
everything as a stream.

A :class:`SessionExport` holds every column the ``sessions`` table has (core, extension and
upstream extras — reflected once per handle into an explicit quoted list, never ``SELECT
*``), the resolved system prompt, and the session's live (``active = 1``) rows — what
:func:`hermes_data.sessions.ui.portability.imports.import_sessions` restores. ``to_json()`` is
upstream-compatible: column-named keys, decoded content, ``tool_calls`` a list,
``display_metadata`` an object, ``_compressed_summary`` only when set, and no
``display_identity``/``display_order`` (derived; bytes are not JSON).

Each session is guarded by ``assert_export_safe`` separately (a lineage's segments too: never
cumulative, seed 003). Pending token counts are flushed first (docs/sessions-agent.md §3.0 barrier).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from hermes_data.sessions.handle import StoreHandle
from hermes_data.sessions.core.messages import message_rows
from hermes_data.sessions.rows import MessageRow
from hermes_data.sessions.ui.portability import sql as q
from hermes_data.sessions.ui.views import snapshot_read

#: Session columns an export never carries (derived, or replaced by the resolved prompt).
_SKIPPED = frozenset({"system_prompt_hash"})
#: Keyset page size of :func:`iter_export_all`.
_PAGE = 500

def session_columns(store: StoreHandle, conn: Connection) -> list[str]:
    """The live ``sessions`` columns, reflected once per handle (upstream extras included;
    kept in the handle state's ``export_columns``)."""
    state = store.backend.state
    cols = state.export_columns
    if cols is None:
        cols = state.export_columns = [str(c["name"]) for c in
                                       sa.inspect(conn).get_columns("sessions")
                                       if not c.get("computed")]
    return cols


def message_json(m: MessageRow) -> dict[str, Any]:
    """One live row as upstream's export shape (see the module docstring)."""
    out = m.to_dict()
    out.pop("compressed_summary")
    out.pop("compacted")
    if m.compressed_summary:
        out["_compressed_summary"] = True
    return out


@dataclass(frozen=True)
class SessionExport:
    """One session: its columns (``system_prompt`` resolved) and live messages."""

    session: dict[str, Any]
    messages: list[MessageRow] = field(default_factory=list)

    @property
    def id(self) -> str:
        """The session id."""
        return str(self.session["id"])

    def to_json(self) -> dict[str, Any]:
        """The upstream-compatible document (what ``import_sessions`` accepts)."""
        return {**self.session, "messages": [message_json(m) for m in self.messages]}


@dataclass(frozen=True)
class LineageExport:
    """A compression lineage root → tip: the tip's fields (title ``COALESCE(tip, root)``),
    its segments, the total ``message_count`` and the concatenated messages."""

    session: dict[str, Any]
    segments: list[SessionExport]
    lineage_session_ids: list[str]
    message_count: int
    messages: list[MessageRow]

    def to_json(self) -> dict[str, Any]:
        """Upstream's lineage document: the tip's fields, ``segments`` (each segment's own
        document, root → tip), the lineage's ids, total count and concatenated messages."""
        return {**self.session, "segments": [s.to_json() for s in self.segments],
                "lineage_session_ids": list(self.lineage_session_ids),
                "message_count": self.message_count,
                "messages": [message_json(m) for m in self.messages]}


def _read_one(store: StoreHandle, session_id: str) -> SessionExport | None:
    d = store.backend.dialect

    def work(conn: Connection) -> SessionExport | None:
        cols = session_columns(store, conn)
        row = q.export_session_row(cols).run(conn, {"id": session_id}).first()
        if row is None:
            return None
        session = {c: v for c, v in zip(cols, row[:-1]) if c not in _SKIPPED}
        session["system_prompt"] = row[-1]
        rows = q.EXPORT_MESSAGES.run(conn, {"s": session_id}).fetchall()
        return SessionExport(session, message_rows(rows, d))

    return snapshot_read(store, work)


def _flush(store: Any) -> None:
    flush = getattr(store, "flush_token_counts", None)
    if flush is not None:
        flush()


def export_session(store: Any, session_id: str, *,
                   max_messages: int | None = None) -> SessionExport | None:
    """One session and its live rows, or None (docs/sessions-ui.md §4.11); more live rows than the export limit
    ⇒ :class:`~hermes_data.sessions.errors.SessionExportTooLargeError` (``max_messages=0``
    disables the guard without counting)."""
    if not isinstance(session_id, str) or not session_id:
        return None
    _flush(store)
    store.assert_export_safe(session_id, max_messages)
    return _read_one(store, session_id)


def export_session_lineage(store: Any, session_id: str, *,
                           max_messages: int | None = None) -> LineageExport | None:
    """The compression lineage of ``session_id`` (core ``get_lineage_ids``: a branch,
    delegate or reset child is its own lineage), each segment guarded separately."""
    if not isinstance(session_id, str) or not session_id:
        return None
    _flush(store)
    ids = store.get_lineage_ids(session_id)
    if not ids:
        return None
    segments = []
    for sid in ids:
        store.assert_export_safe(sid, max_messages)
        seg = _read_one(store, sid)
        if seg is not None:
            segments.append(seg)
    if not segments:
        return None
    tip, root = segments[-1], segments[0]
    session = dict(tip.session)
    session["title"] = tip.session.get("title") or root.session.get("title")
    messages = [m for s in segments for m in s.messages]
    return LineageExport(session, segments, [s.id for s in segments], len(messages), messages)


def iter_export_all(store: Any, source: str | None = None, include_archived: bool = True, *,
                    max_messages: int | None = None) -> Iterator[SessionExport]:
    """Every session in ``started_at, id`` order by keyset (parents usually first), one
    session in memory at a time; an oversized one raises when its turn comes."""
    _flush(store)
    stmt = q.export_keys_page(source is not None, include_archived)
    after: tuple[float, str] = (float("-inf"), "")
    while True:
        params: dict[str, Any] = {"t": after[0], "id": after[1], "n": _PAGE}
        if source is not None:
            params["source"] = source
        page = store.backend.read(lambda c: stmt.run(c, params).fetchall())
        for sid, started in page:
            store.assert_export_safe(sid, max_messages)
            one = _read_one(store, sid)
            if one is not None:
                yield one
        if len(page) < _PAGE:
            return
        after = (page[-1][1], page[-1][0])


def export_all(store: Any, source: str | None = None) -> list[SessionExport]:
    """:func:`iter_export_all` as a list (every session; archived included)."""
    return list(iter_export_all(store, source))
