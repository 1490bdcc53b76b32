"""The rich session listing (docs/sessions-ui.md §4.6): core ``list_sessions`` (its
WHERE, order, search/id matching, pinned back-fill and tip projection — docs/sessions.md §5.2) enriched
to :class:`~hermes_data.sessions.rows.SessionRichRow`s.

A projected row keeps the surfaced root's token, cost and extra columns and started_at (as
upstream), takes the tip's fields of the core projection and the tip's system prompt, the
title ``COALESCE(tip, root)`` and the full ``lineage_ids``. ``compact_rows=True`` leaves the
prompt out entirely (prompts run to tens of KB a row): neither ``system_prompts`` nor the
column is read. Rows are fetched in one batched query per 900 ids; pending token counts are
flushed first (docs/sessions-agent.md §3.0 barrier).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import Connection

from hermes_data import storable
from hermes_data.sessions.rows import SessionRichRow
from hermes_data.sessions.ui.portability.export import session_columns
from hermes_data.sessions.core.listing import session_fields
from hermes_data.sessions.schema import sessions as sessions_table
from hermes_data.sessions.ui import pickers_sql as q
from hermes_data.sessions.sql.core import SESSION_ROW_COLS

IN_CHUNK = 900
_HEAD = frozenset(c.name for c in sessions_table.columns)
#: Fields the core projection takes from the tip.
_FROM_TIP = ("id", "ended_at", "end_reason", "message_count", "tool_call_count", "model", "cwd",
             "git_branch", "git_repo_root")


def _extras(store: Any, conn: Connection) -> tuple[str, ...]:
    return tuple(c for c in session_columns(store, conn) if c not in _HEAD)


def _fetch(store: Any, conn: Connection, ids: list[str], compact: bool
           ) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """``id -> (SessionRow fields, extra)`` for ``ids`` (batched)."""
    extras = _extras(store, conn)
    n = len(SESSION_ROW_COLS)
    out: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
    for lo in range(0, len(ids), IN_CHUNK):
        chunk = ids[lo:lo + IN_CHUNK]
        sql = q.rich_rows(len(chunk), compact, extras, conn.dialect.name)
        for r in conn.exec_driver_sql(sql, tuple(chunk)).fetchall():
            row = tuple(r)
            if compact:
                row = row[:n] + (None,) + row[n:]
            fields = session_fields(row)
            out[str(fields["id"])] = (fields, dict(zip(extras, row[n + 1:])))
    return out


def _flush(store: Any) -> None:
    flush = getattr(store, "flush_token_counts", None)
    if flush is not None:
        flush()


def list_sessions_rich(store: Any, *, compact_rows: bool = False,
                       **list_kwargs: Any) -> list[SessionRichRow]:
    """Core ``list_sessions`` (same keyword parameters) as rich rows (see the module
    docstring)."""
    _flush(store)
    listed = store.list_sessions(**list_kwargs)
    if not listed:
        return []
    wanted: list[str] = []
    for r in listed:
        wanted += [r.id] + ([r.lineage_root_id] if r.lineage_root_id else [])
    wanted = list(dict.fromkeys(wanted))
    rows = store.backend.read(lambda c: _fetch(store, c, wanted, bool(compact_rows)))
    out = []
    for r in listed:
        root_id = r.lineage_root_id or r.id
        if root_id not in rows or r.id not in rows:
            continue  # deleted between the two reads
        base, extra = rows[root_id]
        tip, _ = rows[r.id]
        fields = dict(base)
        for k in _FROM_TIP:
            fields[k] = tip[k]
        fields["system_prompt"] = None if compact_rows else tip["system_prompt"]
        fields["title"] = tip["title"] if tip["title"] is not None else base["title"]
        out.append(SessionRichRow(**fields, preview=r.preview, last_active=r.last_active,
                                  unread=r.unread, lineage_root_id=r.lineage_root_id,
                                  lineage_ids=tuple(r.lineage_ids) or (r.id,), extra=extra))
    return out


def get_session_extra(store: Any, session_id: str) -> dict[str, Any]:
    """The upstream-only ``sessions`` columns of one row (docs/sessions-ui.md §2.6), by name:
    what upstream's ``SELECT s.*`` added to its ``get_session`` row. ``{}`` for a missing row
    or an id no row can hold, and without a query once the handle knows its file has no such
    column (every fresh store)."""
    if not isinstance(session_id, str) or not session_id or storable.no_row_holds(session_id):
        return {}
    known = store.backend.state.export_columns
    if known is not None and all(c in _HEAD for c in known):
        return {}

    def work(conn: Connection) -> dict[str, Any]:
        if not _extras(store, conn):
            return {}
        found = _fetch(store, conn, [session_id], True)
        return found[session_id][1] if session_id in found else {}

    return store.backend.read(work)


def get_session_rich_row(store: Any, session_id: str, *,
                         compact_rows: bool = False) -> SessionRichRow | None:
    """One session enriched (no projection), or None — web search hydration."""
    if not isinstance(session_id, str) or not session_id:
        return None
    _flush(store)
    from hermes_data.sessions.core.listing import preview, unread
    from hermes_data.sessions.core import listing_sql as ls

    def work(conn: Connection) -> tuple[Any, Any]:
        found = _fetch(store, conn, [session_id], bool(compact_rows))
        if session_id not in found:
            return None, None
        act = conn.exec_driver_sql(ls.list_rows(1, store.backend.dialect),
                                   (session_id,)).first()
        return found[session_id], act

    got, act = store.backend.read(work)
    if got is None:
        return None
    fields, extra = got
    n = len(ls.LIST_COLS)
    last_active, raw_preview = (act[n], act[n + 1]) if act is not None else (None, None)
    return SessionRichRow(**fields, preview=preview(raw_preview), last_active=last_active,
                          unread=unread(last_active, fields.get("last_read_at")),
                          lineage_ids=(session_id,), extra=extra)
