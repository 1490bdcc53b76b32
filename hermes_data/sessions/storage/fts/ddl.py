"""FTS5 objects of the session store (docs/sessions.md §2.6) and its legacy inline layout
(docs/sessions.md §2.7, §4.7), plus the PostgreSQL full-text expressions that replace them there.

FROZEN: the ``*_DDL`` strings of the current layout (``FTS_OBJECTS_V3``) are the canonical
head fragments and are also what the baseline revision ``s01_baseline`` created; that
revision carries its own copy of the text, so these may only change together with a new
revision that migrates existing files.
"""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.sql.elements import TextClause

from hermes_data.sessions.sql.predicates import J, TOOL_INDEX_PREFIX

# ---------------------------------------------------------------------------------------
# FTS5 objects, current layout (storage version 3, docs/sessions.md §2.6)
# ---------------------------------------------------------------------------------------


def _idx(r: str) -> str:
    # IDX(r): tool results are indexed only up to an 8192-character prefix.
    return (f"CASE WHEN {r}.role = 'tool' THEN substr(COALESCE({r}.content, ''), 1, "
            f"{TOOL_INDEX_PREFIX}) ELSE {r}.content END")


def _gate(r: str) -> str:
    # GATE(r): true for rows that are in the index (outside a deferred-rebuild window).
    return (f"({r}.id > COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta "
            f"WHERE key = 'fts_rebuild_high_water'), -1) OR {r}.id <= COALESCE((SELECT "
            f"CAST(value AS INTEGER) FROM state_meta WHERE key = 'fts_rebuild_progress'), -1))")


def tri_session(s: str) -> str:
    """TRI_SESSION(s), a condition on the sessions row ``s``: cron, subagent and delegate
    transcripts stay out of the trigram index."""
    return f"{s}.source NOT IN ('cron', 'subagent') AND {J(f'{s}.model_config', '_delegate_from')} IS NULL"


def tri_row(r: str) -> str:
    """TRI_ROW(r), a condition on the messages row ``r``: non-tool rows of trigram-eligible
    sessions (:func:`tri_session`)."""
    return (f"{r}.role <> 'tool' AND EXISTS (SELECT 1 FROM sessions WHERE id = {r}.session_id "
            f"AND {tri_session('sessions')})")


#: View feeding the unicode61 index: tool rows truncated, tool_calls JSON searchable.
FTS_SRC_VIEW_DDL = (
    "CREATE VIEW IF NOT EXISTS messages_fts_src AS "
    f"SELECT id, {_idx('messages')} AS content, tool_name, tool_calls FROM messages"
)
#: External-content unicode61 index over messages_fts_src.
FTS_TABLE_DDL = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts USING fts5("
    "content, tool_name, tool_calls, content='messages_fts_src', content_rowid='id')"
)
#: View feeding the trigram index: no tool rows, no cron/subagent/delegate sessions.
FTS_TRIGRAM_SRC_VIEW_DDL = (
    "CREATE VIEW IF NOT EXISTS messages_fts_trigram_src AS "
    "SELECT m.id, m.role, m.content, m.tool_name FROM messages m "
    f"JOIN sessions s ON s.id = m.session_id WHERE m.role <> 'tool' AND {tri_session('s')}"
)
#: External-content trigram index (no tool_calls column: storage layout 2).
FTS_TRIGRAM_TABLE_DDL = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts_trigram USING fts5("
    "content, tool_name, content='messages_fts_trigram_src', content_rowid='id', "
    "tokenize='trigram')"
)

_FTS_COLS = "rowid, content, tool_name, tool_calls"
_FTS_NEW = f"new.id, {_idx('new')}, new.tool_name, new.tool_calls"
_FTS_OLD = f"'delete', old.id, {_idx('old')}, old.tool_name, old.tool_calls"

#: Index a new row (gated).
FTS_INSERT_TRIGGER_DDL = (
    "CREATE TRIGGER IF NOT EXISTS messages_fts_insert AFTER INSERT ON messages "
    f"WHEN {_gate('new')} BEGIN "
    f"INSERT INTO messages_fts({_FTS_COLS}) VALUES ({_FTS_NEW}); END"
)
#: Remove a deleted row from the index (gated: a 'delete' for an unindexed row corrupts it).
FTS_DELETE_TRIGGER_DDL = (
    "CREATE TRIGGER IF NOT EXISTS messages_fts_delete AFTER DELETE ON messages "
    f"WHEN {_gate('old')} BEGIN "
    f"INSERT INTO messages_fts(messages_fts, {_FTS_COLS}) VALUES ({_FTS_OLD}); END"
)
#: Re-index on a change of an indexed column only (narrowed: flag writes never fire it).
FTS_UPDATE_TRIGGER_DDL = (
    "CREATE TRIGGER IF NOT EXISTS messages_fts_update "
    "AFTER UPDATE OF content, tool_name, tool_calls, role ON messages "
    "WHEN (old.content IS NOT new.content OR old.tool_name IS NOT new.tool_name "
    "OR old.tool_calls IS NOT new.tool_calls OR old.role IS NOT new.role) "
    f"AND {_gate('old')} BEGIN "
    f"INSERT INTO messages_fts(messages_fts, {_FTS_COLS}) VALUES ({_FTS_OLD}); "
    f"INSERT INTO messages_fts({_FTS_COLS}) VALUES ({_FTS_NEW}); END"
)
#: Index a new row in the trigram index when the row and its session are eligible.
FTS_TRIGRAM_INSERT_TRIGGER_DDL = (
    "CREATE TRIGGER IF NOT EXISTS messages_fts_trigram_insert AFTER INSERT ON messages "
    f"WHEN {tri_row('new')} AND {_gate('new')} BEGIN "
    "INSERT INTO messages_fts_trigram(rowid, content, tool_name) "
    "VALUES (new.id, new.content, new.tool_name); END"
)
#: Remove a deleted eligible row from the trigram index.
FTS_TRIGRAM_DELETE_TRIGGER_DDL = (
    "CREATE TRIGGER IF NOT EXISTS messages_fts_trigram_delete AFTER DELETE ON messages "
    f"WHEN {tri_row('old')} AND {_gate('old')} BEGIN "
    "INSERT INTO messages_fts_trigram(messages_fts_trigram, rowid, content, tool_name) "
    "VALUES ('delete', old.id, old.content, old.tool_name); END"
)
#: Re-index trigram rows; each side guarded separately so role changes into/out of 'tool' work.
FTS_TRIGRAM_UPDATE_TRIGGER_DDL = (
    "CREATE TRIGGER IF NOT EXISTS messages_fts_trigram_update "
    "AFTER UPDATE OF content, tool_name, role ON messages "
    "WHEN (old.content IS NOT new.content OR old.tool_name IS NOT new.tool_name "
    f"OR old.role IS NOT new.role) AND {_gate('old')} BEGIN "
    "INSERT INTO messages_fts_trigram(messages_fts_trigram, rowid, content, tool_name) "
    f"SELECT 'delete', old.id, old.content, old.tool_name WHERE {tri_row('old')}; "
    "INSERT INTO messages_fts_trigram(rowid, content, tool_name) "
    f"SELECT new.id, new.content, new.tool_name WHERE {tri_row('new')}; END"
)

#: Base half of the current layout, in creation order.
FTS_BASE_OBJECTS: tuple[tuple[str, str], ...] = (
    ("messages_fts_src", FTS_SRC_VIEW_DDL),
    ("messages_fts", FTS_TABLE_DDL),
    ("messages_fts_insert", FTS_INSERT_TRIGGER_DDL),
    ("messages_fts_delete", FTS_DELETE_TRIGGER_DDL),
    ("messages_fts_update", FTS_UPDATE_TRIGGER_DDL),
)
#: Trigram half of the current layout, in creation order.
FTS_TRIGRAM_OBJECTS: tuple[tuple[str, str], ...] = (
    ("messages_fts_trigram_src", FTS_TRIGRAM_SRC_VIEW_DDL),
    ("messages_fts_trigram", FTS_TRIGRAM_TABLE_DDL),
    ("messages_fts_trigram_insert", FTS_TRIGRAM_INSERT_TRIGGER_DDL),
    ("messages_fts_trigram_delete", FTS_TRIGRAM_DELETE_TRIGGER_DDL),
    ("messages_fts_trigram_update", FTS_TRIGRAM_UPDATE_TRIGGER_DDL),
)
#: The canonical fragments a fresh database receives after ``metadata.create_all()``.
FTS_OBJECTS_V3 = FTS_BASE_OBJECTS + FTS_TRIGRAM_OBJECTS

BASE_TRIGGERS = ("messages_fts_insert", "messages_fts_delete", "messages_fts_update")
TRIGRAM_TRIGGERS = ("messages_fts_trigram_insert", "messages_fts_trigram_delete",
                    "messages_fts_trigram_update")
FTS_TRIGGERS = BASE_TRIGGERS + TRIGRAM_TRIGGERS
FTS_VIRTUAL_TABLES = ("messages_fts", "messages_fts_trigram")
FTS_VIEWS = ("messages_fts_src", "messages_fts_trigram_src")
#: FTS5 shadow-table suffixes (never part of the metadata shape).
FTS_SHADOW_SUFFIXES = ("_data", "_idx", "_content", "_docsize", "_config")

#: Rebuild commands (external content: re-read the source view).
FTS_REBUILD = text("INSERT INTO messages_fts(messages_fts) VALUES ('rebuild')")
FTS_TRIGRAM_REBUILD = text("INSERT INTO messages_fts_trigram(messages_fts_trigram) VALUES ('rebuild')")

# ---------------------------------------------------------------------------------------
# Bulk indexing of an appended batch (SQLite, current layout; issue 14)
# ---------------------------------------------------------------------------------------
#
# A batch inserted through the triggers leaves one FTS5 segment per row in each index. The
# batch path instead closes the rebuild gate over the ids it is about to insert, inserts the
# rows (the gated insert triggers skip them), puts the gate markers back exactly as they were
# and indexes the new id range with one INSERT ... SELECT per index — all inside the batch's
# own write transaction, so no other connection ever sees the in-between state. The fills
# select what the triggers would have inserted (the same projection, TRI_ROW and GATE).

#: The state_meta keys of the rebuild gate (GATE).
GATE_KEYS = ("fts_rebuild_high_water", "fts_rebuild_progress")
#: A high-water mark above every possible rowid (closes the gate over everything new).
GATE_CLOSED_HIGH_WATER = 9223372036854775807

#: The triggers on ``messages`` (name, stored SQL).
MESSAGE_TRIGGERS = "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'messages'"


#: Index the rows above an id (bound) in ``messages_fts`` exactly as its insert trigger would.
BULK_FTS_FILL = (
    f"INSERT INTO messages_fts({_FTS_COLS}) SELECT messages.id, {_idx('messages')}, "
    f"messages.tool_name, messages.tool_calls FROM messages WHERE messages.id > ? "
    f"AND {_gate('messages')} ORDER BY messages.id")
#: The same for ``messages_fts_trigram`` (eligible rows only).
BULK_FTS_TRIGRAM_FILL = (
    "INSERT INTO messages_fts_trigram(rowid, content, tool_name) SELECT messages.id, "
    "messages.content, messages.tool_name FROM messages WHERE messages.id > ? "
    f"AND {tri_row('messages')} AND {_gate('messages')} ORDER BY messages.id")


def stored_trigger_sql(ddl: str) -> str:
    """The text SQLite keeps in ``sqlite_master`` for a ``CREATE TRIGGER IF NOT EXISTS``
    statement (the ``IF NOT EXISTS`` clause is not stored)."""
    return ddl.replace("CREATE TRIGGER IF NOT EXISTS ", "CREATE TRIGGER ", 1)


#: The two insert triggers the bulk fill stands in for, and the index each one feeds.
BULK_INSERT_TRIGGERS: dict[str, str] = {
    "messages_fts_insert": stored_trigger_sql(FTS_INSERT_TRIGGER_DDL),
    "messages_fts_trigram_insert": stored_trigger_sql(FTS_TRIGRAM_INSERT_TRIGGER_DDL),
}
#: Every current-layout trigger in its stored form (the ones that may read the gate).
CANONICAL_TRIGGER_SQL: dict[str, str] = {name: stored_trigger_sql(ddl) for name, ddl in (
    ("messages_fts_insert", FTS_INSERT_TRIGGER_DDL),
    ("messages_fts_delete", FTS_DELETE_TRIGGER_DDL),
    ("messages_fts_update", FTS_UPDATE_TRIGGER_DDL),
    ("messages_fts_trigram_insert", FTS_TRIGRAM_INSERT_TRIGGER_DDL),
    ("messages_fts_trigram_delete", FTS_TRIGRAM_DELETE_TRIGGER_DDL),
    ("messages_fts_trigram_update", FTS_TRIGRAM_UPDATE_TRIGGER_DDL),
)}

# ---------------------------------------------------------------------------------------
# Legacy inline layout (pre-v23 upstream; docs/sessions.md §2.7, §4.7) — kept, narrowed, repaired in shape
# ---------------------------------------------------------------------------------------


def _legacy_concat(r: str) -> str:
    return (f"COALESCE({r}.content, '') || ' ' || COALESCE({r}.tool_name, '') || ' ' || "
            f"COALESCE({r}.tool_calls, '')")


def legacy_trigger_ddl(table: str, kind: str) -> str:
    """Legacy inline trigger ``kind`` (insert/delete/update) for FTS ``table``; update is narrowed."""
    if table not in FTS_VIRTUAL_TABLES or kind not in ("insert", "delete", "update"):
        raise ValueError(f"unknown legacy FTS trigger {table}/{kind}")
    name = f"{table}_{kind}"
    ins = f"INSERT INTO {table}(rowid, content) VALUES (new.id, {_legacy_concat('new')});"
    dele = f"DELETE FROM {table} WHERE rowid = old.id;"
    if kind == "insert":
        return f"CREATE TRIGGER IF NOT EXISTS {name} AFTER INSERT ON messages BEGIN {ins} END"
    if kind == "delete":
        return f"CREATE TRIGGER IF NOT EXISTS {name} AFTER DELETE ON messages BEGIN {dele} END"
    return (f"CREATE TRIGGER IF NOT EXISTS {name} AFTER UPDATE OF content, tool_name, tool_calls, "
            f"role ON messages BEGIN {dele} {ins} END")


def legacy_repopulate(table: str) -> tuple[TextClause, TextClause]:
    """Statements refilling a legacy inline FTS ``table`` from ``messages``."""
    if table not in FTS_VIRTUAL_TABLES:
        raise ValueError(f"unknown FTS table {table}")
    # not Core: a legacy inline FTS5 table by name and its refill (not in the Core metadata)
    return (text(f"DELETE FROM {table}"),
            text(f"INSERT INTO {table}(rowid, content) SELECT id, {_legacy_concat('messages')} "
                 "FROM messages"))



# ---------------------------------------------------------------------------------------
# PostgreSQL full-text objects (s01_baseline's PostgreSQL branch, then s02_pg_stored_tsvector)
# ---------------------------------------------------------------------------------------

#: Reflected column lists of the two GIN indexes at the head.
PG_FTS_INDEX_COLUMNS: dict[str, tuple] = {
    "messages_fts_document": ("fts_document",),
    "messages_fts_trgm": ("content",),
}

#: PostgreSQL-only column of ``messages`` (s02): a stored generated ``tsvector``. It is not
#: part of the Core metadata (the SQLite authority), so no insert ever names it.
PG_FTS_COLUMN = "fts_document"

#: Runs of ASCII non-alphanumerics — replaced by one space before the 'simple' parser reads a
#: document or a query term, so paths/hosts/e-mails/URLs split into unicode61's words.
#: Explicit ranges, not ``[:alnum:]`` (ASCII-only under a plain C collation). Never contains
#: a colon (safe inside ``sa.text``).
PG_FTS_SPLIT = r"[^0-9A-Za-z\u0080-\U0010FFFF]+"

#: The text FTS5 indexes (IDX(m) plus tool_name and tool_calls), unqualified column names.
PG_FTS_SOURCE = (
    f"CASE WHEN role = 'tool' THEN substr(COALESCE(content, ''), 1, {TOOL_INDEX_PREFIX}) "
    "ELSE COALESCE(content, '') END "
    "|| ' ' || COALESCE(tool_name, '') || ' ' || COALESCE(tool_calls, '')"
)

#: The generation expression of ``messages.fts_document`` (s02_pg_stored_tsvector).
PG_FTS_GENERATED = (f"to_tsvector('simple'::regconfig, regexp_replace({PG_FTS_SOURCE}, "
                    f"'{PG_FTS_SPLIT}', ' ', 'g'))")

#: PostgreSQL: the document the standard route matches and ranks — the stored column.
PG_FTS_DOCUMENT = f"m.{PG_FTS_COLUMN}"


