"""Reason sets, constants and the SQL predicates every lineage-aware statement shares.

Each predicate exists twice while the statements move to Core (issue 32): a Core builder
(``edge_of(p, c)``, ``listable_of(s)``, ``last_active_of(s)``) taking aliases of the
``sessions`` table and returning a construct that compiles per dialect, and the older string
builder (``edge(p, c)``, …) returning SQL text for alias names taken from the callers' own
statements (``d`` selects the dialect spelling). Neither binds a value nor takes user input.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from hermes_data.sessions.sql.constructs import const, json_marker, sibling_table
from hermes_data.sessions.sql.previews import preview_expr
from hermes_data.sessions.sql.previews import preview_sql as _ui_preview

RESET_END_REASONS = ("session_reset", "session_switch", "idle", "daily", "suspended",
                     "resume_pending_expired")
AUTOMATIC_END_REASONS = ("agent_close", "ws_orphan_reap", "superseded_by_resume",
                         "startup_orphan_reap", "tui_shutdown", "ws_disconnect",
                         "idle_timeout", "lru_evict",
                         # docs/sessions-coordination.md §3.4: written only by the automatic
                         # finalize sweep; a live publisher may clear it (#88197).
                         "orphaned_compression")
#: The title of Bot Mode's hidden forever-chat (upstream's ``CANONICAL_BOT_CHAT_TITLE``; public
#: as :data:`hermes_data.sessions.core.titles.CANONICAL_BOT_CHAT_TITLE`): a hidden row with it
#: keeps it (docs/sessions.md §4.5), and pinning its lineage does not un-hide it.
CANONICAL_BOT_CHAT_TITLE = "Bot Chat"
#: Plausible-epoch window for LAST_ACTIVE: 2000-01-01 … 2100-01-01 (docs/sessions.md §5.6; the window is our choice, docs/sessions.md §11 item 8).
EPOCH_MIN = 946684800
EPOCH_MAX = 4102444800
#: Defensive bound on lineage walks; cycle detection stops a walk long before it.
MAX_LINEAGE_DEPTH = 100_000
#: Forward hops of the resume-target walk beyond the compression tip (docs/sessions.md §4.4).
RESUME_MAX_HOPS = 32
#: Tool results are indexed only up to this many characters.
TOOL_INDEX_PREFIX = 8192


def sql_list(values: tuple[str, ...]) -> str:
    """``'a', 'b'``: ``values`` as quoted SQL string literals for an ``IN (...)`` list.
    For the package's own constants only (never user input)."""
    return ", ".join("'" + v.replace("'", "''") + "'" for v in values)


def J(expr: str, key: str, d: str = "sqlite") -> str:
    """Non-throwing JSON marker lookup: malformed ``model_config`` never raises.

    SQLite: ``json_extract`` of a validated document. PostgreSQL: ``hermes_json_get`` (created
    by s01_baseline), i.e. ``doc::jsonb ->> key`` returning NULL for invalid JSON."""
    if d == "postgresql":
        return f"hermes_json_get({expr}, '{key}')"
    return f"json_extract(CASE WHEN json_valid({expr}) THEN {expr} ELSE '{{}}' END, '$.{key}')"



# ---------------------------------------------------------------------------------------
# Lineage predicates (docs/sessions-coordination.md §3.2) — one builder shared by listing, reopen and resume
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
            f"AND {alias}.end_reason IN ({sql_list(RESET_END_REASONS)}) "
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



def preview_sql(s: str, d: str = "sqlite") -> str:
    """Preview of session ``s`` (docs/sessions-ui.md §3.3): RAW of the first eligible user row —
    carriers preview only the user text they carry, scaffolds keep head and tail."""
    return _ui_preview(s, d)


# ---------------------------------------------------------------------------------------
# The same predicates as Core constructs (issue 32). ``c``, ``p``, ``s``: aliases of
# ``sessions`` in the caller's statement; the inner aliases (bp, rp, la_m, la_v) are their
# own. Constants render inline (constructs.const), as the string builders wrote them. Every
# inner SELECT correlates to its alias explicitly: SQLAlchemy's automatic correlation reaches
# only the SELECT directly around it, and a predicate used inside a nested subquery would
# otherwise read a second, uncorrelated ``sessions``.
# ---------------------------------------------------------------------------------------

Alias = Any  # an alias of the sessions table (sqlalchemy.sql.Alias)


def _marker_names(c: Alias, key: str, target: Any) -> Any:
    # Never NULL: an absent marker is "no", so NOT fork_of(...) stays two-valued.
    return sa.func.coalesce(json_marker(c.c.model_config, key) == target, sa.false())


def fork_of(c: Alias, p: Alias) -> Any:
    """FORK(c, p): the child ``c`` is a tool run or carries a marker naming its parent ``p``."""
    return sa.or_(sa.func.coalesce(c.c.source, const("")) == const("tool"),
                  _marker_names(c, "_branched_from", p.c.id),
                  _marker_names(c, "_delegate_from", p.c.id),
                  _marker_names(c, "_reset_from", p.c.id))


def edge_of(p: Alias, c: Alias) -> Any:
    """EDGE(p, c): the canonical compression edge from parent ``p`` to child ``c``."""
    return sa.and_(c.c.parent_session_id == p.c.id, p.c.end_reason == const("compression"),
                   sa.not_(fork_of(c, p)))


def branch_child_of(c: Alias) -> Any:
    """BRANCH_CHILD(c): its marker names the parent, or the legacy ``branched`` parent rule."""
    bp = sibling_table(c, "sessions").alias("bp")
    legacy = sa.select(const(1)).where(
        bp.c.id == c.c.parent_session_id, bp.c.end_reason == const("branched"),
        c.c.started_at >= bp.c.ended_at).correlate(c).exists()
    return sa.or_(_marker_names(c, "_branched_from", c.c.parent_session_id), legacy)


def legacy_reset_child_of(c: Alias) -> Any:
    """The legacy (marker-less) reset-child rule: same non-empty key, reset-ended parent."""
    rp = sibling_table(c, "sessions").alias("rp")
    return sa.select(const(1)).where(
        rp.c.id == c.c.parent_session_id,
        rp.c.end_reason.in_([const(r) for r in RESET_END_REASONS]),
        sa.func.coalesce(c.c.session_key, const("")) != const(""),
        c.c.session_key == rp.c.session_key).correlate(c).exists()


def reset_child_of(c: Alias) -> Any:
    """RESET_CHILD(c): its marker names the parent, or the legacy same-key rule."""
    return sa.or_(_marker_names(c, "_reset_from", c.c.parent_session_id),
                  legacy_reset_child_of(c))


def listable_of(s: Alias) -> Any:
    """LISTABLE(s): a root, branch child or reset child, and never a delegate run."""
    return sa.and_(sa.or_(s.c.parent_session_id.is_(None), branch_child_of(s),
                          reset_child_of(s)),
                   json_marker(s.c.model_config, "_delegate_from").is_(None))


def _plausible(expr: Any) -> Any:
    return sa.and_(expr >= const(EPOCH_MIN), expr < const(EPOCH_MAX))


def last_active_of(s: Alias) -> Any:
    """LAST_ACTIVE(s): the freshest plausible heartbeat or message time, else the plausible
    start (the string builder's statement shape: the message maximum seeks the
    ``(session_id, timestamp)`` index)."""
    la_m = sibling_table(s, "messages").alias("la_m")
    heartbeat = sa.select(sa.case((_plausible(s.c.last_activity_at), s.c.last_activity_at))
                          .label("v")).correlate(s)
    newest = sa.select(sa.func.max(la_m.c.timestamp)).where(
        la_m.c.session_id == s.c.id, la_m.c.timestamp >= const(EPOCH_MIN),
        la_m.c.timestamp < const(EPOCH_MAX)).correlate(s)
    candidates = sa.union_all(heartbeat, newest).subquery("la_v")
    return sa.func.coalesce(sa.select(sa.func.max(candidates.c.v)).scalar_subquery(),
                            sa.case((_plausible(s.c.started_at), s.c.started_at)))


def preview_of(s: Alias, d: str) -> Any:
    """The listing preview of session ``s`` on dialect ``d`` (docs/sessions-ui.md §3.3): a
    correlated scalar subquery (:func:`hermes_data.sessions.sql.previews.preview_expr`)."""
    return preview_expr(s, d)
