"""The fast creation of a missing store (issue 13) is the revision path, only faster.

Each test builds one file through every Alembic revision (``fast_create=False``) and one
through :mod:`hermes_data.migrate.fresh`, then compares everything SQLite can say about them: every
``sqlite_master`` object with its SQL text, ordered ``table_info`` of every table and view,
every index (columns, uniqueness, partial/expression shape), the ledger rows, the Alembic
stamp, the ``state_meta`` keys and the header pragmas. Both journal modes run it (CI runs
the suite twice).
"""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from hermes_data.migrate import runner as migrate
from hermes_data.sessions.storage import opening

from ..conftest import REPO

#: state_meta values that are random per file (the generation token).
_RANDOM_META = {"db_file_generation"}


def _tokens(sql: str) -> str:
    """``sql`` with whitespace runs collapsed and none around commas and parentheses."""
    return re.sub(r"\s*([,()])\s*", r"\1", " ".join(sql.split()))


def _dump(path: Path) -> dict:
    con = sqlite3.connect(path)
    try:
        # SQL text modulo whitespace: an ALTER TABLE ADD COLUMN appends ", <column>" where a
        # CREATE TABLE puts a newline and a tab; every token is compared.
        objects = [(t, n, tn, None if sql is None else _tokens(sql))
                   for t, n, tn, sql in con.execute(
                       "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name")]
        relations = [n for t, n, _, _ in objects if t in ("table", "view")]
        info = {n: con.execute(f'PRAGMA table_xinfo("{n}")').fetchall() for n in relations}
        indexes = {}
        for t in relations:
            for row in con.execute(f'PRAGMA index_list("{t}")').fetchall():
                indexes[row[1]] = (t, row[2], row[3], row[4],
                                   con.execute(f'PRAGMA index_xinfo("{row[1]}")').fetchall())
        names = {n for _, n, _, _ in objects}
        ledger = (con.execute("SELECT version FROM schema_version ORDER BY version").fetchall()
                  if "schema_version" in names else None)
        meta = (con.execute("SELECT key, value FROM state_meta ORDER BY key").fetchall()
                if "state_meta" in names else None)
        if meta is not None:
            meta = [(k, "<random>" if k in _RANDOM_META else v) for k, v in meta]
        pragmas = {p: con.execute(f"PRAGMA {p}").fetchone()[0]
                   for p in ("user_version", "journal_mode", "page_size", "auto_vacuum",
                             "encoding", "freelist_count")}
        pragmas["application_id_set"] = con.execute("PRAGMA application_id").fetchone()[0] != 0
        return {"objects": objects, "info": info, "indexes": indexes, "ledger": ledger,
                "stamp": con.execute("SELECT version_num FROM alembic_version").fetchall(),
                "state_meta": meta, "pragmas": pragmas}
    finally:
        con.close()


def _both(tmp_path: Path, store: str) -> tuple[dict, dict, migrate.UpgradeReport]:
    slow, fast = tmp_path / "revisions.db", tmp_path / "fresh.db"
    slow_report = migrate.upgrade(store, slow, fast_create=False)
    report = migrate.upgrade(store, fast)
    assert "fresh" not in slow_report.step_seconds and "fresh" in report.step_seconds
    assert report.applied == slow_report.applied
    assert (report.before_revision, report.after_revision) == (None, migrate.head_revision(store))
    assert report.journal_mode == slow_report.journal_mode
    return _dump(slow), _dump(fast), report


def _assert_same(slow: dict, fast: dict) -> None:
    for key in slow:
        assert fast[key] == slow[key], key
    # Both paths create the file in INCREMENTAL auto-vacuum mode (docs/sessions.md §7.6).
    assert fast["pragmas"]["auto_vacuum"] == 2


def test_fresh_telemetry_equals_the_revision_path(tmp_path):
    slow, fast, _ = _both(tmp_path, "telemetry")
    _assert_same(slow, fast)
    assert fast["ledger"] == [(n,) for n in range(1, 19)]
    assert len([n for n in fast["indexes"] if not n.startswith("sqlite_")]) == 18


@pytest.mark.parametrize("caps", [None, (True, False), (False, False)],
                         ids=["as-built", "no-trigram", "no-fts5"])
def test_fresh_sessions_equals_the_revision_path(tmp_path, caps):
    if caps is not None:
        opening.force_capabilities(opening.FtsCapabilities(*caps))
    try:
        slow, fast, _ = _both(tmp_path, "sessions")
    finally:
        opening.force_capabilities(None)
    _assert_same(slow, fast)
    triggers = [n for t, n, _, _ in fast["objects"] if t == "trigger"]
    if caps is not None:  # as built: whatever this SQLite offers, compared above
        # FTS5 without trigram: the base half's 3 triggers, s05's 4 display triggers and the
        # CJK-bigram index's 6; without FTS5 only the display triggers.
        assert len(triggers) == {(True, False): 3 + 4 + 6, (False, False): 0 + 4}[caps]
    assert dict(fast["state_meta"]).get("db_file_generation") == "<random>"


@pytest.mark.parametrize("store", ["telemetry", "sessions"])
def test_fresh_revisions_are_the_scripts_history(store):
    from alembic.script import ScriptDirectory

    from hermes_data.migrate.fresh import FRESH_MODULES
    import importlib

    script = ScriptDirectory(str(migrate.script_location(migrate.store_spec(store))))
    walked = [r.revision for r in reversed(list(script.walk_revisions("base", "heads")))]
    assert list(importlib.import_module(FRESH_MODULES[store]).REVISIONS) == walked


@pytest.mark.parametrize("store", ["telemetry", "sessions"])
def test_zero_byte_file_takes_the_fresh_path(tmp_path, store):
    path = tmp_path / "empty.db"
    path.touch()
    report = migrate.upgrade(store, path)
    assert "fresh" in report.step_seconds
    assert migrate.check(store, path) == []
    assert oct(path.stat().st_mode & 0o777) == "0o600"


@pytest.mark.parametrize("store", ["telemetry", "sessions"])
def test_fresh_creation_loads_no_alembic(tmp_path, store):
    code = ("import sys; from hermes_data import migrate; "
            "r = migrate.upgrade(sys.argv[1], sys.argv[2]); assert 'fresh' in r.step_seconds, r; "
            "print('alembic' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, store, str(tmp_path / "x.db")],
                         capture_output=True, text=True, timeout=60, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("store", ["telemetry", "sessions"])
def test_eight_processes_create_one_missing_file(tmp_path, store):
    """One process creates the file on the fresh path; the others find it at the head."""
    db = tmp_path / "sub" / f"{store}.db"
    code = ("import json, sys; from hermes_data import migrate; "
            "r = migrate.upgrade(sys.argv[1], sys.argv[2]); "
            "print(json.dumps(['fresh' in r.step_seconds, r.up_to_date]))")
    procs = [subprocess.Popen([sys.executable, "-c", code, store, str(db)], cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(8)]
    results = [p.communicate(timeout=180) + (p.returncode,) for p in procs]
    assert all(rc == 0 for _, _, rc in results), [e for _, e, _ in results]
    outcomes = [tuple(__import__("json").loads(out)) for out, _, _ in results]
    assert outcomes.count((True, False)) == 1, outcomes
    assert outcomes.count((False, True)) == 7, outcomes
    assert migrate.check(store, db) == []
    st = migrate.status(store, db)
    assert st.revision == st.head


def test_a_lock_held_past_the_busy_timeout_is_waited_out(tmp_path):
    """A sibling holding the new file's write lock longer than the session store's 1 s busy
    timeout (a creator under load: the eight-process test failed so once in CI; the telemetry
    store's own busy timeout is long enough) is waited out: the
    upgrade retries its whole transaction and creates the store; with no patience it raises
    the lock error and writes nothing."""
    import time

    store = "sessions"
    db = tmp_path / f"{store}.db"
    db.touch()  # an empty file: the fresh path applies
    holder = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    released = threading.Timer(1.6, lambda: holder.execute("ROLLBACK"))
    try:
        with pytest.raises(Exception, match="locked"):
            migrate.upgrade(store, db, patience_s=0)
        assert db.stat().st_size == 0
        started = time.monotonic()
        released.start()
        report = migrate.upgrade(store, db)
        assert time.monotonic() - started >= 1.5
    finally:
        released.join()
        holder.close()
    assert "fresh" in report.step_seconds
    assert migrate.status(store, db).revision == migrate.head_revision(store)


def test_threads_of_one_process_create_one_missing_file(tmp_path):
    path = tmp_path / "t.db"
    reports, errors = [], []
    start = threading.Barrier(5)

    def run() -> None:
        try:
            start.wait()
            reports.append(migrate.upgrade("telemetry", path))
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == []
    assert sum("fresh" in r.step_seconds for r in reports) == 1
    assert sum(r.up_to_date for r in reports) == 4


@pytest.mark.parametrize("fast", [True, False], ids=["fresh-path", "revision-path"])
@pytest.mark.parametrize("store", ["telemetry", "sessions"])
def test_created_files_and_a_lasting_journal_are_owner_only(tmp_path, store, fast):
    """A TRUNCATE rollback journal outlives its transaction (hermes_data.engine): it must be
    as private as the database (it holds page images while a write runs)."""
    import os

    old = os.umask(0o022)
    try:
        path = tmp_path / "x.db"
        migrate.upgrade(store, path, fast_create=fast)
    finally:
        os.umask(old)
    for p in tmp_path.iterdir():
        assert oct(p.stat().st_mode & 0o777) == "0o600", p
