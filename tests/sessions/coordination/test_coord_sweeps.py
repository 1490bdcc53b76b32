"""Sweeps, archive and empty/ghost cleanup (spec sessions-ext-coordination.md §3.18–§3.19,
acceptance C40–C46)."""

from __future__ import annotations

import time

from hermes_data.sessions.coordination import sweeps

from tests.sessions.coordination.coord_support import chain, sql

HOUR = 3600.0
DAY = 86400.0


def _make(store, sid, source="tui", *, started_ago=2 * HOUR, parent=None, **kw):
    store.create_session(sid, source, parent_session_id=parent, **kw)
    sql(store, "UPDATE sessions SET started_at = ? WHERE id = ?", (time.time() - started_ago, sid))


def _reason(store, sid):
    s = store.get_session(sid)
    return None if s is None else s.end_reason


def test_c40_sweep_closes_only_orphans(store):
    """C40: the sweep closes an idle ``tui`` row (returned) and spares ``telegram``, excluded
    ids, pinned (with the flag), live leases, fresh children with old copied activity and
    rows of a fresh-heartbeat backend that started before them, while stale heartbeats spare
    nothing; the return equals the rows changed."""
    for sid in ("idle", "excl", "pin", "leased"):
        _make(store, sid)
    _make(store, "tg", "telegram")
    store.set_session_pinned("pin", True)
    assert store.try_acquire_session_turn_lease("leased", "turn")
    _make(store, "fresh", started_ago=0)
    store.append_message("fresh", "user", "copied")
    sql(store, "UPDATE messages SET timestamp = ? WHERE session_id = 'fresh'",
        (time.time() - 5 * HOUR,))
    closed = store.sweep_orphaned_sessions(max_idle_seconds=HOUR, exclude_ids=["excl"],
                                           exclude_pinned=True)
    assert closed == ["idle"] and _reason(store, "idle") == "startup_orphan_reap"
    assert all(_reason(store, s) is None for s in ("tg", "excl", "pin", "leased", "fresh"))
    assert store.sweep_orphaned_sessions(max_idle_seconds=0) == []
    assert store.sweep_orphaned_sessions(max_idle_seconds=HOUR, sources=["", None]) == []
    # The heartbeat table exists on every head store (s06_gateway; gateway H2).
    assert sql(store, "SELECT COUNT(*) FROM gateway_heartbeats") == [(0,)]
    try:
        _make(store, "owned")
        now = time.time()
        sql(store, "INSERT INTO gateway_heartbeats VALUES ('gw', 1, ?, ?, '', '')",
            (now - 3 * HOUR, now))
        spare = {"exclude_ids": ["excl"], "exclude_pinned": True}
        assert store.sweep_orphaned_sessions(max_idle_seconds=HOUR, **spare) == []
        assert store.sweep_orphaned_sessions(max_idle_seconds=HOUR,
                                             respect_gateway_heartbeats=False,
                                             **spare) == ["owned"]
        _make(store, "owned2")
        sql(store, "UPDATE gateway_heartbeats SET last_heartbeat = ?", (now - 3 * HOUR,))
        assert store.sweep_orphaned_sessions(max_idle_seconds=HOUR, **spare) == ["owned2"]
    finally:
        sql(store, "DELETE FROM gateway_heartbeats")


def test_c41_unarchive_recoverable(store):
    """C41: tip ended ``ws_orphan_reap`` ⇒ True, whole lineage unarchived, tip end fields
    NULL; tip ended ``user_exit`` or not archived ⇒ False, unchanged."""
    chain(store, "r", "t")
    store.end_session("t", "ws_orphan_reap")
    store.set_session_archived("r", True)
    assert store.unarchive_recoverable_session("r")
    assert not store.get_session("r").archived and not store.get_session("t").archived
    t = store.get_session("t")
    assert (t.ended_at, t.end_reason) == (None, None)
    assert not store.unarchive_recoverable_session("t")  # not archived
    chain(store, "r2", "t2")
    store.end_session("t2", "user_exit")
    store.set_session_archived("t2", True)
    assert not store.unarchive_recoverable_session("r2")
    assert store.get_session("t2").archived and _reason(store, "t2") == "user_exit"


def test_c42_archive_stale_lineages(store):
    """C42: ``archive_stale_sessions(3)`` archives a stale tip's whole chain, not a root with
    a recent tip; 0 archives nothing; pinned, live-lease and hidden ``Bot Chat`` lineages are
    spared; an open stale row is archived and stays open."""
    old = 5 * DAY
    chain(store, "sr", "st")
    chain(store, "rr", "rt")
    for sid in ("sr", "st", "rr"):
        sql(store, "UPDATE sessions SET started_at = ? WHERE id = ?", (time.time() - old, sid))
    for sid in ("pin", "lease", "bot", "open"):
        _make(store, sid, started_ago=old)
    store.set_session_pinned("pin", True)
    assert store.try_acquire_session_turn_lease("lease", "turn")
    sql(store, "UPDATE sessions SET hidden = 1, title = 'Bot Chat' WHERE id = 'bot'")
    assert store.archive_stale_sessions(0) == 0
    assert store.archive_stale_sessions(3) == 2
    archived = {r[0] for r in sql(store, "SELECT id FROM sessions WHERE archived = 1")}
    assert archived == {"sr", "st", "open"}
    assert store.get_session("open").ended_at is None


def test_c43_auto_archive_gate(store, monkeypatch):
    """C43: ``maybe_auto_archive`` is skipped within 24 h, runs when the stamp is two days in
    the future, reports an injected failure as ``error``, and records the stamp for a zero
    run."""
    first = store.maybe_auto_archive()
    assert (first.skipped, first.archived, first.error) == (False, 0, None)
    assert store.get_meta(sweeps.LAST_AUTO_ARCHIVE) is not None
    assert store.maybe_auto_archive().skipped
    store.set_meta(sweeps.LAST_AUTO_ARCHIVE, repr(time.time() + 2 * DAY))
    assert not store.maybe_auto_archive().skipped
    store.set_meta(sweeps.LAST_AUTO_ARCHIVE, "garbage")

    def boom(*a, **k):
        raise RuntimeError("injected")

    monkeypatch.setattr(sweeps, "archive_stale_sessions", boom)
    report = store.maybe_auto_archive()
    assert report.error is not None and "injected" in report.error


def test_c44_count_equals_delete(store):
    """C44: ``count_empty_sessions()`` equals what ``delete_empty_sessions()`` deletes; open,
    archived, pinned, rewound-only, segment and lock-holding rows are neither; children are
    orphaned."""
    for sid in ("e1", "e2", "open", "arch", "pin", "rew", "lock"):
        store.create_session(sid, "cli")
    store.create_child_session("e2", "kid", "branch")
    store.append_message("rew", "user", "x")
    store.rewind_to_message("rew", store.get_messages("rew")[0].id)
    chain(store, "seg0", "seg1")
    store.end_session("seg1", "user_exit")
    for sid in ("e1", "e2", "arch", "pin", "rew", "lock"):
        store.end_session(sid, "user_exit")
    store.set_session_archived("arch", True)
    store.set_session_pinned("pin", True)
    assert store.try_acquire_compression_lock("lock", "c")
    assert store.count_empty_sessions() == 2
    assert store.delete_empty_sessions() == 2
    assert store.get_session("e1") is None and store.get_session("e2") is None
    assert store.get_session("kid").parent_session_id is None
    assert store.count_empty_sessions() == 0
    assert all(store.get_session(s) for s in ("open", "arch", "pin", "rew", "lock", "seg0"))


def test_include_protected_is_upstreams_empty_rule(store):
    """Issue 33: ``include_protected=True`` counts and deletes as upstream's rule did —
    empty, ended, unarchived rows even when pinned, a lineage segment or under a live lock
    (the default spares those); open, archived and rewound-only rows stay either way."""
    for sid in ("open", "arch", "pin", "rew", "lock"):
        store.create_session(sid, "cli")
    store.append_message("rew", "user", "x")
    store.rewind_to_message("rew", store.get_messages("rew")[0].id)
    chain(store, "seg0", "seg1")
    store.end_session("seg1", "user_exit")
    for sid in ("arch", "pin", "rew", "lock"):
        store.end_session(sid, "user_exit")
    store.set_session_archived("arch", True)
    store.set_session_pinned("pin", True)
    assert store.try_acquire_compression_lock("lock", "c")
    assert store.count_empty_sessions() == 0 and store.delete_empty_sessions() == 0
    assert store.count_empty_sessions(include_protected=True) == 4
    assert store.delete_empty_sessions(include_protected=True) == 4
    gone = {s for s in ("open", "arch", "pin", "rew", "lock", "seg0", "seg1")
            if store.get_session(s) is None}
    assert gone == {"pin", "lock", "seg0", "seg1"}
    assert store.count_empty_sessions(include_protected=True) == 0


def test_c45_delete_session_if_empty(store, tmp_path):
    """C45: an open untitled empty childless row ⇒ True and ``<id>.json`` removed; titled,
    parent, pinned or live-lease rows ⇒ False."""
    (tmp_path / "s.json").write_text("{}")
    store.create_session("s", "cli")
    assert store.delete_session_if_empty("s", sessions_dir=tmp_path)
    assert store.get_session("s") is None and not (tmp_path / "s.json").exists()
    for sid in ("titled", "parent", "pin", "lease"):
        store.create_session(sid, "cli")
    store.set_session_title("titled", "T")
    store.create_child_session("parent", "kid", "branch")
    store.set_session_pinned("pin", True)
    assert store.try_acquire_session_turn_lease("lease", "turn")
    for sid in ("titled", "parent", "pin", "lease"):
        assert not store.delete_session_if_empty(sid), sid
        assert store.get_session(sid) is not None


def test_c46_ghost_prune(store):
    """C46: the ghost prune deletes a 25-hour-old empty untitled ended ``tui`` row, keeps a
    23-hour-old one and one with a child (no FK error), and deletes 1500 ghosts in one
    call."""
    now = time.time()
    rows = [(f"g{i:04d}", "tui", now - 25 * HOUR, now - 25 * HOUR, "tui_shutdown")
            for i in range(1500)]
    rows += [("young", "tui", now - 23 * HOUR, now, "tui_shutdown"),
             ("dad", "tui", now - 25 * HOUR, now, "tui_shutdown")]
    with store.engine.begin() as c:
        c.exec_driver_sql("INSERT INTO sessions (id, source, started_at, ended_at, end_reason) "
                          "VALUES (?, ?, ?, ?, ?)", rows)
    store.create_child_session("dad", "kid", "branch")
    assert store.prune_empty_ghost_sessions() == 1500
    assert store.get_session("young") and store.get_session("dad") and store.get_session("kid")
    assert sql(store, "SELECT COUNT(*) FROM sessions")[0][0] == 3
