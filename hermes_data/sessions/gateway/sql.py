"""Statements of the gateway family (docs/sessions-gateway.md §3.1, §3.2, §3.6, §3.7):
the routing index, hygiene streaks, handoff transitions and backend heartbeats.

No SQLite statement here uses ``RETURNING`` (absent below SQLite 3.35); PostgreSQL may
(amendment A6). ``MAX(a, b)`` is ``GREATEST`` there.
"""

from __future__ import annotations

from hermes_data.sessions.sql.core import SESSION_ROW_COLS
from hermes_data.sessions.sql.dialect import Statements, marks

#: Ids or keys per ``IN (…)`` list (SQLite's old 999-variable ceiling; spec behaviour 42).
CHUNK = 900

_ROUTING_COLS = "scope, session_key, entry_json, updated_at"
_HANDOFF_COLS = ("handoff_state, handoff_platform, handoff_error, handoff_requested_at, "
                 "handoff_claimed_by, handoff_claimed_at")


class GatewayStatements(Statements):
    """The gateway statements of one dialect."""

    def __init__(self, d: str) -> None:
        super().__init__(d)
        pg = d == "postgresql"
        r = self.render
        greatest = "GREATEST" if pg else "MAX"
        #: The server clock (PostgreSQL ``db_now``, docs/sessions-gateway.md §3.0 Clocks): once per transaction.
        self.DB_NOW = "SELECT EXTRACT(EPOCH FROM clock_timestamp())" if pg else None

        #: A4: the first row of a session holding a platform message id (any ``active``).
        self.PMID_SEEK = r("SELECT id FROM messages WHERE session_id = ? AND "
                           "platform_message_id = ? ORDER BY id LIMIT 1")

        # -- routing index (docs/sessions-gateway.md §3.1)
        self.ROUTING_UPSERT = r(
            f"INSERT INTO gateway_routing ({_ROUTING_COLS}) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (scope, session_key) DO UPDATE SET entry_json = excluded.entry_json, "
            "updated_at = excluded.updated_at")
        self.ROUTING_INSERT_NEW = r(
            f"INSERT INTO gateway_routing ({_ROUTING_COLS}) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (scope, session_key) DO NOTHING")
        self.ROUTING_INSERT = r(
            f"INSERT INTO gateway_routing ({_ROUTING_COLS}) VALUES (?, ?, ?, ?)")
        #: Compare-and-set on the stored entry (``if_current``).
        self.ROUTING_CAS = r(
            "UPDATE gateway_routing SET entry_json = ?, updated_at = ? WHERE scope = ? "
            "AND session_key = ? AND entry_json = ?")
        self.ROUTING_GET = r(
            "SELECT entry_json FROM gateway_routing WHERE scope = ? AND session_key = ?")
        # Byte order on both dialects (PostgreSQL's default collation is not SQLite's).
        byte_order = ' COLLATE "C"' if pg else ""
        self.ROUTING_LOAD = r(
            "SELECT session_key, entry_json FROM gateway_routing WHERE scope = ? "
            f"ORDER BY session_key{byte_order}")
        self.ROUTING_CLEAR_SCOPE = r("DELETE FROM gateway_routing WHERE scope = ?")

        # -- hygiene (docs/sessions-gateway.md §3.2)
        self.HYGIENE_BUMP = r(
            "INSERT INTO gateway_hygiene_state (session_key, failure_streak) VALUES (?, 1) "
            "ON CONFLICT (session_key) DO UPDATE SET failure_streak = "
            "gateway_hygiene_state.failure_streak + 1"
            + (" RETURNING failure_streak" if pg else ""))
        self.HYGIENE_GET = r(
            "SELECT failure_streak FROM gateway_hygiene_state WHERE session_key = ?")
        self.HYGIENE_RESET = r("DELETE FROM gateway_hygiene_state WHERE session_key = ?")

        # -- heartbeats (docs/sessions-gateway.md §3.7)
        self.HB_UPSERT = r(
            "INSERT INTO gateway_heartbeats (backend_id, pid, started_at, last_heartbeat, "
            "profile, host) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (backend_id) DO UPDATE SET "
            "last_heartbeat = CASE WHEN gateway_heartbeats.pid = excluded.pid AND "
            "gateway_heartbeats.started_at = excluded.started_at THEN "
            f"{greatest}(gateway_heartbeats.last_heartbeat, excluded.last_heartbeat) "
            "ELSE excluded.last_heartbeat END, pid = excluded.pid, "
            "started_at = excluded.started_at, profile = excluded.profile, host = excluded.host")
        self.HB_DELETE = r("DELETE FROM gateway_heartbeats WHERE backend_id = ?")
        self.HB_STALE = r("SELECT backend_id FROM gateway_heartbeats WHERE last_heartbeat < ? "
                          "ORDER BY backend_id")
        self.HB_PRUNE = r("DELETE FROM gateway_heartbeats WHERE last_heartbeat < ?"
                          + (" RETURNING backend_id" if pg else ""))
        self.HB_LIST = r("SELECT backend_id, pid, started_at, last_heartbeat, profile, host "
                         "FROM gateway_heartbeats ORDER BY last_heartbeat DESC, backend_id")
        #: Backends whose heartbeat is at least as new as the cutoff.
        self.HB_FRESH = r("SELECT backend_id FROM gateway_heartbeats WHERE last_heartbeat >= ?")

        # -- handoffs (docs/sessions-gateway.md §3.6): each transition one conditional UPDATE
        lock = " FOR UPDATE" if pg else ""
        self.HANDOFF_STATE = r(f"SELECT {_HANDOFF_COLS} FROM sessions WHERE id = ?")
        self.HANDOFF_STATE_LOCKED = r(f"SELECT {_HANDOFF_COLS} FROM sessions WHERE id = ?{lock}")
        self.HANDOFF_REQUEST = r(
            "UPDATE sessions SET handoff_state = 'pending', handoff_platform = ?, "
            "handoff_error = NULL, handoff_requested_at = ?, handoff_claimed_by = NULL, "
            "handoff_claimed_at = NULL WHERE id = ? AND (handoff_state IS NULL OR "
            "handoff_state IN ('completed', 'failed'))")
        self.HANDOFF_CLAIM = r(
            "UPDATE sessions SET handoff_state = 'running', handoff_claimed_by = ?, "
            "handoff_claimed_at = ? WHERE id = ? AND handoff_state = 'pending'")
        self.HANDOFF_COMPLETE = r(
            "UPDATE sessions SET handoff_state = 'completed', handoff_error = NULL "
            "WHERE id = ? AND handoff_state = 'running'")
        self.HANDOFF_COMPLETE_BY = r(
            "UPDATE sessions SET handoff_state = 'completed', handoff_error = NULL "
            "WHERE id = ? AND handoff_state = 'running' AND handoff_claimed_by = ?")
        self.HANDOFF_FAIL_BY = r(
            "UPDATE sessions SET handoff_state = 'failed', handoff_error = ? "
            "WHERE id = ? AND handoff_state = 'running' AND handoff_claimed_by = ?")
        #: Running handoffs not claimed by the caller (reclaim candidates), locked on PG.
        self.HANDOFF_RUNNING_OTHERS = r(
            "SELECT id, handoff_claimed_by, handoff_claimed_at FROM sessions WHERE "
            "handoff_state = 'running' AND (handoff_claimed_by IS NULL OR "
            f"handoff_claimed_by <> ?) ORDER BY id{lock}")
        self.HANDOFF_RUNNING_IDS = r(
            f"SELECT id FROM sessions WHERE handoff_state = 'running' ORDER BY id{lock}")
        self._session_select = (
            f"SELECT {', '.join('s.' + c for c in SESSION_ROW_COLS)}, "
            "COALESCE(sp.prompt, s.system_prompt) FROM sessions s LEFT JOIN system_prompts sp "
            "ON sp.hash = s.system_prompt_hash")

    def handoff_fail_from(self, states: tuple[str, ...]) -> str:
        """Fail a handoff in one of ``states`` (fixed names, never input)."""
        return self.render((
            "UPDATE sessions SET handoff_state = 'failed', handoff_error = ? WHERE id = ? AND "
            f"handoff_state IN ({', '.join(repr(s) for s in states)})"))

    def handoff_reclaim(self, n: int) -> str:
        """Fail ``n`` running handoffs by id."""
        return self.render((
            "UPDATE sessions SET handoff_state = 'failed', handoff_error = ? WHERE "
            f"handoff_state = 'running' AND id IN ({marks(n)})"))

    def pending_handoffs(self, n_platforms: int | None) -> str:
        """Pending handoff rows, FIFO by request (optionally of ``n_platforms`` platforms)."""
        where = "s.handoff_state = 'pending'"
        if n_platforms is not None:
            where += f" AND LOWER(s.handoff_platform) IN ({marks(n_platforms)})"
        return self.render((
            f"{self._session_select} WHERE {where} "
            "ORDER BY COALESCE(s.handoff_requested_at, s.started_at), s.id"))

    def routing_delete(self, n: int) -> str:
        """Delete ``n`` keys of one scope."""
        return self.render((
            f"DELETE FROM gateway_routing WHERE scope = ? AND session_key IN ({marks(n)})"))


#: The GatewayStatements of a dialect (built once per process).
for_dialect = GatewayStatements.for_dialect
