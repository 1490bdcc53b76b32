"""The agent turn API's public ``SessionStore`` methods, as one declarative delegation table
(spec sessions-ext-agent.md §1).

Why a table, and why a class: the facade must stay thin (``SessionStore`` ≤ 450 lines, a
test), and the agent turn API adds some seventy methods. Each is an operation function in a
module by concern (:mod:`.accounting`, :mod:`.session_meta`, :mod:`.activity`,
:mod:`.row_helpers`, :mod:`.projections`, :mod:`.identity`, :mod:`.bulk`) taking the store
first. :class:`AgentTurnAPI` is nothing but the table mapping a public name to that
function — no state, no ``__init__``, no logic of its own — and ``SessionStore`` inherits
it so the methods are the store's own to callers, ``help()`` and type checkers (a class
body is the one table form mypy reads; a ``setattr`` loop would hide the methods from it).
"""

from __future__ import annotations

import types
from typing import Any, Callable, Concatenate, Generic, ParamSpec, TypeVar, overload

from hermes_data.sessions.agent import accounting
from hermes_data.sessions.agent import activity
from hermes_data.sessions.agent import bulk
from hermes_data.sessions.agent import identity
from hermes_data.sessions.agent import projections
from hermes_data.sessions.agent import message_rows as row_helpers
from hermes_data.sessions.agent import session_meta

P = ParamSpec("P")
R = TypeVar("R")


class _Op(Generic[P, R]):
    """A method delegating to ``fn(store, *args, **kwargs)``."""

    def __init__(self, fn: Callable[Concatenate[Any, P], R]) -> None:
        self._fn = fn
        self.__doc__ = fn.__doc__

    @overload
    def __get__(self, obj: None, owner: type) -> "_Op[P, R]": ...

    @overload
    def __get__(self, obj: object, owner: type) -> Callable[P, R]: ...

    def __get__(self, obj: object | None, owner: type) -> Any:
        return self if obj is None else types.MethodType(self._fn, obj)


def _static(fn: Callable[P, R]) -> Callable[P, R]:
    return staticmethod(fn)


class AgentTurnAPI:
    """The delegation table (see the module docstring)."""

    # -- A accounting (§3.1–§3.4)
    update_token_counts = _Op(accounting.update_token_counts)
    queue_token_counts = _Op(accounting.queue_token_counts)
    flush_token_counts = _Op(accounting.flush_token_counts)
    record_auxiliary_usage = _Op(accounting.record_auxiliary_usage)
    update_session_billing_route = _Op(accounting.update_session_billing_route)
    get_dominant_session_model_route = _Op(accounting.get_dominant_session_model_route)
    usage_totals = _Op(accounting.usage_totals)
    ensure_session = _Op(accounting.ensure_session)

    # -- B metadata (§3.3, §3.9, §3.10)
    update_system_prompt = _Op(session_meta.update_system_prompt)
    update_session_model = _Op(session_meta.update_session_model)
    update_session_meta = _Op(session_meta.update_session_meta)
    patch_session_model_config = _Op(session_meta.patch_session_model_config)
    get_session_model_config_value = _Op(session_meta.get_session_model_config_value)
    update_session_runtime_lock = _Op(session_meta.update_session_runtime_lock)
    set_session_yolo = _Op(session_meta.set_session_yolo)
    session_yolo_enabled = _static(session_meta.session_yolo_enabled)
    session_gateway_runtime = _static(session_meta.session_gateway_runtime)
    update_session_tool_names = _Op(session_meta.update_session_tool_names)
    update_session_cwd = _Op(session_meta.update_session_cwd)
    publish_session_git_metadata = _Op(session_meta.publish_session_git_metadata)
    backfill_repo_roots = _Op(session_meta.backfill_repo_roots)
    distinct_session_cwds = _Op(session_meta.distinct_session_cwds)
    set_expiry_finalized = _Op(session_meta.set_expiry_finalized)
    backfill_null_session_profiles = _Op(session_meta.backfill_null_session_profiles)

    # -- C activity (§3.7)
    touch_session_activity = _Op(activity.touch_session_activity)
    get_session_activity = _Op(activity.get_session_activity)
    clear_session_activity_labels = _Op(activity.clear_session_activity_labels)

    # -- E row helpers (§3.6)
    set_latest_user_api_content = _Op(row_helpers.set_latest_user_api_content)
    set_latest_matching_message_display_kind = _Op(
        row_helpers.set_latest_matching_message_display_kind)
    get_message_role = _Op(row_helpers.get_message_role)
    latest_message_row_id = _Op(row_helpers.latest_message_row_id)
    latest_user_message_row_id = _Op(row_helpers.latest_user_message_row_id)
    get_active_message_ids = _Op(row_helpers.get_active_message_ids)
    get_active_message_watermark = _Op(row_helpers.get_active_message_watermark)
    has_archived_messages = _Op(row_helpers.has_archived_messages)
    has_platform_message_id = _Op(row_helpers.has_platform_message_id)

    # -- F titles (§3.10)
    set_auto_title_if_empty = _Op(activity.set_auto_title_if_empty)
    get_session_title = _Op(activity.get_session_title)
    get_session_title_source = _Op(activity.get_session_title_source)
    set_session_title_source = _Op(activity.set_session_title_source)

    # -- D projections (§3.5)
    get_messages_as_conversation = _Op(projections.get_messages_as_conversation)
    get_resume_conversations = _Op(projections.get_resume_conversations)
    get_resume_message_count = _Op(projections.get_resume_message_count)
    get_ancestor_display_prefix = _Op(projections.get_ancestor_display_prefix)
    get_conversation_root = _Op(projections.get_conversation_root)

    # -- G identity / reset (§3.8)
    RECOVERABLE_END_REASONS = identity.RECOVERABLE_END_REASONS
    resolve_session_id = _Op(identity.resolve_session_id)
    is_explicit_fork_child = _Op(identity.is_explicit_fork_child)
    declared_scope_identity = _Op(identity.declared_scope_identity)
    promote_to_session_reset = _Op(identity.promote_to_session_reset)
    latest_conversation_boundary = _Op(identity.latest_conversation_boundary)
    session_unread = _static(identity.session_unread)

    # -- H listing (§3.11; bulk delete: maintenance.delete_sessions)
    session_count_by_source = _Op(bulk.session_count_by_source)
    session_lifecycle_statuses = _Op(bulk.session_lifecycle_statuses)
    list_cron_job_runs = _Op(bulk.list_cron_job_runs)
