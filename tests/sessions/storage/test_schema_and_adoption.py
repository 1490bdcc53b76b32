"""Schema authority, the baseline revision and adoption of an upstream state.db (§2, §10.1–3a, 10–13)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys

import pytest
import sqlalchemy as sa

from hermes_data.migrate import runner as migrate
from hermes_data.engine import trace_writes
from hermes_data.errors import ForwardOnlyError
from hermes_data.sessions.storage.fts import ddl as fts_ddl
from hermes_data.sessions.storage import opening
from hermes_data.sessions.storage.adoption import SPEC
from hermes_data.sessions.storage import display_sql
from hermes_data.sessions.schema import metadata
from hermes_data.sessions.storage.fts.cjk_sql import CJK_OBJECTS
from hermes_data.sessions.store import SessionStore
from hermes_data.migrate.shape import diff_shapes, live_shape, metadata_shape

from tests.conftest import REPO
from tests.sessions.conftest import manifest, table_digest
from hermes_data.sessions.storage.fresh import REVISIONS

pytestmark = pytest.mark.sqlite_only(
    "PRAGMA table_info shapes and upstream file adoption (PostgreSQL schema: test_postgres_schema.py)")


def _objects(path, types=("view", "trigger")):
    con = sqlite3.connect(path)
    try:
        return [tuple(r) for r in con.execute(
            f"SELECT type, name, sql FROM sqlite_master WHERE type IN ({', '.join('?' * len(types))}) "
            "ORDER BY rowid", types)]
    finally:
        con.close()


def _fts_tables(path):
    con = sqlite3.connect(path)
    try:
        return [tuple(r) for r in con.execute(
            "SELECT name, sql FROM sqlite_master WHERE sql LIKE 'CREATE VIRTUAL TABLE%' ORDER BY rowid")]
    finally:
        con.close()


def test_fresh_upgrade_equals_create_all_plus_fragments(tmp_path):
    fresh = tmp_path / "fresh.db"
    report = migrate.upgrade("sessions", fresh)
    # s02 (PostgreSQL's stored tsvector) is a no-op here; s03 appends the agent columns and
    # tables (sessions-ext-agent §2): the file is what the head metadata creates.
    assert report.applied == list(REVISIONS)
    ref = tmp_path / "ref.db"
    engine = sa.create_engine(f"sqlite:///{ref}")
    metadata.create_all(engine)
    with engine.begin() as conn:
        for _name, ddl in fts_ddl.FTS_OBJECTS_V3 + display_sql.TRIGGERS + CJK_OBJECTS:
            conn.exec_driver_sql(ddl)
    engine.dispose()
    with sa.create_engine(f"sqlite:///{fresh}").connect() as a, \
            sa.create_engine(f"sqlite:///{ref}").connect() as b:
        got, want = live_shape(a), live_shape(b)
    for shape in (got, want):
        for name in [t for t in shape.tables if SPEC.ignore_table(t)]:
            del shape.tables[name]
    assert diff_shapes(want, got, ordered=True) == []
    assert got.tables == want.tables  # same ordered PRAGMA table_info rows
    # Views, virtual tables and the six triggers: same text, same order.
    assert _objects(fresh) == _objects(ref)
    assert _fts_tables(fresh) == _fts_tables(ref)
    assert [n for t, n, _ in _objects(fresh) if t == "trigger"] == [
        *fts_ddl.FTS_TRIGGERS, *display_sql.TRIGGER_NAMES,  # then s05's, then the CJK index's
        *(n for n, ddl in CJK_OBJECTS if ddl.startswith("CREATE TRIGGER"))]


def _schema_sql(path) -> list[tuple]:
    con = sqlite3.connect(path)
    try:
        return [tuple(r) for r in con.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY rowid")]
    finally:
        con.close()


def _rows(path) -> list[tuple]:
    con = sqlite3.connect(path)
    try:
        return [tuple(r) for t in ("sessions", "messages", "state_meta")
                for r in con.execute(f'SELECT * FROM "{t}" ORDER BY rowid')]
    finally:
        con.close()


def test_s02_is_a_no_op_on_sqlite(tmp_path):
    """A file at s01_baseline (an install of the previous release) moves to s02 with its
    schema untouched — same sqlite_master rows, same rows — and checks clean; s03 (read-gated)
    finds every agent object present and writes nothing either."""
    path = tmp_path / "state.db"
    assert migrate.upgrade("sessions", path, revision="s01_baseline").applied == ["s01_baseline"]
    with SessionStore(path) as s:  # opening upgrades to the head
        s.create_session("s", "cli")
        s.append_message("s", "user", "crash in gateway/run.py today")
    con = sqlite3.connect(path)
    try:
        con.execute("UPDATE alembic_version SET version_num = 's01_baseline'")
        con.commit()
    finally:
        con.close()
    before_schema, before_rows = _schema_sql(path), _rows(path)
    report = migrate.upgrade("sessions", path)
    assert report.before_revision == "s01_baseline"
    assert report.applied == list(REVISIONS[1:])
    assert report.repairs == []
    assert report.after_revision == migrate.head_revision("sessions") == REVISIONS[-1]
    assert _schema_sql(path) == before_schema
    assert _rows(path) == before_rows and len(before_rows) >= 3
    assert migrate.check("sessions", path) == []
    with SessionStore(path) as s:
        assert [h.route for h in s.search_messages("gateway")] == ["fts"]


def test_fresh_table_info_matches_spec(store):
    with store.engine.connect() as conn:
        shape = live_shape(conn)
    want = metadata_shape(metadata)
    assert diff_shapes(want, {**{}, **{}} and want or want) == []
    for table in ("sessions", "messages", "system_prompts", "state_meta", "compression_locks",
                  "session_turn_leases"):
        assert shape.tables[table] == want.tables[table]
    cols = {c.name: c for c in shape.tables["sessions"]}
    assert (cols["id"].type, cols["id"].pk, cols["id"].notnull) == ("TEXT", 1, False)
    assert (cols["archived"].type, cols["archived"].notnull, cols["archived"].default) == ("INTEGER", True, "0")
    assert (cols["started_at"].type, cols["started_at"].notnull) == ("REAL", True)
    mcols = {c.name: c for c in shape.tables["messages"]}
    assert (mcols["active"].notnull, mcols["active"].default) == (True, "1")
    assert (mcols["_compressed_summary"].notnull, mcols["_compressed_summary"].default) == (True, "0")
    assert set(shape.indexes) >= {ix.name for t in metadata.sorted_tables for ix in t.indexes}


def test_downgrade_is_refused(tmp_path):
    migrate.upgrade("sessions", tmp_path / "s.db")
    with pytest.raises(ForwardOnlyError):
        from alembic import command
        command.downgrade(migrate.alembic_config("sessions", tmp_path / "s.db"), "base")


def test_alembic_cli_upgrades_sessions(tmp_path):
    db = tmp_path / "cli.db"
    proc = subprocess.run([sys.executable, "-m", "alembic", "-n", "sessions", "-x", f"url={db}",
                           "upgrade", "head"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert migrate.check("sessions", db) == []


def test_settled_reopen_writes_nothing(tmp_path):
    path = tmp_path / "state.db"
    SessionStore(path).close()
    store = SessionStore.__new__(SessionStore)  # trace from the very first statement
    seen: list[str] = []
    from sqlalchemy import event

    def before(conn, cursor, statement, *a):
        head = statement.lstrip().split(None, 1)[0].upper()
        if head in ("INSERT", "UPDATE", "DELETE", "REPLACE", "DROP", "ALTER", "CREATE") \
                or statement.upper().startswith("BEGIN IMMEDIATE"):
            seen.append(statement)

    event.listen(sa.engine.Engine, "before_cursor_execute", before)
    try:
        SessionStore.__init__(store, path)
        store.close()
    finally:
        event.remove(sa.engine.Engine, "before_cursor_execute", before)
    # Capability probes write only to TEMP; nothing touches the main database.
    assert [s for s in seen if "temp." not in s] == []


def test_settled_open_succeeds_while_another_process_holds_the_write_lock(tmp_path):
    path = tmp_path / "state.db"
    SessionStore(path).close()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sqlite3,sys,time; c=sqlite3.connect(sys.argv[1], isolation_level=None);"
         "c.execute('BEGIN IMMEDIATE'); print('locked', flush=True); time.sleep(30)", str(path)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with SessionStore(path, open_patience_s=2.0) as s:
            assert s.get_session("nope") is None
    finally:
        holder.kill()
        holder.wait()


def test_fixture_adopts_losslessly(legacy_copy):
    man = manifest()
    con = sqlite3.connect(legacy_copy)
    meta_before = set(con.execute("SELECT key, value FROM state_meta"))
    con.close()
    with SessionStore(legacy_copy) as s:
        repairs = list(s.open_repairs)
        assert s.get_session("20260806_040000_cmp004").title == "Refactor gateway routing #5"
    con = sqlite3.connect(legacy_copy)
    try:
        # state_meta only gains keys (the generation token, the CJK-bigram index's backfill
        # window over the adopted rows); every old pair is kept.
        meta_after = set(con.execute("SELECT key, value FROM state_meta"))
        assert meta_before <= meta_after
        assert {k for k, _ in meta_after - meta_before} <= {
            "db_file_generation", "cjk_bigram_high_water", "cjk_bigram_progress"}
        for table, entry in man["tables"].items():
            if table == "state_meta":
                continue
            digest, rows = table_digest(con, table, entry["columns"])
            assert rows == entry["rows"], table
            assert digest == entry["sha256"], f"{table} rows changed"
        names = {(r[0], r[1]) for r in con.execute("SELECT type, name FROM sqlite_master")}
        for obj in man["objects"]:
            assert (obj["type"], obj["name"]) in names, obj  # nothing dropped
        # upstream-only columns survive in place
        cols = [r[1] for r in con.execute("PRAGMA table_info(sessions)")]
        assert cols[: len(man["tables"]["sessions"]["columns"])] == man["tables"]["sessions"]["columns"]
        assert con.execute("SELECT version FROM schema_version").fetchall() == [(21,)]
        # legacy inline layout kept, update triggers narrowed in legacy shape, no repopulation
        fts_sql = con.execute("SELECT sql FROM sqlite_master WHERE name = 'messages_fts'").fetchone()[0]
        assert "tool_name" not in fts_sql
        for trig in ("messages_fts_update", "messages_fts_trigram_update"):
            ddl = con.execute("SELECT sql FROM sqlite_master WHERE name = ?", (trig,)).fetchone()[0]
            assert "AFTER UPDATE OF content, tool_name, tool_calls, role ON messages" in ddl
            assert not opening.is_broad_update_trigger(ddl)
        assert not any("repopulated" in r or "rebuilt" in r for r in repairs)
        assert con.execute("SELECT name FROM sqlite_master WHERE name = 'messages_fts_src'").fetchone() is None
    finally:
        con.close()
    diffs = migrate.check("sessions", legacy_copy)
    assert [d for d in diffs if not d.is_extra] == []


def test_adopted_fixture_reopens_write_free_and_works(legacy_copy):
    SessionStore(legacy_copy).close()
    with SessionStore(legacy_copy) as s:
        seen, stop = trace_writes(s.engine)
        try:
            assert s.open_repairs == []
            tip = s.get_compression_tip("20260806_000000_cmp000")
        finally:
            stop()
        assert tip == "20260806_040000_cmp004"
        assert seen == []
        assert s.get_compression_root(tip) == "20260806_000000_cmp000"
        n = s.append_message(tip, "user", "adopted write works")
        s.append_messages_batch(tip, [{"role": "assistant", "content": "ok",
                                       "tool_calls": [{"function": {"name": "zz_unique_tool"}}]}])
        assert s.get_messages(tip, after_id=n - 1)[0].content == "adopted write works"
        with pytest.raises(Exception):
            s.append_message("20260806_000000_cmp000", "user", "closed")
        rows = s.list_sessions(limit=100)
        chain = [r for r in rows if r.lineage_root_id == "20260806_000000_cmp000"]
        assert len(chain) == 1 and chain[0].id == tip and len(chain[0].lineage_ids) == 5
        assert s.set_session_archived(tip)
        with s.engine.connect() as conn:
            # the term inside tool_calls is findable through the legacy inline index
            hit = conn.exec_driver_sql(
                "SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'zz_unique_tool'").fetchall()
            assert len(hit) == 1
            conn.exec_driver_sql("UPDATE messages SET active = 0 WHERE id = ?", (n,))
            assert conn.exec_driver_sql("SELECT changes()").scalar() == 1
            conn.rollback()


def test_fixture_session_model_usage_untouched_after_operations(legacy_copy):
    man = manifest()
    with SessionStore(legacy_copy) as s:
        s.set_session_pinned("20260801_090000_a1b2c3")
    con = sqlite3.connect(legacy_copy)
    try:
        for table in ("session_model_usage", "async_delegations", "gateway_routing", "schema_version"):
            entry = man["tables"][table]
            assert table_digest(con, table, entry["columns"])[0] == entry["sha256"]
    finally:
        con.close()


def _store_fresh(path, **kw):
    return SessionStore(path, **kw)


def test_broad_update_trigger_is_narrowed_without_rebuild(tmp_path):
    path = tmp_path / "state.db"
    with SessionStore(path) as s:
        s.create_session("a", "cli")
        s.append_message("a", "user", "hello")
    con = sqlite3.connect(path)
    con.executescript(
        "DROP TRIGGER messages_fts_update; CREATE TRIGGER messages_fts_update AFTER UPDATE ON messages "
        "BEGIN INSERT INTO messages_fts(messages_fts, rowid, content, tool_name, tool_calls) VALUES "
        "('delete', old.id, old.content, old.tool_name, old.tool_calls); INSERT INTO messages_fts(rowid, "
        "content, tool_name, tool_calls) VALUES (new.id, new.content, new.tool_name, new.tool_calls); END;")
    con.close()
    with SessionStore(path) as s:
        assert any("narrowed" in r for r in s.open_repairs)
        assert not any("rebuilt" in r for r in s.open_repairs)
    ddl = sqlite3.connect(path).execute(
        "SELECT sql FROM sqlite_master WHERE name = 'messages_fts_update'").fetchone()[0]
    assert ddl == fts_ddl.FTS_UPDATE_TRIGGER_DDL.replace(" IF NOT EXISTS", "")


def test_missing_trigram_tokenizer_degrades_and_settles(tmp_path):
    opening.force_capabilities(opening.FtsCapabilities(fts5=True, trigram=False))
    try:
        path = tmp_path / "state.db"
        with SessionStore(path) as s:
            s.create_session("a", "cli")
            s.append_message("a", "user", "hello")
        names = {r[0] for r in sqlite3.connect(path).execute("SELECT name FROM sqlite_master")}
        assert "messages_fts" in names and "messages_fts_trigram" not in names
        assert not names & set(fts_ddl.TRIGRAM_TRIGGERS)
        with SessionStore(path) as s:
            seen, stop = trace_writes(s.engine)
            stop()
            assert s.open_repairs == []
    finally:
        opening.force_capabilities(None)


def test_missing_base_trigger_on_nonempty_store_rebuilds_under_admission_lock(tmp_path):
    path = tmp_path / "state.db"
    with SessionStore(path) as s:
        s.create_session("a", "cli")
        s.append_message("a", "user", "alpha")
    con = sqlite3.connect(path)
    con.execute("DROP TRIGGER messages_fts_insert")
    con.execute("INSERT INTO messages (session_id, role, content, timestamp) VALUES ('a', 'user', 'omega', 1.0)")
    con.commit()
    con.close()
    with SessionStore(path) as s:
        assert any("rebuilt" in r for r in s.open_repairs)
        with s.engine.connect() as conn:
            assert conn.exec_driver_sql(
                "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH 'omega'").scalar() == 1
    assert (tmp_path / "state.db.fts_rebuild.lock").exists()


def test_no_fts5_module_drops_triggers_and_writes_keep_working(tmp_path):
    path = tmp_path / "state.db"
    SessionStore(path).close()
    opening.force_capabilities(opening.FtsCapabilities(fts5=False, trigram=False))
    try:
        with SessionStore(path) as s:
            assert any("FTS5 unavailable" in r for r in s.open_repairs)
            s.create_session("a", "cli")
            s.append_message("a", "user", "still works")
    finally:
        opening.force_capabilities(None)
    names = {r[0] for r in sqlite3.connect(path).execute("SELECT name FROM sqlite_master")}
    assert not names & set(fts_ddl.FTS_TRIGGERS)


def test_fts_stale_with_foreign_holder_defers_then_recovers(tmp_path):
    path = tmp_path / "state.db"
    with SessionStore(path) as s:
        s.create_session("a", "cli")
        s.append_message("a", "user", "before stale")
    con = sqlite3.connect(path)
    con.execute("INSERT INTO state_meta(key, value) VALUES ('fts_stale', '1')")
    con.commit()
    con.close()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sqlite3,sys,time; c=sqlite3.connect(sys.argv[1]);"
         "c.execute('select 1 from sessions').fetchall(); print('open', flush=True); time.sleep(30)",
         str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "open"
        with SessionStore(path) as s:
            names = {r[0] for r in sqlite3.connect(path).execute("SELECT name FROM sqlite_master")}
            assert not names & set(fts_ddl.FTS_TRIGGERS)
            s.append_message("a", "user", "during stale")
    finally:
        holder.kill()
        holder.wait()
    with SessionStore(path) as s:
        assert any("recovered" in r for r in s.open_repairs)
        with s.engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT value FROM state_meta WHERE key = 'fts_stale'").first() is None
            assert conn.exec_driver_sql(
                "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH 'during'").scalar() == 1
