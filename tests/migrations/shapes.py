"""Literal ledger shapes for the historical-level tests.

Written out by hand from spec telemetry §2/§3.2 — deliberately *not* derived from the
metadata, so a mistake in either one shows up as a difference.
"""

RUNS_V1 = ["session_id", "platform", "cron_job_id", "model", "provider", "started_at", "ended_at",
           "status", "tokens_in", "tokens_out", "cost_usd", "duration_ms", "api_calls", "tool_calls"]
LLM_V1 = ["id", "session_id", "ts", "model", "provider", "tokens_in", "tokens_out", "cost_usd",
          "latency_ms"]
TOOL_V1 = ["id", "session_id", "ts", "tool_name", "ok", "latency_ms"]

EXPECTED = {
    "v01": {
        "tables": {"schema_version": ["version", "applied_at"], "runs": RUNS_V1,
                   "llm_calls": LLM_V1, "tool_calls": TOOL_V1},
        "indexes": {"idx_runs_started", "idx_runs_platform", "idx_runs_cron_job",
                    "idx_llm_session", "idx_llm_ts", "idx_tool_session", "idx_tool_name"},
    },
    "v07": {
        "tables": {
            "schema_version": ["version", "applied_at"],
            "runs": RUNS_V1 + ["parent_session_id", "estimated_llm_calls", "sender_id",
                               "cache_read_tokens", "cache_write_tokens", "provider_assumed_calls"],
            "llm_calls": LLM_V1 + ["cache_read_tokens", "cache_write_tokens", "reasoning_tokens",
                                   "estimated", "provider_assumed"],
            "tool_calls": TOOL_V1,
            "budget_alerts": ["id", "scope", "scope_id", "window", "period_key", "level",
                              "fired_at", "spent_usd", "limit_usd"],
            "known_free_models": ["model", "provider", "first_seen_at"],
            "free_paid_transitions": ["model", "provider", "detected_at", "session_id",
                                      "first_paid_cost_usd", "first_free_seen_at"],
        },
        "indexes": {"idx_runs_started", "idx_runs_platform", "idx_runs_cron_job",
                    "idx_llm_session", "idx_llm_ts", "idx_tool_session", "idx_tool_name",
                    "idx_runs_sender", "idx_free_paid_detected"},
    },
}
_V10_RUNS = EXPECTED["v07"]["tables"]["runs"] + ["moa_calls"]
_V10_LLM = EXPECTED["v07"]["tables"]["llm_calls"] + ["moa_preset"]
EXPECTED["v11"] = {
    "tables": {
        **EXPECTED["v07"]["tables"],
        "runs": _V10_RUNS,
        "llm_calls": _V10_LLM,
        "model_unavailable_alerts": ["model", "provider", "error_code", "error_message",
                                     "first_seen_at", "last_seen_at", "occurrences"],
        "subagent_edges": ["child_session_id", "parent_session_id", "parent_turn_id",
                           "parent_subagent_id", "child_subagent_id", "child_role",
                           "started_at", "stopped_at", "child_status"],
    },
    "indexes": EXPECTED["v07"]["indexes"] | {"idx_model_unavailable_last_seen",
                                             "idx_subagent_edges_parent"},
}
EXPECTED["v16"] = {
    "tables": {
        **EXPECTED["v11"]["tables"],
        "runs": _V10_RUNS + ["profile"],
        "pricing_snapshots": ["id", "provider", "model", "input_cost_per_million",
                              "output_cost_per_million", "cache_read_cost_per_million",
                              "cache_write_cost_per_million", "request_cost", "source",
                              "source_url", "pricing_version", "fetched_at", "captured_at",
                              "base_url", "api_mode", "resolved_model"],
        "endpoint_payload_cache": ["cache_name", "cache_key", "payload_json", "rows_count",
                                   "built_at"],
        "model_efficiency_cache": ["cache_key", "window_hours", "include_deleted", "limit_n",
                                   "payload_json", "rows_count", "built_at"],
    },
    "indexes": EXPECTED["v11"]["indexes"] | {"idx_runs_profile", "idx_pricing_snapshots_model",
                                             "idx_endpoint_payload_cache_name",
                                             "idx_me_cache_window"},
}
EXPECTED["v18"] = {
    "tables": {
        **EXPECTED["v16"]["tables"],
        "llm_calls": _V10_LLM + ["turn_id", "task_id", "api_request_id"],
        "tool_calls": TOOL_V1 + ["turn_id", "tool_call_id"],
        "llm_call_errors": ["id", "ts", "session_id", "turn_id", "task_id", "api_request_id",
                            "api_call_count", "model", "provider", "status_code", "error_type",
                            "error_message", "reason", "retryable", "retry_count",
                            "max_retries", "duration_ms"],
    },
    "indexes": EXPECTED["v16"]["indexes"] | {"idx_llm_turn", "idx_tool_turn",
                                             "idx_llm_call_errors_session"},
}
