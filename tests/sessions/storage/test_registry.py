"""The shared-handle registry (spec sessions-ext-storage §3.2, acceptance §4 item 2): one
writable store per file per process, reference-counted across real threads, retired when
its file is replaced, refused read-only, and unusable (with a harmless ``close()``) in a
forked child.
"""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

from hermes_data.errors import ConfigurationError
from hermes_data.sessions.storage import registry
from hermes_data.sessions.errors import StateDbReplacedError
from hermes_data.sessions.storage.registry import RegistryStats
from hermes_data.sessions.store import SessionStore

EMPTY = RegistryStats(0, 0, 0)


@pytest.fixture(autouse=True)
def _empty_registry():
    """Every test starts and ends with an empty registry (a failure closes what it left)."""
    assert registry.stats() == EMPTY
    yield
    registry.close_all()


def _closed(store: SessionStore) -> bool:
    return bool(store.backend._closed)  # noqa: SLF001 - the handle's own closed flag


def _run_threads(n: int, target) -> list[BaseException]:
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            target(i)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    return errors


def test_twenty_threads_share_one_store_closed_by_the_last_release(tmp_path):
    path = tmp_path / "state.db"
    start = threading.Barrier(20)
    got: list[SessionStore] = [None] * 20  # type: ignore[list-item]

    def take(i: int) -> None:
        start.wait()
        got[i] = registry.acquire(path)

    assert _run_threads(20, take) == []
    store = got[0]
    assert all(s is store for s in got)
    assert registry.stats() == RegistryStats(1, 0, 20)
    assert registry.live_stores() == [store]

    release_start = threading.Barrier(19)

    def give_back(i: int) -> None:
        release_start.wait()
        assert registry.release(store) is True

    assert _run_threads(19, give_back) == []
    assert registry.stats() == RegistryStats(1, 0, 1) and not _closed(store)
    store.create_session("s1", "cli")  # still the live, writable handle
    store.close()  # the 20th reference: close() on an owned store is a release
    assert _closed(store) and registry.stats() == EMPTY
    assert registry.release(store) is False  # never negative: the store is unknown now
    again = registry.acquire(path)
    assert again is not store and again.get_session("s1") is not None
    registry.release(again)


def test_with_block_releases_and_a_plain_store_is_closed(tmp_path):
    path = tmp_path / "state.db"
    outer = registry.acquire(path)
    (tmp_path / "sub").mkdir()
    (tmp_path / "link.db").symlink_to(path)
    for spelling in (tmp_path / "sub" / ".." / "state.db", tmp_path / "link.db",
                     f"sqlite:///{path}"):  # keyed by the resolved path
        assert registry.acquire(spelling) is outer
        registry.release(outer)
    with registry.acquire(path) as inner:
        assert inner is outer and registry.stats().total_refcounts == 2
    assert registry.stats() == RegistryStats(1, 0, 1) and not _closed(outer)
    registry.release_or_close(outer)
    assert _closed(outer) and registry.stats() == EMPTY
    plain = SessionStore(tmp_path / "plain.db")
    assert registry.release(plain) is False
    registry.release_or_close(plain)  # not the registry's: closed
    assert _closed(plain)


def test_sixteen_threads_acquire_and_release_one_path(tmp_path):
    """Issue acceptance: 16 threads × acquire/release on one path share one handle; the
    reference count never goes negative, the store closes only at zero, and a closed store
    is never handed out (each round writes through the handle it got)."""
    path = tmp_path / "state.db"
    rounds = 12
    seen: set[int] = set()
    samples: list[RegistryStats] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            samples.append(registry.stats())
            time.sleep(0.001)

    def work(i: int) -> None:
        for r in range(rounds):
            store = registry.acquire(path)
            assert not _closed(store), "a closed store was handed out"
            seen.add(id(store))
            store.set_meta(f"thread-{i}", str(r))
            if r % 3 == 0:
                time.sleep(0.002)  # overlap: some rounds hold the handle a little
            if r % 2:
                store.close()
            else:
                assert registry.release(store) is True

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        errors = _run_threads(16, work)
    finally:
        stop.set()
        watcher.join()
    assert errors == []
    assert registry.stats() == EMPTY
    assert samples and all(s.total_refcounts >= 0 and s.live_generations <= 1
                           and s.retired_generations == 0 and s.total_refcounts <= 16
                           for s in samples)
    with SessionStore(path) as check:
        assert {k: v for k, v in check.list_meta_prefix("thread-").items()} == \
            {f"thread-{i}": str(rounds - 1) for i in range(16)}


@pytest.mark.journal_independent(
    "forces DELETE mode itself: moving a file over a WAL database that a handle still holds "
    "pairs the new file with the old -wal/-shm, which no SQLite setup survives")
def test_a_replaced_file_gets_a_new_generation(tmp_path, monkeypatch):
    monkeypatch.setenv("HERMES_DATA_JOURNAL_MODE", "delete")
    path, other = tmp_path / "state.db", tmp_path / "restored.db"
    old = registry.acquire(path)
    old.create_session("before", "cli")
    with SessionStore(other) as restored:
        restored.create_session("restored", "cli")
    os.replace(other, path)  # `mv restored.db state.db` under the live handle
    new = registry.acquire(path)
    assert new is not old
    assert registry.stats() == RegistryStats(1, 1, 2)
    assert registry.live_stores() == [new]
    assert new.get_session("restored") is not None and new.get_session("before") is None
    with pytest.raises(StateDbReplacedError):
        old.create_session("after", "cli")
    assert registry.acquire(path) is new  # a sticky old one is never handed out again
    registry.release(new)
    assert registry.release(old) is True and _closed(old)  # its holder's last release
    assert registry.stats() == RegistryStats(1, 0, 1)
    registry.release(new)
    assert _closed(new) and registry.stats() == EMPTY


def test_read_only_is_refused(tmp_path):
    path = tmp_path / "state.db"
    with pytest.raises(ValueError, match="read_only=True"):
        registry.acquire(path, read_only=True)
    assert not path.exists() and registry.stats() == EMPTY


def test_later_open_options_are_ignored(tmp_path):
    path = tmp_path / "state.db"
    first = registry.acquire(path, open_patience_s=5.0)
    assert registry.acquire(path, open_patience_s=7.0) is first
    registry.release(first)
    registry.release(first)


def test_borrow_live_stores_and_close_all(tmp_path):
    a, b = registry.acquire(tmp_path / "a.db"), registry.acquire(tmp_path / "b.db")
    with registry.borrow_live_stores() as stores:
        assert set(map(id, stores)) == {id(a), id(b)}
        assert registry.stats() == RegistryStats(2, 0, 4)
    assert registry.stats() == RegistryStats(2, 0, 2)
    assert registry.live_shared_session_dbs() == registry.live_stores()
    assert registry.close_all() == 2
    assert _closed(a) and _closed(b) and registry.stats() == EMPTY
    assert registry.release(a) is False
    a.close()  # a holder's late close stays harmless
    assert registry.get_shared_session_db is registry.acquire
    assert registry.release_shared_session_db is registry.release
    assert registry.close_shared_session_dbs is registry.close_all
    assert registry.borrow_live_shared_session_dbs is registry.borrow_live_stores


def test_a_failed_open_propagates_and_leaves_nothing(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(Exception):
        registry.acquire(blocker / "state.db")  # its directory is a file
    assert registry.stats() == EMPTY
    store = registry.acquire(tmp_path / "state.db")  # the registry still works
    registry.release(store)


@pytest.mark.journal_independent(
    "forces WAL itself: only a WAL database has -wal/-shm sidecars a child could remove")
def test_a_forked_child_cannot_use_or_close_inherited_stores(tmp_path, monkeypatch):
    monkeypatch.setenv("HERMES_DATA_JOURNAL_MODE", "wal")
    path, plain_path = tmp_path / "state.db", tmp_path / "plain.db"
    owned = registry.acquire(path)
    plain = SessionStore(plain_path)
    for store in (owned, plain):
        assert store.journal_mode == "wal"
        store.create_session("parent", "cli")
    sidecars = [f"{p}{s}" for p in (path, plain_path) for s in ("-wal", "-shm")]
    assert all(os.path.exists(s) for s in sidecars)

    backends = {"owned": owned.backend, "plain": plain.backend}  # what the child inherits
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, then leave without running the parent's exit hooks
        report: dict = {}
        try:
            os.close(read_fd)
            for name, store in (("owned", owned), ("plain", plain)):
                inherited = backends[name]
                try:
                    store.create_session("child", "cli")
                    report[f"{name}_write"] = "allowed"
                except ConfigurationError as exc:
                    report[f"{name}_write"] = "fork" if "fork" in str(exc) else str(exc)
                store.close()
                store.close()
                report[f"{name}_closed"] = inherited._closed
            report["stats"] = list(registry.stats().__dict__.values())
            fresh = registry.acquire(path)  # the child's own generation works
            report["fresh_is_new"] = fresh is not owned
            fresh.create_session("child-own", "cli")
            registry.release(fresh)
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            report["error"] = repr(exc)
        os.write(write_fd, json.dumps(report).encode())
        os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd) as pipe:
        report = json.loads(pipe.read())
    os.waitpid(pid, 0)
    assert report == {"owned_write": "fork", "owned_closed": False, "plain_write": "fork",
                      "plain_closed": False, "stats": [0, 0, 0], "fresh_is_new": True}
    assert all(os.path.exists(s) for s in sidecars), "the child removed the parent's sidecars"
    # The parent's handles are untouched and see the child's own write.
    assert owned.get_session("child-own") is not None and owned.get_session("child") is None
    owned.create_session("parent-after", "cli")
    plain.create_session("parent-after", "cli")
    plain.close()
    assert registry.stats() == RegistryStats(1, 0, 1)
    registry.release(owned)


@pytest.mark.journal_independent("PostgreSQL only")
def test_postgresql_stores_are_shared_by_url(pg_session_url):
    got: list[SessionStore] = []
    lock = threading.Lock()

    def take(_: int) -> None:
        store = registry.acquire(pg_session_url)
        with lock:
            got.append(store)

    assert _run_threads(4, take) == []
    store = got[0]
    assert all(s is store for s in got) and registry.stats() == RegistryStats(1, 0, 4)
    assert store.journal_mode == "n/a"
    for _ in range(3):
        registry.release(store)
    store.session_count()
    store.close()
    assert _closed(store) and registry.stats() == EMPTY


@pytest.mark.journal_independent(
    "forces DELETE mode itself: copying a file over a WAL database that a handle still holds "
    "pairs it with the old -wal/-shm")
def test_a_sticky_store_is_retired(tmp_path, monkeypatch):
    """``cp`` over the file keeps its inode (same identity): the handle's own guard turns
    sticky on its next write, and the registry retires it for that reason."""
    import shutil

    monkeypatch.setenv("HERMES_DATA_JOURNAL_MODE", "delete")
    path, other = tmp_path / "state.db", tmp_path / "restored.db"
    old = registry.acquire(path)
    old.create_session("before", "cli")
    with SessionStore(other) as restored:
        restored.create_session("restored", "cli")
    inode = path.stat().st_ino
    shutil.copyfile(other, path)
    assert path.stat().st_ino == inode
    with pytest.raises(StateDbReplacedError):
        old.create_session("after", "cli")
    new = registry.acquire(path)
    assert new is not old and registry.stats() == RegistryStats(1, 1, 2)
    assert new.get_session("restored") is not None
    registry.release(old)
    registry.release(new)
    assert _closed(old) and _closed(new) and registry.stats() == EMPTY
