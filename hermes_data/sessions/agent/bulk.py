"""Listing helpers of the agent turn API (docs/sessions-agent.md §3.11): counts by
source, lifecycle statuses of many sessions, cron job runs. (Bulk delete lives beside the
core delete in :mod:`.maintenance`.)"""

from __future__ import annotations

from typing import Any, Iterable

from sqlalchemy.engine import Connection

from hermes_data.sessions.rows import SessionRichRow, SessionStatus
from hermes_data.sessions.handle import UNSET, StoreHandle, either_spelling
from hermes_data.sessions.agent.bulk_sql import STATUS_CHUNK, BulkStatements, count_by_source, for_dialect
from hermes_data.sessions.core.listing import session_fields
from hermes_data.sessions.sql.core import SESSION_ROW_COLS
from hermes_data.sessions.core.listing_sql import SessionFilter

_ERROR_REASONS = frozenset({"error", "agent_error", "content_filter"})
_NO_CALLS = frozenset({"", "[]", "null"})


def _b(store: StoreHandle) -> BulkStatements:
    return for_dialect(store.backend.dialect)


def session_count_by_source(store: StoreHandle, *, include_archived: bool = False,
                            archived_only: bool = False,
                            exclude_children: bool = False) -> dict[str, int]:
    """Sessions per source (blank/NULL ⇒ ``cli``), most first; ``exclude_children`` counts
    conversations as the listing does (core LISTABLE); the archive filter is the listing's.
    Hidden sessions count."""
    flt = SessionFilter(include_children=not exclude_children, include_archived=include_archived,
                        archived_only=archived_only, include_hidden=True)
    stmt, params = count_by_source(flt.shape()), flt.params()
    rows = store.backend.read(lambda c: stmt.run(c, params).fetchall())
    return {str(r[0]): int(r[1]) for r in rows}


def classify_session_status(role: Any, has_tool_calls: bool, finish_reason: Any) -> SessionStatus:
    """Status from the newest active row: an error finish ⇒ ``error``; an assistant with tool
    calls, a user or a tool row ⇒ ``interrupted``; anything else ⇒ ``complete``."""
    r = str(role or "").strip().lower()
    reason = str(finish_reason or "").strip().lower()
    if reason in _ERROR_REASONS:
        return "error"
    if r == "assistant":
        return "interrupted" if has_tool_calls else "complete"
    if r in ("user", "tool"):
        return "interrupted"
    return "complete"


def _has_calls(raw: Any) -> bool:
    return raw is not None and str(raw).strip() not in _NO_CALLS


def session_lifecycle_statuses(store: StoreHandle, ids: Iterable[str] = UNSET, *,
                               session_ids: Iterable[str] = UNSET) -> dict[str, SessionStatus]:
    """Status of each distinct non-empty id from its newest **active** row (a bounded seek per
    id, ≤ 900 ids per statement); no rows ⇒ ``empty``. ``session_ids=`` is upstream's name
    for ``ids`` (either, not both)."""
    given = either_spelling("ids", ids, "session_ids", session_ids)
    wanted = list(dict.fromkeys(i for i in given if i))
    out: dict[str, SessionStatus] = {i: "empty" for i in wanted}
    if not wanted:
        return out
    b = _b(store)
    pg = store.backend.dialect == "postgresql"

    def work(conn: Connection) -> list[Any]:
        rows: list[Any] = []
        for i in range(0, len(wanted), STATUS_CHUNK):
            chunk = wanted[i:i + STATUS_CHUNK]
            if pg:
                rows += conn.exec_driver_sql(b.LAST_ACTIVE_ROWS, (chunk,)).fetchall()
            else:
                rows += conn.exec_driver_sql(b.last_active_rows(len(chunk)),
                                             tuple(chunk)).fetchall()
        return rows

    for sid, role, calls, reason in store.backend.read(work):
        out[sid] = classify_session_status(role, _has_calls(calls), reason)
    return out


def _cron_bounds(job_id: str) -> tuple[str, str]:
    lo = f"cron_{job_id}_"
    return lo, lo[:-1] + chr(ord(lo[-1]) + 1)


def list_cron_job_runs(store: StoreHandle, job_id: str, limit: int = 20,
                       offset: int = 0) -> list[SessionRichRow]:
    """Runs of cron job ``job_id`` — rows ``cron_<job_id>_<digits/underscores>`` — newest
    first, with resolved prompt, preview and ``LAST_ACTIVE`` (queued tokens flushed first)."""
    if not job_id or not job_id.strip():
        raise ValueError(f"list_cron_job_runs needs a job id, not {job_id!r}")
    if limit < 0 or offset < 0:
        raise ValueError(f"limit and offset must be >= 0, not {limit!r}, {offset!r}")
    store.token_writer.flush()
    b = _b(store)
    lo, hi = _cron_bounds(job_id)
    start = len(lo) + 1
    params = (lo, hi, *([start] * b.CRON_SUFFIX_BINDS), int(limit), int(offset))
    rows = store.backend.read(lambda c: c.exec_driver_sql(b.CRON_RUNS, params).fetchall())
    out = []
    n = len(SESSION_ROW_COLS)
    for r in rows:
        out.append(SessionRichRow(**session_fields(r), preview=r[n + 1], last_active=r[n + 2]))
    return out
