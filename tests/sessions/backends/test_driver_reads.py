"""The DB-API read route (``backend.read_driver``) and the direct ``SessionRow`` builder:
the same answers as the SQLAlchemy route, on a pooled reader in WAL, the read patience kept,
and peer recovery's single-statement key lookup never mixing two snapshots."""

from __future__ import annotations

import sqlite3
import time

import pytest

from hermes_data.engine import SqliteSettings
from hermes_data.errors import DatabaseBusyError
from hermes_data.sessions.core import listing
from hermes_data.sessions.backends import sqlite as sqlite_backend
from hermes_data.sessions.rows import SessionRow
from hermes_data.sessions.sql.core import SESSION_ROW_COLS
from hermes_data.sessions.store import SessionStore

WAL = SqliteSettings(busy_timeout_ms=1000, journal_mode="wal")


def test_session_row_equals_the_keyword_construction():
    n = len(SESSION_ROW_COLS) + 1
    shapes = [tuple(None for _ in range(n)),
              tuple(i for i in range(n)),
              tuple("" if i % 2 else 0 for i in range(n))]
    names = (*SESSION_ROW_COLS, "system_prompt")
    tools = list(shapes[1])
    tools[names.index("tool_names")] = '["a", "b"]'
    shapes.append(tuple(tools))
    bad = list(shapes[1])
    bad[names.index("tool_names")] = "not json"
    shapes.append((*bad, "extra column the caller reads"))
    for r in shapes:
        fast, slow = listing.session_row(r), SessionRow(**listing.session_fields(r))
        assert fast == slow and repr(fast) == repr(slow) and hash(fast) == hash(slow)
        assert vars(fast) == vars(slow)


def test_read_driver_answers_like_read(store):
    store.create_session("s1", "telegram")
    store.save_gateway_routing_entry("k1", '{"a": 1}', scope="x")
    stmt = "SELECT id, source FROM sessions ORDER BY id"
    rows = store.backend.read_driver(lambda tx: [tuple(r) for r in tx.execute(stmt).fetchall()])
    one = store.backend.read_driver(lambda tx: [tuple(r) for r in tx.execute(stmt).fetchall()],
                                    single_statement=True)
    via_sa = store.backend.read(lambda c: [tuple(r) for r in c.exec_driver_sql(stmt)])
    assert rows == one == via_sa == [("s1", "telegram")]
    assert store.load_gateway_routing_entries(scope="x") == {"k1": '{"a": 1}'}


@pytest.mark.sqlite_only("the pooled mode=ro reader is a SQLite WAL fact")
def test_read_driver_uses_a_pooled_reader_and_gives_it_back(tmp_path):
    with SessionStore(tmp_path / "state.db", settings=WAL) as store:
        store.create_session("s", "cli")
        pool = store.backend.read_pool
        assert pool is not None
        seen = []
        for _ in range(3):
            store.backend.read_driver(lambda tx: seen.append(tx))
        assert len({id(c) for c in seen}) == 1 and seen[0] is not store.backend._raw
        assert pool.idle_count() == 1
        assert not seen[0].in_transaction  # committed, nothing held between reads
        with pytest.raises(ZeroDivisionError):
            store.backend.read_driver(lambda tx: (tx.execute("SELECT 1"), 1 / 0))
        assert pool.idle_count() == 1 and not seen[0].in_transaction


@pytest.mark.sqlite_only("the read patience of the pooled reader route")
def test_read_driver_retries_a_lock_conflict_then_says_busy(tmp_path, monkeypatch):
    # In WAL no sibling can lock readers out of a file this handle holds open, so the conflict
    # comes from the read function itself (as a locked FTS constructor's error would).
    with SessionStore(tmp_path / "state.db", settings=WAL) as store:
        store.create_session("s", "cli")
        calls = []

        def flaky(tx):
            calls.append(tx.in_transaction)
            if len(calls) < 3:
                tx.execute("SELECT 1")
                raise sqlite3.OperationalError("database is locked")
            return tx.execute("SELECT id FROM sessions").fetchone()[0]

        assert store.backend.read_driver(flaky) == "s"
        assert calls == [True, True, True]  # each attempt in its own read transaction
        assert store.backend.read_pool.idle_count() == 1

        def locked(tx):
            raise sqlite3.OperationalError("database is locked")

        monkeypatch.setattr(sqlite_backend, "READ_PATIENCE_S", 0.5)
        start = time.monotonic()
        with pytest.raises(DatabaseBusyError, match="healthy"):
            store.backend.read_driver(locked, single_statement=True)
        assert 0.4 < time.monotonic() - start < 5
        with pytest.raises(sqlite3.OperationalError, match="no such table"):  # not retried
            store.backend.read_driver(lambda tx: tx.execute("SELECT * FROM nowhere"))
        assert store.backend.read_pool.idle_count() == 1


def test_peer_key_miss_falls_back_to_the_tuple(store):
    store.record_gateway_session_peer("a", source="telegram", session_key="k-a", user_id="u",
                                      chat_id="c", chat_type="dm")
    store.append_message("a", "user", "hi")
    hit = store.find_latest_gateway_session_for_peer(source="telegram", session_key="k-a")
    assert hit is not None and hit.id == "a"
    miss = store.find_latest_gateway_session_for_peer(source="telegram", session_key="nope")
    assert miss is None  # no tuple given: the key alone decides
    via_tuple = store.find_latest_gateway_session_for_peer(
        source="telegram", session_key="nope", user_id="u", chat_id="c", chat_type="dm")
    assert via_tuple is not None and via_tuple.id == "a"
    assert via_tuple == store.get_session("a")


@pytest.mark.parametrize("journal", ["delete", "wal"])
def test_a_settled_open_and_a_keyed_read_make_no_sqlalchemy_engine(tmp_path, journal):
    """A handle without a read pool (rollback journal) reads on the writer's own sqlite3
    connection, a WAL handle on a pooled reader's: ``get_session`` after a settled open answers
    without the engine being made (it costs more than the open's statements)."""
    path = tmp_path / "state.db"
    settings = SqliteSettings(journal_mode=journal)
    with SessionStore(path, settings=settings) as s:
        s.create_session("s", "cli", model="m")
    with SessionStore(path, settings=settings) as s:
        assert s.journal_mode == journal
        assert (s.backend.read_pool is None) == (journal == "delete")
        row = s.get_session("s")
        assert row is not None and row.model == "m" and s.get_session("nope") is None
        assert s.backend._engine is None  # noqa: SLF001 - the lazily made engine
