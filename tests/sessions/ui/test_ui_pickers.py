"""Session pickers (spec sessions-ext-ui.md §3.5–§3.6, §4.7; acceptance behaviours 21, 22
and 40 of §6)."""

from __future__ import annotations

import pytest

from hermes_data.sessions.ui.pickers import workspace_key

from tests.sessions.conftest import make_chain


def test_ab21_workspace_match(store):
    """Behaviour 21."""
    rows = [("a", "/home/me/my_project", None), ("b", " /home/me/my_project/ ", None),
            ("c", None, "/home/me/my_project/src"), ("d", "", "/home/me/myXproject/src"),
            ("e", None, "/home/me/my_project2"), ("f", "/other/repo", "/home/me/my_project/x")]
    with store.engine.begin() as conn:
        conn.exec_driver_sql("INSERT INTO sessions (id, source, started_at, git_repo_root, cwd) "
                             "VALUES (?, 'cli', 1.7e9, ?, ?)", rows)
    got = store.search_sessions(workspace_key="/home/me/my_project", limit=50)
    assert sorted(r.id for r in got) == ["a", "b", "c"]
    assert len(store.search_sessions(workspace_key="  ", limit=50)) == 6  # blank: no filter


def test_ab22_search_sessions_order_flags_and_resume(store):
    """Behaviour 22."""
    with store.engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO sessions (id, source, started_at, last_activity_at, archived, "
            "model_config) VALUES ('early', 'cli', 1.7e9, 1.8e9, 0, NULL), "
            "('late', 'cli', 1.75e9, NULL, 0, NULL), ('arch', 'cli', 1.79e9, NULL, 1, NULL), "
            "('deleg', 'cli', 1.79e9, NULL, 0, '{\"_delegate_from\": \"early\"}')")
    assert [r.id for r in store.search_sessions()] == ["early", "late"]
    assert store.search_sessions()[0].last_active == 1.8e9
    assert "arch" in [r.id for r in store.search_sessions(include_archived=True)]
    assert "deleg" in [r.id for r in store.search_sessions(include_delegates=True)]
    with pytest.raises(ValueError):
        store.search_sessions(limit=-1)
    ids = make_chain(store, 3, prefix="cmp")
    with store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE sessions SET source = 'acp', cwd = '/elsewhere' "
                             "WHERE id IN (?, ?, ?)", tuple(ids))
        conn.exec_driver_sql("UPDATE sessions SET last_activity_at = 1.9e9 WHERE id = ?",
                             (ids[0],))
    here = store.search_sessions(source="acp", workspace_key="/nothing/here", limit=1)
    assert here == []
    fallback = store.search_sessions(source="acp", limit=1)
    assert fallback[0].id == ids[0]
    assert store.resolve_resume_session_id(fallback[0].id) == ids[-1]


def test_ab40_workspace_key(store):
    """Behaviour 40."""
    assert workspace_key({"git_repo_root": "  ", "cwd": " /w "}) == "/w"
    assert workspace_key({"git_repo_root": "/r", "cwd": "/w"}) == "/r"
    assert workspace_key({"git_repo_root": "", "cwd": ""}) is None
    store.create_session("s", "cli", cwd="/proj", git_repo_root=None)
    assert workspace_key(store.get_session("s")) == "/proj"
    assert store.workspace_key(store.get_session("s")) == "/proj"


def test_ab23_search_sessions_by_id(store):
    """Behaviour 23: the exact id of an old root, a middle segment or the tip ranks its one
    projected row first, ahead of 200 more-active ids containing the needle."""
    ids = make_chain(store, 3, prefix="Zq7")
    noise = [(f"zq7000{k}-{i:03d}", 1.8e9 + i) for k in range(3) for i in range(67)]
    with store.engine.begin() as conn:
        conn.exec_driver_sql("INSERT INTO sessions (id, source, started_at, last_activity_at) "
                             "VALUES (?, 'cli', 1.7e9, ?)", noise)
    for member in ids:
        got = store.search_sessions_by_id(member.upper(), limit=5)
        assert (got[0].id, got[0].lineage_root_id) == (ids[-1], ids[0])
        assert got[0].lineage_ids == tuple(ids)
        assert len({r.id for r in got}) == len(got) == 5
    assert store.search_sessions_by_id("  ") == [] and store.search_sessions_by_id("\x00") == []
    assert store.search_sessions_by_id("zq7", limit=0) == []


def test_ab17_rich_rows_projection_and_compact(store):
    """Behaviour 17 (and 18: a back-filled pin's last_active is LAST_ACTIVE)."""
    ids = make_chain(store, 3, prefix="rich")
    with store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE sessions SET title = 'Root', input_tokens = 5 WHERE id = ?",
                             (ids[0],))
    store.update_system_prompt(ids[-1], "tip prompt")
    store.update_system_prompt(ids[0], "root prompt")
    row = [r for r in store.list_sessions_rich(limit=10) if r.lineage_root_id == ids[0]][0]
    assert (row.id, row.system_prompt, row.title) == (ids[-1], "tip prompt", "Root")
    assert row.started_at == 1_700_000_000.0 and row.lineage_ids == tuple(ids)
    assert row.input_tokens == 5 and row.extra == {}
    seen: list[str] = []
    from sqlalchemy import event

    def before(conn, cursor, statement, *a):
        seen.append(statement)

    event.listen(store.engine, "before_cursor_execute", before)
    try:
        compact = store.list_sessions_rich(limit=10, compact_rows=True)
    finally:
        event.remove(store.engine, "before_cursor_execute", before)
    assert compact and all(r.system_prompt is None for r in compact)
    assert not any("system_prompts" in s for s in seen)
    store.create_session("pinned-old", "cli")
    with store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE sessions SET pinned = 1, started_at = 1.0e9, "
                             "last_activity_at = 1.6e9 WHERE id = 'pinned-old'")
    pinned = [r for r in store.list_sessions_rich(limit=1, include_pinned=True)
              if r.id == "pinned-old"]
    assert pinned and pinned[0].last_active == 1.6e9
    one = store.get_session_rich_row(ids[0])
    assert one.system_prompt == "root prompt" and one.lineage_ids == (ids[0],)
    assert store.get_session_rich_row("nope") is None


@pytest.mark.sqlite_only("an upstream column on a SQLite file")
def test_ab19_extra_columns(tmp_path):
    """Behaviour 19: an upstream ``transport_profile`` lands in ``extra``; a fresh store's
    statements never name it."""
    import sqlite3

    from hermes_data.sessions.store import SessionStore

    path = tmp_path / "s.db"
    with SessionStore(path) as s:
        s.create_session("a", "cli")
        seen: list[str] = []
        from sqlalchemy import event
        event.listen(s.engine, "before_cursor_execute", lambda c, cur, st, *a: seen.append(st))
        assert s.list_sessions_rich()[0].extra == {}
        assert not any("transport_profile" in st for st in seen)
    con = sqlite3.connect(path)
    con.execute("ALTER TABLE sessions ADD COLUMN transport_profile TEXT")
    con.execute("UPDATE sessions SET transport_profile = 'fast'")
    con.commit()
    con.close()
    with SessionStore(path) as s:
        assert s.list_sessions_rich()[0].extra == {"transport_profile": "fast"}
        assert s.get_session_rich_row("a").extra == {"transport_profile": "fast"}


@pytest.mark.sqlite_only("read-only open of a SQLite file behind s05")
def test_ab20_read_only_behind_raises_schema_behind(tmp_path):
    """Behaviour 20: a read-only handle on a store behind s05 raises SchemaBehindError (at the
    open that would serve list_sessions_rich), never an empty list."""
    from hermes_data.migrate import runner as migrate
    from hermes_data.sessions.errors import SchemaBehindError
    from hermes_data.sessions.store import SessionStore

    path = tmp_path / "s.db"
    migrate.upgrade("sessions", path, revision="s04_coordination")
    with pytest.raises(SchemaBehindError):
        SessionStore(path, read_only=True).list_sessions_rich()


@pytest.mark.sqlite_only("an injected SQLite I/O error")
def test_ab20_transient_ioerr_propagates(tmp_path, monkeypatch):
    """Behaviour 20: an injected transient IOERR propagates (never an empty list) and is
    classified transient."""
    import sqlite3

    from hermes_data.sessions.store import SessionStore, is_transient_sqlite_error

    with SessionStore(tmp_path / "s.db") as s:
        s.create_session("a", "cli")

        def boom(store, conn):
            raise sqlite3.OperationalError("disk I/O error")

        s.backend.state.export_columns = None  # no columns cached on this handle
        import hermes_data.sessions.ui.rich as rich_mod
        monkeypatch.setattr(rich_mod, "session_columns", boom)
        with pytest.raises(sqlite3.OperationalError) as info:
            s.list_sessions_rich()
        assert is_transient_sqlite_error(info.value)
