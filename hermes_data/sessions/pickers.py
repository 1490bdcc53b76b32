"""Session pickers (spec sessions-ext-ui.md §3.5–§3.6, §4.7): the plain MRU list behind
``hermes -c`` / ``--resume`` and ACP, with the workspace-key resume.

Workspace resume is a caller composition the store supports: :func:`search_sessions` with
the current :func:`workspace_key` and ``limit=1``; nothing ⇒ optionally the global MRU for the
source; then ``resolve_resume_session_id`` (core §4.4) lands on the compression tip.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from .encoding import escape_like
from .handle import StoreHandle
from .listing import session_fields
from .rows import SessionRow
from .sql import pickers as q
from .sql.core import SESSION_ROW_COLS


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
    rows = store.backend.read(lambda c: c.execute(stmt, params).fetchall())
    n = len(SESSION_ROW_COLS)
    return [SessionActivityRow(**session_fields(r), last_active=r[n + 1]) for r in rows]
