"""The batch append orders its own rows (issue 14): on SQLite, inside its write transaction,
``append_messages_batch`` gives each row after the transaction's first its id and its
``display_order`` as the insert trigger ``messages_display_order_insert`` would have set them
(``display.BatchOrder``), so the trigger's ``WHEN`` skips the row.

1. Identity (hypothesis, both backends): a store fed by ``append_messages_batch`` holds, row
   for row, what a store fed the same rows one ``append_message`` at a time holds — ids,
   ``display_order``, ``display_identity``, every other column — with duplicate identities
   inside the batch, peers already in the session (visible, compacted, invisible), tool rows,
   CJK text, caller-supplied identities, deleted tail rows (and, SQLite, a dropped
   ``sqlite_sequence`` entry: ids reused); the CJK queue the triggers fill, the CJK documents
   after a full drain, the search answers and the next id agree too. On PostgreSQL the batch
   path is the plain insert (its ``BEFORE INSERT`` function sets the order in the row).
2. The trigger fires once per batch transaction (its first row), not once per row, and a
   variant or missing trigger keeps the plain insert.
3. Batches past one encode chunk and past one peer lookup chunk agree with the per-row path.
"""

from __future__ import annotations

from contextlib import ExitStack

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hermes_data.sessions.storage.fts import cjk
from hermes_data.sessions.core import display_order as display
from hermes_data.sessions.core import messages as msg
from hermes_data.sessions.storage import display_sql as dsql
from hermes_data.sessions.sql.core import MESSAGE_COLS
from hermes_data.sessions.store import SessionStore

from tests.sessions.conftest import BACKENDS
from tests.sessions.core.test_batch_fts import _hits, _raw_answers, open_store_pair

CONTENTS = [None, "hello", "hello world", "needle alpha", "我们去广西桂林", "桂林", "x"]
IDENTS = [bytes([7]) * 32, bytes([9]) * 32]
QUERIES = ["hello", "needle", "alpha", "广西", "桂林", "林", "terminal"]

_ROW = st.fixed_dictionaries({
    "role": st.sampled_from(["user", "assistant", "tool", "system"]),
    "content": st.sampled_from(CONTENTS),
    "timestamp": st.sampled_from([1.0, 2.0]),
    "tool_name": st.sampled_from([None, None, "terminal"]),
    "tool_calls": st.sampled_from([None, None, [{"function": {"name": "read_file"}}]]),
    "display_identity": st.sampled_from([None, None, None, *IDENTS]),
})
#: (peers appended first, visibility per peer, tail rows deleted, drop sqlite_sequence, batch)
_CASE = st.tuples(
    st.lists(_ROW, max_size=8),
    st.lists(st.sampled_from(["active", "active", "compacted", "hidden"]), min_size=8,
             max_size=8),
    st.integers(0, 3),
    st.booleans(),
    st.lists(_ROW, min_size=1, max_size=30),
)

PROFILE = settings(max_examples=40, deadline=None,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture(scope="module", params=BACKENDS)
def pair(request, tmp_path_factory):
    """(batch store, per-row store) with identical histories; the post-commit CJK drain is
    off so the queue the triggers fill can be compared (drained explicitly afterwards)."""
    with ExitStack() as stack:
        mp = stack.enter_context(pytest.MonkeyPatch.context())
        mp.setattr(cjk, "after_append", lambda backend, messages: None)
        stores = open_store_pair(stack, request, tmp_path_factory, "batch-display", "hd_bdo")
        yield stores[0], stores[1], {"n": 0}


def _append(store: SessionStore, sid: str, m: dict) -> int:
    fields = {k: v for k, v in m.items() if k not in ("role", "content")}
    return store.append_message(sid, m["role"], m["content"], **fields)


def _exec(store: SessionStore, statement: str, params: tuple = ()) -> list:
    with store.engine.begin() as conn:
        res = conn.exec_driver_sql(statement.replace("?", "%s")
                                   if store.engine.dialect.name == "postgresql" else statement,
                                   params)
        return res.fetchall() if res.returns_rows else []


_COLS = ", ".join((*MESSAGE_COLS, "display_identity", "display_order"))
_ACTIVE, _COMPACTED = MESSAGE_COLS.index("active"), MESSAGE_COLS.index("compacted")


def _table(store: SessionStore, sid: str) -> list:
    """Every column the store writes, the display pair last, by id."""
    rows = _exec(store, f"SELECT {_COLS} FROM messages WHERE session_id = ? ORDER BY id", (sid,))
    return [tuple(bytes(v) if isinstance(v, (bytes, memoryview)) else v for v in r)
            for r in rows]


def _cjk_state(store: SessionStore) -> tuple[list, list]:
    return (_exec(store, "SELECT id FROM messages_cjk_queue ORDER BY id"),
            _exec(store, "SELECT id, doc FROM messages_cjk_doc ORDER BY id"))


def _order_updates_probe(store: SessionStore) -> None:
    """A TEMP trigger on the store's own connection logging every ``display_order`` write
    (the insert trigger's ``UPDATE`` fires it; an insert that names the order does not)."""
    raw = store.backend._raw
    raw.execute("CREATE TEMP TABLE IF NOT EXISTS order_writes (id INTEGER)")
    raw.execute("CREATE TEMP TRIGGER IF NOT EXISTS order_probe AFTER UPDATE OF display_order "
                "ON main.messages BEGIN INSERT INTO order_writes VALUES (new.id); END")
    raw.execute("DELETE FROM order_writes")


def _order_writes(store: SessionStore) -> list[int]:
    return [r[0] for r in store.backend._raw.execute("SELECT id FROM order_writes ORDER BY id")]


@PROFILE
@given(case=_CASE)
def test_batch_rows_match_the_per_row_path(pair, case):
    bulk, rows, counter = pair
    peers, visibility, tail, reset_sequence, batch = case
    sqlite = bulk.engine.dialect.name == "sqlite"
    counter["n"] += 1
    sid = f"s{counter['n']}"
    for s in (bulk, rows):
        s.create_session(sid, "cli")
        ids = [_append(s, sid, m) for m in peers]
        for i, vis in zip(ids, visibility):
            if vis != "active":
                _exec(s, "UPDATE messages SET active = 0, compacted = ? WHERE id = ?",
                      (1 if vis == "compacted" else 0, i))
        if tail and ids:
            _exec(s, "DELETE FROM messages WHERE session_id = ? AND id >= ?",
                  (sid, ids[max(0, len(ids) - tail)]))
        if sqlite and reset_sequence:  # as on a table without AUTOINCREMENT: ids reused
            _exec(s, "DELETE FROM sqlite_sequence WHERE name = 'messages'")
    assert _table(bulk, sid) == _table(rows, sid)
    if sqlite:
        _order_updates_probe(bulk)
    assert bulk.append_messages_batch(sid, batch) == len(batch)
    new_ids = [_append(rows, sid, m) for m in batch]
    got = _table(bulk, sid)
    assert got == _table(rows, sid)
    assert [r[0] for r in got[-len(batch):]] == new_ids
    assert all(r[-1] is not None for r in got if r[_ACTIVE] == 1 or r[_COMPACTED] == 1)
    if sqlite:
        writes = _order_writes(bulk)
        if len(batch) >= msg.BULK_FTS_MIN_ROWS:
            assert writes == new_ids[:1]  # only the transaction's first row went by the trigger
        else:
            assert writes == new_ids
        assert _exec(bulk, "SELECT * FROM sqlite_sequence") == _exec(
            rows, "SELECT * FROM sqlite_sequence")
        assert _cjk_state(bulk)[0] == _cjk_state(rows)[0]  # what the enqueue triggers queued
        for s in (bulk, rows):
            while cjk.cjk_index_step(s, 500):
                pass
        assert _cjk_state(bulk) == _cjk_state(rows)
    for query in QUERIES:
        assert _hits(bulk, query) == _hits(rows, query), query
        if sqlite:
            assert _raw_answers(bulk, query) == _raw_answers(rows, query), query
    assert _append(bulk, sid, batch[0]) == _append(rows, sid, batch[0])  # the next id agrees
    assert _table(bulk, sid) == _table(rows, sid)


@pytest.mark.sqlite_only("the batch's own ordering is SQLite's; PostgreSQL orders in the row")
def test_a_variant_or_missing_insert_trigger_keeps_the_plain_insert(store):
    """Whatever a non-canonical stored trigger does, it does: no order is computed."""
    store.create_session("s", "cli")
    with store.engine.begin() as conn:
        conn.exec_driver_sql(dsql.drop_trigger("messages_display_order_insert"))
    rows = [{"role": "user", "content": f"m{i % 2}", "timestamp": 1.0} for i in range(6)]
    store.append_messages_batch("s", rows)
    assert [r[-1] for r in _table(store, "s")] == [None] * 6  # as the per-row path leaves it
    with store.engine.begin() as conn:  # a variant: a comment in its body
        conn.exec_driver_sql(dsql.INSERT_TRIGGER_DDL.replace(" BEGIN ", " BEGIN /* v */ "))
    store.append_messages_batch("s", rows)
    _order_updates_probe(store)
    store.append_messages_batch("s", rows)
    assert len(_order_writes(store)) == 6  # every row went by the (variant) trigger


@pytest.mark.sqlite_only("the batch's own ordering is SQLite's; PostgreSQL orders in the row")
@pytest.mark.parametrize("foreign, per_row_sees", [
    ("CREATE TRIGGER seen_update AFTER UPDATE ON messages BEGIN "
     "INSERT INTO seen VALUES (new.id); END", 6),
    ("CREATE TRIGGER seen_insert AFTER INSERT ON messages WHEN new.display_order IS NOT NULL "
     "BEGIN INSERT INTO seen VALUES (new.id); END", 0),
])
def test_a_foreign_trigger_that_could_tell_keeps_the_trigger_path(store, foreign, per_row_sees):
    """A trigger the insert trigger's ``UPDATE`` would fire (no column list), or one reading
    ``display_order``, sees on the batch path what it sees on the per-row path."""
    store.create_session("s", "cli")
    with store.engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE seen (id INTEGER)")
        conn.exec_driver_sql(foreign)
    _order_updates_probe(store)
    store.append_messages_batch("s", [{"role": "user", "content": f"m{i}"} for i in range(6)])
    assert len(_order_writes(store)) == 6
    with store.engine.connect() as conn:
        seen = conn.exec_driver_sql("SELECT COUNT(*) FROM seen").scalar()
    assert seen == per_row_sees  # what the per-row path shows it


@pytest.mark.sqlite_only("the batch's own ordering is SQLite's (PostgreSQL: property test)")
def test_batches_past_one_encode_and_lookup_chunk(store, tmp_path):
    """Rows over three encode chunks, over 400 distinct identities (several peer lookups),
    duplicates spanning chunks, a visible peer already there: the per-row path gives the
    same rows."""
    n = msg.ENCODE_CHUNK * 2 + 7
    batch = [{"role": "user" if i % 3 else "assistant", "content": f"row {i % 450}",
              "timestamp": 5.0 + (i % 450)} for i in range(n)]
    assert display.PEER_LOOKUP_CHUNK < 450
    with SessionStore(tmp_path / "rows.db") as other:
        for s in (store, other):
            s.create_session("big", "cli")
            _append(s, "big", batch[3])
        assert store.append_messages_batch("big", batch) == n
        for m in batch:
            _append(other, "big", m)
        got = _table(store, "big")
        assert got == _table(other, "big")
        assert len({r[-1] for r in got}) == 450
        assert got[4][-1] == 1  # batch[3]'s duplicate takes the pre-existing peer's order
