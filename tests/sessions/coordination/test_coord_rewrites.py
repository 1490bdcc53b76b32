"""Transcript rewrites and in-place compaction (spec sessions-ext-coordination.md §3.15,
acceptance C25–C32)."""

from __future__ import annotations

import time

import pytest

from hermes_data.sessions.coordination import rewrites
from hermes_data.sessions.errors import (CompressionSessionBusyError,
                                         CompressionSessionClosedError,
                                         SessionCompressionInProgressError, SessionNotFoundError,
                                         SessionTurnLeaseLostError)

from tests.sessions.coordination.coord_support import chain, guard_row, put_guard, server_now, sql, where, worker

CALLS2 = [{"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
          {"id": "b", "type": "function", "function": {"name": "g", "arguments": "{}"}}]


def _rows(store, sid):
    """``(id, content, active, compacted)`` of every row, in id order."""
    return [(m.id, m.content, m.active, m.compacted)
            for m in store.get_messages(sid, include_inactive=True)]


def _seed(store, sid, n, prefix="m"):
    store.create_session(sid, "cli")
    store.append_messages_batch(sid, [{"role": "user" if i % 2 == 0 else "assistant",
                                       "content": f"{prefix}{i}"} for i in range(n)])


def _counters_match(store, sid):
    s = store.get_session(sid)
    active = store.get_messages(sid)
    tools = sum(len(m.tool_calls) if isinstance(m.tool_calls, list) else (1 if m.tool_calls
                                                                          else 0)
                for m in active)
    return s.message_count == len(active) and s.tool_call_count == tools


def test_c25_replace_modes(store):
    """C25: ``replace_messages`` default deletes ``compacted = 1`` rows, ``active_only`` keeps
    them; ``archive_dropped`` keeps old rows ``active=0, compacted=0`` (visible with
    ``include_inactive``), and on SQLite the flip writes no ``messages_fts*`` table."""
    _seed(store, "s", 4)
    store.archive_and_compact("s", [{"role": "user", "content": "summary"}])
    res = store.replace_messages("s", [{"role": "user", "content": "new"}], active_only=True)
    assert res.removed == 1 and len(res.inserted_ids) == 1
    assert sum(1 for r in _rows(store, "s") if r[3]) == 4
    res = store.replace_messages("s", [{"role": "user", "content": "fresh"}])
    assert res.removed == 5 and [r[1] for r in _rows(store, "s")] == ["fresh"]
    store.append_message("s", "assistant", "reply")
    traced: list[str] = []
    raw = store.backend._raw if store.backend.dialect == "sqlite" else None
    if raw is not None:
        raw.set_trace_callback(traced.append)
    try:
        res = store.replace_messages("s", [{"role": "user", "content": "x"}],
                                     archive_dropped=True)
    finally:
        if raw is not None:
            raw.set_trace_callback(None)
    assert (res.removed, res.archived) == (0, 2)
    rows = _rows(store, "s")
    assert [(r[1], r[2], r[3]) for r in rows] == [("fresh", False, False),
                                                  ("reply", False, False), ("x", True, False)]
    assert [m.content for m in store.get_messages("s")] == ["x"]
    if raw is not None:
        flip = next(i for i, t in enumerate(traced) if t.startswith("UPDATE messages SET active"))
        nested = []
        for t in traced[flip + 1:]:
            if not t.startswith("--"):
                break
            nested.append(t)
        assert not [t for t in nested if "messages_fts" in t], nested
    assert _counters_match(store, "s")


def test_c26_fenced_replace(store, monkeypatch):
    """C26: with ``reject_active_turn_lease``: a live foreign lease ⇒
    SessionTurnLeaseLostError, unchanged; a live foreign lock ⇒
    SessionCompressionInProgressError after ≈5 s of retries (shortened here); a DEAD lease
    holder ⇒ reclaimed, replaced."""
    _seed(store, "s", 2)
    before = _rows(store, "s")
    new = [{"role": "user", "content": "new"}]
    assert store.try_acquire_session_turn_lease("s", "turn-owner")
    with pytest.raises(SessionTurnLeaseLostError):
        store.replace_messages("s", new, reject_active_turn_lease=True)
    assert _rows(store, "s") == before
    store.release_session_turn_lease("s", "turn-owner")
    monkeypatch.setattr(rewrites, "COMPRESSION_BUSY_WAIT_S", 0.4)
    assert store.try_acquire_compression_lock("s", "compressor")
    t0 = time.monotonic()
    with pytest.raises(SessionCompressionInProgressError, match="being compressed"):
        store.replace_messages("s", new, reject_active_turn_lease=True)
    assert 0.35 <= time.monotonic() - t0 < 2.0
    assert _rows(store, "s") == before
    store.release_compression_lock("s", "compressor")
    host = "" if store.backend.dialect == "sqlite" else ":host=" + __import__("socket").gethostname()
    put_guard(store, "session_turn_leases", "s", f"pid=999999{host}:x", server_now(store) + 600)
    store.pid_exists = lambda pid: False
    store.replace_messages("s", new, reject_active_turn_lease=True)
    assert [r[1] for r in _rows(store, "s")] == ["new"]
    assert guard_row(store, "session_turn_leases", "s") is None


def test_c27_closed_and_unknown_sessions(store):
    """C27: replace / archive_and_compact / rewind / restore / clear on a compression-ended
    parent ⇒ CompressionSessionClosedError; the first four on an unknown id ⇒
    SessionNotFoundError; clear ⇒ 0."""
    chain(store, "p", "c")
    msg = [{"role": "user", "content": "x"}]
    calls = [lambda s: store.replace_messages(s, msg),
             lambda s: store.archive_and_compact(s, msg),
             lambda s: store.rewind_to_message(s, 1),
             lambda s: store.restore_rewound(s, 1)]
    for call in calls:
        with pytest.raises(CompressionSessionClosedError):
            call("p")
        with pytest.raises(SessionNotFoundError):
            call("nope")
    with pytest.raises(CompressionSessionClosedError):
        store.clear_messages("p")
    assert store.clear_messages("nope") == 0
    store.append_messages_batch("c", msg * 3)
    assert store.clear_messages("c") == 3 and store.get_session("c").message_count == 0


def test_clear_messages_allow_compression_parent_is_upstreams_clear(store):
    """``allow_compression_parent=True``: a compression-ended parent is cleared like any row
    (upstream's ``clear_messages``): every row gone, counters 0, the row still ended and its
    continuation untouched; without it the parent keeps its rows."""
    chain(store, "p", "c")
    store.append_message("c", "user", "kept")
    sql(store, "INSERT INTO messages (session_id, role, content, timestamp, tool_calls) "
               "VALUES ('p', 'user', 'old', 1.0, NULL), ('p', 'assistant', 'older', 2.0, NULL)")
    sql(store, "UPDATE sessions SET message_count = 2, tool_call_count = 1 WHERE id = 'p'")
    with pytest.raises(CompressionSessionClosedError):
        store.clear_messages("p")
    assert len(store.get_messages("p", include_inactive=True)) == 2
    assert store.clear_messages("p", allow_compression_parent=True) == 2
    assert store.get_messages("p", include_inactive=True) == []
    parent = store.get_session("p")
    assert (parent.message_count, parent.tool_call_count) == (0, 0)
    assert parent.end_reason == "compression" and parent.ended_at is not None
    assert [m.content for m in store.get_messages("c")] == ["kept"]
    assert store.clear_messages("nope", allow_compression_parent=True) == 0


def test_c28_compaction_without_watermark(store):
    """C28: without a watermark old rows become ``compacted = 1``, ``message_count =
    len(compacted_messages)``, default ``get_messages`` returns only the new rows, default
    search still finds an old term."""
    _seed(store, "s", 4)
    store.append_message("s", "user", "zanzibarite remembered")
    n = store.archive_and_compact("s", [{"role": "user", "content": "summary"},
                                        {"role": "assistant", "content": "ok"}])
    assert n == 2 and store.get_session("s").message_count == 2
    assert [m.content for m in store.get_messages("s")] == ["summary", "ok"]
    assert all(r[3] and not r[2] for r in _rows(store, "s")[:5])
    hits = store.search_messages("zanzibarite")
    assert [h.session_id for h in hits] == ["s"]


def test_c29_appends_above_the_watermark_are_cloned(store):
    """C29: two rows appended after the watermark (one with two tool calls) follow the
    compacted set: new ids, byte-identical columns (an upstream extra column too, on
    SQLite), originals ``active=0, compacted=0``, ``tool_call_count`` includes 2."""
    sqlite = store.backend.dialect == "sqlite"
    if sqlite:
        sql(store, "ALTER TABLE messages ADD COLUMN upstream_extra TEXT")
    _seed(store, "s", 3)
    wm = store.get_active_message_watermark("s")
    a = store.append_message("s", "assistant", "calling", tool_calls=CALLS2,
                             reasoning="why", finish_reason="tool_calls")
    b = store.append_message("s", "tool", "result", tool_call_id="a", tool_name="f")
    if sqlite:
        sql(store, "UPDATE messages SET upstream_extra = 'kept' WHERE id = ?", (a,))
    assert store.archive_and_compact("s", [{"role": "user", "content": "sum"}],
                                     watermark=wm) == 3
    active = store.get_messages("s")
    assert [m.content for m in active] == ["sum", "calling", "result"]
    assert active[1].id > active[0].id > b
    cols = "role, content, tool_call_id, tool_calls, tool_name, timestamp, reasoning, " \
        "finish_reason" + (", upstream_extra" if sqlite else "")
    got = sql(store, f"SELECT {cols} FROM messages WHERE id IN (?, ?, ?, ?) ORDER BY id",
              (a, b, active[1].id, active[2].id))
    assert got[0] == got[2] and got[1] == got[3]
    orig = {r[0]: r for r in _rows(store, "s")}
    assert (orig[a][2], orig[a][3], orig[b][2], orig[b][3]) == (False, False, False, False)
    assert store.get_session("s").tool_call_count == 2 and _counters_match(store, "s")


def test_c30_tail_count_bound_by_the_watermark(store):
    """C30: ``tail_count=2`` plus an append above the watermark: the two newest rows ≤
    watermark and the append's original are ``compacted = 0``, the rest ``compacted = 1``;
    a term only in a tail row is found once."""
    _seed(store, "s", 4)
    sql(store, "UPDATE messages SET content = 'quetzalcoatlite tail' WHERE id = "
               "(SELECT MAX(id) FROM messages WHERE session_id = 's')")
    wm = store.get_active_message_watermark("s")
    extra = store.append_message("s", "user", "late")
    store.archive_and_compact("s", [{"role": "user", "content": "sum"},
                                    {"role": "user", "content": "m2"},
                                    {"role": "assistant", "content": "quetzalcoatlite tail"}],
                              watermark=wm, tail_count=2)
    old = {r[0]: r for r in _rows(store, "s") if r[0] <= extra}
    ids = sorted(old)
    assert [old[i][3] for i in ids] == [True, True, False, False, False]
    assert not any(old[i][2] for i in ids)
    assert len(store.search_messages("quetzalcoatlite")) == 1


def test_c31_compaction_refusals(store):
    """C31: a reclaimed ``lock_holder`` ⇒ CompressionSessionBusyError in < 0.5 s, nothing
    changed; a patch ``{"a": 1, "b": None}`` adds ``a``, drops ``b``, keeps
    ``_branched_from``; malformed stored JSON is replaced; empty messages, too large
    ``tail_count`` or a patch naming ``_branched_from`` ⇒ ValueError, nothing written."""
    _seed(store, "s", 2)
    before = _rows(store, "s")
    put_guard(store, "compression_locks", "s", "new-owner", server_now(store) + 600)
    t0 = time.monotonic()
    with pytest.raises(CompressionSessionBusyError):
        store.archive_and_compact("s", [{"role": "user", "content": "x"}], lock_holder="old")
    assert time.monotonic() - t0 < 0.5 and _rows(store, "s") == before
    sql(store, "UPDATE sessions SET model_config = ? WHERE id = 's'",
        ('{"b": 2, "_branched_from": "p"}',))
    store.archive_and_compact("s", [{"role": "user", "content": "x"}], lock_holder="new-owner",
                              model_config_patch={"a": 1, "b": None})
    import json
    assert json.loads(store.get_session("s").model_config) == {"a": 1, "_branched_from": "p"}
    sql(store, "UPDATE sessions SET model_config = '{not json' WHERE id = 's'")
    store.archive_and_compact("s", [{"role": "user", "content": "y"}],
                              model_config_patch={"a": 2})
    assert json.loads(store.get_session("s").model_config) == {"a": 2}
    before = _rows(store, "s")
    for args, kw in (([],), {}), (([{"role": "user", "content": "z"}],), {"tail_count": 2}), \
            (([{"role": "user", "content": "z"}],), {"model_config_patch": {"_branched_from": 1}}):
        with pytest.raises(ValueError):
            store.archive_and_compact("s", *args, **kw)
    assert _rows(store, "s") == before


def test_c32_appends_during_watermarked_compactions(store):
    """C32 (processes): appends every 10 ms during 20 watermarked compactions: every
    appended text appears exactly once among the active rows. Each compaction carries the
    rows at or below its watermark verbatim, so nothing may be lost or doubled."""
    _seed(store, "s", 2)
    proc = worker("append-loop", where(store), "s", "40")
    for _ in range(20):
        wm = store.get_active_message_watermark("s")
        carried = [{"role": m.role, "content": m.content} for m in store.get_messages("s")
                   if m.id <= wm]
        time.sleep(0.02)
        store.archive_and_compact("s", carried, watermark=wm)
    assert proc.stdout.readline().strip() == "done"
    proc.wait(timeout=30)
    texts = [m.content for m in store.get_messages("s")]
    appended = [t for t in texts if t.startswith("appended-")]
    assert sorted(appended) == sorted(f"appended-{i}" for i in range(40))
    assert _counters_match(store, "s")
