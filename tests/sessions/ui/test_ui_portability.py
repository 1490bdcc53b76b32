"""Export and import (spec sessions-ext-ui.md §4.11–§4.12; acceptance behaviours 28–37 of
§6 and the issue's round trip)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap

import pytest
from sqlalchemy import event

from hermes_data.sessions.errors import SessionExportTooLargeError
from hermes_data.sessions.store import SessionStore

from tests.sessions.conftest import make_chain


def _rich_session(store, sid: str = "a") -> None:
    store.create_session(sid, "cli", model="m1", system_prompt="be kind", cwd="/w")
    store.append_message(sid, "user", [{"type": "text", "text": "看图"},
                                       {"type": "image_url", "image_url": {"url": "data:x"}}])
    store.append_message(sid, "user", "lone \ud800 surrogate")
    store.append_message(sid, "assistant", "done", tool_calls=[{"id": "c1", "type": "function",
                                                                "function": {"name": "f"}}],
                         reasoning_details='[{"type": "summary", "text": "why"}]',
                         display_metadata={"pin": True})
    store.append_message(sid, "tool", "out", tool_call_id="c1", tool_name="f")
    store.update_token_counts(sid, input_tokens=11, output_tokens=7)


def _strip(doc: dict) -> dict:
    """Fields an import deliberately does not restore (routing, activity, owner, counters of
    the row's own history)."""
    out = {k: v for k, v in doc.items() if k not in ("title_source", "profile_name",
                                                     "last_activity_at")}
    out["messages"] = [{k: v for k, v in m.items() if k != "id"} for m in doc["messages"]]
    return out


def test_ab28_export_import_round_trip(store, tmp_path):
    """Behaviour 28: content (multimodal, lone surrogate, tool_calls, display_metadata,
    reasoning JSON not double-encoded) and counters survive; no display keys in the JSON."""
    _rich_session(store)
    doc = store.export_session("a").to_json()
    text = json.dumps(doc, ensure_ascii=False, default=str)
    assert "display_identity" not in text and "display_order" not in text
    with SessionStore(tmp_path / "target.db") as target:
        result = target.import_sessions([json.loads(text)])
        assert result.ok and result.imported_ids == ["a"], result
        again = target.export_session("a").to_json()
    assert _strip(again) == _strip(json.loads(text))
    assert again["messages"][1]["content"] == "lone \ufffd surrogate"
    assert again["messages"][2]["reasoning_details"] == '[{"type": "summary", "text": "why"}]'
    assert again["input_tokens"] == 11 and again["message_count"] == 4
    assert again["tool_call_count"] == 1


@pytest.mark.sqlite_only("the shared legacy fixture is a SQLite file")
def test_issue_round_trip_of_the_adopted_legacy_store(legacy_copy, tmp_path):
    """Issue 19 acceptance 2: export_all of the adopted fixture → import into an empty store →
    export_all gives the same documents (ids, lineage, titles, messages)."""
    with SessionStore(legacy_copy) as s:
        first = [e.to_json() for e in s.iter_export_all(max_messages=0)]
    assert first
    with SessionStore(tmp_path / "empty.db") as t:
        for lo in range(0, len(first), 500):
            r = t.import_sessions(json.loads(json.dumps(first[lo:lo + 500], default=str)))
            assert r.ok, r.errors[:3]
        second = [e.to_json() for e in t.iter_export_all(max_messages=0)]

    def view(doc):
        return (doc["id"], doc["parent_session_id"], doc["title"],
                [(m["role"], m["content"], m["tool_calls"]) for m in doc["messages"]])

    assert [view(d) for d in second] == [view(d) for d in first]


def _raw_messages(store, rows) -> None:
    """Rows of ended chain segments (appends are refused there), written directly."""
    with store.engine.begin() as conn:
        conn.exec_driver_sql("INSERT INTO messages (session_id, role, content, timestamp) "
                             "VALUES (?, 'user', ?, 1.0)", rows)


def test_ab29_export_guard_and_lineage_segments(store):
    """Behaviour 29: over the limit ⇒ SessionExportTooLargeError unless 0 (no COUNT); a
    lineage whose segments are each under the limit exports although the sum is over it."""
    store.create_session("big", "cli")
    store.append_messages_batch("big", [{"role": "user", "content": f"m{i}"} for i in range(4)])
    with pytest.raises(SessionExportTooLargeError):
        store.export_session("big", max_messages=3)
    seen: list[str] = []

    def before(conn, cursor, statement, *a):
        seen.append(statement)

    event.listen(store.engine, "before_cursor_execute", before)
    try:
        assert len(store.export_session("big", max_messages=0).messages) == 4
    finally:
        event.remove(store.engine, "before_cursor_execute", before)
    assert not any("COUNT(" in s.upper() for s in seen)
    ids = make_chain(store, 3, prefix="seg")
    _raw_messages(store, [(sid, sid + str(i)) for sid in ids for i in range(3)])
    lin = store.export_session_lineage(ids[1], max_messages=3)
    assert lin.message_count == 9


def test_ab30_lineage_export(store):
    """Behaviour 30: root→tip segments, tip id, root title for an untitled tip, total count;
    a /branch child is its own lineage."""
    ids = make_chain(store, 3, prefix="lin")
    _raw_messages(store, [(sid, f"in {sid}") for sid in ids])
    store.set_session_title(ids[0], "Root title")
    lin = store.export_session_lineage(ids[1])
    assert lin.lineage_session_ids == ids and lin.session["id"] == ids[-1]
    assert lin.session["title"] == "Root title" and lin.message_count == 3
    assert [m.content for m in lin.messages] == [f"in {s}" for s in ids]
    store.create_session("br", "cli", parent_session_id=ids[-1],
                         model_config={"_branched_from": ids[-1]})
    assert store.export_session_lineage("br").lineage_session_ids == ["br"]


def test_lineage_to_json_carries_segments(store):
    """Issue 33: the lineage document carries ``segments`` (each segment's own export
    document, root → tip) as upstream's ``export_session_lineage`` dict does, beside the ids,
    the total count and the concatenated messages; importing it back warns about nothing."""
    ids = make_chain(store, 3, prefix="jl")
    _raw_messages(store, [(sid, f"in {sid}") for sid in ids])
    doc = store.export_session_lineage(ids[0]).to_json()
    assert [seg["id"] for seg in doc["segments"]] == ids == doc["lineage_session_ids"]
    assert [seg == store.export_session(sid).to_json()
            for seg, sid in zip(doc["segments"], ids)] == [True] * 3
    assert [m["content"] for seg in doc["segments"] for m in seg["messages"]] == \
        [m["content"] for m in doc["messages"]] == [f"in {s}" for s in ids]
    assert doc["id"] == ids[-1] and doc["message_count"] == 3
    json.dumps(doc, default=str)
    doc["id"] = "copy"
    r = store.import_sessions([doc])
    assert r.ok and r.imported_ids == ["copy"] and r.warnings == []


def test_ab31_iter_export_all_order_and_source(store):
    """Behaviour 31 (lean; the 150,000-session memory run belongs in benchmarks/): keyset
    order ``started_at, id`` across pages, ``source`` filter."""
    rows = [(f"x{i:04d}", "cron" if i % 3 == 0 else "cli", 1_700_000_000.0 + (i % 7))
            for i in range(1100)]
    with store.engine.begin() as conn:
        conn.exec_driver_sql("INSERT INTO sessions (id, source, started_at) VALUES (?, ?, ?)",
                             rows)
    got = [e.id for e in store.iter_export_all()]
    assert got == [r[0] for r in sorted(rows, key=lambda r: (r[2], r[0]))]
    cron = [e.id for e in store.iter_export_all(source="cron")]
    assert cron == [r[0] for r in sorted(rows, key=lambda r: (r[2], r[0])) if r[1] == "cron"]
    assert len(store.export_all("cron")) == len(cron)


def test_ab32_validation_writes_nothing(store):
    """Behaviour 32."""
    with pytest.raises(ValueError):
        store.import_sessions([{"id": str(i)} for i in range(501)])
    with pytest.raises(ValueError):
        store.import_sessions({"id": "x"})
    bad = [
        {"id": "a", "messages": [{"role": "user"}] * 10_001},
        {"id": "dup"}, {"id": "dup"},
        {"id": "b", "messages": ["not an object"]},
        {"id": "c", "model_config": "[1]"},
        {"id": "d", "system_prompt": "x" * (5 * 1024 * 1024)},
        {"id": "e", "title": "t" * 101},
    ]
    r = store.import_sessions(bad)
    assert not r.ok and r.imported == 0
    assert {i.index for i in r.errors} == {0, 2, 3, 4, 5, 6}
    many = [{"id": f"m{i}", "messages": [{"role": "user", "content": "x"}] * 10_000}
            for i in range(5)] + [{"id": "m5", "messages": [{"role": "user"}]}]
    r = store.import_sessions(many)
    assert not r.ok and any("in total" in i.error for i in r.errors)
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT COUNT(*) FROM sessions").scalar() == 0


def test_import_rejections_carry_upstream_phrases(store):
    """Issue 33: each rejection leads with upstream's wording (callers show or match it), ours
    (sizes, limits, the offending index) follows."""
    with pytest.raises(ValueError, match="sessions must be a list"):
        store.import_sessions({"id": "x"})
    with pytest.raises(ValueError, match="sessions must contain at most 500 entries"):
        store.import_sessions([{"id": str(i)} for i in range(501)])
    bad = [
        "not an object",
        {"messages": []},
        {"id": "dup"}, {"id": "dup"},
        {"id": "big", "system_prompt": "x" * (5 * 1024 * 1024)},
        {"id": "many", "messages": [{"role": "user"}] * 10_001},
        {"id": "m1", "messages": "nope"},
        {"id": "m2", "messages": [{"role": "user"}, 7]},
        {"id": "m3", "messages": [{"role": ""}]},
        {"id": "m4", "messages": [{"role": "tool", "tool_name": 5}]},
        {"id": "m5", "messages": [{"role": "user", "token_count": "x"}]},
        {"id": "mc", "model_config": "[1]"},
        {"id": "t", "cwd": 3},
    ]
    r = store.import_sessions(bad)
    got = {i.index: i.error for i in r.errors}
    assert not r.ok and r.imported == 0
    expected = {0: "session must be an object", 1: "session id is required",
                3: "duplicate session id", 4: "session exceeds the import size limit",
                5: "messages exceeds the per-session import limit", 6: "messages must be a list",
                7: "messages must contain only objects",
                8: "messages[0].role must be a non-empty string",
                9: "tool_name must be a string", 10: "token_count must be an integer",
                11: "model_config must be a JSON object", 12: "cwd must be a string"}
    for index, phrase in expected.items():
        assert phrase in got[index], (index, got[index])
    assert "5242880" in got[4] and "10000" in got[5]  # ours: the limit itself
    many = [{"id": f"m{i}", "messages": [{"role": "user", "content": "x"}] * 10_000}
            for i in range(5)] + [{"id": "m5", "messages": [{"role": "user"}]}]
    r = store.import_sessions(many)
    assert any("messages exceeds the total import limit" in i.error for i in r.errors)
    big = [{"id": f"b{i}", "system_prompt": "y" * (4 * 1024 * 1024)} for i in range(7)]
    r = store.import_sessions(big)
    assert any("import exceeds the total size limit" in i.error for i in r.errors)


def test_ab33_skips_links_and_detaches(store):
    """Behaviour 33."""
    store.create_session("old", "cli", model="keep")
    r = store.import_sessions([
        {"id": "old", "model": "changed"},
        {"id": "child", "parent_session_id": "parent"},
        {"id": "parent"},
        {"id": "orphan", "parent_session_id": "nowhere"},
        {"id": "x", "parent_session_id": "y"}, {"id": "y", "parent_session_id": "x"},
    ])
    assert r.ok and r.skipped_ids == ["old"] and r.detached == 2
    assert store.get_session("old").model == "keep"
    assert store.get_session("child").parent_session_id == "parent"
    assert store.get_session("orphan").parent_session_id is None
    links = {store.get_session("x").parent_session_id, store.get_session("y").parent_session_id}
    assert None in links


@pytest.mark.sqlite_only("a title held by another session (the unique index), SQLite path")
def test_ab34_imported_rows_and_held_title(tmp_path):
    """Behaviour 34."""
    with SessionStore(tmp_path / "s.db") as s:
        s.create_session("mine", "cli")
        s.set_session_title("mine", "Taken")
        r = s.import_sessions([{"id": "imp", "source": None, "started_at": 1e300,
                                "session_key": "k", "chat_id": "c", "last_activity_at": 5.0,
                                "title_source": "auto", "pinned": 1, "title": "Taken"}])
        assert r.ok and len(r.warnings) == 1 and "Taken" in r.warnings[0]
        row = s.get_session("imp")
    assert (row.session_key, row.chat_id, row.last_activity_at, row.title_source) == (None,) * 4
    assert row.pinned == 0 and row.source == "import" and row.title is None
    assert abs(row.started_at - __import__("time").time()) < 60


@pytest.mark.sqlite_only("killing a process inside a SQLite import transaction")
def test_ab35_killed_import_leaves_nothing(tmp_path):
    """Behaviour 35 (lean: 5,000 messages): no imported session, FTS integrity passes, and a
    completed import is searchable."""
    path = tmp_path / "s.db"
    SessionStore(path).close()
    payload = tmp_path / "p.json"
    payload.write_text(json.dumps([{"id": f"k{i}", "messages": [
        {"role": "user", "content": f"needle{i} text {j}"} for j in range(1000)]}
        for i in range(5)]))
    script = textwrap.dedent(f"""
        import json, os, signal
        from hermes_data.sessions import messages
        from hermes_data.sessions.store import SessionStore
        real, calls = messages.insert_rows, []
        def insert_rows(*a, **k):
            calls.append(1)
            if len(calls) == 3:
                os.kill(os.getpid(), signal.SIGKILL)
            return real(*a, **k)
        messages.insert_rows = insert_rows
        s = SessionStore({str(path)!r})
        s.import_sessions(json.load(open({str(payload)!r})))
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert proc.returncode == -9, proc.stderr.decode()
    with SessionStore(path) as s:
        assert s.list_sessions() == []
        r = s.import_sessions(json.loads(payload.read_text()))
        assert r.imported == 5
        assert [h.session_id for h in s.search_messages("needle3")][:1] == ["k3"]
    con = sqlite3.connect(path)
    try:
        con.execute("INSERT INTO messages_fts(messages_fts) VALUES ('integrity-check')")
    finally:
        con.close()


def test_ab36_upstream_extra_columns(store, tmp_path):
    """Behaviour 36: ``transport_profile`` dropped with one warning on a fresh store;
    ``cache_read_tokens`` stored."""
    r = store.import_sessions([{"id": "t", "transport_profile": "x", "cache_read_tokens": 9,
                                "created_source": "y"}])
    assert r.ok and len(r.warnings) == 1 and "transport_profile" in r.warnings[0]
    assert store.get_session("t").cache_read_tokens == 9


@pytest.mark.sqlite_only("a file carrying an upstream column")
def test_ab36_extra_stored_when_the_column_exists(tmp_path):
    path = tmp_path / "s.db"
    SessionStore(path).close()
    con = sqlite3.connect(path)
    con.execute("ALTER TABLE sessions ADD COLUMN transport_profile TEXT")
    con.commit()
    con.close()
    with SessionStore(path) as s:
        r = s.import_sessions([{"id": "t", "transport_profile": "fast"}])
        assert r.ok and r.warnings == []
        assert s.export_session("t").session["transport_profile"] == "fast"


def test_ab37_load_import_payload():
    """Behaviour 37."""
    from hermes_data.sessions.ui.portability.imports import load_import_payload

    assert load_import_payload('[{"id": "a"}]') == [{"id": "a"}]
    assert load_import_payload('{"id": "a"}') == [{"id": "a"}]
    assert load_import_payload('{"id": "a"}\n\n{"id": "b"}\n') == [{"id": "a"}, {"id": "b"}]
    with pytest.raises(ValueError, match="line 3"):
        load_import_payload('{"id": "a"}\n\n{oops')


@pytest.mark.sqlite_only("the bulk FTS fill is the SQLite batch path")
def test_ab35_bulk_indexed_import_matches_per_row_triggers(tmp_path, monkeypatch):
    """Behaviour 35 / issue acceptance 3: the import fills both FTS indexes in bulk (one
    INSERT…SELECT, gate restored in the same transaction); its indexes and search results are
    the same as when the per-row triggers index every row, and a later append still indexes."""
    from hermes_data.sessions.core import messages

    payload = [{"id": f"b{k}", "messages": [
        {"role": "user", "content": f"alpha{k} 東京タワー {j}"},
        {"role": "assistant", "content": [{"type": "text", "text": f"beta{j} substring{k}"}]},
        {"role": "tool", "tool_name": "sh", "content": f"gamma {k}{j}"}]} for k in range(3)
        for j in range(1)] + [{"id": "b9", "messages": [{"role": "user", "content": "delta"}]}]
    fills: list[str] = []
    real_open = messages.open_bulk_fts

    def spy(tx, dialect, rows):
        gate = real_open(tx, dialect, rows)
        fills.append("bulk" if gate is not None else "triggers")
        return gate

    def run(path, bulk: bool):
        monkeypatch.setattr(messages, "BULK_FTS_MIN_ROWS", 4 if bulk else 10**9)
        with SessionStore(path) as s:
            assert s.import_sessions(payload).imported == 4
            s.append_message("b9", "user", "epsilon after import")
            hits = {q: [(h.session_id, h.role, h.snippet) for h in s.search_messages(q)]
                    for q in ("alpha1", "beta0", "東京", "substring1", "gamma", "epsilon", "delta")}
        con = sqlite3.connect(path)
        try:
            for t in ("messages_fts", "messages_fts_trigram"):
                con.execute(f"INSERT INTO {t}({t}) VALUES ('integrity-check')")
            tables = [con.execute(f"SELECT rowid, * FROM {t} ORDER BY rowid").fetchall()
                      for t in ("messages_fts", "messages_fts_trigram")]
        finally:
            con.close()
        return hits, tables

    monkeypatch.setattr(messages, "open_bulk_fts", spy)
    bulk = run(tmp_path / "bulk.db", True)
    rows = run(tmp_path / "rows.db", False)
    assert fills == ["bulk", "triggers"]
    assert bulk == rows
    assert all(bulk[0][q] for q in bulk[0]), bulk[0]
    assert len(bulk[1][0]) == 11
