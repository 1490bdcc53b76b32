"""Helpers of the optimize-storage tests (storage §3.6): legacy-layout files, the FTS
checks every test ends with, search snapshots, and a worker run in a subprocess."""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.sessions.conftest import LEGACY_DB

#: Words the generated rows are made of (whole tokens: never a substring of another one).
WORDS = ("amber", "basalt", "cobalt", "dolmen", "ember", "fjord", "garnet", "hollow",
         "indigo", "jasper", "kelvin", "lumen", "marrow", "nimbus", "onyx", "pewter")


def legacy_file(tmp_path: Path, extra: int = 0, name: str = "state.db") -> Path:
    """A private copy of the upstream schema-21 fixture (legacy inline FTS layout) with
    ``extra`` generated messages added through its own inline triggers."""
    dest = tmp_path / name
    shutil.copyfile(LEGACY_DB, dest)
    os.chmod(dest, 0o600)
    if extra:
        add_legacy_rows(dest, extra)
    return dest


def add_legacy_rows(path: Path, n: int, session: str = "20260801_090000_a1b2c3") -> None:
    """``n`` messages of two words each from :data:`WORDS` (plus an id-derived word),
    written by plain SQL so every legacy trigger indexes them."""
    con = sqlite3.connect(path)
    con.execute("CREATE TEMP TABLE w(i INTEGER PRIMARY KEY, word TEXT)")
    con.executemany("INSERT INTO temp.w(i, word) VALUES (?, ?)", list(enumerate(WORDS)))
    con.execute(
        "WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < ?) "
        "INSERT INTO messages(session_id, role, content, timestamp, active) "
        "SELECT ?, CASE WHEN i % 5 = 0 THEN 'assistant' ELSE 'user' END, "
        "(SELECT word FROM temp.w WHERE i = k.i % 16) || ' ' || "
        "(SELECT word FROM temp.w WHERE i = (k.i / 16) % 16) || ' row' || k.i, "
        "1790000000.0 + k.i, 1 FROM k", (n, session))
    con.commit()
    con.close()


def fts_check(path: Path) -> None:
    """Both indexes pass ``'integrity-check'`` against their content (rank 1: every row of the
    source indexed exactly once, nothing else)."""
    con = sqlite3.connect(path)
    try:
        for t in ("messages_fts", "messages_fts_trigram"):
            con.execute(f"INSERT INTO {t}({t}, rank) VALUES ('integrity-check', 1)")
    finally:
        con.close()


def layout(path: Path) -> dict[str, str]:
    """name → sql of every FTS object and trash table."""
    con = sqlite3.connect(path)
    try:
        return {n: s or "" for n, s in con.execute(
            "SELECT name, sql FROM sqlite_master WHERE name GLOB 'messages_fts*' "
            "OR name GLOB 'fts_v22_trash_*'")}
    finally:
        con.close()


def meta(path: Path) -> dict[str, str]:
    con = sqlite3.connect(path)
    try:
        return dict(con.execute("SELECT key, value FROM state_meta"))
    finally:
        con.close()


def counts(path: Path) -> tuple[int, int]:
    """(messages, documents of the unicode61 index)."""
    con = sqlite3.connect(path)
    try:
        return (con.execute("SELECT COUNT(*) FROM messages").fetchone()[0],
                con.execute("SELECT COUNT(*) FROM messages_fts_docsize").fetchone()[0])
    finally:
        con.close()


def search_ids(store, terms, limit: int = 2000) -> dict[str, list[int]]:
    return {t: sorted(h.id for h in store.search_messages(t, limit=limit)) for t in terms}


def fixture_terms(path: Path) -> list[str]:
    """Latin words of the fixture that occur only as whole tokens (so a substring match of
    the gap supplement and a word match agree), the most frequent first."""
    con = sqlite3.connect(path)
    texts = [v.lower() for row in con.execute("SELECT content, tool_name, tool_calls FROM messages")
             for v in row if isinstance(v, str)]
    con.close()
    tokens: dict[str, int] = {}
    for t in texts:
        for w in re.findall(r"[a-z0-9]+", t):
            tokens[w] = tokens.get(w, 0) + 1
    words = [w for w in tokens if len(w) >= 5 and w.isalpha()]
    whole = [w for w in words
             if not any(w in other and w != other for other in tokens)]
    return sorted(whole, key=lambda w: -tokens[w])[:25]


WORKER = textwrap.dedent("""
    import os, sys
    from hermes_data.sessions import fts_storage as f
    from hermes_data.sessions.store import SessionStore
    path, point, count, chunk = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    if len(sys.argv) > 5:
        f.RESET_SUPPORTED = sys.argv[5] == "reset"
    f.PAUSE_MIN_S = 0.0
    f.PAUSE_FACTOR = 0.0
    f.CHUNK_IDS = chunk
    f.TRASH_CHUNK_ROWS = chunk
    seen = [0]
    def hook(name):
        if name == point:
            seen[0] += 1
            if seen[0] >= count:
                os._exit(77)
    if point != "none":
        f.fault_point = hook
    with SessionStore(path) as s:
        r = s.optimize_fts_storage(vacuum=False)
    print(r.ok, r.reason)
""")


def run_worker(path: Path, point: str = "none", count: int = 1, chunk: int = 500,
               timeout: float = 120, *extra: str) -> subprocess.CompletedProcess:
    """``optimize_fts_storage`` in a child process, ``os._exit(77)`` at the ``count``-th
    passage of fault point ``point`` (``"none"``: run to the end)."""
    return subprocess.run([sys.executable, "-c", WORKER, str(path), point, str(count),
                           str(chunk), *extra], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ})


def spawn_worker(path: Path, chunk: int = 50) -> subprocess.Popen:
    """The worker without a fault point, running in the background (SIGKILL tests)."""
    return subprocess.Popen([sys.executable, "-c", WORKER, str(path), "none", "1", str(chunk)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
