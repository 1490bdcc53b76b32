"""Telemetry store: head schema, typed write / read API, store object and buffered writer."""

from .buffered import BufferedWriter, BufferFullError
from .reads import (
    cost_by_job, count_distinct_llm_models, daily_spend_series, delegation_join,
    efficiency_runs, estimated_price_share, get_endpoint_payload_cache,
    get_latest_pricing_snapshot, get_model_efficiency_cache, get_model_unavailable, get_run,
    get_subagent_edge, is_free_tier_transition, is_known_free_model, list_cron_job_ids,
    list_latest_pricing_snapshots, list_profiles, list_sender_ids, list_subagent_edges,
    llm_call_errors_for_session, models_needing_pricing_snapshot, recent_free_paid_transitions,
    recent_model_unavailable, recent_runs, spend_by_scope, stats_by_model, stats_by_provider,
    stats_summary, turn_summary, unattributed_child_cost, window_bounds,
)
from .store import TelemetryStore
from .writes import (
    backfill_known_free_models, end_run, put_endpoint_payload_cache, put_model_efficiency_cache,
    record_api_request_error, record_free_model, record_free_paid_transition, record_llm_call,
    record_llm_call_error, record_model_unavailable, record_pricing_snapshot,
    record_subagent_start, record_subagent_stop, record_tool_call, set_profile, set_sender,
    start_run, try_budget_alert,
)
