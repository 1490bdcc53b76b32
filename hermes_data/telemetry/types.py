"""Typed rows returned (and accepted) by the telemetry query API.

Every read returns one of these frozen dataclasses (or a tuple / list of them); nothing in
the public API hands out ``dict[str, Any]``. Field names follow the upstream dict keys so a
caller can port ``row["cost_usd"]`` to ``row.cost_usd`` mechanically; ``dataclasses.asdict``
gives the upstream dict back where a JSON payload needs it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypedDict

#: Budget / attribution scopes understood by the spend reads.
Scope = Literal["global", "cron_job", "sender", "profile", "session"]

from hermes_data.telemetry.values import TERMINAL_STATUSES  # noqa: F401  (public here; defined on the write path)


@dataclass(frozen=True, slots=True)
class RunRow:
    """One ``runs`` row (every column at ledger v18)."""

    session_id: str
    platform: str | None
    cron_job_id: str | None
    model: str | None
    provider: str | None
    started_at: str
    ended_at: str | None
    status: str | None
    tokens_in: int
    tokens_out: int
    cost_usd: float
    duration_ms: int | None
    api_calls: int
    tool_calls: int
    parent_session_id: str | None
    estimated_llm_calls: int
    sender_id: str | None
    cache_read_tokens: int
    cache_write_tokens: int
    provider_assumed_calls: int
    moa_calls: int
    profile: str | None


@dataclass(frozen=True, slots=True)
class ToolUsage:
    """One entry of :attr:`StatsSummary.top_tools`."""

    tool_name: str
    calls: int
    failures: int
    avg_ms: float | None


@dataclass(frozen=True, slots=True)
class StatsSummary:
    """Headline numbers of ``/stats`` for one window."""

    total_runs: int
    ok_runs: int
    failed_runs: int
    tokens_in: int
    tokens_out: int
    cost_usd: float
    avg_duration_ms: float | None
    tool_calls: int
    estimated_llm_calls: int
    moa_calls: int
    api_calls: int
    avg_latency_ms: float | None
    top_tools: tuple[ToolUsage, ...]
    since: str | None
    until: str | None
    window_hours: float | None
    date_from: str | None
    date_to: str | None
    parent_links_available: bool = False


@dataclass(frozen=True, slots=True)
class JobCost:
    """Per cron job roll-up of root runs (no subagent subtree), :func:`cost_by_job`."""

    cron_job_id: str
    runs: int
    ok_runs: int
    failed_runs: int
    tokens_in: int
    tokens_out: int
    cost_usd: float
    avg_duration_ms: float | None
    last_run: str | None


@dataclass(frozen=True, slots=True)
class ProviderStats:
    """Per provider call counts and cost, :func:`stats_by_provider`."""

    provider: str
    total_calls: int
    real_calls: int
    estimated_calls: int
    provider_assumed_calls: int
    cost_usd: float
    estimated_pct: float
    provider_assumed_pct: float


@dataclass(frozen=True, slots=True)
class ModelStats:
    """Per (provider, model) call counts and cost, :func:`stats_by_model`."""

    provider: str
    model: str
    total_calls: int
    real_calls: int
    estimated_calls: int
    provider_assumed_calls: int
    cost_usd: float
    estimated_pct: float
    provider_assumed_pct: float


@dataclass(frozen=True, slots=True)
class EfficiencyRun:
    """A finished run with its efficiency score, :func:`efficiency_runs`."""

    session_id: str
    cron_job_id: str
    status: str
    tokens_in: int
    tokens_out: int
    api_calls: int
    cost_usd: float
    efficiency_score: float
    started_at: str


@dataclass(frozen=True, slots=True)
class UnattributedChildCost:
    """Cost of child sessions whose parent has no ``runs`` row (a diagnostic)."""

    unattributed_usd: float
    edges: int


@dataclass(frozen=True, slots=True)
class ScopeSpend:
    """Spend of one budget scope since a cutoff, :func:`spend_by_scope`."""

    spent_usd: float
    estimated_calls: int
    total_calls: int
    estimated_pct: float


@dataclass(frozen=True, slots=True)
class DailySpend:
    """One UTC day of :func:`daily_spend_series` (zero-filled)."""

    day: str
    cost_usd: float


@dataclass(frozen=True, slots=True)
class TurnAggregate:
    """One turn of a session (``GROUP BY turn_id``), :func:`turn_summary`."""

    turn_id: str | None
    calls: int
    cost_usd: float
    tokens: int


@dataclass(frozen=True, slots=True)
class DelegationLink:
    """A delegation edge joined to an LLM call of the parent's turn."""

    child_session_id: str
    parent_session_id: str
    parent_turn_id: str
    llm_call_id: int


@dataclass(frozen=True, slots=True)
class DelegationJoin:
    """Result of the delegation-tree join with its precondition made explicit.

    ``total_edges`` counts every edge; ``joinable_edges`` only those with
    ``parent_turn_id > ''`` (NULL and ``''`` can never join). ``joined_edges`` is the number
    of distinct joinable edges that matched at least one call. Judge health on
    ``joined_edges == joinable_edges``, never on a bare count over every edge.
    """

    total_edges: int
    joinable_edges: int
    joined_edges: int
    links: tuple[DelegationLink, ...]

    @property
    def healthy(self) -> bool:
        """True when every joinable edge found its parent turn (vacuous with no such edge)."""
        return self.joined_edges == self.joinable_edges


@dataclass(frozen=True, slots=True)
class SubagentEdge:
    """One ``subagent_edges`` row."""

    child_session_id: str
    parent_session_id: str
    parent_turn_id: str | None
    parent_subagent_id: str | None
    child_subagent_id: str | None
    child_role: str | None
    started_at: str
    stopped_at: str | None
    child_status: str | None


@dataclass(frozen=True, slots=True)
class FreePaidTransition:
    """One ``free_paid_transitions`` row."""

    model: str
    provider: str
    detected_at: str
    session_id: str | None
    first_paid_cost_usd: float
    first_free_seen_at: str | None


@dataclass(frozen=True, slots=True)
class ModelUnavailable:
    """One ``model_unavailable_alerts`` row."""

    model: str
    provider: str
    error_code: int
    error_message: str | None
    first_seen_at: str
    last_seen_at: str
    occurrences: int


@dataclass(frozen=True, slots=True)
class LlmCallError:
    """One ``llm_call_errors`` row (the v18 failure ledger)."""

    id: int
    ts: str
    session_id: str
    turn_id: str | None
    task_id: str | None
    api_request_id: str | None
    api_call_count: int | None
    model: str
    provider: str
    status_code: int | None
    error_type: str
    error_message: str
    reason: str
    retryable: int | None
    retry_count: int | None
    max_retries: int | None
    duration_ms: int | None


@dataclass(frozen=True, slots=True)
class ApiErrorOutcome:
    """What :func:`record_api_request_error` wrote for one ``api_request_error`` firing."""

    error_id: int | None
    """id of the ledger row, or None if the ledger write failed (logged)."""
    alert: ModelUnavailable | None
    """the model-unavailable row after the upsert when the 404 alert path ran, else None."""
    model: str
    provider: str
    status_code: int | None
    retryable: bool | None
    duration_ms: int | None


@dataclass(frozen=True, slots=True)
class PricingSnapshot:
    """One ``pricing_snapshots`` row."""

    id: int
    provider: str
    model: str
    input_cost_per_million: float | None
    output_cost_per_million: float | None
    cache_read_cost_per_million: float | None
    cache_write_cost_per_million: float | None
    request_cost: float | None
    source: str | None
    source_url: str | None
    pricing_version: str | None
    fetched_at: str | None
    captured_at: str
    base_url: str | None
    api_mode: str | None
    resolved_model: str | None


class PricingEntry(TypedDict, total=False):
    """The tariff Hermes core resolves for a (provider, model); input of
    :func:`record_pricing_snapshot`. Every key is optional."""

    input_cost_per_million: float | None
    output_cost_per_million: float | None
    cache_read_cost_per_million: float | None
    cache_write_cost_per_million: float | None
    request_cost: float | None
    source: str | None
    source_url: str | None
    pricing_version: str | None
    fetched_at: str | None


@dataclass(frozen=True, slots=True)
class CachedPayload:
    """A dashboard cache entry (either cache table)."""

    payload_json: str
    rows_count: int
    built_at: str
