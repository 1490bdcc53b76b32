"""Issue 3 (4): adoption under concurrency, with real processes on copies of legacy files.

* Eight ``hermes-data upgrade`` processes adopt one copy of a legacy fixture at once (the
  oldest upstream file and the wedged-v7 file; the missing-file case lives in
  ``test_telemetry_history.py``). Every process imports everything, reports "ready" on a
  pipe and then waits for one line on stdin; the parent releases all eight together, so the
  upgrades really overlap instead of being spread out by interpreter start-up.
* A plain ``sqlite3`` process inserts ``llm_calls`` rows in a loop (autocommit,
  ``busy_timeout``) and prints each committed id, while ``hermes-data upgrade`` adopts the
  same file: the upgrade completes and every id the inserter reported is present afterwards.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from hermes_data.migrate import runner as migrate

from ..conftest import REPO, copy_fixture
from .manifest import assert_adopted_losslessly, fixture_entries

UPGRADERS = 8
HEAD = "v18"
LEGACY = "legacy-telemetry"

ENTRIES = {e["file"]: e for e in fixture_entries()}

#: ``hermes-data upgrade`` behind a start barrier: the same ``main`` as ``python -m hermes_data.cli``.
BARRIER_CLI = (
    "import sys\n"
    "from hermes_data import cli\n"
    "import hermes_data.telemetry.migration\n"
    "print('ready', flush=True)\n"
    "sys.stdin.readline()\n"
    "sys.exit(cli.main(sys.argv[1:]))\n"
)

#: Inserts llm_calls rows with the v1 columns (present at every level) until a line arrives
#: on stdin; prints each id *after* its commit. cost_usd > 0, so the rows are no evidence for
#: the v17 rule and cannot change what adoption deletes.
INSERTER = r"""
import select, sqlite3, sys
con = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
con.execute("PRAGMA busy_timeout=30000")
n = 0
while True:
    if select.select([sys.stdin], [], [], 0)[0]:
        break
    n += 1
    cur = con.execute(
        "INSERT INTO llm_calls (session_id, ts, model, provider, tokens_in, tokens_out, "
        "cost_usd, latency_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (f"inserter-{n % 7}", f"2026-08-01T00:00:{n % 60:02d}+00:00", "m-ins", "p-ins",
         n, n + 1, 0.5, n % 1000),
    )
    print(cur.lastrowid, flush=True)
con.close()
print("stopped", flush=True)
"""


def _pristine(name: str, tmp_path: Path) -> tuple[Path, Path]:
    """(work copy, pristine copy) of a legacy fixture, each in its own directory."""
    work, keep = tmp_path / "work", tmp_path / "pristine"
    work.mkdir()
    keep.mkdir()
    return copy_fixture(f"{LEGACY}/{name}", work), copy_fixture(f"{LEGACY}/{name}", keep)


def _duplicate_surplus(path: Path) -> dict[str, int]:
    """Per table: rows minus distinct rows (0 unless a table holds exact duplicates)."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in con.execute(
            "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'")]
        return {t: con.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0]
                - con.execute(f'SELECT COUNT(*) FROM (SELECT DISTINCT * FROM "{t}")').fetchone()[0]
                for t in tables}
    finally:
        con.close()


def _ledger_and_version(path: Path) -> tuple[list[int], list[tuple]]:
    con = sqlite3.connect(path)
    try:
        return ([r[0] for r in con.execute("SELECT version FROM schema_version ORDER BY version")],
                con.execute("SELECT version_num FROM alembic_version").fetchall())
    finally:
        con.close()


def _assert_clean_check(path: Path) -> None:
    drift = [d for d in migrate.check("telemetry", path) if not d.is_extra]
    assert drift == [], f"{path.name}: drift after adoption: {drift}"


@pytest.mark.parametrize("name", ["telemetry_v1_949d9b6.db", "telemetry_wedged_v7.db"])
def test_eight_processes_adopt_one_legacy_file(tmp_path, name):
    db, pristine = _pristine(name, tmp_path)
    entry = ENTRIES[name]
    surplus_before = _duplicate_surplus(pristine)
    argv = ["upgrade", "--store", "telemetry", "--url", str(db), "--json"]
    procs = [
        subprocess.Popen([sys.executable, "-c", BARRIER_CLI, *argv], cwd=REPO,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
        for _ in range(UPGRADERS)
    ]
    try:
        for p in procs:
            assert p.stdout.readline().strip() == "ready", p.stderr.read()
        for p in procs:  # release all eight together
            p.stdin.write("go\n")
            p.stdin.flush()
        results = [p.communicate(timeout=240) + (p.returncode,) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for out, err, rc in results:
        assert rc == 0, err
        assert "locked" not in err.lower(), err
        assert "Traceback" not in err, err
    reports = [json.loads(out)["telemetry"] for out, _, _ in results]
    assert all(r["after_revision"] == HEAD for r in reports)
    # One consistent outcome: exactly one process adopted, the others found the head.
    adopters = [r for r in reports if r["adopted_from"] is not None]
    assert len(adopters) == 1, [r["adopted_from"] for r in reports]
    adopter = adopters[0]
    assert adopter["before_revision"] is None
    assert adopter["applied"] and adopter["applied"][-1] == HEAD
    for r in reports:
        if r is not adopter:
            assert r["before_revision"] == HEAD and r["applied"] == [], r
            assert not any(x.startswith(("stamped", "schema_version row", "table ", "column ",
                                                      "index "))
                           for x in r["repairs"]), r["repairs"]
    ledger, version = _ledger_and_version(db)
    assert ledger == list(range(1, 19))
    assert version == [(HEAD,)]
    assert_adopted_losslessly(db, entry, original=pristine)
    nonzero = lambda d: {t: n for t, n in d.items() if n}  # noqa: E731
    assert nonzero(_duplicate_surplus(db)) == nonzero(surplus_before), "duplicate rows appeared"
    _assert_clean_check(db)


class _IdReader(threading.Thread):
    """Collects the ids an inserter reports; lets the test wait for a count without sleeping."""

    def __init__(self, stream):
        super().__init__(daemon=True)
        self.stream, self.ids, self.other = stream, [], []
        self.cond = threading.Condition()

    def run(self) -> None:
        for line in self.stream:
            line = line.strip()
            with self.cond:
                if line.isdigit():
                    self.ids.append(int(line))
                else:
                    self.other.append(line)
                self.cond.notify_all()
        with self.cond:
            self.other.append("<eof>")
            self.cond.notify_all()

    def wait_for(self, count: int, timeout: float = 120) -> None:
        with self.cond:
            ok = self.cond.wait_for(lambda: len(self.ids) >= count or "<eof>" in self.other,
                                    timeout=timeout)
        assert ok and len(self.ids) >= count, f"inserter stalled: {len(self.ids)} ids, {self.other}"


@pytest.mark.parametrize("name", ["telemetry_v1_949d9b6.db", "telemetry_wedged_v7.db"])
def test_adoption_beside_a_live_inserter_loses_no_row(tmp_path, name):
    db, pristine = _pristine(name, tmp_path)
    entry = ENTRIES[name]
    con = sqlite3.connect(f"file:{pristine}?mode=ro", uri=True)
    original_max, original_rows = con.execute("SELECT MAX(id), COUNT(*) FROM llm_calls").fetchone()
    con.close()
    inserter = subprocess.Popen([sys.executable, "-c", INSERTER, str(db)], cwd=REPO,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    reader = _IdReader(inserter.stdout)
    reader.start()
    try:
        reader.wait_for(50)  # the inserter is committing before the upgrade starts
        with reader.cond:
            before = len(reader.ids)
        upgrade = subprocess.run(
            [sys.executable, "-m", "hermes_data.cli", "upgrade", "--store", "telemetry",
             "--url", str(db), "--json"],
            cwd=REPO, capture_output=True, text=True, timeout=240)
        with reader.cond:
            during = len(reader.ids)
        assert during > before, "the inserter committed nothing while the upgrade ran"
        reader.wait_for(during + 50)  # and keeps committing into the adopted file
        inserter.stdin.write("stop\n")
        inserter.stdin.flush()
        inserter.wait(timeout=120)
        reader.join(timeout=60)
    finally:
        if inserter.poll() is None:
            inserter.kill()
            inserter.wait()
    err = inserter.stderr.read()
    inserter.stderr.close()
    assert upgrade.returncode == 0, upgrade.stderr
    assert "locked" not in upgrade.stderr.lower(), upgrade.stderr
    assert inserter.returncode == 0 and "locked" not in err.lower(), err
    assert reader.other[-2:] == ["stopped", "<eof>"]
    report = json.loads(upgrade.stdout)["telemetry"]
    assert report["adopted_from"] is not None and report["after_revision"] == HEAD

    ids = reader.ids
    assert len(set(ids)) == len(ids), "the inserter saw an id twice"
    assert min(ids) > original_max
    con = sqlite3.connect(db)
    try:
        present = {r[0] for r in con.execute("SELECT id FROM llm_calls WHERE id > ?", (original_max,))}
        total = con.execute("SELECT COUNT(*) FROM llm_calls").fetchone()[0]
        # Rows inserted before adoption got the new columns' defaults like any old row.
        bad = con.execute(
            "SELECT COUNT(*) FROM llm_calls WHERE id > ? AND (provider_assumed IS NOT 0 "
            "OR estimated IS NOT 0 OR cache_read_tokens IS NOT 0)", (original_max,)).fetchone()[0]
    finally:
        con.close()
    assert set(ids) - present == set(), f"lost rows: {sorted(set(ids) - present)[:20]}"
    assert present == set(ids), "rows appeared that no one reported"
    assert total == original_rows + len(ids)
    assert bad == 0

    # The pre-existing rows: drop the inserted ones from a snapshot, then the full check.
    snapshot = tmp_path / "snapshot.db"
    src, dst = sqlite3.connect(db), sqlite3.connect(snapshot)
    try:
        src.backup(dst)
        dst.execute("DELETE FROM llm_calls WHERE id > ?", (original_max,))
        dst.commit()
    finally:
        src.close()
        dst.close()
    assert_adopted_losslessly(snapshot, entry, original=pristine)
    ledger, version = _ledger_and_version(db)
    assert ledger == list(range(1, 19)) and version == [(HEAD,)]
    _assert_clean_check(db)
