"""The session store on a PostgreSQL server that goes away (issue 31; docs/postgresql.md,
"When the server goes away"): restarts, a backend terminated mid-transaction, a statement
timeout, and coordination leases across a restart — on a private server (conftest.py)."""

from __future__ import annotations

import threading
import uuid

import psycopg
import pytest
from sqlalchemy import event

from hermes_data.errors import DatabaseUnavailableError, HermesDataError, StatementTimeoutError
from hermes_data.sessions.errors import SessionTurnLeaseLostError
from hermes_data.sessions.store import SessionStore

from .conftest import PASSWORD

pytestmark = pytest.mark.journal_independent("PostgreSQL only: a private server that goes away")


@pytest.fixture
def store(faults_sessions_url):
    with SessionStore(faults_sessions_url) as s:
        yield s


def new_session(store: SessionStore) -> str:
    sid = f"s-{uuid.uuid4().hex[:10]}"
    store.create_session(sid, source="cli")
    return sid


def counted_and_stored(store: SessionStore, sid: str) -> tuple[int, int]:
    """The session's message counter and its message rows (read through the store)."""
    return store.get_session(sid).message_count, len(store.get_messages(sid))


def assert_plain(err: HermesDataError, where: str) -> None:
    """A typed error names the store and URL, never the password or the statement."""
    text = str(err)
    assert where in text and "postgresql+psycopg://postgres:***@127.0.0.1" in text, text
    assert PASSWORD not in text
    for sql in ("INSERT", "UPDATE", "SELECT", "[SQL", "parameters"):
        assert sql not in text, text


def on_statement(store: SessionStore, needle: str, action) -> list[int]:
    """Call ``action(conn)`` once, just before the first statement containing ``needle``
    runs on the store's engine (a real hook inside the open transaction)."""
    fired: list[int] = []

    def hook(conn, cursor, statement, parameters, context, executemany):
        if needle in statement and not fired:
            fired.append(conn.connection.driver_connection.info.backend_pid)
            action(conn)

    event.listen(store.engine, "before_cursor_execute", hook)
    return fired


def test_the_first_write_and_read_after_a_restart_succeed(store, private_pg):
    sid = new_session(store)
    store.append_message(sid, "user", "before")
    private_pg.restart("fast")  # the held writer and the pooled readers are now dead
    store.append_message(sid, "user", "after")  # reconnects first: no error reaches us
    assert [m.content for m in store.get_messages(sid)] == ["before", "after"]
    assert counted_and_stored(store, sid) == (2, 2)


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_a_write_in_flight_during_a_restart_is_typed_and_all_or_nothing(store, private_pg, mode):
    sid = new_session(store)
    store.append_message(sid, "user", "kept")
    fired = on_statement(store, "INSERT INTO messages", lambda conn: private_pg.restart(mode))
    with pytest.raises(DatabaseUnavailableError) as info:
        store.append_messages_batch(sid, [{"role": "user", "content": f"m{i}"} for i in range(5)])
    # The server's FATAL (57P01 / 57P02) or libpq's "server closed the connection": the
    # backend of a transaction in progress may be gone before it can say why.
    assert fired and info.value.sqlstate in (None, "57P01", "57P02")
    assert not info.value.outcome_unknown
    assert "rolled back" in str(info.value)
    assert_plain(info.value, "session store")
    # The store reconnects by itself: reads and the next write succeed; nothing half-written.
    assert counted_and_stored(store, sid) == (1, 1)
    store.append_messages_batch(sid, [{"role": "user", "content": "next"}])
    assert [m.content for m in store.get_messages(sid)] == ["kept", "next"]
    assert counted_and_stored(store, sid) == (2, 2)


def test_a_backend_terminated_mid_transaction(store, private_pg):
    sid = new_session(store)
    store.append_message(sid, "user", "kept")
    # The batch's transaction has already raised the session's counters when its INSERT is
    # about to run: the server ends that backend then.
    fired = on_statement(store, "INSERT INTO messages",
                         lambda conn: private_pg.terminate(
                             conn.connection.driver_connection.info.backend_pid))
    with pytest.raises(DatabaseUnavailableError) as info:
        store.append_messages_batch(sid, [{"role": "user", "content": f"m{i}"} for i in range(4)])
    assert fired and info.value.sqlstate in (None, "57P01") and not info.value.outcome_unknown
    assert_plain(info.value, "session store")
    assert counted_and_stored(store, sid) == (1, 1)  # the counter rose with the rows: rolled back
    store.append_messages_batch(sid, [{"role": "user", "content": "next"}])
    assert [m.content for m in store.get_messages(sid)] == ["kept", "next"]
    assert counted_and_stored(store, sid) == (2, 2)


def test_a_read_whose_connection_is_dropped_runs_once_more(store, private_pg):
    sid = new_session(store)
    store.append_message(sid, "user", "hi")
    # The pooled reader passed the checkout poll; the server ends it before the statement.
    fired = on_statement(store, "FROM messages",
                         lambda conn: private_pg.terminate(
                             conn.connection.driver_connection.info.backend_pid))
    assert [m.content for m in store.get_messages(sid)] == ["hi"]
    assert fired


def test_a_statement_timeout_is_typed_and_the_store_stays_usable(faults_sessions_url, private_pg):
    url = faults_sessions_url + "?options=-c%20statement_timeout%3D300"
    with SessionStore(url) as store:
        sid = new_session(store)
        with psycopg.connect(faults_sessions_url.replace("postgresql+psycopg", "postgresql")) as other:
            other.execute("SELECT 1 FROM sessions WHERE id = %s FOR UPDATE", (sid,))
            with pytest.raises(StatementTimeoutError) as info:  # waits on the row lock
                store.append_message(sid, "user", "blocked")
            other.rollback()
        assert isinstance(info.value, TimeoutError) and info.value.sqlstate == "57014"
        assert_plain(info.value, "session store")
        assert counted_and_stored(store, sid) == (0, 0)
        store.append_message(sid, "user", "after")
        assert counted_and_stored(store, sid) == (1, 1)


def test_leases_stay_exclusive_across_a_restart(faults_sessions_url, private_pg):
    """Two handles stand for two hosts: what A held before the restart, A still holds after
    it, and B cannot take it."""
    with SessionStore(faults_sessions_url) as a, SessionStore(faults_sessions_url) as b:
        sid = new_session(a)
        assert a.try_acquire_session_turn_lease(sid, "host-a")
        assert a.try_acquire_compression_lock(sid, "host-a")
        assert a.request_handoff(sid, "telegram") and a.claim_handoff(sid, claimant="host-a")
        b.get_session(sid)  # B's connections exist too, and die with the restart
        private_pg.restart("immediate")
        assert not b.try_acquire_session_turn_lease(sid, "host-b")
        assert not b.try_acquire_compression_lock(sid, "host-b")
        assert not b.claim_handoff(sid, claimant="host-b")
        with pytest.raises(SessionTurnLeaseLostError):
            b.append_message(sid, "user", "from b", turn_lease_holder="host-b")
        assert a.refresh_session_turn_lease(sid, "host-a")
        assert a.refresh_compression_lock(sid, "host-a")
        assert a.get_compression_lock_holder(sid) == "host-a"
        a.append_message(sid, "assistant", "from a", turn_lease_holder="host-a")
        assert a.complete_handoff(sid, claimant="host-a")
        assert [m.content for m in b.get_messages(sid)] == ["from a"]
