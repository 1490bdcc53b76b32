"""The CJK-bigram index of the SQLite session store (docs/sessions-storage.md §2.2, §3.9).

Short CJK queries (1–2 letters) have no trigram; these objects serve them without a native
tokenizer. Letter pairs are computed in Python (:mod:`hermes_data.sessions.storage.fts.cjk`) into a side
table indexed by FTS5's built-in ``ascii`` tokenizer; triggers on ``messages`` only queue
ids, in pure SQL, so a foreign writer (upstream Hermes, a plain ``sqlite3`` shell) can never
fail on them.

* ``messages_cjk_doc(id, doc)`` — one document per indexed message: its distinct letter
  pairs and run-final letters, space-joined (written only by hermes-data, post-commit).
* ``messages_cjk_queue(id)`` — message ids whose document may be out of date.
* ``messages_cjk_fts`` — external-content FTS5 over the documents, ``tokenize='ascii'``
  (every non-ASCII code point is a token character whatever the build's Unicode tables),
  ``detail='none'`` (rowids only: prefix/AND/OR queries work, phrases raise).
* Three document triggers keep the FTS table equal to the documents; three queue triggers on
  ``messages`` enqueue an id when a row in scope (not a tool row, a trigram-eligible session)
  holds a non-ASCII character, or when an indexed row changes or goes away. The gate is
  "non-ASCII present" (a length comparison, 3 µs per 2 k characters), not a CJK ``GLOB``
  class (395 µs); Python decides what is CJK.

The objects are ``text()``-style fragments created by the writable open (and by a fresh
store), not by an Alembic revision; the storage revision ``s07_storage`` adopts exactly these
texts add-only. None of the names begins with ``messages_fts``, so the FTS checks, repairs
and demotes of that family never touch them. Every value is bound; identifiers are fixed.
The search statements over the index (its candidates, the verified pages) are in
:mod:`hermes_data.sessions.search.cjk_sql`.
"""

from __future__ import annotations

from typing import Any, Callable

import sqlalchemy as sa

from hermes_data.sessions.schema import messages, messages_cjk_queue, sessions, state_meta
from hermes_data.sessions.sql.constructs import bp, module_statement
from hermes_data.sessions.sql.meta_sql import MetaStatements, meta_keys
from hermes_data.sessions.sql.ddl import checked_drop
from hermes_data.sessions.sql.dialect import driver_statement
from hermes_data.sessions.storage.fts.ddl import tri_session

#: Object names (fixed), and the FTS5 shadow tables of the index.
CJK_DOC = "messages_cjk_doc"
CJK_QUEUE = "messages_cjk_queue"
CJK_FTS = "messages_cjk_fts"
CJK_FTS_SHADOWS = tuple(CJK_FTS + s for s in ("_data", "_idx", "_docsize", "_config"))
#: Every table of the index (the shape check and copies ignore them: fragments, not metadata).
CJK_TABLES = (CJK_DOC, CJK_QUEUE, CJK_FTS) + CJK_FTS_SHADOWS
#: ``state_meta`` keys (docs/sessions-storage.md §2.1): the backfill window ``(progress, high_water]`` and the
#: corruption flag.
HIGH_WATER_KEY = "cjk_bigram_high_water"
PROGRESS_KEY = "cjk_bigram_progress"
STALE_KEY = "cjk_bigram_stale"
META_KEYS = (HIGH_WATER_KEY, PROGRESS_KEY, STALE_KEY)


def _na(e: str) -> str:
    # NA(e): a non-ASCII character is present (characters differ from UTF-8 bytes).
    return f"length(COALESCE({e}, '')) <> length(CAST(COALESCE({e}, '') AS BLOB))"


def _q(r: str) -> str:
    # Q(r): a row in the index's scope that may hold CJK letters.
    return (f"{r}.role <> 'tool' AND ({_na(r + '.content')} OR {_na(r + '.tool_name')} "
            f"OR {_na(r + '.tool_calls')}) AND EXISTS (SELECT 1 FROM sessions WHERE id = "
            f"{r}.session_id AND {tri_session('sessions')})")


_ENQUEUE = "INSERT OR IGNORE INTO messages_cjk_queue(id) VALUES"
_INDEXED = "EXISTS (SELECT 1 FROM messages_cjk_doc WHERE id = old.id)"

#: The documents (one per indexed message).
DOC_DDL = ("CREATE TABLE IF NOT EXISTS messages_cjk_doc "
           "(id INTEGER PRIMARY KEY, doc TEXT NOT NULL)")
#: Ids whose document may be out of date (filled by the queue triggers, drained post-commit).
QUEUE_DDL = "CREATE TABLE IF NOT EXISTS messages_cjk_queue (id INTEGER PRIMARY KEY)"
#: The index over the documents (external content; ascii tokenizer; rowids only).
FTS_DDL = ("CREATE VIRTUAL TABLE IF NOT EXISTS messages_cjk_fts USING fts5(doc, "
           "content='messages_cjk_doc', content_rowid='id', tokenize='ascii', detail='none')")
#: Document triggers: the FTS table follows the documents.
DOC_AI_DDL = ("CREATE TRIGGER IF NOT EXISTS messages_cjk_doc_ai AFTER INSERT ON messages_cjk_doc "
              "BEGIN INSERT INTO messages_cjk_fts(rowid, doc) VALUES (new.id, new.doc); END")
DOC_AD_DDL = ("CREATE TRIGGER IF NOT EXISTS messages_cjk_doc_ad AFTER DELETE ON messages_cjk_doc "
              "BEGIN INSERT INTO messages_cjk_fts(messages_cjk_fts, rowid, doc) "
              "VALUES ('delete', old.id, old.doc); END")
DOC_AU_DDL = ("CREATE TRIGGER IF NOT EXISTS messages_cjk_doc_au AFTER UPDATE OF doc ON "
              "messages_cjk_doc BEGIN INSERT INTO messages_cjk_fts(messages_cjk_fts, rowid, doc) "
              "VALUES ('delete', old.id, old.doc); "
              "INSERT INTO messages_cjk_fts(rowid, doc) VALUES (new.id, new.doc); END")
#: Queue triggers on messages (pure SQL: no UDF, tokenizer or FTS table).
ENQUEUE_INSERT_DDL = (
    "CREATE TRIGGER IF NOT EXISTS messages_cjk_enqueue_insert AFTER INSERT ON messages "
    f"WHEN {_q('new')} BEGIN {_ENQUEUE} (new.id); END")
ENQUEUE_UPDATE_DDL = (
    "CREATE TRIGGER IF NOT EXISTS messages_cjk_enqueue_update "
    "AFTER UPDATE OF content, tool_name, tool_calls, role ON messages "
    "WHEN (old.content IS NOT new.content OR old.tool_name IS NOT new.tool_name "
    "OR old.tool_calls IS NOT new.tool_calls OR old.role IS NOT new.role) "
    f"AND ({_INDEXED} OR {_q('new')}) BEGIN {_ENQUEUE} (new.id); END")
ENQUEUE_DELETE_DDL = (
    "CREATE TRIGGER IF NOT EXISTS messages_cjk_enqueue_delete AFTER DELETE ON messages "
    f"WHEN {_INDEXED} BEGIN {_ENQUEUE} (old.id); END")

#: Every object, in creation order (name, DDL).
CJK_OBJECTS: tuple[tuple[str, str], ...] = (
    (CJK_DOC, DOC_DDL),
    (CJK_QUEUE, QUEUE_DDL),
    (CJK_FTS, FTS_DDL),
    ("messages_cjk_doc_ai", DOC_AI_DDL),
    ("messages_cjk_doc_ad", DOC_AD_DDL),
    ("messages_cjk_doc_au", DOC_AU_DDL),
    ("messages_cjk_enqueue_insert", ENQUEUE_INSERT_DDL),
    ("messages_cjk_enqueue_update", ENQUEUE_UPDATE_DDL),
    ("messages_cjk_enqueue_delete", ENQUEUE_DELETE_DDL),
)
CJK_OBJECT_NAMES = tuple(name for name, _ddl in CJK_OBJECTS)


def drop_object(name: str) -> str:
    """``DROP`` of one of :data:`CJK_OBJECTS` (fixed names only)."""
    kind = "TRIGGER" if name.startswith(("messages_cjk_doc_", "messages_cjk_enqueue")) else "TABLE"
    return checked_drop(kind, name, CJK_OBJECT_NAMES, "a CJK-bigram object")

# ---------------------------------------------------------------------------------------
# Open-time reads and writes (read-gated by the caller)
# ---------------------------------------------------------------------------------------

#: Which of the index's objects exist.
PRESENT_OBJECTS = ("SELECT name FROM sqlite_master WHERE name IN ("
                   + ", ".join("'" + n + "'" for n in CJK_OBJECT_NAMES) + ")")
# ---------------------------------------------------------------------------------------
# The index step (backfill chunk or queue drain), one BEGIN IMMEDIATE transaction
# ---------------------------------------------------------------------------------------

#: Can this build load the index (FTS5 module present)? Reads nothing.
FTS_PROBE = "SELECT rowid FROM messages_cjk_fts LIMIT 0"
#: Is anything queued?
QUEUE_NONEMPTY = "SELECT 1 FROM messages_cjk_queue LIMIT 1"
#: Dequeue one id (a step's ids in one ``executemany``).
DEQUEUE = "DELETE FROM messages_cjk_queue WHERE id = ?"

#: The index's scope over ``messages m JOIN sessions s`` (no tool rows, trigram-eligible
#: sessions); the search verifies its candidates over the same scope.
INDEX_SCOPE = f"m.role <> 'tool' AND {tri_session('s')}"


def _rows(by_id: Callable[[Any], list[Any]], *fragments: str) -> sa.Select:
    # The four indexed columns of ``messages m JOIN sessions s`` where ``by_id(m.c.id)`` and
    # the CJK fragments (INDEX_SCOPE, the non-ASCII gate) hold.
    m, s = messages.alias("m"), sessions.alias("s")
    return (sa.select(m.c.id, m.c.content, m.c.tool_name, m.c.tool_calls)
            .select_from(m.join(s, s.c.id == m.c.session_id))
            .where(*by_id(m.c.id), *map(sa.text, fragments)))


def _queued_rows() -> sa.Select:
    # ``q LEFT JOIN messages m LEFT JOIN sessions s``, each by its key (a lookup per queued
    # id); the fifth column says whether the row is in the index's scope (NULL: gone).
    m, s = messages.alias("m"), sessions.alias("s")
    head = (sa.select(messages_cjk_queue.c.id).order_by(messages_cjk_queue.c.id)
            .limit(bp("n")).subquery("q"))
    return (sa.select(head.c.id, m.c.content, m.c.tool_name, m.c.tool_calls,
                      sa.text(f"({INDEX_SCOPE})"))
            .select_from(head.outerjoin(m, m.c.id == head.c.id)
                         .outerjoin(s, s.c.id == m.c.session_id))
            .order_by(head.c.id))


class CjkIndexStatements(MetaStatements):
    """The index's ordinary statements over ``state_meta``, ``messages`` and ``sessions``
    (issue 32): Core constructs, compiled per dialect on first read; on SQLite the module
    exposes each as a plain string attribute of the same name (:func:`__getattr__`)."""

    #: The index's ``state_meta`` keys and values.
    READ_META = driver_statement(lambda d: sa.select(state_meta.c.key, state_meta.c.value)
                                 .where(meta_keys(*META_KEYS)))
    #: Delete both backfill markers (the window is done).
    CLEAR_MARKERS = driver_statement(
        lambda d: sa.delete(state_meta).where(meta_keys(HIGH_WATER_KEY, PROGRESS_KEY)))
    #: Every key of the index (``sessions.cjk_index`` off).
    CLEAR_ALL_META = driver_statement(lambda d: sa.delete(state_meta).where(
        meta_keys(*META_KEYS)))
    #: Clear the corruption flag (after a rebuild from the documents).
    CLEAR_STALE = driver_statement(lambda d: sa.delete(state_meta).where(meta_keys(STALE_KEY)))
    #: Rows of a backfill chunk ``(lo, hi]`` that may hold CJK (the queue triggers' gate).
    BACKFILL_ROWS = driver_statement(lambda d: _rows(
        lambda mid: [mid > bp("lo"), mid <= bp("hi")], INDEX_SCOPE,
        f"({_na('m.content')} OR {_na('m.tool_name')} OR {_na('m.tool_calls')})"), "lo", "hi")
    #: The queue's first ``n`` ids, ascending, each with the row behind it and whether that
    #: row is in the index's scope (NULL: gone) — one statement for a drain step's reads.
    QUEUED_ROWS = driver_statement(lambda d: _queued_rows(), "n")


def __getattr__(name: str) -> str:
    """:class:`CjkIndexStatements`' statements as module attributes (PEP 562), compiled for
    SQLite on first read."""
    return module_statement(globals(), CjkIndexStatements, name)

#: Write one document (unchanged documents are left alone: no FTS churn).
UPSERT_DOC = ("INSERT INTO messages_cjk_doc(id, doc) VALUES (?, ?) "
              "ON CONFLICT(id) DO UPDATE SET doc = excluded.doc WHERE doc IS NOT excluded.doc")
#: Drop one document.
DELETE_DOC = "DELETE FROM messages_cjk_doc WHERE id = ?"
#: Rebuild the index from the documents (recovery from corruption).
FTS_REBUILD = "INSERT INTO messages_cjk_fts(messages_cjk_fts) VALUES ('rebuild')"
#: Before a recovery rebuild: a damaged structure record fails even the table's constructor
#: (and ``DROP TABLE``), so the index's own storage is reset to an empty index first
#: (averages and structure records as FTS5 writes them for a new table).
FTS_RESET = ("DELETE FROM messages_cjk_fts_data", "DELETE FROM messages_cjk_fts_idx",
             "INSERT INTO messages_cjk_fts_data(id, block) VALUES (1, X''), "
             "(10, X'00000000000000')")
#: Verify the index against the documents.
FTS_INTEGRITY_CHECK = "INSERT INTO messages_cjk_fts(messages_cjk_fts) VALUES ('integrity-check')"
#: Status: queued ids.
QUEUE_COUNT = "SELECT count(*) FROM messages_cjk_queue"

# ---------------------------------------------------------------------------------------
# PostgreSQL (docs/sessions-storage.md §2.5, §3.9.3): a GIN index over the letters and letter pairs
# ---------------------------------------------------------------------------------------

#: The gram function and its GIN index (created by the revision ``s07_storage``).
PG_GRAMS_FUNCTION = "hermes_cjk_grams"
PG_GRAMS_INDEX = "messages_cjk_grams"
#: The indexed expression over the alias ``m`` (the same text as the index's, bar the alias,
#: so the planner matches it).
PG_GRAMS_EXPR = "hermes_cjk_grams(m.role, m.content, m.tool_name, m.tool_calls)"
