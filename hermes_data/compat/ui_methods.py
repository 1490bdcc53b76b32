"""``SessionDB``'s upstream-shaped methods of the ui area (the names are listed in
:data:`hermes_data.compat.names.SESSION_DB_METHODS`); each calls the typed store and adapts
only names, arguments and return shapes (docs/compat.md "User interface")."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from hermes_data.compat.base import CompatBase
from hermes_data.compat.shapes import as_dicts, as_plain, session_list_dicts


class UiMethods(CompatBase):
    """The ui methods of :class:`~hermes_data.compat.SessionDB`."""

    # -- transcript windows ---------------------------------------------------------------

    def get_messages_around(self, session_id: str, around_message_id: int,
                            window: int = 5) -> Dict[str, Any]:
        """``{window, messages_before, messages_after}``: up to ``window`` rows each side of
        the anchor, rewound rows included as upstream (an unknown anchor gives an empty
        window; no cap on ``window``). Calls
        ``store.get_messages_around(include_inactive=True, max_window=None)``."""
        around = self.store.get_messages_around(session_id, around_message_id, window,
                                                include_inactive=True, max_window=None)
        return as_plain(around)

    def find_pr_url_messages(self, session_ids: List[str]) -> List[Dict[str, Any]]:
        """Tool rows of these sessions that mention a pull-request URL, oldest first per
        session, as ``{session_id, content}``. Calls ``store.find_pr_url_messages``."""
        return as_dicts(self.store.find_pr_url_messages(session_ids))

    # -- reactions ------------------------------------------------------------------------

    def set_message_reaction(self, session_id: str, message_row_id: int,
                             emoji: Optional[str], *, author: str = "user"
                             ) -> Optional[List[Dict[str, Any]]]:
        """Set, replace or (same emoji again, or None) clear ``author``'s reaction; the row's
        reactions after the write, or None for a row outside the session. Calls
        ``store.set_message_reaction``."""
        reactions = self.store.set_message_reaction(session_id, message_row_id, emoji,
                                                    author=author)
        return None if reactions is None else as_dicts(reactions)

    def get_message_reactions(self, session_id: str,
                              message_row_id: int) -> List[Dict[str, Any]]:
        """The reactions stored on one row (never None). Calls
        ``store.get_message_reactions``."""
        return as_dicts(self.store.get_message_reactions(session_id, message_row_id))

    def take_unseen_reactions(self, session_id: str, *,
                              author: str = "user") -> List[Dict[str, Any]]:
        """``author``'s reactions not announced yet, as ``{row_id, role, emoji, text}``, now
        marked seen. Calls ``store.take_unseen_reactions``."""
        return as_dicts(self.store.take_unseen_reactions(session_id, author=author))

    # -- pickers --------------------------------------------------------------------------

    def list_sessions_rich(
        self, source: Optional[str] = None, sources: Optional[List[str]] = None,
        exclude_sources: Optional[List[str]] = None, cwd_prefix: Optional[str] = None,
        limit: int = 20, offset: int = 0, include_children: bool = False,
        min_message_count: int = 0, project_compression_tips: bool = True,
        order_by_last_active: bool = False, include_archived: bool = False,
        archived_only: bool = False, id_query: Optional[str] = None,
        search_query: Optional[str] = None, compact_rows: bool = False,
        include_pinned: bool = False, session_key: Optional[str] = None,
        include_hidden: bool = False,
    ) -> List[Dict[str, Any]]:
        """The session list with ``preview``, ``last_active`` and ``unread`` (compression
        roots projected onto their tips, with ``_lineage_root_id``/``_lineage_ids``), in
        upstream's positional order. Calls ``store.list_sessions_rich``."""
        rows = self.store.list_sessions_rich(
            compact_rows=compact_rows, source=source, sources=sources,
            exclude_sources=exclude_sources, cwd_prefix=cwd_prefix, limit=limit,
            offset=offset, include_children=include_children,
            min_message_count=min_message_count,
            project_compression_tips=project_compression_tips,
            order_by_last_active=order_by_last_active, include_archived=include_archived,
            archived_only=archived_only, id_query=id_query, search_query=search_query,
            include_pinned=include_pinned, session_key=session_key,
            include_hidden=include_hidden)
        return session_list_dicts(rows)

    def search_sessions(self, source: Optional[str] = None, limit: int = 20, offset: int = 0,
                        workspace_key: Optional[str] = None) -> List[Dict[str, Any]]:
        """Sessions by most recent activity as session dicts with ``last_active``, archived
        and delegate rows included as upstream. Calls ``store.search_sessions`` with
        ``include_archived=True, include_delegates=True``."""
        return session_list_dicts(self.store.search_sessions(
            source, limit, offset, workspace_key, include_archived=True,
            include_delegates=True))
