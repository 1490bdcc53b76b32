"""The lineage statements (docs/sessions.md §3.3): recursive CTEs, one statement per walk.

:class:`LineageStatements` builds them for one dialect; ``Fragments`` (``sql/__init__.py``)
holds one instance per dialect. Module-level names (``CHAIN_FROM``, ``TIP_OF`` …) are the
SQLite statements.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy import text
from sqlalchemy.sql.elements import TextClause

from hermes_data.sessions.schema import sessions
from hermes_data.sessions.sql.constructs import bp
from hermes_data.sessions.sql.core import SESSION_EXISTS

from hermes_data.sessions.sql.predicates import (CANONICAL_BOT_CHAT_TITLE, MAX_LINEAGE_DEPTH,
                                                 RESUME_MAX_HOPS, edge, fork, last_active,
                                                 reset_child)
from hermes_data.statements import DriverPrepared

# ---------------------------------------------------------------------------------------
# Lineage CTEs (docs/sessions.md §3.3), one statement each, O(1) work per hop.
#
# Cycle safety without carrying the visited path (a growing string scanned at every hop
# cost more than half of a 500-segment walk):
#
# * Forward walks (chain, tip, resume) step from a row to one of its *children*. Every row
#   has a single parent_session_id, so the predecessor of any visited row other than the
#   start is its parent: the first id a forward walk can repeat is therefore the start
#   itself. The walk carries its origin and stops when it comes back to it.
# * Upward walks (root, resume lineage, ancestors) step to the parent and may enter a cycle
#   that does not contain the start (a "rho"). They carry a mark — the row at the last
#   power-of-two depth (Brent) — and stop at a row equal to its mark, which happens within
#   about four times the length of tail plus cycle. Readers keep each id at its first depth
#   (GROUP BY id, MIN(depth)): after the first repeat a deterministic walk only repeats, so
#   that list is exactly the walk truncated at its first repeated id.
#
# The continuation of a parent with a single candidate child is that child; the spec's
# ordering (continued, then live, then LAST_ACTIVE, started_at, id) — whose LAST_ACTIVE is
# a correlated subquery over messages — is evaluated only for parents with several.
# ---------------------------------------------------------------------------------------


def _candidates(cur: str, p: str = "p", c: str = "c", d: str = "sqlite") -> str:
    # Compression children of `cur` (idx_sessions_parent drives the lookup).
    return (f"FROM sessions {p} JOIN sessions {c} ON {c}.parent_session_id = {p}.id "
            f"WHERE {p}.id = {cur} AND {edge(p, c, d)}")


def _next_child(cur: str, d: str = "sqlite") -> str:
    # The continuation of `cur`: the only candidate, else prefer a child that itself
    # continued, then a live one, then the freshest (docs/sessions.md §3.3).
    ordered = (
        f"(SELECT c2.id {_candidates(cur, 'p2', 'c2', d)} "
        "ORDER BY CASE WHEN c2.end_reason = 'compression' THEN 0 "
        "WHEN c2.ended_at IS NULL THEN 1 ELSE 2 END, "
        f"{last_active('c2')} DESC, c2.started_at DESC, c2.id DESC LIMIT 1)"
    )
    return (f"(SELECT CASE COUNT(*) WHEN 0 THEN NULL WHEN 1 THEN MAX(c.id) ELSE {ordered} END "
            f"{_candidates(cur, d=d)})")


def _seed(seed: str, d: str) -> str:
    # PostgreSQL types a recursive CTE from its seed: a bare parameter must be cast.
    return f"CAST({seed} AS TEXT)" if d == "postgresql" else seed


def _chain_cte(name: str, seed: str, d: str = "sqlite") -> str:
    # chain(id, depth, origin): stops when the walk returns to its origin (see above).
    seed = _seed(seed, d)
    return (
        f"{name}(id, depth, origin) AS ("
        f"SELECT {seed}, 0, {seed} "
        "UNION ALL "
        f"SELECT {_next_child(name + '.id', d)}, {name}.depth + 1, {name}.origin "
        f"FROM {name} WHERE {name}.id IS NOT NULL "
        f"AND ({name}.depth = 0 OR {name}.id <> {name}.origin) "
        f"AND {name}.depth < {MAX_LINEAGE_DEPTH})"
    )


def _chain_rows(name: str) -> str:
    # The rows of a forward walk up to (not including) its return to the origin.
    return f"{name}.id IS NOT NULL AND ({name}.depth = 0 OR {name}.id <> {name}.origin)"


def _up_cte(name: str, seed: str, d: str = "sqlite") -> str:
    # up(id, depth, mark, mark_depth): walk parents while the compression edge holds; stop at
    # a row that equals the row of the last power-of-two depth (see above).
    seed = _seed(seed, d)
    nd = f"{name}.depth + 1"
    return (
        f"{name}(id, depth, mark, mark_depth) AS ("
        f"SELECT {seed}, 0, {seed}, 0 "
        "UNION ALL "
        f"SELECT p.id, {nd}, "
        f"CASE WHEN ({nd} & {name}.depth) = 0 THEN p.id ELSE {name}.mark END, "
        f"CASE WHEN ({nd} & {name}.depth) = 0 THEN {nd} ELSE {name}.mark_depth END "
        f"FROM {name} JOIN sessions c ON c.id = {name}.id "
        "JOIN sessions p ON p.id = c.parent_session_id "
        f"WHERE {edge('p', 'c', d)} "
        f"AND ({name}.depth = {name}.mark_depth OR {name}.id <> {name}.mark) "
        f"AND {name}.depth < {MAX_LINEAGE_DEPTH})"
    )


def _lineage_set_cte(step: str, d: str) -> str:
    # lineage(id): :id, its ancestors and its descendants over `step` (a predicate over parent
    # p and child c); UNION makes the walk cycle-safe.
    seed = _seed(':id', d)
    return ("WITH RECURSIVE "
            f"anc(id) AS (SELECT {seed} UNION SELECT p.id FROM anc JOIN sessions c ON c.id = anc.id "
            f"JOIN sessions p ON p.id = c.parent_session_id WHERE {step}), "
            f"des(id) AS (SELECT {seed} UNION SELECT c.id FROM des JOIN sessions p ON p.id = des.id "
            f"JOIN sessions c ON c.parent_session_id = p.id WHERE {step}), "
            "lineage(id) AS (SELECT id FROM anc UNION SELECT id FROM des) ")


def _flag_updates(cte: str, flags: tuple[str, ...], distinct: str) -> dict[str, TextClause]:
    # One lineage-wide UPDATE per flag column (:id, :value), touching only rows that differ.
    # not Core: the tail of a WITH RECURSIVE statement (the lineage CTE text is prepended)
    return {flag: text(cte + f"UPDATE sessions SET {flag} = :value "
                       f"WHERE id IN (SELECT id FROM lineage) AND {flag} {distinct} :value")
            for flag in flags}


# not Core: the tail of a WITH RECURSIVE statement (the lineage CTE text is prepended)
_UNHIDE = "UPDATE sessions SET hidden = 0 WHERE id IN (SELECT id FROM lineage) AND hidden <> 0"
# not Core: likewise the tail of a WITH RECURSIVE lineage statement
_HAS_HIDDEN_BOT_CHAT = ("SELECT EXISTS (SELECT 1 FROM sessions WHERE id IN "
                        "(SELECT id FROM lineage) AND hidden = 1 "
                        f"AND title = '{CANONICAL_BOT_CHAT_TITLE}')")


#: The fields of upstream's row-by-row lineage walk.
_WALK_COLS = ("id", "parent_session_id", "end_reason", "source", "model_config")
#: One row's walk fields (:id).
WALK_ROW = DriverPrepared("lineage_walk_row", lambda: sa.select(
    *(sessions.c[c] for c in _WALK_COLS)).where(sessions.c.id == bp("id")))
#: The children of :id oldest first (ties: by id).
WALK_CHILDREN = DriverPrepared("lineage_walk_children", lambda: sa.select(
    *(sessions.c[c] for c in _WALK_COLS)).where(sessions.c.parent_session_id == bp("id"))
    .order_by(sessions.c.started_at, sessions.c.id))


class LineageStatements:
    """The lineage statements for dialect ``d`` (``sqlite`` / ``postgresql``)."""

    def __init__(self, d: str) -> None:
        distinct = "IS DISTINCT FROM" if d == "postgresql" else "IS NOT"
        #: Each id of an upward walk once, at its first depth (the walk truncated at its first repeat).
        # not Core: reads the recursive CTE ``up`` (spliced into the WITH RECURSIVE walks)
        _UP_FIRST = "SELECT id, MIN(depth) AS depth FROM up GROUP BY id"

        #: Chain root→tip forward from :start (ordered by depth; the first element is :start).
        self.CHAIN_FROM = text(
            f"WITH RECURSIVE {_chain_cte('chain', ':start', d)} "
            f"SELECT id FROM chain WHERE {_chain_rows('chain')} ORDER BY depth"
        )
        #: Compression tip of :start (the last element of its chain).
        self.TIP_OF = text(
            f"WITH RECURSIVE {_chain_cte('chain', ':start', d)} "
            f"SELECT id FROM chain WHERE {_chain_rows('chain')} ORDER BY depth DESC LIMIT 1"
        )
        #: Compression root of :id (walk up while the edge holds).
        self.ROOT_OF = text(
            f"WITH RECURSIVE {_up_cte('up', ':id', d)} "
            f"SELECT id FROM ({_UP_FIRST}) AS uf ORDER BY depth DESC LIMIT 1"
        )
        #: Resume lineage of :id: the compression path root … :id, root first.
        self.RESUME_LINEAGE_OF = text(
            f"WITH RECURSIVE {_up_cte('up', ':id', d)} "
            f"SELECT id FROM ({_UP_FIRST}) AS uf ORDER BY depth DESC"
        )
        #: Bounded count of the resume lineage's active or compacted rows (:id, :cap).
        self.RESUME_LINEAGE_COUNT = text(
            f"WITH RECURSIVE {_up_cte('up', ':id', d)} "
            "SELECT COUNT(*) FROM (SELECT 1 FROM messages m WHERE m.session_id IN "
            "(SELECT id FROM up) AND (m.active = 1 OR m.compacted = 1) LIMIT :cap) AS capped"
        )
        #: Lineage ids of :id: the chain from its compression root, root first (one statement).
        self.LINEAGE_OF = text(
            f"WITH RECURSIVE {_up_cte('up', ':id', d)}, "
            f"root(id) AS (SELECT id FROM ({_UP_FIRST}) AS uf ORDER BY depth DESC LIMIT 1), "
            f"{_chain_cte('chain', '(SELECT id FROM root)', d)} "
            f"SELECT id FROM chain WHERE {_chain_rows('chain')} ORDER BY depth"
        )
        #: Resume target of :start: tip, then up to 32 hops to the newest non-fork, non-reset
        #: child; the deepest visited node with a message wins, else the tip.
        self.RESUME_TARGET_OF = text(
            f"WITH RECURSIVE {_chain_cte('chain', ':start', d)}, "
            f"tip(id) AS (SELECT id FROM chain WHERE {_chain_rows('chain')} "
            "ORDER BY depth DESC LIMIT 1), "
            "walk(id, depth) AS (SELECT id, 0 FROM tip UNION ALL "
            "SELECT (SELECT c.id FROM sessions p JOIN sessions c ON c.parent_session_id = p.id "
            f"WHERE p.id = walk.id AND NOT {fork('c', 'p', d)} AND NOT {reset_child('c', d=d)} "
            "ORDER BY c.started_at DESC, c.id DESC LIMIT 1), walk.depth + 1 "
            f"FROM walk WHERE walk.id IS NOT NULL AND walk.depth < {RESUME_MAX_HOPS}) "
            "SELECT COALESCE((SELECT w.id FROM walk w WHERE w.id IS NOT NULL AND EXISTS "
            "(SELECT 1 FROM messages m WHERE m.session_id = w.id) ORDER BY w.depth DESC LIMIT 1), "
            "(SELECT id FROM tip))"
        )

        #: Lineage set of :id (ancestors and descendants over EDGE; UNION makes it cycle-safe).
        self.LINEAGE_SET_CTE = _lineage_set_cte(edge('p', 'c', d), d)
        #: The flag columns a lineage-wide update may touch (identifier allow-list).
        self.LINEAGE_FLAGS = ("archived", "pinned", "hidden", "last_read_at")
        #: Lineage-wide flag updates, one per allowed column (:id, :value).
        self.LINEAGE_FLAG_UPDATE = _flag_updates(self.LINEAGE_SET_CTE, self.LINEAGE_FLAGS,
                                                 distinct)
        #: Pinning also un-hides the lineage (seed 003 #106171) — callers skip it for Bot Chat lineages.
        self.LINEAGE_UNHIDE = text(self.LINEAGE_SET_CTE + _UNHIDE)
        #: Does the lineage hold a hidden row titled exactly 'Bot Chat'?
        self.LINEAGE_HAS_HIDDEN_BOT_CHAT = text(self.LINEAGE_SET_CTE + _HAS_HIDDEN_BOT_CHAT)
        #: The same three over upstream's wider set: every child of a compression-ended parent,
        #: forks included (the flag setters' ``include_forked_children``, docs/sessions.md §4.6).
        forks_cte = _lineage_set_cte("p.end_reason = 'compression'", d)
        self.LINEAGE_FLAG_UPDATE_WITH_FORKS = _flag_updates(forks_cte, self.LINEAGE_FLAGS,
                                                            distinct)
        self.LINEAGE_UNHIDE_WITH_FORKS = text(forks_cte + _UNHIDE)
        self.LINEAGE_HAS_HIDDEN_BOT_CHAT_WITH_FORKS = text(forks_cte + _HAS_HIDDEN_BOT_CHAT)
        #: Does session :id exist? (A flag write that changed nothing still answers True for it.)
        self.SESSION_EXISTS = SESSION_EXISTS
        #: Upstream's row-by-row lineage walk (``get_compression_lineage``,
        #: docs/sessions.md §4.4): one row's fields, and its children oldest first (ties: by id).
        self.WALK_ROW = WALK_ROW
        self.WALK_CHILDREN = WALK_CHILDREN
        #: Compression ancestors of :id (excluding :id) — used by title transfer.
        self.ANCESTORS_OF = text(
            f"WITH RECURSIVE {_up_cte('up', ':id', d)} "
            f"SELECT id FROM ({_UP_FIRST}) AS uf WHERE depth > 0 ORDER BY depth"
        )


_SQLITE = LineageStatements("sqlite")
CHAIN_FROM = _SQLITE.CHAIN_FROM
TIP_OF = _SQLITE.TIP_OF
ROOT_OF = _SQLITE.ROOT_OF
RESUME_LINEAGE_OF = _SQLITE.RESUME_LINEAGE_OF
RESUME_LINEAGE_COUNT = _SQLITE.RESUME_LINEAGE_COUNT
LINEAGE_OF = _SQLITE.LINEAGE_OF
RESUME_TARGET_OF = _SQLITE.RESUME_TARGET_OF
ANCESTORS_OF = _SQLITE.ANCESTORS_OF
