"""Revision ``s05_ui_display`` and the display triggers (spec sessions-ext-ui.md §2, acceptance
behaviours 1–6 of §6)."""

from __future__ import annotations

import random
import sqlite3
import threading

import pytest
import sqlalchemy as sa

from hermes_data.migrate import runner as migrate
from hermes_data.sessions.storage import display_schema
from hermes_data.sessions.errors import SchemaBehindError
from hermes_data.sessions.storage import display_sql as q
from hermes_data.sessions.store import SessionStore

from tests.sessions.conftest import manifest, table_digest
from tests.sessions.storage.test_open_path import dbapi_trace, sibling_holding_write_lock, writes_in

INDEXES = ("idx_messages_display_page", "idx_messages_display_backfill",
           "idx_messages_display_identity")


def _sql(path, statement: str, params=()) -> list:
    con = sqlite3.connect(path)
    try:
        out = con.execute(statement, params).fetchall()
        con.commit()
        return out
    finally:
        con.close()


def _display_triggers(path) -> dict[str, str]:
    return dict(_sql(path, "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' "
                           "AND name LIKE 'messages_display%'"))


@pytest.mark.sqlite_only("PRAGMA table_info shapes (PostgreSQL: the next test)")
def test_ab1_fresh_upgrade_declares_columns_indexes_and_four_triggers(tmp_path):
    """Behaviour 1 (SQLite)."""
    path = tmp_path / "state.db"
    migrate.upgrade("sessions", path, fast_create=False)
    info = {r[1]: r for r in _sql(path, "PRAGMA table_info(messages)")}
    assert info["display_identity"][2:5] == ("BLOB", 0, None)
    assert info["display_order"][2:5] == ("INTEGER", 0, None)
    idx = dict(_sql(path, "SELECT name, sql FROM sqlite_master WHERE type = 'index'"))
    assert "WHERE active = 1 OR compacted = 1" in idx["idx_messages_display_page"]
    assert "(display_order IS NULL OR display_identity IS NULL)" in idx[
        "idx_messages_display_backfill"]
    assert "display_identity IS NOT NULL" in idx["idx_messages_display_identity"]
    assert _display_triggers(path) == dict(q.TRIGGERS)


def test_ab1_postgresql_upgrade_declares_the_twins(pg_url):
    """Behaviour 1 (PostgreSQL): BYTEA/BIGINT nullable columns, the partial indexes, exactly
    four display triggers and ``hermes_jsonb``."""
    migrate.upgrade("sessions", pg_url)
    engine = sa.create_engine(pg_url)
    try:
        with engine.connect() as conn:
            cols = {c["name"]: c for c in sa.inspect(conn).get_columns("messages")}
            assert str(cols["display_identity"]["type"]) == "BYTEA"
            assert str(cols["display_order"]["type"]) == "BIGINT"
            assert cols["display_identity"]["nullable"] and cols["display_order"]["nullable"]
            indexes = {ix["name"]: ix for ix in sa.inspect(conn).get_indexes("messages")}
            for name in INDEXES:
                assert indexes[name]["dialect_options"].get("postgresql_where") is not None
            names = sorted(r[0] for r in conn.exec_driver_sql(
                "SELECT tgname FROM pg_trigger WHERE tgrelid = 'messages'::regclass "
                "AND NOT tgisinternal"))
            assert names == sorted(q.TRIGGER_NAMES)
            assert conn.exec_driver_sql("SELECT hermes_jsonb('{\"a\": [1]}') -> 'a', "
                                        "hermes_jsonb('not json'), hermes_jsonb(NULL)"
                                        ).one() == ([1], None, None)
        assert migrate.check("sessions", pg_url) == []
        # A settled writable open re-reads the catalogue and changes nothing.
        assert display_schema.ensure_pg_display_objects(engine) == []
    finally:
        engine.dispose()


@pytest.mark.sqlite_only("upstream state.db fixtures are SQLite files")
def test_ab2_v21_fixture_adoption_appends_pending_columns(legacy_copy):
    """Behaviour 2: both columns appended, every fixture checksum preserved, all rows pending."""
    man = manifest()
    assert "display_identity" not in {r[1] for r in _sql(legacy_copy, "PRAGMA table_info(messages)")}
    with SessionStore(legacy_copy):
        pass
    con = sqlite3.connect(legacy_copy)
    try:
        for table, entry in man["tables"].items():
            if table == "state_meta":
                continue
            assert table_digest(con, table, entry["columns"]) == (entry["sha256"], entry["rows"])
        cols = [r[1] for r in con.execute("PRAGMA table_info(messages)")]
        assert cols[-2:] == ["display_identity", "display_order"]
        total, pending = con.execute(
            "SELECT COUNT(*), SUM(display_identity IS NULL AND display_order IS NULL) "
            "FROM messages").fetchone()
        assert total > 0 and pending == total
    finally:
        con.close()
    assert set(_display_triggers(legacy_copy)) == set(q.TRIGGER_NAMES)


@pytest.mark.sqlite_only("read-only open of a SQLite file")
def test_read_only_open_behind_s05_raises_schema_behind(tmp_path):
    """§2.5: the core read probe covers both columns."""
    path = tmp_path / "state.db"
    migrate.upgrade("sessions", path, revision="s04_coordination")
    with pytest.raises(SchemaBehindError, match=r"messages\.display_identity"):
        SessionStore(path, read_only=True)


def _variant(ddl: str) -> str:
    """A trigger text that differs from ours after normalisation (an extra no-op term)."""
    return ddl.replace(" BEGIN ", " AND 1 = 1 BEGIN ", 1)


def _replace_trigger(path, name: str, ddl: str) -> None:
    con = sqlite3.connect(path, isolation_level=None)
    try:
        con.execute("BEGIN IMMEDIATE")
        con.execute(f"DROP TRIGGER {name}")
        con.execute(ddl)
        con.execute("COMMIT")
    finally:
        con.close()


@pytest.mark.sqlite_only("the SQLite open path and its trigger check")
def test_ab3_settled_reopen_issues_no_ddl_even_with_a_pinned_variant(tmp_path, monkeypatch):
    """Behaviour 3: no DROP/CREATE on a settled reopen, also for a known (pinned) variant, also
    while another process holds ``BEGIN IMMEDIATE``."""
    path = tmp_path / "state.db"
    SessionStore(path).close()
    name = "messages_display_identity_delete"
    variant = _variant(dict(q.TRIGGERS)[name])
    _replace_trigger(path, name, "  " + variant.replace(" ", "\n\t ", 3) + " \r\n")
    monkeypatch.setitem(q.KNOWN_VARIANT_DIGESTS, name,
                        (*q.KNOWN_VARIANT_DIGESTS[name], q.digest(variant)))
    with dbapi_trace() as seen:
        SessionStore(path).close()
    assert seen and writes_in(seen) == []
    with sibling_holding_write_lock(path):
        with SessionStore(path, open_patience_s=0.5) as s:
            assert s.open_repairs == []
    assert q.normalise(_display_triggers(path)[name]) == q.normalise(variant)


@pytest.mark.sqlite_only("the SQLite open path and its trigger check")
def test_ab4_altered_or_dropped_trigger_is_replaced_alone(tmp_path, monkeypatch):
    """Behaviour 4: an altered body ⇒ exactly that trigger replaced in one transaction; a
    dropped one recreated; a failure between DROP and CREATE leaves the old trigger."""
    path = tmp_path / "state.db"
    SessionStore(path).close()
    canonical = dict(q.TRIGGERS)
    name = "messages_display_visibility_update"
    _replace_trigger(path, name, _variant(canonical[name]))
    before = _display_triggers(path)
    # Failure injected between DROP and CREATE: the open fails, the old trigger stays.
    broken = tuple((n, "CREATE TRIGGER broken syntax" if n == name else d) for n, d in q.TRIGGERS)
    monkeypatch.setattr(q, "TRIGGERS", broken)
    monkeypatch.setattr(display_schema.q, "TRIGGERS", broken)
    with pytest.raises(Exception):
        SessionStore(path).close()
    monkeypatch.undo()
    assert _display_triggers(path) == before
    with dbapi_trace() as seen:
        with SessionStore(path) as s:
            assert s.open_repairs == [f"re-created display trigger {name}"]
    ddl = [s for s in writes_in(seen) if "TRIGGER" in s.upper()]
    assert [s.split()[0:2] for s in ddl] == [["DROP", "TRIGGER"], ["CREATE", "TRIGGER"]]
    assert all(name in s for s in ddl)
    assert _display_triggers(path) == canonical
    _sql(path, "DROP TRIGGER messages_display_order_insert")
    with SessionStore(path) as s:
        assert s.open_repairs == ["re-created display trigger messages_display_order_insert"]
    assert _display_triggers(path) == canonical


# -- D1 ------------------------------------------------------------------------------------

_KEYS = (b"a" * 32, b"b" * 32, b"c" * 32, None)


def _d1_violations(rows) -> list:
    """Rows ``(session_id, identity, id, order)`` of visible rows; the groups breaking D1."""
    groups: dict = {}
    for sid, ident, rid, order in rows:
        if ident is not None:
            groups.setdefault((sid, bytes(ident)), []).append((rid, order))
    return [(k, v) for k, v in groups.items()
            if {o for _, o in v} != {min(r for r, _ in v)}]


_VISIBLE = ("SELECT session_id, display_identity, id, display_order FROM messages "
            "WHERE active = 1 OR compacted = 1")


def _workload(execute, steps: int, seed: int) -> None:
    """Random statements (repeated-key inserts, bulk visibility flips, deletes, metadata and
    content writes), D1 checked after every one; ``execute(sql, params)`` commits and returns
    rows."""
    rnd = random.Random(seed)
    for step in range(steps):
        sid = rnd.choice(("s1", "s2"))
        op = rnd.random()
        if op < 0.45:
            execute("INSERT INTO messages (session_id, role, content, timestamp, "
                    "display_identity, active, compacted) VALUES (?, 'user', 'x', ?, ?, ?, ?)",
                    (sid, float(step), rnd.choice(_KEYS), int(rnd.random() < 0.8),
                     int(rnd.random() < 0.2)))
        elif op < 0.7:
            execute("UPDATE messages SET active = ?, compacted = ? WHERE session_id = ? "
                    "AND id % 3 = ?", (rnd.randint(0, 1), rnd.randint(0, 1), sid,
                                       rnd.randint(0, 2)))
        elif op < 0.8:
            execute("DELETE FROM messages WHERE id IN (SELECT id FROM messages "
                    "WHERE session_id = ? ORDER BY id LIMIT 1 OFFSET ?)", (sid, rnd.randint(0, 5)))
        elif op < 0.9:
            execute("UPDATE messages SET display_metadata = ?, observed = 1 WHERE session_id = ?",
                    (f'{{"n": {step}}}', sid))
        else:
            execute("UPDATE messages SET content = ? WHERE id IN (SELECT id FROM messages "
                    "WHERE session_id = ? ORDER BY id DESC LIMIT 1)", (f"c{step}", sid))
        bad = _d1_violations(execute(_VISIBLE, ()))
        assert not bad, (step, bad)


def _sessions_sql() -> str:
    return ("INSERT INTO sessions (id, source, started_at) VALUES ('s1', 'cli', 1.0), "
            "('s2', 'cli', 2.0)")


def test_ab5_random_workload_keeps_d1(store):
    """Behaviour 5: D1 after every statement of a random workload (both backends)."""
    with store.engine.begin() as conn:
        conn.exec_driver_sql(_sessions_sql())

    def execute(statement, params):
        with store.engine.begin() as conn:
            res = conn.exec_driver_sql(statement, tuple(params))
            return res.fetchall() if res.returns_rows else []

    _workload(execute, 160 if store.engine.dialect.name == "postgresql" else 400, seed=5)


def test_ab5_postgresql_concurrent_inserts_of_one_identity(pg_store):
    """Behaviour 5 (PostgreSQL): two connections inserting one identity into one session at
    once still leave one order, the smallest id (the functions' advisory lock)."""
    engine = pg_store.engine
    with engine.begin() as conn:
        conn.exec_driver_sql(_sessions_sql())
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            for i in range(15):
                with engine.begin() as conn:
                    barrier.wait(timeout=10)
                    conn.exec_driver_sql(
                        "INSERT INTO messages (session_id, role, content, timestamp, "
                        "display_identity) VALUES ('s1', 'user', 'x', %s, %s)", (float(i), _KEYS[0]))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    with engine.connect() as conn:
        rows = conn.exec_driver_sql(_VISIBLE).fetchall()
    assert len(rows) == 30 and not _d1_violations(rows)


def test_ab6_metadata_write_keeps_identity_content_write_makes_group_pending(store):
    """Behaviour 6 (trigger part): a ``display_metadata`` write changes neither identity, order
    nor any FTS shadow table (D2); a content update makes the row and its visible group
    pending."""
    with store.engine.begin() as conn:
        conn.exec_driver_sql(_sessions_sql())
        for i in range(3):
            conn.exec_driver_sql("INSERT INTO messages (session_id, role, content, timestamp, "
                                 "display_identity) VALUES ('s1', 'user', 'same words', 1.0, ?)",
                                 (_KEYS[0],))
        conn.exec_driver_sql("INSERT INTO messages (session_id, role, content, timestamp, "
                             "display_identity) VALUES ('s1', 'user', 'other', 2.0, ?)",
                             (_KEYS[1],))
    sqlite = store.engine.dialect.name == "sqlite"
    shadow = ["messages_fts_data", "messages_fts_idx", "messages_fts_docsize"] if sqlite else []

    def snapshot(conn):
        rows = conn.exec_driver_sql("SELECT id, display_identity, display_order FROM messages "
                                    "ORDER BY id").fetchall()
        return [tuple(r) for r in rows], [conn.exec_driver_sql(
            f"SELECT * FROM {t} ORDER BY 1").fetchall() for t in shadow]

    with store.engine.connect() as conn:
        before = snapshot(conn)
    assert [r[2] for r in before[0]] == [1, 1, 1, 4]
    with store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE messages SET display_metadata = '{\"reactions\": []}' "
                             "WHERE id = 2")
    with store.engine.connect() as conn:
        assert snapshot(conn) == before
    with store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE messages SET content = 'edited' WHERE id = 3")
    with store.engine.connect() as conn:
        rows = snapshot(conn)[0]
    assert [(r[0], r[1], r[2]) for r in rows[:3]] == [(1, None, None), (2, None, None),
                                                        (3, None, None)]
    assert rows[3][2] == 4 and bytes(rows[3][1]) == _KEYS[1]


def test_revision_carries_the_head_texts():
    """The frozen copy in s05_ui_display equals the head fragments (a change needs a revision:
    s07_storage's parallel-safety change is the one difference)."""
    import importlib.util

    from tests.conftest import REPO

    path = REPO / "migrations" / "sessions" / "versions" / "s05_ui_display.py"
    spec = importlib.util.spec_from_file_location("s05_ui_display_frozen", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod._SQLITE_TRIGGERS == q.TRIGGERS
    assert dict(mod._PG_FUNCTIONS) == q.PG_FUNCTION_BODIES
    assert dict(mod._PG_TRIGGERS) == {n: q.pg_trigger_ddl(n) for n in q.TRIGGER_NAMES}
    # s07_storage changed one attribute: hermes_jsonb is PARALLEL UNSAFE since (its EXCEPTION
    # block is a subtransaction no parallel query can open); the body is s05's.
    assert mod._PG_JSONB.replace("PARALLEL SAFE", "PARALLEL UNSAFE") == q.PG_JSONB_DDL
    assert {n: (d,) for n, d in mod._UPSTREAM_DIGESTS.items()} == q.KNOWN_VARIANT_DIGESTS
