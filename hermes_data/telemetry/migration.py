"""How the telemetry store migrates: adoption of legacy files and add-only reconciliation.

A legacy ``telemetry.db`` has the plugin's ``schema_version`` ledger but no
``alembic_version``. Its version rows prove nothing about its shape (the v7 wedge wrote a
row without its column; branch builds reused numbers for other changes), so adoption:

1. identifies the file (``schema_version`` + ``runs``/``llm_calls``/``tool_calls``), refusing
   anything else unchanged;
2. finds the highest ledger level whose every table, column (name and declared type) and
   index is really present — together with all lower levels — and stamps that revision;
3. writes the ``schema_version`` rows missing for levels at or below it (their change is
   present);
4. lets the remaining revisions run; they are idempotent (add-if-missing, IF NOT EXISTS),
   so half-present later levels are completed rather than failing;
5. reconciles add-only towards the head metadata and verifies the result: foreign objects
   are reported and left alone; anything that cannot be healed without dropping, renaming
   or retyping aborts the whole upgrade (the transaction rolls back).

The level table below is legacy history (docs/telemetry.md §3.2), frozen like the revisions.
"""

from __future__ import annotations

import logging
import sqlite3
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from hermes_data.errors import AdoptionError, NotAHermesDatabaseError
from hermes_data.migrate.spec import StoreSpec, UpgradeReport
from hermes_data.clock import utcnow_iso
from hermes_data.engine import TELEMETRY_BUSY_TIMEOUT_MS
from hermes_data.migrate.shape import Shape, diff_shapes, live_shape
from hermes_data.telemetry import sql as sql_fragments
from hermes_data.telemetry.schema import metadata

log = logging.getLogger("hermes_data.telemetry.migration")

IDENTITY_TABLES = ("schema_version", "runs", "llm_calls", "tool_calls")

_T, _I, _R = "TEXT", "INTEGER", "REAL"

# What each ledger level adds: tables (with their original columns), added columns, indexes.
_RUNS_V1 = {"session_id": _T, "platform": _T, "cron_job_id": _T, "model": _T, "provider": _T,
            "started_at": _T, "ended_at": _T, "status": _T, "tokens_in": _I, "tokens_out": _I,
            "cost_usd": _R, "duration_ms": _I, "api_calls": _I, "tool_calls": _I}
_LLM_V1 = {"id": _I, "session_id": _T, "ts": _T, "model": _T, "provider": _T, "tokens_in": _I,
           "tokens_out": _I, "cost_usd": _R, "latency_ms": _I}
_TOOL_V1 = {"id": _I, "session_id": _T, "ts": _T, "tool_name": _T, "ok": _I, "latency_ms": _I}

LEVELS: dict[int, dict] = {
    1: {"tables": {"schema_version": {"version": _I, "applied_at": _T}, "runs": _RUNS_V1,
                   "llm_calls": _LLM_V1, "tool_calls": _TOOL_V1},
        "indexes": {"idx_runs_started": ("runs", ("started_at",)),
                    "idx_runs_platform": ("runs", ("platform",)),
                    "idx_runs_cron_job": ("runs", ("cron_job_id",)),
                    "idx_llm_session": ("llm_calls", ("session_id",)),
                    "idx_llm_ts": ("llm_calls", ("ts",)),
                    "idx_tool_session": ("tool_calls", ("session_id",)),
                    "idx_tool_name": ("tool_calls", ("tool_name",))}},
    2: {"columns": {"llm_calls": {"cache_read_tokens": _I, "cache_write_tokens": _I,
                                  "reasoning_tokens": _I, "estimated": _I},
                    "runs": {"parent_session_id": _T, "estimated_llm_calls": _I}}},
    3: {"columns": {"runs": {"sender_id": _T}},
        "tables": {"budget_alerts": {"id": _I, "scope": _T, "scope_id": _T, "window": _T,
                                     "period_key": _T, "level": _T, "fired_at": _T,
                                     "spent_usd": _R, "limit_usd": _R}},
        "indexes": {"idx_runs_sender": ("runs", ("sender_id",))}},
    4: {"columns": {"runs": {"cache_read_tokens": _I, "cache_write_tokens": _I}}},
    5: {"tables": {"known_free_models": {"model": _T, "provider": _T, "first_seen_at": _T}}},
    6: {"tables": {"free_paid_transitions": {"model": _T, "provider": _T, "detected_at": _T,
                                             "session_id": _T, "first_paid_cost_usd": _R,
                                             "first_free_seen_at": _T}},
        "indexes": {"idx_free_paid_detected": ("free_paid_transitions", ("detected_at",))}},
    7: {"columns": {"llm_calls": {"provider_assumed": _I}, "runs": {"provider_assumed_calls": _I}}},
    8: {"tables": {"model_unavailable_alerts": {"model": _T, "provider": _T, "error_code": _I,
                                                "error_message": _T, "first_seen_at": _T,
                                                "last_seen_at": _T, "occurrences": _I}},
        "indexes": {"idx_model_unavailable_last_seen": ("model_unavailable_alerts", ("last_seen_at",))}},
    9: {},  # repair of 2/3/4/7: complete exactly when those levels are
    10: {"columns": {"llm_calls": {"moa_preset": _T}, "runs": {"moa_calls": _I}}},
    11: {"tables": {"subagent_edges": {"child_session_id": _T, "parent_session_id": _T,
                                       "parent_turn_id": _T, "parent_subagent_id": _T,
                                       "child_subagent_id": _T, "child_role": _T,
                                       "started_at": _T, "stopped_at": _T, "child_status": _T}},
         "indexes": {"idx_subagent_edges_parent": ("subagent_edges", ("parent_session_id",))}},
    12: {"columns": {"runs": {"profile": _T}},
         "indexes": {"idx_runs_profile": ("runs", ("profile",))}},
    13: {},  # repair of 11
    14: {"tables": {"pricing_snapshots": {
        "id": _I, "provider": _T, "model": _T, "input_cost_per_million": _R,
        "output_cost_per_million": _R, "cache_read_cost_per_million": _R,
        "cache_write_cost_per_million": _R, "request_cost": _R, "source": _T, "source_url": _T,
        "pricing_version": _T, "fetched_at": _T, "captured_at": _T, "base_url": _T,
        "api_mode": _T}},
         "indexes": {"idx_pricing_snapshots_model": ("pricing_snapshots", ("provider", "model", "id"))}},
    15: {"columns": {"pricing_snapshots": {"resolved_model": _T}}},
    16: {"tables": {"endpoint_payload_cache": {"cache_name": _T, "cache_key": _T,
                                               "payload_json": _T, "rows_count": _I,
                                               "built_at": _T},
                    "model_efficiency_cache": {"cache_key": _T, "window_hours": _I,
                                               "include_deleted": _I, "limit_n": _I,
                                               "payload_json": _T, "rows_count": _I,
                                               "built_at": _T}},
         "indexes": {"idx_endpoint_payload_cache_name": ("endpoint_payload_cache", ("cache_name", "built_at")),
                     "idx_me_cache_window": ("model_efficiency_cache", ("window_hours", "include_deleted"))}},
    17: {"ledger_row": True},  # data-only repair: present only when the plugin recorded it
    18: {"columns": {"llm_calls": {"turn_id": _T, "task_id": _T, "api_request_id": _T},
                     "tool_calls": {"turn_id": _T, "tool_call_id": _T}},
         "tables": {"llm_call_errors": {
             "id": _I, "ts": _T, "session_id": _T, "turn_id": _T, "task_id": _T,
             "api_request_id": _T, "api_call_count": _I, "model": _T, "provider": _T,
             "status_code": _I, "error_type": _T, "error_message": _T, "reason": _T,
             "retryable": _I, "retry_count": _I, "max_retries": _I, "duration_ms": _I}},
         "indexes": {"idx_llm_call_errors_session": ("llm_call_errors", ("session_id",)),
                     "idx_llm_turn": ("llm_calls", ("turn_id",)),
                     "idx_tool_turn": ("tool_calls", ("turn_id",))}},
}
HEAD_LEVEL = max(LEVELS)


def revision_for_level(level: int) -> str:
    """Alembic revision id of ledger level ``level`` (``v01`` … ``v18``)."""
    return f"v{level:02d}"


def _level_gaps(level: int, shape: Shape, ledger: set[int]) -> list[str]:
    spec = LEVELS[level]
    gaps: list[str] = []
    for table, cols in spec.get("tables", {}).items():
        have = {c.name: c.type for c in shape.tables.get(table, ())}
        if table not in shape.tables:
            gaps.append(f"table {table}")
            continue
        gaps += [f"column {table}.{n}" for n, t in cols.items() if have.get(n) != t]
    for table, cols in spec.get("columns", {}).items():
        have = {c.name: c.type for c in shape.tables.get(table, ())}
        gaps += [f"column {table}.{n}" for n, t in cols.items() if have.get(n) != t]
    for name, (table, cols) in spec.get("indexes", {}).items():
        ix = shape.indexes.get(name)
        if ix is None or (ix.table, ix.columns) != (table, cols):
            gaps.append(f"index {name}")
    if spec.get("ledger_row") and level not in ledger:
        gaps.append(f"ledger row {level}")
    return gaps


def complete_level(shape: Shape, ledger: set[int]) -> tuple[int, list[str]]:
    """Highest level N such that levels 1..N are all really present, and the first gaps above it."""
    for level in sorted(LEVELS):
        gaps = _level_gaps(level, shape, ledger)
        if gaps:
            return level - 1, gaps
    return HEAD_LEVEL, []


def identify(conn: sqlite3.Connection | Connection) -> str:
    """Classify a database: ``"empty"``, ``"alembic"`` or ``"legacy"``; raise
    :class:`NotAHermesDatabaseError` for anything else (read-only)."""
    if isinstance(conn, Connection):
        names = set(sa.inspect(conn).get_table_names())
    else:
        rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        names = {r[0] for r in rows}
    if "alembic_version" in names:
        return "alembic"
    user_tables = {n for n in names if not n.startswith("sqlite_")}
    if isinstance(conn, Connection) and conn.dialect.name != "sqlite":
        # On a server both stores may share one database (the session store keeps its own
        # version table there); its tables are not foreign to us.
        from hermes_data.sessions.schema import metadata as sessions_metadata

        user_tables -= set(sessions_metadata.tables) | {"alembic_version_sessions"}
        if "alembic_version_sessions" in names and not names & set(IDENTITY_TABLES):
            # Only a session store lives here, with whatever upstream tables its copy
            # carried (hermes_data.copy.transfer): nothing of ours yet, so nothing foreign to us.
            return "empty"
    if not user_tables:
        return "empty"
    missing = [t for t in IDENTITY_TABLES if t not in names]
    if missing:
        raise NotAHermesDatabaseError(
            f"not a telemetry database: tables {', '.join(missing)} are missing "
            f"(found {', '.join(sorted(user_tables))}); the file was left unchanged"
        )
    return "legacy"


def _needs_adoption(conn: Connection) -> bool:
    return identify(conn) == "legacy"


def _adopt(conn: Connection, report: UpgradeReport) -> None:
    kind = identify(conn)
    if kind != "legacy":
        return
    ledger = {r[0] for r in conn.exec_driver_sql("SELECT version FROM schema_version")}
    unknown = sorted(v for v in ledger if v not in LEVELS)
    if unknown:
        raise AdoptionError(
            f"schema_version holds versions {unknown} that no known plugin build wrote; "
            "refusing to guess what they changed (the file was left unchanged)"
        )
    shape = live_shape(conn)
    if _rebuild_missing_indexes(conn, shape, report):
        shape = live_shape(conn)
    level, gaps = complete_level(shape, ledger)
    if level < 1:
        raise AdoptionError(
            f"the base tables are incomplete ({'; '.join(gaps)}); refusing to adopt "
            "(the file was left unchanged)"
        )
    top = max(ledger) if ledger else 0
    report.adopted_from = (
        f"ledger rows {_ranges(ledger)}; shape complete to level {level}"
        + (f" (missing above it: {', '.join(gaps)})" if gaps and level < HEAD_LEVEL else "")
    )
    if level < top:
        log.warning("legacy ledger claims v%s but the shape is only complete to v%s: %s",
                    top, level, ", ".join(gaps))
    for version in range(1, level + 1):
        if version not in ledger:
            conn.execute(sa.text("INSERT INTO schema_version (version, applied_at) VALUES (:v, :t)"),
                         {"v": version, "t": utcnow_iso()})
            report.repairs.append(f"schema_version row {version} written (its change is present)")
    conn.exec_driver_sql(
        "CREATE TABLE IF NOT EXISTS alembic_version (version_num VARCHAR(32) NOT NULL, "
        "CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num))"
    )
    conn.execute(sa.text("INSERT INTO alembic_version (version_num) VALUES (:v)"),
                 {"v": revision_for_level(level)})
    report.repairs.append(f"stamped {revision_for_level(level)} from the inspected shape")
    log.info("adopting legacy telemetry database: %s", report.adopted_from)


def _rebuild_missing_indexes(conn: Connection, shape: Shape, report: UpgradeReport) -> bool:
    """Recreate a ledger level's index that is absent while its table holds every indexed
    column (a table rebuild outside the plugin drops its indexes): indexes hold no data, so
    this heals add-only. An index of that name with other columns is left for the level check
    to refuse. Returns whether anything was created."""
    created = False
    for level in sorted(LEVELS):
        for name, (table, cols) in LEVELS[level].get("indexes", {}).items():
            have = {c.name for c in shape.tables.get(table, ())}
            if name in shape.indexes or table not in shape.tables or not set(cols) <= have:
                continue
            head = next((ix for t in metadata.tables.values() for ix in t.indexes
                         if ix.name == name), None)
            unique = bool(head is not None and head.unique)
            conn.exec_driver_sql(sql_fragments.create_index(name, table, cols, unique=unique))
            report.repairs.append(f"index {name} rebuilt (it was missing; indexes hold no data)")
            created = True
    return created


def _ranges(values: set[int]) -> str:
    if not values:
        return "none"
    out, items = [], sorted(values)
    start = prev = items[0]
    for v in items[1:] + [None]:
        if v is not None and v == prev + 1:
            prev = v
            continue
        out.append(f"{start}" if start == prev else f"{start}..{prev}")
        if v is not None:
            start = prev = v
    return ", ".join(out)


def _reconcile(conn: Connection, report: UpgradeReport, options: Any = None) -> None:
    """Add-only repair towards the head metadata, then verification (``options``: the
    runner's ``hook_options``, unused here)."""
    head = SPEC.head_shape_for(conn)
    before_added = len(report.repairs)
    for diff in diff_shapes(head, live_shape(conn)):
        if diff.kind == "missing_table":
            metadata.tables[diff.object].create(conn)
            report.repairs.append(f"table {diff.object} created")
        elif diff.kind == "missing_column":
            table, column = diff.object.split(".", 1)
            col = metadata.tables[table].c[column]
            ddl = sa.schema.CreateColumn(col).compile(dialect=conn.dialect)
            conn.exec_driver_sql(f'ALTER TABLE "{table}" ADD COLUMN {ddl}')
            report.repairs.append(f"column {diff.object} added")
    for diff in diff_shapes(head, live_shape(conn)):
        if diff.kind == "missing_index":
            next(ix for ix in metadata.tables[_index_table(diff.object)].indexes
                 if ix.name == diff.object).create(conn)
            report.repairs.append(f"index {diff.object} created")
    remaining = diff_shapes(head, live_shape(conn))
    report.extra_objects = [str(d) for d in remaining if d.is_extra]
    default_only = [d for d in remaining if d.kind == "column_differs" and _default_only(d, head, conn)]
    for d in default_only:
        report.repairs.append(f"left alone (default differs, cannot change without a rebuild): {d}")
    fatal = [d for d in remaining if not d.is_extra and d not in default_only]
    if fatal:
        raise AdoptionError(
            "cannot reach the head shape without dropping, renaming or retyping: "
            + "; ".join(map(str, fatal)) + " (nothing was changed)"
        )
    if len(report.repairs) > before_added:
        log.info("reconciled: %s", "; ".join(report.repairs[before_added:]))


def _index_table(name: str) -> str:
    for table in metadata.tables.values():
        if any(ix.name == name for ix in table.indexes):
            return table.name
    raise KeyError(name)


def _default_only(diff, head: Shape, conn: Connection) -> bool:
    if "." not in diff.object:
        return False
    table, column = diff.object.split(".", 1)
    exp = next(c for c in head.tables[table] if c.name == column)
    got = next(c for c in live_shape(conn).tables[table] if c.name == column)
    return (exp.type, exp.pk) == (got.type, got.pk) and (
        exp.notnull == got.notnull or (exp.pk == 1 and exp.type == "INTEGER")
    )


SPEC = StoreSpec(
    name="telemetry",
    metadata=metadata,
    busy_timeout_ms=TELEMETRY_BUSY_TIMEOUT_MS,
    before_upgrade=_adopt,
    after_upgrade=_reconcile,
    needs_adoption=_needs_adoption,
    identify=identify,
    head="v18",
)
