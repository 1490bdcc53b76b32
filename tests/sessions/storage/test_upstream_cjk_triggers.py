"""Upstream ``messages_fts_cjk`` triggers on adopted files (spec sessions-ext-storage.md
§3.9.1; acceptance §4.23).

No fixture carries them (``state_fork_v21`` predates them), and this SQLite build cannot
create a ``tokenize='cjk_unicode61'`` table, so the upstream objects are put in by hand: the
virtual table's ``sqlite_master`` row through ``writable_schema`` (its constructor runs only
when used), the source view and the three triggers in upstream's text. Firing a trigger then
fails exactly as on a tokenizer-less host: ``no such tokenizer: cjk_unicode61``.
"""

from __future__ import annotations

import sqlite3

import pytest


from hermes_data.sessions.storage.fts import ddl as fts_ddl
from hermes_data.sessions.core import maintenance
from hermes_data.sessions.store import SessionStore

pytestmark = pytest.mark.journal_independent("schema objects and write retries only")

CJK_TABLE_SQL = ("CREATE VIRTUAL TABLE messages_fts_cjk USING fts5(content, tool_name, "
                 "tool_calls, content='messages_fts_cjk_src', content_rowid='id', "
                 "tokenize='cjk_unicode61')")
_GATE = ("(%s.id > COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta "
         "WHERE key = 'fts_cjk_rebuild_high_water'), -1) OR %s.id <= COALESCE((SELECT "
         "CAST(value AS INTEGER) FROM state_meta WHERE key = 'fts_cjk_rebuild_progress'), -1))")
TRIGGERS = {
    "messages_fts_cjk_insert": (
        "CREATE TRIGGER messages_fts_cjk_insert AFTER INSERT ON messages "
        f"WHEN new.role <> 'tool' AND {_GATE % ('new', 'new')} BEGIN "
        "INSERT INTO messages_fts_cjk(rowid, content, tool_name, tool_calls) "
        "VALUES (new.id, new.content, new.tool_name, new.tool_calls); END"),
    "messages_fts_cjk_delete": (
        "CREATE TRIGGER messages_fts_cjk_delete AFTER DELETE ON messages "
        f"WHEN old.role <> 'tool' AND {_GATE % ('old', 'old')} BEGIN "
        "INSERT INTO messages_fts_cjk(messages_fts_cjk, rowid, content, tool_name, tool_calls) "
        "VALUES ('delete', old.id, old.content, old.tool_name, old.tool_calls); END"),
    "messages_fts_cjk_update": (
        "CREATE TRIGGER messages_fts_cjk_update AFTER UPDATE OF content, tool_name, tool_calls "
        f"ON messages WHEN {_GATE % ('old', 'old')} BEGIN "
        "INSERT INTO messages_fts_cjk(messages_fts_cjk, rowid, content, tool_name, tool_calls) "
        "SELECT 'delete', old.id, old.content, old.tool_name, old.tool_calls "
        "WHERE old.role <> 'tool'; "
        "INSERT INTO messages_fts_cjk(rowid, content, tool_name, tool_calls) "
        "SELECT new.id, new.content, new.tool_name, new.tool_calls WHERE new.role <> 'tool'; END"),
}


def _install_upstream(path, *, table: bool = True) -> None:
    con = sqlite3.connect(path, isolation_level=None)
    try:
        if table:
            con.execute("CREATE VIEW IF NOT EXISTS messages_fts_cjk_src AS SELECT id, role, "
                        "content, tool_name, tool_calls FROM messages WHERE role <> 'tool'")
            con.execute("PRAGMA writable_schema=ON")
            con.execute("INSERT INTO sqlite_master(type, name, tbl_name, rootpage, sql) "
                        "VALUES ('table', 'messages_fts_cjk', 'messages_fts_cjk', 0, ?)",
                        (CJK_TABLE_SQL,))
            con.execute("PRAGMA writable_schema=OFF")
            # Bump the schema cookie so every open connection re-reads the schema.
            cookie = con.execute("PRAGMA schema_version").fetchone()[0]
            con.execute(f"PRAGMA schema_version={cookie + 1}")
        for ddl in TRIGGERS.values():
            con.execute(ddl)
    finally:
        con.close()


def _names(path) -> dict[str, str]:
    con = sqlite3.connect(path)
    try:
        return dict(con.execute("SELECT name, type FROM sqlite_master").fetchall())
    finally:
        con.close()


def _meta(path, key):
    con = sqlite3.connect(path)
    try:
        row = con.execute("SELECT value FROM state_meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else row[0]
    finally:
        con.close()


def test_a_firing_upstream_trigger_fails_without_the_tokenizer(tmp_path):
    path = tmp_path / "state.db"
    with SessionStore(path) as s:
        s.create_session("a", "cli")
    _install_upstream(path)
    con = sqlite3.connect(path, isolation_level=None)
    try:
        with pytest.raises(sqlite3.OperationalError, match="no such tokenizer: cjk_unicode61"):
            con.execute("INSERT INTO messages(session_id, role, content, timestamp) "
                        "VALUES ('a', 'user', 'x', 1)")
    finally:
        con.close()


def test_first_writable_open_breadcrumbs_then_drops(tmp_path):
    path = tmp_path / "state.db"
    with SessionStore(path) as s:
        s.create_session("a", "cli")
        s.append_message("a", "user", "before 漢字")
    _install_upstream(path)
    trace: list[str] = []
    real_connect = sqlite3.connect

    with SessionStore(path, read_only=True) as ro:  # read-only never writes
        assert ro.get_messages("a")
    assert set(TRIGGERS) <= set(_names(path))

    def traced(*a, **k):
        con = real_connect(*a, **k)
        con.set_trace_callback(trace.append)
        return con

    sqlite3.connect = traced
    try:
        s = SessionStore(path)
    finally:
        sqlite3.connect = real_connect
    try:
        assert any("upstream CJK triggers" in r for r in s.open_repairs)
        names = _names(path)
        assert not set(TRIGGERS) & set(names)
        # The table and view stay for a capable upstream host; ours are untouched.
        assert names["messages_fts_cjk"] == "table" and names["messages_fts_cjk_src"] == "view"
        assert set(fts_ddl.FTS_TRIGGERS) <= set(names)
        assert _meta(path, "fts_cjk_stale") == "1" and _meta(path, "fts_stale") is None
        mark = next(i for i, ln in enumerate(trace) if "'fts_cjk_stale'" in ln)
        drops = [i for i, ln in enumerate(trace) if ln.startswith("DROP TRIGGER IF EXISTS "
                                                                   "messages_fts_cjk")]
        assert len(drops) == 3 and mark < min(drops)
        commits = [i for i, ln in enumerate(trace) if ln == "COMMIT" and i > mark]
        assert commits and commits[0] > max(drops)  # one transaction
        s.append_message("a", "user", "after 漢字")
        s.append_messages_batch("a", [{"role": "user", "content": "batch"}])
        assert [m.content for m in s.get_messages("a")][-2:] == ["after 漢字", "batch"]
        assert s.search_messages("after")[0].route == "fts"
    finally:
        s.close()
    with SessionStore(path) as s:  # settled: nothing more to do
        assert not any("CJK" in r for r in s.open_repairs)


def test_reinstalled_behind_the_handle_next_write_heals_and_retries(tmp_path):
    path = tmp_path / "state.db"
    with SessionStore(path) as s:
        s.create_session("a", "cli")
        first = s.append_message("a", "user", "first")
        _install_upstream(path)  # e.g. upstream's optimize-storage on another host
        mid = s.append_message("a", "user", "second 漢字")  # heals and retries once
        assert mid > first
        assert [m.content for m in s.get_messages("a")] == ["first", "second 漢字"]
        assert not set(TRIGGERS) & set(_names(path))
        assert _meta(path, "fts_cjk_stale") == "1" and _meta(path, "fts_stale") is None
        assert set(fts_ddl.FTS_TRIGGERS) <= set(_names(path))
        assert s.fts_available["messages_fts"]
        assert [r.id for r in s.search_messages("second")] == [mid]
        _install_upstream(path, table=False)  # again, met by a batch append
        assert s.append_messages_batch("a", [{"role": "user", "content": "third"},
                                             {"role": "assistant", "content": "fourth"}]) == 2
        assert not set(TRIGGERS) & set(_names(path))
        assert [m.content for m in s.get_messages("a")][-2:] == ["third", "fourth"]
        # Again, through a delete's path (the delete trigger alone re-installed).
        _install_upstream(path, table=False)
        assert maintenance.delete_session(s, "a")
        assert not set(TRIGGERS) & set(_names(path))
