"""``hermes-data stats``: what the agent costs, from the telemetry read API, without SQL.

Summary of the window, the most expensive models and providers, the spend of one budget scope
and the daily spend drawn as a plain-text bar chart. Every figure comes from
:mod:`hermes_data.telemetry` (``stats_summary``, ``stats_by_model``, ``stats_by_provider``,
``spend_by_scope``, ``daily_spend_series``); ``--json`` prints them as they are, keyed by store.
The store is only read: a missing or not-yet-upgraded file is refused, never created.
"""

from __future__ import annotations

import argparse
from contextlib import contextmanager
from dataclasses import asdict
from datetime import datetime, timedelta, timezone
from typing import Any, Iterator

from hermes_data.cli.options import COUNT_MAX, DAYS_MAX, HOURS_MAX, bounded
from hermes_data.cli.output import emit, emit_json
from hermes_data.errors import ConfigurationError

SCOPES = ("global", "cron_job", "sender", "profile")
BAR_WIDTH = 40


def register(subparsers) -> None:
    """Add ``stats`` to the ``hermes-data`` subcommands."""
    p = subparsers.add_parser("stats", help="telemetry summary: runs, tokens, cost, top models and "
                                            "providers, spend of a scope, daily spend chart")
    p.add_argument("--url", help="telemetry store URL or SQLite path "
                                 "(default: $HERMES_HOME/telemetry/telemetry.db)")
    p.add_argument("--hours", type=bounded(float, 0, HOURS_MAX, above=True, unit="hours"), default=24.0, metavar="N",
                   help="window: runs and calls of the last N hours (default: 24)")
    p.add_argument("--scope", nargs="+", metavar=("SCOPE", "ID"), default=["global"],
                   help="budget scope whose spend over the window to show: global, or "
                        "cron_job|sender|profile followed by its id (default: global)")
    p.add_argument("--days", type=bounded(int, 1, DAYS_MAX, unit="days"), default=7, metavar="N",
                   help="UTC days in the daily spend chart, of the same scope (default: 7)")
    p.add_argument("--top", type=bounded(int, 1, COUNT_MAX), default=5, metavar="N",
                   help="how many models and providers to list (default: 5)")
    p.add_argument("--json", action="store_true",
                   help="machine-readable output: {\"telemetry\": {…}}")
    p.set_defaults(func=cmd_stats, store="telemetry")


def _scope(values: list[str]) -> tuple[str, str | None]:
    scope, *rest = values
    if scope not in SCOPES:
        raise ConfigurationError(f"--scope {scope!r}: expected one of {', '.join(SCOPES)}")
    if scope == "global":
        if rest:
            raise ConfigurationError("--scope global takes no id")
        return scope, None
    if len(rest) != 1 or not rest[0]:
        raise ConfigurationError(f"--scope {scope} needs exactly one id (e.g. --scope {scope} ID)")
    return scope, rest[0]


@contextmanager
def _open(url) -> Iterator[Any]:
    """A read-only connection to the telemetry store at ``url``, refused unless it exists
    and is at head (docs/cli.md "Reading a store without writing it": nothing is created,
    switched or written, no ``-wal``/``-shm`` is left behind)."""
    from hermes_data.migrate import runner as migrate
    from hermes_data.config import resolve_url, sqlite_path

    resolved = resolve_url("telemetry", url)
    path = sqlite_path(resolved)
    if path is not None and not path.is_file():
        raise ConfigurationError(f"{path}: no telemetry store here (run: hermes-data upgrade "
                                 "--store telemetry, or pass --url)")
    st = migrate.status("telemetry", resolved)
    if st.legacy or st.revision != st.head:
        where = str(path) if path is not None else st.url
        raise ConfigurationError(
            f"{where}: the telemetry store is at {'a legacy ledger' if st.legacy else st.revision}, "
            f"not {st.head} (run: hermes-data upgrade --store telemetry)")
    with migrate.looking("telemetry", resolved) as conn:
        yield conn


def collect(store, hours: float, scope: str, scope_id: str | None, days: int, top: int,
            now: datetime | None = None) -> dict:
    """Every figure ``stats`` prints, from the read API, as plain data."""
    from hermes_data.telemetry import (daily_spend_series, spend_by_scope, stats_by_model,
                            stats_by_provider, stats_summary)

    now = now or datetime.now(timezone.utc)
    summary = stats_summary(store, hours, now=now, top_n=top)
    models = sorted(stats_by_model(store, hours, now=now), key=lambda m: (-m.cost_usd, -m.total_calls))
    providers = stats_by_provider(store, hours, now=now)
    spend = spend_by_scope(store, scope, scope_id, now - timedelta(hours=hours))
    daily = daily_spend_series(store, scope, scope_id, days, now=now)
    return {
        "now": now.isoformat(),
        "window_hours": hours,
        "summary": asdict(summary),
        "models": [asdict(m) for m in models[:top]],
        "providers": [asdict(p) for p in providers[:top]],
        "scope": {"scope": scope, "id": scope_id, **asdict(spend)},
        "daily_spend": [asdict(d) for d in daily],
    }


def _usd(x: float) -> str:
    if x == 0:
        return "$0"
    return f"${x:,.4f}" if x < 1 else f"${x:,.2f}"


def bar_chart(days: list[dict], width: int = BAR_WIDTH) -> list[str]:
    """One line per day: the date, a bar proportional to the day's spend, the amount."""
    peak = max((d["cost_usd"] for d in days), default=0.0)
    lines = []
    for d in days:
        cells = round(width * d["cost_usd"] / peak) if peak > 0 else 0
        if d["cost_usd"] > 0 and cells == 0:
            cells = 1  # a day with any spend is visible
        lines.append(f"  {d['day']} {'#' * cells:<{width}} {_usd(d['cost_usd'])}")
    return lines


def cmd_stats(args: argparse.Namespace) -> int:
    """Print the telemetry summary (``--json``: the same figures as data)."""
    scope, scope_id = _scope(args.scope)
    with _open(args.url) as conn:
        data = collect(conn, args.hours, scope, scope_id, args.days, args.top)
    if args.json:
        emit_json({"telemetry": data})
        return 0
    s = data["summary"]
    emit(f"telemetry, last {args.hours:g} h ({s['since']} .. {data['now']})")
    emit(f"  runs {s['total_runs']:,} ({s['ok_runs']:,} ok, {s['failed_runs']:,} failed); "
         f"LLM calls {s['api_calls']:,}; tool calls {s['tool_calls']:,}")
    emit(f"  tokens {s['tokens_in']:,} in / {s['tokens_out']:,} out; cost {_usd(s['cost_usd'])}")
    if s["avg_latency_ms"] is not None:
        emit(f"  average call latency {s['avg_latency_ms']:,.0f} ms")
    if s["estimated_llm_calls"]:
        emit(f"  estimated-price calls {s['estimated_llm_calls']:,}")
    emit("top models (by cost):" if data["models"] else "top models: none in the window")
    for m in data["models"]:
        emit(f"  {m['provider']}/{m['model']}: {m['total_calls']:,} calls, {_usd(m['cost_usd'])}"
             + (f" ({m['estimated_pct']:.0%} estimated)" if m["estimated_pct"] else ""))
    emit("top providers (by cost):" if data["providers"] else "top providers: none in the window")
    for p in data["providers"]:
        emit(f"  {p['provider']}: {p['total_calls']:,} calls, {_usd(p['cost_usd'])}")
    sc = data["scope"]
    label = sc["scope"] + (f" {sc['id']}" if sc["id"] else "")
    emit(f"spend of {label}, last {args.hours:g} h: {_usd(sc['spent_usd'])} over "
         f"{sc['total_calls']:,} calls ({sc['estimated_pct']:.0%} estimated)")
    emit(f"daily spend of {label} (UTC, last {args.days} days):")
    for line in bar_chart(data["daily_spend"]):
        emit(line)
    return 0
