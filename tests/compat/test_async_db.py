"""``hermes_data.compat.AsyncSessionDB``: upstream's asyncio forwarder over ``SessionDB``
(docs/compat.md "AsyncSessionDB"), driven by a real event loop on both backends."""

from __future__ import annotations

import asyncio
import inspect
import threading

import pytest

from hermes_data.compat import AsyncSessionDB, SessionDB


def test_every_method_is_an_awaitable_twin_run_off_the_loop(db):
    adb = AsyncSessionDB(db)
    loop_threads: list[int] = []
    worker_threads: list[int] = []

    def spy(session_id: str):
        worker_threads.append(threading.get_ident())
        return db.get_session(session_id)

    async def main():
        loop_threads.append(threading.get_ident())
        assert await adb.create_session("s1", "cli", model="m") == "s1"
        await adb.set_session_title("s1", "async title")
        row = await adb.get_session("s1")
        messages = await adb.get_messages("s1")
        count = await adb.session_count()
        db.spy = spy  # an attribute added later forwards too
        await adb.spy("s1")
        return row, messages, count

    row, messages, count = asyncio.run(main())
    assert type(row) is dict and row["title"] == "async title" and row["model"] == "m"
    assert messages == [] and count == 1
    assert worker_threads and worker_threads[0] != loop_threads[0]


def test_non_callables_pass_through(db):
    adb = AsyncSessionDB(db)
    assert adb.store is db.store
    assert adb.db_path == db.db_path
    assert adb.read_only is False
    assert adb.MAX_TITLE_LENGTH == SessionDB.MAX_TITLE_LENGTH
    assert adb.db is db
    assert inspect.iscoroutinefunction(adb.get_session)
    assert adb.get_session.__name__ == "get_session"


def test_errors_surface_at_the_await(db):
    adb = AsyncSessionDB(db)

    async def main():
        await adb.create_session("s1", "cli")
        await adb.create_session("s2", "cli")
        await adb.set_session_title("s1", "taken")
        with pytest.raises(ValueError, match="already in use"):
            await adb.set_session_title("s2", "taken")
        with pytest.raises(AttributeError):
            adb.no_such_method  # noqa: B018 - resolving the name raises, as upstream

    asyncio.run(main())


def test_concurrent_calls_on_one_loop(db):
    adb = AsyncSessionDB(db)

    async def main():
        await asyncio.gather(*(adb.create_session(f"s{i}", "cli") for i in range(8)))
        await asyncio.gather(*(adb.update_token_counts(f"s{i}", input_tokens=i)
                               for i in range(8)))
        rows = await asyncio.gather(*(adb.get_session(f"s{i}") for i in range(8)))
        return rows

    rows = asyncio.run(main())
    assert [r["input_tokens"] for r in rows] == list(range(8))
