"""Statements of the core session-store operations: state_meta, lifecycle, the transcript,
titles and single-session reads (docs/sessions.md §4–§6).

Driver statements (sent with ``exec_driver_sql`` or on a DB-API connection, positional
values) are SQLAlchemy Core constructs built from :mod:`hermes_data.sessions.schema` and
compiled once per dialect (issue 32) by
:class:`~hermes_data.sessions.sql.dialect.driver_statement` — the attribute is then the
compiled string, its positional parameters in the declared order, so the callers keep
passing tuples. Column names come only from the fixed tuples below; every value is bound.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import sqlalchemy as sa

from hermes_data.sessions.schema import compression_locks, state_meta, system_prompts
from hermes_data.sessions.schema import messages as m
from hermes_data.sessions.schema import sessions as s
from hermes_data.sessions.sql.constructs import bp, const, dialect_insert, json_marker, unindexed
from hermes_data.sessions.sql.dialect import driver_statement
from hermes_data.sessions.sql.meta_sql import MetaStatements
from hermes_data.sessions.sql.predicates import legacy_reset_child_of
from hermes_data.statements import DriverPrepared

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


_BY_ID = s.c.id == bp("id")
_ACTIVE = m.c.active == const(1)


def _upd(*pairs: tuple[str, Any]) -> sa.Update:
    # SET in the given order (positional callers), values bound or expressions.
    return sa.update(s).ordered_values(*[(s.c[c], v) for c, v in pairs])


def _enrich(config: bool) -> driver_statement:
    # Fill only the still-NULL columns (the enrich rule), model_config replaced with ``config``.
    cols = (*FILLABLE, "git_branch")

    def build(d: str) -> sa.Update:
        pairs: list[tuple[str, Any]] = [(c, sa.func.coalesce(s.c[c], bp("v_" + c)))
                                        for c in cols]
        if config:
            pairs.append(("model_config", bp("config")))
        return _upd(*pairs).where(_BY_ID)
    return driver_statement(build, *("v_" + c for c in cols),
                            *(("config",) if config else ()), "id")


def _inherit(cols: tuple[str, ...]) -> driver_statement:
    # Each of ``cols`` the parent's value where the child has none.
    def build(d: str) -> sa.Update:
        p = s.alias("p")
        return _upd(*[(c, sa.func.coalesce(s.c[c], sa.select(p.c[c]).where(
            p.c.id == s.c.parent_session_id).scalar_subquery())) for c in cols]).where(_BY_ID)
    return driver_statement(build, "id")


def _insert_session(cols: tuple[str, ...]) -> sa.Insert:
    # Core lists a Table's INSERT columns in table order; the callers bind ``cols`` in their
    # own order, so the insert goes through a view of ``sessions`` with exactly those
    # columns (each looked up in the schema: an unknown name raises).
    view = sa.table(s.name, *[sa.column(s.c[c].name) for c in cols])
    return sa.insert(view).values({c: bp(c) for c in cols})


@lru_cache(maxsize=64)
def _insert_session_prepared(cols: tuple[str, ...]) -> DriverPrepared:
    return DriverPrepared("CoreStatements.insert_session", lambda: _insert_session(cols))


def _insert_message(cols: tuple[str, ...], returning: bool = False) -> driver_statement:
    # ``cols`` are in the table's own order, which is the order Core compiles them in.
    def build(d: str) -> sa.Insert:
        stmt = sa.insert(m).values({c: bp(c) for c in cols})
        # inline(): no implicit ``RETURNING id`` on PostgreSQL (the executemany forms)
        return stmt.returning(m.c.id) if returning else stmt.inline()
    return driver_statement(build, *cols)


def _admit_and_count(d: str) -> sa.Update:
    if d == "postgresql":
        header: Any = sa.cast(sa.null(), sa.BigInteger)
    else:
        # not Core: a PRAGMA table-valued function (the file header's application_id)
        header = sa.literal_column("(SELECT application_id FROM pragma_application_id())")
    return _upd(
        ("message_count", sa.func.coalesce(s.c.message_count, const(0)) + bp("messages")),
        ("tool_call_count", sa.func.coalesce(s.c.tool_call_count, const(0)) + bp("tools")),
    ).where(_BY_ID).returning(s.c.ended_at, s.c.end_reason, header)


def _clone_range(t: Any) -> Any:
    # A parent's active rows above the watermark, up to the ceiling when one is given.
    ceiling = bp("ceiling")
    return sa.and_(t.c.session_id == bp("parent"), t.c.active == const(1),
                   t.c.id > bp("watermark"),
                   sa.or_(sa.cast(ceiling, sa.BigInteger).is_(None), t.c.id <= ceiling))


@lru_cache(maxsize=16)
def _clone_messages(cols: tuple[str, ...]) -> DriverPrepared:
    def build() -> sa.Insert:
        # ``cols`` are the live table's (upstream extra columns included), so the statement
        # goes through a view of ``messages`` with exactly those columns.
        fixed = ("id", "session_id", "active", "compacted")
        view = sa.table(m.name, *[sa.column(c) for c in (*fixed, *cols)])
        rows = (sa.select(bp("child"), const(1), const(0), *[view.c[c] for c in cols])
                .where(_clone_range(view)).order_by(view.c.id))
        return sa.insert(view).from_select(["session_id", "active", "compacted", *cols], rows)
    return DriverPrepared("CoreStatements.clone_messages", build)


def _stamp_legacy_reset_children(d: str) -> sa.Update:
    # ``p`` twice: the stamped value and the parent the children hang under.
    c, p = s.alias("c"), bp("p")
    if d == "postgresql":
        stamped: Any = sa.cast(sa.func.jsonb_set(
            sa.func.hermes_json_object(c.c.model_config), const("{_reset_from}"),
            sa.func.to_jsonb(sa.cast(p, sa.Text))), sa.Text)
    else:
        doc = sa.case((sa.func.json_valid(c.c.model_config), c.c.model_config),
                      else_=const("{}"))
        stamped = sa.func.json_set(doc, const("$._reset_from"), p)
    target: Any = c  # an alias of sessions (the stub types update() for tables only)
    return sa.update(target).values(model_config=stamped).where(
        c.c.parent_session_id == p,
        *[json_marker(c.c.model_config, mk).is_(None) for mk in CHILD_MARKERS.values()],
        legacy_reset_child_of(c))


def _count_messages(active_only: bool) -> driver_statement:
    def build(d: str) -> sa.Select:
        conds = [m.c.session_id == bp("id")] + ([_ACTIVE] if active_only else [])
        return sa.select(sa.func.count()).select_from(m).where(*conds)
    return driver_statement(build, "id")


def session_row_select(a: Any) -> sa.Select:
    """The session-row columns of the ``sessions`` alias ``a`` and its resolved prompt
    (``system_prompts`` outer-joined as ``sp``): what
    :func:`hermes_data.sessions.core.listing.session_row` reads. ``get_session`` and the
    gateway's session reads add their own conditions."""
    sp = system_prompts.alias("sp")
    return (sa.select(*[a.c[c] for c in SESSION_ROW_COLS],
                      sa.func.coalesce(sp.c.prompt, a.c.system_prompt))
            .select_from(a.outerjoin(sp, sp.c.hash == a.c.system_prompt_hash)))


def _get_session(d: str) -> sa.Select:
    a = s.alias("s")
    return session_row_select(a).where(a.c.id == bp("id"))


def _parent_keys(d: str) -> sa.Select:
    c, p = s.alias("c"), s.alias("p")
    return (sa.select(c.c.session_key, p.c.session_key, p.c.end_reason, p.c.profile_name)
            .select_from(c.join(p, p.c.id == c.c.parent_session_id))
            .where(c.c.id == bp("id")))


#: Does session :id exist? One row (1) when it does, none when not (``.scalar()``: 1 / None).
#: The lineage flag setters, deletion and import ask it (Core, compiled once per dialect).
SESSION_EXISTS = DriverPrepared("session_exists", lambda: sa.select(const(1)).select_from(
    s).where(s.c.id == bp("id")))


@lru_cache(maxsize=32)
def _select_messages(include_inactive: bool, after_id: bool, latest: bool,
                     paged: bool) -> DriverPrepared:
    def build() -> sa.Select:
        conds = [m.c.session_id == bp("id")]
        if not include_inactive:
            # '+': keep the (session_id, id) index for the seek
            conds.append(unindexed(m.c.active) == const(1))
        if after_id:
            conds.append(m.c.id > bp("after"))
        stmt = (sa.select(*[m.c[c] for c in MESSAGE_COLS]).where(*conds)
                .order_by(m.c.id.desc() if latest else m.c.id))
        return stmt.limit(bp("limit")).offset(bp("offset")) if paged else stmt
    return DriverPrepared("CoreStatements.select_messages", build)


@lru_cache(maxsize=64)
def _messages_page(d: str, include_inactive: bool, after_id: bool, latest: bool,
                   paged: bool) -> str:
    order = ("id", *(("after",) if after_id else ()), *(("limit", "offset") if paged else ()))
    return _select_messages(include_inactive, after_id, latest, paged).positional_sql(d, order)


class CoreStatements(MetaStatements):
    """The core statements for one dialect (``sqlite`` / ``postgresql``): Core constructs
    compiled on first use; callers pass positional tuples in each statement's declared
    order."""

    # -- state_meta (docs/sessions.md §7.7): GET_META / SET_META are MetaStatements'
    #: Every state_meta key under an escaped LIKE prefix.
    LIST_META_PREFIX = driver_statement(lambda d: sa.select(
        state_meta.c.key, state_meta.c.value).where(
        state_meta.c.key.like(bp("prefix"), escape="\\")).order_by(state_meta.c.key),
        "prefix")

    # -- lifecycle (docs/sessions.md §4.1–§4.3)
    #: Keep a system prompt once (content-addressed).
    INSERT_PROMPT = driver_statement(lambda d: dialect_insert(d)(system_prompts).values(
        hash=bp("hash"), prompt=bp("prompt")).on_conflict_do_nothing(
        index_elements=[system_prompts.c.hash]), "hash", "prompt")
    #: The model_config of one session (existence probe of create_session).
    SESSION_MODEL_CONFIG = driver_statement(lambda d: sa.select(s.c.model_config).where(
        _BY_ID), "id")
    #: Fill only the still-NULL columns of an existing session (the enrich rule).
    ENRICH_SESSION = _enrich(config=False)
    #: The same, also replacing model_config.
    ENRICH_SESSION_CONFIG = _enrich(config=True)
    #: Owner profile for a session that has none yet.
    FILL_PROFILE = driver_statement(lambda d: _upd(("profile_name", bp("profile"))).where(
        _BY_ID, s.c.profile_name.is_(None)), "profile", "id")
    #: Child and parent session keys, the parent's end reason and profile.
    PARENT_KEYS = driver_statement(_parent_keys, "id")
    #: A child inherits its parent's workspace columns where it has none.
    INHERIT_WORKSPACE = _inherit(("cwd", "git_repo_root", "git_branch"))
    #: A compression continuation also inherits the routing columns.
    INHERIT_WORKSPACE_AND_ROUTING = _inherit(("cwd", "git_repo_root", "git_branch", *ROUTING))
    #: End an open session (the first reason wins).
    END_SESSION = driver_statement(lambda d: _upd(
        ("ended_at", bp("at")), ("end_reason", bp("reason"))).where(
        _BY_ID, s.c.ended_at.is_(None)), "at", "reason", "id")
    #: Clear the end fields of an ended session.
    REOPEN_SESSION = driver_statement(lambda d: _upd(
        ("ended_at", sa.null()), ("end_reason", sa.null())).where(
        _BY_ID, sa.or_(s.c.ended_at.is_not(None), s.c.end_reason.is_not(None))), "id")
    #: Clear an automatic end reason before a publication continues the session.
    CLEAR_END = driver_statement(lambda d: _upd(
        ("ended_at", sa.null()), ("end_reason", sa.null())).where(_BY_ID), "id")
    #: The compression lease on a session.
    COMPRESSION_LEASE = driver_statement(lambda d: sa.select(
        compression_locks.c.holder, compression_locks.c.expires_at).where(
        compression_locks.c.session_id == bp("id")), "id")
    #: The parent columns a compression publication reads.
    PUBLISH_PARENT = driver_statement(lambda d: sa.select(
        *[s.c[c] for c in PUBLISH_PARENT_COLS]).where(_BY_ID), "id")
    #: Insert a compression continuation.
    INSERT_CONTINUATION = driver_statement(lambda d: _insert_session(PUBLISH_CHILD_COLS),
                                           *PUBLISH_CHILD_COLS)
    #: Set a session's counters outright.
    SET_COUNTS = driver_statement(lambda d: _upd(
        ("message_count", bp("messages")), ("tool_call_count", bp("tools"))).where(_BY_ID),
        "messages", "tools", "id")
    #: End the parent with ``compression`` (only if still open).
    END_COMPRESSION = driver_statement(lambda d: _upd(
        ("ended_at", bp("at")), ("end_reason", const("compression"))).where(
        _BY_ID, s.c.ended_at.is_(None)), "at", "id")

    #: Stamp ``_reset_from`` = p on the marker-less legacy reset children of p
    #: (positional: p, p).
    STAMP_LEGACY_RESET_CHILDREN = driver_statement(_stamp_legacy_reset_children, "p", "p")

    # -- transcript (docs/sessions.md §6)
    #: Append one message row (all of INSERT_COLS, positional).
    INSERT_MESSAGE = _insert_message(INSERT_COLS)
    #: The same, returning the new row id.
    INSERT_MESSAGE_RETURNING = _insert_message(INSERT_COLS, returning=True)
    #: The batch append's form (SQLite): the id and ``display_order`` given, as the insert
    #: trigger would have set them (``display.BatchOrder``), so its ``WHEN`` skips the row.
    INSERT_MESSAGE_ORDERED = _insert_message(("id", *INSERT_COLS, "display_order"))
    #: Admission + counters in one statement; the row tells missing / compression-closed,
    #: and (SQLite) the file's application_id, re-read inside the write transaction so a
    #: file replaced under the handle is caught without a separate PRAGMA.
    ADMIT_AND_COUNT = driver_statement(_admit_and_count, "messages", "tools", "id")
    #: The tool_calls of the rows a watermark clone copies (positional: parent, watermark,
    #: ceiling, ceiling — the ceiling may be NULL).
    CLONE_TOOL_CALLS = driver_statement(lambda d: sa.select(m.c.tool_calls).where(
        _clone_range(m)), "parent", "watermark", "ceiling", "ceiling")
    #: Active rows of one session, counted only up to ``cap`` (positional: id, cap).
    BOUNDED_ACTIVE_COUNT = driver_statement(lambda d: sa.select(sa.func.count()).select_from(
        sa.select(const(1)).select_from(m).where(m.c.session_id == bp("id"), _ACTIVE)
        .limit(bp("cap")).subquery("capped")), "id", "cap")
    #: Messages of one session, active only.
    COUNT_ACTIVE = _count_messages(active_only=True)
    #: Messages of one session, every row.
    COUNT_ALL = _count_messages(active_only=False)

    # -- titles (docs/sessions.md §4.5)
    #: Title, its source and the hidden flag of one session.
    TITLE_STATE = driver_statement(lambda d: sa.select(
        s.c.title, s.c.title_source, s.c.hidden).where(_BY_ID), "id")
    #: Another session holding a title.
    TITLE_HOLDER = driver_statement(lambda d: sa.select(s.c.id).where(
        s.c.title == bp("title"), s.c.id != bp("id")), "title", "id")
    #: Drop a session's title.
    CLEAR_TITLE = driver_statement(lambda d: _upd(
        ("title", sa.null()), ("title_source", sa.null())).where(_BY_ID), "id")
    #: Set a title and its source.
    SET_TITLE = driver_statement(lambda d: _upd(
        ("title", bp("title")), ("title_source", bp("source"))).where(_BY_ID),
        "title", "source", "id")
    #: Set a title only if the row still holds the title/source read before.
    SET_TITLE_IF_UNCHANGED = driver_statement(lambda d: _upd(
        ("title", bp("title")), ("title_source", bp("source"))).where(
        _BY_ID, s.c.title.is_not_distinct_from(bp("old_title")),
        s.c.title_source.is_not_distinct_from(bp("old_source"))),
        "title", "source", "id", "old_title", "old_source")
    #: A base title and its numbered variants (escaped LIKE ``base #%``).
    TITLE_VARIANTS = driver_statement(lambda d: sa.select(s.c.title).where(sa.or_(
        s.c.title == bp("title"), s.c.title.like(bp("pattern"), escape="\\"))),
        "title", "pattern")
    #: The session holding exactly a title.
    SESSION_BY_TITLE = driver_statement(lambda d: sa.select(s.c.id).where(
        s.c.title == bp("title")), "title")
    #: Numbered variants of a title, newest first.
    NUMBERED_TITLES = driver_statement(lambda d: sa.select(s.c.id, s.c.title).where(
        s.c.title.like(bp("pattern"), escape="\\")).order_by(s.c.started_at.desc()),
        "pattern")

    # -- reads (docs/sessions.md §5.1)
    #: One session with its resolved system prompt.
    GET_SESSION = driver_statement(_get_session, "id")
    #: At least n sessions? (reads at most n rows).
    SESSION_COUNT_CAPPED = driver_statement(lambda d: sa.select(sa.func.count()).select_from(
        sa.select(const(1)).select_from(s).limit(bp("n")).subquery("capped")), "n")

    #: The server's wall clock, epoch seconds: "now" for values other processes compare on
    #: PostgreSQL, whose hosts' clocks may differ (the guards' decisions,
    #: docs/sessions-coordination.md §3.1; the gateway's deadlines,
    #: docs/sessions-gateway.md §3.0). ``None`` on SQLite, where the caller's wall clock is
    #: the clock.
    SERVER_NOW: str | None = driver_statement(lambda d: sa.select(sa.cast(
        sa.extract("epoch", sa.func.clock_timestamp()), sa.Double())))  # type: ignore[assignment]

    def __init__(self, d: str) -> None:
        super().__init__(d)
        pg = d == "postgresql"
        if not pg:
            self.SERVER_NOW = None  # the instance attribute shadows the statement
        #: No LIMIT (SQLite needs a negative number, PostgreSQL takes NULL).
        self.NO_LIMIT = None if pg else -1

        #: The file header's application_id (SQLite) — NULL where there is no file.
        # not Core: a PRAGMA read (the file header's application_id)
        self.FILE_HEADER = ("SELECT CAST(NULL AS BIGINT)" if pg
                            else "SELECT application_id FROM pragma_application_id()")

    def insert_session(self, cols: tuple[str, ...]) -> str:
        """``INSERT INTO sessions`` binding ``cols`` (names from the core allow-list only)."""
        unknown = [c for c in cols if c not in INSERTABLE_SESSION_COLS]
        if unknown:
            raise ValueError(f"not a session column: {', '.join(unknown)}")
        return _insert_session_prepared(tuple(cols)).positional_sql(self.dialect, tuple(cols))

    def select_messages(self, *, include_inactive: bool, after_id: bool, latest: bool,
                        paged: bool) -> str:
        """One session's transcript page (positional: session id[, after id][, limit,
        offset])."""
        return _messages_page(self.dialect, include_inactive, after_id, latest, paged)

    def clone_messages(self, cols: list[str]) -> DriverPrepared:
        """Copy a parent's active rows above a watermark (and up to an optional ceiling) into a
        child, column-exact; ``cols`` come from the live table's catalogue. Run it with
        ``.run(conn, {"child", "parent", "watermark", "ceiling"})``."""
        return _clone_messages(tuple(cols))
