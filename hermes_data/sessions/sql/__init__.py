"""Named SQL fragments of the session store: what SQLAlchemy Core expresses badly.

* FTS5 full-text objects (spec sessions.md §2.6): two source views, two external-content
  FTS5 tables and exactly six sync triggers, plus the *legacy inline* trigger shapes used to
  narrow or repair upstream files that still use that layout (§2.7, §4.7).
* The lineage predicates and recursive CTEs (§3): canonical compression edge, chain
  root→tip, tip, compression root, lineage ids, resume target and resume lineage.

Every fragment binds its values; identifiers come only from the fixed allow-lists below.

FROZEN: the ``*_DDL`` strings of the current layout (``FTS_OBJECTS_V3``) are the canonical
head fragments and are also what the baseline revision ``s01_baseline`` created; that
revision carries its own copy of the text, so these may only change together with a new
revision that migrates existing files.
"""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.sql.elements import TextClause

# ---------------------------------------------------------------------------------------
# Reason sets and constants (§3.1, §5.6)
# ---------------------------------------------------------------------------------------

RESET_END_REASONS = ("session_reset", "session_switch", "idle", "daily", "suspended",
                     "resume_pending_expired")
AUTOMATIC_END_REASONS = ("agent_close", "ws_orphan_reap", "superseded_by_resume",
                         "startup_orphan_reap", "tui_shutdown", "ws_disconnect",
                         "idle_timeout", "lru_evict")
#: Plausible-epoch window for LAST_ACTIVE: 2000-01-01 … 2100-01-01 (spec §11.8).
EPOCH_MIN = 946684800
EPOCH_MAX = 4102444800
#: Defensive bound on lineage walks; cycle detection stops a walk long before it.
MAX_LINEAGE_DEPTH = 100_000
#: Forward hops of the resume-target walk beyond the compression tip (§4.4).
RESUME_MAX_HOPS = 32
#: Tool results are indexed only up to this many characters.
TOOL_INDEX_PREFIX = 8192


def _sql_list(values: tuple[str, ...]) -> str:
    # Constants of this module only (never user input).
    return ", ".join("'" + v.replace("'", "''") + "'" for v in values)


def J(expr: str, key: str, d: str = "sqlite") -> str:
    """Non-throwing JSON marker lookup: malformed ``model_config`` never raises.

    SQLite: ``json_extract`` of a validated document. PostgreSQL: ``hermes_json_get`` (created
    by s01_baseline), i.e. ``doc::jsonb ->> key`` returning NULL for invalid JSON."""
    if d == "postgresql":
        return f"hermes_json_get({expr}, '{key}')"
    return f"json_extract(CASE WHEN json_valid({expr}) THEN {expr} ELSE '{{}}' END, '$.{key}')"


# ---------------------------------------------------------------------------------------
# FTS5 objects, current layout (storage version 3, §2.6)
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


def _tri_session(s: str) -> str:
    # TRI_SESSION(s): cron, subagent and delegate transcripts stay out of the trigram index.
    return f"{s}.source NOT IN ('cron', 'subagent') AND {J(f'{s}.model_config', '_delegate_from')} IS NULL"


def _tri_row(r: str) -> str:
    # TRI_ROW(r): non-tool rows of trigram-eligible sessions.
    return (f"{r}.role <> 'tool' AND EXISTS (SELECT 1 FROM sessions WHERE id = {r}.session_id "
            f"AND {_tri_session('sessions')})")


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
    f"JOIN sessions s ON s.id = m.session_id WHERE m.role <> 'tool' AND {_tri_session('s')}"
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
    f"WHEN {_tri_row('new')} AND {_gate('new')} BEGIN "
    "INSERT INTO messages_fts_trigram(rowid, content, tool_name) "
    "VALUES (new.id, new.content, new.tool_name); END"
)
#: Remove a deleted eligible row from the trigram index.
FTS_TRIGRAM_DELETE_TRIGGER_DDL = (
    "CREATE TRIGGER IF NOT EXISTS messages_fts_trigram_delete AFTER DELETE ON messages "
    f"WHEN {_tri_row('old')} AND {_gate('old')} BEGIN "
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
    f"SELECT 'delete', old.id, old.content, old.tool_name WHERE {_tri_row('old')}; "
    "INSERT INTO messages_fts_trigram(rowid, content, tool_name) "
    f"SELECT new.id, new.content, new.tool_name WHERE {_tri_row('new')}; END"
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
# Legacy inline layout (pre-v23 upstream; §2.7, §4.7) — kept, narrowed, repaired in shape
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
    return (text(f"DELETE FROM {table}"),
            text(f"INSERT INTO {table}(rowid, content) SELECT id, {_legacy_concat('messages')} "
                 "FROM messages"))


# ---------------------------------------------------------------------------------------
# Lineage predicates (§3.2) — one builder shared by listing, reopen and resume
# ---------------------------------------------------------------------------------------


def _marker_is(mc: str, key: str, target: str, d: str = "sqlite") -> str:
    # Never NULL: an absent marker is "no", so NOT FORK(...) stays two-valued.
    return f"COALESCE({J(mc, key, d)} = {target}, {'false' if d == 'postgresql' else 0})"


def fork(c: str, p: str, d: str = "sqlite") -> str:
    """FORK(c, p): the child is a tool run or carries a marker naming its own parent."""
    mc = f"{c}.model_config"
    return (f"(COALESCE({c}.source, '') = 'tool' "
            f"OR {_marker_is(mc, '_branched_from', p + '.id', d)} "
            f"OR {_marker_is(mc, '_delegate_from', p + '.id', d)} "
            f"OR {_marker_is(mc, '_reset_from', p + '.id', d)})")


def edge(p: str, c: str, d: str = "sqlite") -> str:
    """EDGE(p, c): the canonical compression edge from parent ``p`` to child ``c``."""
    return (f"({c}.parent_session_id = {p}.id AND {p}.end_reason = 'compression' "
            f"AND NOT {fork(c, p, d)})")


def branch_child(c: str, alias: str = "bp", d: str = "sqlite") -> str:
    """BRANCH_CHILD(c): marker names the parent, or the legacy ``branched`` parent rule."""
    return (f"({_marker_is(c + '.model_config', '_branched_from', c + '.parent_session_id', d)} "
            "OR EXISTS ("
            f"SELECT 1 FROM sessions {alias} WHERE {alias}.id = {c}.parent_session_id "
            f"AND {alias}.end_reason = 'branched' AND {c}.started_at >= {alias}.ended_at))")


def legacy_reset_child(c: str, alias: str = "rp") -> str:
    """The legacy (marker-less) reset-child heuristic: same non-empty key, reset-ended parent."""
    return (f"EXISTS (SELECT 1 FROM sessions {alias} WHERE {alias}.id = {c}.parent_session_id "
            f"AND {alias}.end_reason IN ({_sql_list(RESET_END_REASONS)}) "
            f"AND COALESCE({c}.session_key, '') <> '' AND {c}.session_key = {alias}.session_key)")


def reset_child(c: str, alias: str = "rp", d: str = "sqlite") -> str:
    """RESET_CHILD(c): marker names the parent, or the legacy same-key heuristic."""
    return (f"({_marker_is(c + '.model_config', '_reset_from', c + '.parent_session_id', d)} "
            f"OR {legacy_reset_child(c, alias)})")


def listable(s: str, d: str = "sqlite") -> str:
    """LISTABLE(s): a root, branch child or reset child, and never a delegate run."""
    return (f"(({s}.parent_session_id IS NULL OR {branch_child(s, d=d)} "
            f"OR {reset_child(s, d=d)}) AND {J(s + '.model_config', '_delegate_from', d)} IS NULL)")


def _in_window(expr: str) -> str:
    return f"({expr} >= {EPOCH_MIN} AND {expr} < {EPOCH_MAX})"


def last_active(s: str) -> str:
    """LAST_ACTIVE(s): freshest plausible heartbeat or message time, else plausible start."""
    return (
        "COALESCE((SELECT MAX(v) FROM ("
        f"SELECT CASE WHEN {_in_window(s + '.last_activity_at')} THEN {s}.last_activity_at END AS v "
        f"UNION ALL SELECT MAX(la_m.timestamp) FROM messages la_m WHERE la_m.session_id = {s}.id "
        f"AND la_m.timestamp >= {EPOCH_MIN} AND la_m.timestamp < {EPOCH_MAX}) AS la_v), "
        f"CASE WHEN {_in_window(s + '.started_at')} THEN {s}.started_at END)"
    )


# ---------------------------------------------------------------------------------------
# Lineage CTEs (§3.3), one statement each, O(1) work per hop.
#
# Cycle safety without carrying the visited path (a growing string scanned at every hop
# cost more than half of a 500-segment walk):
#
# * Forward walks (chain, tip, resume) step from a row to one of its *children*. Every row
#   has a single parent_session_id, so the predecessor of any visited row other than the
#   start is its parent: the first id a forward walk can repeat is therefore the start
#   itself. The walk carries its origin and stops when it comes back to it.
# * Upward walks (root, resume lineage, ancestors) step to the parent and may enter a cycle
#   that does not contain the start (a "rho"). They carry a mark — the row at the last
#   power-of-two depth (Brent) — and stop at a row equal to its mark, which happens within
#   about four times the length of tail plus cycle. Readers keep each id at its first depth
#   (GROUP BY id, MIN(depth)): after the first repeat a deterministic walk only repeats, so
#   that list is exactly the walk truncated at its first repeated id.
#
# The continuation of a parent with a single candidate child is that child; the spec's
# ordering (continued, then live, then LAST_ACTIVE, started_at, id) — whose LAST_ACTIVE is
# a correlated subquery over messages — is evaluated only for parents with several.
# ---------------------------------------------------------------------------------------


def _candidates(cur: str, p: str = "p", c: str = "c", d: str = "sqlite") -> str:
    # Compression children of `cur` (idx_sessions_parent drives the lookup).
    return (f"FROM sessions {p} JOIN sessions {c} ON {c}.parent_session_id = {p}.id "
            f"WHERE {p}.id = {cur} AND {edge(p, c, d)}")


def _next_child(cur: str, d: str = "sqlite") -> str:
    # The continuation of `cur`: the only candidate, else prefer a child that itself
    # continued, then a live one, then the freshest (§3.3).
    ordered = (
        f"(SELECT c2.id {_candidates(cur, 'p2', 'c2', d)} "
        "ORDER BY CASE WHEN c2.end_reason = 'compression' THEN 0 "
        "WHEN c2.ended_at IS NULL THEN 1 ELSE 2 END, "
        f"{last_active('c2')} DESC, c2.started_at DESC, c2.id DESC LIMIT 1)"
    )
    return (f"(SELECT CASE COUNT(*) WHEN 0 THEN NULL WHEN 1 THEN MAX(c.id) ELSE {ordered} END "
            f"{_candidates(cur, d=d)})")


def _seed(seed: str, d: str) -> str:
    # PostgreSQL types a recursive CTE from its seed: a bare parameter must be cast.
    return f"CAST({seed} AS TEXT)" if d == "postgresql" else seed


def _chain_cte(name: str, seed: str, d: str = "sqlite") -> str:
    # chain(id, depth, origin): stops when the walk returns to its origin (see above).
    seed = _seed(seed, d)
    return (
        f"{name}(id, depth, origin) AS ("
        f"SELECT {seed}, 0, {seed} "
        "UNION ALL "
        f"SELECT {_next_child(name + '.id', d)}, {name}.depth + 1, {name}.origin "
        f"FROM {name} WHERE {name}.id IS NOT NULL "
        f"AND ({name}.depth = 0 OR {name}.id <> {name}.origin) "
        f"AND {name}.depth < {MAX_LINEAGE_DEPTH})"
    )


def _chain_rows(name: str) -> str:
    # The rows of a forward walk up to (not including) its return to the origin.
    return f"{name}.id IS NOT NULL AND ({name}.depth = 0 OR {name}.id <> {name}.origin)"


def _up_cte(name: str, seed: str, d: str = "sqlite") -> str:
    # up(id, depth, mark, mark_depth): walk parents while the compression edge holds; stop at
    # a row that equals the row of the last power-of-two depth (see above).
    seed = _seed(seed, d)
    nd = f"{name}.depth + 1"
    return (
        f"{name}(id, depth, mark, mark_depth) AS ("
        f"SELECT {seed}, 0, {seed}, 0 "
        "UNION ALL "
        f"SELECT p.id, {nd}, "
        f"CASE WHEN ({nd} & {name}.depth) = 0 THEN p.id ELSE {name}.mark END, "
        f"CASE WHEN ({nd} & {name}.depth) = 0 THEN {nd} ELSE {name}.mark_depth END "
        f"FROM {name} JOIN sessions c ON c.id = {name}.id "
        "JOIN sessions p ON p.id = c.parent_session_id "
        f"WHERE {edge('p', 'c', d)} "
        f"AND ({name}.depth = {name}.mark_depth OR {name}.id <> {name}.mark) "
        f"AND {name}.depth < {MAX_LINEAGE_DEPTH})"
    )


def _lineage_statements(d: str) -> dict[str, object]:
    """The lineage statements for dialect ``d`` (``sqlite`` / ``postgresql``)."""
    distinct = "IS DISTINCT FROM" if d == "postgresql" else "IS NOT"
    #: Each id of an upward walk once, at its first depth (the walk truncated at its first repeat).
    _UP_FIRST = "SELECT id, MIN(depth) AS depth FROM up GROUP BY id"

    #: Chain root→tip forward from :start (ordered by depth; the first element is :start).
    CHAIN_FROM = text(
        f"WITH RECURSIVE {_chain_cte('chain', ':start', d)} "
        f"SELECT id FROM chain WHERE {_chain_rows('chain')} ORDER BY depth"
    )
    #: Compression tip of :start (the last element of its chain).
    TIP_OF = text(
        f"WITH RECURSIVE {_chain_cte('chain', ':start', d)} "
        f"SELECT id FROM chain WHERE {_chain_rows('chain')} ORDER BY depth DESC LIMIT 1"
    )
    #: Compression root of :id (walk up while the edge holds).
    ROOT_OF = text(
        f"WITH RECURSIVE {_up_cte('up', ':id', d)} "
        f"SELECT id FROM ({_UP_FIRST}) AS uf ORDER BY depth DESC LIMIT 1"
    )
    #: Resume lineage of :id: the compression path root … :id, root first.
    RESUME_LINEAGE_OF = text(
        f"WITH RECURSIVE {_up_cte('up', ':id', d)} "
        f"SELECT id FROM ({_UP_FIRST}) AS uf ORDER BY depth DESC"
    )
    #: Bounded count of the resume lineage's active or compacted rows (:id, :cap).
    RESUME_LINEAGE_COUNT = text(
        f"WITH RECURSIVE {_up_cte('up', ':id', d)} "
        "SELECT COUNT(*) FROM (SELECT 1 FROM messages m WHERE m.session_id IN "
        "(SELECT id FROM up) AND (m.active = 1 OR m.compacted = 1) LIMIT :cap) AS capped"
    )
    #: Lineage ids of :id: the chain from its compression root, root first (one statement).
    LINEAGE_OF = text(
        f"WITH RECURSIVE {_up_cte('up', ':id', d)}, "
        f"root(id) AS (SELECT id FROM ({_UP_FIRST}) AS uf ORDER BY depth DESC LIMIT 1), "
        f"{_chain_cte('chain', '(SELECT id FROM root)', d)} "
        f"SELECT id FROM chain WHERE {_chain_rows('chain')} ORDER BY depth"
    )
    #: Resume target of :start: tip, then up to 32 hops to the newest non-fork, non-reset
    #: child; the deepest visited node with a message wins, else the tip.
    RESUME_TARGET_OF = text(
        f"WITH RECURSIVE {_chain_cte('chain', ':start', d)}, "
        f"tip(id) AS (SELECT id FROM chain WHERE {_chain_rows('chain')} "
        "ORDER BY depth DESC LIMIT 1), "
        "walk(id, depth) AS (SELECT id, 0 FROM tip UNION ALL "
        "SELECT (SELECT c.id FROM sessions p JOIN sessions c ON c.parent_session_id = p.id "
        f"WHERE p.id = walk.id AND NOT {fork('c', 'p', d)} AND NOT {reset_child('c', d=d)} "
        "ORDER BY c.started_at DESC, c.id DESC LIMIT 1), walk.depth + 1 "
        f"FROM walk WHERE walk.id IS NOT NULL AND walk.depth < {RESUME_MAX_HOPS}) "
        "SELECT COALESCE((SELECT w.id FROM walk w WHERE w.id IS NOT NULL AND EXISTS "
        "(SELECT 1 FROM messages m WHERE m.session_id = w.id) ORDER BY w.depth DESC LIMIT 1), "
        "(SELECT id FROM tip))"
    )

    #: Lineage set of :id (ancestors and descendants over EDGE; UNION makes it cycle-safe).
    LINEAGE_SET_CTE = (
        "WITH RECURSIVE "
        f"anc(id) AS (SELECT {_seed(':id', d)} UNION SELECT p.id FROM anc JOIN sessions c ON c.id = anc.id "
        f"JOIN sessions p ON p.id = c.parent_session_id WHERE {edge('p', 'c', d)}), "
        f"des(id) AS (SELECT {_seed(':id', d)} UNION SELECT c.id FROM des JOIN sessions p ON p.id = des.id "
        f"JOIN sessions c ON c.parent_session_id = p.id WHERE {edge('p', 'c', d)}), "
        "lineage(id) AS (SELECT id FROM anc UNION SELECT id FROM des) "
    )
    #: The flag columns a lineage-wide update may touch (identifier allow-list).
    LINEAGE_FLAGS = ("archived", "pinned", "hidden", "last_read_at")
    #: Lineage-wide flag updates, one per allowed column (:id, :value).
    LINEAGE_FLAG_UPDATE = {
        flag: text(LINEAGE_SET_CTE + f"UPDATE sessions SET {flag} = :value "
                   f"WHERE id IN (SELECT id FROM lineage) AND {flag} {distinct} :value")
        for flag in LINEAGE_FLAGS
    }
    #: Pinning also un-hides the lineage (seed 003 #106171) — callers skip it for Bot Chat lineages.
    LINEAGE_UNHIDE = text(LINEAGE_SET_CTE + "UPDATE sessions SET hidden = 0 "
                          "WHERE id IN (SELECT id FROM lineage) AND hidden <> 0")
    #: Does the lineage hold a hidden row titled exactly 'Bot Chat'?
    LINEAGE_HAS_HIDDEN_BOT_CHAT = text(LINEAGE_SET_CTE + "SELECT EXISTS (SELECT 1 FROM sessions "
                                       "WHERE id IN (SELECT id FROM lineage) AND hidden = 1 "
                                       "AND title = 'Bot Chat')")
    #: Compression ancestors of :id (excluding :id) — used by title transfer.
    ANCESTORS_OF = text(
        f"WITH RECURSIVE {_up_cte('up', ':id', d)} "
        f"SELECT id FROM ({_UP_FIRST}) AS uf WHERE depth > 0 ORDER BY depth"
    )
    return {k: v for k, v in locals().items() if k.isupper()}


# Module-level names (CHAIN_FROM, ROOT_OF, …) are the SQLite statements; the PostgreSQL twins
# come from for_dialect("postgresql").
_LINEAGE = {"sqlite": _lineage_statements("sqlite"), "postgresql": _lineage_statements("postgresql")}
globals().update(_LINEAGE["sqlite"])


def preview_sql(s: str, d: str = "sqlite") -> str:
    """Preview of session ``s``: first visible user message, newlines flattened, 63 chars."""
    ch = "chr" if d == "postgresql" else "char"
    return (
        f"(SELECT substr(replace(replace(pv.content, {ch}(13), ' '), {ch}(10), ' '), 1, 63) "
        f"FROM messages pv WHERE pv.session_id = {s}.id AND pv.role = 'user' "
        "AND pv.content IS NOT NULL AND COALESCE(pv.display_kind, '') <> 'hidden' "
        "ORDER BY pv.timestamp, pv.id LIMIT 1)"
    )


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


class Fragments:
    """The dialect-specific statements and builders of one dialect, side by side.

    ``for_dialect("sqlite")`` returns exactly the module-level SQLite fragments."""

    def __init__(self, dialect: str) -> None:
        self.dialect = dialect
        self.__dict__.update(_LINEAGE[dialect])
        pg = dialect == "postgresql"
        #: Null-safe equality / inequality.
        self.IS = "IS NOT DISTINCT FROM" if pg else "IS"
        #: Keep a system prompt once (content-addressed).
        self.INSERT_PROMPT = ("INSERT INTO system_prompts(hash, prompt) VALUES (?, ?) "
                              "ON CONFLICT (hash) DO NOTHING")
        #: Stamp ``_reset_from`` = :p onto a (possibly malformed) model_config.
        self.SET_RESET_FROM = (
            "CAST(jsonb_set(hermes_json_object(model_config), '{_reset_from}', "
            "to_jsonb(CAST(:p AS TEXT))) AS TEXT)" if pg else
            "json_set(CASE WHEN json_valid(model_config) THEN model_config ELSE '{}' END, "
            "'$._reset_from', :p)")
        #: No LIMIT (SQLite needs a negative number, PostgreSQL takes NULL).
        self.NO_LIMIT = None if pg else -1

    def J(self, expr: str, key: str) -> str:
        """Non-throwing JSON marker lookup."""
        return J(expr, key, self.dialect)

    def edge(self, p: str, c: str) -> str:
        """EDGE(p, c)."""
        return edge(p, c, self.dialect)

    def listable(self, s: str) -> str:
        """LISTABLE(s)."""
        return listable(s, self.dialect)

    def legacy_reset_child(self, c: str, alias: str = "rp") -> str:
        """The legacy reset-child heuristic."""
        return legacy_reset_child(c, alias)

    def last_active(self, s: str) -> str:
        """LAST_ACTIVE(s)."""
        return last_active(s)

    def preview_sql(self, s: str) -> str:
        """Preview of session ``s``."""
        return preview_sql(s, self.dialect)


_FRAGMENTS = {d: Fragments(d) for d in _LINEAGE}


def for_dialect(dialect: str) -> Fragments:
    """The :class:`Fragments` of ``dialect`` (``sqlite`` or ``postgresql``)."""
    return _FRAGMENTS[dialect]
