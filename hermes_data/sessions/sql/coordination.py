"""Statements of transcript editing and coordination (spec sessions-ext-coordination.md §3):
guard rows (compression locks, turn leases), the conversation key, the server clock,
cooldowns and streaks, transcript rewrites and rewind.

Driver statements, written with ``?`` and rendered once per dialect (psycopg: ``%s``).
Guard-row statements are built from the fixed table/key pairs of :data:`GUARD_TABLES`;
every value is bound.
"""

from __future__ import annotations

from functools import lru_cache

from .predicates import edge

#: Guard tables and their key column (§3.2): compression locks are keyed by the session being
#: compressed, turn leases by the conversation key (§3.3).
GUARD_TABLES = {"lock": ("compression_locks", "session_id"),
                "lease": ("session_turn_leases", "conversation_id")}
#: Depth cap of the conversation-key walk (§3.3).
KEY_DEPTH_CAP = 100


def _render(d: str, statement: str) -> str:
    return statement.replace("%", "%%").replace("?", "%s") if d == "postgresql" else statement


class GuardStatements:
    """Read / claim / refresh / release statements of one guard table in one dialect."""

    def __init__(self, d: str, kind: str) -> None:
        table, key = GUARD_TABLES[kind]
        lock = " FOR UPDATE" if d == "postgresql" else ""
        r = lambda s: _render(d, s)  # noqa: E731
        #: The row of one key (locked on PostgreSQL, W4b).
        self.READ = r(f"SELECT holder, expires_at FROM {table} WHERE {key} = ?{lock}")
        #: The row of one key, unlocked (read-pool getters).
        self.PEEK = r(f"SELECT holder, expires_at FROM {table} WHERE {key} = ?")
        #: Compare-and-delete of a stale row on the values read (§3.2).
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


class CoordinationStatements:
    """The coordination statements of one dialect."""

    def __init__(self, d: str) -> None:
        pg = d == "postgresql"
        r = lambda s: _render(d, s)  # noqa: E731
        self.dialect = d
        self.lock = GuardStatements(d, "lock")
        self.lease = GuardStatements(d, "lease")
        seed = "CAST(? AS TEXT)" if pg else "?"
        #: KEY(s): the compression root of ``s`` over EDGE, depth-capped (§3.3); an unknown id
        #: is its own key.
        self.KEY_OF = r(
            f"WITH RECURSIVE up(id, depth) AS (SELECT {seed}, 0 UNION ALL "
            "SELECT p.id, up.depth + 1 FROM up JOIN sessions c ON c.id = up.id "
            f"JOIN sessions p ON p.id = c.parent_session_id WHERE {edge('p', 'c', d)} "
            f"AND up.depth < {KEY_DEPTH_CAP}) "
            "SELECT id FROM up ORDER BY depth DESC LIMIT 1")
        #: The server's wall clock, epoch seconds (PostgreSQL guard decisions, §3.1).
        self.SERVER_NOW = "SELECT EXTRACT(EPOCH FROM clock_timestamp())::float8" if pg else None
        #: Lock the session row first (W4a/W4e lock order on PostgreSQL).
        self.LOCK_SESSION = r("SELECT id FROM sessions WHERE id = ?" + (" FOR UPDATE" if pg
                                                                         else ""))
        #: Session state a rewrite checks (P(s)).
        self.SESSION_STATE = r("SELECT ended_at, end_reason, model_config, rewind_count "
                               "FROM sessions WHERE id = ?" + (" FOR UPDATE" if pg else ""))


@lru_cache(maxsize=None)
def for_dialect(d: str) -> CoordinationStatements:
    """The coordination statements of ``d`` (built once per process)."""
    return CoordinationStatements(d)
