"""The gateway family's public ``SessionStore`` methods (docs/sessions-gateway.md §1.1),
as one declarative delegation table (:mod:`hermes_data.sessions.handle`): each entry maps a
public name to an operation function (store first) in a module by concern
(:mod:`.gateway_routing`, :mod:`.peers`, :mod:`.handoffs`, :mod:`.heartbeats`); the class holds no state
and no logic, and ``SessionStore`` inherits it.
"""

from __future__ import annotations

from hermes_data.sessions.gateway import routing as gateway_routing
from hermes_data.sessions.gateway import handoffs
from hermes_data.sessions.gateway import heartbeats
from hermes_data.sessions.gateway import kanban
from hermes_data.sessions.gateway import never_active
from hermes_data.sessions.gateway import orphans
from hermes_data.sessions.gateway import peers
from hermes_data.sessions.gateway import telegram_topics
from hermes_data.sessions.handle import Op


class GatewayAPI:
    """The delegation table (see the module docstring)."""

    # -- routing index, hygiene (docs/sessions-gateway.md §3.1–§3.2)
    save_gateway_routing_entry = Op(gateway_routing.save_gateway_routing_entry)
    replace_gateway_routing_entries = Op(gateway_routing.replace_gateway_routing_entries)
    load_gateway_routing_entries = Op(gateway_routing.load_gateway_routing_entries)
    delete_gateway_routing_entries = Op(gateway_routing.delete_gateway_routing_entries)
    increment_hygiene_failure_streak = Op(gateway_routing.increment_hygiene_failure_streak)
    reset_hygiene_failure_streak = Op(gateway_routing.reset_hygiene_failure_streak)

    # -- peer recovery (docs/sessions-gateway.md §3.3)
    record_gateway_session_peer = Op(peers.record_gateway_session_peer)
    find_latest_gateway_session_for_peer = Op(peers.find_latest_gateway_session_for_peer)
    find_session_by_origin = Op(peers.find_session_by_origin)
    list_gateway_sessions = Op(peers.list_gateway_sessions)

    # -- never-active rows, orphan repair (docs/sessions-gateway.md §3.4–§3.5)
    list_never_active_keyed_sessions = Op(never_active.list_never_active_keyed_sessions)
    prune_never_active_keyed_sessions = Op(never_active.prune_never_active_keyed_sessions)
    find_orphaned_gateway_sessions = Op(orphans.find_orphaned_gateway_sessions)
    adopt_orphaned_gateway_session = Op(orphans.adopt_orphaned_gateway_session)

    # -- handoffs (docs/sessions-gateway.md §3.6)
    request_handoff = Op(handoffs.request_handoff)
    get_handoff_state = Op(handoffs.get_handoff_state)
    list_pending_handoffs = Op(handoffs.list_pending_handoffs)
    claim_handoff = Op(handoffs.claim_handoff)
    complete_handoff = Op(handoffs.complete_handoff)
    fail_handoff = Op(handoffs.fail_handoff)
    reclaim_stale_running_handoffs = Op(handoffs.reclaim_stale_running_handoffs)

    # -- heartbeats (docs/sessions-gateway.md §3.7)
    register_backend_heartbeat = Op(heartbeats.register_backend_heartbeat)
    clear_backend_heartbeat = Op(heartbeats.clear_backend_heartbeat)
    prune_stale_heartbeats = Op(heartbeats.prune_stale_heartbeats)
    list_backend_heartbeats = Op(heartbeats.list_backend_heartbeats)

    # -- kanban (docs/sessions-gateway.md §3.9)
    retag_kanban_worker_sessions = Op(kanban.retag_kanban_worker_sessions)

    # -- Telegram DM topics (docs/sessions-gateway.md §3.8)
    apply_telegram_topic_migration = Op(telegram_topics.apply_telegram_topic_migration)
    enable_telegram_topic_mode = Op(telegram_topics.enable_telegram_topic_mode)
    disable_telegram_topic_mode = Op(telegram_topics.disable_telegram_topic_mode)
    is_telegram_topic_mode_enabled = Op(telegram_topics.is_telegram_topic_mode_enabled)
    bind_telegram_topic = Op(telegram_topics.bind_telegram_topic)
    delete_telegram_topic_binding = Op(telegram_topics.delete_telegram_topic_binding)
    get_telegram_topic_binding = Op(telegram_topics.get_telegram_topic_binding)
    get_telegram_topic_binding_by_session = Op(
        telegram_topics.get_telegram_topic_binding_by_session)
    is_telegram_session_linked_to_topic = Op(telegram_topics.is_telegram_session_linked_to_topic)
    list_telegram_topic_bindings_for_chat = Op(
        telegram_topics.list_telegram_topic_bindings_for_chat)
    list_unlinked_telegram_sessions_for_user = Op(
        telegram_topics.list_unlinked_telegram_sessions_for_user)
