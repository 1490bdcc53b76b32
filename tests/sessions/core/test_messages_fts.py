"""Messages (§6), size guards (§6.5) and the FTS objects (§2.6) against real files
(§10 #6–#9, #12, #35–#37, #57, #58)."""

from __future__ import annotations

import sqlite3

import pytest
from hypothesis import given, settings, strategies as st

from hermes_data.sessions.errors import SessionExportTooLargeError, SessionResumeTooLargeError
from hermes_data.sessions.core import encoding as enc
from hermes_data.sessions.store import SessionStore

from tests.sessions.conftest import sqlite_only

_FTS5 = "FTS5 virtual tables and triggers (PostgreSQL: GIN indexes, test_search.py)"


def _match(store, table, term):
    with store.engine.connect() as conn:
        return [r[0] for r in conn.exec_driver_sql(
            f"SELECT rowid FROM {table} WHERE {table} MATCH ?", (term,))]


def test_tool_calls_indexed_and_tool_prefix_only(store):
    sqlite_only(store, _FTS5)
    store.create_session("s", "cli")
    a = store.append_message("s", "assistant", "calling", tool_calls=[{"function": {"name": "read_file"}}])
    t = store.append_message("s", "tool", "x " * 4100 + " needlebeyond")
    assert _match(store, "messages_fts", '"read_file"') == [a]
    assert _match(store, "messages_fts", "needlebeyond") == []
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT id FROM messages WHERE role = 'tool' AND content LIKE "
                                    "'%needlebeyond%'").scalar() == t


def test_trigram_boundary(store):
    sqlite_only(store, _FTS5)
    store.create_session("c", "cron")
    store.create_session("u", "cli")
    store.create_child_session("u", "d", "delegate")
    ids = [store.append_message("c", "user", "cronword"), store.append_message("d", "user", "delegword"),
           store.append_message("u", "tool", "toolword"),
           store.append_message("u", "assistant", "plainword", tool_calls=[{"name": "callword"}])]
    for term in ("cronword", "delegword", "toolword", "callword"):
        assert _match(store, "messages_fts_trigram", term) == []
    assert _match(store, "messages_fts_trigram", "plainword") == [ids[3]]
    assert _match(store, "messages_fts", "cronword") == [ids[0]]


def test_narrow_triggers_and_integrity(store):
    sqlite_only(store, _FTS5)
    store.create_session("s", "cli")
    ids = store.append_messages_batch("s", [{"role": "user", "content": f"term{i} common"} for i in range(20)])
    with store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE messages SET active = 0 WHERE id = 1")
        assert conn.exec_driver_sql("SELECT total_changes()").scalar() >= 1
    con = sqlite3.connect(store.path)
    before = con.total_changes
    con.execute("UPDATE messages SET active = 1 WHERE id = 1")
    # the row and its display order (ui §2.3 visibility trigger); no FTS work
    assert con.total_changes - before == 2
    before = con.total_changes
    con.execute("UPDATE messages SET content = 'replaced' WHERE id = 2")
    assert con.total_changes - before > 1
    con.execute("DELETE FROM messages WHERE id = 3")
    con.execute("UPDATE messages SET role = 'tool' WHERE id = 4")
    con.commit()
    for table in ("messages_fts", "messages_fts_trigram"):
        con.execute(f"INSERT INTO {table}({table}) VALUES ('integrity-check')")
    con.close()
    assert _match(store, "messages_fts", "term1") == []
    assert _match(store, "messages_fts", "replaced") == [2]
    assert _match(store, "messages_fts_trigram", "term3") == []
    assert ids == 20


def test_rebuild_window_gate(store):
    sqlite_only(store, _FTS5)
    store.create_session("s", "cli")
    store.append_messages_batch("s", [{"role": "user", "content": f"w{i}"} for i in range(6)])
    with store.engine.begin() as conn:
        conn.exec_driver_sql("INSERT INTO state_meta VALUES ('fts_rebuild_high_water', '4'), "
                             "('fts_rebuild_progress', '2')")
    new = store.append_message("s", "user", "fresh")
    assert _match(store, "messages_fts", "fresh") == [new]
    con = sqlite3.connect(store.path)
    seen = []
    con.set_trace_callback(seen.append)
    con.execute("DELETE FROM messages WHERE id = 3")  # inside (P, H]: no index work
    assert not any("messages_fts_docsize" in s for s in seen)
    seen.clear()
    con.execute("DELETE FROM messages WHERE id = ?", (new,))
    assert any("messages_fts" in s for s in seen)
    con.rollback()
    con.close()


def test_batch_is_all_or_nothing_and_chunks(store):
    sqlite_only(store, "COMMIT traced on the raw SQLite writer")
    store.create_session("s", "cli")
    with pytest.raises(ValueError):
        store.append_messages_batch("s", [{"role": "user", "content": "a"}, {"content": "no role"},
                                          {"role": "user", "content": "c"}])
    assert store.get_messages("s") == [] and store.get_session("s").message_count == 0
    # The transcript hot path commits on the writer's DBAPI connection: trace it there.
    commits = []
    store.backend._raw.set_trace_callback(lambda stmt: commits.append(1) if stmt == "COMMIT" else None)
    assert store.append_messages_batch("s", [{"role": "user", "content": str(i)} for i in range(5)],
                                       chunk_rows=2) == 5
    store.backend._raw.set_trace_callback(None)
    assert len(commits) == 3
    msgs = store.get_messages("s")
    assert all(b.timestamp > a.timestamp for a, b in zip(msgs, msgs[1:]))
    assert store.append_messages_batch("s", []) == 0


def test_encodings_round_trip(store):
    store.create_session("s", "cli")
    parts = [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "data:x"}}]
    store.append_message("s", "user", parts, display_metadata='{"a": 1}')
    store.append_message("s", "user", "bad \ud800 surrogate")
    store.append_message("s", "assistant", None, tool_calls='[{"id": "1"}, {"id": "2"}]',
                         _compressed_summary=True)
    m = store.get_messages("s")
    assert m[0].content == parts and m[0].display_metadata == {"a": 1}
    assert m[1].content == "bad \ufffd surrogate"
    assert m[2].tool_calls == [{"id": "1"}, {"id": "2"}] and m[2].compressed_summary
    assert store.get_session("s").tool_call_count == 2


def test_lone_surrogates_inside_structures_are_scrubbed_like_plain_text(store):
    """A lone surrogate inside a multimodal part, a tool call or display metadata is stored
    as U+FFFD (as in plain text) instead of failing the write with UnicodeEncodeError."""
    store.create_session("s", "cli")
    store.append_message("s", "user", [{"type": "text", "text": "part \ud800 here"}],
                         display_metadata={"label": "x\udfffy"})
    store.append_message("s", "assistant", None,
                         tool_calls=[{"id": "1", "arguments": "{\"q\": \"\ud83d\"}"}])
    store.append_messages_batch("s", [{"role": "user", "content": [{"type": "text",
                                                                      "text": "b \udc00"}]}])
    m = store.get_messages("s")
    assert m[0].content == [{"type": "text", "text": "part \ufffd here"}]
    assert m[0].display_metadata == {"label": "x\ufffdy"}
    assert m[1].tool_calls == [{"id": "1", "arguments": '{"q": "\ufffd"}'}]
    assert m[2].content == [{"type": "text", "text": "b \ufffd"}]


def test_multimodal_and_nul_content_round_trip_on_each_backend(store):
    # PostgreSQL text holds no NUL: its marker is U+FDD0 + "json:", and strings PostgreSQL
    # cannot hold as text (NUL inside, leading U+FDD0) are stored as JSON strings.
    dialect = store.engine.dialect.name
    store.create_session("s", "cli")
    parts = [{"type": "text", "text": "see 图"}, {"type": "image_url", "image_url": {"url": "data:x"}}]
    values = [parts, {"type": "text", "text": "one part"}, "a\x00b", "\ufdd0json:[1]",
              "\x00json:[2]", "plain"]
    ids = [store.append_message("s", "user", v, timestamp=float(i)) for i, v in enumerate(values)]
    expected = list(values)
    if dialect == "sqlite":
        expected[4] = [2]  # the upstream format: a user string spelled like the marker is JSON
    assert [m.content for m in store.get_messages("s")] == expected
    with store.engine.connect() as conn:
        raw = conn.exec_driver_sql("SELECT content FROM messages WHERE id = ?", (ids[0],)).scalar()
    assert raw.startswith(enc.content_prefix(dialect))
    assert raw.startswith("\ufdd0json:" if dialect == "postgresql" else "\x00json:")
    # The search context flattens the multimodal neighbour on both backends.
    store.append_message("s", "user", "needle after parts", timestamp=0.5)
    (hit,) = store.search_messages("needle")
    assert hit.context[0].content == "see 图"


@pytest.mark.parametrize("value", [
    "\x00json:[1, {\"a\": 2}]", "\x00json:not json", "nul\x00inside", "\ufdd0lead", "plain 文",
    "\x00json:\"a string\"", "\x00json:\"\\u0000json:x\"", None, 5])
def test_translate_content_between_dialects_reads_back_identically(value):
    to_pg = enc.translate_content(value, "sqlite", "postgresql")
    back = enc.translate_content(to_pg, "postgresql", "sqlite")
    assert not (isinstance(to_pg, str) and "\x00" in to_pg)
    assert enc.decode_content(to_pg, "postgresql") == enc.decode_content(value, "sqlite")
    assert enc.decode_content(back, "sqlite") == enc.decode_content(value, "sqlite")


@settings(max_examples=40, deadline=None)
@given(st.text(max_size=200))
def test_any_text_content_round_trips(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("prop") / "state.db"
    with SessionStore(path) as s:
        s.create_session("s", "cli")
        s.append_message("s", "user", text)
        got = s.get_messages("s")[0].content
    assert got == text.encode("utf-8", "surrogatepass").decode("utf-8", "replace") or "\ufffd" in got


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=200))
def test_any_text_content_round_trips_on_postgresql(pg_session_url, text):
    from tests.sessions.conftest import _truncate

    _truncate(pg_session_url)
    with SessionStore(pg_session_url) as s:
        s.create_session("s", "cli")
        s.append_message("s", "user", text)
        got = s.get_messages("s")[0].content
    assert got == enc.scrub(text)


def test_get_messages_modes(store):
    store.create_session("s", "cli")
    store.append_messages_batch("s", [{"role": "user", "content": str(i)} for i in range(10)])
    with store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE messages SET active = 0 WHERE content = '9'")
    assert [m.content for m in store.get_messages("s", limit=3, offset=2)] == ["2", "3", "4"]
    assert [m.content for m in store.get_messages("s", offset=7)] == ["7", "8"]
    assert [m.content for m in store.get_messages("s", limit=3, latest=True)] == ["6", "7", "8"]
    assert len(store.get_messages("s", include_inactive=True)) == 10
    with pytest.raises(ValueError):
        store.get_messages("s", after_id=1, latest=True)
    with pytest.raises(ValueError):
        store.get_messages("s", after_id=1, offset=2)


def _steps(store, session_id, after_id, limit=100):
    with store.engine.connect() as conn:
        raw = conn.connection.driver_connection
        n = [0]

        def tick():
            n[0] += 1
            return 0

        raw.set_progress_handler(tick, 1)
        try:
            rows = raw.execute(
                "SELECT id FROM messages WHERE session_id = ? AND +active = 1 AND id > ? "
                "ORDER BY id LIMIT ?", (session_id, after_id, limit)).fetchall()
        finally:
            raw.set_progress_handler(None, 0)
        plan = " ".join(r[3] for r in raw.execute(
            "EXPLAIN QUERY PLAN SELECT id FROM messages WHERE session_id = ? AND +active = 1 "
            "AND id > ? ORDER BY id LIMIT ?", (session_id, after_id, limit)))
    return n[0], rows, plan


def test_keyset_paging_3000_rows_and_constant_steps_on_50k(store):
    sqlite_only(store, "VM-step counting (PostgreSQL plan: test_postgres_store.py)")
    store.create_session("s", "cli")
    store.create_session("other", "cli")
    store.append_messages_batch("s", [{"role": "user", "content": f"m{i}"} for i in range(3000)])
    seen, after = [], 0
    while True:
        page = store.get_messages("s", limit=100, after_id=after)
        if not page:
            break
        seen += [m.id for m in page]
        after = page[-1].id
    assert seen == sorted(seen) and len(seen) == len(set(seen)) == 3000
    # grow to 50,000 rows (interleaved with another session) and count VM steps per page
    for _ in range(4):
        store.append_messages_batch("other", [{"role": "user", "content": "o"}] * 500)
        store.append_messages_batch("s", [{"role": "user", "content": "x"}] * 11_750)
    assert store.message_count("s") == 50_000
    first = store.get_messages("s", limit=1)[0].id
    steps = []
    for position in (0, 10_000, 25_000, 49_800):
        after_id = store.get_messages("s", limit=1, offset=position)[0].id - 1 if position else first - 1
        n, rows, plan = _steps(store, "s", after_id)
        assert len(rows) == 100
        assert "idx_messages_session_id" in plan
        steps.append(n)
    assert max(steps) - min(steps) <= 5, steps


def test_size_guards(store):
    store.create_session("r", "cli")
    store.append_messages_batch("r", [{"role": "user", "content": "a"}] * 5)
    store.publish_compression_child("r", "t", "cli", [{"role": "user", "content": "h"}] * 3)
    store.create_child_session("t", "b", "branch")
    store.append_messages_batch("b", [{"role": "user", "content": "a"}] * 2)
    from sqlalchemy import event
    from sqlalchemy.engine import Engine
    stmts = []

    def seen(c, cur, s, *a):
        stmts.append(s)

    # Every engine (the writer's and, in WAL, the read pool's): reads go through either.
    event.listen(Engine, "before_cursor_execute", seen)
    try:
        assert store.assert_resume_safe("t", max_messages=0) == 0
        assert not any("COUNT" in s for s in stmts)
        assert store.assert_resume_safe("t", max_messages=100) == 8
        assert any("COUNT" in s for s in stmts)  # the watch sees the guard's reads
    finally:
        event.remove(Engine, "before_cursor_execute", seen)
    assert store.assert_resume_safe("t", max_messages=100, tip_only=True) == 3
    assert store.assert_resume_safe("b", max_messages=100) == 2
    with pytest.raises(SessionResumeTooLargeError, match="across its lineage"):
        store.assert_resume_safe("t", max_messages=7)
    with pytest.raises(ValueError):
        store.assert_resume_safe("t", max_messages=-1)
    with pytest.raises(SessionExportTooLargeError) as exc:
        store.assert_export_safe("r", max_messages=4)
    assert exc.value.session_id == "r" and exc.value.count == 5


def test_size_guard_configuration(tmp_path):
    cfg = {"sessions": {"max_resume_messages": 2, "max_export_messages": "junk"}}
    with SessionStore(tmp_path / "state.db", config=lambda: cfg) as s:
        s.create_session("a", "cli")
        s.append_messages_batch("a", [{"role": "user", "content": "x"}] * 3)
        with pytest.raises(SessionResumeTooLargeError):
            s.assert_resume_safe("a")
        assert s.assert_export_safe("a") == 3  # unparsable ⇒ default 20000
        cfg["sessions"]["max_resume_messages"] = 0
        assert s.assert_resume_safe("a") == 0
