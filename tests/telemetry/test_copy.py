"""``hermes-data copy``: every legacy fixture, adopted on SQLite and copied to PostgreSQL,
answers every read function identically; resumable, verified, refuses foreign targets."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from pathlib import Path

import pytest
import sqlalchemy as sa

from hermes_data.migrate import runner as migrate
from hermes_data.copy.transfer import CopyTargetNotEmptyError, copy_store, table_checksum
from hermes_data.telemetry import reads as R
from hermes_data.telemetry import writes as W
from hermes_data.telemetry.schema import metadata
from hermes_data.telemetry.store import TelemetryStore

from ..conftest import FIXTURES, copy_fixture, run_cli
from .conftest import NOW, _truncate

LEGACY = sorted(p.name for p in (FIXTURES / "legacy-telemetry").glob("*.db"))


def _plain(value):
    """Typed rows → plain data; floats to 10 significant digits (SUM order may differ
    between the engines in the last bits, nothing more)."""
    if dataclasses.is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float):
        return float(f"{value:.10g}")
    return value


def every_read(store: TelemetryStore, facts: dict) -> dict:
    """Every read function of the API, with arguments drawn from the data."""
    out: dict = {}
    first, last = facts["first_day"], facts["last_day"]
    for hours in (0, 24 * 365 * 10):
        out[f"stats_summary/{hours}"] = R.stats_summary(store, hours, now=NOW)
        out[f"cost_by_job/{hours}"] = R.cost_by_job(store, hours, now=NOW)
        out[f"stats_by_provider/{hours}"] = R.stats_by_provider(store, hours, now=NOW)
        out[f"stats_by_model/{hours}"] = R.stats_by_model(store, hours, now=NOW)
        out[f"efficiency_runs/{hours}"] = R.efficiency_runs(store, hours, now=NOW, limit=10_000)
    out["stats_summary/dates"] = R.stats_summary(store, date_from=first, date_to=last)
    out["recent_runs"] = R.recent_runs(store, 10_000, window_hours=0)
    out["recent_runs/dates"] = R.recent_runs(store, 10_000, date_from=first, date_to=last)
    out["unattributed"] = R.unattributed_child_cost(store, "")
    for scope, ids in (("global", [None]), ("cron_job", facts["jobs"]),
                       ("sender", facts["senders"]), ("profile", facts["profiles"])):
        for sid in ids:
            out[f"spend/{scope}/{sid}"] = R.spend_by_scope(store, scope, sid, "")
            out[f"daily/{scope}/{sid}"] = R.daily_spend_series(store, scope, sid, 45, now=facts["last_dt"])
            out[f"share/{scope}/{sid}"] = R.estimated_price_share(store, scope, sid, "", facts["models"][:3])
    out["cron_jobs"] = R.list_cron_job_ids(store, "")
    out["senders"] = R.list_sender_ids(store, "")
    out["profiles"] = R.list_profiles(store, "")
    for sid in facts["sessions"]:
        out[f"run/{sid}"] = R.get_run(store, sid)
        out[f"turns/{sid}"] = R.turn_summary(store, sid)
        out[f"edges/{sid}"] = R.list_subagent_edges(store, sid)
        out[f"edge/{sid}"] = R.get_subagent_edge(store, sid)
        out[f"errors/{sid}"] = R.llm_call_errors_for_session(store, sid)
    out["delegation"] = R.delegation_join(store)
    for model in facts["models"]:
        out[f"free/{model}"] = R.is_known_free_model(store, model)
        out[f"tier/{model}"] = R.is_free_tier_transition(store, model)
        out[f"unavailable/{model}"] = R.get_model_unavailable(store, model)
    out["transitions"] = R.recent_free_paid_transitions(store, 0)
    out["unavailable"] = R.recent_model_unavailable(store, 0)
    out["snapshots"] = R.list_latest_pricing_snapshots(store)
    for provider, model in facts["pairs"]:
        out[f"snapshot/{provider}/{model}"] = R.get_latest_pricing_snapshot(store, provider, model)
    out["distinct_models"] = R.count_distinct_llm_models(store)
    out["needing_snapshot"] = R.models_needing_pricing_snapshot(store)
    out["endpoint_cache"] = R.get_endpoint_payload_cache(store, "providers", "[24]")
    out["efficiency_cache"] = R.get_model_efficiency_cache(store, 24, False, 50)
    return _plain(out)


def _facts(path: Path) -> dict:
    conn = sqlite3.connect(path)
    try:
        col = lambda q: [r[0] for r in conn.execute(q)]  # noqa: E731
        lo, hi = conn.execute("SELECT MIN(started_at), MAX(started_at) FROM runs").fetchone()
        from datetime import datetime
        sessions = col("SELECT session_id FROM runs ORDER BY session_id")
        return {
            "first_day": lo[:10], "last_day": hi[:10],
            "last_dt": datetime.fromisoformat(hi),
            "jobs": col("SELECT DISTINCT cron_job_id FROM runs WHERE cron_job_id IS NOT NULL ORDER BY 1")[:5],
            "senders": col("SELECT DISTINCT sender_id FROM runs WHERE sender_id > '' ORDER BY 1")[:5],
            "profiles": col("SELECT DISTINCT profile FROM runs WHERE profile > '' ORDER BY 1")[:5],
            "models": col("SELECT DISTINCT model FROM llm_calls WHERE model > '' ORDER BY 1")[:8]
                      + col("SELECT model FROM known_free_models ORDER BY 1"),
            "sessions": sessions[:: max(1, len(sessions) // 25)] + col(
                "SELECT parent_session_id FROM subagent_edges ORDER BY 1")[:5],
            "pairs": [tuple(r) for r in conn.execute(
                "SELECT provider, model FROM pricing_snapshots GROUP BY 1, 2 ORDER BY 1, 2 LIMIT 5")],
        }
    finally:
        conn.close()


@pytest.mark.parametrize("fixture", LEGACY)
def test_legacy_fixture_copied_to_postgres_answers_every_read_identically(
        fixture, tmp_path, pg_session_url):
    path = copy_fixture(f"legacy-telemetry/{fixture}", tmp_path)
    migrate.upgrade("telemetry", str(path))
    facts = _facts(path)
    _truncate(pg_session_url)
    report = copy_store(str(path), pg_session_url, batch=1000, force=True)
    assert report.verified and {t.table for t in report.tables} >= {"runs", "llm_calls", "schema_version"}
    copied = {t.table: t for t in report.tables}
    assert copied["llm_calls"].target_rows == 3368 and copied["llm_calls"].id_counter >= 3368
    with TelemetryStore(path) as lite, TelemetryStore(pg_session_url) as pg:
        on_sqlite, on_pg = every_read(lite, facts), every_read(pg, facts)
        assert on_sqlite["recent_runs"] and on_sqlite["stats_summary/0"]["api_calls"] == 3368
        assert on_pg == on_sqlite
        # the sequence continues past the copied ids: a new call gets the next id on both
        assert W.record_llm_call(lite, "new", NOW, "m", "p") == W.record_llm_call(pg, "new", NOW, "m", "p")
    assert migrate.check("telemetry", pg_session_url) == []


def _seed(path: Path) -> None:
    migrate.upgrade("telemetry", str(path))
    with TelemetryStore(path) as s:
        for i in range(230):
            W.record_llm_call(s, f"s{i % 17}", NOW, "m", "p", i, 1, 0.001 * i, 3, turn_id=f"t{i}")
            W.record_tool_call(s, f"s{i % 17}", NOW, "bash", i % 3 != 0, i)
        W.start_run(s, "z-last", "m", "cli", started_at=NOW)
        s.connection().execute("DELETE FROM llm_calls WHERE id > 225")  # counter stays at 230


def test_interrupted_copy_resumes_without_duplicates_and_keeps_the_id_counter(tmp_path, pg_url):
    src = tmp_path / "src.db"
    _seed(src)
    seen: list[tuple[str, int, int]] = []

    def interrupt(table, done, total):
        seen.append((table, done, total))
        if table == "llm_calls" and done >= 100:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        copy_store(src, pg_url, batch=50, progress=interrupt)
    engine = sa.create_engine(pg_url)
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT COUNT(*) FROM llm_calls").scalar() == 100
    report = copy_store(src, pg_url, batch=50, progress=lambda *a: seen.append(a))
    assert report.resumed and report.verified
    calls = next(t for t in report.tables if t.table == "llm_calls")
    assert (calls.resumed_from, calls.copied_rows, calls.target_rows) == (100, 125, 225)
    assert calls.id_counter == 230
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT COUNT(*), COUNT(DISTINCT id) FROM llm_calls").one() == (225, 225)
        assert conn.exec_driver_sql("SELECT nextval('llm_calls_id_seq')").scalar() == 231
    engine.dispose()
    assert ("llm_calls", 225, 225) in seen  # progress reached the end
    # a third run finds everything copied and copies nothing
    again = copy_store(src, pg_url)
    assert again.copied_rows == next(t for t in again.tables if t.table == "schema_version").copied_rows


def test_foreign_target_is_refused_unless_forced_and_sqlite_counter_is_kept(tmp_path):
    src, dst = tmp_path / "src.db", tmp_path / "dst.db"
    _seed(src)
    migrate.upgrade("telemetry", str(dst))
    with TelemetryStore(dst) as s:
        W.record_llm_call(s, "someone-else", NOW, "m", "p")
    with pytest.raises(CopyTargetNotEmptyError, match="llm_calls"):
        copy_store(src, dst)
    with TelemetryStore(dst) as s:
        assert R.get_run(s, "someone-else") is not None  # refused: nothing touched
    report = copy_store(src, dst, force=True)
    assert report.verified and report.forced
    with TelemetryStore(dst) as s:
        assert R.get_run(s, "someone-else") is None
        assert s.connection().execute("SELECT seq FROM sqlite_sequence WHERE name='llm_calls'").fetchone() == (230,)


def test_checksum_is_backend_independent_and_detects_a_change(tmp_path, pg_url):
    src = tmp_path / "src.db"
    _seed(src)
    copy_store(src, pg_url)
    lite, pg = sa.create_engine(f"sqlite:///{src}"), sa.create_engine(pg_url)
    table = metadata.tables["runs"]
    with lite.connect() as a, pg.begin() as b:
        assert table_checksum(a, table) == table_checksum(b, table)
        b.exec_driver_sql("UPDATE runs SET cost_usd = cost_usd + 1e-9 WHERE session_id = 's3'")
        assert table_checksum(a, table)[1] != table_checksum(b, table)[1]
    lite.dispose()
    pg.dispose()


def test_cli_copy_prints_progress_and_json(tmp_path, pg_url):
    src = tmp_path / "src.db"
    _seed(src)
    res = run_cli("copy", "--from", str(src), "--to", pg_url, "--batch", "100")
    assert res.returncode == 0, res.stderr
    assert "llm_calls: 225 rows" in res.stdout and "checksum ok" in res.stdout
    assert "/ 225 rows" not in res.stderr  # progress is drawn on a terminal only (tests/cli/test_cli_progress.py)
    res = run_cli("copy", "--from", str(src), "--to", pg_url, "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)["telemetry"]
    assert data["verified"] and data["resumed"]
    res = run_cli("copy", "--from", str(tmp_path / "nowhere.db"), "--to", pg_url)
    assert res.returncode == 2 and "not" in res.stderr
