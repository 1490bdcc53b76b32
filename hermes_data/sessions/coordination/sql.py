"""Statements of transcript editing and coordination (docs/sessions-coordination.md §3):
guard rows (compression locks, turn leases), the conversation key, the server clock,
cooldowns and streaks, transcript rewrites and rewind.

Driver statements, written with ``?`` and rendered once per dialect (psycopg: ``%s``).
Guard-row statements are built from the fixed table/key pairs of :data:`GUARD_TABLES`;
every value is bound.
"""

from __future__ import annotations

import functools

from hermes_data.sessions.sql.core import MESSAGE_COLS, quote_ident
from hermes_data.sessions.sql.dialect import Statements, marks, render
from hermes_data.sessions.sql.predicates import edge, fork, last_active

#: Guard tables and their key column (docs/sessions-coordination.md §3.2): compression locks are keyed by the session being
#: compressed, turn leases by the conversation key (docs/sessions-coordination.md §3.3).
GUARD_TABLES = {"lock": ("compression_locks", "session_id"),
                "lease": ("session_turn_leases", "conversation_id")}
#: Cooldown, streak and deadline columns (docs/sessions-coordination.md §3.12, §3.13), by the name the API uses.
COOLDOWN_COLUMNS = {"until": "compression_failure_cooldown_until",
                    "error": "compression_failure_error",
                    "fallback": "compression_fallback_streak",
                    "ineffective": "compression_ineffective_count",
                    "overload": "compression_overload_streak",
                    "deadline": "compression_recovery_deadline"}
#: Depth cap of the conversation-key walk (docs/sessions-coordination.md §3.3).
KEY_DEPTH_CAP = 100


class GuardStatements:
    """Read / claim / refresh / release statements of one guard table in one dialect (built
    by :class:`CoordinationStatements`, one per guard kind)."""

    def __init__(self, d: str, kind: str) -> None:
        table, key = GUARD_TABLES[kind]
        lock = " FOR UPDATE" if d == "postgresql" else ""
        r = functools.partial(render, d)
        #: The row of one key (locked on PostgreSQL, W4b).
        self.READ = r(f"SELECT holder, expires_at FROM {table} WHERE {key} = ?{lock}")
        #: The row of one key, unlocked (read-pool getters).
        self.PEEK = r(f"SELECT holder, expires_at FROM {table} WHERE {key} = ?")
        #: Compare-and-delete of a stale row on the values read (docs/sessions-coordination.md §3.2).
        self.DELETE_STALE = r(f"DELETE FROM {table} WHERE {key} = ? AND holder = ? "
                              "AND expires_at = ?")
        #: Re-entrant acquire: never lowers ``expires_at`` (new value bound twice).
        self.EXTEND = r(f"UPDATE {table} SET expires_at = CASE WHEN expires_at > ? "
                        f"THEN expires_at ELSE ? END WHERE {key} = ? AND holder = ?")
        #: Insert a new guard row unless one exists (W4d).
        self.INSERT = r(f"INSERT INTO {table} ({key}, holder, acquired_at, expires_at) "
                        f"VALUES (?, ?, ?, ?) ON CONFLICT ({key}) DO NOTHING")
        #: Holder-matched refresh without an expiry predicate (an owner revives its own row).
        self.REFRESH = r(f"UPDATE {table} SET expires_at = ? WHERE {key} = ? AND holder = ?")
        #: Holder-matched release.
        self.RELEASE = r(f"DELETE FROM {table} WHERE {key} = ? AND holder = ?")


class CoordinationStatements(Statements):
    """The coordination statements of one dialect."""

    def __init__(self, d: str) -> None:
        super().__init__(d)
        pg = d == "postgresql"
        r = self.render
        self.lock = GuardStatements(d, "lock")
        self.lease = GuardStatements(d, "lease")
        seed = "CAST(? AS TEXT)" if pg else "?"
        #: KEY(s): the compression root of ``s`` over EDGE, depth-capped (docs/sessions-coordination.md §3.3); an unknown id
        #: is its own key.
        self.KEY_OF = r(
            f"WITH RECURSIVE up(id, depth) AS (SELECT {seed}, 0 UNION ALL "
            "SELECT p.id, up.depth + 1 FROM up JOIN sessions c ON c.id = up.id "
            f"JOIN sessions p ON p.id = c.parent_session_id WHERE {edge('p', 'c', d)} "
            f"AND up.depth < {KEY_DEPTH_CAP}) "
            "SELECT id FROM up ORDER BY depth DESC LIMIT 1")
        #: The server's wall clock, epoch seconds (PostgreSQL guard decisions, docs/sessions-coordination.md §3.1).
        self.SERVER_NOW = "SELECT EXTRACT(EPOCH FROM clock_timestamp())::float8" if pg else None
        #: Lock the session row first (W4a/W4e lock order on PostgreSQL).
        self.LOCK_SESSION = r("SELECT id FROM sessions WHERE id = ?" + (" FOR UPDATE" if pg
                                                                         else ""))
        #: Session state a rewrite checks (P(s)).
        self.SESSION_STATE = r("SELECT ended_at, end_reason, model_config, rewind_count "
                               "FROM sessions WHERE id = ?" + (" FOR UPDATE" if pg else ""))

        # -- transcript rewrites and rewind (docs/sessions-coordination.md §3.15, §3.16) --------------------------------
        #: Active row ids of a session, ascending.
        self.ACTIVE_IDS = r("SELECT id FROM messages WHERE session_id = ? AND active = 1 "
                            "ORDER BY id")
        #: Active rows of a session and the tool calls they carry (I2's counters).
        self.ACTIVE_COUNT = r("SELECT COUNT(*) FROM messages WHERE session_id = ? "
                              "AND active = 1")
        self.ACTIVE_TOOL_CALLS = r("SELECT tool_calls FROM messages WHERE session_id = ? "
                                   "AND active = 1 AND tool_calls IS NOT NULL")
        #: Set a session's counters.
        self.SET_COUNTS = r("UPDATE sessions SET message_count = ?, tool_call_count = ? "
                            "WHERE id = ?")
        #: Archive every active row (rows stay, ``compacted`` stays 0).
        self.ARCHIVE_ACTIVE = r("UPDATE messages SET active = 0 WHERE session_id = ? "
                                "AND active = 1")
        #: Delete every row of a session / its active rows.
        self.DELETE_ALL = r("DELETE FROM messages WHERE session_id = ?")
        self.DELETE_ACTIVE = r("DELETE FROM messages WHERE session_id = ? AND active = 1")
        #: Active rows above a watermark (appends that landed during a summary).
        self.ACTIVE_ABOVE = r("SELECT id FROM messages WHERE session_id = ? AND active = 1 "
                              "AND id > ? ORDER BY id")
        #: The ``OFFSET``-th newest active row at or below a watermark (the verbatim tail's
        #: first original).
        self.TAIL_START = r("SELECT id FROM messages WHERE session_id = ? AND active = 1 "
                            "AND id <= ? ORDER BY id DESC LIMIT 1 OFFSET ?")
        #: Summarized away: active rows below a cut ⇒ ``active = 0, compacted = 1``.
        self.COMPACT_BELOW = r("UPDATE messages SET active = 0, compacted = 1 "
                               "WHERE session_id = ? AND active = 1 AND id < ?")
        #: Superseded duplicates: the remaining active rows ⇒ ``active = 0, compacted = 0``.
        self.SUPERSEDE_ACTIVE = r("UPDATE messages SET active = 0, compacted = 0 "
                                  "WHERE session_id = ? AND active = 1")
        #: One message row of a session (``MESSAGE_COLS``).
        self.MESSAGE_OF = r(f"SELECT {', '.join(MESSAGE_COLS)} FROM messages "
                            "WHERE id = ? AND session_id = ?")
        #: Rewind: active rows from the target on ⇒ inactive.
        self.REWIND_FROM = r("UPDATE messages SET active = 0 WHERE session_id = ? "
                             "AND active = 1 AND id >= ?")
        #: Count a rewind operation.
        self.BUMP_REWIND = r("UPDATE sessions SET rewind_count = COALESCE(rewind_count, 0) + 1 "
                             "WHERE id = ?")
        #: Highest active id (None when none).
        self.MAX_ACTIVE = r("SELECT MAX(id) FROM messages WHERE session_id = ? AND active = 1")
        #: What forbids a restore from ``since``: a compacted row from it on, or a rewound
        #: row strictly between the head and it (a hole would remain).
        self.RESTORE_BLOCKER = r(
            "SELECT id FROM messages WHERE session_id = ? AND ((id >= ? AND compacted = 1) "
            "OR (active = 0 AND compacted = 0 AND id > ? AND id < ?)) LIMIT 1")
        #: Restore the rewound rows from ``since`` on.
        self.RESTORE_FROM = r("UPDATE messages SET active = 1 WHERE session_id = ? "
                              "AND id >= ? AND active = 0")

        # -- cooldowns and streaks (docs/sessions-coordination.md §3.12, §3.13) --------------------------------------
        until, error = COOLDOWN_COLUMNS["until"], COOLDOWN_COLUMNS["error"]
        #: Merge-max cooldown record (new value bound twice), latest error.
        self.RECORD_COOLDOWN = r(
            f"UPDATE sessions SET {until} = CASE WHEN {until} IS NOT NULL AND {until} > ? "
            f"THEN {until} ELSE ? END, {error} = ? WHERE id = ?")
        #: The exact cooldown columns of a session.
        self.COOLDOWN_ROW = r(f"SELECT {until}, {error} FROM sessions WHERE id = ?")
        #: Write both cooldown columns exactly (restore, clear).
        self.SET_COOLDOWN = r(f"UPDATE sessions SET {until} = ?, {error} = ? WHERE id = ?")
        #: One streak / deadline column, read and written (names from COOLDOWN_COLUMNS).
        self.GET_COLUMN = {k: r(f"SELECT {c} FROM sessions WHERE id = ?")
                           for k, c in COOLDOWN_COLUMNS.items()}
        self.SET_COLUMN = {k: r(f"UPDATE sessions SET {c} = ? WHERE id = ?")
                           for k, c in COOLDOWN_COLUMNS.items()}

        # -- lineage recovery (docs/sessions-coordination.md §3.11) --------------------------------------------------
        cont = (f"FROM sessions p JOIN sessions c ON c.parent_session_id = p.id "
                f"WHERE p.id = ? AND p.end_reason = 'compression' AND NOT {fork('c', 'p', d)}")
        #: Open continuation children of a compression parent (two are enough to refuse).
        self.OPEN_CONTINUATIONS = r(f"SELECT c.id {cont} AND c.ended_at IS NULL "
                                    "ORDER BY c.id LIMIT 2")
        #: Any continuation child, ended or not.
        self.ANY_CONTINUATION = r(f"SELECT c.id {cont} LIMIT 1")
        #: Whether a session ended with ``compression``.
        self.ENDED_COMPRESSION = r("SELECT 1 FROM sessions WHERE id = ? "
                                   "AND end_reason = 'compression' AND ended_at IS NOT NULL")
        #: Reopen a compression-ended parent (only while it still is one).
        self.REOPEN_COMPRESSION = r("UPDATE sessions SET ended_at = NULL, end_reason = NULL "
                                    "WHERE id = ? AND end_reason = 'compression' "
                                    "AND ended_at IS NOT NULL")
        orphan = ("s.ended_at IS NULL AND s.end_reason IS NULL "
                  "AND COALESCE(s.api_call_count, 0) = 0 AND s.started_at < ? "
                  "AND COALESCE(s.pinned, 0) = 0 "
                  "AND EXISTS (SELECT 1 FROM messages m WHERE m.session_id = s.id) "
                  f"AND EXISTS (SELECT 1 FROM sessions p WHERE {edge('p', 's', d)}) "
                  f"AND {last_active('s')} < ?")
        #: Unused continuations a week old (cutoff bound twice).
        self.ORPHAN_CONTINUATIONS = r(f"SELECT s.id FROM sessions s WHERE {orphan} ORDER BY s.id")
        #: Close one of them, predicates re-applied (now, id, cutoff, cutoff).
        self.FINALIZE_ORPHAN = r("UPDATE sessions SET ended_at = ?, "
                                 "end_reason = 'orphaned_compression' WHERE id = ? AND "
                                 f"id IN (SELECT s.id FROM sessions s WHERE {orphan})")

        # -- display reads (docs/sessions-coordination.md §3.17) -------------------------------------------------------
        page = (f"SELECT {', '.join(MESSAGE_COLS)} FROM messages WHERE session_id = ? "
                "AND id > ?{sel} ORDER BY id LIMIT ?")
        #: A keyset page of the active-or-compacted selection / of every row.
        self.DISPLAY_PAGE = r(page.format(sel=" AND (active = 1 OR compacted = 1)"))
        self.DISPLAY_PAGE_ALL = r(page.format(sel=""))

        # -- archive (docs/sessions-coordination.md §3.18) -------------------------------------------------------------
        stale = ("s.archived = 0 AND COALESCE(s.end_reason, '') <> 'compression' "
                 f"AND {last_active('s')} < ?")
        #: Stale tips and standalone rows (cutoff), oldest start first; unpinned variant.
        self.STALE_ARCHIVE = r(f"SELECT s.id FROM sessions s WHERE {stale} ORDER BY s.started_at")
        self.STALE_ARCHIVE_UNPINNED = r(f"SELECT s.id FROM sessions s WHERE {stale} "
                                        "AND s.pinned = 0 ORDER BY s.started_at")
        #: Re-check one candidate (id, cutoff); unpinned variant.
        self.STALE_RECHECK = r(f"SELECT 1 FROM sessions s WHERE s.id = ? AND {stale}")
        self.STALE_RECHECK_UNPINNED = r(f"SELECT 1 FROM sessions s WHERE s.id = ? AND {stale} "
                                        "AND s.pinned = 0")
        #: A session's archived flag and end reason.
        self.ARCHIVED_OF = r("SELECT archived, end_reason FROM sessions WHERE id = ?")
        #: Clear the tip's end fields only while they still hold the reason read.
        self.CLEAR_TIP_END = r("UPDATE sessions SET ended_at = NULL, end_reason = NULL "
                               "WHERE id = ? AND end_reason = ?")

        # -- empty and ghost sessions (docs/sessions-coordination.md §3.19) ---------------------------------------------
        unguarded = ("NOT EXISTS (SELECT 1 FROM compression_locks l WHERE l.session_id = s.id "
                     "AND l.expires_at > ?) AND NOT EXISTS (SELECT 1 FROM session_turn_leases t "
                     "WHERE t.conversation_id = s.id AND t.expires_at > ?)")
        no_messages = "NOT EXISTS (SELECT 1 FROM messages m WHERE m.session_id = s.id)"
        empty = ("COALESCE(s.message_count, 0) = 0 AND s.ended_at IS NOT NULL AND s.archived = 0 "
                 f"AND s.pinned = 0 AND {no_messages} "
                 f"AND NOT EXISTS (SELECT 1 FROM sessions p WHERE {edge('p', 's', d)}) "
                 f"AND NOT EXISTS (SELECT 1 FROM sessions c WHERE {edge('s', 'c', d)}) "
                 f"AND {unguarded}")
        #: EMPTY(s) (now bound twice): count and ids.
        self.COUNT_EMPTY = r(f"SELECT COUNT(*) FROM sessions s WHERE {empty}")
        self.EMPTY_IDS = r(f"SELECT s.id FROM sessions s WHERE {empty} ORDER BY s.id")
        #: Upstream's EMPTY (no binds): pinned rows, lineage segments and guarded rows too
        #: (the ``include_protected`` option, docs/sessions-coordination.md §3.19).
        empty_any = ("s.message_count = 0 AND s.ended_at IS NOT NULL AND s.archived = 0 "
                     f"AND {no_messages}")
        self.COUNT_EMPTY_ANY = r(f"SELECT COUNT(*) FROM sessions s WHERE {empty_any}")
        self.EMPTY_ANY_IDS = r(f"SELECT s.id FROM sessions s WHERE {empty_any} ORDER BY s.id")
        no_children = "NOT EXISTS (SELECT 1 FROM sessions c WHERE c.parent_session_id = s.id)"
        #: Ghost TUI rows (cutoff, now, now).
        self.GHOST_IDS = r(
            "SELECT s.id FROM sessions s WHERE s.source = 'tui' AND s.title IS NULL "
            f"AND s.ended_at IS NOT NULL AND s.started_at < ? AND s.pinned = 0 AND {no_messages} "
            f"AND {no_children} ORDER BY s.id")
        #: The one conditional delete of ``delete_session_if_empty`` (id, now, key, now).
        self.DELETE_IF_EMPTY = r(
            "DELETE FROM sessions WHERE id = ? AND title IS NULL AND pinned = 0 "
            "AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.session_id = sessions.id) "
            "AND NOT EXISTS (SELECT 1 FROM sessions c WHERE c.parent_session_id = sessions.id) "
            "AND NOT EXISTS (SELECT 1 FROM compression_locks l WHERE l.session_id = sessions.id "
            "AND l.expires_at > ?) AND NOT EXISTS (SELECT 1 FROM session_turn_leases t "
            "WHERE t.conversation_id = ? AND t.expires_at > ?)")

    def orphan_where(self, n_sources: int, *, pinned: bool, heartbeat: bool) -> str:
        """ORPHAN(s) of docs/sessions-coordination.md §3.18 (binds: sources…, cutoff, cutoff[, hb_cutoff, hb_grace])."""
        where = (f"s.ended_at IS NULL AND s.source IN ({marks(n_sources)}) "
                 f"{'AND s.pinned = 0 ' if pinned else ''}AND s.started_at < ? "
                 f"AND {last_active('s')} < ?")
        if heartbeat:
            where += (" AND NOT EXISTS (SELECT 1 FROM gateway_heartbeats h "
                      "WHERE h.last_heartbeat >= ? AND h.started_at <= s.started_at + ?)")
        return where

    def orphan_ids(self, n_sources: int, *, pinned: bool, heartbeat: bool) -> str:
        """Ids matching ORPHAN(s)."""
        where = self.orphan_where(n_sources, pinned=pinned, heartbeat=heartbeat)
        return self.render(f"SELECT s.id FROM sessions s WHERE {where} ORDER BY s.id")

    def orphan_close(self, n_sources: int, *, pinned: bool, heartbeat: bool) -> str:
        """Close one orphan, ORPHAN re-applied (binds: now, id, then ORPHAN's)."""
        where = self.orphan_where(n_sources, pinned=pinned, heartbeat=heartbeat)
        return self.render(
            "UPDATE sessions SET ended_at = ?, end_reason = 'startup_orphan_reap' "
            f"WHERE id = ? AND id IN (SELECT s.id FROM sessions s WHERE {where})")

    def clone_by_ids(self, cols: list[str], n: int) -> str:
        """Copy ``n`` bound rows (id order) as fresh active rows of their session, column
        exact; ``cols`` come from the live table's catalogue (quoted)."""
        col_sql = ", ".join(quote_ident(c) for c in cols)
        return self.render(
            f"INSERT INTO messages (session_id, active, compacted, {col_sql}) "
            f"SELECT session_id, 1, 0, {col_sql} FROM messages "
            f"WHERE id IN ({marks(n)}) ORDER BY id")


#: The CoordinationStatements of a dialect (built once per process).
for_dialect = CoordinationStatements.for_dialect
