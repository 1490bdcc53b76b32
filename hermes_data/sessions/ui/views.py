"""Transcript windows for user interfaces (docs/sessions-ui.md §4.1–§4.4): a window
around a search hit, the anchored view with its bookends, the recent-user list of
``/rewind`` and ``/undo``, and the PR-URL scan.

Several SELECTs of one answer run in one read snapshot (SQLite: the read transaction of the
borrowed connection; PostgreSQL: ``REPEATABLE READ READ ONLY``), so a concurrent delete of
the anchor never yields a window without it. Errors propagate (a transient error is never an
empty result, docs/sessions-ui.md §3.1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence, TypeVar

from sqlalchemy.engine import Connection

from hermes_data.sessions.core import encoding as enc
from hermes_data.sessions.sql import markers
from hermes_data.sessions.handle import StoreHandle
from hermes_data.sessions.core.messages import message_rows
from hermes_data.sessions.rows import MessageRow
from hermes_data.sessions.ui import views_sql as q

T = TypeVar("T")

#: Largest ``window`` (docs/sessions-ui.md §4.1), ``bookend`` (docs/sessions-ui.md §4.2) and recent-user ``limit`` (docs/sessions-ui.md §4.3).
MAX_WINDOW = 1000
MAX_BOOKEND = 100
MAX_RECENT = 1000
#: Session ids per PR-URL statement.
IN_CHUNK = 900
#: Rows fetched per keyset page of the recent-user list.
_RECENT_PAGE = 64


@dataclass(frozen=True)
class AroundWindow:
    """Rows around an anchor, ascending; counts of rows found on each side (below the
    requested ``window`` = an edge was reached)."""

    window: list[MessageRow]
    messages_before: int
    messages_after: int


@dataclass(frozen=True)
class AnchoredView:
    """An anchored window plus the session's head and tail (goal and resolution)."""

    window: list[MessageRow]
    messages_before: int
    messages_after: int
    bookend_start: list[MessageRow]
    bookend_end: list[MessageRow]


@dataclass(frozen=True)
class RecentUserMessage:
    """One user-originated turn for ``/rewind`` / ``/undo``."""

    id: int
    timestamp: float
    preview: str


@dataclass(frozen=True)
class PrUrlCandidate:
    """A tool row that may carry a PR URL (decoded content; part lists as joined text)."""

    session_id: str
    content: str


def _int_arg(name: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    return value


def _clamp(name: str, value: Any, top: int | None) -> int:
    # Negative ⇒ 0; above ``top`` ⇒ ``top`` (None: no cap).
    n = max(0, _int_arg(name, value))
    return n if top is None else min(n, top)


def snapshot_read(store: StoreHandle, fn: Callable[[Connection], T]) -> T:
    """Run ``fn`` in one read snapshot (docs/sessions-ui.md §3.1)."""
    def work(conn: Connection) -> T:
        if conn.dialect.name == "postgresql":
            conn.execute(q.PG_SNAPSHOT)
        return fn(conn)
    return store.backend.read(work)


def _around(conn: Connection, d: str, session_id: str, anchor: int, window: int,
            include_inactive: bool) -> tuple[list[Any], int, int]:
    if q.anchor(include_inactive).run(conn, {"a": anchor, "s": session_id}).first() is None:
        return [], 0, 0
    params = {"a": anchor, "s": session_id}
    before = q.before(include_inactive).run(conn, {**params, "n": window + 1}).fetchall()
    if not before or before[0][0] != anchor:  # deleted between the probe and the page
        return [], 0, 0
    after = q.after(include_inactive).run(conn, {**params, "n": window}).fetchall() \
        if window else []
    return list(reversed(before)) + list(after), len(before) - 1, len(after)


def get_messages_around(store: StoreHandle, session_id: str, around_message_id: int,
                        window: int = 5, include_inactive: bool = False, *,
                        max_window: int | None = MAX_WINDOW) -> AroundWindow:
    """Rows of ``session_id`` around ``around_message_id`` (docs/sessions-ui.md §4.1): the anchor, up to
    ``window`` same-visibility rows before and after it, ascending. An anchor outside the
    session, unknown, or (by default) rewound ⇒ ``([], 0, 0)``; compaction-preserved anchors
    are visible by default. ``window`` < 0 ⇒ 0, clamped at ``max_window`` (1000; None: no
    cap); a non-int anchor (or a bool) ⇒ :class:`TypeError`. Upstream's window (every row,
    no cap): ``include_inactive=True, max_window=None``."""
    anchor = _int_arg("around_message_id", around_message_id)
    window = _clamp("window", window, max_window)
    d = store.backend.dialect
    rows, nb, na = snapshot_read(store, lambda c: _around(c, d, session_id, anchor, window,
                                                          include_inactive))
    return AroundWindow(message_rows(rows, d), nb, na)


def get_anchored_view(store: StoreHandle, session_id: str, around_message_id: int,
                      window: int = 5, bookend: int = 3,
                      keep_roles: Sequence[str] | None = ("user", "assistant"),
                      include_inactive: bool = False) -> AnchoredView:
    """:func:`get_messages_around` filtered to ``keep_roles`` (the anchor always kept; None:
    no filter; ``()``: the anchor alone, no bookend SQL), plus up to ``bookend`` non-empty
    rows of those roles strictly before and after the window — the session's first and last
    turns, ascending (docs/sessions-ui.md §4.2). Counts are the unfiltered window's."""
    anchor = _int_arg("around_message_id", around_message_id)
    window = _clamp("window", window, MAX_WINDOW)
    bookend = _clamp("bookend", bookend, MAX_BOOKEND)
    roles = None if keep_roles is None else tuple(keep_roles)
    if roles is not None and not all(isinstance(r, str) for r in roles):
        raise TypeError(f"keep_roles must be strings, got {roles!r}")
    d = store.backend.dialect

    def work(conn: Connection) -> tuple[list[Any], int, int, list[Any], list[Any]]:
        rows, nb, na = _around(conn, d, session_id, anchor, window, include_inactive)
        if not rows or not bookend or roles == ():
            return rows, nb, na, [], []
        role_args = {} if roles is None else dict(zip(q.role_params(len(roles)), roles))
        n = None if roles is None else len(roles)
        base = {"s": session_id, "n": bookend, **role_args}
        head = q.bookend(include_inactive, n, True).run(
            conn, {**base, "edge": rows[0][0]}).fetchall()
        tail = q.bookend(include_inactive, n, False).run(
            conn, {**base, "edge": rows[-1][0]}).fetchall()
        return rows, nb, na, list(head), list(reversed(tail))

    rows, nb, na, head, tail = snapshot_read(store, work)
    kept = [r for r in rows if roles is None or r[0] == anchor or r[2] in roles]
    return AnchoredView(message_rows(kept, d), nb, na, message_rows(head, d),
                        message_rows(tail, d))


def list_recent_user_messages(store: StoreHandle, session_id: str, limit: int = 20,
                              include_inactive: bool = False) -> list[RecentUserMessage]:
    """Up to ``limit`` user-originated turns, newest first (docs/sessions-ui.md §4.3): ``role = 'user'``, active
    unless ``include_inactive``, display kind none, ``''`` or ``'steer'``; compaction
    carriers skipped (paging on until ``limit`` real turns or the session's start)."""
    limit = _clamp("limit", limit, MAX_RECENT)
    d = store.backend.dialect
    if not limit:
        return []

    def work(conn: Connection) -> list[RecentUserMessage]:
        out: list[RecentUserMessage] = []
        below = 2 ** 62
        stmt = q.recent_users(include_inactive)
        while len(out) < limit:
            page = stmt.run(conn, {"s": session_id, "before": below,
                                    "n": _RECENT_PAGE}).fetchall()
            for rid, ts, raw in page:
                content = enc.decode_content(raw, d)
                text = markers.part_text(content)
                if text is not None and markers.is_carrier(text):
                    continue
                out.append(RecentUserMessage(int(rid), float(ts), markers.recent_preview(content)))
                if len(out) == limit:
                    break
            if len(page) < _RECENT_PAGE:
                break
            below = page[-1][0]
        return out

    return snapshot_read(store, work)


def find_pr_url_messages(store: StoreHandle, session_ids: Iterable[Any]) -> list[PrUrlCandidate]:
    """Tool rows of ``session_ids`` mentioning ``/pull/`` (any case, any ``active``), oldest
    first per chunk of 900 ids (docs/sessions-ui.md §4.4); content decoded, part lists as their joined text. No
    usable id ⇒ ``[]`` without SQL."""
    ids = list(dict.fromkeys(s for s in session_ids if isinstance(s, str) and s))
    if not ids:
        return []
    d = store.backend.dialect

    def work(conn: Connection) -> list[PrUrlCandidate]:
        found = []
        for lo in range(0, len(ids), IN_CHUNK):
            chunk = ids[lo:lo + IN_CHUNK]
            sql = q.pr_urls(len(chunk), d)
            for rid, sid, raw in conn.exec_driver_sql(sql, tuple(chunk)):
                text = markers.part_text(enc.decode_content(raw, d))
                if text is not None:
                    found.append((int(rid), PrUrlCandidate(str(sid), text)))
        found.sort(key=lambda pair: pair[0])  # oldest first across chunks
        return [c for _, c in found]

    return snapshot_read(store, work)
