"""Message search of the session store (docs/sessions.md §7.1–§7.3, layouts of docs/sessions.md §2.6–§2.7).

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
   trigram fallback, by relevance over the newest :data:`~.sql.RANK_CANDIDATES` matches
   that pass the filters, on both backends (PostgreSQL: equal ranks newest first; SQLite:
   oldest first, FTS5's own order, see ``sql.search.fts_ranked_page``); on PostgreSQL, when
   it does not fill the page, the accent-folded words follow (see below);
4. the literal tier again, **after** the words, when they do not fill the page and the text
   has ≥ 3 characters (``ell`` finds ``hello``; a query is always found inside a longer word).

So every hit holds the typed text, or holds — as words, case and diacritics folded — every
positive term of one OR-group of the sanitized query (CJK route: one of its tokens); this is
what ``tests/sessions/search/test_search_literal.py`` checks on both backends. With ``sort`` newest /
oldest the tiers are merged by timestamp (tier 4 joins only when the words do not fill the
page). Operators: ``AND``/``OR``/``NOT`` are operators only alone between two terms; alone,
or at an edge, they are words (``NOT`` finds "not"). The LIKE routes (``--role tool``, stale
index, no FTS5) read the typed text (:func:`literal_groups`): ``1=1`` and ``' OR 1=1 --`` are
text, not split or reinterpreted.

The first two (and the result types) live in :mod:`hermes_data.sessions.search.plan`, pure
and free of SQLAlchemy; every SQL text is in :mod:`hermes_data.sessions.search.sql`. This
module executes SQLite plans and dispatches (PostgreSQL:
:mod:`~hermes_data.sessions.search.postgres`; shared tiers and LIKE routes:
:mod:`~hermes_data.sessions.search.execute`; which indexes exist:
:mod:`~hermes_data.sessions.search.capabilities`), and re-exports the public names, so imports from
``hermes_data.sessions.search.messages`` keep working.

**PostgreSQL** (same contract, same result rows; :func:`search_messages` dispatches on the
connection's dialect). The plan is the same (:func:`plan_search`); the routes run against
the objects of s01_baseline and s02_pg_stored_tsvector instead of FTS5 tables:

* ``fts`` — the sanitizer's output compiled into a ``tsquery`` built from bound parameters
  (:func:`pg_tsquery`: a term is ``phraseto_tsquery('simple', regexp_replace(:t, SPLIT))``,
  a ``word*`` prefix puts ``:*`` on the term's last word, a phrase ``<->``; ``NOT`` ⇒
  ``&& !!``, ``OR`` ⇒ ``||``), matched against the stored generated column
  ``messages.fts_document`` (GIN index ``messages_fts_document``). Relevance: ``ts_rank``
  on that stored vector over the newest :data:`RANK_CANDIDATES` matches. Snippets:
  ``ts_headline`` over a :data:`PG_HEADLINE_CHARS`-character prefix, with the same
  punctuation boundaries made visible to the parser (so ``gateway`` is marked inside
  ``gateway/run.py``) and removed again from the snippet.
* ``trigram`` — ``m.content ILIKE '%tok%' ESCAPE '\'`` per token (the ``pg_trgm`` GIN index
  ``messages_fts_trgm`` serves it), over the rows the SQLite trigram index holds (no tool
  rows, no cron/subagent/delegate sessions); newest first.
* ``like`` / ``cjk_like`` — the same escaped LIKE compilation with ``ILIKE``. Short CJK
  (``cjk_like`` in the trigram scope) takes its candidates from indexes first and verifies
  them with that ``ILIKE``: ``messages_cjk_grams`` (s07) when every token has CJK; mixed
  with Latin tokens, a token with three ASCII letters or digits from ``messages_fts_trgm``
  and ``messages_tool_trgm`` (s10: ``tool_name`` / ``tool_calls``), the others from the
  grams; a 1–2-letter Latin token keeps the newest-first scan.

Tokenisation on PostgreSQL (``sql.PG_FTS_SPLIT``): every run of ASCII characters that are not
letters or digits is a word boundary — in the document and in every query term alike — so
``gateway/run.py``, ``user@host``, ``read_file`` split into unicode61's words and ``gateway``
finds them on the standard route. Non-ASCII punctuation is left to the 'simple' parser (a
boundary under a Unicode ``LC_CTYPE``). Case folds on both sides ('simple' lower-cases).
Diacritics fold exactly as FTS5's ``remove_diacritics 1`` folds them, character for
character (``cafe`` finds ``café`` and back; ``æ``, ``ß`` and ``©`` are not expanded): revision
s09_accent_fold's ``hermes_fold`` (a ``translate`` over a fixed mapping read off SQLite's
tokenizer, no extension) and the GIN index ``messages_fts_fold`` on the folded document
(:mod:`hermes_data.sessions.storage.fts.fold_sql`). The word tier matches the stored
``fts_document`` as typed; a *folded tier* follows it when it does not fill the page,
matching the folded query against the folded document (ranked with the unfolded query on the
stored document): a row matched only through folding ranks after the exact-accent rows.
(Matching the expression index first made common words slow: the planner filters a
backward id scan with it, recomputing ``hermes_fold``/``to_tsvector`` per row.)
The literal tier's ``ILIKE`` is narrowed by the literal's words on the stored document
(:func:`literal_word_phrase`): ``pg_trgm`` ignores punctuation, so ``[more]python`` alone
rechecks every row holding two common words. A literal holding punctuation, symbols or emoji
(``C++``, ``a -> b``, ``🚀``) uses the symbol-gram index of s08 (``hermes_symbol_grams``:
the symbol characters of ``lower(content)`` and every adjacent pair holding one) when its
rarest gram is rare by the index's statistics: the candidate ids come from the index alone,
``ILIKE`` verifies them; a literal of symbols only whose grams are common (``...``) walks
the newest rows without ``pg_trgm`` (which has no trigram for it and would read its whole
index). Each way returns the ``ILIKE`` rows (``tests/sessions/search/test_symbol_grams_pg.py``).
A database not yet upgraded to s09 (read-only handles do not upgrade) has no folded tier.

Execution (:mod:`~hermes_data.sessions.search.postgres`): the search's statements run under one
savepoint with custom plans (``SET LOCAL plan_cache_mode``: a prepared statement's generic plan
is blind to the pattern and the ``tsquery``); a rejected statement rolls back to it and the
plan runs again route by route, each in its own savepoint. The index set is read once per
engine (:mod:`~hermes_data.sessions.search.capabilities`), like the element statistics that choose how
a page finds its rows (never which rows). Remaining differences: the document is one text, so a
phrase may span from ``content`` into ``tool_name`` where FTS5's columns keep them apart; case
folding is each engine's own (FTS5's tables predate ~170 capitals PostgreSQL lowers, Cherokee
among them, and FTS5 also folds ``ς``, ``ſ``, ``µ`` and Greek symbol variants, which ``lower``
keeps); the 'simple' parser's word characters are not unicode61's (combining marks beyond the
25 FTS5 drops are separators there and letters here — Indic vowel signs —, private-use and
unassigned code points, superscripts and fractions the other way round).

Search never raises for any query text: a query FTS5 still rejects yields ``[]`` (logged at
DEBUG); a corrupt index falls back to LIKE (logged at WARNING). Only a database that stays
locked past the busy timeout raises — that is never turned into a silent "no results".
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import replace
from typing import Any, Iterable, Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from hermes_data.locking import is_lock_conflict
from hermes_data.sessions.core import encoding as enc
from hermes_data.sessions.search import cjk
from hermes_data.sessions.search import gap as fts_gap
from hermes_data.sessions.search.capabilities import forget_capabilities, read_capabilities
from hermes_data.sessions.search.execute import (Filters, Tier, combine_tiers, like_search, or_trigram,
                          result_row, substring_search, tier_list)
from hermes_data.sessions.search.postgres import PG_HEADLINE_CHARS, pg_search
from hermes_data.sessions.search.sql import RANK_CANDIDATES
from hermes_data.sessions.search.plan import (CONTEXT_CHARS, CONTEXT_CHUNK, HIGHLIGHT_END, HIGHLIGHT_START,
                          MAX_QUERY_CHARS, OPERATORS, RESULT_FIELDS, SORTS, ContextMessage,
                          LikeTerm, SearchCapabilities, SearchPlan, SearchResult, check_fields,
                          cjk_count, cjk_like_groups, has_cjk, like_groups, literal_groups,
                          literal_text, name_list, plan_search, query_tokens,
                          sanitize_fts_query, trigram_match, word_invisible)
from hermes_data.sessions.search import sql as q
from hermes_data.sessions.search.sql import pg_tsquery

__all__ = [
    "CONTEXT_CHARS", "CONTEXT_CHUNK", "HIGHLIGHT_END", "HIGHLIGHT_START", "MAX_QUERY_CHARS",
    "OPERATORS", "PG_HEADLINE_CHARS", "RANK_CANDIDATES", "RESULT_FIELDS", "SORTS",
    "ContextMessage", "LikeTerm", "SearchCapabilities", "SearchPlan", "SearchResult",
    "cjk_count", "fetch_context", "forget_capabilities", "has_cjk", "literal_groups",
    "literal_text", "pg_tsquery",
    "plan_search", "query_tokens", "read_capabilities", "sanitize_fts_query", "search_messages",
    "trigram_match", "word_invisible",
]

log = logging.getLogger("hermes_data.sessions.search.messages")

#: Bytes of a multimodal (JSON) neighbour read to recover its text parts.
_CONTEXT_JSON_PREFIX = 65536

def search_messages(conn: Connection, query: str | None, *,
                    source_filter: str | Iterable[str] | None = None,
                    exclude_sources: str | Iterable[str] | None = None,
                    role_filter: str | Iterable[str] | None = None,
                    limit: int = 20, offset: int = 0, sort: str | None = None,
                    include_inactive: bool = False,
                    fields: Sequence[str] | None = None) -> list[SearchResult]:
    """Search message rows for ``query`` (docs/sessions.md §7.2); never raises for any query text.

    Characters no stored text holds are replaced, not stripped, before planning: each lone
    surrogate becomes U+FFFD (what the store scrubs them to in ``content``, so the query
    finds a message written with the same text) and NUL a space (a word break); the same
    for the filter names. So a query or filter with them returns what the replaced text
    returns, on both backends (issue 31).

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
    filters = Filters(sources, name_list(exclude_sources), roles, include_inactive)
    caps = read_capabilities(conn)
    plan = plan_search(sanitized, caps, role_filter=roles, source_filter=sources,
                       literal=literal)
    log.debug("search %r -> %r via %s (%s)", query, sanitized, plan.route, plan.reason)
    if plan.route == "none" or (plan.route == "like" and not plan.groups):
        return []
    if conn.dialect.name == "postgresql":
        hits = pg_search(conn, plan, filters, limit, offset, sort)
    else:
        hits = _run_plan(conn, plan, filters, limit, offset, sort)
    if not hits:
        return []
    if "context" in names:
        hits = attach_context(conn, hits, include_inactive)
    if fields is not None:
        blank: dict[str, Any] = {n: None for n in RESULT_FIELDS if n not in names}
        hits = [replace(h, **blank) for h in hits]
    return hits


def _run_plan(conn: Connection, plan: SearchPlan, filters: Filters, limit: int, offset: int,
              sort: str | None) -> list[SearchResult]:
    if plan.bigram:  # short CJK through the CJK-bigram index when it can serve (else LIKE)
        rows = cjk.bigram_search(conn, plan.groups, filters.sql, limit, offset, sort)
        if rows is not None:
            return [result_row(r, r[8], "bigram") for r in rows]
    if plan.route in ("like", "cjk_like"):
        return like_search(conn, plan, filters, limit, offset, sort)
    if plan.route == "trigram":
        assert plan.match is not None
        return _sqlite_words(conn, plan, plan.match, filters, limit, offset, sort)
    match, lit_text, phrase_text = plan.match, plan.literal, plan.phrase
    words: Tier | None = None if match is None else (
        lambda f, n, o: _sqlite_words(conn, plan, match, f, n, o, sort))
    phrase: Tier | None = None if phrase_text is None else (
        lambda f, n, o: _fts_safe(conn, q.FTS_TABLE, phrase_text, f, n, o, sort))
    literal: Tier | None = None
    words_phrase = plan.literal_words
    if lit_text is not None and words_phrase is not None:
        literal = lambda f, n, o: _sqlite_literal(  # noqa: E731
            conn, q.FTS_TABLE, words_phrase, lit_text, f, n, o, sort)
    elif lit_text is not None and plan.literal_indexed:
        literal = lambda f, n, o: _sqlite_literal(  # noqa: E731
            conn, q.FTS_TRIGRAM_TABLE, q.literal_match(lit_text), lit_text, f, n, o, sort)
    elif lit_text is not None:
        literal = lambda f, n, o: substring_search(  # noqa: E731
            conn, "literal", ((LikeTerm(lit_text),),), q.LITERAL_COLS,
            lambda matches, where: q.literal_scan_page(matches, where, sort), f, n, o)
    return combine_tiers(tier_list(plan, words, phrase, literal, sort), filters, limit, offset, sort)


def _sqlite_literal(conn: Connection, table: str, match: str, literal: str,
                    filters: Filters, limit: int, offset: int,
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
        if is_lock_conflict(exc):
            raise  # busy, never "no results"
        log.debug("literal candidates %r on %s failed: %s", match, table, exc.orig)
        return []
    return [result_row(r, r[8], "literal") for r in rows]


def _sqlite_words(conn: Connection, plan: SearchPlan, match: str, filters: Filters,
                  limit: int, offset: int, sort: str | None) -> list[SearchResult]:
    """The word tier on SQLite: ``match`` on the plan's index (unicode61, or trigram for
    CJK), the zero-result trigram fallback, the LIKE route when the index is corrupt."""
    table = q.FTS_TRIGRAM_TABLE if plan.route == "trigram" else q.FTS_TABLE
    try:
        hits = _fts(conn, table, match, filters, limit, offset, sort)
    except sa.exc.OperationalError as exc:
        if is_lock_conflict(exc):
            raise  # the database is busy, not the query wrong: never a silent "no results"
        log.debug("FTS5 rejected %r on %s: %s", match, table, exc.orig)
        return []
    except sa.exc.DatabaseError as exc:
        log.warning("FTS index %s unusable (%s); answering through LIKE", table, exc.orig)
        like = SearchPlan("cjk_like" if plan.route == "trigram" else "like",
                          groups=(cjk_like_groups(match) if plan.route == "trigram"
                                  else like_groups(match)))
        return like_search(conn, like, filters, limit, offset, sort)

    def page(n: int, o: int, first: list[SearchResult] | None = None) -> list[SearchResult]:
        return or_trigram(
            _fts_safe(conn, table, match, filters, n, o, sort) if first is None else first,
            match, plan.trigram_fallback, o,
            probe=lambda m: _fts_safe(conn, table, m, replace(filters, exclude_ids=()), 1, 0,
                                      sort),
            retry=lambda m: _fts_safe(conn, q.FTS_TRIGRAM_TABLE, m, filters, n, o, sort),
            narrowed=bool(filters.exclude_ids))

    fallback = plan.trigram_fallback  # rows of a pending backfill window: docs/sessions-storage.md §3.6
    return fts_gap.supplement(conn, page(limit, offset, hits), like_groups(match), filters.sql,
                              limit, offset, sort,
                              lambda: fts_gap.match_count(conn, table, match, filters.sql, offset)
                              or (fts_gap.match_count(conn, q.FTS_TRIGRAM_TABLE, fallback,
                                                      filters.sql, offset) if fallback else 0),
                              lambda r: result_row(r, r[8], "gap"), scoped=plan.route == "trigram",
                              refetch=lambda n: page(n, 0))


def _fts_safe(conn: Connection, table: str, match: str, filters: Filters, limit: int,
              offset: int, sort: str | None) -> list[SearchResult]:
    try:
        return _fts(conn, table, match, filters, limit, offset, sort)
    except sa.exc.DatabaseError as exc:
        if is_lock_conflict(exc):
            raise
        log.debug("FTS5 query %r on %s failed: %s", match, table, exc.orig)
        return []


def _fts(conn: Connection, table: str, match: str, filters: Filters, limit: int, offset: int,
         sort: str | None) -> list[SearchResult]:
    """A page of ``MATCH match`` on ``table``, snippets made by FTS5 for the page only."""
    params: dict[str, Any] = {"q": match, "limit": limit, "offset": offset}
    where = filters.sql(params)
    if sort in (None, "rank"):  # rank the newest RANK_CANDIDATES matches (as PostgreSQL)
        params["cand"] = q.RANK_CANDIDATES
        page = q.fts_ranked_page(table, where)
    else:
        page = q.fts_page(table, where, sort)
    rows = conn.execute(sa.text(page), params).fetchall()
    if not rows:
        return []
    # Snippets for the page only (computed by FTS5 from the indexed text, never in Python).
    ids = [r[0] for r in rows]
    sp: dict[str, Any] = {"q": match}
    sp.update({f"i{k}": v for k, v in enumerate(ids)})
    snippets: dict[Any, Any] = dict(conn.execute(sa.text(q.fts_snippets(table, len(ids))), sp).fetchall())
    route = "trigram" if table == q.FTS_TRIGRAM_TABLE else "fts"
    return [result_row(r, snippets.get(r[0]), route) for r in rows]


# -------------------------------------------------------------------------------------
# Context window (docs/sessions.md §7.3)
# -------------------------------------------------------------------------------------


def attach_context(conn: Connection, hits: list[SearchResult],
                   include_inactive: bool) -> list[SearchResult]:
    """``hits`` with their surrounding messages (:func:`fetch_context`); a database error
    while reading them is logged and leaves the context empty, never failing the search."""
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
        rows = q.context_neighbours(len(chunk), include_inactive, postgresql=pg).run(
            conn, params).fetchall()
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
