"""Session pickers (docs/sessions-ui.md §3.5–§3.6, §4.7): the plain MRU list behind
``hermes -c`` / ``--resume`` and ACP, with the workspace-key resume.

Workspace resume is a caller composition the store supports: :func:`search_sessions` with
the current :func:`workspace_key` and ``limit=1``; nothing ⇒ optionally the global MRU for the
source; then ``resolve_resume_session_id`` (docs/sessions.md §4.4) lands on the compression tip.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from hermes_data.sessions.core.encoding import escape_like
from hermes_data.sessions.handle import StoreHandle
from hermes_data.sessions.core.listing import session_fields
from hermes_data.sessions.rows import SessionRow
from hermes_data.sessions.ui import pickers_sql as q
from hermes_data.sessions.sql.core import SESSION_ROW_COLS


@dataclass(frozen=True)
class SessionActivityRow(SessionRow):
    """A :class:`SessionRow` with its ``LAST_ACTIVE`` time (None: no plausible activity)."""

    last_active: float | None = None


def _field(row: Any, name: str) -> Any:
    if isinstance(row, Mapping):
        return row.get(name)
    return getattr(row, name, None)


def workspace_key(row: Any) -> str | None:
    """The workspace of a session (mapping or object with ``git_repo_root``/``cwd``): the
    stripped repository root if non-empty, else the stripped cwd if non-empty, else None. The
    branch is left out, so checking out a branch never fragments a workspace's history."""
    for name in ("git_repo_root", "cwd"):
        value = _field(row, name)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def _normalise_key(key: str) -> str:
    p = key.strip()
    return p.rstrip("/\\") or p


def _count(name: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{name} must be an int >= 0, got {value!r}")
    return value


def search_sessions(store: StoreHandle, source: str | None = None, limit: int = 20,
                    offset: int = 0, workspace_key: str | None = None,
                    include_archived: bool = False,
                    include_delegates: bool = False) -> list[SessionActivityRow]:
    """Sessions newest activity first (``LAST_ACTIVE``; NULL last; then start, id): filtered
    by ``source``, a non-blank ``workspace_key`` (repository root, or without a root the
    escaped cwd prefix), archived rows only with ``include_archived`` and delegate children
    only with ``include_delegates``."""
    limit, offset = _count("limit", limit), _count("offset", offset)
    key = workspace_key.strip() if isinstance(workspace_key, str) else ""
    params: dict[str, Any] = {"limit": limit, "offset": offset}
    if source is not None:
        params["source"] = source
    if key:
        p = _normalise_key(key)
        params.update(ws=p, ws_slash=escape_like(p + "/") + "%",
                      ws_bslash=escape_like(p + "\\") + "%")
    stmt = q.search_sessions(store.backend.dialect, source is not None, bool(key),
                             bool(include_archived), bool(include_delegates))
    rows = store.backend.read(lambda c: stmt.run(c, params).fetchall())
    n = len(SESSION_ROW_COLS)
    return [SessionActivityRow(**session_fields(r), last_active=r[n + 1]) for r in rows]


def search_sessions_by_id(store: Any, query: str | None, limit: int = 20,
                          include_archived: bool = True, source: str | None = None,
                          sources: Any = None, exclude_sources: Any = None) -> list[Any]:
    """Conversations whose chain holds an id matching ``query`` (case-insensitive), as core
    ``list_sessions`` rows projected onto their tips (docs/sessions-ui.md §4.8): exact matches of any segment
    first (old root, middle segment or tip), then prefixes, then substrings — each tier
    queried for the still-missing count, deduplicated by surfaced id. Blank, NUL-containing
    or ``limit <= 0`` ⇒ ``[]``."""
    needle = (query or "").strip().lower() if isinstance(query, (str, type(None))) else ""
    if not needle or "\x00" in needle or not isinstance(limit, int) or limit <= 0:
        return []
    out: list[Any] = []
    surfaced: set[str] = set()
    tried: set[str] = set()
    for tier, pattern in (("exact", None), ("prefix", escape_like(needle) + "%"),
                          ("substring", "%" + escape_like(needle) + "%")):
        missing = limit - len(out)
        if missing <= 0:
            break
        params = {"needle": needle, "pattern": pattern, "n": missing * 4 + 8}
        stmt = q.id_candidates(tier, bool(include_archived))
        ids = [str(r[0]) for r in store.backend.read(lambda c: stmt.run(c, params).fetchall())]
        for mid in ids:
            if mid in tried or len(out) >= limit:
                continue
            tried.add(mid)
            row = _conversation_of(store, mid, include_archived, source, sources,
                                   exclude_sources)
            if row is not None and row.id not in surfaced:
                surfaced.add(row.id)
                tried.update(row.lineage_ids)
                out.append(row)
    return out


def _conversation_of(store: Any, member: str, include_archived: bool, source: str | None,
                     sources: Any, exclude_sources: Any) -> Any:
    """The projected listing row whose chain holds ``member`` (core ``list_sessions`` with
    the chain-member id match, paged: the match is a substring one)."""
    for offset in range(0, 5000, _ID_PAGE):
        rows = store.list_sessions(order_by_last_active=True, id_query=member,
                                   include_archived=include_archived, source=source,
                                   sources=sources, exclude_sources=exclude_sources,
                                   limit=_ID_PAGE, offset=offset)
        for row in rows:
            if row.id == member or member in row.lineage_ids:
                return row
        if len(rows) < _ID_PAGE:
            return None
    return None


_ID_PAGE = 200
