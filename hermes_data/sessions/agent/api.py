"""The agent turn API's public ``SessionStore`` methods, as one declarative delegation table
(docs/sessions-agent.md §1).

Each method is an operation function in a module by concern (:mod:`.accounting`,
:mod:`.session_meta`, :mod:`.activity`, :mod:`.message_rows`, :mod:`.projections`,
:mod:`.identity`, :mod:`.bulk`) taking the store first; :class:`AgentTurnAPI` maps each
public name to it with :class:`~hermes_data.sessions.handle.Op` and
:func:`~hermes_data.sessions.handle.static` (why a table, and why a class: see
:mod:`hermes_data.sessions.handle`), and ``SessionStore`` inherits it.
"""

from __future__ import annotations

from hermes_data.sessions.agent import accounting
from hermes_data.sessions.agent import activity
from hermes_data.sessions.agent import bulk
from hermes_data.sessions.agent import identity
from hermes_data.sessions.agent import projections
from hermes_data.sessions.agent import message_rows as row_helpers
from hermes_data.sessions.agent import session_meta
from hermes_data.sessions.core import encoding, titles
from hermes_data.sessions.handle import Op, static


class AgentTurnAPI:
    """The delegation table (see the module docstring)."""

    # -- A accounting (docs/sessions-agent.md §3.1–§3.4)
    update_token_counts = Op(accounting.update_token_counts)
    queue_token_counts = Op(accounting.queue_token_counts)
    flush_token_counts = Op(accounting.flush_token_counts)
    record_auxiliary_usage = Op(accounting.record_auxiliary_usage)
    update_session_billing_route = Op(accounting.update_session_billing_route)
    get_dominant_session_model_route = Op(accounting.get_dominant_session_model_route)
    usage_totals = Op(accounting.usage_totals)
    ensure_session = Op(accounting.ensure_session)

    # -- B metadata (docs/sessions-agent.md §3.3, §3.9, §3.10)
    update_system_prompt = Op(session_meta.update_system_prompt)
    update_session_model = Op(session_meta.update_session_model)
    update_session_meta = Op(session_meta.update_session_meta)
    patch_session_model_config = Op(session_meta.patch_session_model_config)
    get_session_model_config_value = Op(session_meta.get_session_model_config_value)
    update_session_runtime_lock = Op(session_meta.update_session_runtime_lock)
    set_session_yolo = Op(session_meta.set_session_yolo)
    session_yolo_enabled = static(session_meta.session_yolo_enabled)
    session_gateway_runtime = static(session_meta.session_gateway_runtime)
    update_session_tool_names = Op(session_meta.update_session_tool_names)
    update_session_cwd = Op(session_meta.update_session_cwd)
    publish_session_git_metadata = Op(session_meta.publish_session_git_metadata)
    backfill_repo_roots = Op(session_meta.backfill_repo_roots)
    distinct_session_cwds = Op(session_meta.distinct_session_cwds)
    set_expiry_finalized = Op(session_meta.set_expiry_finalized)
    backfill_null_session_profiles = Op(session_meta.backfill_null_session_profiles)

    # -- C activity (docs/sessions-agent.md §3.7)
    touch_session_activity = Op(activity.touch_session_activity)
    get_session_activity = Op(activity.get_session_activity)
    clear_session_activity_labels = Op(activity.clear_session_activity_labels)

    # -- E row helpers (docs/sessions-agent.md §3.6)
    set_latest_user_api_content = Op(row_helpers.set_latest_user_api_content)
    set_latest_matching_message_display_kind = Op(
        row_helpers.set_latest_matching_message_display_kind)
    get_message_role = Op(row_helpers.get_message_role)
    latest_message_row_id = Op(row_helpers.latest_message_row_id)
    latest_user_message_row_id = Op(row_helpers.latest_user_message_row_id)
    get_active_message_ids = Op(row_helpers.get_active_message_ids)
    get_active_message_watermark = Op(row_helpers.get_active_message_watermark)
    has_archived_messages = Op(row_helpers.has_archived_messages)
    has_platform_message_id = Op(row_helpers.has_platform_message_id)

    # -- F titles (docs/sessions-agent.md §3.10); upstream's class constants
    TITLE_SOURCE_DERIVED = titles.TITLE_SOURCE_DERIVED
    TITLE_SOURCE_LLM = titles.TITLE_SOURCE_LLM
    TITLE_SOURCE_USER = titles.TITLE_SOURCE_USER
    CANONICAL_BOT_CHAT_TITLE = titles.CANONICAL_BOT_CHAT_TITLE
    MAX_TITLE_LENGTH = encoding.MAX_TITLE_LENGTH
    set_auto_title_if_empty = Op(activity.set_auto_title_if_empty)
    get_session_title = Op(activity.get_session_title)
    get_session_title_source = Op(activity.get_session_title_source)
    set_session_title_source = Op(activity.set_session_title_source)

    # -- D projections (docs/sessions-agent.md §3.5)
    get_messages_as_conversation = Op(projections.get_messages_as_conversation)
    get_resume_conversations = Op(projections.get_resume_conversations)
    get_resume_message_count = Op(projections.get_resume_message_count)
    get_ancestor_display_prefix = Op(projections.get_ancestor_display_prefix)
    get_conversation_root = Op(projections.get_conversation_root)

    # -- G identity / reset (docs/sessions-agent.md §3.8)
    RECOVERABLE_END_REASONS = identity.RECOVERABLE_END_REASONS
    resolve_session_id = Op(identity.resolve_session_id)
    is_explicit_fork_child = Op(identity.is_explicit_fork_child)
    declared_scope_identity = Op(identity.declared_scope_identity)
    promote_to_session_reset = Op(identity.promote_to_session_reset)
    latest_conversation_boundary = Op(identity.latest_conversation_boundary)
    session_unread = static(identity.session_unread)

    # -- H listing (docs/sessions-agent.md §3.11; bulk delete: maintenance.delete_sessions)
    session_count_by_source = Op(bulk.session_count_by_source)
    session_lifecycle_statuses = Op(bulk.session_lifecycle_statuses)
    list_cron_job_runs = Op(bulk.list_cron_job_runs)
