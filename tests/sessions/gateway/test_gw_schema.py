"""Revision ``s06_gateway`` (spec sessions-ext-gateway.md §2, acceptance behaviours 1–4, 6)."""

from __future__ import annotations

import sqlite3

import pytest
import sqlalchemy as sa

from hermes_data.migrate import runner as migrate
from hermes_data.engine import trace_writes
from hermes_data.sessions.errors import SchemaBehindError
from hermes_data.sessions.schema import TELEGRAM_TABLES, metadata
from hermes_data.sessions.store import SessionStore
from hermes_data.sessions.storage.fresh import REVISIONS
from hermes_data.migrate.shape import live_shape, metadata_shape

#: What an upgrade from s05 applies: s06 and every later revision.
_FROM_S06 = list(REVISIONS[REVISIONS.index("s06_gateway"):])

GW_TABLES = ("gateway_routing", "gateway_hygiene_state", "gateway_heartbeats",
             "conversation_generations", "async_delegations")
GW_INDEXES = ("idx_sessions_gateway_peer", "idx_sessions_handoff_state",
              "idx_async_delegations_delivery")
HANDOFF = ("handoff_state", "handoff_platform", "handoff_error", "handoff_requested_at",
           "handoff_claimed_by", "handoff_claimed_at")


def _sql(path, *statements, params=()) -> list:
    con = sqlite3.connect(path)
    try:
        out = []
        for st in statements:
            out = con.execute(st, params).fetchall()
        con.commit()
        return out
    finally:
        con.close()


def _behind_s06(path) -> None:
    migrate.upgrade("sessions", path, revision="s05_ui_display")


@pytest.mark.sqlite_only("PRAGMA table_info shapes and SQLite's file lock")
def test_gw1_upgrade_gives_the_declared_shape_and_a_write_free_open(tmp_path):
    """Behaviour 1: s06 over an s05 store gives §2.1–§2.3 exactly as declared (no Telegram
    table on SQLite); the next writable open writes nothing, even while another connection
    holds ``BEGIN IMMEDIATE``."""
    path = tmp_path / "state.db"
    _behind_s06(path)
    assert migrate.upgrade("sessions", path).applied == _FROM_S06
    want = metadata_shape(metadata)
    engine = sa.create_engine(f"sqlite:///{path}")
    with engine.connect() as conn:
        got = live_shape(conn)
    engine.dispose()
    assert got.tables["sessions"] == want.tables["sessions"]
    assert [c.name for c in got.tables["sessions"]][-6:] == list(HANDOFF)
    for table in GW_TABLES:
        assert got.tables[table] == want.tables[table], table
    for name in GW_INDEXES:
        assert got.indexes[name] == want.indexes[name], name
    assert not set(TELEGRAM_TABLES) & set(got.tables)
    assert migrate.check("sessions", path) == []
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with SessionStore(path) as s:
            seen, stop = trace_writes(s.engine)
            try:
                assert s.get_session("nope") is None
            finally:
                stop()
            assert s.open_repairs == [] and seen == []
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_gw1_postgresql_upgrade_creates_everything_including_telegram(pg_url):
    """Behaviour 1 (PG): s06 over s05 adds the gateway objects and both Telegram tables
    with their two indexes; the store checks clean and a second upgrade applies nothing."""
    assert migrate.upgrade("sessions", pg_url, revision="s05_ui_display").applied
    assert migrate.upgrade("sessions", pg_url).applied == _FROM_S06
    engine = sa.create_engine(pg_url)
    try:
        with engine.connect() as conn:
            insp = sa.inspect(conn)
            assert set(HANDOFF) <= {c["name"] for c in insp.get_columns("sessions")}
            assert {*GW_TABLES, *TELEGRAM_TABLES} <= set(insp.get_table_names())
            assert insp.get_pk_constraint("gateway_routing")["constrained_columns"] == [
                "scope", "session_key"]
            names = {ix["name"]: ix for t in ("sessions", "async_delegations",
                                              "telegram_dm_topic_bindings")
                     for ix in insp.get_indexes(t)}
            assert set(GW_INDEXES) <= set(names)
            assert names["idx_telegram_dm_topic_bindings_session"]["unique"]
            fk = insp.get_foreign_keys("telegram_dm_topic_bindings")[0]
            assert fk["referred_table"] == "sessions" and fk["options"]["ondelete"] == "CASCADE"
    finally:
        engine.dispose()
    assert migrate.check("sessions", pg_url) == []
    assert migrate.upgrade("sessions", pg_url).applied == []


@pytest.mark.sqlite_only("upstream state.db shapes are SQLite files")
def test_gw2_v21_fixture_adoption_keeps_rows_and_indexes(legacy_copy):
    """Behaviour 2: adopting state_fork_v21.db adds hygiene, heartbeats, generations, the
    extension columns and ``origin_session_id`` (notnull 1, default ''), keeping upstream's
    declarations, indexes and every row (manifest checksums)."""
    from tests.sessions.conftest import manifest, table_digest

    con = sqlite3.connect(legacy_copy)
    before = {r[0]: r[1] for r in con.execute(
        "SELECT name, sql FROM sqlite_master WHERE name LIKE 'idx_sessions%' OR name IN "
        "('gateway_routing', 'async_delegations', 'idx_async_delegations_delivery')")}
    old_info = con.execute("PRAGMA table_info(sessions)").fetchall()
    # The fixture's gateway tables are empty: one row each, written the upstream way.
    con.execute("INSERT INTO gateway_routing VALUES ('s', 'k', '{\"session_id\": \"x\"}', 1.5)")
    con.execute("INSERT INTO async_delegations (delegation_id, origin_session, state, "
                "dispatched_at, updated_at, owner_pid) VALUES ('d1', 'o', 'running', 1.0, 2.0, 7)")
    con.commit()
    rows = {t: con.execute(f"SELECT * FROM {t}").fetchall()
            for t in ("gateway_routing", "async_delegations")}
    con.close()
    migrate.upgrade("sessions", legacy_copy)
    tables = manifest()["tables"]
    con = sqlite3.connect(legacy_copy)
    try:
        for table in ("sessions", "messages"):
            info = tables[table]
            assert table_digest(con, table, info["columns"]) == (info["sha256"], info["rows"]), table
        assert con.execute("SELECT * FROM gateway_routing").fetchall() == rows["gateway_routing"]
        assert con.execute("SELECT * FROM async_delegations").fetchall() == [
            rows["async_delegations"][0] + ("",)]
        after = {r[0]: r[1] for r in con.execute("SELECT name, sql FROM sqlite_master")}
        for name, sql in before.items():
            if name != "async_delegations":  # only gained origin_session_id (appended)
                assert after[name] == sql, name
        info = con.execute("PRAGMA table_info(sessions)").fetchall()
        assert info[:len(old_info)] == old_info  # upstream's handoff columns untouched
        assert [r[1] for r in info[len(old_info):]][-3:] == list(HANDOFF[3:])
        deleg = {r[1]: r for r in con.execute("PRAGMA table_info(async_delegations)")}
        assert deleg["origin_session_id"][3:5] == (1, "''")
        names = {r[0] for r in con.execute("SELECT name FROM sqlite_master")}
        assert {"gateway_hygiene_state", "gateway_heartbeats", "conversation_generations"} <= names
        assert not set(TELEGRAM_TABLES) & names
    finally:
        con.close()
    assert [d for d in migrate.check("sessions", legacy_copy) if not d.is_extra] == []


LEGACY_ROUTING = ("CREATE TABLE gateway_routing (session_key TEXT PRIMARY KEY, "
                  "entry_json TEXT NOT NULL, updated_at REAL NOT NULL)")


def _legacy_routing(path) -> None:
    _behind_s06(path)
    _sql(path, "DROP TABLE IF EXISTS gateway_routing", LEGACY_ROUTING)
    _sql(path, "INSERT INTO gateway_routing VALUES ('k1', 'e1', 1.0), ('k2', 'e2', 2.0), "
               "('k3', 'e3', 3.0)")


@pytest.mark.sqlite_only("the routing primary-key heal is SQLite-only (A6)")
def test_gw3_legacy_routing_key_is_healed(tmp_path):
    """Behaviour 3: a ``session_key TEXT PRIMARY KEY`` routing table with 3 rows becomes
    composite, rows in scope ''; one key then saves in two scopes."""
    path = tmp_path / "state.db"
    _legacy_routing(path)
    migrate.upgrade("sessions", path)
    assert _sql(path, "SELECT scope, session_key, entry_json FROM gateway_routing "
                      "ORDER BY session_key") == [("", "k1", "e1"), ("", "k2", "e2"),
                                                  ("", "k3", "e3")]
    key = sorted((r for r in _sql(path, "PRAGMA table_info(gateway_routing)") if r[5]),
                 key=lambda r: r[5])
    assert [r[1] for r in key] == ["scope", "session_key"]
    with SessionStore(path) as s:
        assert s.save_gateway_routing_entry("k1", "A", scope="a")
        assert s.save_gateway_routing_entry("k1", "B", scope="b")
        assert s.load_gateway_routing_entries(scope="a") == {"k1": "A"}
        assert s.load_gateway_routing_entries() == {"k1": "e1", "k2": "e2", "k3": "e3"}


@pytest.mark.sqlite_only("the routing primary-key heal is SQLite-only (A6)")
def test_gw3_failure_after_the_rename_rolls_back_everything(tmp_path):
    """Behaviour 3: a failure injected after the RENAME leaves the original table with its
    3 rows and no leftover legacy table."""
    path = tmp_path / "state.db"
    _legacy_routing(path)
    renamed = []

    def inject(conn, cursor, statement, parameters, context, executemany):
        if "RENAME TO gateway_routing_legacy_pk" in statement:
            renamed.append(statement)
        elif renamed and statement.startswith("INSERT INTO gateway_routing "):
            raise RuntimeError("injected failure after the rename")

    sa.event.listen(sa.engine.Engine, "before_cursor_execute", inject)
    try:
        with pytest.raises(Exception, match="injected failure"):
            migrate.upgrade("sessions", path)
    finally:
        sa.event.remove(sa.engine.Engine, "before_cursor_execute", inject)
    assert renamed
    assert _sql(path, "SELECT sql FROM sqlite_master WHERE name = 'gateway_routing'") == [
        (LEGACY_ROUTING,)]
    assert _sql(path, "SELECT COUNT(*) FROM gateway_routing") == [(3,)]
    assert _sql(path, "SELECT name FROM sqlite_master WHERE name LIKE '%legacy_pk'") == []
    assert _sql(path, "SELECT version_num FROM alembic_version") == [("s05_ui_display",)]


@pytest.mark.sqlite_only("the routing primary-key heal is SQLite-only (A6)")
def test_gw4_leftover_legacy_table_is_merged_and_dropped(tmp_path):
    """Behaviour 4: a ``gateway_routing_legacy_pk`` leftover (3 rows) beside the canonical
    table is merged (scope NULL ⇒ '') and dropped; a canonical row with a newer or equal
    ``updated_at`` wins, an older one loses."""
    path = tmp_path / "state.db"
    _behind_s06(path)
    _sql(path, "CREATE TABLE gateway_routing (scope TEXT NOT NULL DEFAULT '', session_key TEXT "
               "NOT NULL, entry_json TEXT NOT NULL, updated_at REAL NOT NULL, "
               "PRIMARY KEY (scope, session_key))",
         "CREATE TABLE gateway_routing_legacy_pk (session_key TEXT PRIMARY KEY, scope TEXT, "
         "entry_json TEXT NOT NULL, updated_at REAL NOT NULL)")
    _sql(path, "INSERT INTO gateway_routing_legacy_pk VALUES ('k1', NULL, 'old1', 1.0), "
               "('k2', NULL, 'new2', 5.0), ('k3', 'x', 'tie3', 3.0)")
    _sql(path, "INSERT INTO gateway_routing VALUES ('', 'k1', 'canon1', 2.0), "
               "('', 'k2', 'canon2', 4.0), ('x', 'k3', 'canon3', 3.0)")
    migrate.upgrade("sessions", path)
    assert _sql(path, "SELECT scope, session_key, entry_json, updated_at FROM gateway_routing "
                      "ORDER BY session_key") == [("", "k1", "canon1", 2.0),
                                                  ("", "k2", "new2", 5.0),
                                                  ("x", "k3", "canon3", 3.0)]
    assert _sql(path, "SELECT name FROM sqlite_master WHERE name LIKE '%legacy_pk'") == []


@pytest.mark.sqlite_only("the routing primary-key heal is SQLite-only (A6)")
def test_gw4_stranded_legacy_table_alone_is_renamed_back_and_healed(tmp_path):
    """§2.4 3a: a legacy table without a canonical one is renamed back, then rebuilt."""
    path = tmp_path / "state.db"
    _behind_s06(path)
    _sql(path, "CREATE TABLE gateway_routing_legacy_pk (session_key TEXT PRIMARY KEY, "
               "entry_json TEXT NOT NULL, updated_at REAL NOT NULL)")
    _sql(path, "INSERT INTO gateway_routing_legacy_pk VALUES ('k1', 'e1', 1.0)")
    migrate.upgrade("sessions", path)
    assert _sql(path, "SELECT scope, session_key, entry_json FROM gateway_routing") == [
        ("", "k1", "e1")]
    assert _sql(path, "SELECT name FROM sqlite_master WHERE name LIKE '%legacy_pk'") == []
    assert migrate.check("sessions", path) == []


@pytest.mark.sqlite_only("read-only open of a SQLite file")
def test_gw6_read_only_handle_behind_s06(tmp_path):
    """Behaviour 6: a read-only handle on a file lacking ``gateway_heartbeats`` raises
    SchemaBehindError naming it and writes nothing; a head file (which lacks only the opt-in
    Telegram tables) opens read-only."""
    path = tmp_path / "state.db"
    migrate.upgrade("sessions", path)
    with SessionStore(path, read_only=True) as s:
        assert s.get_session("x") is None
        # Only the opt-in Telegram tables are absent: every Telegram reader answers empty.
        assert s.get_telegram_topic_binding(chat_id=1, thread_id=1) is None
        assert s.get_telegram_topic_binding_by_session(session_id="x") is None
        assert s.list_telegram_topic_bindings_for_chat(chat_id=1) == []
        assert s.is_telegram_session_linked_to_topic(session_id="x") is False
        assert s.is_telegram_topic_mode_enabled(chat_id=1, user_id=2) is False
        assert s.list_unlinked_telegram_sessions_for_user(chat_id=1, user_id=2) == []
    _sql(path, "DROP TABLE gateway_heartbeats")
    before = _sql(path, "SELECT name, sql FROM sqlite_master ORDER BY name")
    with pytest.raises(SchemaBehindError, match="gateway_heartbeats"):
        SessionStore(path, read_only=True)
    assert _sql(path, "SELECT name, sql FROM sqlite_master ORDER BY name") == before
