"""Search statements over the CJK-bigram index (docs/sessions-storage.md §3.9.3;
:mod:`hermes_data.sessions.search.cjk`): the index's candidates for a ``MATCH``, the queue and
a pending backfill window, verified by the core ``LIKE``/``ILIKE`` predicate in one page
statement; PostgreSQL's candidates from the ``messages_cjk_grams`` GIN index. The index's
objects, keys and scope are :mod:`hermes_data.sessions.storage.fts.cjk_sql`'s.

Every value is bound; identifiers are fixed.
"""

from __future__ import annotations

from hermes_data.sessions.search.sql import (LIKE_SNIPPET, PG_LIKE_SNIPPET, PG_TRI_SESSION,
                                             hit_page, not_tool)
from hermes_data.sessions.storage.fts.cjk_sql import CJK_FTS, CJK_QUEUE, INDEX_SCOPE
from hermes_data.statements import DriverPrepared

# ---------------------------------------------------------------------------------------
# SQLite (docs/sessions-storage.md §3.9.3): the FTS5 index over the documents, its queue, the backfill window
# ---------------------------------------------------------------------------------------

#: Rows of the windowed pre-scan: ``m.id > :floor`` (the newest ``PRESCAN_ROWS`` ids).
PRESCAN_RANGE = "m.id > :floor"


def candidates(gap: bool) -> str:
    """``m.id IN (CAND)``: the index's matches for ``:match``, every queued id and — while a
    backfill is pending (``gap``) — the ids of the window ``(:progress, :high_water]``."""
    cand = (f"SELECT rowid FROM {CJK_FTS} WHERE {CJK_FTS} MATCH :match "
            f"UNION ALL SELECT id FROM {CJK_QUEUE}")
    if gap:
        cand += " UNION ALL SELECT id FROM messages WHERE id > :progress AND id <= :high_water"
    return f"m.id IN ({cand})"


def bigram_page(rows: str, matches: str, where: str, sort: str | None) -> DriverPrepared:
    """One page of the bigram route: ``rows`` (:func:`candidates` or :data:`PRESCAN_RANGE`)
    verified by ``matches`` (the core LIKE predicate of the groups, from
    ``sql.search.pattern_where``) over the index's scope, ``where`` the shared filters; by
    id, newest first (``oldest``: ascending). The ninth column is the LIKE snippet. A Core
    page (:func:`~hermes_data.sessions.search.sql.hit_page`)."""
    return hit_page(LIKE_SNIPPET, (rows, INDEX_SCOPE, f"({matches})", where), ("id",),
                    sort != "oldest")


# ---------------------------------------------------------------------------------------
# PostgreSQL (docs/sessions-storage.md §2.5, §3.9.3): the candidates of the GIN index over the letters and letter pairs
# ---------------------------------------------------------------------------------------


def pg_candidate_ids(n_groups: int) -> str:
    """PostgreSQL: the ids of the non-tool rows whose grams contain every token of one group
    (``:g0`` … bound as ``text[]``). Asked on its own, without an order or a limit, so the
    partial GIN index answers it (inside the page statement the planner, trusting a default
    estimate, walked ``messages_pkey`` backwards over every row for a rare letter)."""
    ors = " OR ".join(f"hermes_cjk_grams(c.role, c.content, c.tool_name, c.tool_calls) "
                      f"@> CAST(:g{i} AS text[])" for i in range(n_groups))
    # not Core: the GIN-served id list of ``hermes_cjk_grams`` (CJK-gram expressions), spliced
    # as a text fragment into the page's ``m.id = ANY(ARRAY(…))``
    return f"SELECT c.id FROM messages c WHERE c.role <> 'tool' AND ({ors})"


def pg_candidate_page(n_groups: int, matches: str, where: str,
                      sort: str | None) -> DriverPrepared:
    """:func:`pg_bigram_page` over the candidates of :func:`pg_candidate_ids` in one
    statement: the ids are an ``ARRAY(…)`` sub-select, an init plan planned on its own (so
    the partial GIN index answers it — the reason it was a statement of its own), and the
    page walks them newest first through ``messages_pkey``, checking ``ILIKE`` until the
    page is full (as the bound array did; ``IN (SELECT …)`` checked every candidate, then
    sorted: 1,100 candidates of ``以`` 1.5 → 9 ms). The ids no longer travel to the client
    and back (one round trip and ~2,000 ids bound for a common letter)."""
    return pg_bigram_page(f"m.id = ANY(ARRAY({pg_candidate_ids(n_groups)}))", matches, where,
                          sort)


def pg_bigram_page(rows: str, matches: str, where: str, sort: str | None) -> DriverPrepared:
    """PostgreSQL twin of :func:`bigram_page`: ``rows`` (the candidates of
    :func:`pg_candidate_page` or :data:`PRESCAN_RANGE`), the core ILIKE predicate ``matches``, the index's scope."""
    return hit_page(PG_LIKE_SNIPPET, (rows, not_tool, PG_TRI_SESSION, f"({matches})", where),
                    ("id",), sort != "oldest")
