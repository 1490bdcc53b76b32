"""Lineage walks (§3.3, §4.4): candidate ordering, cycles of every shape, query plans."""

from __future__ import annotations

import json
import time

import pytest

from hermes_data.sessions import sql


def _raw(store, *rows):
    with store.engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO sessions (id, source, started_at, parent_session_id, end_reason, ended_at, "
            "model_config) VALUES (?, ?, ?, ?, ?, ?, ?)", list(rows))


def _reparent(store, child, parent):
    with store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE sessions SET parent_session_id = ? WHERE id = ?", (parent, child))


def test_candidate_order_continued_then_live_then_last_active(store):
    now = time.time()
    _raw(store,
         ("p", "cli", now, None, "compression", now + 1, None),
         ("stale_new", "cli", now + 9, "p", "ws_orphan_reap", now + 10, None),
         ("live_old", "cli", now + 2, "p", None, None, None),
         ("live_new", "cli", now + 3, "p", None, None, None))
    # Two live candidates: LAST_ACTIVE decides, so a message makes the older one fresher.
    store.append_message("live_old", "user", "still talking", timestamp=now + 20)
    assert store.get_compression_tip("p") == "live_old"
    assert store.get_compression_chain("p") == ["p", "live_old"]
    # A candidate that itself continued beats every live one, whatever its activity.
    _raw(store, ("continued", "cli", now + 1.5, "p", "compression", now + 1.6, None),
         ("after", "cli", now + 1.7, "continued", None, None, None))
    assert store.get_compression_chain("p") == ["p", "continued", "after"]
    assert store.resolve_resume_session_id("p") == "after"


def test_single_candidate_is_taken_even_when_stale_and_forks_never_count(store):
    now = time.time()
    _raw(store,
         ("p", "cli", now, None, "compression", now + 1, None),
         ("only", "cli", now + 1, "p", "ws_orphan_reap", now + 2, None),
         ("br", "cli", now + 5, "p", None, None, json.dumps({"_branched_from": "p"})),
         ("dl", "cli", now + 6, "p", None, None, json.dumps({"_delegate_from": "p"})),
         ("tl", "tool", now + 7, "p", None, None, None))
    assert store.get_compression_chain("p") == ["p", "only"]
    assert store.get_compression_root("only") == "p"
    for fork in ("br", "dl", "tl"):
        assert store.get_compression_root(fork) == fork


def test_get_compression_lineage_is_upstreams_walk(store):
    """Issue 33: ``get_compression_lineage`` answers as upstream's: unknown id ⇒ ``[]``; an
    explicit fork ⇒ ``[id]``; root first through each compression parent's **earliest**
    non-fork child (``get_lineage_ids`` takes the freshest); a later sibling the walk does
    not pass ⇒ ``[id]``; otherwise the result holds the id asked for."""
    now = time.time()
    _raw(store,
         ("root", "cli", now, None, "compression", now + 1, None),
         ("early", "cli", now + 2, "root", "compression", now + 3, None),
         ("late", "cli", now + 4, "root", None, None, None),
         ("tip", "cli", now + 5, "early", None, None, None),
         ("br", "cli", now + 1.5, "root", None, None, json.dumps({"_branched_from": "root"})),
         ("tl", "tool", now + 1.2, "root", None, None, None),
         ("inherited", "cli", now + 6, "tip", None, None, json.dumps({"_delegate_from": "x"})),
         ("alone", "cli", now, None, None, None, json.dumps({"_branched_from": "gone"})))
    assert store.get_compression_lineage("nope") == [] and store.get_compression_lineage("") == []
    for member in ("root", "early", "tip"):
        assert store.get_compression_lineage(member) == ["root", "early", "tip"]
    assert store.get_compression_lineage("late") == ["late"]  # the walk took `early`
    assert store.get_compression_lineage("br") == ["br"] and store.get_compression_lineage("tl") == ["tl"]
    assert store.get_compression_lineage("inherited") == ["inherited"]  # tip never ended compression
    assert store.get_compression_lineage("alone") == ["alone"]  # a parentless row with a marker
    # ours keeps its documented semantics: the freshest continuation (a continued one first)
    assert store.get_lineage_ids("late") == ["root", "early", "tip"]
    with store.engine.begin() as conn:  # `late` continued too: ours now prefers it as well
        conn.exec_driver_sql("UPDATE sessions SET end_reason = 'compression', ended_at = ? "
                             "WHERE id = 'late'", (now + 7,))
    _raw(store, ("late2", "cli", now + 8, "late", None, None, None))
    assert store.get_compression_lineage("late2") == ["late2"]  # upstream still walks `early`
    assert store.get_compression_lineage("tip") == ["root", "early", "tip"]
    with store.engine.begin() as conn:  # a cycle root → early → tip → root ends both walks
        conn.exec_driver_sql("UPDATE sessions SET end_reason = 'compression', ended_at = ? "
                             "WHERE id = 'tip'", (now + 9,))
    _reparent(store, "root", "tip")
    assert store.get_compression_lineage("early") == ["tip", "root", "early"]


def test_forward_cycle_through_start_and_rho_shaped_upward_cycle(store):
    now = time.time()
    _raw(store,
         ("a", "cli", now, None, "compression", now, None),
         ("b", "cli", now, "a", "compression", now, None),
         ("c", "cli", now, "b", "compression", now, None),
         ("start", "cli", now, "a", None, None, None))
    _reparent(store, "a", "c")  # a -> b -> c -> a, with "start" hanging off the cycle
    # Forward walks can only come back to where they began.
    assert store.get_compression_chain("b")[:3] == ["b", "c", "a"]
    chain = store.get_compression_chain("a")
    assert chain[0] == "a" and len(chain) == len(set(chain))
    # Upward from "start": start, a, c, b, then a again — truncated at the first repeat.
    assert store.get_compression_root("start") == "b"
    assert store.get_resume_lineage_ids("start") == ["b", "c", "a", "start"]
    assert store.get_lineage_ids("start")[0] == "b"
    lineage = store.get_lineage_ids("start")
    assert len(lineage) == len(set(lineage))


def test_long_cycle_terminates_and_is_listed_once(store):
    now = time.time()
    n = 300
    ids = [f"r{i:03d}" for i in range(n)]
    _raw(store, *[(sid, "cli", now + i, ids[i - 1] if i else None, "compression", now + i, None)
                  for i, sid in enumerate(ids)])
    _reparent(store, ids[0], ids[-1])
    assert store.get_compression_chain(ids[0]) == ids
    assert store.get_compression_tip(ids[0]) == ids[-1]
    assert store.get_compression_root(ids[0]) == ids[1]
    assert store.get_resume_lineage_ids(ids[0]) == ids[1:] + ids[:1]


@pytest.mark.sqlite_only("EXPLAIN QUERY PLAN")
def test_walks_use_the_parent_index(store):
    with store.engine.connect() as conn:
        for stmt in (sql.TIP_OF, sql.CHAIN_FROM, sql.RESUME_TARGET_OF):
            plan = " | ".join(r[3] for r in conn.exec_driver_sql(
                "EXPLAIN QUERY PLAN " + str(stmt).replace(":start", "'x'")))
            assert "USING INDEX idx_sessions_parent (parent_session_id=?)" in plan, plan
            assert "SCAN c " not in plan + " " and "SCAN sessions" not in plan


@pytest.mark.sqlite_only("progress-handler VM-step counting")
def test_last_active_evaluated_only_for_parents_with_several_candidates(store):
    # VM work of a tip walk (progress-handler units of 100 steps): a second candidate at every
    # hop must cost far more than the walk itself, because only then is the ordering computed.
    from tests.sessions.conftest import make_chain
    ids = make_chain(store, 200)
    raw = store.backend._raw
    q = str(sql.TIP_OF)
    vm = [0]

    def progress() -> int:
        vm[0] += 1
        return 0

    raw.set_progress_handler(progress, 100)
    try:
        assert raw.execute(q, {"start": ids[0]}).fetchone()[0] == ids[-1]
        single = vm[0]
        with store.engine.begin() as conn:  # a second, stale candidate at every hop
            conn.exec_driver_sql(
                "INSERT INTO sessions (id, source, started_at, parent_session_id, end_reason, ended_at) "
                "SELECT id || '_stale', 'cli', started_at + 0.1, id, 'ws_orphan_reap', started_at + 0.2 "
                "FROM sessions WHERE end_reason = 'compression'")
        vm[0] = 0
        assert raw.execute(q, {"start": ids[0]}).fetchone()[0] == ids[-1]
        several = vm[0]
    finally:
        raw.set_progress_handler(None, 0)
    # Measured: 235 vs 795 units (3.4x); when every hop evaluated LAST_ACTIVE: 361 vs 570 (1.6x).
    assert several > 2.5 * single, (single, several)
