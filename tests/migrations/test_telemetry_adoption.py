"""Adoption of legacy telemetry files: every fixture, lossless; foreign and corrupt files
refused untouched."""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3

import pytest

from hermes_data.migrate import runner as migrate
from hermes_data.errors import AdoptionError, NotAHermesDatabaseError
from hermes_data.migrate.shape import diff_shapes, live_shape
from hermes_data.engine import create_sqlite_engine
from hermes_data.telemetry.migration import SPEC, complete_level

from ..conftest import copy_fixture, run_cli
from .manifest import assert_adopted_losslessly, fixture_entries

ENTRIES = {e["file"]: e for e in fixture_entries()}


def _adopt(tmp_path, name):
    pristine_dir = tmp_path / "pristine"
    pristine_dir.mkdir()
    pristine = copy_fixture(f"legacy-telemetry/{name}", pristine_dir)
    work = copy_fixture(f"legacy-telemetry/{name}", tmp_path)
    report = migrate.upgrade("telemetry", work)
    return work, pristine, report


@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_every_fixture_adopts_losslessly(tmp_path, name):
    entry = ENTRIES[name]
    work, pristine, report = _adopt(tmp_path, name)
    assert report.after_revision == "v18"
    assert report.adopted_from and "ledger rows" in report.adopted_from
    assert_adopted_losslessly(work, entry, original=pristine)
    # Final shape equals the head per spec §8.7(b): nothing but extras may differ.
    assert [d for d in migrate.check("telemetry", work) if not d.is_extra] == []
    # sqlite_sequence is untouched: ids are never reused after adoption.
    con = sqlite3.connect(work)
    seq = dict(con.execute("SELECT name, seq FROM sqlite_sequence"))
    con.close()
    for table, value in entry["sqlite_sequence"].items():
        assert seq[table] == value


def test_wedged_v7_is_stamped_below_its_ledger_and_healed(tmp_path):
    work, _, report = _adopt(tmp_path, "telemetry_wedged_v7.db")
    # Rows 1..8 claimed v8, but provider_assumed was missing: adoption trusts the shape.
    assert "shape complete to level 6" in report.adopted_from
    assert report.applied[0] == "v07"
    con = sqlite3.connect(work)
    cols = {r[1] for r in con.execute("PRAGMA table_info(llm_calls)")}
    assert {"provider_assumed", "moa_preset", "turn_id"} <= cols
    # The healed file takes the writes that failed upstream with "no such column".
    con.execute("INSERT INTO llm_calls (session_id, ts, provider_assumed, moa_preset) "
                "VALUES ('s', '2026-07-20T00:00:00+00:00', 1, 'p')")
    con.commit()
    con.close()


def test_collision_v11_gets_subagent_edges(tmp_path):
    work, _, report = _adopt(tmp_path, "telemetry_collision_v11.db")
    assert "shape complete to level 10" in report.adopted_from
    con = sqlite3.connect(work)
    names = {r[0] for r in con.execute("SELECT name FROM sqlite_master")}
    con.close()
    assert {"subagent_edges", "idx_subagent_edges_parent"} <= names


def test_v8_gets_its_missing_repair_row(tmp_path):
    # A v8 build never ran v9, but its shape already has every v9 column: row 9 is written
    # because its change is really present.
    _, _, report = _adopt(tmp_path, "telemetry_v8_7590260.db")
    assert any("schema_version row 9" in r for r in report.repairs)
    assert report.applied[0] == "v10"


def test_rollup_branch_foreign_tables_are_kept_and_reported(tmp_path):
    """Lineage (d): an unmerged branch numbered rollup tables v10/v11 — its files have rows
    1..11, rollup tables, no MoA columns and no subagent_edges."""
    work = copy_fixture("legacy-telemetry/telemetry_v8_7590260.db", tmp_path)
    con = sqlite3.connect(work)
    con.executescript("""
        CREATE TABLE daily_rollups (period_start TEXT NOT NULL, model TEXT NOT NULL DEFAULT '',
            provider TEXT NOT NULL DEFAULT '', tokens_in INTEGER DEFAULT 0, tokens_out INTEGER DEFAULT 0,
            api_calls INTEGER DEFAULT 0, tool_calls INTEGER DEFAULT 0, session_count INTEGER DEFAULT 0,
            cost_usd REAL DEFAULT 0.0, PRIMARY KEY (period_start, model, provider));
        CREATE INDEX idx_daily_period ON daily_rollups(period_start);
        INSERT INTO daily_rollups (period_start, cost_usd) VALUES ('2026-06-22', 1.5);
        INSERT INTO schema_version VALUES (9, '2026-06-22T00:00:00+00:00');
        INSERT INTO schema_version VALUES (10, '2026-06-22T00:00:00+00:00');
        INSERT INTO schema_version VALUES (11, '2026-07-09T00:00:00+00:00');
    """)
    con.close()
    report = migrate.upgrade("telemetry", work)
    assert "shape complete to level 9" in report.adopted_from
    assert any("daily_rollups" in e for e in report.extra_objects)
    con = sqlite3.connect(work)
    assert con.execute("SELECT period_start, cost_usd FROM daily_rollups").fetchall() == [("2026-06-22", 1.5)]
    cols = {r[1] for r in con.execute("PRAGMA table_info(runs)")}
    con.close()
    assert "moa_calls" in cols
    drift = migrate.check("telemetry", work)
    assert [d for d in drift if not d.is_extra] == []
    assert {d.object for d in drift if d.is_extra} == {"daily_rollups", "idx_daily_period"}
    ok = run_cli("check", "--store", "telemetry", "--url", str(work))
    assert ok.returncode == 0 and "daily_rollups" in ok.stdout


def test_branch_v6_provider_assumed_gets_free_paid_transitions(tmp_path):
    """Lineage (b): v6 meant provider_assumed on a branch, so free_paid_transitions never came."""
    work = copy_fixture("legacy-telemetry/telemetry_v6_fea2a4b.db", tmp_path)
    con = sqlite3.connect(work)
    con.executescript("""
        DROP TABLE free_paid_transitions;
        ALTER TABLE llm_calls ADD COLUMN provider_assumed INTEGER DEFAULT 0;
        ALTER TABLE runs ADD COLUMN provider_assumed_calls INTEGER DEFAULT 0;
    """)
    con.close()
    report = migrate.upgrade("telemetry", work)
    assert "shape complete to level 5" in report.adopted_from
    assert [d for d in migrate.check("telemetry", work) if not d.is_extra] == []


def test_upgrade_report_json(tmp_path):
    work = copy_fixture("legacy-telemetry/telemetry_v13_e937bbb.db", tmp_path)
    proc = run_cli("upgrade", "--store", "telemetry", "--url", str(work), "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)["telemetry"]
    assert report["applied"] == ["v14", "v15", "v16", "v17", "v18"]
    assert report["before_revision"] is None and report["after_revision"] == "v18"
    assert set(report["step_seconds"]) >= {"adopt", "v14", "v18", "reconcile"}
    human = run_cli("upgrade", "--store", "telemetry", "--url", str(work))
    assert human.returncode == 0 and "nothing to do" in human.stdout


def _sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_foreign_sqlite_file_is_refused_unchanged(tmp_path):
    other = tmp_path / "notes.db"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
    con.execute("INSERT INTO notes (body) VALUES ('keep me')")
    con.commit()
    con.close()
    before = _sha(other)
    with pytest.raises(NotAHermesDatabaseError, match="not a telemetry database"):
        migrate.upgrade("telemetry", other)
    assert _sha(other) == before
    proc = run_cli("upgrade", "--store", "telemetry", "--url", str(other))
    assert proc.returncode == 2 and "not a telemetry database" in proc.stderr
    assert _sha(other) == before


def test_corrupt_file_is_refused_unchanged(tmp_path):
    bad = tmp_path / "telemetry.db"
    bad.write_bytes(b"this is not SQLite at all" * 500)
    before = _sha(bad)
    with pytest.raises(NotAHermesDatabaseError):
        migrate.upgrade("telemetry", bad)
    assert _sha(bad) == before


def test_unknown_ledger_version_is_refused_unchanged(tmp_path):
    work = copy_fixture("legacy-telemetry/telemetry_v16_7e028ef.db", tmp_path)
    con = sqlite3.connect(work)
    con.execute("INSERT INTO schema_version VALUES (42, '2027-01-01T00:00:00+00:00')")
    con.commit()
    con.execute("PRAGMA wal_checkpoint(PASSIVE)")
    con.close()
    before = _sha(work)
    with pytest.raises(AdoptionError, match=r"\[42\]"):
        migrate.upgrade("telemetry", work)
    assert _sha(work) == before


def test_retyped_column_is_refused_not_rebuilt(tmp_path):
    """A column whose declared type differs cannot be healed add-only: the upgrade aborts and
    rolls back everything, leaving the file as it was."""
    db = tmp_path / "t.db"
    con = sqlite3.connect(db)
    con.executescript("""
        CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL);
        INSERT INTO schema_version VALUES (1, '2026-05-31T00:00:00+00:00');
        CREATE TABLE runs (session_id TEXT PRIMARY KEY, platform TEXT, cron_job_id TEXT, model TEXT,
            provider TEXT, started_at TEXT NOT NULL, ended_at TEXT, status TEXT DEFAULT 'running',
            tokens_in INTEGER DEFAULT 0, tokens_out INTEGER DEFAULT 0, cost_usd REAL DEFAULT 0.0,
            duration_ms INTEGER, api_calls INTEGER DEFAULT 0, tool_calls INTEGER DEFAULT 0);
        CREATE TABLE llm_calls (id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL,
            ts TEXT NOT NULL, model TEXT, provider TEXT, tokens_in INTEGER DEFAULT 0,
            tokens_out INTEGER DEFAULT 0, cost_usd TEXT DEFAULT 0.0, latency_ms INTEGER);
        CREATE TABLE tool_calls (id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL,
            ts TEXT NOT NULL, tool_name TEXT NOT NULL, ok INTEGER NOT NULL DEFAULT 1, latency_ms INTEGER);
    """)
    con.close()
    before = _sha(db)
    with pytest.raises(AdoptionError, match="llm_calls.cost_usd"):
        migrate.upgrade("telemetry", db)
    assert _sha(db) == before


def test_level_detection_is_shape_based_not_ledger_based(tmp_path):
    db = tmp_path / "t.db"
    migrate.upgrade("telemetry", db)
    engine = create_sqlite_engine(db)
    with engine.connect() as conn:
        shape = live_shape(conn)
    engine.dispose()
    assert complete_level(shape, set(range(1, 19)))[0] == 18
    assert complete_level(shape, set(range(1, 17)))[0] == 16  # 17 is data-only: needs its row
    del shape.indexes["idx_runs_sender"]
    level, gaps = complete_level(shape, set(range(1, 19)))
    assert level == 2 and gaps == ["index idx_runs_sender"]
    assert diff_shapes(SPEC.head_shape(), shape)  # and the head comparison sees it too


def test_v17_deletes_exactly_what_its_rule_selects(tmp_path):
    pristine_dir = tmp_path / "pristine"
    pristine_dir.mkdir()
    work = copy_fixture("legacy-telemetry/telemetry_v16_7e028ef.db", tmp_path)
    ts = "2026-07-01T00:00:00+00:00"
    con = sqlite3.connect(work)
    con.executescript(f"""
        -- candidate: provider-specific, never served for free -> deleted with its transition
        INSERT INTO known_free_models VALUES ('paid/model:free', 'openrouter', '{ts}');
        INSERT INTO free_paid_transitions VALUES ('paid/model:free', 'openrouter', '{ts}', 's1', 0.5, '{ts}');
        -- the id-change transition of the same base model is not "theirs" -> kept
        INSERT INTO free_paid_transitions VALUES ('paid/model', 'openrouter', '{ts}', 's1', 0.5, NULL);
        -- a $0 call with zero tokens is no evidence -> deleted
        INSERT INTO known_free_models VALUES ('empty/model', 'acme', '{ts}');
        INSERT INTO llm_calls (session_id, ts, model, provider, tokens_in, tokens_out, cost_usd)
            VALUES ('s1', '{ts}', 'empty/model', 'acme', 0, 0, 0.0);
        -- evidence on another provider protects nothing here -> deleted
        INSERT INTO known_free_models VALUES ('shared/model', 'acme', '{ts}');
        INSERT INTO llm_calls (session_id, ts, model, provider, tokens_in, tokens_out, cost_usd)
            VALUES ('s1', '{ts}', 'shared/model', 'other', 10, 5, 0.0);
        -- a wildcard row of the same model protects only itself -> kept
        INSERT INTO known_free_models VALUES ('shared/model', '', '{ts}');
        -- real evidence (cost 0, tokens > 0) -> kept
        INSERT INTO known_free_models VALUES ('real/free', 'acme', '{ts}');
        INSERT INTO llm_calls (session_id, ts, model, provider, tokens_in, tokens_out, cost_usd)
            VALUES ('s1', '{ts}', 'real/free', 'acme', 0, 7, 0.0);
    """)
    con.execute("PRAGMA wal_checkpoint(PASSIVE)")
    con.close()
    shutil.copyfile(work, pristine_dir / work.name)
    pristine = pristine_dir / work.name
    migrate.upgrade("telemetry", work)
    con = sqlite3.connect(work)
    free = {tuple(r) for r in con.execute("SELECT model, provider FROM known_free_models")}
    trans = {tuple(r) for r in con.execute("SELECT model, provider FROM free_paid_transitions")}
    con.close()
    assert ("paid/model:free", "openrouter") not in free
    assert ("empty/model", "acme") not in free
    assert ("shared/model", "acme") not in free
    assert {("shared/model", ""), ("real/free", "acme")} <= free
    assert ("paid/model:free", "openrouter") not in trans
    assert ("paid/model", "openrouter") in trans
    pcon = sqlite3.connect(pristine)
    from .manifest import v17_survivors
    assert (free, trans) == v17_survivors(pcon)
    pcon.close()


def test_v17_does_not_run_twice(tmp_path):
    """A legacy file whose ledger already has row 17 ran the repair upstream; when adoption
    must still run v17 (here: v15's column is missing, so it stamps v14 — a missing index would
    simply be rebuilt), the revision sees row 17 and leaves rows recorded since alone."""
    work = copy_fixture("legacy-telemetry/telemetry_v16_7e028ef.db", tmp_path)
    con = sqlite3.connect(work)
    con.executescript("""
        INSERT INTO schema_version VALUES (17, '2026-07-20T00:00:00+00:00');
        INSERT INTO known_free_models VALUES ('late/model', 'acme', '2026-08-01T00:00:00+00:00');
        ALTER TABLE pricing_snapshots DROP COLUMN resolved_model;
    """)
    con.close()
    report = migrate.upgrade("telemetry", work)
    assert "v17" in report.applied
    con = sqlite3.connect(work)
    assert con.execute("SELECT count(*) FROM known_free_models WHERE model = 'late/model'").fetchone() == (1,)
    assert [r[0] for r in con.execute("SELECT version FROM schema_version")] == list(range(1, 19))
    con.close()


@pytest.mark.parametrize("name", ["telemetry_v1_949d9b6.db", "telemetry_v16_7e028ef.db"])
def test_legacy_file_without_its_indexes_is_healed_not_refused(tmp_path, name):
    """A table rebuild outside the plugin dropped the v1 indexes (and a later one): indexes
    hold no data, so adoption rebuilds them, reports it, and loses nothing (issue 13)."""
    work = copy_fixture(f"legacy-telemetry/{name}", tmp_path)
    pristine = tmp_path / "pristine.db"
    shutil.copyfile(work, pristine)
    dropped = ["idx_runs_started", "idx_llm_session", "idx_tool_name"]
    if "v16" in name:
        dropped.append("idx_pricing_snapshots_model")
    con = sqlite3.connect(work)
    for ix in dropped:
        con.execute(f"DROP INDEX {ix}")
    con.commit()
    con.close()
    report = migrate.upgrade("telemetry", str(work))
    assert report.after_revision == "v18"
    for ix in dropped:
        assert any(ix in r and "rebuilt" in r for r in report.repairs), report.repairs
    assert [d for d in migrate.check("telemetry", work) if not d.is_extra] == []
    assert_adopted_losslessly(work, ENTRIES[name], original=pristine)


def test_an_index_of_a_ledger_name_with_other_columns_is_still_refused(tmp_path):
    work = copy_fixture("legacy-telemetry/telemetry_v1_949d9b6.db", tmp_path)
    con = sqlite3.connect(work)
    con.execute("DROP INDEX idx_runs_started")
    con.execute("CREATE INDEX idx_runs_started ON runs(platform)")
    con.commit()
    con.close()
    before = work.read_bytes()
    with pytest.raises(AdoptionError, match="idx_runs_started"):
        migrate.upgrade("telemetry", str(work))
    assert work.read_bytes() == before
