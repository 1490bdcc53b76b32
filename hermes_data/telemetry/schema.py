"""Head shape of the telemetry store (ledger v18): the single schema authority.

Columns are listed in the order the ledger adds them (ALTER appends at the end), so a fresh
``alembic upgrade head`` and ``metadata.create_all()`` give the same ordered ``table_info``.
Facts carried over from the legacy files (docs/telemetry.md §2.0):

* ``runs.session_id``, ``subagent_edges.child_session_id`` and
  ``model_efficiency_cache.cache_key`` are *nullable* TEXT primary keys, as upstream declared them.
* ``id`` columns of the append-only tables are ``INTEGER PRIMARY KEY AUTOINCREMENT``
  (``sqlite_autoincrement=True``), so ids are never reused after deletes.
* ``budget_alerts`` has an unnamed UNIQUE constraint (SQLite names its index
  ``sqlite_autoindex_budget_alerts_1``).
"""

from __future__ import annotations

import sqlalchemy as sa

from hermes_data.types import INTEGER, REAL, TEXT

metadata = sa.MetaData()
#: The Alembic revision this metadata is the shape of (the last ledger level's; a test keeps
#: it equal to the newest script). A SQLite store opens only at this revision.
HEAD_REVISION = "v18"
#: Alembic's bookkeeping table, read to learn a file's revision (not part of the shape).
alembic_version = sa.table("alembic_version", sa.column("version_num"))

#: The ledger version this metadata describes.
HEAD_LEDGER_VERSION = 18


def _zero() -> sa.TextClause:
    return sa.text("0")


schema_version = sa.Table(
    "schema_version", metadata,
    sa.Column("version", INTEGER, primary_key=True, autoincrement=False),
    sa.Column("applied_at", TEXT, nullable=False),
)

runs = sa.Table(
    "runs", metadata,
    sa.Column("session_id", TEXT, primary_key=True, nullable=True),
    sa.Column("platform", TEXT),
    sa.Column("cron_job_id", TEXT),
    sa.Column("model", TEXT),
    sa.Column("provider", TEXT),
    sa.Column("started_at", TEXT, nullable=False),
    sa.Column("ended_at", TEXT),
    sa.Column("status", TEXT, server_default="running"),
    sa.Column("tokens_in", INTEGER, server_default=_zero()),
    sa.Column("tokens_out", INTEGER, server_default=_zero()),
    sa.Column("cost_usd", REAL, server_default=sa.text("0.0")),
    sa.Column("duration_ms", INTEGER),
    sa.Column("api_calls", INTEGER, server_default=_zero()),
    sa.Column("tool_calls", INTEGER, server_default=_zero()),
    # v2
    sa.Column("parent_session_id", TEXT),
    sa.Column("estimated_llm_calls", INTEGER, server_default=_zero()),
    # v3
    sa.Column("sender_id", TEXT),
    # v4
    sa.Column("cache_read_tokens", INTEGER, server_default=_zero()),
    sa.Column("cache_write_tokens", INTEGER, server_default=_zero()),
    # v7
    sa.Column("provider_assumed_calls", INTEGER, server_default=_zero()),
    # v10
    sa.Column("moa_calls", INTEGER, server_default=_zero()),
    # v12
    sa.Column("profile", TEXT),
)
sa.Index("idx_runs_started", runs.c.started_at)
sa.Index("idx_runs_platform", runs.c.platform)
sa.Index("idx_runs_cron_job", runs.c.cron_job_id)
sa.Index("idx_runs_sender", runs.c.sender_id)
sa.Index("idx_runs_profile", runs.c.profile)

llm_calls = sa.Table(
    "llm_calls", metadata,
    sa.Column("id", INTEGER, primary_key=True),
    sa.Column("session_id", TEXT, nullable=False),
    sa.Column("ts", TEXT, nullable=False),
    sa.Column("model", TEXT),
    sa.Column("provider", TEXT),
    sa.Column("tokens_in", INTEGER, server_default=_zero()),
    sa.Column("tokens_out", INTEGER, server_default=_zero()),
    sa.Column("cost_usd", REAL, server_default=sa.text("0.0")),
    sa.Column("latency_ms", INTEGER),
    # v2
    sa.Column("cache_read_tokens", INTEGER, server_default=_zero()),
    sa.Column("cache_write_tokens", INTEGER, server_default=_zero()),
    sa.Column("reasoning_tokens", INTEGER, server_default=_zero()),
    sa.Column("estimated", INTEGER, server_default=_zero()),
    # v7
    sa.Column("provider_assumed", INTEGER, server_default=_zero()),
    # v10
    sa.Column("moa_preset", TEXT),
    # v18
    sa.Column("turn_id", TEXT),
    sa.Column("task_id", TEXT),
    sa.Column("api_request_id", TEXT),
    sqlite_autoincrement=True,
)
sa.Index("idx_llm_session", llm_calls.c.session_id)
sa.Index("idx_llm_ts", llm_calls.c.ts)
sa.Index("idx_llm_turn", llm_calls.c.turn_id)

tool_calls = sa.Table(
    "tool_calls", metadata,
    sa.Column("id", INTEGER, primary_key=True),
    sa.Column("session_id", TEXT, nullable=False),
    sa.Column("ts", TEXT, nullable=False),
    sa.Column("tool_name", TEXT, nullable=False),
    sa.Column("ok", INTEGER, nullable=False, server_default=sa.text("1")),
    sa.Column("latency_ms", INTEGER),
    # v18
    sa.Column("turn_id", TEXT),
    sa.Column("tool_call_id", TEXT),
    sqlite_autoincrement=True,
)
sa.Index("idx_tool_session", tool_calls.c.session_id)
sa.Index("idx_tool_name", tool_calls.c.tool_name)
sa.Index("idx_tool_turn", tool_calls.c.turn_id)

budget_alerts = sa.Table(
    "budget_alerts", metadata,
    sa.Column("id", INTEGER, primary_key=True),
    sa.Column("scope", TEXT, nullable=False),
    sa.Column("scope_id", TEXT, nullable=False, server_default=""),
    sa.Column("window", TEXT, nullable=False),
    sa.Column("period_key", TEXT, nullable=False),
    sa.Column("level", TEXT, nullable=False),
    sa.Column("fired_at", TEXT, nullable=False),
    sa.Column("spent_usd", REAL),
    sa.Column("limit_usd", REAL),
    sa.UniqueConstraint("scope", "scope_id", "window", "period_key", "level"),
    sqlite_autoincrement=True,
)

known_free_models = sa.Table(
    "known_free_models", metadata,
    sa.Column("model", TEXT, nullable=False),
    sa.Column("provider", TEXT, nullable=False, server_default=""),
    sa.Column("first_seen_at", TEXT, nullable=False),
    sa.PrimaryKeyConstraint("model", "provider"),
)

free_paid_transitions = sa.Table(
    "free_paid_transitions", metadata,
    sa.Column("model", TEXT, nullable=False),
    sa.Column("provider", TEXT, nullable=False, server_default=""),
    sa.Column("detected_at", TEXT, nullable=False),
    sa.Column("session_id", TEXT),
    sa.Column("first_paid_cost_usd", REAL, nullable=False, server_default=sa.text("0.0")),
    sa.Column("first_free_seen_at", TEXT),
    sa.PrimaryKeyConstraint("model", "provider"),
)
sa.Index("idx_free_paid_detected", free_paid_transitions.c.detected_at)

model_unavailable_alerts = sa.Table(
    "model_unavailable_alerts", metadata,
    sa.Column("model", TEXT, nullable=False),
    sa.Column("provider", TEXT, nullable=False, server_default=""),
    sa.Column("error_code", INTEGER, nullable=False),
    sa.Column("error_message", TEXT),
    sa.Column("first_seen_at", TEXT, nullable=False),
    sa.Column("last_seen_at", TEXT, nullable=False),
    sa.Column("occurrences", INTEGER, nullable=False, server_default=sa.text("1")),
    sa.PrimaryKeyConstraint("model", "provider"),
)
sa.Index("idx_model_unavailable_last_seen", model_unavailable_alerts.c.last_seen_at)

subagent_edges = sa.Table(
    "subagent_edges", metadata,
    sa.Column("child_session_id", TEXT, primary_key=True, nullable=True),
    sa.Column("parent_session_id", TEXT, nullable=False),
    sa.Column("parent_turn_id", TEXT),
    sa.Column("parent_subagent_id", TEXT),
    sa.Column("child_subagent_id", TEXT),
    sa.Column("child_role", TEXT),
    sa.Column("started_at", TEXT, nullable=False),
    sa.Column("stopped_at", TEXT),
    sa.Column("child_status", TEXT),
)
sa.Index("idx_subagent_edges_parent", subagent_edges.c.parent_session_id)

pricing_snapshots = sa.Table(
    "pricing_snapshots", metadata,
    sa.Column("id", INTEGER, primary_key=True),
    sa.Column("provider", TEXT, nullable=False),
    sa.Column("model", TEXT, nullable=False),
    sa.Column("input_cost_per_million", REAL),
    sa.Column("output_cost_per_million", REAL),
    sa.Column("cache_read_cost_per_million", REAL),
    sa.Column("cache_write_cost_per_million", REAL),
    sa.Column("request_cost", REAL),
    sa.Column("source", TEXT),
    sa.Column("source_url", TEXT),
    sa.Column("pricing_version", TEXT),
    sa.Column("fetched_at", TEXT),
    sa.Column("captured_at", TEXT, nullable=False),
    sa.Column("base_url", TEXT),
    sa.Column("api_mode", TEXT),
    # v15
    sa.Column("resolved_model", TEXT),
    sqlite_autoincrement=True,
)
sa.Index("idx_pricing_snapshots_model", pricing_snapshots.c.provider,
         pricing_snapshots.c.model, pricing_snapshots.c.id)

endpoint_payload_cache = sa.Table(
    "endpoint_payload_cache", metadata,
    sa.Column("cache_name", TEXT, nullable=False),
    sa.Column("cache_key", TEXT, nullable=False),
    sa.Column("payload_json", TEXT, nullable=False),
    sa.Column("rows_count", INTEGER, nullable=False),
    sa.Column("built_at", TEXT, nullable=False),
    sa.PrimaryKeyConstraint("cache_name", "cache_key"),
)
sa.Index("idx_endpoint_payload_cache_name", endpoint_payload_cache.c.cache_name,
         endpoint_payload_cache.c.built_at)

model_efficiency_cache = sa.Table(
    "model_efficiency_cache", metadata,
    sa.Column("cache_key", TEXT, primary_key=True, nullable=True),
    sa.Column("window_hours", INTEGER, nullable=False),
    sa.Column("include_deleted", INTEGER, nullable=False),
    sa.Column("limit_n", INTEGER, nullable=False),
    sa.Column("payload_json", TEXT, nullable=False),
    sa.Column("rows_count", INTEGER, nullable=False),
    sa.Column("built_at", TEXT, nullable=False),
)
sa.Index("idx_me_cache_window", model_efficiency_cache.c.window_hours,
         model_efficiency_cache.c.include_deleted)

llm_call_errors = sa.Table(
    "llm_call_errors", metadata,
    sa.Column("id", INTEGER, primary_key=True),
    sa.Column("ts", TEXT, nullable=False),
    sa.Column("session_id", TEXT, nullable=False),
    sa.Column("turn_id", TEXT),
    sa.Column("task_id", TEXT),
    sa.Column("api_request_id", TEXT),
    sa.Column("api_call_count", INTEGER),
    sa.Column("model", TEXT, nullable=False, server_default=""),
    sa.Column("provider", TEXT, nullable=False, server_default=""),
    sa.Column("status_code", INTEGER),
    sa.Column("error_type", TEXT, nullable=False, server_default=""),
    sa.Column("error_message", TEXT, nullable=False, server_default=""),
    sa.Column("reason", TEXT, nullable=False, server_default=""),
    sa.Column("retryable", INTEGER),
    sa.Column("retry_count", INTEGER),
    sa.Column("max_retries", INTEGER),
    sa.Column("duration_ms", INTEGER),
    sqlite_autoincrement=True,
)
sa.Index("idx_llm_call_errors_session", llm_call_errors.c.session_id)

#: Tables in ledger order (the order the head creates them).
TABLE_NAMES = tuple(metadata.tables)
