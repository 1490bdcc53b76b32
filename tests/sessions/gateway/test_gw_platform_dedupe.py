"""Atomic platform-message dedupe on append (spec sessions-ext-gateway.md §3.11 A4)."""

from __future__ import annotations

import threading


def test_gw_a4_skip_if_platform_message_exists(store):
    """A4: with ``skip_if_platform_message_exists`` the append returns the existing row's id
    (even an inactive one) instead of inserting; two concurrent retries of one inbound
    message insert once; without the flag, or with an empty id, it appends as before."""
    store.create_session("s", "telegram")
    first = store.append_message("s", "user", "hi", platform_message_id="m1")
    again = store.append_message("s", "user", "hi", platform_message_id="m1",
                                 skip_if_platform_message_exists=True)
    assert again == first
    with store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE messages SET active = 0 WHERE id = ?", (first,))
    assert store.append_message("s", "user", "hi", platform_message_id="m1",
                                skip_if_platform_message_exists=True) == first
    ids: list[int] = []
    barrier = threading.Barrier(4)

    def retry():
        barrier.wait()
        ids.append(store.append_message("s", "user", "yo", platform_message_id=77,
                                        skip_if_platform_message_exists=True))

    threads = [threading.Thread(target=retry) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(ids)) == 1
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT COUNT(*) FROM messages WHERE "
                                    "platform_message_id = '77'").scalar() == 1
    assert store.append_message("s", "user", "x", platform_message_id="",
                                skip_if_platform_message_exists=True) != first
    assert store.append_message("s", "user", "hi", platform_message_id="m1") != first
