"""The search over the CJK-bigram index (docs/sessions-storage.md §3.9.3; issue 16 item 4).

The index — documents, queue, triggers, the drain — is
:mod:`hermes_data.sessions.storage.fts.cjk`; this module answers a short CJK query from it:

* :func:`cjk_match_expression` — the FTS5 expression of OR-groups of terms (each term's
  :func:`~hermes_data.sessions.storage.fts.cjk.cjk_index_tokens`). The candidates are a
  superset of the rows holding the text; the search verifies them with the core ``LIKE``
  predicate, so results equal the LIKE route exactly.
* :func:`bigram_search` — the search route (windowed pre-scan, then the candidates).

PostgreSQL (revision ``s07_storage``): :func:`pg_bigram_search` takes the candidates from the
partial GIN index ``messages_cjk_grams`` (:func:`pg_gram_groups`) and verifies them with the
core ILIKE predicate.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from hermes_data.locking import is_lock_conflict
from hermes_data.sessions.search import cjk_sql as qs
from hermes_data.sessions.search.plan import LikeTerm
from hermes_data.sessions.search.sql import ILIKE_COLS, LIKE_COLS, pattern_where
from hermes_data.sessions.search.stats import CJK_GRAMS, element_rows
from hermes_data.sessions.storage.fts import cjk_sql as q
from hermes_data.sessions.storage.fts.cjk import cjk_index_tokens, cjk_runs, present_objects
from hermes_data.statements import DriverPrepared

log = logging.getLogger("hermes_data.sessions.search.cjk")

#: Newest ids the search pre-scans before using the candidates (a very common letter is
#: cheapest by an early-exit scan, a rare one by candidates).
PRESCAN_ROWS = 4096


def cjk_match_expression(groups: Sequence[Sequence[LikeTerm]]) -> str | None:
    """The FTS5 expression over OR-groups of ``(term, negated)`` (the core LIKE
    compilation): each group's positive-term tokens AND-ed, groups OR-ed; ``None`` when a
    group with a positive term has no CJK token (its rows need not hold CJK). Negated terms
    only verify."""
    ors = []
    for group in groups:
        positive = [t.text for t in group if not t.negated]
        if not positive:
            continue
        toks: list[tuple[str, bool]] = []
        for term in positive:
            toks += [t for t in cjk_index_tokens(term) if t not in toks]
        if not toks:
            return None
        ors.append("(" + " AND ".join(f'"{tok}"' + ("*" if prefix else "")
                                      for tok, prefix in toks) + ")")
    return " OR ".join(ors) if ors else None


# ---------------------------------------------------------------------------------------
# The routes (docs/sessions-storage.md §3.9.3)
# ---------------------------------------------------------------------------------------


def _prescan(conn: Connection, page: Callable[[str, str, str, str | None], DriverPrepared],
             matches: str, where: str, sort: str | None,
             params: dict[str, Any]) -> list[Any] | None:
    """The windowed pre-scan (docs/sessions-storage.md §3.9.3): the page among the newest
    :data:`PRESCAN_ROWS` ids when it fills the page or covers every id (older rows have
    smaller ids), else None (the candidates answer). Not for ``oldest``."""
    if sort == "oldest":
        return None
    newest = q.CjkIndexStatements.for_dialect(conn.dialect.name).MAX_MESSAGE_ID
    top = conn.exec_driver_sql(newest).scalar()
    params["floor"] = (top or 0) - PRESCAN_ROWS
    rows = page(qs.PRESCAN_RANGE, matches, where, sort).run(conn, params).fetchall()
    return list(rows) if len(rows) >= params["limit"] or params["floor"] <= 0 else None


def bigram_search(conn: Connection, groups: Sequence[Sequence[LikeTerm]],
                  filters: Callable[[dict[str, Any]], str], limit: int, offset: int,
                  sort: str | None) -> list[Any] | None:
    """Hit rows (the search's nine columns) of the bigram route, or ``None`` when it is not
    eligible here (objects absent, stale, a group without CJK; the caller checks FTS5) or the index fails
    (logged; the caller answers through LIKE). The rows equal the core LIKE route over
    ``groups`` restricted to the index's scope (no tool rows, trigram-eligible sessions), by
    id. ``filters(params)`` binds the shared filters and returns their SQL."""
    match = cjk_match_expression(groups)
    if match is None or len(present_objects(conn)) < len(q.CJK_OBJECTS):
        return None
    meta: dict[str, str] = dict(conn.exec_driver_sql(q.READ_META).fetchall())
    if q.STALE_KEY in meta:
        return None
    params: dict[str, Any] = {"limit": limit, "offset": offset}
    matches = pattern_where(groups, LIKE_COLS, params)
    where = filters(params)
    try:
        rows = _prescan(conn, qs.bigram_page, matches, where, sort, params)
        if rows is not None:
            return rows
        gap = q.HIGH_WATER_KEY in meta
        if gap:
            params["high_water"] = int(meta[q.HIGH_WATER_KEY])
            params["progress"] = int(meta.get(q.PROGRESS_KEY) or 0)
        params["match"] = match
        return list(qs.bigram_page(qs.candidates(gap), matches, where, sort).run(
            conn, params).fetchall())
    except sa.exc.DatabaseError as exc:
        if is_lock_conflict(exc):
            raise
        log.warning("CJK-bigram index unusable (%s); answering through LIKE", exc.orig)
        return None


def pg_gram_groups(groups: Sequence[Sequence[LikeTerm]]) -> list[list[str]] | None:
    """PostgreSQL: per OR-group with a positive term, the grams a row must contain (a
    one-letter run ⇒ the letter, a longer one ⇒ its pairs; the function indexes every
    letter, so no prefix is needed); ``None`` when such a group has no CJK token."""
    out = []
    for group in groups:
        positive = [t.text for t in group if not t.negated]
        if not positive:
            continue
        grams: list[str] = []
        for term in positive:
            grams += [tok for tok, _prefix in cjk_index_tokens(term) if tok not in grams]
        if not grams:
            return None
        out.append(grams)
    return out or None


#: PostgreSQL: the windowed pre-scan runs only when the gram statistics allow more than this
#: many candidates (summed over the OR-groups): below, the candidates are cheaper than
#: ``ILIKE`` over the newest :data:`PRESCAN_ROWS` rows (~12 ms, wasted when it does not fill
#: the page — most 1–2-letter queries).
PG_PRESCAN_MIN_ROWS = 2000


def _pg_common(conn: Connection, grams: list[list[str]],
               groups: Sequence[Sequence[LikeTerm]]) -> bool:
    """Could the groups' matches be many (:data:`PG_PRESCAN_MIN_ROWS`)? True without
    statistics (the pre-scan then decides, as before). A group whose term holds more than
    CJK letters (``100%服务``, ``西ZfWe7``) counts for none: its grams bound its candidates,
    not its matches, which the rest of the term makes rare — its pre-scan read 4,096 rows
    (~7–11 ms) and did not fill the page."""
    total = 0.0
    positive = [[t.text for t in g if not t.negated] for g in groups]
    for group, terms in zip(grams, [t for t in positive if t]):
        if not all(_cjk_only(t) for t in terms):
            continue
        rows = element_rows(conn, CJK_GRAMS, group)
        if rows is None:
            return True
        total += rows
    return total > PG_PRESCAN_MIN_ROWS


def _cjk_only(term: str) -> bool:
    """True when ``term`` is CJK letters only (whitespace aside)."""
    return "".join(cjk_runs(term)) == "".join(term.split())


def pg_bigram_search(conn: Connection, groups: Sequence[Sequence[LikeTerm]],
                     filters: Callable[[dict[str, Any]], str], limit: int, offset: int,
                     sort: str | None) -> list[Any] | None:
    """PostgreSQL twin of :func:`bigram_search` (the caller checked that the GIN index
    exists): the windowed pre-scan, then the candidate ids of ``messages_cjk_grams`` verified
    by the page in the same statement; ``None``
    when a group has no CJK token (the caller answers through ILIKE). Same guarantee: the
    rows equal the scoped ILIKE route by id."""
    grams = pg_gram_groups(groups)
    if grams is None:
        return None
    params: dict[str, Any] = {"limit": limit, "offset": offset}
    matches = pattern_where(groups, ILIKE_COLS, params)
    where = filters(params)
    if _pg_common(conn, grams, groups):  # rare letters: 4,096 rows read for naught
        rows = _prescan(conn, qs.pg_bigram_page, matches, where, sort, params)
        if rows is not None:
            return rows
    params.update({f"g{i}": g for i, g in enumerate(grams)})
    return list(qs.pg_candidate_page(len(grams), matches, where, sort).run(
        conn, params).fetchall())
