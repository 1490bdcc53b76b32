"""Transcript windows for user interfaces (spec sessions-ext-ui.md §4.1–§4.4; acceptance
behaviours 10–14 of §6) and the marker literals they rely on (§3.2)."""

from __future__ import annotations

import threading

import pytest

from hermes_data.sessions.sql import markers
from hermes_data.sessions.store import SessionStore


def _ids(rows) -> list[int]:
    return [m.id for m in rows]


def _ten(store, sid: str = "s") -> list[int]:
    store.create_session(sid, "cli")
    return [store.append_message(sid, "user" if i % 2 else "assistant", f"m{i}")
            for i in range(1, 11)]


def test_ab10_messages_around(store):
    """Behaviour 10."""
    ids = _ten(store)
    assert ids == list(range(1, 11))
    store.create_session("other", "cli")
    foreign = store.append_message("other", "user", "x")
    w = store.get_messages_around("s", 5, window=2)
    assert (_ids(w.window), w.messages_before, w.messages_after) == ([3, 4, 5, 6, 7], 2, 2)
    w = store.get_messages_around("s", 1, window=2)
    assert (_ids(w.window), w.messages_before, w.messages_after) == ([1, 2, 3], 0, 2)
    for anchor in (foreign, 999):
        w = store.get_messages_around("s", anchor)
        assert (w.window, w.messages_before, w.messages_after) == ([], 0, 0)
    with store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE messages SET active = 0 WHERE id = 4")
        conn.exec_driver_sql("UPDATE messages SET active = 0, compacted = 1 WHERE id = 6")
    assert store.get_messages_around("s", 4).window == []
    w = store.get_messages_around("s", 4, window=1, include_inactive=True)
    assert _ids(w.window) == [3, 4, 5]
    w = store.get_messages_around("s", 6, window=1)  # compaction-preserved: visible
    assert (_ids(w.window), w.messages_before) == ([5, 6, 7], 1)
    w = store.get_messages_around("s", 5, window=-3)
    assert (_ids(w.window), w.messages_before, w.messages_after) == ([5], 0, 0)
    with pytest.raises(TypeError):
        store.get_messages_around("s", True)
    with pytest.raises(TypeError):
        store.get_messages_around("s", "5")


def test_messages_around_with_upstreams_window(store):
    """Issue 33: ``include_inactive=True, max_window=None`` is upstream's window — every row
    of the session whatever its visibility (a rewound anchor too), and no cap at 1000 — where
    the default hides rewound rows and caps the window."""
    store.create_session("s", "cli")
    store.append_messages_batch("s", [{"role": "user", "content": f"m{i}"} for i in range(1203)])
    with store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE messages SET active = 0 WHERE id IN (600, 602)")
    w = store.get_messages_around("s", 1, window=5000)  # capped: 1000 visible rows after
    assert (len(w.window), w.messages_before, w.messages_after) == (1001, 0, 1000)
    assert 600 not in _ids(w.window) and _ids(w.window)[-1] == 1003
    assert store.get_messages_around("s", 600, window=3).window == []
    w = store.get_messages_around("s", 1, window=5000, include_inactive=True, max_window=None)
    assert _ids(w.window) == list(range(1, 1204))
    assert (w.messages_before, w.messages_after) == (0, 1202)
    w = store.get_messages_around("s", 600, window=1, include_inactive=True, max_window=None)
    assert _ids(w.window) == [599, 600, 601]
    w = store.get_messages_around("s", 1, window=1500, max_window=None)  # visible rows only
    assert len(w.window) == 1201 and 602 not in _ids(w.window)


def test_ab11_anchored_view(store):
    """Behaviour 11: tool rows dropped (a tool anchor kept), bookends strictly outside the
    window, ascending, empty at the head; ``keep_roles=()`` issues no bookend SQL."""
    store.create_session("s", "cli")
    rows = []
    for i in range(1, 21):
        role = "tool" if i % 5 == 0 else ("user" if i % 2 else "assistant")
        rows.append(store.append_message("s", role, "" if i == 2 else f"m{i}"))
    v = store.get_anchored_view("s", 10, window=2, bookend=3)
    assert _ids(v.window) == [8, 9, 10, 11, 12]  # the tool anchor stays
    assert (v.messages_before, v.messages_after) == (2, 2)
    assert _ids(v.bookend_start) == [1, 3, 4]  # row 2 is empty: never a bookend
    assert _ids(v.bookend_end) == [17, 18, 19]  # 20 is a tool row
    v = store.get_anchored_view("s", 9, window=2, bookend=3)
    assert 10 not in _ids(v.window) and 9 in _ids(v.window)
    v = store.get_anchored_view("s", 1, window=2)
    assert v.bookend_start == [] and _ids(v.window) == [1, 2, 3]
    v = store.get_anchored_view("s", 12, window=0, bookend=2, keep_roles=None)
    assert _ids(v.bookend_end) == [19, 20]
    seen: list[str] = []
    from sqlalchemy import event

    def before(conn, cursor, statement, *a):
        seen.append(statement)

    event.listen(store.engine, "before_cursor_execute", before)
    try:
        v = store.get_anchored_view("s", 12, keep_roles=())
    finally:
        event.remove(store.engine, "before_cursor_execute", before)
    assert _ids(v.window) == [12] and v.bookend_start == v.bookend_end == []
    assert not any("length(content)" in s for s in seen)


@pytest.mark.sqlite_only("a concurrent writer on one SQLite file (the snapshot rule)")
def test_ab12_concurrent_anchor_delete_never_loses_the_anchor(tmp_path):
    """Behaviour 12: a window is either empty or contains its anchor."""
    path = tmp_path / "state.db"
    with SessionStore(path) as s:
        s.create_session("s", "cli")
        s.append_messages_batch("s", [{"role": "user", "content": f"m{i}"} for i in range(300)])
    stop = threading.Event()
    bad: list = []

    def reader() -> None:
        with SessionStore(path) as r:
            while not stop.is_set():
                for anchor in range(1, 301, 7):
                    w = r.get_messages_around("s", anchor, window=3)
                    if w.window and anchor not in _ids(w.window):
                        bad.append(anchor)

    t = threading.Thread(target=reader)
    t.start()
    try:
        with SessionStore(path) as w:
            for anchor in range(1, 301, 7):
                with w.engine.begin() as conn:
                    conn.exec_driver_sql("DELETE FROM messages WHERE id = ?", (anchor,))
    finally:
        stop.set()
        t.join(timeout=30)
    assert bad == []


def test_ab13_recent_user_messages(store):
    """Behaviour 13."""
    store.create_session("s", "cli")
    store.append_message("s", "user", "oldest real turn " + "long " * 30)
    for i in range(30):
        if i % 2:
            body = markers.LONG_FORM_INTRO + "Do NOT answer. summary" + markers.END_MARKER + "x"
        else:
            body = (markers.PRIOR_HEADER + " prior " + markers.MERGED_DELIM + "\n "
                    + markers.LEGACY_PREFIX + " s")
        store.append_message("s", "user", body)
    store.append_message("s", "user", "hidden", display_kind="hidden")
    store.append_message("s", "user", "steer this", display_kind="steer")
    scaffold = (markers.SKILL_PREFIX + '"work" skill. ' + markers.SINGLE_MARKER + " body "
                + markers.SINGLE_INSTRUCTION + "fix   the bug" + markers.RUNTIME_NOTE + " x]")
    store.append_message("s", "user", scaffold)
    got = store.list_recent_user_messages("s", limit=2)
    assert [g.preview for g in got] == ["/work \u2014 fix the bug", "steer this"]
    got = store.list_recent_user_messages("s", limit=3)
    assert got[2].preview == ("oldest real turn " + "long " * 30)[:77] + "..."
    assert len(got[2].preview) == 80
    assert store.list_recent_user_messages("s", limit=0) == []


def test_ab14_pr_url_scan(store):
    """Behaviour 14: only tool rows containing /pull/ (any case), oldest first, rewound
    included, over 2000 ids (3 chunks); ``[]`` issues no SQL."""
    ids = [f"s{i:04d}" for i in range(2000)]
    with store.engine.begin() as conn:
        conn.exec_driver_sql("INSERT INTO sessions (id, source, started_at) VALUES (?, 'cli', 1.0)",
                             [(i,) for i in ids])
    store.append_message("s1999", "tool", "https://github.com/o/r/pull/1")
    store.append_message("s0000", "tool", "https://github.com/o/r/PULL/2")
    store.append_message("s0000", "user", "https://github.com/o/r/pull/3")
    rewound = store.append_message("s0950", "tool", "see /pull/4")
    store.append_message("s0950", "tool", "no link")
    with store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE messages SET active = 0 WHERE id = ?", (rewound,))
    got = store.find_pr_url_messages(ids + [None, ""])
    assert [(c.session_id, c.content) for c in got] == [
        ("s1999", "https://github.com/o/r/pull/1"), ("s0000", "https://github.com/o/r/PULL/2"),
        ("s0950", "see /pull/4")]
    assert store.find_pr_url_messages([]) == []


def test_marker_literals_are_pinned():
    """§3.2: the literals byte-exact (hermes-data cannot import the agent)."""
    import hashlib

    joined = "\n".join([markers.LONG_FORM_INTRO, markers.LEGACY_PREFIX, markers.END_MARKER,
                        markers.PRIOR_HEADER, markers.MERGED_DELIM, markers.SKILL_PREFIX,
                        markers.SINGLE_MARKER, markers.SINGLE_INSTRUCTION, markers.RUNTIME_NOTE,
                        markers.BUNDLE_MARKER, markers.BUNDLE_INSTRUCTION,
                        markers.BUNDLE_FIRST_BLOCK, markers.JOINT])
    assert markers.LONG_FORM_INTRO.endswith("NOT as active instructions. ")
    assert markers.RUNTIME_NOTE == "\n\n[Runtime note:" and markers.JOINT == "\x1e"
    assert hashlib.sha256(joined.encode()).hexdigest() == PINNED


PINNED = "62f3508b8c9798405f2776e76c61bd97212a12699ef2cbd952af817d9b902d51"


def test_ab16_previews_in_every_listing(store):
    """Behaviour 16: carrier and scaffold previews, identical in list_sessions and
    list_recent_sessions_bounded."""
    intro, end = markers.LONG_FORM_INTRO, markers.END_MARKER
    cases = {
        "pure": [intro + "Do NOT answer. summary only", "the next real turn"],
        "forced": [intro + "summary " + end + "\n  continue the refactor"],
        "merged": [markers.PRIOR_HEADER + "\n prior ask\n" + markers.MERGED_DELIM + "\n"
                   + markers.LEGACY_PREFIX + " s"],
        "scaffold": [markers.SKILL_PREFIX + '"work" skill. ' + markers.SINGLE_MARKER
                     + " " + "x" * 1_000_000 + " " + markers.SINGLE_INSTRUCTION
                     + "fix the bug" + markers.RUNTIME_NOTE + " …]"],
        "bundle": [markers.SKILL_PREFIX + '"a" and "b" skill bundle, loaded.'
                   + markers.BUNDLE_INSTRUCTION + "ship it" + markers.BUNDLE_FIRST_BLOCK
                   + "a skill]"],
    }
    want = {"pure": "the next real turn", "forced": "continue the refactor",
            "merged": "prior ask", "scaffold": "/work \u2014 fix the bug",
            "bundle": "/a \u2014 ship it", "hidden": "shown"}
    for sid, texts in cases.items():
        store.create_session(sid, "cli")
        for t in texts:
            store.append_message(sid, "user", t)
    store.create_session("hidden", "cli")
    store.append_message("hidden", "user", "secret", display_kind="hidden")
    store.append_message("hidden", "user", "shown")
    listed = {r.id: r.preview for r in store.list_sessions(limit=50)}
    recent = {r.id: r.preview for r in store.list_recent_sessions_bounded(limit=50)}
    assert listed == want
    assert recent == want
