"""Execution parts both backends share (message search, docs/sessions.md §7.2, issue 16):
the row filters, the tier machinery (:func:`combine_tiers`, :func:`tier_list`), the zero-result
trigram fallback, the LIKE / ILIKE substring routes and the result rows.

:mod:`hermes_data.sessions.search.messages` runs SQLite plans and dispatches;
:mod:`hermes_data.sessions.search.postgres` runs PostgreSQL plans. Every SQL text is in
:mod:`hermes_data.sessions.search.sql`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

from sqlalchemy.engine import Connection

from hermes_data.sessions.search.plan import LikeTerm, SearchPlan, SearchResult
from hermes_data.sessions.search import sql as q
from hermes_data.statements import DriverPrepared

# -------------------------------------------------------------------------------------
# Execution
# -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Filters:
    """The row filters of one search (sources, excluded sources, roles, inactive rows, ids
    already returned); :meth:`sql` binds them into a ``WHERE`` fragment."""

    sources: list[str]
    excluded: list[str]
    roles: list[str]
    include_inactive: bool
    #: Ids an earlier tier of the same search returned (never returned twice).
    exclude_ids: tuple[int, ...] = ()

    def sql(self, params: dict[str, Any]) -> str:
        """The filters as a SQL condition, their values added to ``params``."""
        return q.filter_where(params, sources=self.sources, excluded=self.excluded,
                              roles=self.roles, include_inactive=self.include_inactive,
                              exclude_ids=self.exclude_ids)


#: One tier of a search: ``(filters, limit, offset) -> hits``.
Tier = Callable[[Filters, int, int], list[SearchResult]]


def combine_tiers(tiers: Sequence[tuple[Tier, bool]], filters: Filters, limit: int,
                  offset: int, sort: str | None) -> list[SearchResult]:
    """The hits of several tiers as one list (issue 16): each tier is ``(run, always)``.

    Relevance order (``sort`` None/"rank"): tier after tier, each excluding what the earlier
    ones returned, until ``offset + limit`` hits are there. ``sort`` "newest"/"oldest": the
    tiers' hits merged by timestamp (a tier with ``always`` false joins only when the earlier
    ones did not fill the page)."""
    if len(tiers) == 1:
        return tiers[0][0](filters, limit, offset)
    need = offset + limit
    out: list[SearchResult] = []
    for run, always in tiers:
        if len(out) >= need and (sort in (None, "rank") or not always):
            continue
        seen = tuple(h.id for h in out if h.id is not None)
        out += run(replace(filters, exclude_ids=seen), need if sort in ("newest", "oldest")
                   else need - len(out), 0)
    if sort in ("newest", "oldest"):
        out.sort(key=lambda h: (h.timestamp or 0.0, h.id or 0), reverse=sort == "newest")
    return out[offset:offset + limit]


def tier_list(plan: SearchPlan, words: Tier | None, phrase: Tier | None,
              literal: Tier | None, sort: str | None,
              folded: Tier | None = None) -> list[tuple[Tier, bool]]:
    """Tier order of the standard route: the literal first when the typed text has characters
    the word index cannot see, then the exact phrase (relevance order only: its hits are word
    hits too), then the words, then — when the words do not fill the page — the literal as a
    substring (``ell`` finds ``hello``)."""
    tiers: list[tuple[Tier, bool]] = []
    if literal is not None and plan.literal_first:
        tiers.append((literal, True))
    if phrase is not None and sort in (None, "rank") and not plan.literal_first:
        tiers.append((phrase, True))  # (after a literal tier it would repeat it, looser)
    if words is not None:
        tiers.append((words, True))
    if folded is not None:  # PostgreSQL: rows matched only once diacritics are folded
        tiers.append((folded, False))
    if literal is not None and not plan.literal_first:
        tiers.append((literal, False))
    return tiers


def or_trigram(hits: list[SearchResult], match: str, fallback: str | None, offset: int,
               probe: Callable[[str], object], retry: Callable[[str], list[SearchResult]],
               narrowed: bool = False) -> list[SearchResult]:
    """The standard route's ``hits`` for ``match``, or — when it found nothing and the plan
    has a trigram ``fallback`` — ``retry(fallback)`` on the trigram index. On a later page,
    or when an earlier tier's rows were excluded (``narrowed``), ``probe(match)`` (the
    standard route's first hit, no row excluded) tells an empty page from an empty result:
    the fallback answers a word query that matches nothing, whichever tier returned its
    matches. Both backends: the tokenizer puts no boundary between Latin and adjacent CJK
    (``修改youer服务端``), and a word may sit inside a longer one; the trigram index finds
    them as substrings."""
    if hits or fallback is None:
        return hits
    if (offset or narrowed) and probe(match):
        return hits  # an empty later page (or every match already returned), not no result
    return retry(fallback)


def substring_search(conn: Connection, route: str, groups: Sequence[Sequence[LikeTerm]],
                     templates: Sequence[str], page: Callable[[str, str], DriverPrepared],
                     filters: Filters, limit: int, offset: int) -> list[SearchResult]:
    """A route matching terms as substrings (LIKE / ILIKE, both backends): terms and filters
    bound, ``page(matches, where)`` run; its ninth column is the snippet."""
    if not groups:
        return []
    params: dict[str, Any] = {"limit": limit, "offset": offset}
    matches = q.pattern_where(groups, templates, params)
    where = filters.sql(params)
    rows = page(matches, where).run(conn, params).fetchall()
    return [result_row(r, r[8], route) for r in rows]


def like_search(conn: Connection, plan: SearchPlan, filters: Filters, limit: int,
                offset: int, sort: str | None, *,
                postgresql: bool = False) -> list[SearchResult]:
    """The plan's LIKE route (PostgreSQL: ILIKE) over its term groups."""
    # Short CJK (``plan.bigram``) searches the CJK-bigram index's scope whichever way it is
    # answered: the index, LIKE when it cannot serve (absent, stale, a group without CJK),
    # PostgreSQL's ILIKE until the storage revision gives it its own index.
    scoped = plan.bigram
    return substring_search(conn, plan.route, plan.groups,
                       q.ILIKE_COLS if postgresql else q.LIKE_COLS,
                       lambda matches, where: q.like_page(matches, where, sort,
                                                          postgresql=postgresql, scoped=scoped),
                       filters, limit, offset)


def result_row(r: Sequence[Any], snippet: Any, route: str) -> SearchResult:
    """A :class:`SearchResult` from a result row (``id, session_id, role, timestamp,
    tool_name, source, model, session_started``) and its snippet, found by ``route``."""
    snip = snippet if isinstance(snippet, str) else (None if snippet is None else str(snippet))
    return SearchResult(id=r[0], session_id=r[1], role=r[2], snippet=snip, timestamp=r[3],
                        tool_name=r[4], source=r[5], model=r[6], session_started=r[7],
                        route=route)


