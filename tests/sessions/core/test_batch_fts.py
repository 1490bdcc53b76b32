"""The batch append's bulk FTS fill (issue 14): a batch indexes its rows with one
INSERT … SELECT per index inside its own transaction instead of one trigger firing per row.

1. Identity (hypothesis, both backends): a store fed by ``append_messages_batch`` answers
   every search exactly like a store fed the same rows one ``append_message`` at a time
   (same hits, snippets, order); on SQLite also the raw FTS5 answers (rowids, snippets,
   bm25) of both indexes, and ``'integrity-check'`` passes. On PostgreSQL the index
   document is a stored generated column, so the batch path is the plain insert.
2. The gate markers a batch borrows come back exactly as they were (an open rebuild window
   included), and a trigger of another shape that reads them turns the bulk fill off.
3. SIGKILL of a real process mid-batch (rows inserted under the closed gate; or during the
   fill) leaves neither rows nor index entries nor borrowed markers.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hermes_data.sessions.core import messages as msg
from hermes_data.sessions.storage.fts import ddl as fts
from hermes_data.sessions.storage.fts import gate_sql as gate
from hermes_data.sessions.store import SessionStore

from tests.conftest import scratch_store_database
from tests.sessions.conftest import BACKENDS, _truncate, module_target

REPO = Path(__file__).resolve().parents[3]

WORDS = ["alpha", "beta", "gamma", "délta", "Straße", "needle", "read_file", "gateway/run.py",
         "桂林市广西", "ΑΘΗΝΑ", "tail9", "e=mc2", "x"]
QUERIES = WORDS + ["amm", "林市广", "alpha beta", '"needle tail9"', "gam*", "read_file OR beta"]

_ROW = st.fixed_dictionaries({
    "role": st.sampled_from(["user", "assistant", "tool", "system"]),
    "content": st.one_of(
        st.none(),
        st.lists(st.sampled_from(WORDS), max_size=6).map(" ".join),
        st.tuples(st.lists(st.sampled_from(WORDS), max_size=3).map(" ".join),
                  st.text(max_size=12)).map(" ".join),
        st.sampled_from(WORDS).map(lambda w: "z" * 8200 + " " + w),  # beyond the tool prefix
    ),
    "tool_name": st.one_of(st.none(), st.sampled_from(["terminal", "read_file"])),
    "tool_calls": st.one_of(st.none(), st.lists(
        st.sampled_from(WORDS).map(lambda w: {"function": {"name": w}}), min_size=1, max_size=2)),
})
_BATCH = st.tuples(st.sampled_from(["cli", "cron", "subagent", "delegate"]),
                   st.lists(_ROW, min_size=1, max_size=24))

PROFILE = settings(max_examples=30, deadline=None,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def open_store_pair(stack: ExitStack, request, tmp_path_factory, tag: str,
                    pg_name: str) -> list[SessionStore]:
    """Two empty stores of the backend ``request.param`` names, closed by ``stack``: two
    SQLite files in a ``tag`` directory, or the session PostgreSQL database (emptied, see
    :func:`module_target`) and a scratch database ``pg_name``."""
    first = module_target(request, tmp_path_factory, tag)
    second = (first.with_name("rows.db") if request.param == "sqlite"
              else stack.enter_context(scratch_store_database("sessions", pg_name)))
    return [stack.enter_context(SessionStore(t)) for t in (first, second)]


@pytest.fixture(scope="module", params=BACKENDS)
def pair(request, tmp_path_factory):
    """(batch store, per-row store) with identical histories: ids line up."""
    with ExitStack() as stack:
        stores = open_store_pair(stack, request, tmp_path_factory, "batch-fts", "hd_bat")
        for s in stores:
            s.create_session("parent", "cli")
        yield stores[0], stores[1], {"n": 0}


def _session(store: SessionStore, sid: str, source: str) -> None:
    if source == "delegate":
        store.create_child_session("parent", sid, "delegate")
    else:
        store.create_session(sid, source)


def _hits(store: SessionStore, query: str, **kwargs) -> list:
    """Search hits without the session's start time (each store stamped its own)."""
    return [replace(h, session_started=None)
            for h in store.search_messages(query, limit=200, **kwargs)]


def _raw_answers(store: SessionStore, query: str) -> list:
    out = []
    with store.engine.connect() as conn:
        for table in fts.FTS_VIRTUAL_TABLES:
            try:
                out.append(conn.exec_driver_sql(
                    f"SELECT rowid, snippet({table}, -1, '[', ']', '…', 6), bm25({table}) "
                    f"FROM {table} WHERE {table} MATCH ? ORDER BY rowid", (query,)).fetchall())
            except Exception as exc:  # a query FTS5 rejects must be rejected by both
                out.append(type(exc).__name__)
    return out


@PROFILE
@given(batch=_BATCH)
def test_batch_search_matches_the_per_row_path(pair, batch):
    bulk, rows, counter = pair
    source, messages = batch
    counter["n"] += 1
    sid = f"s{counter['n']}"
    messages = [{**m, "timestamp": 1_000.0 + i} for i, m in enumerate(messages)]
    statements: list[str] = []
    sqlite = bulk.engine.dialect.name == "sqlite"
    for s in (bulk, rows):
        _session(s, sid, source)
    if sqlite:
        bulk.backend._raw.set_trace_callback(statements.append)
    try:
        assert bulk.append_messages_batch(sid, messages) == len(messages)
    finally:
        if sqlite:
            bulk.backend._raw.set_trace_callback(None)
    ids = [rows.append_message(sid, m["role"], m["content"], tool_name=m["tool_name"],
                               tool_calls=m["tool_calls"], timestamp=m["timestamp"])
           for m in messages]
    assert [m.id for m in bulk.get_messages(sid)] == ids
    if sqlite:
        filled = any(s.startswith("INSERT INTO messages_fts(rowid") for s in statements)
        assert filled == (len(messages) >= msg.BULK_FTS_MIN_ROWS)
    for query in QUERIES:
        for kwargs in ({}, {"sort": "newest"}, {"role_filter": ["tool", "user"]}):
            assert _hits(bulk, query, **kwargs) == _hits(rows, query, **kwargs), (query, kwargs)
        if sqlite:
            assert _raw_answers(bulk, query) == _raw_answers(rows, query), query
    if sqlite:
        with bulk.engine.begin() as conn:
            for table in fts.FTS_VIRTUAL_TABLES:
                conn.exec_driver_sql(f"INSERT INTO {table}({table}) VALUES ('integrity-check')")
            assert conn.exec_driver_sql(
                "SELECT COUNT(*) FROM state_meta WHERE key LIKE 'fts_rebuild_%'").scalar() == 0


def _rows(n: int, word: str) -> list[dict]:
    return [{"role": "assistant" if i % 2 else "user", "content": f"{word} number{i}"}
            for i in range(n)]


def _match(store: SessionStore, table: str, term: str) -> list[int]:
    with store.engine.connect() as conn:
        return [r[0] for r in conn.exec_driver_sql(
            f"SELECT rowid FROM {table} WHERE {table} MATCH ? ORDER BY rowid", (term,))]


def _markers(path: Path) -> dict:
    con = sqlite3.connect(path)
    try:
        return dict(con.execute(gate.READ_GATE).fetchall())
    finally:
        con.close()


def test_an_open_rebuild_window_is_kept_and_honoured(sqlite_store):
    s = sqlite_store
    s.create_session("s", "cli")
    s.append_messages_batch("s", _rows(6, "old"))
    with s.engine.begin() as conn:  # rows (2, 4] are "not yet indexed" by a backfill
        conn.exec_driver_sql("INSERT INTO state_meta VALUES ('fts_rebuild_high_water', '4'), "
                             "('fts_rebuild_progress', '2')")
    s.append_messages_batch("s", _rows(10, "fresh"))
    assert _markers(s.path) == {"fts_rebuild_high_water": "4", "fts_rebuild_progress": "2"}
    assert _match(s, "messages_fts", "fresh") == list(range(7, 17))
    assert _match(s, "messages_fts_trigram", "fresh") == list(range(7, 17))
    with s.engine.begin() as conn:
        conn.exec_driver_sql("DELETE FROM state_meta WHERE key LIKE 'fts_rebuild_%'")


def test_a_missing_trigram_trigger_leaves_the_trigram_index_alone(sqlite_store):
    s = sqlite_store
    s.create_session("s", "cli")
    with s.engine.begin() as conn:
        conn.exec_driver_sql("DROP TRIGGER messages_fts_trigram_insert")
    s.append_messages_batch("s", _rows(10, "plain"))
    assert _match(s, "messages_fts", "plain") == list(range(1, 11))
    assert _match(s, "messages_fts_trigram", "plain") == []


def test_a_foreign_trigger_reading_the_gate_turns_the_bulk_fill_off(sqlite_store):
    s = sqlite_store
    s.create_session("s", "cli")
    with s.engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE seen (id INTEGER)")
        conn.exec_driver_sql(
            "CREATE TRIGGER foreign_gate AFTER INSERT ON messages WHEN new.id > COALESCE("
            "(SELECT CAST(value AS INTEGER) FROM state_meta WHERE key = "
            "'fts_rebuild_high_water'), -1) BEGIN INSERT INTO seen VALUES (new.id); END")
    statements: list[str] = []
    s.backend._raw.set_trace_callback(statements.append)
    s.append_messages_batch("s", _rows(10, "plain"))
    s.backend._raw.set_trace_callback(None)
    assert not any(x.startswith("INSERT INTO messages_fts(rowid") for x in statements)
    with s.engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT COUNT(*) FROM seen").scalar() == 10
    assert _match(s, "messages_fts", "plain") == list(range(1, 11))


_CHILD = textwrap.dedent("""
    import sys, time
    from hermes_data.sessions.store import SessionStore

    target, point = sys.argv[1], sys.argv[2]
    store = SessionStore(target)
    count = [0]

    def hit():
        print("inside", flush=True)
        time.sleep(120)

    def trace(statement):
        if point == "rows" and statement.startswith("INSERT INTO messages ("):
            count[0] += 1
            if count[0] == 1500:  # the second encode chunk: 1,499 rows in, gate closed
                hit()
        elif point == "fill" and statement.startswith("INSERT INTO messages_fts_trigram(rowid"):
            hit()  # every row in, the markers restored, the base index filled

    if store.engine.dialect.name == "sqlite":
        store.backend._raw.set_trace_callback(trace)
    else:
        from sqlalchemy import event

        @event.listens_for(store.engine, "before_cursor_execute")
        def _before(conn, cursor, statement, parameters, context, executemany):
            if executemany and statement.startswith("INSERT INTO messages ("):
                count[0] += 1
                if count[0] == 2:  # the second executemany: the first chunk is in
                    hit()

    rows = [{"role": "assistant" if i % 2 else "user", "content": f"killedword row{i}"}
            for i in range(3000)]
    store.append_messages_batch("s", rows)
    print("finished", flush=True)
""")


@pytest.mark.parametrize("point", ["rows", "fill"])
def test_sigkill_mid_batch_leaves_nothing(backend, point, tmp_path, request):
    if backend == "postgresql" and point == "fill":
        pytest.skip("PostgreSQL has no fill step: the document is a generated column")
    if backend == "sqlite":
        target: str = str(tmp_path / "state.db")
    else:
        target = request.getfixturevalue("pg_session_url")
        _truncate(target)
    with SessionStore(target) as s:
        s.create_session("s", "cli")
        s.append_messages_batch("s", _rows(20, "kept"))
        before = s.get_session("s").message_count
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen([sys.executable, "-c", _CHILD, target, point], env=env,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "inside"
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == -signal.SIGKILL
    with SessionStore(target) as s:
        assert s.get_session("s").message_count == before == 20
        assert len(s.get_messages("s")) == 20
        assert s.search_messages("killedword") == []
        assert len(s.search_messages("kept", limit=50)) == 20
        if backend == "sqlite":
            for table in fts.FTS_VIRTUAL_TABLES:
                assert _match(s, table, "killedword") == []
                assert len(_match(s, table, "kept")) == 20
            with s.engine.begin() as conn:
                for table in fts.FTS_VIRTUAL_TABLES:
                    conn.exec_driver_sql(f"INSERT INTO {table}({table}) VALUES ('integrity-check')")
            assert _markers(Path(target)) == {}
        # The store carries on: the next batch is indexed as usual.
        s.append_messages_batch("s", _rows(10, "after"))
        assert len(s.search_messages("after", limit=50)) == 10


def test_a_failure_past_the_first_encode_chunk_leaves_nothing(store):
    """The input is encoded chunk by chunk inside the one transaction: an encoding failure
    after 1,000 rows are in rolls all of them back (counters and index included)."""
    store.create_session("s", "cli")
    rows = _rows(msg.ENCODE_CHUNK + 500, "doomed")
    rows[msg.ENCODE_CHUNK + 10] = {"role": "assistant", "content": "x", "tool_calls": [object()]}
    with pytest.raises(TypeError):
        store.append_messages_batch("s", rows)
    assert store.get_messages("s", include_inactive=True) == []
    assert store.get_session("s").message_count == 0
    assert store.search_messages("doomed") == []
    with pytest.raises(TypeError):  # with chunk_rows every row is encoded before any commit
        store.append_messages_batch("s", rows, chunk_rows=100)
    assert store.get_messages("s", include_inactive=True) == []
    assert store.append_messages_batch("s", iter(_rows(5, "fromiter"))) == 5
    assert len(store.search_messages("fromiter", limit=10)) == 5
