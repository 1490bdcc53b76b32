"""``SessionDB``'s upstream-shaped methods of the agent area (the names are listed in
:data:`hermes_data.compat.names.SESSION_DB_METHODS`); each calls the typed store and adapts
only names, arguments and return shapes (docs/compat.md "Agent turn").

Upstream's writers of this area return ``None`` where the typed store reports whether a row
changed; the adapters drop that answer.
"""

from __future__ import annotations

from typing import Any, Mapping

from hermes_data.compat.base import CompatBase
from hermes_data.compat.shapes import as_dict
from hermes_data.sessions.store import SessionStore


class AgentMethods(CompatBase):
    """The agent methods of :class:`~hermes_data.compat.SessionDB`."""

    # -- accounting --------------------------------------------------------------------

    def update_token_counts(self, session_id: str, input_tokens: int = 0,
                            output_tokens: int = 0, model: str | None = None,
                            cache_read_tokens: int = 0, cache_write_tokens: int = 0,
                            reasoning_tokens: int = 0, estimated_cost_usd: float | None = None,
                            actual_cost_usd: float | None = None,
                            cost_status: str | None = None, cost_source: str | None = None,
                            pricing_version: str | None = None,
                            billing_provider: str | None = None,
                            billing_base_url: str | None = None,
                            billing_mode: str | None = None, api_call_count: int = 0,
                            absolute: bool = False) -> None:
        """Upstream adds (or with ``absolute`` sets) one call's tokens and cost on the session
        row and its per-model usage row; calls ``SessionStore.update_token_counts``."""
        self.store.update_token_counts(
            session_id, input_tokens=input_tokens, output_tokens=output_tokens, model=model,
            cache_read_tokens=cache_read_tokens, cache_write_tokens=cache_write_tokens,
            reasoning_tokens=reasoning_tokens, estimated_cost_usd=estimated_cost_usd,
            actual_cost_usd=actual_cost_usd, cost_status=cost_status, cost_source=cost_source,
            pricing_version=pricing_version, billing_provider=billing_provider,
            billing_base_url=billing_base_url, billing_mode=billing_mode,
            api_call_count=api_call_count, absolute=absolute)

    def queue_token_counts(self, session_id: str, **kwargs: Any) -> None:
        """Upstream queues a token delta for the background writer; calls
        ``SessionStore.queue_token_counts``."""
        self.store.queue_token_counts(session_id, **kwargs)

    def flush_token_counts(self, timeout: float = 5.0) -> bool:
        """Upstream waits until queued token deltas are applied (False on timeout); calls
        ``SessionStore.flush_token_counts``."""
        return self.store.flush_token_counts(timeout)

    def record_auxiliary_usage(self, session_id: str, task: str, *, model: str | None = None,
                               billing_provider: str | None = None,
                               billing_base_url: str | None = None, input_tokens: int = 0,
                               output_tokens: int = 0, cache_read_tokens: int = 0,
                               cache_write_tokens: int = 0, reasoning_tokens: int = 0,
                               estimated_cost_usd: float | None = None,
                               api_call_count: int = 1) -> None:
        """Upstream records an auxiliary call's usage per (model, provider, task) without
        touching the session row; calls ``SessionStore.record_auxiliary_usage``."""
        self.store.record_auxiliary_usage(
            session_id, task, model=model, billing_provider=billing_provider,
            billing_base_url=billing_base_url, input_tokens=input_tokens,
            output_tokens=output_tokens, cache_read_tokens=cache_read_tokens,
            cache_write_tokens=cache_write_tokens, reasoning_tokens=reasoning_tokens,
            estimated_cost_usd=estimated_cost_usd, api_call_count=api_call_count)

    def update_session_billing_route(self, session_id: str, *, provider: str, base_url: str,
                                     billing_mode: str | None = None) -> None:
        """Upstream overwrites the session's billing provider/base URL (and drops the cached
        system prompt); calls ``SessionStore.update_session_billing_route``."""
        self.store.update_session_billing_route(session_id, provider=provider,
                                                base_url=base_url, billing_mode=billing_mode)

    def get_dominant_session_model_route(self, session_id: str) -> dict[str, Any] | None:
        """Upstream returns the main-loop route that served most calls as a dict, or None;
        calls ``SessionStore.get_dominant_session_model_route``."""
        return as_dict(self.store.get_dominant_session_model_route(session_id))

    def usage_totals(self, *, min_message_count: int = 1,
                     include_archived: bool = False) -> dict[str, float]:
        """Upstream sums tokens and spend over root sessions as ``{"tokens", "cost_usd"}``;
        calls ``SessionStore.usage_totals``."""
        return as_dict(self.store.usage_totals(  # type: ignore[return-value]
            min_message_count=min_message_count, include_archived=include_archived))

    def ensure_session(self, session_id: str, source: str = "unknown",
                       model: str | None = None, **kwargs: Any) -> str:
        """Upstream inserts the session row if it is missing and returns its id; calls
        ``SessionStore.ensure_session``."""
        return self.store.ensure_session(session_id, source, model, **kwargs)

    # -- session metadata --------------------------------------------------------------

    def update_system_prompt(self, session_id: str, system_prompt: str | None) -> None:
        """Upstream stores the assembled system prompt snapshot; calls
        ``SessionStore.update_system_prompt``."""
        self.store.update_system_prompt(session_id, system_prompt)

    def update_session_model(self, session_id: str, model: str,
                             provider: str | None = None) -> None:
        """Upstream records a mid-session model switch (and its provider); calls
        ``SessionStore.update_session_model``."""
        self.store.update_session_model(session_id, model, provider)

    def update_session_meta(self, session_id: str, model_config_json: str,
                            model: str | None = None) -> None:
        """Upstream replaces ``model_config`` (and the model when given); calls
        ``SessionStore.update_session_meta``."""
        self.store.update_session_meta(session_id, model_config_json, model)

    def patch_session_model_config(self, session_id: str, patch: dict[str, Any]) -> None:
        """Upstream merges ``patch`` into ``model_config`` (None removes a key); calls
        ``SessionStore.patch_session_model_config``."""
        self.store.patch_session_model_config(session_id, patch)

    def get_session_model_config_value(self, session_id: str, key: str,
                                       default: Any = None) -> Any:
        """Upstream reads one key of the session's ``model_config`` (``default`` when
        absent); calls ``SessionStore.get_session_model_config_value``."""
        return self.store.get_session_model_config_value(session_id, key, default)

    def update_session_runtime_lock(self, session_id: str, *, model: str | None = None,
                                    provider: str | None = None,
                                    model_options: dict[str, Any] | None = None,
                                    route_source: str | None = None,
                                    confirmed: bool = False) -> None:
        """Upstream merges a ``browser_model_lock`` into ``model_config``; calls
        ``SessionStore.update_session_runtime_lock``."""
        self.store.update_session_runtime_lock(
            session_id, model=model, provider=provider, model_options=model_options,
            route_source=route_source, confirmed=confirmed)

    def set_session_yolo(self, session_id: str, enabled: bool) -> None:
        """Upstream persists the per-session YOLO flag into ``model_config``; calls
        ``SessionStore.set_session_yolo``."""
        self.store.set_session_yolo(session_id, enabled)

    @staticmethod
    def session_yolo_enabled(session_meta: Mapping[str, Any] | None) -> bool:
        """Upstream reads the YOLO flag off a session dict; calls
        ``SessionStore.session_yolo_enabled``."""
        return SessionStore.session_yolo_enabled(session_meta)

    @staticmethod
    def session_gateway_runtime(session_meta: Mapping[str, Any] | None) -> dict[str, Any]:
        """Upstream reads the persisted runtime route off a session dict; calls
        ``SessionStore.session_gateway_runtime``."""
        return SessionStore.session_gateway_runtime(session_meta)

    def update_session_tool_names(self, session_id: str, tool_names: list[str] | None) -> None:
        """Upstream stores the session's tool-name order (None clears it); calls
        ``SessionStore.update_session_tool_names``."""
        self.store.update_session_tool_names(session_id, tool_names)

    def update_session_cwd(self, session_id: str, cwd: str, git_branch: str | None = None,
                           git_repo_root: str | None = None,
                           replace_git_meta: bool = False) -> int | None:
        """Upstream records the cwd and returns the claimed Git metadata generation (None for
        a missing row); calls ``SessionStore.update_session_cwd``."""
        return self.store.update_session_cwd(session_id, cwd, git_branch, git_repo_root,
                                             replace_git_meta)

    def publish_session_git_metadata(self, session_id: str, cwd: str, generation: int,
                                     git_branch: str | None = None,
                                     git_repo_root: str | None = None) -> bool:
        """Upstream publishes Git enrichment only while its cwd claim is current; calls
        ``SessionStore.publish_session_git_metadata``."""
        return self.store.publish_session_git_metadata(session_id, cwd, generation,
                                                       git_branch, git_repo_root)

    def backfill_repo_roots(self, cwd_to_root: dict[str, str]) -> None:
        """Upstream fills ``git_repo_root`` for sessions of each cwd that has none; calls
        ``SessionStore.backfill_repo_roots``."""
        self.store.backfill_repo_roots(cwd_to_root)

    def set_expiry_finalized(self, session_id: str, finalized: bool = True) -> None:
        """Upstream sets the gateway's expiry-finalized flag; calls
        ``SessionStore.set_expiry_finalized``."""
        self.store.set_expiry_finalized(session_id, finalized)

    def backfill_null_session_profiles(self, profile_name: str) -> int:
        """Upstream stamps ``profile_name`` on rows that have none and returns how many; calls
        ``SessionStore.backfill_null_session_profiles``."""
        return self.store.backfill_null_session_profiles(profile_name)

    # -- activity ----------------------------------------------------------------------

    def touch_session_activity(self, session_id: str, ts: float | None = None, *,
                               description: str | None = None,
                               provenance: Any = None) -> None:
        """Upstream moves the activity heartbeat forward with its label (never backwards);
        calls ``SessionStore.touch_session_activity``."""
        self.store.touch_session_activity(session_id, ts, description=description,
                                          provenance=provenance)

    def get_session_activity(self, session_id: str) -> dict[str, Any] | None:
        """Upstream returns the session's activity snapshot as a dict, or None; calls
        ``SessionStore.get_session_activity``."""
        return as_dict(self.store.get_session_activity(session_id))

    def clear_session_activity_labels(self, session_id: str) -> None:
        """Upstream clears the activity description/provenance, keeping the time; calls
        ``SessionStore.clear_session_activity_labels``."""
        self.store.clear_session_activity_labels(session_id)

    # -- message rows ------------------------------------------------------------------

    def set_latest_user_api_content(self, session_id: str, content: Any,
                                    api_content: str) -> int:
        """Upstream sets ``api_content`` on the newest active user row when its content
        matches (rows changed: 0 or 1); calls ``SessionStore.set_latest_user_api_content``."""
        return self.store.set_latest_user_api_content(session_id, content, api_content)

    def set_latest_matching_message_display_kind(
            self, session_id: str, *, role: str, content: str, display_kind: str,
            display_metadata: dict[str, Any] | None = None) -> bool:
        """Upstream stamps ``display_kind``/metadata on the newest matching active row; calls
        ``SessionStore.set_latest_matching_message_display_kind``."""
        return self.store.set_latest_matching_message_display_kind(
            session_id, role=role, content=content, display_kind=display_kind,
            display_metadata=display_metadata)

    def get_message_role(self, session_id: str, row_id: int) -> str | None:
        """Upstream returns the role of an active row of the session, or None; calls
        ``SessionStore.get_message_role``."""
        return self.store.get_message_role(session_id, row_id)

    def latest_message_row_id(self, session_id: str, *, role: str = "user", offset: int = 0,
                              require_text: bool = True) -> int | None:
        """Upstream returns the id of the newest (``offset`` back) active row of ``role``;
        calls ``SessionStore.latest_message_row_id``."""
        return self.store.latest_message_row_id(session_id, role=role, offset=offset,
                                                require_text=require_text)

    def latest_user_message_row_id(self, session_id: str) -> int | None:
        """Upstream returns the id of the newest active user row; calls
        ``SessionStore.latest_user_message_row_id``."""
        return self.store.latest_user_message_row_id(session_id)

    def get_active_message_ids(self, session_id: str) -> list[int]:
        """Upstream returns the ids of the session's active rows in order; calls
        ``SessionStore.get_active_message_ids``."""
        return self.store.get_active_message_ids(session_id)

    def get_active_message_watermark(self, session_id: str) -> int:
        """Upstream returns the highest active row id (0 when none); calls
        ``SessionStore.get_active_message_watermark``."""
        return self.store.get_active_message_watermark(session_id)

    def has_archived_messages(self, session_id: str) -> bool:
        """Upstream answers whether the session has soft-archived (inactive) rows; calls
        ``SessionStore.has_archived_messages``."""
        return self.store.has_archived_messages(session_id)

    def has_platform_message_id(self, session_id: str, platform_message_id: str) -> bool:
        """Upstream answers whether a row with that platform message id exists; calls
        ``SessionStore.has_platform_message_id``."""
        return self.store.has_platform_message_id(session_id, platform_message_id)

    # -- titles ------------------------------------------------------------------------

    def set_auto_title_if_empty(self, session_id: str, title: str) -> bool:
        """Upstream writes an ``llm`` title unless a better one holds the row; calls
        ``SessionStore.set_auto_title_if_empty``."""
        return self.store.set_auto_title_if_empty(session_id, title)

    def get_session_title(self, session_id: str) -> str | None:
        """Upstream returns the session's title, or None; calls
        ``SessionStore.get_session_title``."""
        return self.store.get_session_title(session_id)

    def get_session_title_source(self, session_id: str) -> str | None:
        """Upstream returns the title's provenance (None when untitled); calls
        ``SessionStore.get_session_title_source``."""
        return self.store.get_session_title_source(session_id)

    def set_session_title_source(self, session_id: str, source: str) -> bool:
        """Upstream overwrites a title's provenance (False when untitled); calls
        ``SessionStore.set_session_title_source``."""
        return self.store.set_session_title_source(session_id, source)

    # -- conversation projections ------------------------------------------------------

    def get_messages_as_conversation(self, session_id: str, include_ancestors: bool = False,
                                     include_inactive: bool = False,
                                     repair_alternation: bool = False,
                                     include_row_ids: bool = False,
                                     include_compacted: bool = False) -> list[dict[str, Any]]:
        """Upstream loads the transcript as OpenAI-style message dicts; calls
        ``SessionStore.get_messages_as_conversation``."""
        return self.store.get_messages_as_conversation(
            session_id, include_ancestors=include_ancestors, include_inactive=include_inactive,
            repair_alternation=repair_alternation, include_row_ids=include_row_ids,
            include_compacted=include_compacted)

    def get_resume_conversations(
            self, session_id: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Upstream returns ``(model_history, display_history)`` for a resume; calls
        ``SessionStore.get_resume_conversations``."""
        return self.store.get_resume_conversations(session_id)

    def get_resume_message_count(self, session_id: str, *, tip_only: bool = False) -> int:
        """Upstream counts the rows a resume would load; calls
        ``SessionStore.get_resume_message_count``."""
        return self.store.get_resume_message_count(session_id, tip_only=tip_only)

    def get_ancestor_display_prefix(self, session_id: str) -> list[dict[str, Any]]:
        """Upstream returns the compression ancestors' display messages only; calls
        ``SessionStore.get_ancestor_display_prefix``."""
        return self.store.get_ancestor_display_prefix(session_id)

    def get_conversation_root(self, session_id: str) -> str:
        """Upstream returns the root id of the session's lineage (the id itself without a
        parent); calls ``SessionStore.get_conversation_root``."""
        return self.store.get_conversation_root(session_id)

    # -- identity and reset ------------------------------------------------------------

    def resolve_session_id(self, session_id_or_prefix: str) -> str | None:
        """Upstream resolves an exact id or a unique prefix to the full id, else None; calls
        ``SessionStore.resolve_session_id``."""
        return self.store.resolve_session_id(session_id_or_prefix)

    def is_explicit_fork_child(self, session_id: str) -> bool:
        """Upstream answers whether the session is a branch, delegate or tool child; calls
        ``SessionStore.is_explicit_fork_child``."""
        return self.store.is_explicit_fork_child(session_id)

    def declared_scope_identity(self, session_id: str) -> tuple[bool, str]:
        """Upstream returns ``(is_fork, source)`` in one read (``(False, "")`` when
        missing); calls ``SessionStore.declared_scope_identity``."""
        return tuple(self.store.declared_scope_identity(session_id))  # type: ignore[return-value]

    def promote_to_session_reset(self, session_id: str, reason: str = "session_reset") -> bool:
        """Upstream ends a live or recoverably-ended session as a reset boundary; calls
        ``SessionStore.promote_to_session_reset``."""
        return self.store.promote_to_session_reset(session_id, reason)

    def latest_conversation_boundary(self, session_key: str, source: str) -> int | None:
        """Upstream returns how many reset boundaries the peer has crossed (None: never);
        calls ``SessionStore.latest_conversation_boundary``."""
        return self.store.latest_conversation_boundary(session_key, source)

    @staticmethod
    def session_unread(session_row: Mapping[str, Any]) -> bool:
        """Upstream derives "unread" from a session dict's read watermark and activity; calls
        ``SessionStore.session_unread``."""
        return SessionStore.session_unread(session_row)

    # -- listing -----------------------------------------------------------------------

    def session_count_by_source(self, *, include_archived: bool = False,
                                archived_only: bool = False,
                                exclude_children: bool = False) -> dict[str, int]:
        """Upstream counts sessions per source in one aggregate; calls
        ``SessionStore.session_count_by_source``."""
        return self.store.session_count_by_source(include_archived=include_archived,
                                                  archived_only=archived_only,
                                                  exclude_children=exclude_children)

    def session_lifecycle_statuses(self, session_ids: list[str]) -> dict[str, str]:
        """Upstream classifies each session from its last row (``complete`` /
        ``interrupted`` / ``error`` / ``empty``); calls
        ``SessionStore.session_lifecycle_statuses``."""
        return dict(self.store.session_lifecycle_statuses(session_ids or []))
