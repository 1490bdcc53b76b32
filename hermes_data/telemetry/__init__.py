"""Telemetry store: head schema, typed write / read API, store object and buffered writer.

Names are re-exported lazily (importing the package does not load the query modules, so
``hermes-data upgrade`` on a settled file stays fast).
"""

from __future__ import annotations


from hermes_data.lazy import lazy_exports

_EXPORTS = {
    "BufferFullError": "buffered",
    "BufferedWriter": "buffered",
    "TelemetryStore": "store",
    "backfill_known_free_models": "writes",
    "cost_by_job": "reads",
    "cron_job_id_from_session_id": "values",
    "count_distinct_llm_models": "reads",
    "daily_spend_series": "reads",
    "delegation_join": "reads",
    "efficiency_runs": "reads",
    "end_run": "writes",
    "estimated_price_share": "reads",
    "get_endpoint_payload_cache": "reads",
    "get_latest_pricing_snapshot": "reads",
    "get_model_efficiency_cache": "reads",
    "get_model_unavailable": "reads",
    "get_run": "reads",
    "get_subagent_edge": "reads",
    "is_free_tier_transition": "reads",
    "is_known_free_model": "reads",
    "list_cron_job_ids": "reads",
    "list_latest_pricing_snapshots": "reads",
    "list_profiles": "reads",
    "list_sender_ids": "reads",
    "list_subagent_edges": "reads",
    "llm_call_errors_for_session": "reads",
    "models_needing_pricing_snapshot": "reads",
    "put_endpoint_payload_cache": "writes",
    "put_model_efficiency_cache": "writes",
    "recent_free_paid_transitions": "reads",
    "recent_model_unavailable": "reads",
    "recent_runs": "reads",
    "record_api_request_error": "writes",
    "record_free_model": "writes",
    "record_free_paid_transition": "writes",
    "record_llm_call": "writes",
    "record_llm_call_error": "writes",
    "record_model_unavailable": "writes",
    "record_pricing_snapshot": "writes",
    "record_subagent_start": "writes",
    "record_subagent_stop": "writes",
    "record_tool_call": "writes",
    "set_profile": "writes",
    "set_sender": "writes",
    "spend_by_scope": "reads",
    "start_run": "writes",
    "stats_by_model": "reads",
    "stats_by_provider": "reads",
    "stats_summary": "reads",
    "try_budget_alert": "writes",
    "turn_summary": "reads",
    "unattributed_child_cost": "reads",
    "window_bounds": "reads",
}

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_exports(__name__, _EXPORTS, globals())  # hermes_data/lazy.py


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
