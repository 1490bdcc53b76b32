"""``hermes-data stats`` on adopted legacy telemetry prints the figures of the read API.

The legacy fixtures hold runs from mid-2026; the window is sized from the fixture's oldest run
so that every run is inside it. The read API is called again with the CLI's own ``until`` as
``now``, so both sides compute exactly the same window.
"""

from __future__ import annotations

import json
import math
import re
import sqlite3
from dataclasses import asdict
from datetime import datetime, timezone

import pytest

from hermes_data.migrate import runner as migrate
from hermes_data.telemetry import (TelemetryStore, daily_spend_series, spend_by_scope,
                                   stats_by_model, stats_by_provider, stats_summary)

from tests.conftest import copy_fixture, run_cli

FIXTURE = "legacy-telemetry/telemetry_v16_7e028ef.db"


@pytest.fixture
def adopted(tmp_path):
    db = copy_fixture(FIXTURE, tmp_path)
    report = migrate.upgrade("telemetry", db)
    assert report.after_revision == migrate.head_revision("telemetry")
    con = sqlite3.connect(db)
    try:
        oldest = con.execute("SELECT MIN(started_at) FROM runs").fetchone()[0]
        (runs,) = con.execute("SELECT COUNT(*) FROM runs").fetchone()
    finally:
        con.close()
    age = datetime.now(timezone.utc) - datetime.fromisoformat(oldest)
    hours = math.ceil(age.total_seconds() / 3600) + 48
    return db, hours, math.ceil(hours / 24), runs


def _api(db, hours, days, now, scope="global", scope_id=None):
    from datetime import timedelta

    with TelemetryStore(db) as store:
        return {
            "summary": asdict(stats_summary(store, hours, now=now, top_n=5)),
            "models": sorted((asdict(m) for m in stats_by_model(store, hours, now=now)),
                             key=lambda m: (-m["cost_usd"], -m["total_calls"]))[:5],
            "providers": [asdict(p) for p in stats_by_provider(store, hours, now=now)][:5],
            "scope": asdict(spend_by_scope(store, scope, scope_id, now - timedelta(hours=hours))),
            "daily": [asdict(d) for d in daily_spend_series(store, scope, scope_id, days, now=now)],
        }


@pytest.mark.parametrize("scope", [["global"], ["cron_job", "inbox_triage"]],
                         ids=["global", "cron_job"])
def test_stats_json_matches_the_read_api(adopted, scope):
    db, hours, days, runs = adopted
    proc = run_cli("stats", "--url", str(db), "--hours", str(hours), "--days", str(days),
                   "--scope", *scope, "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)["telemetry"]
    now = datetime.fromisoformat(data["now"])
    api = _api(db, hours, days, now, *scope, *([None] if len(scope) == 1 else []))
    assert data["summary"] == json.loads(json.dumps(api["summary"]))
    assert data["summary"]["total_runs"] == runs  # the whole fixture is inside the window
    assert data["models"] == api["models"] and data["providers"] == api["providers"]
    assert {k: v for k, v in data["scope"].items() if k not in ("scope", "id")} == api["scope"]
    assert data["scope"]["scope"] == scope[0]
    assert data["daily_spend"] == api["daily"]
    assert sum(d["cost_usd"] for d in data["daily_spend"]) == pytest.approx(api["scope"]["spent_usd"])
    assert api["scope"]["spent_usd"] > 0


def test_stats_text_prints_the_same_figures(adopted):
    db, hours, days, runs = adopted
    proc = run_cli("stats", "--url", str(db), "--hours", str(hours), "--days", str(days))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    m = re.search(r"telemetry, last \S+ h \((\S+) \.\. (\S+)\)", out)
    now = datetime.fromisoformat(m.group(2))
    api = _api(db, hours, days, now)
    s = api["summary"]
    assert f"runs {s['total_runs']:,} ({s['ok_runs']:,} ok, {s['failed_runs']:,} failed)" in out
    assert f"LLM calls {s['api_calls']:,}" in out
    assert f"tokens {s['tokens_in']:,} in / {s['tokens_out']:,} out; cost ${s['cost_usd']:,.2f}" in out
    top = api["models"][0]
    assert f"{top['provider']}/{top['model']}: {top['total_calls']:,} calls" in out
    assert f"spend of global, last {hours:g} h: ${api['scope']['spent_usd']:,.2f}" in out
    # The chart: one line per day; the most expensive day has the longest bar.
    bars = {l.split()[0]: l for l in out.splitlines() if re.match(r"\s+\d{4}-\d\d-\d\d ", l)}
    assert list(bars) == [d["day"] for d in api["daily"]]
    peak = max(api["daily"], key=lambda d: d["cost_usd"])
    assert bars[peak["day"]].count("#") == 40
    idle = next(d for d in api["daily"] if d["cost_usd"] == 0)
    assert "#" not in bars[idle["day"]]


def test_stats_refuses_a_legacy_file_without_changing_it(tmp_path):
    db = copy_fixture(FIXTURE, tmp_path)
    before = db.read_bytes()
    proc = run_cli("stats", "--url", str(db))
    # (the fixture is a WAL file: this SQLite build's WAL-reset warning may precede the error)
    errors = [l for l in proc.stderr.splitlines() if not l.startswith("WARNING ")]
    assert proc.returncode == 2 and len(errors) == 1 and "Traceback" not in proc.stderr
    assert str(db) in errors[0] and "hermes-data upgrade" in errors[0]
    assert db.read_bytes() == before


@pytest.mark.parametrize("scope", [["bogus"], ["cron_job"], ["global", "x"]])
def test_stats_scope_is_checked(tmp_path, scope):
    db = tmp_path / "t.db"
    migrate.upgrade("telemetry", db)
    proc = run_cli("stats", "--url", str(db), "--scope", *scope)
    assert proc.returncode == 2 and "--scope" in proc.stderr and len(proc.stderr.splitlines()) == 1
