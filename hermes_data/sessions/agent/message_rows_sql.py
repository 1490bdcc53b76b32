"""Statements of the agent turn API's message-row helpers (docs/sessions-agent.md §3.6)
and identity reads (docs/sessions-agent.md §3.8)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from hermes_data.sessions.schema import messages as m
from hermes_data.sessions.sql.constructs import bp, const, left_chars, not_hidden, right_chars, trim_chars
from hermes_data.sessions.sql.dialect import Statements, driver_statement
from hermes_data.statements import DriverPrepared


#: Characters ``require_text`` trims (space, TAB, LF, CR).
BLANK_CHARS = " \t\n\r"


_ACTIVE = m.c.active == const(1)


def _latest(text_only: bool) -> Any:
    def build(d: str) -> sa.Select:
        conds = [m.c.session_id == bp("sid"), m.c.role == bp("role"), _ACTIVE]
        if text_only:
            conds += [m.c.content.is_not(None),
                      trim_chars(m.c.content, bp("chars")) != const(""),
                      not_hidden(m.c.display_kind)]
        return (sa.select(m.c.id).where(*conds).order_by(m.c.id.desc())
                .limit(const(1)).offset(bp("offset")))
    return driver_statement(build, "sid", "role", *(("chars",) if text_only else ()), "offset")


def _set_latest_user_api_content(d: str) -> sa.Update:
    newest = m.alias("newest")  # the inner scan (the SQL's unqualified inner ``messages``)
    latest = sa.select(sa.func.max(newest.c.id)).where(
        newest.c.session_id == bp("sid"), newest.c.role == const("user"),
        newest.c.active == const(1)).scalar_subquery()
    return sa.update(m).values(api_content=bp("api")).where(
        m.c.id == latest, m.c.content.is_not_distinct_from(bp("content")))


def _marker_candidates(d: str) -> sa.Select:
    def stripped() -> Any:
        return trim_chars(m.c.content, bp("chars"))
    return sa.select(m.c.id, m.c.session_id, m.c.content).where(
        m.c.role == const("assistant"), m.c.tool_calls.is_not(None),
        m.c.tool_calls != const(""), m.c.content.is_not(None),
        sa.func.length(m.c.content) <= const(256),
        left_chars(stripped(), const(1)) == const("["),
        right_chars(trim_chars(m.c.content, bp("chars2")), const(1)) == const("]"),
    ).order_by(m.c.id)


#: Blank the content of a list of rows (the list spread per call: Prepared.expanded_sql).
_CLEAR_CONTENT = DriverPrepared("clear_content", lambda: sa.update(m).values(
    content=const("")).where(m.c.id.in_(sa.bindparam("ids", expanding=True))))


class RowHelperStatements(Statements):
    """The row-helper statements of one dialect (Core constructs over ``messages``, compiled
    on first use; callers pass positional tuples in each statement's declared order)."""

    #: Stamp api_content on the newest active user row when its content still matches.
    SET_LATEST_USER_API_CONTENT = driver_statement(_set_latest_user_api_content,
                                                   "api", "sid", "content")
    #: The newest active row with a role and content (locked on PostgreSQL).
    LATEST_MATCHING = driver_statement(lambda d: sa.select(m.c.id).where(
        m.c.session_id == bp("sid"), _ACTIVE, m.c.role == bp("role"),
        m.c.content == bp("content")).order_by(m.c.id.desc()).limit(const(1))
        .with_for_update(), "sid", "role", "content")
    #: Set a row's display kind.
    SET_DISPLAY_KIND = driver_statement(lambda d: sa.update(m).values(
        display_kind=bp("kind")).where(m.c.id == bp("id")), "kind", "id")
    #: Set a row's display kind and metadata.
    SET_DISPLAY_KIND_META = driver_statement(lambda d: sa.update(m).ordered_values(
        (m.c.display_kind, bp("kind")), (m.c.display_metadata, bp("meta"))).where(
        m.c.id == bp("id")), "kind", "meta", "id")
    #: Role of an active row of one session.
    MESSAGE_ROLE = driver_statement(lambda d: sa.select(m.c.role).where(
        m.c.id == bp("id"), m.c.session_id == bp("sid"), _ACTIVE), "id", "sid")
    #: The newest active row of a role, ``OFFSET`` turns back.
    LATEST_ROW = _latest(text_only=False)
    #: The same, among rows with visible text (trim characters bound first).
    LATEST_TEXT_ROW = _latest(text_only=True)
    #: Active row ids, ascending.
    ACTIVE_IDS = driver_statement(lambda d: sa.select(m.c.id).where(
        m.c.session_id == bp("sid"), _ACTIVE).order_by(m.c.id), "sid")
    #: Highest active row id (0 when none).
    ACTIVE_WATERMARK = driver_statement(lambda d: sa.select(
        sa.func.coalesce(sa.func.max(m.c.id), const(0))).where(
        m.c.session_id == bp("sid"), _ACTIVE), "sid")
    #: Any rewound/archived row.
    HAS_INACTIVE = driver_statement(lambda d: sa.select(const(1)).select_from(m).where(
        m.c.session_id == bp("sid"), m.c.active == const(0)).limit(const(1)), "sid")
    #: Any row (active or not) carrying a platform message id.
    HAS_PLATFORM_ID = driver_statement(lambda d: sa.select(const(1)).select_from(m).where(
        m.c.session_id == bp("sid"), m.c.platform_message_id == bp("pid")).limit(const(1)),
        "sid", "pid")
    #: Store-wide active rows.
    STORE_COUNT_ACTIVE = driver_statement(lambda d: sa.select(sa.func.count()).select_from(
        m).where(_ACTIVE))
    #: Store-wide rows.
    STORE_COUNT_ALL = driver_statement(lambda d: sa.select(sa.func.count()).select_from(m))
    #: Assistant rows with tool calls whose short content looks like ``[marker]`` (content
    #: longer than 256 characters is never selected).
    MARKER_CANDIDATES = driver_statement(_marker_candidates, "chars", "chars2")

    def clear_content(self, n: int) -> str:
        """Blank the content of ``n`` bound message ids."""
        return _CLEAR_CONTENT.expanded_sql(self.dialect, ("ids",), n)


#: The RowHelperStatements of a dialect (built once per process).
for_dialect = RowHelperStatements.for_dialect
