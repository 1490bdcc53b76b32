"""``SessionDB``'s upstream-shaped methods of the core area (the names are listed in
:data:`hermes_data.compat.names.SESSION_DB_METHODS`); each calls the typed store and adapts
only names, arguments and return shapes (docs/compat.md "Core").

The typed store is called with keywords, so its own positional order never matters here.
"""

from __future__ import annotations

from typing import Any, Iterable

from hermes_data.compat.base import CompatBase
from hermes_data.compat.shapes import message_dicts, session_dict, session_dicts
from hermes_data.sessions.core import encoding


class CoreMethods(CompatBase):
    """The core methods of :class:`~hermes_data.compat.SessionDB`."""

    # -- handle ------------------------------------------------------------------------

    def close(self) -> None:
        """Upstream drains queued token deltas and closes the connection (a shared handle
        releases one reference); calls ``SessionStore.close``."""
        self.store.close()

    # -- state_meta --------------------------------------------------------------------

    def get_meta(self, key: str) -> str | None:
        """Upstream reads one ``state_meta`` value (None when absent); calls
        ``SessionStore.get_meta``."""
        return self.store.get_meta(key)

    def set_meta(self, key: str, value: str, *, cursor: Any = None) -> None:
        """Upstream upserts one ``state_meta`` value; calls ``SessionStore.set_meta``.
        ``cursor`` (upstream's in-transaction write) is refused: this layer hands out no
        connection."""
        if cursor is not None:
            raise TypeError("set_meta(cursor=...) is not supported by hermes_data.compat: "
                            "the layer exposes no connection (docs/compat.md)")
        self.store.set_meta(key, value)

    def list_meta_prefix(self, prefix: str) -> list[tuple[str, str | None]]:
        """Upstream lists ``(key, value)`` pairs whose key starts with ``prefix`` (literal);
        calls ``SessionStore.list_meta_prefix`` (a mapping) and returns its items."""
        return list(self.store.list_meta_prefix(prefix).items())

    # -- lifecycle ---------------------------------------------------------------------

    def create_session(self, session_id: str, source: str, **kwargs: Any) -> str:
        """Upstream inserts a session row and returns its id; calls
        ``SessionStore.create_session`` with the same keywords."""
        return self.store.create_session(session_id, source, **kwargs)

    def end_session(self, session_id: str, end_reason: str) -> None:
        """Upstream ends an open session (the first reason wins) and returns nothing; calls
        ``SessionStore.end_session``."""
        self.store.end_session(session_id, end_reason)

    def reopen_session(self, session_id: str) -> None:
        """Upstream clears ``ended_at``/``end_reason`` of any session so it can resume; calls
        ``SessionStore.reopen_session(allow_continued_parent=True)``."""
        self.store.reopen_session(session_id, allow_continued_parent=True)

    # -- messages ----------------------------------------------------------------------

    def get_messages(self, session_id: str, include_inactive: bool = False,
                     include_compacted: bool = False, limit: int | None = None,
                     offset: int = 0, latest: bool = False,
                     after_id: int | None = None) -> list[dict[str, Any]]:
        """Upstream loads a session's messages in insertion order as dicts; calls
        ``SessionStore.get_messages`` (``include_compacted`` is upstream's third
        positional)."""
        return message_dicts(self.store.get_messages(
            session_id, include_inactive=include_inactive, limit=limit, offset=offset,
            latest=latest, after_id=after_id, include_compacted=include_compacted))

    def message_count(self, session_id: str | None = None) -> int:
        """Upstream counts every message row (soft-deleted included) of one session, or of
        the store; calls ``SessionStore.message_count(include_inactive=True)``."""
        return self.store.message_count(session_id or None, include_inactive=True)

    def assert_resume_safe(self, session_id: str, max_messages: int | None = None, *,
                           tip_only: bool = False) -> int:
        """Upstream returns the resume row count or raises ``SessionResumeTooLargeError``;
        calls ``SessionStore.assert_resume_safe``."""
        return self.store.assert_resume_safe(session_id, max_messages, tip_only=tip_only)

    def assert_export_safe(self, session_id: str, max_messages: int | None = None) -> int:
        """Upstream returns the active row count or raises ``SessionExportTooLargeError``;
        calls ``SessionStore.assert_export_safe``."""
        return self.store.assert_export_safe(session_id, max_messages)

    # -- lineage -----------------------------------------------------------------------

    def get_compression_chain(self, session_id: str) -> list[str]:
        """Upstream walks the compression chain from ``session_id`` to its tip; calls
        ``SessionStore.get_compression_chain``."""
        return self.store.get_compression_chain(session_id)

    def get_compression_tip(self, session_id: str) -> str:
        """Upstream returns the live tip of the compression chain (the id itself without a
        continuation); calls ``SessionStore.get_compression_tip``."""
        return self.store.get_compression_tip(session_id)

    def get_compression_lineage(self, session_id: str) -> list[str]:
        """Upstream returns the compression ancestors through the tip, oldest first (``[]``
        for an unknown id); calls ``SessionStore.get_compression_lineage``."""
        return self.store.get_compression_lineage(session_id)

    def resolve_resume_session_id(self, session_id: str) -> str:
        """Upstream redirects a resume target to the descendant holding the newest messages;
        calls ``SessionStore.resolve_resume_session_id``."""
        return self.store.resolve_resume_session_id(session_id)

    # -- titles ------------------------------------------------------------------------

    @staticmethod
    def sanitize_title(title: str | None) -> str | None:
        """Upstream cleans a title (controls removed, whitespace collapsed; blank ⇒ None; too
        long ⇒ ``ValueError``); calls :func:`hermes_data.sessions.core.encoding.sanitize_title`."""
        return encoding.sanitize_title(title)

    def set_session_title(self, session_id: str, title: str) -> bool:
        """Upstream sets a user title (False for a missing session; ``ValueError`` when in use
        or invalid); calls ``SessionStore.set_session_title``."""
        return self.store.set_session_title(session_id, title)

    def set_auto_title(self, session_id: str, title: str, *, source: str) -> bool:
        """Upstream writes an automatic (``derived``/``llm``) title unless a higher-ranked one
        holds the row; calls ``SessionStore.set_auto_title``."""
        return self.store.set_auto_title(session_id, title, source=source)

    def get_next_title_in_lineage(self, base_title: str) -> str:
        """Upstream returns the next numbered title (``base #N``) for a lineage; calls
        ``SessionStore.get_next_title_in_lineage``."""
        return self.store.get_next_title_in_lineage(base_title)

    def get_session_by_title(self, title: str) -> dict[str, Any] | None:
        """Upstream returns the session holding exactly ``title`` as a dict (with an adopted
        file's upstream-only columns, as ``get_session``), or None; calls
        ``SessionStore.get_session_by_title`` and ``SessionStore.get_session_extra``."""
        row = self.store.get_session_by_title(title)
        return session_dict(row, None if row is None else self.store.get_session_extra(row.id))

    def resolve_session_by_title(self, title: str) -> str | None:
        """Upstream resolves a title to the newest ``title #N`` variant, else the exact
        title's id, else None; calls ``SessionStore.resolve_session_by_title``."""
        return self.store.resolve_session_by_title(title)

    # -- flags -------------------------------------------------------------------------

    def set_session_archived(self, session_id: str, archived: bool) -> bool:
        """Upstream archives/unarchives the whole compression lineage (True when a row
        matched), forked branches of it included; calls ``SessionStore.set_session_archived``."""
        return self.store.set_session_archived(session_id, archived=archived,
                                              include_forked_children=True)

    def set_session_hidden(self, session_id: str, hidden: bool) -> bool:
        """Upstream hides/unhides the whole compression lineage (True when a row matched);
        forked branches of it included; calls ``SessionStore.set_session_hidden``."""
        return self.store.set_session_hidden(session_id, hidden=hidden,
                                              include_forked_children=True)

    def set_session_pinned(self, session_id: str, pinned: bool) -> bool:
        """Upstream pins/unpins the whole compression lineage (True when a row matched);
        calls ``SessionStore.set_session_pinned``."""
        return self.store.set_session_pinned(session_id, pinned=pinned,
                                              include_forked_children=True)

    def set_session_read(self, session_id: str, read: bool = True) -> bool:
        """Upstream stamps the lineage read (now) or explicitly unread (0), forked branches of
        it included; calls ``SessionStore.set_session_read``."""
        return self.store.set_session_read(session_id, read=read, include_forked_children=True)

    # -- reads -------------------------------------------------------------------------

    def get_session(self, session_id: str) -> dict[str, Any] | None:
        """Upstream returns the session row as a dict (system prompt resolved; an adopted
        file's upstream-only columns too), or None; calls ``SessionStore.get_session`` and
        ``SessionStore.get_session_extra``."""
        return session_dict(self.store.get_session(session_id),
                            self.store.get_session_extra(session_id))

    def session_count(self, source: str | None = None, sources: list[str] | None = None,
                      cwd_prefix: str | None = None, min_message_count: int = 0,
                      include_archived: bool = False, archived_only: bool = False,
                      exclude_children: bool = False,
                      exclude_sources: list[str] | None = None) -> int:
        """Upstream counts sessions under the filters (children and hidden rows included
        unless excluded); calls ``SessionStore.session_count`` with ``include_hidden=True``
        (upstream has no hidden filter) and its own ``exclude_children`` default."""
        return self.store.session_count(
            source=source, sources=sources, cwd_prefix=cwd_prefix,
            min_message_count=min_message_count, include_archived=include_archived,
            archived_only=archived_only, exclude_children=exclude_children,
            exclude_sources=exclude_sources, include_hidden=True)

    def session_count_ge(self, n: int = 1) -> bool:
        """Upstream answers whether at least ``n`` sessions exist (archived included), reading
        at most ``n`` rows; calls ``SessionStore.session_count_ge``."""
        return self.store.session_count_ge(n)

    def list_recent_sessions_bounded(self, *, limit: int = 20,
                                     exclude_sources: Iterable[str] | None = None,
                                     timeout_seconds: float = 3.0,
                                     candidate_limit: int | None = None,
                                     lineage_limit: int | None = None) -> list[dict[str, Any]]:
        """Upstream lists recent conversations projected to their tips within a deadline
        (``TimeoutError`` past it); calls ``SessionStore.list_recent_sessions_bounded``."""
        return session_dicts(self.store.list_recent_sessions_bounded(
            limit=limit, exclude_sources=exclude_sources, timeout_seconds=timeout_seconds,
            candidate_limit=candidate_limit, lineage_limit=lineage_limit))
