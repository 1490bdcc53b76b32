"""Statements of transcript editing and coordination (docs/sessions-coordination.md §3):
guard rows (compression locks, turn leases), the conversation key, the server clock,
cooldowns and streaks, transcript rewrites and rewind.

Core constructs over :mod:`hermes_data.sessions.schema` (issue 32), compiled once per dialect
by :class:`hermes_data.sessions.sql.dialect.driver_statement` (``?`` on SQLite, bare ``%s``
on psycopg); callers keep passing positional tuples in each statement's declared order, and
every value is bound. The statement's own constants (``active = 1``) are inline literals
(:func:`~hermes_data.sessions.sql.constructs.const`), ``with_for_update()`` renders nothing
on SQLite. Guard-row statements are built from the fixed table/key pairs of
:data:`GUARD_TABLES`, one :class:`GuardStatements` subclass per guard kind.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import sqlalchemy as sa

from hermes_data.sessions.schema import (compression_locks, gateway_heartbeats, metadata,
                                         session_turn_leases)
from hermes_data.sessions.schema import messages as m
from hermes_data.sessions.schema import sessions as S
from hermes_data.sessions.sql.constructs import bp, const, dialect_insert
from hermes_data.sessions.sql.core import MESSAGE_COLS
from hermes_data.sessions.sql.dialect import Statements, driver_statement
from hermes_data.sessions.sql.predicates import edge, edge_of, fork_of, last_active_of
from hermes_data.statements import DriverPrepared

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

_ACTIVE = m.c.active == const(1)


def _one(*conds: Any) -> sa.Select:
    """``SELECT 1 … WHERE conds`` (an existence probe's body)."""
    return sa.select(const(1)).where(*conds)


# -- guard rows (docs/sessions-coordination.md §3.2) -----------------------------------------


class GuardStatements(Statements):
    """Read / claim / refresh / release statements of one guard table in one dialect: one
    subclass per guard kind (:data:`GUARD_STATEMENTS`), its instance per dialect from
    ``for_dialect``.

    ``READ`` (key): the row of one key, locked on PostgreSQL (W4b); ``PEEK`` (key): the same,
    unlocked (read-pool getters); ``DELETE_STALE`` (key, holder, expires_at): compare-and-
    delete of a stale row on the values read (docs/sessions-coordination.md §3.2); ``EXTEND``
    (new, new, key, holder): re-entrant acquire, never lowers ``expires_at``; ``INSERT`` (key,
    holder, acquired_at, expires_at): a new guard row unless one exists (W4d); ``REFRESH``
    (expires_at, key, holder): holder-matched refresh without an expiry predicate (an owner
    revives its own row); ``RELEASE`` (key, holder): holder-matched delete.
    """

    # The statements each kind's subclass declares (``driver_statement`` attributes: the
    # compiled string once read through an instance).
    READ: str
    PEEK: str
    DELETE_STALE: str
    EXTEND: str
    INSERT: str
    REFRESH: str
    RELEASE: str


def _guard_statements(kind: str) -> type[GuardStatements]:
    """The :class:`GuardStatements` subclass of one guard kind (``lock`` / ``lease``)."""
    t = metadata.tables[GUARD_TABLES[kind][0]]
    key = t.c[GUARD_TABLES[kind][1]]
    mine = sa.and_(key == bp("key"), t.c.holder == bp("holder"))

    def row(d: str) -> sa.Select:
        return sa.select(t.c.holder, t.c.expires_at).where(key == bp("key"))

    def insert(d: str) -> Any:
        return dialect_insert(d)(t).values(
            {key: bp("key"), t.c.holder: bp("holder"), t.c.acquired_at: bp("now"),
             t.c.expires_at: bp("expires")}).on_conflict_do_nothing(index_elements=[key])

    ns = {
        "__module__": __name__,
        "__doc__": f"The guard-row statements of ``{t.name}`` (:class:`GuardStatements`).",
        "READ": driver_statement(lambda d: row(d).with_for_update(), "key"),
        "PEEK": driver_statement(row, "key"),
        "DELETE_STALE": driver_statement(lambda d: sa.delete(t).where(
            mine, t.c.expires_at == bp("expires")), "key", "holder", "expires"),
        "EXTEND": driver_statement(lambda d: sa.update(t).values(expires_at=sa.case(
            (t.c.expires_at > bp("expires"), t.c.expires_at), else_=bp("expires"))).where(
            mine), "expires", "expires", "key", "holder"),
        "INSERT": driver_statement(insert, "key", "holder", "now", "expires"),
        "REFRESH": driver_statement(lambda d: sa.update(t).values(
            expires_at=bp("expires")).where(mine), "expires", "key", "holder"),
        "RELEASE": driver_statement(lambda d: sa.delete(t).where(mine), "key", "holder"),
    }
    return type(f"{kind.title()}GuardStatements", (GuardStatements,), ns)


#: The guard-row statement classes by kind (their instances: ``.for_dialect(d)``).
GUARD_STATEMENTS = {kind: _guard_statements(kind) for kind in GUARD_TABLES}


# -- sessions-table reads and aliases shared by the statements below ----------------------

_s = S.alias("s")
_p = S.alias("p")
_c = S.alias("c")
_m = m.alias("m")
_NO_MESSAGES = ~_one(_m.c.session_id == _s.c.id).select_from(_m).exists()


def _lock_session(d: str) -> sa.Select:
    return sa.select(S.c.id).where(S.c.id == bp("id")).with_for_update()


def _session_state(d: str) -> sa.Select:
    return sa.select(S.c.ended_at, S.c.end_reason, S.c.model_config, S.c.rewind_count).where(
        S.c.id == bp("id")).with_for_update()


def _active_of(*conds: Any) -> Any:
    """``session_id = :sid AND active = 1`` and ``conds``."""
    return sa.and_(m.c.session_id == bp("sid"), _ACTIVE, *conds)


def _restore_blocker(d: str) -> sa.Select:
    return sa.select(m.c.id).where(m.c.session_id == bp("sid"), sa.or_(
        sa.and_(m.c.id >= bp("since"), m.c.compacted == const(1)),
        sa.and_(m.c.active == const(0), m.c.compacted == const(0), m.c.id > bp("head"),
                m.c.id < bp("since")))).limit(const(1))


def _record_cooldown(d: str) -> sa.Update:
    until = S.c[COOLDOWN_COLUMNS["until"]]
    return sa.update(S).values({
        until: sa.case((sa.and_(until.is_not(None), until > bp("until")), until),
                       else_=bp("until")),
        S.c[COOLDOWN_COLUMNS["error"]]: bp("error")}).where(S.c.id == bp("id"))


_ENDED_COMPRESSION = (S.c.end_reason == const("compression"), S.c.ended_at.is_not(None))


def _display_page(selection: bool) -> driver_statement:
    def build(d: str) -> sa.Select:
        conds = [m.c.session_id == bp("sid"), m.c.id > bp("after")]
        if selection:
            conds.append(sa.or_(_ACTIVE, m.c.compacted == const(1)))
        return sa.select(*(m.c[c] for c in MESSAGE_COLS)).where(*conds).order_by(
            m.c.id).limit(bp("limit"))
    return driver_statement(build, "sid", "after", "limit")


def _empty_any(count: bool) -> driver_statement:
    def build(d: str) -> sa.Select:
        where = (_s.c.message_count == const(0), _s.c.ended_at.is_not(None),
                 _s.c.archived == const(0), _NO_MESSAGES)
        if count:
            return sa.select(sa.func.count()).select_from(_s).where(*where)
        return sa.select(_s.c.id).where(*where).order_by(_s.c.id)
    return driver_statement(build)


def _ghost_ids(d: str) -> sa.Select:
    return sa.select(_s.c.id).where(
        _s.c.source == const("tui"), _s.c.title.is_(None), _s.c.ended_at.is_not(None),
        _s.c.started_at < bp("cutoff"), _s.c.pinned == const(0), _NO_MESSAGES,
        ~_one(_c.c.parent_session_id == _s.c.id).select_from(_c).exists(),
    ).order_by(_s.c.id)


def _delete_if_empty(d: str) -> sa.Delete:
    lk, ls = compression_locks.alias("l"), session_turn_leases.alias("t")
    return sa.delete(S).where(
        S.c.id == bp("id"), S.c.title.is_(None), S.c.pinned == const(0),
        ~_one(_m.c.session_id == S.c.id).select_from(_m).exists(),
        ~_one(_c.c.parent_session_id == S.c.id).select_from(_c).exists(),
        ~_one(lk.c.session_id == S.c.id, lk.c.expires_at > bp("now")).select_from(lk).exists(),
        ~_one(ls.c.conversation_id == bp("key"), ls.c.expires_at > bp("now")).select_from(
            ls).exists())


def _continuations() -> sa.Select:
    """Continuation children ``c`` of the compression parent ``p`` (id)."""
    return sa.select(_c.c.id).select_from(_p.join(_c, _c.c.parent_session_id == _p.c.id)).where(
        _p.c.id == bp("id"), _p.c.end_reason == const("compression"), ~fork_of(_c, _p))


def _orphan_continuation() -> tuple[Any, ...]:
    """An unused continuation of ``s`` idle since before the cutoff (cutoff, cutoff)."""
    return (_s.c.ended_at.is_(None), _s.c.end_reason.is_(None),
            sa.func.coalesce(_s.c.api_call_count, const(0)) == const(0),
            _s.c.started_at < bp("cutoff"), sa.func.coalesce(_s.c.pinned, const(0)) == const(0),
            _one(_m.c.session_id == _s.c.id).select_from(_m).exists(),
            _one(edge_of(_p, _s)).select_from(_p).exists(),
            last_active_of(_s) < bp("cutoff"))


def _stale(*, recheck: bool, unpinned: bool) -> driver_statement:
    """STALE(_s) of the archive sweep: candidates by start (cutoff) or one re-checked (id,
    cutoff); ``unpinned`` adds ``s.pinned = 0``."""
    def build(d: str) -> sa.Select:
        conds = [_s.c.archived == const(0),
                 sa.func.coalesce(_s.c.end_reason, const("")) != const("compression"),
                 last_active_of(_s) < bp("cutoff")]
        if unpinned:
            conds.append(_s.c.pinned == const(0))
        if recheck:
            return _one(_s.c.id == bp("id"), *conds).select_from(_s)
        return sa.select(_s.c.id).where(*conds).order_by(_s.c.started_at)
    return driver_statement(build, *(("id",) if recheck else ()), "cutoff")


def _empty() -> tuple[Any, ...]:
    """EMPTY(_s): an ended, unpinned, message-less row off every lineage edge and unguarded
    (now, now)."""
    lk, ls = compression_locks.alias("l"), session_turn_leases.alias("t")
    return (sa.func.coalesce(_s.c.message_count, const(0)) == const(0),
            _s.c.ended_at.is_not(None), _s.c.archived == const(0), _s.c.pinned == const(0),
            _NO_MESSAGES,
            ~_one(edge_of(_p, _s)).select_from(_p).exists(),
            ~_one(edge_of(_s, _c)).select_from(_c).exists(),
            ~_one(lk.c.session_id == _s.c.id, lk.c.expires_at > bp("now")).select_from(
                lk).exists(),
            ~_one(ls.c.conversation_id == _s.c.id, ls.c.expires_at > bp("now")).select_from(
                ls).exists())


def _orphan_order(n_sources: int, heartbeat: bool) -> tuple[str, ...]:
    return (*(f"src{i}" for i in range(n_sources)), "cutoff", "cutoff",
            *(("hb_cutoff", "hb_grace") if heartbeat else ()))


@functools.lru_cache(maxsize=256)
def _orphans(n_sources: int, pinned: bool, heartbeat: bool, close: bool) -> DriverPrepared:
    """ORPHAN(_s) of docs/sessions-coordination.md §3.18 over ``n_sources`` bound sources: its
    ids, or (``close``) the update closing one of them with ORPHAN re-applied."""
    def build() -> Any:
        conds: list[Any] = [_s.c.ended_at.is_(None),
                            _s.c.source.in_([bp(f"src{i}") for i in range(n_sources)])]
        if pinned:
            conds.append(_s.c.pinned == const(0))
        conds += [_s.c.started_at < bp("cutoff"), last_active_of(_s) < bp("cutoff")]
        if heartbeat:
            h = gateway_heartbeats.alias("h")
            conds.append(~_one(h.c.last_heartbeat >= bp("hb_cutoff"),
                               h.c.started_at <= _s.c.started_at + bp("hb_grace")).select_from(
                h).exists())
        if not close:
            return sa.select(_s.c.id).where(*conds).order_by(_s.c.id)
        return sa.update(S).values(ended_at=bp("now"), end_reason=const("startup_orphan_reap")
                                   ).where(S.c.id == bp("id"),
                                           S.c.id.in_(sa.select(_s.c.id).where(*conds)))
    return DriverPrepared("CoordinationStatements.orphan_" + ("close" if close else "ids"),
                          build)


def _by_column(build: Callable[[Any], Callable[[str], Any]], *order: str) -> Callable[..., Any]:
    """A per-dialect compiler of one statement per :data:`COOLDOWN_COLUMNS` entry."""
    @functools.lru_cache(maxsize=None)
    def prepared(which: str) -> DriverPrepared:
        column = S.c[COOLDOWN_COLUMNS[which]]
        return DriverPrepared.per_dialect(f"CoordinationStatements.column.{which}",
                                          build(column))
    return lambda dialect, which: prepared(which).positional_sql(dialect, order)


_get_column = _by_column(lambda col: lambda d: sa.select(col).where(S.c.id == bp("id")), "id")
_set_column = _by_column(lambda col: lambda d: sa.update(S).values({col: bp("value")}).where(
    S.c.id == bp("id")), "value", "id")


class _ColumnStatements(dict):
    """:data:`COOLDOWN_COLUMNS` name → that column's compiled statement, each compiled on
    first use (an unknown name raises ``KeyError``)."""

    def __init__(self, dialect: str, compile_one: Callable[[str, str], str]) -> None:
        super().__init__()
        self.dialect = dialect
        self.compile_one = compile_one

    def __missing__(self, which: str) -> str:
        sql = self[which] = self.compile_one(self.dialect, which)
        return sql


class CoordinationStatements(Statements):
    """The coordination statements of one dialect (Core constructs compiled on first use;
    callers pass positional tuples in each statement's declared order)."""

    #: Lock the session row first (W4a/W4e lock order on PostgreSQL).
    LOCK_SESSION = driver_statement(_lock_session, "id")
    #: Session state a rewrite checks (P(_s)), locked on PostgreSQL.
    SESSION_STATE = driver_statement(_session_state, "id")

    # -- transcript rewrites and rewind (docs/sessions-coordination.md §3.15, §3.16) ------------
    #: Active row ids of a session, ascending.
    ACTIVE_IDS = driver_statement(lambda d: sa.select(m.c.id).where(_active_of()).order_by(
        m.c.id), "sid")
    #: The tool calls a session's active rows carry (I2's counters; the count and the
    #: counters' update are the core ``COUNT_ACTIVE`` / ``SET_COUNTS``).
    ACTIVE_TOOL_CALLS = driver_statement(lambda d: sa.select(m.c.tool_calls).where(
        _active_of(m.c.tool_calls.is_not(None))), "sid")
    #: Archive every active row (rows stay, ``compacted`` stays 0).
    ARCHIVE_ACTIVE = driver_statement(lambda d: sa.update(m).values(active=const(0)).where(
        _active_of()), "sid")
    #: Delete every row of a session / its active rows.
    DELETE_ALL = driver_statement(lambda d: sa.delete(m).where(m.c.session_id == bp("sid")),
                                  "sid")
    DELETE_ACTIVE = driver_statement(lambda d: sa.delete(m).where(_active_of()), "sid")
    #: Active rows above a watermark (appends that landed during a summary).
    ACTIVE_ABOVE = driver_statement(lambda d: sa.select(m.c.id).where(_active_of(
        m.c.id > bp("watermark"))).order_by(m.c.id), "sid", "watermark")
    #: The ``OFFSET``-th newest active row at or below a watermark (the verbatim tail's
    #: first original).
    TAIL_START = driver_statement(lambda d: sa.select(m.c.id).where(_active_of(
        m.c.id <= bp("bound"))).order_by(m.c.id.desc()).limit(const(1)).offset(bp("offset")),
        "sid", "bound", "offset")
    #: Summarized away: active rows below a cut ⇒ ``active = 0, compacted = 1``.
    COMPACT_BELOW = driver_statement(lambda d: sa.update(m).values(
        active=const(0), compacted=const(1)).where(_active_of(m.c.id < bp("cut"))),
        "sid", "cut")
    #: Superseded duplicates: the remaining active rows ⇒ ``active = 0, compacted = 0``.
    SUPERSEDE_ACTIVE = driver_statement(lambda d: sa.update(m).values(
        active=const(0), compacted=const(0)).where(_active_of()), "sid")
    #: One message row of a session (``MESSAGE_COLS``).
    MESSAGE_OF = driver_statement(lambda d: sa.select(*(m.c[c] for c in MESSAGE_COLS)).where(
        m.c.id == bp("id"), m.c.session_id == bp("sid")), "id", "sid")
    #: Rewind: active rows from the target on ⇒ inactive.
    REWIND_FROM = driver_statement(lambda d: sa.update(m).values(active=const(0)).where(
        _active_of(m.c.id >= bp("target"))), "sid", "target")
    #: Count a rewind operation.
    BUMP_REWIND = driver_statement(lambda d: sa.update(S).values(
        rewind_count=sa.func.coalesce(S.c.rewind_count, const(0)) + const(1)).where(
        S.c.id == bp("id")), "id")
    #: Highest active id (None when none).
    MAX_ACTIVE = driver_statement(lambda d: sa.select(sa.func.max(m.c.id)).where(
        _active_of()), "sid")
    #: What forbids a restore from ``since``: a compacted row from it on, or a rewound
    #: row strictly between the head and it (a hole would remain).
    RESTORE_BLOCKER = driver_statement(_restore_blocker, "sid", "since", "head", "since")
    #: Restore the rewound rows from ``since`` on.
    RESTORE_FROM = driver_statement(lambda d: sa.update(m).values(active=const(1)).where(
        m.c.session_id == bp("sid"), m.c.id >= bp("since"), m.c.active == const(0)),
        "sid", "since")

    # -- cooldowns and streaks (docs/sessions-coordination.md §3.12, §3.13) ---------------------
    #: Merge-max cooldown record (new value bound twice), latest error.
    RECORD_COOLDOWN = driver_statement(_record_cooldown, "until", "until", "error", "id")
    #: The exact cooldown columns of a session.
    COOLDOWN_ROW = driver_statement(lambda d: sa.select(
        S.c[COOLDOWN_COLUMNS["until"]], S.c[COOLDOWN_COLUMNS["error"]]).where(
        S.c.id == bp("id")), "id")
    #: Write both cooldown columns exactly (restore, clear).
    SET_COOLDOWN = driver_statement(lambda d: sa.update(S).values({
        S.c[COOLDOWN_COLUMNS["until"]]: bp("until"),
        S.c[COOLDOWN_COLUMNS["error"]]: bp("error")}).where(S.c.id == bp("id")),
        "until", "error", "id")

    # -- lineage recovery (docs/sessions-coordination.md §3.11) ---------------------------------
    #: Whether a session ended with ``compression``.
    ENDED_COMPRESSION = driver_statement(lambda d: _one(
        S.c.id == bp("id"), *_ENDED_COMPRESSION).select_from(S), "id")
    #: Reopen a compression-ended parent (only while it still is one).
    REOPEN_COMPRESSION = driver_statement(lambda d: sa.update(S).values(
        ended_at=sa.null(), end_reason=sa.null()).where(S.c.id == bp("id"), *_ENDED_COMPRESSION), "id")

    # -- display reads (docs/sessions-coordination.md §3.17) ------------------------------------
    #: A keyset page of the active-or-compacted selection / of every row.
    DISPLAY_PAGE = _display_page(selection=True)
    DISPLAY_PAGE_ALL = _display_page(selection=False)

    # -- archive (docs/sessions-coordination.md §3.18) ------------------------------------------
    #: A session's archived flag and end reason.
    ARCHIVED_OF = driver_statement(lambda d: sa.select(S.c.archived, S.c.end_reason).where(
        S.c.id == bp("id")), "id")
    #: Clear the tip's end fields only while they still hold the reason read.
    CLEAR_TIP_END = driver_statement(lambda d: sa.update(S).values(
        ended_at=sa.null(), end_reason=sa.null()).where(S.c.id == bp("id"),
                                              S.c.end_reason == bp("reason")), "id", "reason")

    # -- empty and ghost sessions (docs/sessions-coordination.md §3.19) -------------------------
    #: Upstream's EMPTY (no binds): pinned rows, lineage segments and guarded rows too
    #: (the ``include_protected`` option, docs/sessions-coordination.md §3.19).
    COUNT_EMPTY_ANY = _empty_any(count=True)
    EMPTY_ANY_IDS = _empty_any(count=False)
    #: Ghost TUI rows (cutoff).
    GHOST_IDS = driver_statement(_ghost_ids, "cutoff")
    #: The one conditional delete of ``delete_session_if_empty`` (id, now, key, now).
    DELETE_IF_EMPTY = driver_statement(_delete_if_empty, "id", "now", "key", "now")
    # -- built on the kit predicates' Core twins (fork_of, edge_of, last_active_of) ---------
    #: Open continuation children of a compression parent (two are enough to refuse).
    OPEN_CONTINUATIONS = driver_statement(lambda d: _continuations().where(
        _c.c.ended_at.is_(None)).order_by(_c.c.id).limit(const(2)), "id")
    #: Any continuation child, ended or not.
    ANY_CONTINUATION = driver_statement(lambda d: _continuations().limit(const(1)), "id")
    #: Unused continuations a week old (cutoff bound twice).
    ORPHAN_CONTINUATIONS = driver_statement(lambda d: sa.select(_s.c.id).where(
        *_orphan_continuation()).order_by(_s.c.id), "cutoff", "cutoff")
    #: Close one of them, predicates re-applied (now, id, cutoff, cutoff).
    FINALIZE_ORPHAN = driver_statement(lambda d: sa.update(S).values(
        ended_at=bp("now"), end_reason=const("orphaned_compression")).where(
        S.c.id == bp("id"), S.c.id.in_(sa.select(_s.c.id).where(*_orphan_continuation()))),
        "now", "id", "cutoff", "cutoff")
    #: Stale tips and standalone rows (cutoff), oldest start first; unpinned variant.
    STALE_ARCHIVE = _stale(recheck=False, unpinned=False)
    STALE_ARCHIVE_UNPINNED = _stale(recheck=False, unpinned=True)
    #: Re-check one candidate (id, cutoff); unpinned variant.
    STALE_RECHECK = _stale(recheck=True, unpinned=False)
    STALE_RECHECK_UNPINNED = _stale(recheck=True, unpinned=True)
    #: EMPTY(_s) (now bound twice): count and ids.
    COUNT_EMPTY = driver_statement(lambda d: sa.select(sa.func.count()).select_from(_s).where(
        *_empty()), "now", "now")
    EMPTY_IDS = driver_statement(lambda d: sa.select(_s.c.id).where(*_empty()).order_by(_s.c.id),
                                 "now", "now")

    def __init__(self, d: str) -> None:
        super().__init__(d)
        r = self.render
        self.lock = GUARD_STATEMENTS["lock"].for_dialect(d)
        self.lease = GUARD_STATEMENTS["lease"].for_dialect(d)
        #: One streak / deadline column, read and written (names from COOLDOWN_COLUMNS).
        self.GET_COLUMN = _ColumnStatements(d, _get_column)
        self.SET_COLUMN = _ColumnStatements(d, _set_column)
        seed = "CAST(? AS TEXT)" if d == "postgresql" else "?"
        #: KEY(_s): the compression root of ``s`` over EDGE, depth-capped (docs/sessions-coordination.md §3.3); an unknown id
        #: is its own key.
        # not Core: a recursive CTE (the walk up the compression edges)
        self.KEY_OF = r(
            f"WITH RECURSIVE up(id, depth) AS (SELECT {seed}, 0 UNION ALL "
            "SELECT p.id, up.depth + 1 FROM up JOIN sessions c ON c.id = up.id "
            f"JOIN sessions p ON p.id = c.parent_session_id WHERE {edge('p', 'c', d)} "
            f"AND up.depth < {KEY_DEPTH_CAP}) "
            "SELECT id FROM up ORDER BY depth DESC LIMIT 1")

    def orphan_ids(self, n_sources: int, *, pinned: bool, heartbeat: bool) -> str:
        """Ids matching ORPHAN(_s) of docs/sessions-coordination.md §3.18 (binds: sources…,
        cutoff, cutoff[, hb_cutoff, hb_grace])."""
        return _orphans(n_sources, pinned, heartbeat, close=False).positional_sql(
            self.dialect, _orphan_order(n_sources, heartbeat))

    def orphan_close(self, n_sources: int, *, pinned: bool, heartbeat: bool) -> str:
        """Close one orphan, ORPHAN re-applied (binds: now, id, then ORPHAN's)."""
        return _orphans(n_sources, pinned, heartbeat, close=True).positional_sql(
            self.dialect, ("now", "id", *_orphan_order(n_sources, heartbeat)))

    def clone_by_ids(self, cols: list[str], n: int) -> str:
        """Copy ``n`` bound rows (id order) as fresh active rows of their session, column
        exact; ``cols`` come from the live table's catalogue."""
        return _clone_by_ids(tuple(cols)).expanded_sql(self.dialect, ("ids",), n)


@functools.lru_cache(maxsize=64)
def _clone_by_ids(cols: tuple[str, ...]) -> DriverPrepared:
    # The live table's columns (the catalogue may hold columns the metadata does not declare),
    # as a lightweight table clause named like the real one; each quoted, as read.
    quoted: list[Any] = [sa.column(sa.sql.quoted_name(c, True)) for c in cols]
    t = sa.table("messages", *(sa.column(c) for c in ("id", "session_id", "active",
                                                      "compacted")), *quoted)
    copied = [t.c[c] for c in cols]
    return DriverPrepared("CoordinationStatements.clone_by_ids", lambda: sa.insert(t).from_select(
        [t.c.session_id, t.c.active, t.c.compacted, *copied],
        sa.select(t.c.session_id, const(1), const(0), *copied).where(
            t.c.id.in_(sa.bindparam("ids", expanding=True))).order_by(t.c.id)))


#: The CoordinationStatements of a dialect (built once per process).
for_dialect = CoordinationStatements.for_dialect
