"""Statements of the agent turn API's message-row helpers (docs/sessions-agent.md §3.6)
and identity reads (docs/sessions-agent.md §3.8)."""

from __future__ import annotations

from hermes_data.sessions.sql.dialect import Statements, marks


#: Characters ``require_text`` trims (space, TAB, LF, CR).
BLANK_CHARS = " \t\n\r"


class RowHelperStatements(Statements):
    """The row-helper statements of one dialect."""

    def __init__(self, d: str) -> None:
        super().__init__(d)
        pg = d == "postgresql"
        lock = " FOR UPDATE" if pg else ""
        is_ = "IS NOT DISTINCT FROM" if pg else "IS"
        trim = "btrim" if pg else "TRIM"
        r = self.render
        #: Stamp api_content on the newest active user row when its content still matches.
        self.SET_LATEST_USER_API_CONTENT = r(
            "UPDATE messages SET api_content = ? WHERE id = (SELECT MAX(id) FROM messages "
            f"WHERE session_id = ? AND role = 'user' AND active = 1) AND content {is_} ?")
        #: The newest active row with a role and content (locked on PostgreSQL).
        self.LATEST_MATCHING = r(
            "SELECT id FROM messages WHERE session_id = ? AND active = 1 AND role = ? "
            f"AND content = ? ORDER BY id DESC LIMIT 1{lock}")
        #: Set a row's display kind.
        self.SET_DISPLAY_KIND = r("UPDATE messages SET display_kind = ? WHERE id = ?")
        #: Set a row's display kind and metadata.
        self.SET_DISPLAY_KIND_META = r(
            "UPDATE messages SET display_kind = ?, display_metadata = ? WHERE id = ?")
        #: Role of an active row of one session.
        self.MESSAGE_ROLE = r("SELECT role FROM messages WHERE id = ? AND session_id = ? "
                              "AND active = 1")
        latest = ("SELECT id FROM messages WHERE session_id = ? AND role = ? AND active = 1{t} "
                  "ORDER BY id DESC LIMIT 1 OFFSET ?")
        #: The newest active row of a role, ``OFFSET`` turns back.
        self.LATEST_ROW = r(latest.format(t=""))
        #: The same, among rows with visible text (trim characters bound first).
        self.LATEST_TEXT_ROW = r(latest.format(
            t=f" AND content IS NOT NULL AND {trim}(content, ?) <> '' "
              "AND COALESCE(display_kind, '') <> 'hidden'"))
        #: Active row ids, ascending.
        self.ACTIVE_IDS = r("SELECT id FROM messages WHERE session_id = ? AND active = 1 "
                            "ORDER BY id")
        #: Highest active row id (0 when none).
        self.ACTIVE_WATERMARK = r("SELECT COALESCE(MAX(id), 0) FROM messages "
                                  "WHERE session_id = ? AND active = 1")
        #: Any rewound/archived row.
        self.HAS_INACTIVE = r("SELECT 1 FROM messages WHERE session_id = ? AND active = 0 "
                              "LIMIT 1")
        #: Any row (active or not) carrying a platform message id.
        self.HAS_PLATFORM_ID = r("SELECT 1 FROM messages WHERE session_id = ? "
                                 "AND platform_message_id = ? LIMIT 1")
        #: Store-wide active rows.
        self.STORE_COUNT_ACTIVE = r("SELECT COUNT(*) FROM messages WHERE active = 1")
        #: Store-wide rows.
        self.STORE_COUNT_ALL = r("SELECT COUNT(*) FROM messages")
        head = f"left({trim}(content, ?), 1)" if pg else f"substr({trim}(content, ?), 1, 1)"
        tail = f"right({trim}(content, ?), 1)" if pg else f"substr({trim}(content, ?), -1)"
        #: Assistant rows with tool calls whose short content looks like ``[marker]`` (content
        #: longer than 256 characters is never selected).
        self.MARKER_CANDIDATES = r(
            "SELECT id, session_id, content FROM messages WHERE role = 'assistant' "
            "AND tool_calls IS NOT NULL AND tool_calls <> '' AND content IS NOT NULL "
            f"AND length(content) <= 256 AND {head} = '[' AND {tail} = ']' ORDER BY id")

    def clear_content(self, n: int) -> str:
        """Blank the content of ``n`` bound message ids."""
        return self.render(f"UPDATE messages SET content = '' WHERE id IN ({marks(n)})")


#: The RowHelperStatements of a dialect (built once per process).
for_dialect = RowHelperStatements.for_dialect
