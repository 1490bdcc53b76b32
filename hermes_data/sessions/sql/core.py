"""Statements of the core session-store operations: state_meta, lifecycle, the transcript,
titles and single-session reads (docs/sessions.md §4–§6).

Driver statements (sent with ``exec_driver_sql`` or on a DB-API connection, positional
values) are written once with ``?`` placeholders and rendered for each dialect by
:func:`hermes_data.sessions.sql.dialect.render` when :class:`CoreStatements` is built. Column
names come only from the fixed tuples below; every value is bound.
"""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.sql.elements import TextClause

from hermes_data.sessions.sql.dialect import Statements, marks
from hermes_data.sessions.sql.predicates import J, legacy_reset_child

#: Core ``sessions`` columns a :class:`~hermes_data.sessions.rows.SessionRow` carries.
SESSION_COLS = (
    "id", "source", "user_id", "session_key", "chat_id", "chat_type", "thread_id",
    "display_name", "origin_json", "model", "model_config", "system_prompt_hash",
    "parent_session_id", "started_at", "ended_at", "end_reason", "message_count",
    "tool_call_count", "input_tokens", "output_tokens", "cwd", "git_branch", "git_repo_root",
    "billing_provider", "estimated_cost_usd", "actual_cost_usd", "title", "title_source",
    "last_activity_at", "profile_name", "archived", "pinned", "hidden", "last_read_at",
)
#: The agent turn API's ``sessions`` columns (docs/sessions-agent.md §2.1, revision s03) a
#: :class:`~hermes_data.sessions.rows.SessionRow` also carries (docs/sessions-agent.md §2.6).
AGENT_SESSION_COLS = (
    "cache_read_tokens", "cache_write_tokens", "reasoning_tokens", "api_call_count",
    "billing_base_url", "billing_mode", "cost_status", "cost_source", "pricing_version",
    "last_activity_description", "last_activity_provenance", "git_metadata_generation",
    "tool_names", "expiry_finalized",
)
#: The gateway's handoff columns (docs/sessions-gateway.md §2.2, revision s06; amendment A1).
HANDOFF_SESSION_COLS = (
    "handoff_state", "handoff_platform", "handoff_error", "handoff_requested_at",
    "handoff_claimed_by", "handoff_claimed_at",
)
#: The coordination columns (docs/sessions-coordination.md §2.1, revision s04): upstream's
#: ``get_session`` (``SELECT s.*``) returns them with every session (issue 33).
COORDINATION_SESSION_COLS = (
    "compression_failure_cooldown_until", "compression_failure_error",
    "compression_fallback_streak", "compression_ineffective_count",
    "compression_recovery_deadline", "compression_overload_streak", "rewind_count",
)
#: Every column a ``SessionRow`` is read from, in order (the resolved prompt follows them).
SESSION_ROW_COLS = (SESSION_COLS + AGENT_SESSION_COLS + HANDOFF_SESSION_COLS
                    + COORDINATION_SESSION_COLS)
#: ``messages`` columns a :class:`~hermes_data.sessions.rows.MessageRow` carries, in order.
MESSAGE_COLS = (
    "id", "session_id", "role", "content", "tool_call_id", "tool_calls", "tool_name",
    "timestamp", "token_count", "finish_reason", "reasoning", "reasoning_content",
    "reasoning_details", "codex_reasoning_items", "codex_message_items", "platform_message_id",
    "observed", "_compressed_summary", "effect_disposition", "active", "compacted",
    "api_content", "display_kind", "display_metadata",
)
#: Columns an appended message row binds: everything but ``id`` and ``compacted``, plus
#: ``display_identity`` (docs/sessions-ui.md §3.4; ``display_order`` is the insert trigger's, or a SQLite
#: batch's own: ``INSERT_MESSAGE_ORDERED``).
INSERT_COLS = MESSAGE_COLS[1:20] + MESSAGE_COLS[21:] + ("display_identity",)
#: Columns an existing session may have filled by a later ``create_session`` (enrich rule).
FILLABLE = ("model", "system_prompt_hash", "session_key", "chat_id", "chat_type", "thread_id",
            "parent_session_id", "cwd", "profile_name", "git_repo_root", "origin_json",
            "display_name")
#: Routing columns a compression continuation inherits from its parent.
ROUTING = ("user_id", "session_key", "chat_id", "chat_type", "thread_id", "display_name",
           "origin_json")
#: Columns a new session row may bind (the allow-list of :meth:`CoreStatements.insert_session`).
INSERTABLE_SESSION_COLS = frozenset(SESSION_COLS) | {"hidden"}
#: Lineage markers of child sessions (reset, branch and delegate children).
CHILD_MARKERS = {"branch": "_branched_from", "delegate": "_delegate_from", "reset": "_reset_from"}
#: Columns of the parent a compression publication reads.
PUBLISH_PARENT_COLS = ("ended_at", "end_reason", "title", "title_source", "cwd", "git_branch",
                       "git_repo_root", "profile_name", *ROUTING, "archived", "pinned", "hidden",
                       "last_read_at")
#: Columns a compression continuation row binds, in order.
PUBLISH_CHILD_COLS = ("id", "source", "started_at", "parent_session_id", "model", "model_config",
                      "system_prompt_hash", "cwd", "git_branch", "git_repo_root", "profile_name",
                      *ROUTING, "archived", "pinned", "hidden", "last_read_at")


def quote_ident(name: str) -> str:
    """Double-quote an identifier read from the database's own catalogue."""
    return '"' + name.replace('"', '""') + '"'


class CoreStatements(Statements):
    """The core statements for one dialect (``sqlite`` / ``postgresql``)."""

    def __init__(self, d: str) -> None:
        super().__init__(d)
        pg = d == "postgresql"
        r = self.render
        #: Null-safe equality.
        self.IS = "IS NOT DISTINCT FROM" if pg else "IS"
        #: No LIMIT (SQLite needs a negative number, PostgreSQL takes NULL).
        self.NO_LIMIT = None if pg else -1

        # -- state_meta (docs/sessions.md §7.7)
        #: One state_meta value.
        self.GET_META = r("SELECT value FROM state_meta WHERE key = ?")
        #: Upsert a state_meta value.
        self.SET_META = r("INSERT INTO state_meta(key, value) VALUES (?, ?) "
                          "ON CONFLICT(key) DO UPDATE SET value = excluded.value")
        #: Every state_meta key under an escaped LIKE prefix.
        self.LIST_META_PREFIX = r("SELECT key, value FROM state_meta WHERE key LIKE ? "
                                  "ESCAPE '\\' ORDER BY key")

        # -- lifecycle (docs/sessions.md §4.1–§4.3)
        #: Keep a system prompt once (content-addressed).
        self.INSERT_PROMPT = r("INSERT INTO system_prompts(hash, prompt) VALUES (?, ?) "
                               "ON CONFLICT (hash) DO NOTHING")
        #: The model_config of one session (existence probe of create_session).
        self.SESSION_MODEL_CONFIG = r("SELECT model_config FROM sessions WHERE id = ?")
        enrich = [f"{c} = COALESCE({c}, ?)" for c in (*FILLABLE, "git_branch")]
        #: Fill only the still-NULL columns of an existing session (the enrich rule).
        self.ENRICH_SESSION = r(f"UPDATE sessions SET {', '.join(enrich)} WHERE id = ?")
        #: The same, also replacing model_config.
        self.ENRICH_SESSION_CONFIG = r(
            f"UPDATE sessions SET {', '.join(enrich)}, model_config = ? WHERE id = ?")
        #: Owner profile for a session that has none yet.
        self.FILL_PROFILE = r("UPDATE sessions SET profile_name = ? WHERE id = ? "
                              "AND profile_name IS NULL")
        #: Child and parent session keys, the parent's end reason and profile.
        self.PARENT_KEYS = r(
            "SELECT c.session_key, p.session_key, p.end_reason, p.profile_name FROM sessions c "
            "JOIN sessions p ON p.id = c.parent_session_id WHERE c.id = ?")
        inherit = [f"{c} = COALESCE({c}, (SELECT p.{c} FROM sessions p WHERE p.id = "
                   "sessions.parent_session_id))" for c in ("cwd", "git_repo_root", "git_branch")]
        routing = [f"{c} = COALESCE({c}, (SELECT p.{c} FROM sessions p WHERE p.id = "
                   "sessions.parent_session_id))" for c in ROUTING]
        #: A child inherits its parent's workspace columns where it has none.
        self.INHERIT_WORKSPACE = r(f"UPDATE sessions SET {', '.join(inherit)} WHERE id = ?")
        #: A compression continuation also inherits the routing columns.
        self.INHERIT_WORKSPACE_AND_ROUTING = r(
            f"UPDATE sessions SET {', '.join(inherit + routing)} WHERE id = ?")
        #: End an open session (the first reason wins).
        self.END_SESSION = r("UPDATE sessions SET ended_at = ?, end_reason = ? WHERE id = ? "
                             "AND ended_at IS NULL")
        markers = " AND ".join(f"{J('model_config', m, d)} IS NULL"
                               for m in CHILD_MARKERS.values())
        set_reset_from = (
            "CAST(jsonb_set(hermes_json_object(model_config), '{_reset_from}', "
            "to_jsonb(CAST(:p AS TEXT))) AS TEXT)" if pg else
            "json_set(CASE WHEN json_valid(model_config) THEN model_config ELSE '{}' END, "
            "'$._reset_from', :p)")
        #: Stamp ``_reset_from`` = :p on the marker-less legacy reset children of :p.
        self.STAMP_LEGACY_RESET_CHILDREN = text(
            f"UPDATE sessions SET model_config = {set_reset_from} WHERE parent_session_id = :p "
            f"AND {markers} AND {legacy_reset_child('sessions')}")
        #: Clear the end fields of an ended session.
        self.REOPEN_SESSION = r("UPDATE sessions SET ended_at = NULL, end_reason = NULL "
                                "WHERE id = ? AND (ended_at IS NOT NULL OR end_reason IS NOT NULL)")
        #: Clear an automatic end reason before a publication continues the session.
        self.CLEAR_END = r("UPDATE sessions SET ended_at = NULL, end_reason = NULL WHERE id = ?")
        #: The compression lease on a session.
        self.COMPRESSION_LEASE = r("SELECT holder, expires_at FROM compression_locks "
                                   "WHERE session_id = ?")
        #: The parent columns a compression publication reads.
        self.PUBLISH_PARENT = r(f"SELECT {', '.join(PUBLISH_PARENT_COLS)} FROM sessions "
                                "WHERE id = ?")
        #: Insert a compression continuation.
        self.INSERT_CONTINUATION = self.insert_session(PUBLISH_CHILD_COLS)
        #: Set a session's counters outright.
        self.SET_COUNTS = r("UPDATE sessions SET message_count = ?, tool_call_count = ? "
                            "WHERE id = ?")
        #: End the parent with ``compression`` (only if still open).
        self.END_COMPRESSION = r("UPDATE sessions SET ended_at = ?, end_reason = 'compression' "
                                 "WHERE id = ? AND ended_at IS NULL")

        # -- transcript (docs/sessions.md §6)
        #: Append one message row (all of INSERT_COLS, positional).
        self.INSERT_MESSAGE = r(f"INSERT INTO messages ({', '.join(INSERT_COLS)}) "
                                f"VALUES ({marks(len(INSERT_COLS))})")
        #: The same, returning the new row id.
        self.INSERT_MESSAGE_RETURNING = r(f"INSERT INTO messages ({', '.join(INSERT_COLS)}) "
                                          f"VALUES ({marks(len(INSERT_COLS))}) RETURNING id")
        #: The batch append's form (SQLite): the id and ``display_order`` given, as the insert
        #: trigger would have set them (``display.BatchOrder``), so its ``WHEN`` skips the row.
        self.INSERT_MESSAGE_ORDERED = r(
            f"INSERT INTO messages (id, {', '.join(INSERT_COLS)}, display_order) "
            f"VALUES ({marks(len(INSERT_COLS) + 2)})")
        #: Admission + counters in one statement; the row tells missing / compression-closed,
        #: and (SQLite) the file's application_id, re-read inside the write transaction so a
        #: file replaced under the handle is caught without a separate PRAGMA.
        self.ADMIT_AND_COUNT = r(
            "UPDATE sessions SET message_count = COALESCE(message_count, 0) + ?, "
            "tool_call_count = COALESCE(tool_call_count, 0) + ? WHERE id = ? "
            "RETURNING ended_at, end_reason, "
            + ("CAST(NULL AS BIGINT)" if pg
               else "(SELECT application_id FROM pragma_application_id())"))
        #: The file header's application_id (SQLite) — NULL where there is no file.
        self.FILE_HEADER = ("SELECT CAST(NULL AS BIGINT)" if pg
                            else "SELECT application_id FROM pragma_application_id()")
        #: The tool_calls of the rows a watermark clone copies (:parent, :watermark[, :ceiling]).
        self.CLONE_TOOL_CALLS = text(
            "SELECT tool_calls FROM messages WHERE session_id = :parent AND active = 1 "
            "AND id > :watermark AND (CAST(:ceiling AS BIGINT) IS NULL OR id <= :ceiling)")
        #: Messages of one session, active only.
        self.COUNT_ACTIVE = r("SELECT COUNT(*) FROM messages WHERE session_id = ? AND active = 1")
        #: Messages of one session, every row.
        self.COUNT_ALL = r("SELECT COUNT(*) FROM messages WHERE session_id = ?")
        #: Active rows of one session, counted only up to :cap.
        self.BOUNDED_ACTIVE_COUNT = text(
            "SELECT COUNT(*) FROM (SELECT 1 FROM messages WHERE session_id = :id "
            "AND active = 1 LIMIT :cap) AS capped")

        # -- titles (docs/sessions.md §4.5)
        #: Title, its source and the hidden flag of one session.
        self.TITLE_STATE = r("SELECT title, title_source, hidden FROM sessions WHERE id = ?")
        #: Another session holding a title.
        self.TITLE_HOLDER = r("SELECT id FROM sessions WHERE title = ? AND id <> ?")
        #: Drop a session's title.
        self.CLEAR_TITLE = r("UPDATE sessions SET title = NULL, title_source = NULL WHERE id = ?")
        #: Set a title and its source.
        self.SET_TITLE = r("UPDATE sessions SET title = ?, title_source = ? WHERE id = ?")
        #: Set a title only if the row still holds the title/source read before.
        self.SET_TITLE_IF_UNCHANGED = r(
            f"UPDATE sessions SET title = ?, title_source = ? WHERE id = ? "
            f"AND title {self.IS} ? AND title_source {self.IS} ?")
        #: A base title and its numbered variants (escaped LIKE ``base #%``).
        self.TITLE_VARIANTS = r("SELECT title FROM sessions WHERE title = ? "
                                "OR title LIKE ? ESCAPE '\\'")
        #: The session holding exactly a title.
        self.SESSION_BY_TITLE = r("SELECT id FROM sessions WHERE title = ?")
        #: Numbered variants of a title, newest first.
        self.NUMBERED_TITLES = r("SELECT id, title FROM sessions WHERE title LIKE ? "
                                 "ESCAPE '\\' ORDER BY started_at DESC")

        # -- reads (docs/sessions.md §5.1)
        #: One session with its resolved system prompt.
        self.GET_SESSION = r(
            f"SELECT {', '.join('s.' + c for c in SESSION_ROW_COLS)}, "
            "COALESCE(sp.prompt, s.system_prompt) FROM sessions s LEFT JOIN system_prompts sp "
            "ON sp.hash = s.system_prompt_hash WHERE s.id = ?")
        #: At least n sessions? (reads at most n rows).
        self.SESSION_COUNT_CAPPED = r("SELECT COUNT(*) FROM (SELECT 1 FROM sessions LIMIT ?) "
                                      "AS capped")

    def insert_session(self, cols: tuple[str, ...]) -> str:
        """``INSERT INTO sessions`` binding ``cols`` (names from the core allow-list only)."""
        unknown = [c for c in cols if c not in INSERTABLE_SESSION_COLS]
        if unknown:
            raise ValueError(f"not a session column: {', '.join(unknown)}")
        return self.render(f"INSERT INTO sessions ({', '.join(cols)}) VALUES ({marks(len(cols))})")

    def select_messages(self, *, include_inactive: bool, after_id: bool, latest: bool,
                        paged: bool) -> str:
        """One session's transcript page (``?``: session id[, after id][, limit, offset])."""
        where = "session_id = ?"
        if not include_inactive:
            where += " AND +active = 1"  # '+': keep the (session_id, id) index for the seek
        if after_id:
            where += " AND id > ?"
        stmt = (f"SELECT {', '.join(MESSAGE_COLS)} FROM messages WHERE {where} "
                f"ORDER BY id {'DESC' if latest else 'ASC'}")
        return self.render(stmt + (" LIMIT ? OFFSET ?" if paged else ""))

    def clone_messages(self, cols: list[str]) -> TextClause:
        """Copy a parent's active rows above a watermark (and up to an optional ceiling) into a
        child, column-exact; ``cols`` come from the live table's catalogue (quoted)."""
        col_sql = ", ".join(quote_ident(c) for c in cols)
        return text(f"INSERT INTO messages (session_id, active, compacted, {col_sql}) "
                    f"SELECT :child, 1, 0, {col_sql} FROM messages WHERE session_id = :parent "
                    "AND active = 1 AND id > :watermark "
                    "AND (CAST(:ceiling AS BIGINT) IS NULL OR id <= :ceiling) ORDER BY id")
