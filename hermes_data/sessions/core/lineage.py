"""Compression lineage (docs/sessions.md §4.4, §4.6): walks as one recursive statement each
(chain, tip, root, lineage, resume target and path), upstream's row-by-row
``get_compression_lineage``, and the lineage-wide flags (the store's flag setters are the
functions taking the store first, exposed by :class:`~hermes_data.sessions.core.api.LineageAPI`).
"""

from __future__ import annotations

import json
from typing import Any, Callable, cast

from sqlalchemy.engine import Connection

from hermes_data import storable
from hermes_data.sessions.core import encoding as enc
from hermes_data.sessions.handle import StoreHandle
from hermes_data.sessions.sql import Fragments


def chain(conn: Connection, q: Fragments, session_id: str) -> list[str]:
    """Ids from ``session_id`` forward to its compression tip."""
    return [r[0] for r in conn.execute(q.CHAIN_FROM, {"start": session_id})]


def tip(conn: Connection, q: Fragments, session_id: str) -> str:
    """The live end of the compression chain through ``session_id``."""
    return cast(str, conn.execute(q.TIP_OF, {"start": session_id}).scalar())  # the walk always holds its seed


def root(conn: Connection, q: Fragments, session_id: str) -> str:
    """The first segment of the compression chain holding ``session_id``."""
    return cast(str, conn.execute(q.ROOT_OF, {"id": session_id}).scalar())  # the walk always holds its seed


def lineage_ids(conn: Connection, q: Fragments, session_id: str) -> list[str]:
    """Every segment of the compression lineage of ``session_id``, root first."""
    return [r[0] for r in conn.execute(q.LINEAGE_OF, {"id": session_id})]


def resume_lineage_ids(conn: Connection, q: Fragments, session_id: str) -> list[str]:
    """The compression path root … ``session_id`` (what a full resume materialises)."""
    return [r[0] for r in conn.execute(q.RESUME_LINEAGE_OF, {"id": session_id})]


def resume_target(conn: Connection, q: Fragments, session_id: str) -> str:
    """Where resuming ``session_id`` lands: the tip, or a newer non-fork continuation."""
    return cast(str, conn.execute(q.RESUME_TARGET_OF, {"start": session_id}).scalar())  # the walk always holds its seed


def ancestors(conn: Connection, q: Fragments, session_id: str) -> set[str]:
    """Compression ancestors of ``session_id`` (excluding itself)."""
    return {r[0] for r in conn.execute(q.ANCESTORS_OF, {"id": session_id})}


Changes = Callable[[Connection, Any], int]


def set_flag(conn: Connection, q: Fragments, changes: Changes, session_id: str, flag: str,
             value: Any, with_forks: bool = False) -> bool:
    """Set ``flag`` (archived / hidden / pinned / last_read_at) on the whole lineage (over
    upstream's wider set ``with_forks``). True when the session exists, changed or not."""
    stmt = (q.LINEAGE_FLAG_UPDATE_WITH_FORKS if with_forks else q.LINEAGE_FLAG_UPDATE)[flag]
    changed = changes(conn, conn.execute(stmt, {"id": session_id, "value": value}))
    return changed > 0 or bool(q.SESSION_EXISTS.run(conn, {"id": session_id}).scalar())


def set_pinned(conn: Connection, q: Fragments, changes: Changes, session_id: str,
               pinned: bool, with_forks: bool = False) -> bool:
    """Pin/unpin the lineage; pinning also un-hides it unless it holds a hidden 'Bot Chat'.
    True when the session exists, changed or not."""
    value = int(bool(pinned))
    exists = set_flag(conn, q, changes, session_id, "pinned", value, with_forks)
    has_bot_chat = q.LINEAGE_HAS_HIDDEN_BOT_CHAT_WITH_FORKS if with_forks \
        else q.LINEAGE_HAS_HIDDEN_BOT_CHAT
    if value and not conn.execute(has_bot_chat, {"id": session_id}).scalar():
        conn.execute(q.LINEAGE_UNHIDE_WITH_FORKS if with_forks else q.LINEAGE_UNHIDE,
                     {"id": session_id})
    return exists


# -- the store's flag setters (docs/sessions.md §4.6) -------------------------------------


def _write_flag(store: StoreHandle, session_id: str, flag: str, value: Any,
                with_forks: bool) -> bool:
    storable.check_texts((("session_id", session_id),))
    b = store.backend
    if flag == "pinned":
        return b.write(lambda c: set_pinned(c, b.sql, b.changes, session_id, value, with_forks))
    return b.write(lambda c: set_flag(c, b.sql, b.changes, session_id, flag, value, with_forks))


def set_session_archived(store: StoreHandle, session_id: str, archived: bool = True, *,
                         include_forked_children: bool = False) -> bool:
    """Archive/unarchive the whole compression lineage. True when the session exists (a
    repeated call too, as upstream). ``include_forked_children=True``: upstream's set — every
    child of a compression-ended parent, branch, delegate and tool children included."""
    return _write_flag(store, session_id, "archived", int(bool(archived)),
                       include_forked_children)


def set_session_hidden(store: StoreHandle, session_id: str, hidden: bool = True, *,
                       include_forked_children: bool = False) -> bool:
    """Hide/unhide the whole compression lineage. True when the session exists (a repeated
    call too, as upstream). ``include_forked_children=True``: upstream's set — every child
    of a compression-ended parent, branch, delegate and tool children included."""
    return _write_flag(store, session_id, "hidden", int(bool(hidden)), include_forked_children)


def set_session_read(store: StoreHandle, session_id: str, read: bool = True, *,
                     include_forked_children: bool = False) -> bool:
    """Mark the lineage read (``last_read_at = now``) or explicitly unread (0). True when
    the session exists. ``include_forked_children=True``: upstream's wider set (see
    :func:`set_session_hidden`)."""
    return _write_flag(store, session_id, "last_read_at", enc.now() if read else 0,
                       include_forked_children)


def set_session_pinned(store: StoreHandle, session_id: str, pinned: bool = True, *,
                       include_forked_children: bool = False) -> bool:
    """Pin/unpin the lineage; pinning also un-hides it unless it holds a hidden 'Bot Chat'.
    True when the session exists. ``include_forked_children=True``: upstream's wider set
    (see :func:`set_session_hidden`)."""
    return _write_flag(store, session_id, "pinned", bool(pinned), include_forked_children)


# -- upstream's get_compression_lineage (docs/sessions.md §4.4) -----------------------------


def explicit_fork_row(source: Any, parent_id: Any, model_config: Any) -> bool:
    """Upstream's explicit-fork test of one row: a ``tool`` row, or a ``_branched_from`` /
    ``_delegate_from`` marker naming its own parent (a parentless row: any such marker).
    ``_reset_from`` and an inherited marker naming another row are no fork; an unreadable
    or non-object ``model_config`` holds no marker."""
    if source == "tool":
        return True
    try:
        cfg = json.loads(model_config) if isinstance(model_config, str) else model_config
    except ValueError:
        return False
    if not isinstance(cfg, dict):
        return False
    branched, delegated = cfg.get("_branched_from"), cfg.get("_delegate_from")
    if parent_id:
        return parent_id in (branched, delegated)
    return branched is not None or delegated is not None


def _is_fork(row: Any) -> bool:
    return explicit_fork_row(row.source, row.parent_session_id, row.model_config)


def get_compression_lineage(store: StoreHandle, session_id: str) -> list[str]:
    """Upstream's compression lineage of ``session_id``, root first (one read snapshot):
    walk up while the row is a compression child (not an explicit fork, parent ended
    ``compression``), then down from that root through each compression-ended row's
    **earliest** non-fork child (``started_at``, then id). An unknown id ⇒ ``[]``; an
    explicit fork, or a row the walk down does not pass through (a later sibling) ⇒
    ``[session_id]``; the result always holds ``session_id`` when it exists. Differs from
    :meth:`get_lineage_ids` (over ``EDGE``, the freshest continuation, docs/sessions.md §3.3)."""
    if not session_id or storable.no_row_holds(session_id):
        return []
    q = store.backend.sql

    def work(conn: Connection) -> list[str]:
        def row(sid: str) -> Any:
            return q.WALK_ROW.run(conn, {"id": sid}).first()

        start = row(session_id)
        if start is None:
            return []
        if _is_fork(start):
            return [session_id]
        root, above = start, {start.id}
        while root.parent_session_id and not _is_fork(root):
            parent = row(root.parent_session_id)
            if parent is None or parent.end_reason != "compression" or parent.id in above:
                break
            root = parent
            above.add(root.id)
        ids, current = [root.id], root
        while current.end_reason == "compression":
            children = q.WALK_CHILDREN.run(conn, {"id": current.id}).fetchall()
            nxt = next((c for c in children if not _is_fork(c)), None)
            if nxt is None or nxt.id in ids:
                break
            ids.append(nxt.id)
            current = nxt
        return ids if session_id in ids else [session_id]

    return store.backend.read(work)
