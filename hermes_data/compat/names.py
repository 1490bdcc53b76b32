"""The upstream surface the compatibility layer covers: every public name of the agent's
``hermes_state`` module (its ``SessionDB`` and ``AsyncSessionDB`` classes and its module
level), by the compat module that provides it (docs/compat.md).

This table is the authority ``tests/compat/test_compat_names.py`` checks the package against:
each method name is defined by the listed module's class, each module name is importable
from :mod:`hermes_data.compat`, unless :data:`NOT_PROVIDED` names it with the reason.
"""

from __future__ import annotations

#: ``SessionDB``'s public methods (175), by the compat module whose class defines them.
SESSION_DB_METHODS: dict[str, tuple[str, ...]] = {
    "core_methods": (
        "assert_export_safe", "assert_resume_safe", "close", "create_session", "end_session",
        "get_compression_chain", "get_compression_lineage", "get_compression_tip", "get_messages",
        "get_meta", "get_next_title_in_lineage", "get_session", "get_session_by_title",
        "list_meta_prefix", "list_recent_sessions_bounded", "message_count", "reopen_session",
        "resolve_resume_session_id", "resolve_session_by_title", "sanitize_title",
        "session_count", "session_count_ge", "set_auto_title", "set_meta", "set_session_archived",
        "set_session_hidden", "set_session_pinned", "set_session_read", "set_session_title",
    ),
    "agent_methods": (
        "backfill_null_session_profiles", "backfill_repo_roots", "clear_session_activity_labels",
        "declared_scope_identity", "ensure_session", "flush_token_counts",
        "get_active_message_ids", "get_active_message_watermark", "get_ancestor_display_prefix",
        "get_conversation_root", "get_dominant_session_model_route", "get_message_role",
        "get_messages_as_conversation", "get_resume_conversations", "get_resume_message_count",
        "get_session_activity", "get_session_model_config_value", "get_session_title",
        "get_session_title_source", "has_archived_messages", "has_platform_message_id",
        "is_explicit_fork_child", "latest_conversation_boundary", "latest_message_row_id",
        "latest_user_message_row_id", "patch_session_model_config", "promote_to_session_reset",
        "publish_session_git_metadata", "queue_token_counts", "record_auxiliary_usage",
        "resolve_session_id", "session_count_by_source", "session_gateway_runtime",
        "session_lifecycle_statuses", "session_unread", "session_yolo_enabled",
        "set_auto_title_if_empty", "set_expiry_finalized",
        "set_latest_matching_message_display_kind", "set_latest_user_api_content",
        "set_session_title_source", "set_session_yolo", "touch_session_activity",
        "update_session_billing_route", "update_session_cwd", "update_session_meta",
        "update_session_model", "update_session_runtime_lock", "update_session_tool_names",
        "update_system_prompt", "update_token_counts", "usage_totals",
    ),
    "maintenance_methods": (
        "archive_sessions", "count_open_prune_matches", "count_prune_matches", "delete_session",
        "delete_sessions", "get_session_delete_targets", "list_prune_candidates",
        "logical_size_bytes", "maybe_auto_prune_and_vacuum", "prune_sessions",
        "purge_stale_tool_call_markers", "vacuum",
    ),
    "coordination_methods": (
        "acquire_session_turn_lease", "append_message", "append_messages_batch",
        "archive_and_compact", "archive_stale_sessions", "clear_compression_failure_cooldown",
        "clear_messages", "count_empty_sessions", "delete_empty_sessions",
        "delete_session_if_empty", "finalize_orphaned_compression_sessions",
        "find_live_compression_child", "get_compression_failure_cooldown",
        "get_compression_failure_cooldown_row", "get_compression_fallback_streak",
        "get_compression_ineffective_count", "get_compression_lock_holder",
        "get_compression_recovery_deadline", "maybe_auto_archive", "prune_empty_ghost_sessions",
        "publish_compression_child", "record_compression_failure_cooldown",
        "refresh_compression_lock", "refresh_session_turn_lease", "release_compression_lock",
        "release_session_turn_lease", "reopen_orphaned_compression_session", "replace_messages",
        "restore_compression_failure_cooldown_row", "restore_rewound", "rewind_to_message",
        "set_compression_fallback_streak", "set_compression_ineffective_count",
        "set_compression_recovery_deadline", "sweep_orphaned_sessions",
        "try_acquire_compression_lock", "try_acquire_session_turn_lease",
        "unarchive_recoverable_session",
    ),
    "gateway_methods": (
        "adopt_orphaned_gateway_session", "apply_telegram_topic_migration", "bind_telegram_topic",
        "claim_handoff", "clear_backend_heartbeat", "complete_handoff",
        "delete_gateway_routing_entries", "delete_telegram_topic_binding",
        "disable_telegram_topic_mode", "enable_telegram_topic_mode", "fail_handoff",
        "find_latest_gateway_session_for_peer", "find_orphaned_gateway_sessions",
        "find_session_by_origin", "get_handoff_state", "get_telegram_topic_binding",
        "get_telegram_topic_binding_by_session", "increment_hygiene_failure_streak",
        "is_telegram_session_linked_to_topic", "is_telegram_topic_mode_enabled",
        "list_backend_heartbeats", "list_gateway_sessions", "list_never_active_keyed_sessions",
        "list_pending_handoffs", "list_telegram_topic_bindings_for_chat",
        "list_unlinked_telegram_sessions_for_user", "load_gateway_routing_entries",
        "prune_never_active_keyed_sessions", "prune_stale_heartbeats",
        "reclaim_stale_running_handoffs", "record_gateway_session_peer",
        "register_backend_heartbeat", "replace_gateway_routing_entries", "request_handoff",
        "reset_hygiene_failure_streak", "retag_kanban_worker_sessions",
        "save_gateway_routing_entry",
    ),
    "ui_methods": (
        "find_pr_url_messages", "get_message_reactions", "get_messages_around",
        "list_sessions_rich", "search_sessions", "set_message_reaction", "take_unseen_reactions",
    ),
}

#: ``SessionDB``'s public class attributes (constants callers read off the class).
SESSION_DB_ATTRIBUTES: tuple[str, ...] = (
    "CANONICAL_BOT_CHAT_TITLE", "MAX_TITLE_LENGTH", "REACTIONS_METADATA_KEY",
    "RECOVERABLE_END_REASONS", "TITLE_SOURCE_DERIVED", "TITLE_SOURCE_LLM", "TITLE_SOURCE_USER",
)

#: Public names of the module itself: classes, exceptions, functions and constants.
MODULE_NAMES: tuple[str, ...] = (
    # classes and exceptions
    "SessionDB", "AsyncSessionDB", "SessionResumeTooLargeError", "SessionExportTooLargeError",
    "WalUnsupportedError", "LiveConnectionError", "CompressionSessionClosedError",
    "CompressionSessionBusyError", "SessionCompressionInProgressError",
    "SessionTurnLeaseLostError", "StateDbReplacedError", "DeletedWalGenerationError",
    "StateDbCorruptError",
    # functions
    "apply_database_pragmas", "apply_durability_barriers", "apply_wal_with_fallback",
    "classify_persistence_error", "classify_session_status", "collect_state_db_stats",
    "count_db_holders", "divert_session_transcript_jsonl", "format_session_db_unavailable",
    "fts5_cjk_so_path", "get_last_init_error", "is_disk_full_error", "is_malformed_db_error",
    "is_malformed_schema_error", "is_sqlite_wal_reset_vulnerable", "is_transient_sqlite_error",
    "is_zeroed_state_db", "iter_deleted_sqlite_sidecar_holders", "load_fts5_cjk_extension",
    "offline_file_access", "preflight_db_writability", "quarantine_cross_process_lock",
    "quarantine_zeroed_state_db", "refuse_deleted_wal_generation", "repair_state_db_schema",
    "resolve_journal_mode", "resolve_synchronous_level", "resolved_max_export_messages",
    "resolved_max_resume_messages", "sqlite_source_id", "workspace_key",
    # the shared-handle registry it re-exports
    "get_shared_session_db", "release_shared_session_db", "close_shared_session_dbs",
    "release_or_close",
    # names it re-exports from its common module for callers
    "is_automatic_end_reason", "is_advisory_lock_contention",
    # constants
    "AUTO_VACUUM_MIN_FREELIST_RATIO", "DEFAULT_DB_PATH", "MAX_SAFE_EXPORT_MESSAGES",
    "MAX_SAFE_RESUME_MESSAGES", "PERSISTENCE_ERROR_CAUSES", "SESSION_STATUS_COMPLETE",
    "SESSION_STATUS_EMPTY", "SESSION_STATUS_ERROR", "SESSION_STATUS_INTERRUPTED",
    "FTS_STORAGE_VERSION", "FTS_STALE_KEY", "FTS_CJK_STALE_KEY", "FTS_REBUILD_DEFERRAL_KEY",
    "MAX_FTS5_QUERY_CHARS", "SCHEMA_VERSION",
)

#: Upstream names the layer deliberately does not provide, each with the reason (a caller
#: that imports one gets an ImportError naming it, and docs/compat.md says what replaces it).
NOT_PROVIDED: dict[str, str] = {
    "SCHEMA_VERSION": "upstream's hand-rolled schema ledger number; the store's schema is its "
                      "Alembic revision (hermes-data status / check)",
    "FTS_STORAGE_VERSION": "an internal marker of upstream's FTS layout; the store owns its "
                           "index layout (SessionStore.optimize_fts_storage)",
    "FTS_STALE_KEY": "an internal state_meta key of upstream's FTS recovery; the store owns it "
                     "(SessionStore.retry_deferred_fts_recovery, fts_available)",
    "FTS_CJK_STALE_KEY": "an internal state_meta key of upstream's CJK index; the store owns "
                         "it (SessionStore.fts_available)",
    "FTS_REBUILD_DEFERRAL_KEY": "an internal state_meta key of upstream's deferred FTS rebuild; "
                                "the store owns it (SessionStore.retry_deferred_fts_recovery)",
    "MAX_FTS5_QUERY_CHARS": "an internal bound of upstream's FTS5 query builder; the store's "
                            "search caps its own input (SessionStore.search_messages)",
    "apply_database_pragmas": "takes a raw sqlite3 connection, which the layer never hands "
                              "out; the store applies the configured pragmas on connect "
                              "(hermes_data.sessions.storage.opening.configured_pragmas)",
    "apply_durability_barriers": "takes a raw sqlite3 connection; the store's connect policy "
                                 "applies the synchronous level (and fullfsync on macOS)",
    "fts5_cjk_so_path": "locates upstream's cjk_unicode61 extension, which hermes-data never "
                        "loads: CJK search is the store's bigram index "
                        "(docs/sessions-storage.md)",
    "load_fts5_cjk_extension": "loads upstream's cjk_unicode61 extension into a raw connection; "
                               "CJK search is the store's bigram index",
    "collect_state_db_stats": "opens a second raw descriptor on a live state.db (closing it "
                              "drops this process's POSIX locks) and reports upstream's FTS "
                              "layout; use hermes-data status / doctor, "
                              "SessionStore.fts_rebuild_status() and logical_size_bytes()",
    "count_db_holders": "a count that includes this process; the store's scan "
                        "(hermes_data.sessions.storage.filesafety.holder_scan) lists the "
                        "other processes holding the file and its sidecars, and fails closed",
    "resolve_journal_mode": "upstream reads config.yaml and defaults to wal; hermes-data's "
                            "journal mode is a policy of the SQLite version and the settings "
                            "(hermes_data.engine.SqliteSettings.configured_mode, "
                            "docs/sqlite-policy.md)",
}
