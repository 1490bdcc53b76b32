"""A settled open + close leaves no reference cycle (issue 14): the store, its backend and
(in WAL) its read pool are freed by reference counting when the last reference goes, as a
plain ``sqlite3`` connection is — nothing is left to the garbage collector at every open.
And what broke the cycles changes no answer: a closed store's token queue and a disposed
read pool still refuse. Meaningful in both journal modes (the read pool exists in WAL)."""

from __future__ import annotations

import gc
import weakref

import pytest

from hermes_data.errors import ConfigurationError
from hermes_data.sessions.storage.handle_guards import NoReadPermit
from hermes_data.sessions.store import SessionStore


@pytest.fixture
def settled(tmp_path):
    path = tmp_path / "state.db"
    with SessionStore(path) as s:
        s.create_session("a", "cli")
    SessionStore(path).close()  # the stamp: the next opens are settled opens
    return path


def test_a_closed_store_is_freed_without_the_collector(settled):
    gc.collect()
    gc.disable()
    try:
        store = SessionStore(settled)
        pool = store.read_pool
        refs = [weakref.ref(store), weakref.ref(store.backend)]
        if pool is not None:
            refs.append(weakref.ref(pool))
        store.close()
        del store, pool
        assert [r() for r in refs] == [None] * len(refs)
    finally:
        gc.enable()


def test_a_store_used_for_reads_and_writes_is_freed_after_close(settled):
    gc.collect()
    gc.disable()
    try:
        store = SessionStore(settled)
        store.get_session("a")
        ref = weakref.ref(store)
        store.close()
        del store
        gc.enable()
        gc.collect()  # the engine may hold cycles of its own; the store goes with them
        assert ref() is None
    finally:
        gc.enable()


def test_closed_store_still_refuses_token_counts(settled):
    store = SessionStore(settled)
    store.close()
    with pytest.raises(ConfigurationError, match="closed"):
        store.token_writer.enqueue("a", {"input_tokens": 1})
    assert store.token_writer.flush() is True


def test_disposed_read_pool_refuses_a_reader(settled, monkeypatch):
    monkeypatch.setenv("HERMES_DATA_JOURNAL_MODE", "wal")
    store = SessionStore(settled)
    pool = store.read_pool
    assert pool is not None
    store.close()
    with pytest.raises(NoReadPermit):
        pool._invoke_creator(None)
