"""Fault-matrix scenarios of the session store's write paths (:mod:`tests.faults.base`).

Every observe is exact: ``units`` counts whole calls of the operation only when everything
one call writes is there and consistent (the session's counters equal its rows, the
replaced transcript is exactly the new one, an adopted file is at the head revision); any
other state is reported as a negative — half-visible — number.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from pathlib import Path
from typing import Any, Callable

from tests.faults.base import MARK, Scenario, count, legacy_copy, rows_digest

#: The legacy file the adoption path adopts (tests/fixtures/README.md): an upstream state.db
#: at schema 21, sessions of several sources, a compression chain, CJK messages.
LEGACY_FIXTURE = "legacy-sessions/state_fork_v21.db"
#: Rows one call of each path writes.
BATCH = 50
REWRITE = 5
IMPORT_SESSIONS = 2
IMPORT_MESSAGES = 4

# -- the session store ------------------------------------------------------------------------

def _sessions_store(directory: Path) -> Any:
    from hermes_data import SessionStore

    return SessionStore(directory / "state.db")


def _sessions_prepare(directory: Path) -> None:
    with _sessions_store(directory) as store:
        store.create_session("s0", "cli")
        store.create_session("s1", "cli")
        for i in range(20):
            store.append_message("s0", "user", f"acknowledged message {i} of s0")
            store.append_message("s1", "user", f"acknowledged message {i}")


def _counters_match(db: Path, session_id: str) -> bool:
    """The session's ``message_count`` is its active rows: a call is whole or not at all."""
    return count(db, "SELECT count(*) FROM messages WHERE session_id = ? AND active = 1",
                 (session_id,)) == count(db, "SELECT message_count FROM sessions WHERE id = ?",
                                         (session_id,))


def _messages_observe(per_call: int) -> Callable[[Path], tuple[str, int]]:
    def observe(directory: Path) -> tuple[str, int]:
        db = directory / "state.db"
        prior = rows_digest(db, "SELECT id, session_id, role, content FROM messages "
                                "WHERE content IS NULL OR content NOT LIKE ? ORDER BY id",
                            (MARK + "%",))
        marked = count(db, "SELECT count(*) FROM messages WHERE content LIKE ?", (MARK + "%",))
        whole = marked % per_call == 0 and _counters_match(db, "s1")
        return prior, (marked // per_call if whole else -1 - marked)
    return observe


def _append_message(store: Any, directory: Path) -> None:
    store.append_message("s1", "assistant", f"{MARK} single")


def _append_batch(store: Any, directory: Path) -> None:
    store.append_messages_batch("s1", [{"role": "user", "content": f"{MARK} {i}"}
                                       for i in range(BATCH)])


# -- transcript rewrites: each call archives the active rows and adds REWRITE new ones --------

def _rewrite_observe(directory: Path) -> tuple[str, int]:
    """Every row written before stays (rewrites archive, never delete, here); the call is
    whole when s1's active rows are exactly the newest call's REWRITE marked rows (or the 20
    originals, before any) and its counter agrees."""
    db = directory / "state.db"
    prior = rows_digest(db, "SELECT id, session_id, role, content FROM messages "
                            "WHERE content NOT LIKE ? ORDER BY id", (MARK + "%",))
    marked = count(db, "SELECT count(*) FROM messages WHERE content LIKE ?", (MARK + "%",))
    active = count(db, "SELECT count(*) FROM messages WHERE session_id = 's1' AND active = 1")
    active_marked = count(db, "SELECT count(*) FROM messages WHERE session_id = 's1' "
                              "AND active = 1 AND content LIKE ?", (MARK + "%",))
    units, rest = divmod(marked, REWRITE)
    want = (REWRITE, REWRITE) if units else (20, 0)
    s0_whole = count(db, "SELECT count(*) FROM messages WHERE session_id = 's0' "
                         "AND active = 1") == 20
    whole = (not rest and (active, active_marked) == want and s0_whole
             and _counters_match(db, "s1"))
    return prior, (units if whole else -1 - marked)


def _rewritten(call: str) -> list[dict[str, str]]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": f"{MARK} {call} {i}"}
            for i in range(REWRITE)]


def _replace_messages(store: Any, directory: Path) -> None:
    store.replace_messages("s1", _rewritten("replaced"), archive_dropped=True)


def _archive_and_compact(store: Any, directory: Path) -> None:
    store.archive_and_compact("s1", _rewritten("compacted"))


# -- import: IMPORT_SESSIONS new sessions (fresh ids each call), titled, with messages ---------

def _import_observe(directory: Path) -> tuple[str, int]:
    db = directory / "state.db"
    prior = rows_digest(db, "SELECT s.id, s.title, s.message_count, m.id, m.role, m.content "
                            "FROM sessions s LEFT JOIN messages m ON m.session_id = s.id "
                            "WHERE s.id NOT LIKE ? ORDER BY s.id, m.id", (MARK + "%",))
    sessions = count(db, "SELECT count(*) FROM sessions WHERE id LIKE ?", (MARK + "%",))
    messages = count(db, "SELECT count(*) FROM messages WHERE session_id LIKE ?", (MARK + "%",))
    titled = count(db, "SELECT count(*) FROM sessions WHERE id LIKE ? AND title = id "
                       "AND message_count = ?", (MARK + "%", IMPORT_MESSAGES))
    units, rest = divmod(sessions, IMPORT_SESSIONS)
    whole = not rest and titled == sessions and messages == sessions * IMPORT_MESSAGES
    return prior, (units if whole else -1 - sessions)


def _import_sessions(store: Any, directory: Path) -> None:
    call = uuid.uuid4().hex[:12]
    entries = []
    for n in range(IMPORT_SESSIONS):
        sid = f"{MARK}-{call}-{n}"
        entries.append({"id": sid, "source": "cli", "title": sid, "started_at": 1_700_000_000.0,
                        "messages": [{"role": "user", "content": f"imported {sid} {i}",
                                      "timestamp": 1_700_000_000.0 + i}
                                     for i in range(IMPORT_MESSAGES)]})
    result = store.import_sessions(entries)
    if not result.ok or result.imported != IMPORT_SESSIONS or result.warnings:
        raise AssertionError(f"import_sessions did not import everything: {result}")


# -- opening: creation of a new store and adoption of a legacy file ---------------------------

def _head() -> str:
    from hermes_data.migrate import runner

    return runner.store_spec("sessions").head


def _revision(db: Path) -> str | None:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        if con.execute("SELECT 1 FROM sqlite_master WHERE name = 'alembic_version'").fetchone():
            row = con.execute("SELECT version_num FROM alembic_version").fetchone()
            return None if row is None else str(row[0])
        return None
    finally:
        con.close()


def _open_and_close(handle: Any, directory: Path) -> None:
    _sessions_store(directory).close()


def _create_prepare(directory: Path) -> None:
    """Nothing: the operation creates ``state.db``."""


def _create_observe(directory: Path) -> tuple[str, int]:
    """0: no store (no file, or an empty one — the checker's own connection may leave a
    0-byte file, which the next open treats as new); 1: a store at the head revision."""
    db = directory / "state.db"
    if not db.exists() or db.stat().st_size == 0:
        return "", 0
    if count(db, "SELECT count(*) FROM sqlite_master") == 0:
        return "", 0
    return "", (1 if _revision(db) == _head() else -1)


def _adopt_prepare(directory: Path) -> None:
    legacy_copy(LEGACY_FIXTURE, directory / "state.db")
    (directory / "legacy.json").write_text(json.dumps(_legacy_rows(directory / "state.db")))


#: The upstream rows adoption must carry over unchanged (the columns every upstream schema has).
_LEGACY_QUERIES = {
    "sessions": "SELECT id, source, user_id, model, parent_session_id, started_at, ended_at, "
                "end_reason, title FROM sessions ORDER BY id",
    "messages": "SELECT id, session_id, role, content, tool_call_id, tool_calls, tool_name, "
                "timestamp FROM messages ORDER BY id",
}


def _legacy_rows(db: Path) -> dict[str, str]:
    return {table: rows_digest(db, query) for table, query in _LEGACY_QUERIES.items()}


def _adopt_observe(directory: Path) -> tuple[str, int]:
    """prior: the legacy sessions/messages rows, digest equal to the pristine file's (else
    the digests themselves, which differ); units: 1 at the head revision, 0 untouched (no
    version table), anything else half-adopted."""
    db = directory / "state.db"
    want = json.loads((directory / "legacy.json").read_text())
    found = _legacy_rows(db)
    prior = "intact" if found == want else json.dumps(found)
    revision = _revision(db)
    return prior, (1 if revision == _head() else 0 if revision is None else -1)


PATHS = [
    Scenario("append_message", "state.db", _sessions_prepare, _append_message,
             _messages_observe(1), open=_sessions_store),
    Scenario("append_messages_batch", "state.db", _sessions_prepare, _append_batch,
             _messages_observe(BATCH), open=_sessions_store),
    Scenario("replace_messages", "state.db", _sessions_prepare, _replace_messages,
             _rewrite_observe, open=_sessions_store),
    Scenario("archive_and_compact", "state.db", _sessions_prepare, _archive_and_compact,
             _rewrite_observe, open=_sessions_store),
    Scenario("import_sessions", "state.db", _sessions_prepare, _import_sessions,
             _import_observe, open=_sessions_store),
    Scenario("sessions_create", "state.db", _create_prepare, _open_and_close,
             _create_observe, idempotent=True),
    Scenario("sessions_adopt_legacy", "state.db", _adopt_prepare, _open_and_close,
             _adopt_observe, idempotent=True),
]
