"""Fault-matrix scenarios of the session store's write paths (:mod:`tests.faults.base`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from tests.faults.base import MARK, Scenario, count, rows_digest

# -- the session store ------------------------------------------------------------------------

def _sessions_store(directory: Path) -> Any:
    from hermes_data import SessionStore

    return SessionStore(directory / "state.db")


def _sessions_prepare(directory: Path) -> None:
    with _sessions_store(directory) as store:
        store.create_session("s1", "cli")
        for i in range(20):
            store.append_message("s1", "user", f"acknowledged message {i}")


def _messages_observe(per_call: int) -> Callable[[Path], tuple[str, int]]:
    def observe(directory: Path) -> tuple[str, int]:
        db = directory / "state.db"
        prior = rows_digest(db, "SELECT id, session_id, role, content FROM messages "
                                "WHERE content IS NULL OR content NOT LIKE ? ORDER BY id",
                            (MARK + "%",))
        marked = count(db, "SELECT count(*) FROM messages WHERE content LIKE ?", (MARK + "%",))
        return prior, (marked // per_call if marked % per_call == 0 else -marked)
    return observe


def _append_message(store: Any, directory: Path) -> None:
    store.append_message("s1", "assistant", f"{MARK} single")


def _append_batch(store: Any, directory: Path) -> None:
    store.append_messages_batch("s1", [{"role": "user", "content": f"{MARK} {i}"}
                                       for i in range(50)])


PATHS = [
    Scenario("append_message", "state.db", _sessions_prepare, _append_message,
             _messages_observe(1), open=_sessions_store),
    Scenario("append_messages_batch", "state.db", _sessions_prepare, _append_batch,
             _messages_observe(50), open=_sessions_store),
]
