"""``SessionDB``'s upstream-shaped methods of the gateway area (the names are listed in
:data:`hermes_data.compat.names.SESSION_DB_METHODS`); each calls the typed store and adapts
only names, arguments and return shapes (docs/compat.md "Gateway")."""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Tuple

from hermes_data.compat.base import CompatBase
from hermes_data.compat.shapes import (as_dict, as_dicts, pick, session_list_dict,
                                       session_list_dicts)

#: The keys of upstream's handoff state (the store's row also carries the claim).
_HANDOFF_KEYS = ("state", "platform", "error")


class GatewayMethods(CompatBase):
    """The gateway methods of :class:`~hermes_data.compat.SessionDB`."""

    # -- routing index and hygiene --------------------------------------------------------

    def save_gateway_routing_entry(self, session_key: str, entry_json: str, *,
                                   scope: str = "") -> None:
        """Upsert one routing entry (session key → entry JSON) in ``scope``. Calls
        ``store.save_gateway_routing_entry`` and drops its flag (upstream returns None)."""
        self.store.save_gateway_routing_entry(session_key, entry_json, scope=scope)

    def replace_gateway_routing_entries(self, entries: Dict[str, str], *,
                                        scope: str = "") -> None:
        """Replace ``scope``'s whole routing index with ``entries``. Calls
        ``store.replace_gateway_routing_entries`` and drops its count."""
        self.store.replace_gateway_routing_entries(entries, scope=scope)

    def load_gateway_routing_entries(self, *, scope: str = "") -> Dict[str, str]:
        """``scope``'s routing index as ``{session_key: entry_json}``. Calls
        ``store.load_gateway_routing_entries``."""
        return dict(self.store.load_gateway_routing_entries(scope=scope))

    def delete_gateway_routing_entries(self, session_keys: List[str], *,
                                       scope: str = "") -> None:
        """Remove the entries of ``session_keys`` in ``scope``. Calls
        ``store.delete_gateway_routing_entries`` and drops its count."""
        self.store.delete_gateway_routing_entries(session_keys, scope=scope)

    def increment_hygiene_failure_streak(self, session_key: str) -> int:
        """Add one to the chat's hygiene failure streak; the new value. Calls
        ``store.increment_hygiene_failure_streak``."""
        return self.store.increment_hygiene_failure_streak(session_key)

    def reset_hygiene_failure_streak(self, session_key: str) -> None:
        """Forget the chat's hygiene failure streak. Calls
        ``store.reset_hygiene_failure_streak``."""
        self.store.reset_hygiene_failure_streak(session_key)

    # -- peer recovery --------------------------------------------------------------------

    def record_gateway_session_peer(
        self, session_id: str, *, source: str, user_id: Optional[str] = None,
        session_key: Optional[str] = None, chat_id: Optional[str] = None,
        chat_type: Optional[str] = None, thread_id: Optional[str] = None,
        display_name: Optional[str] = None, origin_json: Optional[str] = None,
        include_compression_ancestors: bool = False,
    ) -> None:
        """Stamp the session's routing peer (creating the row if it is missing). Calls
        ``store.record_gateway_session_peer`` and drops its count (upstream returns None)."""
        self.store.record_gateway_session_peer(
            session_id, source=source, user_id=user_id, session_key=session_key,
            chat_id=chat_id, chat_type=chat_type, thread_id=thread_id,
            display_name=display_name, origin_json=origin_json,
            include_compression_ancestors=include_compression_ancestors)

    def find_latest_gateway_session_for_peer(
        self, *, source: str, user_id: Optional[str] = None,
        session_key: Optional[str] = None, chat_id: Optional[str] = None,
        chat_type: Optional[str] = None, thread_id: Optional[str] = None,
    ) -> Optional[Dict[str, Any]]:
        """The latest recoverable session of a routing peer as a session dict, or None.
        Calls ``store.find_latest_gateway_session_for_peer``."""
        return session_list_dict(self.store.find_latest_gateway_session_for_peer(
            source=source, user_id=user_id, session_key=session_key, chat_id=chat_id,
            chat_type=chat_type, thread_id=thread_id))

    def find_session_by_origin(self, *, platform: str, chat_id: str,
                               thread_id: Optional[str] = None,
                               user_id: Optional[str] = None) -> Optional[str]:
        """The newest session id of a platform chat (None when ambiguous between users).
        Calls ``store.find_session_by_origin``."""
        return self.store.find_session_by_origin(platform=platform, chat_id=chat_id,
                                                 thread_id=thread_id, user_id=user_id)

    def list_gateway_sessions(self, *, platform: Optional[str] = None,
                              active_only: bool = True) -> List[Dict[str, Any]]:
        """The newest session per routing key as session dicts with ``last_active``. Calls
        ``store.list_gateway_sessions``."""
        return session_list_dicts(self.store.list_gateway_sessions(
            platform=platform, active_only=active_only))

    # -- never-active rows and orphan repair ----------------------------------------------

    def list_never_active_keyed_sessions(self, *,
                                         older_than_days: float) -> List[Dict[str, Any]]:
        """Open keyed rows with no sign of a turn, older than ``older_than_days``, as dicts.
        Calls ``store.list_never_active_keyed_sessions``."""
        return as_dicts(self.store.list_never_active_keyed_sessions(
            older_than_days=older_than_days))

    def prune_never_active_keyed_sessions(
        self, *, older_than_days: float, sessions_dir: str | os.PathLike[str] | None = None,
    ) -> Tuple[int, int]:
        """Delete never-active keyed rows and their routing entries; ``(sessions_deleted,
        routing_entries_deleted)``. Calls ``store.prune_never_active_keyed_sessions``."""
        result = self.store.prune_never_active_keyed_sessions(
            older_than_days=older_than_days, sessions_dir=sessions_dir)
        return (result.sessions_deleted, result.routing_entries_deleted)

    def find_orphaned_gateway_sessions(self, *, max_gap_s: Optional[float] = None
                                       ) -> List[Dict[str, Any]]:
        """Message-bearing rows that lost their routing identity, each with its donor and
        verdict, as dicts. Calls ``store.find_orphaned_gateway_sessions``."""
        return as_dicts(self.store.find_orphaned_gateway_sessions(max_gap_s=max_gap_s))

    def adopt_orphaned_gateway_session(self, orphan_id: str, donor_id: str) -> bool:
        """Give ``orphan_id`` the donor's routing identity and retire the donor; a repeat
        finds the orphan keyed (False). Calls ``store.adopt_orphaned_gateway_session`` with
        ``accept_replay=False``."""
        return self.store.adopt_orphaned_gateway_session(orphan_id, donor_id,
                                                         accept_replay=False)

    # -- handoffs -------------------------------------------------------------------------

    def request_handoff(self, session_id: str, platform: str) -> bool:
        """Mark the session ``pending`` handoff to ``platform`` (False while one is already in
        flight, a repeat included, as upstream). Calls
        ``store.request_handoff(accept_replay=False)``."""
        return self.store.request_handoff(session_id, platform, accept_replay=False)

    def get_handoff_state(self, session_id: str) -> Optional[Dict[str, Any]]:
        """``{state, platform, error}`` of the session's handoff, or None for a missing row.
        Calls ``store.get_handoff_state``."""
        state = self.store.get_handoff_state(session_id)
        return None if state is None else pick(state, _HANDOFF_KEYS)

    def list_pending_handoffs(self) -> List[Dict[str, Any]]:
        """The sessions with a ``pending`` handoff, oldest first, as session dicts. Calls
        ``store.list_pending_handoffs``."""
        return session_list_dicts(self.store.list_pending_handoffs())

    def claim_handoff(self, session_id: str) -> bool:
        """``pending`` ⇒ ``running`` (this handle claims it); a repeat finds no pending row
        (False). Calls ``store.claim_handoff`` with ``accept_replay=False``."""
        return self.store.claim_handoff(session_id, accept_replay=False)

    def complete_handoff(self, session_id: str) -> None:
        """Mark the handoff ``completed``. Calls ``store.complete_handoff`` and drops its
        flag (upstream returns None)."""
        self.store.complete_handoff(session_id)

    def fail_handoff(self, session_id: str, error: str, *,
                     only_states: Optional[Tuple[str, ...]] = None) -> bool:
        """Mark the handoff ``failed`` with ``error`` (only from ``only_states`` when
        given). Calls ``store.fail_handoff``."""
        return self.store.fail_handoff(session_id, error, only_states=only_states)

    def reclaim_stale_running_handoffs(self, error: str) -> List[str]:
        """Fail every handoff in ``running``; the ids. Calls
        ``store.reclaim_stale_running_handoffs`` with ``include_live_claims=True``."""
        return list(self.store.reclaim_stale_running_handoffs(error, include_live_claims=True))

    # -- heartbeats -----------------------------------------------------------------------

    def register_backend_heartbeat(self, *, backend_id: str, pid: int, started_at: float,
                                   last_heartbeat: Optional[float] = None, profile: str = "",
                                   host: str = "") -> None:
        """Register or refresh this backend's liveness row. Calls
        ``store.register_backend_heartbeat`` and drops its flag (upstream returns None)."""
        self.store.register_backend_heartbeat(backend_id=backend_id, pid=pid,
                                              started_at=started_at,
                                              last_heartbeat=last_heartbeat, profile=profile,
                                              host=host)

    def clear_backend_heartbeat(self, backend_id: str) -> bool:
        """Remove this backend's heartbeat row; True when one was removed. Calls
        ``store.clear_backend_heartbeat``."""
        return self.store.clear_backend_heartbeat(backend_id)

    def prune_stale_heartbeats(self, *, max_age_seconds: float) -> List[str]:
        """Drop heartbeats older than ``max_age_seconds``; the backend ids. Calls
        ``store.prune_stale_heartbeats``."""
        return list(self.store.prune_stale_heartbeats(max_age_seconds=max_age_seconds))

    def list_backend_heartbeats(self) -> List[Dict[str, Any]]:
        """Every registered backend's heartbeat as a dict. Calls
        ``store.list_backend_heartbeats``."""
        return as_dicts(self.store.list_backend_heartbeats())

    # -- kanban ---------------------------------------------------------------------------

    def retag_kanban_worker_sessions(self, workspaces_root: str) -> int:
        """Retag legacy ``cli`` worker rows under ``workspaces_root`` as ``kanban`` (once per
        root); the count. Calls ``store.retag_kanban_worker_sessions``."""
        return self.store.retag_kanban_worker_sessions(workspaces_root)

    # -- Telegram DM topics ---------------------------------------------------------------

    def apply_telegram_topic_migration(self) -> None:
        """Create the opt-in Telegram topic tables. Calls
        ``store.apply_telegram_topic_migration``."""
        self.store.apply_telegram_topic_migration()

    def enable_telegram_topic_mode(self, *, chat_id: str, user_id: str,
                                   profile_name: str = "default",
                                   has_topics_enabled: Optional[bool] = None,
                                   allows_users_to_create_topics: Optional[bool] = None
                                   ) -> None:
        """Turn topic mode on for a private chat. Calls ``store.enable_telegram_topic_mode``."""
        self.store.enable_telegram_topic_mode(
            chat_id=chat_id, user_id=user_id, profile_name=profile_name,
            has_topics_enabled=has_topics_enabled,
            allows_users_to_create_topics=allows_users_to_create_topics)

    def disable_telegram_topic_mode(self, *, chat_id: str, profile_name: str = "default",
                                    clear_bindings: bool = True) -> None:
        """Turn topic mode off for a chat (and drop its bindings by default). Calls
        ``store.disable_telegram_topic_mode`` and drops its flag (upstream returns None)."""
        self.store.disable_telegram_topic_mode(chat_id=chat_id, profile_name=profile_name,
                                               clear_bindings=clear_bindings)

    def is_telegram_topic_mode_enabled(self, *, chat_id: str, user_id: str,
                                       profile_name: str = "default") -> bool:
        """Whether topic mode is on for this chat and user. Calls
        ``store.is_telegram_topic_mode_enabled``."""
        return self.store.is_telegram_topic_mode_enabled(chat_id=chat_id, user_id=user_id,
                                                         profile_name=profile_name)

    def bind_telegram_topic(self, *, chat_id: str, thread_id: str, user_id: str,
                            session_key: str, session_id: str, managed_mode: str = "auto",
                            profile_name: str = "default") -> None:
        """Bind a topic thread to a session (a session already bound elsewhere ⇒
        ``ValueError``). Calls ``store.bind_telegram_topic``."""
        self.store.bind_telegram_topic(chat_id=chat_id, thread_id=thread_id, user_id=user_id,
                                       session_key=session_key, session_id=session_id,
                                       managed_mode=managed_mode, profile_name=profile_name)

    def delete_telegram_topic_binding(self, *, chat_id: str, thread_id: str,
                                      profile_name: str = "default") -> int:
        """Remove one topic binding (the chat's last one also turns topic mode off); the
        count. Calls ``store.delete_telegram_topic_binding``."""
        return self.store.delete_telegram_topic_binding(chat_id=chat_id, thread_id=thread_id,
                                                        profile_name=profile_name)

    def get_telegram_topic_binding(self, *, chat_id: str, thread_id: str,
                                   profile_name: str = "default") -> Optional[Dict[str, Any]]:
        """The binding of a topic thread as a dict, or None. Calls
        ``store.get_telegram_topic_binding``."""
        return as_dict(self.store.get_telegram_topic_binding(
            chat_id=chat_id, thread_id=thread_id, profile_name=profile_name))

    def get_telegram_topic_binding_by_session(self, *, session_id: str
                                              ) -> Optional[Dict[str, Any]]:
        """The binding of a session as a dict, or None. Calls
        ``store.get_telegram_topic_binding_by_session``."""
        return as_dict(self.store.get_telegram_topic_binding_by_session(session_id=session_id))

    def is_telegram_session_linked_to_topic(self, *, session_id: str) -> bool:
        """Whether the session is bound to any topic. Calls
        ``store.is_telegram_session_linked_to_topic``."""
        return self.store.is_telegram_session_linked_to_topic(session_id=session_id)

    def list_telegram_topic_bindings_for_chat(self, *, chat_id: str,
                                              profile_name: str = "default"
                                              ) -> List[Dict[str, Any]]:
        """A chat's topic bindings, newest first, as dicts. Calls
        ``store.list_telegram_topic_bindings_for_chat``."""
        return as_dicts(self.store.list_telegram_topic_bindings_for_chat(
            chat_id=chat_id, profile_name=profile_name))

    def list_unlinked_telegram_sessions_for_user(self, *, chat_id: str, user_id: str,
                                                 profile_name: str = "default",
                                                 limit: int = 10) -> List[Dict[str, Any]]:
        """The user's Telegram sessions bound to no topic, newest activity first, as session
        dicts with ``preview`` and ``last_active``. Calls
        ``store.list_unlinked_telegram_sessions_for_user``."""
        rows = self.store.list_unlinked_telegram_sessions_for_user(
            chat_id=chat_id, user_id=user_id, profile_name=profile_name, limit=limit)
        return session_list_dicts(rows)
