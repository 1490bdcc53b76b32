"""Message search of the session store (spec sessions.md §7.1–§7.3, layouts of §2.6–§2.7).

Three parts, each usable on its own:

* :func:`sanitize_fts_query` — a pure function turning whatever a user typed into an FTS5
  query that parses (or ``None`` when nothing searchable is left). Its docstring is the
  table of rules.
* :func:`plan_search` — pure routing: which index (or the LIKE fallback) answers a query,
  given what the database offers (:class:`SearchCapabilities`).
* :func:`search_messages` — runs the plan on a connection and returns typed
  :class:`SearchResult` rows. Snippets are made in SQL (``snippet()`` / ``substr``), the
  message ``content`` column is never selected, and the context window around each hit is
  fetched by id with bounded prefixes, so a multi-MB tool row is never materialised in
  Python.

**What a search returns (issue 16).** The standard route answers in *tiers*, each excluding
the rows an earlier one returned, so a row appears once:

1. the **literal tier** — rows whose ``content`` holds the text as typed
   (:func:`literal_text`: trimmed, case folded as the engine folds it), over the rows the
   trigram index holds (no tool rows, no cron/subagent/delegate sessions); through the trigram
   index for ≥ 3 characters (SQLite: trigram phrase candidates — the word phrase of a
   literal over 16 characters — checked by ``LIKE``; PostgreSQL ``ILIKE`` on the ``pg_trgm``
   index), by a newest-first scan below that. It comes **first** when the typed
   text has a character the word index cannot see (:func:`word_invisible`: ``what?``,
   ``~/.config``, ``C#``, ``x->y``, ``🚀``, ``read_file``; a query of such characters only,
   ``?!``, is answered by it alone), newest first;
2. the **exact phrase** (two or more plain terms, relevance order only, not after a literal
   tier — the literal is the stricter phrase): ``quick brown fox``
   ranks the rows holding the phrase above the scattered-word ones;
3. the **word tier** — the FTS query (unicode61 / the stored tsvector) with the zero-result
   trigram fallback, by relevance (PostgreSQL: equal ranks newest first; SQLite keeps
   FTS5's order for them — a tie-break key costs 1.5–1.9× on common words, see
   ``sql.search.fts_page``); on PostgreSQL, when it does not fill the page, the
   accent-folded words follow (see below);
4. the literal tier again, **after** the words, when they do not fill the page and the text
   has ≥ 3 characters (``ell`` finds ``hello``; a query is always found inside a longer word).

So every hit holds the typed text, or holds — as words, case and diacritics folded — every
positive term of one OR-group of the sanitized query (CJK route: one of its tokens); this is
what ``tests/sessions/test_search_literal.py`` checks on both backends. With ``sort`` newest /
oldest the tiers are merged by timestamp (tier 4 joins only when the words do not fill the
page). Operators: ``AND``/``OR``/``NOT`` are operators only alone between two terms; alone,
or at an edge, they are words (``NOT`` finds "not"). The LIKE routes (``--role tool``, stale
index, no FTS5) read the typed text (:func:`literal_groups`): ``1=1`` and ``' OR 1=1 --`` are
text, not split or reinterpreted.

The first two (and the result types) live in :mod:`hermes_data.sessions.search_plan`, pure
and free of SQLAlchemy; every SQL text is in :mod:`hermes_data.sessions.sql.search`. This
module executes, and re-exports the public names of both, so imports from
``hermes_data.sessions.search`` keep working.

**PostgreSQL** (same contract, same result rows; :func:`search_messages` dispatches on the
connection's dialect). The plan is the same (:func:`plan_search`); the routes run against
the objects of s01_baseline and s02_pg_stored_tsvector instead of FTS5 tables:

* ``fts`` — the sanitizer's output compiled into a ``tsquery`` built from bound parameters
  (:func:`pg_tsquery`: a term is ``phraseto_tsquery('simple', regexp_replace(:t, SPLIT))``,
  a ``word*`` prefix puts ``:*`` on the term's last word, a phrase ``<->``; ``NOT`` ⇒
  ``&& !!``, ``OR`` ⇒ ``||``), matched against the stored generated column
  ``messages.fts_document`` (GIN index ``messages_fts_document``). Relevance: ``ts_rank``
  on that stored vector over the newest :data:`PG_RANK_CANDIDATES` matches. Snippets:
  ``ts_headline`` over a :data:`PG_HEADLINE_CHARS`-character prefix, with the same
  punctuation boundaries made visible to the parser (so ``gateway`` is marked inside
  ``gateway/run.py``) and removed again from the snippet.
* ``trigram`` — ``m.content ILIKE '%tok%' ESCAPE '\'`` per token (the ``pg_trgm`` GIN index
  ``messages_fts_trgm`` serves it), over the rows the SQLite trigram index holds (no tool
  rows, no cron/subagent/delegate sessions); newest first.
* ``like`` / ``cjk_like`` — the same escaped LIKE compilation with ``ILIKE``.

Tokenisation on PostgreSQL (``sql.PG_FTS_SPLIT``): every run of ASCII characters that are not
letters or digits is a word boundary — in the document and in every query term alike — so
``gateway/run.py``, ``user@host``, ``read_file`` split into unicode61's words and ``gateway``
finds them on the standard route. Non-ASCII punctuation is left to the 'simple' parser (a
boundary under a Unicode ``LC_CTYPE``). Case folds on both sides ('simple' lower-cases).
Diacritics fold as FTS5's ``remove_diacritics`` folds them (``cafe`` finds ``café`` and
back): the writable open ensures ``hermes_unaccent`` (an IMMUTABLE wrapper of ``unaccent``)
and the GIN index ``messages_fts_folded`` on the folded document
(:mod:`hermes_data.sessions.search_index`). The word tier matches the stored
``fts_document`` as typed; a *folded tier* follows it when it does not fill the page,
matching the folded query against the folded document (ranked with the unfolded query on the
stored document): a row matched only through folding ranks after the exact-accent rows.
(Matching the expression index first made common words slow: the planner filters a
backward id scan with it, recomputing ``unaccent``/``to_tsvector`` per row.)
The literal tier's ``ILIKE`` is narrowed by the literal's words on the stored document
(:func:`literal_word_phrase`): ``pg_trgm`` ignores punctuation, so ``[more]python`` alone
rechecks every row holding two common words. Without the extension (no privilege)
folding is off, logged at WARNING. Remaining difference: the document is one text, so a
phrase may span from ``content`` into ``tool_name`` where FTS5's columns keep them apart.

Search never raises for any query text: a query FTS5 still rejects yields ``[]`` (logged at
DEBUG); a corrupt index falls back to LIKE (logged at WARNING). Only a database that stays
locked past the busy timeout raises — that is never turned into a silent "no results".
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, Sequence, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from . import encoding as enc
from . import cjk, fts_gap
from .search_plan import (CONTEXT_CHARS, CONTEXT_CHUNK, HIGHLIGHT_END, HIGHLIGHT_START,
                          MAX_QUERY_CHARS, OPERATORS, RESULT_FIELDS, SORTS, ContextMessage,
                          LikeTerm, SearchCapabilities, SearchPlan, SearchResult, bare_token,
                          check_fields,
                          cjk_count, cjk_like_groups, has_cjk, like_groups, literal_groups,
                          literal_text, literal_word_phrase, name_list, operands, plan_search,
                          query_tokens, sanitize_fts_query, trigram_match, word_invisible)
from .search_caps import (DOCUMENT_WORDS, SYMBOL_GRAMS, element_rows, forget_capabilities,
                          read_capabilities)
from .sql import search as q
from .sql.search import pg_tsquery

__all__ = [
    "CONTEXT_CHARS", "CONTEXT_CHUNK", "HIGHLIGHT_END", "HIGHLIGHT_START", "MAX_QUERY_CHARS",
    "OPERATORS", "PG_HEADLINE_CHARS", "PG_RANK_CANDIDATES", "RESULT_FIELDS", "SORTS",
    "ContextMessage", "LikeTerm", "SearchCapabilities", "SearchPlan", "SearchResult",
    "cjk_count", "fetch_context", "forget_capabilities", "has_cjk", "literal_groups", "literal_text", "pg_tsquery",
    "plan_search", "query_tokens", "read_capabilities", "sanitize_fts_query", "search_messages",
    "trigram_match", "word_invisible",
]

log = logging.getLogger("hermes_data.sessions.search")

#: Bytes of a multimodal (JSON) neighbour read to recover its text parts.
_CONTEXT_JSON_PREFIX = 65536

# -------------------------------------------------------------------------------------
# Execution
# -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Filters:
    sources: list[str]
    excluded: list[str]
    roles: list[str]
    include_inactive: bool
    #: Ids an earlier tier of the same search returned (never returned twice).
    exclude_ids: tuple[int, ...] = ()

    def sql(self, params: dict[str, Any]) -> str:
        return q.filter_where(params, sources=self.sources, excluded=self.excluded,
                              roles=self.roles, include_inactive=self.include_inactive,
                              exclude_ids=self.exclude_ids)


#: One tier of a search: ``(filters, limit, offset) -> hits``.
_Tier = Callable[[_Filters, int, int], list[SearchResult]]
_T = TypeVar("_T")


def _combine(tiers: Sequence[tuple[_Tier, bool]], filters: _Filters, limit: int, offset: int,
             sort: str | None) -> list[SearchResult]:
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


def _tier_list(plan: SearchPlan, words: _Tier | None, phrase: _Tier | None,
               literal: _Tier | None, sort: str | None,
               folded: _Tier | None = None) -> list[tuple[_Tier, bool]]:
    """Tier order of the standard route: the literal first when the typed text has characters
    the word index cannot see, then the exact phrase (relevance order only: its hits are word
    hits too), then the words, then — when the words do not fill the page — the literal as a
    substring (``ell`` finds ``hello``)."""
    tiers: list[tuple[_Tier, bool]] = []
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


def search_messages(conn: Connection, query: str | None, *,
                    source_filter: str | Iterable[str] | None = None,
                    exclude_sources: str | Iterable[str] | None = None,
                    role_filter: str | Iterable[str] | None = None,
                    limit: int = 20, offset: int = 0, sort: str | None = None,
                    include_inactive: bool = False,
                    fields: Sequence[str] | None = None) -> list[SearchResult]:
    """Search message rows for ``query`` (spec §7.2); never raises for any query text.

    ``source_filter`` / ``exclude_sources`` restrict session sources, ``role_filter`` message
    roles (``tool`` searches full tool bodies through LIKE). ``sort``: ``None``/``"rank"``
    (relevance; LIKE routes newest first), ``"newest"`` or ``"oldest"``. Rewound rows and
    ``display_kind='hidden'`` rows are excluded unless ``include_inactive`` (hidden always).
    ``fields`` selects result fields (others stay ``None``); ``context`` is computed only
    when requested. Raises ``ValueError``/``TypeError`` only for invalid arguments.
    """
    names = check_fields(fields)
    if sort not in SORTS:
        raise ValueError(f"sort must be one of {SORTS[1:]} or None, not {sort!r}")
    limit, offset = max(0, int(limit)), max(0, int(offset))
    sanitized = sanitize_fts_query(query)
    literal = literal_text(query)
    if (sanitized is None and literal is None) or limit == 0:
        return []
    roles = name_list(role_filter)
    sources = name_list(source_filter)
    filters = _Filters(sources, name_list(exclude_sources), roles, include_inactive)
    caps = read_capabilities(conn)
    plan = plan_search(sanitized, caps, role_filter=roles, source_filter=sources,
                       literal=literal)
    log.debug("search %r -> %r via %s (%s)", query, sanitized, plan.route, plan.reason)
    if plan.route == "none" or (plan.route == "like" and not plan.groups):
        return []
    if conn.dialect.name == "postgresql":
        hits = _pg_run_plan(conn, plan, filters, limit, offset, sort)
    else:
        hits = _run_plan(conn, plan, filters, limit, offset, sort)
    if not hits:
        return []
    if "context" in names:
        hits = _attach_context(conn, hits, include_inactive)
    if fields is not None:
        blank: dict[str, Any] = {n: None for n in RESULT_FIELDS if n not in names}
        hits = [replace(h, **blank) for h in hits]
    return hits


def _or_trigram(hits: list[SearchResult], match: str, fallback: str | None, offset: int,
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


def _run_plan(conn: Connection, plan: SearchPlan, filters: _Filters, limit: int, offset: int,
              sort: str | None) -> list[SearchResult]:
    if plan.bigram:  # short CJK through the CJK-bigram index when it can serve (else LIKE)
        rows = cjk.bigram_search(conn, plan.groups, filters.sql, limit, offset, sort)
        if rows is not None:
            return [_result(r, r[8], "bigram") for r in rows]
    if plan.route in ("like", "cjk_like"):
        return _like(conn, plan, filters, limit, offset, sort)
    if plan.route == "trigram":
        assert plan.match is not None
        return _sqlite_words(conn, plan, plan.match, filters, limit, offset, sort)
    match, lit_text, phrase_text = plan.match, plan.literal, plan.phrase
    words: _Tier | None = None if match is None else (
        lambda f, n, o: _sqlite_words(conn, plan, match, f, n, o, sort))
    phrase: _Tier | None = None if phrase_text is None else (
        lambda f, n, o: _fts_safe(conn, q.FTS_TABLE, phrase_text, f, n, o, sort))
    literal: _Tier | None = None
    words_phrase = plan.literal_words
    if lit_text is not None and words_phrase is not None:
        literal = lambda f, n, o: _sqlite_literal(  # noqa: E731
            conn, q.FTS_TABLE, words_phrase, lit_text, f, n, o, sort)
    elif lit_text is not None and plan.literal_indexed:
        literal = lambda f, n, o: _sqlite_literal(  # noqa: E731
            conn, q.FTS_TRIGRAM_TABLE, q.literal_match(lit_text), lit_text, f, n, o, sort)
    elif lit_text is not None:
        literal = lambda f, n, o: _substrings(  # noqa: E731
            conn, "literal", ((LikeTerm(lit_text),),), q.LITERAL_COLS,
            lambda matches, where: q.literal_scan_page(matches, where, sort), f, n, o)
    return _combine(_tier_list(plan, words, phrase, literal, sort), filters, limit, offset, sort)


def _sqlite_literal(conn: Connection, table: str, match: str, literal: str,
                    filters: _Filters, limit: int, offset: int,
                    sort: str | None) -> list[SearchResult]:
    """The literal tier on SQLite: candidates ``table MATCH match`` (trigram phrase, or the
    word phrase of a long literal), ``LIKE``-checked on the content."""
    params: dict[str, Any] = {"q": match, "limit": limit, "offset": offset}
    matches = q.pattern_where(((LikeTerm(literal),),), q.LITERAL_COLS, params)
    where = filters.sql(params)
    try:
        rows = conn.execute(sa.text(q.literal_candidates_page(table, matches, where, sort)),
                            params).fetchall()
    except sa.exc.DatabaseError as exc:
        if _is_lock_error(exc):
            raise  # busy, never "no results"
        log.debug("literal candidates %r on %s failed: %s", match, table, exc.orig)
        return []
    return [_result(r, r[8], "literal") for r in rows]


def _sqlite_words(conn: Connection, plan: SearchPlan, match: str, filters: _Filters,
                  limit: int, offset: int, sort: str | None) -> list[SearchResult]:
    """The word tier on SQLite: ``match`` on the plan's index (unicode61, or trigram for
    CJK), the zero-result trigram fallback, the LIKE route when the index is corrupt."""
    table = q.FTS_TRIGRAM_TABLE if plan.route == "trigram" else q.FTS_TABLE
    try:
        hits = _fts(conn, table, match, filters, limit, offset, sort)
    except sa.exc.OperationalError as exc:
        if _is_lock_error(exc):
            raise  # the database is busy, not the query wrong: never a silent "no results"
        log.debug("FTS5 rejected %r on %s: %s", match, table, exc.orig)
        return []
    except sa.exc.DatabaseError as exc:
        log.warning("FTS index %s unusable (%s); answering through LIKE", table, exc.orig)
        like = SearchPlan("cjk_like" if plan.route == "trigram" else "like",
                          groups=(cjk_like_groups(match) if plan.route == "trigram"
                                  else like_groups(match)))
        return _like(conn, like, filters, limit, offset, sort)

    def page(n: int, o: int, first: list[SearchResult] | None = None) -> list[SearchResult]:
        return _or_trigram(
            _fts_safe(conn, table, match, filters, n, o, sort) if first is None else first,
            match, plan.trigram_fallback, o,
            probe=lambda m: _fts_safe(conn, table, m, replace(filters, exclude_ids=()), 1, 0,
                                      sort),
            retry=lambda m: _fts_safe(conn, q.FTS_TRIGRAM_TABLE, m, filters, n, o, sort),
            narrowed=bool(filters.exclude_ids))

    fallback = plan.trigram_fallback  # rows of a pending backfill window: storage §3.6
    return fts_gap.supplement(conn, page(limit, offset, hits), like_groups(match), filters.sql,
                              limit, offset, sort,
                              lambda: fts_gap.match_count(conn, table, match, filters.sql, offset)
                              or (fts_gap.match_count(conn, q.FTS_TRIGRAM_TABLE, fallback,
                                                      filters.sql, offset) if fallback else 0),
                              lambda r: _result(r, r[8], "gap"), scoped=plan.route == "trigram",
                              refetch=lambda n: page(n, 0))


def _fts_safe(conn: Connection, table: str, match: str, filters: _Filters, limit: int,
              offset: int, sort: str | None) -> list[SearchResult]:
    try:
        return _fts(conn, table, match, filters, limit, offset, sort)
    except sa.exc.DatabaseError as exc:
        if _is_lock_error(exc):
            raise
        log.debug("FTS5 query %r on %s failed: %s", match, table, exc.orig)
        return []


def _is_lock_error(exc: sa.exc.DBAPIError) -> bool:
    msg = str(exc.orig).lower()
    return "locked" in msg or "busy" in msg


def _fts(conn: Connection, table: str, match: str, filters: _Filters, limit: int, offset: int,
         sort: str | None) -> list[SearchResult]:
    """A page of ``MATCH match`` on ``table``, snippets made by FTS5 for the page only."""
    params: dict[str, Any] = {"q": match, "limit": limit, "offset": offset}
    where = filters.sql(params)
    rows = conn.execute(sa.text(q.fts_page(table, where, sort)), params).fetchall()
    if not rows:
        return []
    # Snippets for the page only (computed by FTS5 from the indexed text, never in Python).
    ids = [r[0] for r in rows]
    sp: dict[str, Any] = {"q": match}
    sp.update({f"i{k}": v for k, v in enumerate(ids)})
    snippets: dict[Any, Any] = dict(conn.execute(sa.text(q.fts_snippets(table, len(ids))), sp).fetchall())
    route = "trigram" if table == q.FTS_TRIGRAM_TABLE else "fts"
    return [_result(r, snippets.get(r[0]), route) for r in rows]


def _substrings(conn: Connection, route: str, groups: Sequence[Sequence[LikeTerm]],
                templates: Sequence[str], page: Callable[[str, str], str], filters: _Filters,
                limit: int, offset: int) -> list[SearchResult]:
    """A route matching terms as substrings (LIKE / ILIKE, both backends): terms and filters
    bound, ``page(matches, where)`` run; its ninth column is the snippet."""
    if not groups:
        return []
    params: dict[str, Any] = {"limit": limit, "offset": offset}
    matches = q.pattern_where(groups, templates, params)
    where = filters.sql(params)
    rows = conn.execute(sa.text(page(matches, where)), params).fetchall()
    return [_result(r, r[8], route) for r in rows]


def _like(conn: Connection, plan: SearchPlan, filters: _Filters, limit: int, offset: int,
          sort: str | None, *, postgresql: bool = False) -> list[SearchResult]:
    # Short CJK (``plan.bigram``) searches the CJK-bigram index's scope whichever way it is
    # answered: the index, LIKE when it cannot serve (absent, stale, a group without CJK),
    # PostgreSQL's ILIKE until the storage revision gives it its own index.
    scoped = plan.bigram
    return _substrings(conn, plan.route, plan.groups,
                       q.ILIKE_COLS if postgresql else q.LIKE_COLS,
                       lambda matches, where: q.like_page(matches, where, sort,
                                                          postgresql=postgresql, scoped=scoped),
                       filters, limit, offset)


def _result(r: Sequence[Any], snippet: Any, route: str) -> SearchResult:
    snip = snippet if isinstance(snippet, str) else (None if snippet is None else str(snippet))
    return SearchResult(id=r[0], session_id=r[1], role=r[2], snippet=snip, timestamp=r[3],
                        tool_name=r[4], source=r[5], model=r[6], session_started=r[7],
                        route=route)


# -------------------------------------------------------------------------------------
# PostgreSQL execution
# -------------------------------------------------------------------------------------

#: The standard route ranks (``ts_rank`` on the stored ``fts_document``) only the newest
#: this-many matches, so a common word never ranks every matching row.
PG_RANK_CANDIDATES = 1000
#: The literal tier takes its candidates from the symbol-gram index (s08) when its rarest
#: gram is in at most this many rows (:func:`symbol_gram_rows`): ~7 µs a candidate. Above,
#: a literal of symbols only (``...``, ``((``) is itself common — a newest-first scan stops
#: at the page sooner — and a literal with words keeps ``pg_trgm`` and the word index
#: (``flags.``: 2,600 trigram candidates against 30,000 gram ones; a common ``it's`` stops
#: early).
PG_GRAM_CANDIDATES = 1000
PG_GRAM_CANDIDATES_WORDS = 3000
#: A word-tier page reads its candidates from the GIN index and sorts them (instead of
#: walking the ids backwards) when the statistics bound its matches by this many rows.
PG_BITMAP_ROWS = 5000
_PG_WORD_RE = re.compile(r"[^\W_]+")
#: Characters of a row ``ts_headline`` reads (a multi-MB tool row is never read whole).
PG_HEADLINE_CHARS = 8192
#: SQLSTATEs that mean "busy", never "bad query": lock_not_available, deadlock_detected,
#: serialization_failure, query_canceled (statement_timeout), admin/crash shutdown.
_PG_BUSY_SQLSTATES = {"55P03", "40P01", "40001", "57014", "57P01", "57P02", "57P03"}
#: Parser boundary fenced around punctuation in the headline text (never a word character).
_PG_FENCE = "\x01"
_PG_SPLIT_MARKS_RE = re.compile(
    re.escape(HIGHLIGHT_END) + r"((?:[^\s\w]|_){1,3})" + re.escape(HIGHLIGHT_START))


def _pg_busy(exc: sa.exc.DBAPIError) -> bool:
    return getattr(exc.orig, "sqlstate", None) in _PG_BUSY_SQLSTATES


def _pg_attempt(conn: Connection, what: str, fn: Callable[[], _T]) -> _T | None:
    """Run one route in a savepoint: a rejected statement leaves the read transaction usable
    and yields ``None`` (logged at DEBUG; the caller answers ``[]``); a busy server is
    raised, never turned into "no results"."""
    try:
        with conn.begin_nested():
            return fn()
    except sa.exc.DBAPIError as exc:
        if _pg_busy(exc):
            raise
        log.debug("PostgreSQL search route %s failed: %s", what, exc.orig)
        return None


def _pg_run_plan(conn: Connection, plan: SearchPlan, filters: _Filters, limit: int,
                 offset: int, sort: str | None) -> list[SearchResult]:
    if plan.bigram:  # short CJK through the GIN gram index (storage §3.9.3; else ILIKE)
        def grams() -> list[SearchResult] | None:
            rows = cjk.pg_bigram_search(conn, plan.groups, filters.sql, limit, offset, sort)
            return None if rows is None else [_result(r, r[8], "bigram") for r in rows]
        hits = _pg_attempt(conn, "bigram", grams)
        if hits is not None:
            return hits
    if plan.route in ("like", "cjk_like"):
        return _pg_attempt(conn, plan.route,
                           lambda: _like(conn, plan, filters, limit, offset, sort, postgresql=True)) or []
    if plan.route == "trigram":
        assert plan.match is not None
        match = plan.match
        return _pg_attempt(conn, "trigram", lambda: _pg_trigram(
            conn, match, filters, limit, offset, sort)) or []
    match_text, lit_text, phrase_text = plan.match, plan.literal, plan.phrase
    words: _Tier | None = None if match_text is None else (
        lambda f, n, o: _pg_words(conn, plan, match_text, f, n, o, sort))
    phrase: _Tier | None = None if phrase_text is None else (
        lambda f, n, o: _pg_attempt(conn, "phrase", lambda: _pg_fts(
            conn, phrase_text, f, n, o, sort)) or [])
    folded: _Tier | None = None if match_text is None or not plan.folded else (
        lambda f, n, o: _pg_attempt(conn, "folded", lambda: _pg_fts(
            conn, match_text, f, n, o, sort, folded=True)) or [])
    literal: _Tier | None = None if lit_text is None else (
        lambda f, n, o: _pg_attempt(conn, "literal", lambda: _pg_literal(
            conn, lit_text, f, n, o, sort, plan.symbols)) or [])
    return _combine(_tier_list(plan, words, phrase, literal, sort, folded), filters, limit,
                    offset, sort)


def _pg_literal(conn: Connection, literal: str, filters: _Filters, limit: int, offset: int,
                sort: str | None, symbols: bool = False) -> list[SearchResult]:
    """The literal tier on PostgreSQL: ``ILIKE`` on the content (``pg_trgm``), narrowed by the
    literal's words on the stored document (:func:`literal_word_phrase`) and — ``symbols``,
    when the literal has a character that is no letter, digit or space — by its symbol
    grams (``messages_symbol_grams``, s08: the characters ``pg_trgm`` cannot see)."""
    params: dict[str, Any] = {"limit": limit, "offset": offset}
    matches = q.pattern_where(((LikeTerm(literal),),), q.PG_TRIGRAM_COLS, params)
    grams = scan = False
    if symbols and has_symbol(literal):
        params["sg"] = literal
        words = any(ch.isalnum() for ch in literal)
        upper = element_rows(conn, SYMBOL_GRAMS, list(conn.execute(
            sa.text(q.PG_LITERAL_SYMBOL_GRAMS), {"sg": literal}).scalar() or ()))
        grams = upper is not None and upper <= (PG_GRAM_CANDIDATES_WORDS if words
                                                else PG_GRAM_CANDIDATES)
        scan = upper is not None and not grams and not words
    phrase = None if grams else literal_word_phrase(literal)
    tsq = pg_tsquery(phrase, params, "w") if phrase else None
    where = filters.sql(params)
    rows = conn.execute(sa.text(q.pg_literal_page(matches, where, sort, tsq, grams=grams,
                                                  scan=scan)), params).fetchall()
    return [_result(r, r[8], "literal") for r in rows]


def has_symbol(literal: str) -> bool:
    """True when ``literal`` holds a character that is neither a letter, a digit nor
    whitespace: the symbol-gram index (s08) narrows the literal tier's candidates. (A hint
    only: the grams are computed by the server on both sides.)"""
    return any(not (ch.isalnum() or ch.isspace()) for ch in literal)


def _pg_words(conn: Connection, plan: SearchPlan, match: str, filters: _Filters, limit: int,
              offset: int, sort: str | None) -> list[SearchResult]:
    """The word tier on PostgreSQL: the stored tsvector, then the zero-result trigram
    fallback."""
    hits = _pg_attempt(conn, "fts", lambda: _pg_fts(conn, match, filters, limit, offset, sort))
    if hits is None:
        return []  # rejected (as FTS5's OperationalError): no fallback, no error
    return _or_trigram(
        hits, match, plan.trigram_fallback, offset,
        probe=lambda m: _pg_attempt(conn, "fts", lambda: _pg_fts(
            conn, m, replace(filters, exclude_ids=()), 1, 0, sort)),
        retry=lambda m: _pg_attempt(conn, "trigram", lambda: _pg_trigram(
            conn, m, filters, limit, offset, sort)) or [],
        narrowed=bool(filters.exclude_ids))


def _pg_fts(conn: Connection, match: str, filters: _Filters, limit: int, offset: int,
            sort: str | None, folded: bool = False) -> list[SearchResult]:
    params: dict[str, Any] = {"limit": limit, "offset": offset, "cand": PG_RANK_CANDIDATES,
                              "hl": PG_HEADLINE_CHARS}
    tsq = pg_tsquery(match, params)
    if tsq is None:
        return []
    # Accent folding: the folded query matches the folded document; ``tsq`` ranks.
    match_q = pg_tsquery(match, params, "f", fold=True) if folded else None
    where = filters.sql(params)
    # The parser reads the headline text as it read the document: each ASCII punctuation run
    # is fenced with U+0001 (a boundary for the parser in every locale), removed afterwards.
    params["fence"] = _PG_FENCE + "\\&" + _PG_FENCE
    bitmap = folded or _pg_few_matches(conn, match)
    page = (q.pg_fts_page(match_q, where, sort, folded=True, rank_tsq=tsq, bitmap=bitmap)
            if match_q else q.pg_fts_page(tsq, where, sort, bitmap=bitmap))
    rows = conn.execute(sa.text(page), params).fetchall()
    return [_result(r, _pg_join_marks(r[8]), "fts") for r in rows]


def _pg_few_matches(conn: Connection, match: str) -> bool:
    """True when the document statistics bound the rows ``match`` can match by
    :data:`PG_BITMAP_ROWS`: per OR-group, the rarest word of its positive terms (a prefix
    term's last word bounds nothing); summed over the groups."""
    groups: list[list[str]] = [[]]
    bounded = [False]
    for tok, negate in operands(query_tokens(match)):
        if tok is None:
            groups.append([])
            bounded.append(False)
            continue
        if negate:
            continue
        words = _PG_WORD_RE.findall(bare_token(tok).lower())
        bounded[-1] = True
        groups[-1] += words[:-1] if tok.endswith("*") else words
    total = 0.0
    for words, positive in zip(groups, bounded):
        if not positive:
            continue
        rows = element_rows(conn, DOCUMENT_WORDS, words)
        if rows is None:
            return False
        total += rows
    return total <= PG_BITMAP_ROWS


def _pg_join_marks(snippet: Any) -> Any:
    """``>>>read<<<_>>>file<<<`` ⇒ ``>>>read_file<<<``: ts_headline marks each lexeme of a
    phrase the parser split at punctuation; FTS5's snippet marks the phrase as one span."""
    if not isinstance(snippet, str):
        return snippet
    return _PG_SPLIT_MARKS_RE.sub(r"\1", snippet.replace(_PG_FENCE, ""))


def _pg_trigram(conn: Connection, match: str, filters: _Filters, limit: int, offset: int,
                sort: str | None) -> list[SearchResult]:
    return _substrings(conn, "trigram", like_groups(match), q.PG_TRIGRAM_COLS,
                       lambda matches, where: q.pg_trigram_page(matches, where, sort),
                       filters, limit, offset)


# -------------------------------------------------------------------------------------
# Context window (§7.3)
# -------------------------------------------------------------------------------------


def _attach_context(conn: Connection, hits: list[SearchResult],
                    include_inactive: bool) -> list[SearchResult]:
    try:
        ctx = fetch_context(conn, [(h.id, h.session_id, h.timestamp) for h in hits
                                   if h.id is not None and h.session_id is not None
                                   and h.timestamp is not None], include_inactive)
    except sa.exc.DBAPIError as exc:
        log.warning("search context unavailable: %s", exc.orig)
        ctx = {}
    return [replace(h, context=ctx.get(h.id, ())) for h in hits]  # type: ignore[arg-type]


def fetch_context(conn: Connection, hits: Sequence[tuple[int, str, float]],
                  include_inactive: bool = False) -> dict[int, tuple[ContextMessage, ...]]:
    """Previous and next message of each hit's session, by ``(timestamp, id)`` order.

    One statement per 500 hits, each neighbour found through ``messages(session_id,
    timestamp)``; neighbour content is read as a bounded prefix, decoded, multimodal parts
    flattened to their text and cut to 200 characters.
    """
    out: dict[int, tuple[ContextMessage, ...]] = {}
    pg = conn.dialect.name == "postgresql"
    prefix = enc.content_prefix(conn.dialect.name)
    for start in range(0, len(hits), CONTEXT_CHUNK):
        chunk = hits[start:start + CONTEXT_CHUNK]
        # The SQLite marker (it starts with NUL) is compared and cut as bytes.
        params: dict[str, Any] = {"jp": prefix.encode() if not pg else prefix,
                                  "jl": len(prefix.encode()) if not pg else len(prefix),
                                  "jn": _CONTEXT_JSON_PREFIX,
                                  "cn": CONTEXT_CHARS}
        for k, (hid, sid, ts) in enumerate(chunk):
            params.update({f"h{k}": hid, f"s{k}": sid, f"t{k}": ts})
        rows = conn.execute(sa.text(q.context_neighbours(len(chunk), include_inactive,
                                                         postgresql=pg)), params).fetchall()
        for hid, _side, role, content in rows:
            out.setdefault(hid, ())
            out[hid] = out[hid] + (ContextMessage(role, _flatten(content, prefix)),)
    return out


def _flatten(raw: Any, prefix: str = enc.JSON_CONTENT_PREFIX) -> str:
    if raw is None:
        return ""
    if not isinstance(raw, str):
        raw = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    if raw.startswith(prefix):
        body = raw[len(prefix):]
        try:
            parsed = json.loads(body)
            texts = _texts(parsed)
        except ValueError:  # prefix cut inside the JSON: recover "text" values
            texts = [t for t in (_json_string(m) for m in re.findall(
                r'"text"\s*:\s*"((?:[^"\\]|\\.)*)"', body)) if t]
        raw = " ".join(texts) if texts else "[multimodal content]"
    return raw[:CONTEXT_CHARS]


def _json_string(body: str) -> str:
    try:
        value = json.loads('"' + body + '"')
    except ValueError:
        return ""
    return value if isinstance(value, str) else ""


def _texts(parsed: Any) -> list[str]:
    if isinstance(parsed, str):
        return [parsed]
    if isinstance(parsed, dict):
        t = parsed.get("text")
        return [t] if isinstance(t, str) else []
    if isinstance(parsed, list):
        return [t for p in parsed for t in _texts(p)]
    return []
