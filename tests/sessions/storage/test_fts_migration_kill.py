"""optimize-storage killed in real processes (spec sessions-ext-storage.md §3.6; acceptance
14–16 and the issue's "SIGKILL at random points resumes to the same end state"):
``os._exit`` at injected points inside the demote, after backfill chunks and inside a
teardown chunk, two runs at once, and SIGKILL at random times. Modest trial counts; the
200,000-message run is ``benchmarks/fts_migration.py``."""

from __future__ import annotations

import os
import random
import signal
import time

import pytest

from hermes_data.sessions.backends import sqlite_open
from hermes_data.sessions.store import SessionStore

from tests.sessions.storage.fts_migration_support import (WORDS, counts, fts_check, layout, legacy_file, meta,
                                    run_worker, search_ids, spawn_worker)

TERMS = WORDS[:6] + ("timeout", "deploy")


def _substring_rows(path, term: str) -> set[int]:
    """Ids of the rows whose searchable columns hold ``term`` anywhere (``TimeoutError``
    holds ``timeout``): what the gap supplement's LIKE compilation may add."""
    import sqlite3

    con = sqlite3.connect(path)
    try:
        return {r[0] for r in con.execute(
            "SELECT id FROM messages WHERE lower(coalesce(content, '') || ' ' || "
            "coalesce(tool_name, '') || ' ' || coalesce(tool_calls, '')) LIKE ?",
            (f"%{term}%",))}
    finally:
        con.close()


def _searchable_mid_migration(store, path, reference) -> None:
    """Mid-migration, search finds every row the reference finds; the gap supplement
    (docs/sessions-storage.md §3.6) answers the unindexed id window by LIKE, so for a term
    that also occurs inside a longer word it may add rows holding the term as a substring
    (the WORDS terms occur only as whole tokens: exactly the reference there)."""
    got = search_ids(store, TERMS)
    for term in TERMS:
        extra = set(got[term]) - set(reference[term])
        assert set(reference[term]) <= set(got[term]), term
        assert not extra or (term not in WORDS and extra <= _substring_rows(path, term)), \
            (term, sorted(extra))


def _reference(path) -> dict[str, list[int]]:
    with SessionStore(path) as s:
        return search_ids(s, TERMS)


def _settled(path, reference) -> None:
    objs = layout(path)
    assert not [n for n in objs if n.startswith("fts_v22_trash_")]
    assert "tool_name" in objs["messages_fts"]
    m = meta(path)
    assert m.get("fts_storage_version") == "3"
    assert not [k for k in m if k.startswith(("fts_rebuild", "fts_teardown"))]
    fts_check(path)
    n, docs = counts(path)
    assert n == docs
    sqlite_open.forget_stamps()
    with SessionStore(path) as s:
        assert search_ids(s, TERMS) == reference


def test_a_crash_inside_the_demote_leaves_the_legacy_layout_intact(tmp_path):
    """Acceptance 14."""
    path = legacy_file(tmp_path, extra=400)
    reference = _reference(path)
    before = layout(path)
    r = run_worker(path, "demote:before-commit")
    assert r.returncode == 77, r.stderr
    assert layout(path) == before  # legacy tables, shadow tables and triggers as they were
    assert not any(k.startswith("fts_rebuild") for k in meta(path))
    sqlite_open.forget_stamps()
    with SessionStore(path) as s:
        assert search_ids(s, TERMS) == reference
        s.append_message("20260801_090000_a1b2c3", "user", "fresh amber after the crash")
        reference["amber"] = sorted(reference["amber"] + [s.search_messages(
            "fresh amber")[0].id])
    r = run_worker(path)
    assert r.returncode == 0 and r.stdout.split() == ["True", "None"], r.stderr
    _settled(path, reference)


def test_a_kill_after_k_chunks_keeps_the_markers_and_a_rerun_resumes(tmp_path):
    """Acceptance 15: killed after 4 chunks of 100 ids, two opens neither rebuild nor clear
    the markers; the rerun resumes there and no row is indexed twice."""
    path = legacy_file(tmp_path, extra=1500)
    reference = _reference(path)
    r = run_worker(path, "step:after", 4, chunk=100)
    assert r.returncode == 77, r.stderr
    markers = {k: v for k, v in meta(path).items() if k.startswith("fts_rebuild")}
    assert markers["fts_rebuild_progress"] == "400"
    for _ in range(2):
        sqlite_open.forget_stamps()
        with SessionStore(path) as s:
            assert not any("rebuil" in x for x in s.open_repairs), s.open_repairs
            assert search_ids(s, TERMS) == reference  # the gap supplement covers the window
        assert {k: v for k, v in meta(path).items() if k.startswith("fts_rebuild")} == markers
    r = run_worker(path, chunk=100)
    assert r.returncode == 0 and r.stdout.split() == ["True", "None"], r.stderr
    _settled(path, reference)


def test_a_kill_inside_a_teardown_chunk_resumes_from_the_marker(tmp_path):
    path = legacy_file(tmp_path, extra=300)
    reference = _reference(path)
    r = run_worker(path, "trash:before-commit", 6, chunk=50)
    assert r.returncode == 77, r.stderr
    assert [n for n in layout(path) if n.startswith("fts_v22_trash_")]
    sqlite_open.forget_stamps()
    with SessionStore(path) as s:  # storage §2.1: the version is withheld while trash is left
        assert s.get_meta("fts_storage_version") is None
        assert s.fts_optimize_available()
    r = run_worker(path, chunk=50)
    assert r.returncode == 0, r.stderr
    _settled(path, reference)


def test_two_concurrent_runs_end_consistent(tmp_path):
    path = legacy_file(tmp_path, extra=2000)
    reference = _reference(path)
    procs = [spawn_worker(path, chunk=100) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert any(o.split() == ["True", "None"] for o, _e in outs), outs
    _settled(path, reference)


@pytest.mark.parametrize("trial", range(3))
def test_sigkill_at_a_random_time_resumes_to_the_same_end_state(tmp_path, trial):
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    path = legacy_file(tmp_path, extra=3000)
    reference = _reference(path)
    proc = spawn_worker(path, chunk=rng.choice((50, 100)))
    time.sleep(rng.uniform(0.5, 1.5))  # interpreter start-up, then anywhere in the run
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    sqlite_open.forget_stamps()
    with SessionStore(path) as s:  # searchable in whatever state the kill left
        _searchable_mid_migration(s, path, reference)
    r = run_worker(path, chunk=200)
    assert r.returncode == 0 and r.stdout.split() == ["True", "None"], (seed, r.stderr)
    _settled(path, reference)


def test_a_crash_between_the_two_steps_of_the_fallback_shape_opens_and_resumes(tmp_path):
    """Without ``writable_schema = RESET`` the demote takes two transactions; killed between
    them, the file has markers, no FTS tables or triggers and the old shadow tables under
    their own names: the next open moves those to trash before it recreates the tables (a
    full rebuild there, which clears the markers), search works, and a rerun settles."""
    path = legacy_file(tmp_path, extra=400)
    reference = _reference(path)
    r = run_worker(path, "demote:between", 1, 500, 120, "no-reset")
    assert r.returncode == 77, r.stderr
    objs = layout(path)
    assert "messages_fts" not in objs and "messages_fts_data" in objs
    assert "fts_rebuild_high_water" in meta(path)
    sqlite_open.forget_stamps()
    with SessionStore(path) as s:
        assert search_ids(s, TERMS) == reference
    assert [n for n in layout(path) if n.startswith("fts_v22_trash_")]
    r = run_worker(path, "none", 1, 500, 120, "no-reset")
    assert r.returncode == 0 and r.stdout.split() == ["True", "None"], r.stderr
    _settled(path, reference)
