"""PostgreSQL execution of message search (docs/sessions.md §7.2; issue 16): the plan of
:func:`hermes_data.sessions.search.plan.plan_search` run against the stored ``tsvector``, the
``pg_trgm``, accent-folded, CJK-gram and symbol-gram GIN indexes (see the module docstring
of :mod:`hermes_data.sessions.search.messages`). Every SQL text is in
:mod:`hermes_data.sessions.search.sql`.
"""

from __future__ import annotations

import logging
import re
from dataclasses import replace
from typing import Any, Callable, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from hermes_data.connectivity import server_fault
from hermes_data.locking import PG_LOCK_KINDS, is_lock_conflict
from hermes_data.sessions.search import cjk
from hermes_data.sessions.search.stats import DOCUMENT_WORDS, SYMBOL_GRAMS, element_rows, joint_rows, table_rows
from hermes_data.sessions.search.execute import (Filters, Tier, combine_tiers, like_search, or_trigram,
                          result_row, substring_search, tier_list)
from hermes_data.sessions.search.plan import (HIGHLIGHT_END, HIGHLIGHT_START, LikeTerm, SearchPlan, SearchResult,
                          bare_token, like_groups, literal_word_phrase, operands, query_tokens)
from hermes_data.sessions.search.capabilities import read_capabilities
from hermes_data.sessions.search import cjk_sql as qc
from hermes_data.sessions.storage.fts import cjk_sql as qi
from hermes_data.sessions.search import sql as q
from hermes_data.sessions.search.sql import pg_tsquery

log = logging.getLogger("hermes_data.sessions.search.messages")
_T = TypeVar("_T")

# -------------------------------------------------------------------------------------
# PostgreSQL execution
# -------------------------------------------------------------------------------------

#: The literal tier takes its candidates from the symbol-gram index (s08) when its rarest
#: gram is in at most this many rows (``search_stats.element_rows``): ~7 µs a candidate. Above,
#: a literal of symbols only (``...``, ``((``) is itself common — a newest-first scan stops
#: at the page sooner — and a literal with words keeps ``pg_trgm`` and the word index
#: (``flags.``: 2,600 trigram candidates against 30,000 gram ones; a common ``it's`` stops
#: early).
PG_GRAM_CANDIDATES = 1000
PG_GRAM_CANDIDATES_WORDS = 3000
#: A word-tier page reads its candidates from the GIN index and sorts them (instead of
#: walking the ids backwards) when the statistics bound its matches by this many rows.
PG_BITMAP_ROWS = 5000
#: A phrase (a quoted run of two or more words) reads its candidates from the GIN index when
#: its words' joint rows (:func:`search_stats.joint_rows`: the rows the index's ``AND`` returns,
#: which the heap rechecks for adjacency) are at most this many. GIN keeps no positions: a
#: phrase of two common words that is rare as a phrase (``"with file"``: 21,000 and 32,000
#: rows, 5,300 both, 11 the phrase) walked all 200,000 rows (110 ms; the GIN index 27 ms),
#: while a common one (``"of the"``, ``"to be"``: joint 27,000 / 9,800) stops early (14–22 ms;
#: the GIN index 65–155 ms). The walk's worst case grows with the table, so the bound is at
#: least :data:`PG_PHRASE_BITMAP_SHARE` of the table's rows: at 2,000,000 messages
#: ``"is the string"`` (60,000 rows hold the three words, 749 the phrase) walked every row,
#: 2.5 s; from the GIN index 0.3–0.5 s (benchmarks/README, scale.py round 4).
PG_PHRASE_BITMAP_ROWS = 8000
#: … or this share of the table's rows, whichever is larger (8,000 at 200,000 rows).
PG_PHRASE_BITMAP_SHARE = 0.04
#: Short CJK mixed with Latin tokens (:func:`_pg_mixed`): up to this many candidates are
#: verified without the windowed pre-scan, which costs ~40 ms when it does not fill the page
#: (twelve ``ILIKE`` over 4,096 rows for ``qRm UR8日 西AK3R2G gLL``; its candidates: 3 ms).
PG_MIXED_CANDIDATES = 2000
#: … and a first pre-scan of this many newest ids answers a common token (``日志 error``: the
#: walk stops at the page, ~3 ms; counting its candidates first read ~30 ms of posting lists).
PG_MIXED_PRESCAN_ROWS = 512
_PG_WORD_RE = re.compile(r"[^\W_]+")
#: Three ASCII letters or digits in a row: ``pg_trgm`` extracts a trigram from the term in
#: any locale (whether a CJK or accented letter is a word character depends on the locale;
#: a term without a trigram would read the whole index).
_PG_TRIGRAM_RUN_RE = re.compile(r"[A-Za-z0-9]{3}")
#: Characters of a row ``ts_headline`` reads (a multi-MB tool row is never read whole).
PG_HEADLINE_CHARS = 8192
#: Parser boundary fenced around punctuation in the headline text (never a word character).
_PG_FENCE = "\x01"
_PG_SPLIT_MARKS_RE = re.compile(
    re.escape(HIGHLIGHT_END) + r"((?:[^\s\w]|_){1,3})" + re.escape(HIGHLIGHT_START))


def _pg_busy(exc: sa.exc.DBAPIError) -> bool:
    # PostgreSQL kinds only: a message-only driver error saying "busy" was never raised here.
    # A canceled statement or a lost server (hermes_data.connectivity) is no rejected route
    # either: search must never turn it into "no results"; the backend raises it typed.
    return is_lock_conflict(exc, kinds=PG_LOCK_KINDS) or server_fault(exc) is not None


def pg_search(conn: Connection, plan: SearchPlan, filters: Filters, limit: int,
               offset: int, sort: str | None) -> list[SearchResult]:
    """Run a plan on PostgreSQL: every statement under one savepoint (two round trips per
    search, not two per tier); when a statement is rejected, back to the savepoint and run
    the plan again with a savepoint per route (:func:`_pg_attempt`), so a rejected route
    yields no rows and the others still answer. A busy server is raised."""
    conn.exec_driver_sql(q.PG_CUSTOM_PLANS)  # transaction-scoped: this search's read
    try:
        with conn.begin_nested():  # the fast path: routes run directly (careful=False)
            return _pg_run_plan(conn, plan, filters, limit, offset, sort, careful=False)
    except sa.exc.DBAPIError as exc:
        if _pg_busy(exc):
            raise
        log.debug("PostgreSQL search statement rejected (%s); routes one by one", exc.orig)
    return _pg_run_plan(conn, plan, filters, limit, offset, sort, careful=True)


def _pg_attempt(conn: Connection, what: str, fn: Callable[[], _T], careful: bool = True
                ) -> _T | None:
    """Run one route in a savepoint: a rejected statement leaves the read transaction usable
    and yields ``None`` (logged at DEBUG; the caller answers ``[]``); a busy server is
    raised, never turned into "no results". ``careful`` False (:func:`pg_search`'s fast
    path) runs the route directly (a rejection rolls back to that path's savepoint and
    reruns the plan carefully)."""
    if not careful:
        return fn()
    try:
        with conn.begin_nested():
            return fn()
    except sa.exc.DBAPIError as exc:
        if _pg_busy(exc):
            raise
        log.debug("PostgreSQL search route %s failed: %s", what, exc.orig)
        return None


def _pg_run_plan(conn: Connection, plan: SearchPlan, filters: Filters, limit: int,
                 offset: int, sort: str | None, careful: bool = True) -> list[SearchResult]:
    def attempt(what: str, fn: Callable[[], _T]) -> _T | None:
        return _pg_attempt(conn, what, fn, careful)

    if plan.bigram:  # short CJK through the GIN gram index (docs/sessions-storage.md §3.9.3; else ILIKE)
        def grams() -> list[SearchResult] | None:
            rows = cjk.pg_bigram_search(conn, plan.groups, filters.sql, limit, offset, sort)
            return None if rows is None else [result_row(r, r[8], "bigram") for r in rows]
        hits = attempt("bigram", grams)
        if hits is not None:
            return hits
        hits = attempt("bigram", lambda: _pg_mixed(conn, plan, filters, limit, offset, sort))
        if hits is not None:
            return hits
    if plan.route in ("like", "cjk_like"):
        return attempt(plan.route,
                       lambda: like_search(conn, plan, filters, limit, offset, sort, postgresql=True)) or []
    if plan.route == "trigram":
        assert plan.match is not None
        match = plan.match
        return attempt("trigram", lambda: _pg_trigram(
            conn, match, filters, limit, offset, sort)) or []
    match_text, lit_text, phrase_text = plan.match, plan.literal, plan.phrase
    words: Tier | None = None if match_text is None else (
        lambda f, n, o: _pg_words(conn, plan, match_text, f, n, o, sort, careful))
    phrase: Tier | None = None if phrase_text is None else (
        lambda f, n, o: attempt("phrase", lambda: _pg_fts(
            conn, phrase_text, f, n, o, sort)) or [])
    folded: Tier | None = None if match_text is None or not plan.folded else (
        lambda f, n, o: attempt("folded", lambda: _pg_fts(
            conn, match_text, f, n, o, sort, folded=True)) or [])
    literal: Tier | None = None if lit_text is None else (
        lambda f, n, o: attempt("literal", lambda: _pg_literal(
            conn, lit_text, f, n, o, sort, plan.symbols)) or [])
    return combine_tiers(tier_list(plan, words, phrase, literal, sort, folded), filters, limit,
                    offset, sort)


def _pg_mixed(conn: Connection, plan: SearchPlan, filters: Filters, limit: int, offset: int,
              sort: str | None) -> list[SearchResult] | None:
    """Short CJK mixed with Latin tokens (``qRm 西AK3R2G``; issue 16 item 5) through indexes:
    the candidates of :func:`q.pg_mixed_candidates` verified by the scoped ILIKE page. A
    pre-scan of the newest :data:`PG_MIXED_PRESCAN_ROWS` ids first (a common token fills the
    page there); then, when the candidates (counted up to :data:`PG_MIXED_CANDIDATES`) are
    more, the windowed pre-scan of ``cjk.PRESCAN_ROWS`` ids. A group whose term has three ASCII
    letters or digits in a row takes the trigram indexes (content, tool columns), whether or
    not it also has CJK; another needs CJK (the gram index). ``None`` (the caller scans, as
    before) without the ``pg_trgm`` index, or when a group has neither — ``pg_trgm`` then has
    no trigram and would read its whole index (a 1–2-letter Latin token is common: the
    newest-first scan stops at the page). The rows equal the scan's."""
    if not read_capabilities(conn).trigram:
        return None
    grams: list[list[str]] = []
    latin: list[int] = []
    for i, group in enumerate(plan.groups):
        if len(group) != 1 or group[0].negated:
            return None  # (cjk_like groups are one positive term each)
        if _PG_TRIGRAM_RUN_RE.search(group[0].text):
            latin.append(i)  # (``UR8日``: its trigrams are rarer than the letter 日)
            continue
        g = cjk.pg_gram_groups([group])
        if g is None:
            return None
        grams += g
    params: dict[str, Any] = {"limit": limit, "offset": offset}
    matches = q.pattern_where(plan.groups, q.ILIKE_COLS, params)  # binds p{i} per group
    where = filters.sql(params)
    params.update({f"g{i}": g for i, g in enumerate(grams)})
    names = ([f"g{i}" for i in range(len(grams))], [f"p{i}" for i in latin])
    newest = qi.CjkIndexStatements.for_dialect("postgresql").MAX_MESSAGE_ID
    top = conn.exec_driver_sql(newest).scalar() if sort != "oldest" else None

    def prescan(window: int) -> list[SearchResult] | None:
        # The newest ``window`` ids: the page when it fills there or covers every id.
        params["floor"] = (top or 0) - window
        rows = qc.pg_bigram_page(qc.PRESCAN_RANGE, matches, where, sort).run(
            conn, params).fetchall()
        if len(rows) >= limit or params["floor"] <= 0:
            return [result_row(r, r[8], "bigram") for r in rows]
        return None

    if top is not None and (hits := prescan(PG_MIXED_PRESCAN_ROWS)) is not None:
        return hits  # a common token: the walk stops at the page
    params["cap"] = PG_MIXED_CANDIDATES + 1
    few = q.pg_mixed_count(*map(tuple, names)).run(conn, params).scalar_one() \
        <= PG_MIXED_CANDIDATES
    if not few and top is not None and (hits := prescan(cjk.PRESCAN_ROWS)) is not None:
        return hits
    rows_sql = q.pg_mixed_candidates(*names)
    rows = qc.pg_bigram_page(rows_sql, matches, where, sort).run(conn, params).fetchall()
    return [result_row(r, r[8], "bigram") for r in rows]


def _pg_literal(conn: Connection, literal: str, filters: Filters, limit: int, offset: int,
                sort: str | None, symbols: bool = False) -> list[SearchResult]:
    """The literal tier on PostgreSQL: ``ILIKE`` on the content (``pg_trgm``), narrowed by the
    literal's words on the stored document (:func:`literal_word_phrase`) and — ``symbols``,
    when the literal has a character that is no letter, digit or space — by its symbol
    grams (``messages_symbol_grams``, s08: the characters ``pg_trgm`` cannot see)."""
    params: dict[str, Any] = {"limit": limit, "offset": offset}
    grams = scan = False
    if symbols and has_symbol(literal):
        params["sg"] = literal
        words = any(ch.isalnum() for ch in literal)
        upper = element_rows(conn, SYMBOL_GRAMS, list(conn.execute(
            sa.text(q.PG_LITERAL_SYMBOL_GRAMS), {"sg": literal}).scalar() or ()))
        grams = upper is not None and upper <= (PG_GRAM_CANDIDATES_WORDS if words
                                                else PG_GRAM_CANDIDATES)
        scan = upper is not None and not grams and not words
    matches = q.pattern_where(((LikeTerm(literal),),),
                              q.PG_LITERAL_SCAN_COLS if scan else q.PG_TRIGRAM_COLS, params)
    phrase = None if grams else literal_word_phrase(literal)
    tsq = pg_tsquery(phrase, params, "w") if phrase else None
    where = filters.sql(params)
    rows = q.pg_literal_page(matches, where, sort, tsq, grams=grams).run(conn, params).fetchall()
    return [result_row(r, r[8], "literal") for r in rows]


def has_symbol(literal: str) -> bool:
    """True when ``literal`` holds a character that is neither a letter, a digit nor
    whitespace: the symbol-gram index (s08) narrows the literal tier's candidates. (A hint
    only: the grams are computed by the server on both sides.)"""
    return any(not (ch.isalnum() or ch.isspace()) for ch in literal)


def _pg_words(conn: Connection, plan: SearchPlan, match: str, filters: Filters, limit: int,
              offset: int, sort: str | None, careful: bool = True) -> list[SearchResult]:
    """The word tier on PostgreSQL: the stored tsvector, then the zero-result trigram
    fallback (``careful``: as :func:`_pg_attempt`)."""
    def attempt(what: str, fn: Callable[[], _T]) -> _T | None:
        return _pg_attempt(conn, what, fn, careful)

    hits = attempt("fts", lambda: _pg_fts(conn, match, filters, limit, offset, sort))
    if hits is None:
        return []  # rejected (as FTS5's OperationalError): no fallback, no error
    return or_trigram(
        hits, match, plan.trigram_fallback, offset,
        probe=lambda m: attempt("fts", lambda: _pg_fts(
            conn, m, replace(filters, exclude_ids=()), 1, 0, sort)),
        retry=lambda m: attempt("trigram", lambda: _pg_trigram(
            conn, m, filters, limit, offset, sort)) or [],
        narrowed=bool(filters.exclude_ids))


def _pg_fts(conn: Connection, match: str, filters: Filters, limit: int, offset: int,
            sort: str | None, folded: bool = False) -> list[SearchResult]:
    params: dict[str, Any] = {"limit": limit, "offset": offset, "cand": q.RANK_CANDIDATES,
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
    return [result_row(r, _pg_join_marks(r[8]), "fts") for r in rows]


def _pg_few_matches(conn: Connection, match: str) -> bool:
    """True when the document statistics bound the rows ``match`` can match by
    :data:`PG_BITMAP_ROWS`: per OR-group, the rarest word of its positive terms (a prefix
    term's last word bounds nothing); summed over the groups. Or, when the match holds a
    phrase, when that sum — a group with a phrase counted by its words' joint rows — is at
    most :data:`PG_PHRASE_BITMAP_ROWS`."""
    groups: list[list[str]] = [[]]
    bounded = [False]
    phrased = [False]
    for tok, negate in operands(query_tokens(match)):
        if tok is None:
            groups.append([])
            bounded.append(False)
            phrased.append(False)
            continue
        if negate:
            continue
        words = _PG_WORD_RE.findall(bare_token(tok).lower())
        bounded[-1] = True
        kept = words[:-1] if tok.endswith("*") else words
        phrased[-1] = phrased[-1] or (tok.startswith('"') and len(kept) > 1)
        groups[-1] += kept
    total = joint = 0.0
    for words, positive, phrase in zip(groups, bounded, phrased):
        if not positive:
            continue
        rows = element_rows(conn, DOCUMENT_WORDS, words)
        if rows is None:
            return False
        total += rows
        both = joint_rows(conn, DOCUMENT_WORDS, words) if phrase else None
        joint += rows if both is None else min(rows, both)
    if total <= PG_BITMAP_ROWS:
        return True
    if not any(phrased):
        return False
    table = table_rows(conn, DOCUMENT_WORDS) or 0.0
    return joint <= max(PG_PHRASE_BITMAP_ROWS, PG_PHRASE_BITMAP_SHARE * table)


def _pg_join_marks(snippet: Any) -> Any:
    """``>>>read<<<_>>>file<<<`` ⇒ ``>>>read_file<<<``: ts_headline marks each lexeme of a
    phrase the parser split at punctuation; FTS5's snippet marks the phrase as one span."""
    if not isinstance(snippet, str):
        return snippet
    return _PG_SPLIT_MARKS_RE.sub(r"\1", snippet.replace(_PG_FENCE, ""))


def _pg_trigram(conn: Connection, match: str, filters: Filters, limit: int, offset: int,
                sort: str | None) -> list[SearchResult]:
    return substring_search(conn, "trigram", like_groups(match), q.PG_TRIGRAM_COLS,
                       lambda matches, where: q.pg_trigram_page(matches, where, sort),
                       filters, limit, offset)


