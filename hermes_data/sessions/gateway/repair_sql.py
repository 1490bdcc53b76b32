"""Statements of the gateway's repair reads and writes
(docs/sessions-gateway.md §3.4–§3.5): never-active keyed sessions and orphaned unkeyed sessions."""

from __future__ import annotations

from hermes_data.sessions.sql.dialect import Statements
from hermes_data.sessions.sql.predicates import J, last_active

_ZERO_COLS = ("message_count", "tool_call_count", "api_call_count", "input_tokens",
              "output_tokens", "pinned", "archived")


def never_active(s: str, bindings: bool) -> str:
    """NEVER_ACTIVE(s, cutoff) (binds the cutoff once); ``bindings``: the Telegram bindings
    table exists (a bound lane is explicit intent)."""
    out = (f"COALESCE({s}.session_key, '') <> '' AND {s}.ended_at IS NULL AND "
           f"COALESCE({s}.title, '') = '' AND {s}.last_activity_at IS NULL AND "
           + " AND ".join(f"COALESCE({s}.{c}, 0) = 0" for c in _ZERO_COLS)
           + f" AND {s}.started_at < ? AND NOT EXISTS (SELECT 1 FROM messages na_m WHERE "
           f"na_m.session_id = {s}.id) AND NOT EXISTS (SELECT 1 FROM sessions na_c WHERE "
           f"na_c.parent_session_id = {s}.id)")
    if bindings:
        out += (" AND NOT EXISTS (SELECT 1 FROM telegram_dm_topic_bindings na_b WHERE "
                f"na_b.session_id = {s}.id)")
    return out


class RepairStatements(Statements):
    """The repair statements of one dialect."""

    def __init__(self, d: str) -> None:
        super().__init__(d)
        pg = d == "postgresql"
        r = self.render
        lock = " FOR UPDATE" if pg else ""
        #: Does a table exist (the opt-in Telegram tables on SQLite)?
        self.TABLE_EXISTS = r(
            "SELECT 1 FROM pg_tables WHERE schemaname = current_schema() AND tablename = ?"
            if pg else "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?")
        self.NEVER_ACTIVE = {b: r(
            "SELECT s.id, s.session_key, s.source, s.chat_id, s.chat_type, s.user_id, "
            f"s.started_at FROM sessions s WHERE {never_active('s', b)} "
            "ORDER BY s.started_at, s.id") for b in (False, True)}
        self.NEVER_ACTIVE_ONE = {b: r(
            f"SELECT s.id FROM sessions s WHERE s.id = ? AND {never_active('s', b)}{lock}")
            for b in (False, True)}
        #: Routing entries of every scope naming a session (malformed JSON never raises).
        self.ROUTING_FOR_SESSION = r(
            f"DELETE FROM gateway_routing WHERE {J('entry_json', 'session_id', d)} = ?")
        self.LOCK_OF = r("SELECT holder, expires_at FROM compression_locks WHERE session_id = ?")
        self.LEASE_OF = r("SELECT holder, expires_at FROM session_turn_leases "
                          "WHERE conversation_id = ?")
        la = last_active
        #: Orphans: unkeyed, with messages, not tool rows, no branch/delegate marker.
        self.ORPHANS = r(
            "SELECT o.id, COALESCE(o.source, ''), (SELECT COUNT(*) FROM messages om WHERE "
            f"om.session_id = o.id), o.started_at, {la('o')}, o.parent_session_id, o.user_id "
            "FROM sessions o WHERE o.session_key IS NULL AND EXISTS (SELECT 1 FROM messages "
            "oe WHERE oe.session_id = o.id) AND COALESCE(o.source, '') <> 'tool' AND "
            f"{J('o.model_config', '_branched_from', d)} IS NULL AND "
            f"{J('o.model_config', '_delegate_from', d)} IS NULL ORDER BY o.started_at, o.id")
        #: A lineage donor: the parent, keyed, of the same source.
        self.PARENT_DONOR = r(
            "SELECT p.id, p.session_key FROM sessions p WHERE p.id = ? AND "
            "COALESCE(p.session_key, '') <> '' AND COALESCE(p.source, '') = ?")
        #: Contiguity donors (at most two: one is an answer, two are ambiguous).
        self.CONTIGUOUS_DONORS = r(
            f"SELECT d.id, d.session_key FROM sessions d WHERE d.id <> ? AND "
            "COALESCE(d.session_key, '') <> '' AND COALESCE(d.source, '') = ? AND "
            "(COALESCE(d.user_id, '') = '' OR COALESCE(?, '') = '' OR d.user_id = ?) AND "
            f"{la('d')} BETWEEN ? AND ? AND {la('d')} < ? ORDER BY {la('d')} DESC, d.id DESC "
            "LIMIT 2")
        #: Both rows of an adoption, locked in id order on PostgreSQL.
        self.ADOPT_ROWS = r(
            "SELECT id, COALESCE(source, ''), session_key, ended_at, end_reason FROM sessions "
            f"WHERE id IN (?, ?) ORDER BY id{lock}")
        fill = ", ".join(f"{c} = COALESCE({c}, ?)" for c in
                         ("chat_id", "chat_type", "thread_id", "user_id", "origin_json",
                          "display_name"))
        self.ADOPT_ORPHAN = r(
            f"UPDATE sessions SET session_key = ?, {fill} WHERE id = ? AND session_key IS NULL")
        self.DONOR_ROUTING = r(
            "SELECT chat_id, chat_type, thread_id, user_id, origin_json, display_name "
            "FROM sessions WHERE id = ?")
        self.SUPERSEDE_DONOR = r(
            "UPDATE sessions SET ended_at = COALESCE(ended_at, ?), "
            "end_reason = 'superseded_by_repair' WHERE id = ?")

        # -- kanban retag (docs/sessions-gateway.md §3.9): exact, case-sensitive prefix on both dialects
        prefix = "left(cwd, ?)" if pg else "substr(cwd, 1, ?)"
        self.META_GET = r("SELECT value FROM state_meta WHERE key = ?")
        self.META_SET = r("INSERT INTO state_meta (key, value) VALUES (?, ?) "
                          "ON CONFLICT (key) DO UPDATE SET value = excluded.value")
        self.RETAG_KANBAN = r(
            "UPDATE sessions SET source = 'kanban' WHERE source = 'cli' AND (cwd = ? OR "
            f"{prefix} IN (?, ?))")


#: The RepairStatements of a dialect (built once per process).
for_dialect = RepairStatements.for_dialect
