"""Every SQL text of message search (docs/sessions.md §7.2–§7.3), both dialects.

Named constants and small builders. A builder assembles its statement only from the fixed
texts of this module and of :mod:`hermes_data.sessions.sql` (table names from
:data:`FTS_VIRTUAL_TABLES`, orders from fixed maps, placeholder names it makes itself);
every value — query text, terms, filters, limits — is a bound parameter, added to the
``params`` mapping the caller passes and never formatted into the text.

:mod:`hermes_data.sessions.search.messages` runs these statements; the pure planning (sanitizer,
tokens, routes) is :mod:`hermes_data.sessions.search.plan`.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, Callable, Sequence, Union

import sqlalchemy as sa

from hermes_data.sessions.core import encoding as enc
from hermes_data.sessions.schema import messages, sessions
from hermes_data.sessions.search.plan import HIGHLIGHT_END, HIGHLIGHT_START, LikeTerm, bare_token, operands, query_tokens
from hermes_data.sessions.sql import J
from hermes_data.sessions.sql.constructs import bp, const, not_hidden
from hermes_data.sessions.storage.fts.ddl import FTS_VIRTUAL_TABLES, PG_FTS_DOCUMENT, PG_FTS_SPLIT
from hermes_data.sessions.storage.fts.fold_sql import pg_folded_document
from hermes_data.statements import DriverPrepared

# -------------------------------------------------------------------------------------
# Search state (read_capabilities)
# -------------------------------------------------------------------------------------

#: PostgreSQL: plan every statement of this search transaction for its own values. psycopg
#: prepares a statement text run five times on a connection, and the server may then switch
#: to a generic plan — blind to the ``ILIKE`` pattern and the ``tsquery``, whose row counts
#: decide between an index and a newest-first walk (the same text ran 9 ms or 700 ms).
PG_CUSTOM_PLANS = "SET LOCAL plan_cache_mode = force_custom_plan"
#: SQLite: which of the two FTS5 tables exist.
SQLITE_FTS_TABLES = ("SELECT name FROM sqlite_master WHERE type = 'table' "
                     "AND name IN ('messages_fts', 'messages_fts_trigram')")
#: PostgreSQL: which of the two GIN indexes of the head exist.
PG_SEARCH_INDEXES = (
    "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() "
    "AND tablename = 'messages' AND indexname IN ('messages_fts_document', 'messages_fts_trgm', "
    "'messages_fts_fold', 'messages_cjk_grams', 'messages_symbol_grams')")

# -------------------------------------------------------------------------------------
# Fragments shared by the routes
# -------------------------------------------------------------------------------------

#: Columns of a hit row, in the order ``search._result`` reads them (a snippet may follow).
HIT_COLS = ("m.id, m.session_id, m.role, m.timestamp, m.tool_name, s.source, s.model, "
            "s.started_at")
#: LIKE route: a term matches any of these columns (``{p}`` stands for its parameter).
LIKE_COLS = ("COALESCE(m.content, '') LIKE {p} ESCAPE '\\'",
             "COALESCE(m.tool_name, '') LIKE {p} ESCAPE '\\'",
             "COALESCE(m.tool_calls, '') LIKE {p} ESCAPE '\\'")
#: PostgreSQL: the same columns, case-insensitively (SQLite's LIKE already folds ASCII).
ILIKE_COLS = tuple(c.replace(" LIKE ", " ILIKE ") for c in LIKE_COLS)
#: PostgreSQL trigram route: the content only (the ``pg_trgm`` GIN index serves it).
PG_TRIGRAM_COLS = ("m.content ILIKE {p} ESCAPE '\\'",)
#: PostgreSQL literal tier of a literal without a letter or digit (``...``, ``((``): pg_trgm has
#: no trigram for it (its index would be read whole), so the content is compared through
#: ``COALESCE`` — the same rows, no index — and the newest-first walk stops at the page.
PG_LITERAL_SCAN_COLS = ILIKE_COLS[:1]
#: LIKE-route snippet: a 120-character window around the first term (never the whole
#: content); PostgreSQL finds the term case-insensitively, like the match itself.
LIKE_SNIPPET = "substr(m.content, max(1, instr(m.content, :first) - 40), 120)"
PG_LIKE_SNIPPET = ("substr(m.content, greatest(1, strpos(lower(m.content), lower(:first)) - 40), "
                   "120)")


def _marked_window(pos: str) -> str:
    # A 120-character window around the literal at ``pos`` (1-based, 0 = not found), the
    # literal between the FTS highlight markers, as the word routes' snippets show it.
    return (f"CASE WHEN {pos} > 0 THEN substr(m.content, max(1, {pos} - 40), "
            f"{pos} - max(1, {pos} - 40)) || '{HIGHLIGHT_START}' || "
            f"substr(m.content, {pos}, length(:first)) || '{HIGHLIGHT_END}' || "
            f"substr(m.content, {pos} + length(:first), 80 - length(:first)) "
            "ELSE substr(m.content, 1, 120) END")


#: Literal-tier snippets (the scan and PostgreSQL): the literal marked, found as the match
#: finds it (SQLite ``LIKE`` folds ASCII case, ``lower`` too; PostgreSQL ``ILIKE``/``lower``).
LITERAL_SNIPPET = _marked_window("instr(lower(m.content), lower(:first))")
PG_LITERAL_SNIPPET = _marked_window("strpos(lower(m.content), lower(:first))").replace(
    "max(", "greatest(")
#: Sessions whose rows the SQLite trigram index holds (TRI_SESSION of sql, PostgreSQL twin).
PG_TRI_SESSION = ("s.source NOT IN ('cron', 'subagent') "
                  f"AND {J('s.model_config', '_delegate_from', 'postgresql')} IS NULL")
#: SQLite twin: the sessions of the trigram index, for the literal tier's scan.
TRI_SESSION_S = ("s.source NOT IN ('cron', 'subagent') "
                 f"AND {J('s.model_config', '_delegate_from')} IS NULL")
#: Options of ``ts_headline``: the highlight markers of FTS5 snippets.
PG_HEADLINE_OPTS = (f"StartSel={HIGHLIGHT_START}, StopSel={HIGHLIGHT_END}, MaxWords=40, "
                    "MinWords=15")

_FILTERS = (("src", "s.source", "IN"), ("xsrc", "s.source", "NOT IN"), ("role", "m.role", "IN"))


def pattern_where(groups: Sequence[Sequence[LikeTerm]], templates: Sequence[str],
                  params: dict[str, Any]) -> str:
    """``(… AND …) OR (…)`` over the term groups: each term binds an escaped ``%term%``
    parameter matched by any of ``templates`` (``{p}`` stands for the parameter), negated
    terms are NOT-ed. Also binds ``first``, the first positive term (the snippet window)."""
    ors = []
    n = 0
    for group in groups:
        ands = []
        for term in group:
            key = f"p{n}"
            n += 1
            params[key] = "%" + enc.escape_like(term.text) + "%"
            clause = "(" + " OR ".join(t.format(p=":" + key) for t in templates) + ")"
            ands.append(f"NOT {clause}" if term.negated else clause)
        ors.append("(" + " AND ".join(ands) + ")")
    params["first"] = next(t.text for g in groups for t in g if not t.negated)
    return " OR ".join(ors)


def filter_where(params: dict[str, Any], *, sources: Sequence[str], excluded: Sequence[str],
                 roles: Sequence[str], include_inactive: bool,
                 exclude_ids: Sequence[int] = ()) -> str:
    """The row filters every route applies: hidden rows never, rewound rows unless
    ``include_inactive``, session sources and message roles bound one parameter each.
    ``exclude_ids``: message ids an earlier tier of the same search already returned."""
    parts = ["COALESCE(m.display_kind, '') <> 'hidden'"]
    if not include_inactive:
        parts.append("(m.active = 1 OR m.compacted = 1)")
    for (key, col, op), values in zip(_FILTERS + (("xid", "m.id", "NOT IN"),),
                                      (sources, excluded, roles, exclude_ids)):
        if values:
            names = [f"{key}{i}" for i in range(len(values))]
            params.update(zip(names, values))
            parts.append(f"{col} {op} ({', '.join(':' + n for n in names)})")
    return " AND ".join(parts)


def _placeholders(prefix: str, count: int) -> str:
    return ", ".join(f":{prefix}{k}" for k in range(count))


def _direction(sort: str | None) -> str:
    return "ASC" if sort == "oldest" else "DESC"


# -------------------------------------------------------------------------------------
# LIKE routes (both dialects)
# -------------------------------------------------------------------------------------


#: Distinct hit-page shapes kept compiled (a shape: the snippet, the fragments of its
#: ``WHERE`` — term and filter counts — and its order; never a bound value).
PAGE_CACHE_SIZE = 512


def not_tool(m: Any) -> list[Any]:
    """``m.role <> 'tool'`` over the alias ``m`` (spelled as the indexes' scopes spell it)."""
    return [m.c.role.op("<>", precedence=5, is_comparison=True)(const("tool"))]


def gap_window(m: Any) -> list[Any]:
    """``m.id > :gap_lo AND m.id <= :gap_hi``: the unindexed window of an FTS backfill."""
    return [m.c.id > bp("gap_lo"), m.c.id <= bp("gap_hi")]


#: A term of a hit page's ``WHERE``: a named text fragment of the route (its ``:name`` binds
#: bound from the call's params) or a module-level function returning Core predicates over
#: the alias ``m`` (:func:`not_tool`, :func:`gap_window`).
Cond = Union[str, Callable[[Any], list[Any]]]


@lru_cache(maxsize=PAGE_CACHE_SIZE)
def hit_page(snippet: str, where: tuple[Cond, ...], order: tuple[str, ...], descending: bool,
             *, cte: str | None = None) -> DriverPrepared:
    """One page of hits over ``messages m JOIN sessions s`` (issue 32): the :data:`HIT_COLS`
    and ``snippet`` (a ninth column), rows where every term of ``where`` holds (in that
    order, :data:`Cond`), ordered by the ``messages`` columns ``order`` (``descending`` or
    ascending), ``LIMIT :limit OFFSET :offset``.

    A Core construct compiled once per dialect and shape (:data:`PAGE_CACHE_SIZE`): run it
    with ``.run(conn, params)``. The match predicates (LIKE groups, FTS/trigram/CJK-gram
    candidates), filters and snippet stay the route's named text fragments. ``cte``: a
    PostgreSQL ``WITH g AS MATERIALIZED (…)`` id list (:data:`PG_SYMBOL_GRAM_IDS`) the
    fragments read as ``g``."""
    def build() -> sa.Select:
        m, s = messages.alias("m"), sessions.alias("s")
        conds: list[Any] = []
        for term in where:
            conds += [sa.text(term)] if isinstance(term, str) else term(m)
        stmt = (sa.select(m.c.id, m.c.session_id, m.c.role, m.c.timestamp, m.c.tool_name,
                          s.c.source, s.c.model, s.c.started_at, sa.text(snippet))
                .select_from(m.join(s, s.c.id == m.c.session_id)).where(*conds)
                .order_by(*(m.c[c].desc() if descending else m.c[c].asc() for c in order))
                .limit(bp("limit")).offset(bp("offset")))
        if cte is not None:
            # The symbol-gram id list (a hermes_symbol_grams GIN expression) as a CTE.
            ids = sa.text(cte).columns(sa.column("id")).cte("g").prefix_with("MATERIALIZED")
            stmt = stmt.add_cte(ids)
        return stmt
    return DriverPrepared("search_hit_page", build)


def like_page(matches: str, where: str, sort: str | None, *, postgresql: bool,
              scoped: bool = False) -> DriverPrepared:
    """One page of LIKE hits (``matches`` from :func:`pattern_where`, ``where`` from
    :func:`filter_where`), with the snippet window as a ninth column. ``scoped``: only the
    rows of the trigram / CJK-bigram indexes (no tool rows, no cron/subagent/delegate
    sessions) — PostgreSQL's short-CJK route, the scope of SQLite's CJK-bigram index.

    Newest first by id (insertion order, the store's transcript order; docs/sessions.md §7.2 says
    timestamp): walking the rowid b-tree lets LIMIT stop the scan at the first page of
    matches — a common 2-character CJK term on 200,000 rows: ~95 ms → ~2 ms."""
    snippet = PG_LIKE_SNIPPET if postgresql else LIKE_SNIPPET
    scope = (not_tool, PG_TRI_SESSION if postgresql else TRI_SESSION_S) if scoped else ()
    return hit_page(snippet, (*scope, f"({matches})", where), ("id",), sort != "oldest")


#: SQLite literal tier below the trigram length: the content matched as a substring, over the
#: rows the trigram index holds (non-tool rows of trigram-eligible sessions).
LITERAL_COLS = ("COALESCE(m.content, '') LIKE {p} ESCAPE '\\'",)


def _time_or_id(sort: str | None) -> tuple[tuple[str, ...], bool]:
    # newest/oldest: by timestamp then id; relevance: newest id first.
    if sort in ("newest", "oldest"):
        return ("timestamp", "id"), sort == "newest"
    return ("id",), True


def literal_scan_page(matches: str, where: str, sort: str | None) -> DriverPrepared:
    """SQLite literal tier by scan (a 1–2-character literal, or no trigram index): newest
    first by id, so LIMIT stops the scan at the first page of matches."""
    return hit_page(LITERAL_SNIPPET, (not_tool, f"({matches})", TRI_SESSION_S, where),
                    *_time_or_id(sort))


def literal_candidates_page(table: str, matches: str, where: str, sort: str | None) -> str:
    """SQLite literal tier: candidates ``<table> MATCH :q`` (the trigram index with the
    literal as one phrase, or the word index with its words — a long literal), checked by
    ``matches`` (``LIKE`` on the content: exact on every FTS layout, the legacy inline one
    included), over the rows the trigram index holds; newest first by rowid (FTS5 consumes
    that order, LIMIT stops the scan: a common literal ~59 ms by m.id, ~0.5 ms by rowid)."""
    table = _fts_table(table)
    direction = _direction(sort)
    order = (f"m.timestamp {direction}, m.id {direction}" if sort in ("newest", "oldest")
             else f"{table}.rowid DESC")
    return (f"SELECT {HIT_COLS}, {LITERAL_SNIPPET} FROM {table} "
            f"JOIN messages m ON m.id = {table}.rowid JOIN sessions s ON s.id = m.session_id "
            f"WHERE {table} MATCH :q AND m.role <> 'tool' AND ({matches}) "
            f"AND {TRI_SESSION_S} AND {where} ORDER BY {order} LIMIT :limit OFFSET :offset")


def literal_match(literal: str) -> str:
    """Trigram MATCH text of the literal tier: the literal as one phrase (quotes doubled)."""
    return '"' + literal.replace('"', '""') + '"'


#: PostgreSQL (revision s08_symbol_grams): the ids of the rows whose symbol grams contain
#: every symbol gram of the literal ``:sg`` — the same function on both sides, so they are a
#: superset of the rows whose content holds the literal (``ILIKE`` verifies them). Asked on
#: its own (a materialized CTE): the GIN index answers ``@>`` exactly, so the function is
#: never evaluated per row — beside another index (a ``BitmapAnd`` with ``pg_trgm``, whose
#: recheck evaluates every qual) it cost ~0.3 ms a row.
PG_SYMBOL_GRAM_IDS = ("SELECT c.id FROM messages c WHERE hermes_symbol_grams(c.role, c.content) "
                      "@> hermes_symbol_grams('user', CAST(:sg AS text))")
#: The symbol grams of a literal, computed by the server (the same function as the index's).
PG_LITERAL_SYMBOL_GRAMS = "SELECT hermes_symbol_grams('user', CAST(:sg AS text))"
#: Element statistics (``ANALYZE``) of an array-like column — ``(:t, :a)`` is
#: ``('messages_symbol_grams', 'hermes_symbol_grams')`` (the symbol-gram index expression) or
#: ``('messages', 'fts_document')`` (the stored document's lexemes): the most common
#: elements, their frequencies, and the table's row estimate. Read once per engine
#: (``search_caps``): they choose how a page finds its rows, never which rows.
PG_ELEMENT_STATS = (
    "SELECT CAST(CAST(s.most_common_elems AS text) AS text[]), s.most_common_elem_freqs, "
    "(SELECT c.reltuples FROM pg_class c WHERE c.oid = CAST('messages' AS regclass)) "
    "FROM pg_stats s WHERE s.schemaname = current_schema() AND s.tablename = :t "
    "AND s.attname = :a")


def pg_literal_page(matches: str, where: str, sort: str | None, tsq: str | None, *,
                    grams: bool = False) -> DriverPrepared:
    """PostgreSQL literal tier: the trigram page of the literal (``matches``).

    * ``grams``: the candidates are :data:`PG_SYMBOL_GRAM_IDS` (a literal with punctuation,
      symbols or emoji whose grams are rare: ``C++``, ``a -> b``, ``🚀`` — characters pg_trgm
      cannot see);
    * otherwise narrowed by ``tsq`` on the stored document when the literal has words
      (pg_trgm ignores punctuation: ``[more]python`` alone would recheck every row holding
      two common words) — ``matches`` built on :data:`PG_LITERAL_SCAN_COLS` walks the
      newest rows instead."""
    if grams:
        return pg_trigram_page(f"m.id IN (SELECT g.id FROM g) AND ({matches})", where,
                               sort, marked=True, cte=PG_SYMBOL_GRAM_IDS)
    cand = f"{PG_FTS_DOCUMENT} @@ {tsq} AND " if tsq else ""
    return pg_trigram_page(f"{cand}({matches})", where, sort, marked=True)


def pg_trigram_page(matches: str, where: str, sort: str | None, *,
                    marked: bool = False, cte: str | None = None) -> DriverPrepared:
    """PostgreSQL trigram route: ILIKE on the content over the rows the SQLite trigram index
    holds (no tool rows, no cron/subagent/delegate sessions). ``marked``: the literal tier's
    snippet (the literal between highlight markers); ``cte``: see :func:`hit_page`."""
    snippet = PG_LITERAL_SNIPPET if marked else PG_LIKE_SNIPPET
    return hit_page(snippet, (not_tool, f"({matches})", PG_TRI_SESSION, where),
                    *_time_or_id(sort), cte=cte)


#: PostgreSQL short-CJK route, a group of gram ``text[]`` ``:g{i}`` (``messages_cjk_grams``).
# not Core: an arm of the candidates' UNION ALL id list, spliced with the others as one
# text fragment into the page's ``m.id = ANY(ARRAY(…))`` (the GIN/trigram-served arms)
_PG_MIXED_GRAMS = ("SELECT c.id FROM messages c WHERE c.role <> 'tool' AND hermes_cjk_grams("
                   "c.role, c.content, c.tool_name, c.tool_calls) @> CAST(:{g} AS text[])")
# not Core: an arm of the candidates' id list (text), served by ``messages_fts_trgm``
#: … a Latin group's content: the bare column, so ``messages_fts_trgm`` (``content
#: gin_trgm_ops`` over non-tool rows) serves it (``COALESCE(content, '')`` hid the index; a
#: NULL content matches no positive term either way).
_PG_MIXED_CONTENT = ("SELECT c.id FROM messages c WHERE c.role <> 'tool' "
                     "AND c.content ILIKE :{p} ESCAPE '\\'")
#: … their tool columns (``messages_tool_trgm``, s10: two scans of the index OR-ed).
# not Core: an arm of the candidates' id list (text), served by ``messages_tool_trgm``
_PG_MIXED_TOOLS = ("SELECT c.id FROM messages c WHERE c.role <> 'tool' "
                   "AND (c.tool_name IS NOT NULL OR c.tool_calls IS NOT NULL) AND ({ors})")


def pg_mixed_candidates(grams: Sequence[str], latin: Sequence[str]) -> str:
    """PostgreSQL: ``m.id = ANY(ARRAY(…))`` over a superset of the scoped rows matching any
    group of a short-CJK query whose groups mix CJK and Latin (issue 16 item 5): a CJK
    group's rows from the gram index (``grams``: its ``text[]`` parameter names), a group
    with a trigram's content rows from ``messages_fts_trgm`` and its tool-column rows from
    ``messages_tool_trgm`` (s10; ``latin``: the ``%term%`` parameter names). The
    page's core ILIKE predicate verifies every candidate, so the rows equal the scan's."""
    return f"m.id = ANY(ARRAY({_pg_mixed_ids(grams, latin)}))"


@lru_cache(maxsize=PAGE_CACHE_SIZE)
def pg_mixed_count(grams: tuple[str, ...], latin: tuple[str, ...]) -> DriverPrepared:
    """How many candidates :func:`pg_mixed_candidates` has, counted up to ``:cap`` (the
    index scans stop there): a Core count over the id list (a text fragment)."""
    def build() -> sa.Select:
        ids = (sa.text(f"{_pg_mixed_ids(grams, latin)} LIMIT :cap")
               .columns(sa.column("id")).subquery("x"))
        return sa.select(sa.func.count()).select_from(ids)
    return DriverPrepared("search_pg_mixed_count", build)


def _pg_mixed_ids(grams: Sequence[str], latin: Sequence[str]) -> str:
    parts = [_PG_MIXED_GRAMS.format(g=g) for g in grams]
    parts += [_PG_MIXED_CONTENT.format(p=p) for p in latin]
    if latin:
        ors = " OR ".join(f"c.{col} ILIKE :{p} ESCAPE '\\'" for p in latin
                          for col in ("tool_name", "tool_calls"))
        parts.append(_PG_MIXED_TOOLS.format(ors=ors))
    return " UNION ALL ".join(parts)


# -------------------------------------------------------------------------------------
# SQLite FTS5 routes
# -------------------------------------------------------------------------------------


#: The two FTS5 tables: the unicode61 index (standard route) and the trigram index.
FTS_TABLE = "messages_fts"
FTS_TRIGRAM_TABLE = "messages_fts_trigram"


def _fts_table(table: str) -> str:
    if table not in FTS_VIRTUAL_TABLES:
        raise ValueError(f"unknown FTS table {table!r}")
    return table


#: Relevance order ranks only the newest this-many matches that pass the filters, on both
#: backends (docs/sessions.md §7.2): a common word never ranks every matching row (FTS5
#: computed bm25 for all of them before the LIMIT: 100 ms–1 s at 2,000,000 messages).
RANK_CANDIDATES = 1000


def fts_ranked_page(table: str, where: str) -> str:
    """One page of hits of FTS5 ``table`` for ``MATCH :q`` in relevance order: the newest
    ``:cand`` matches that pass ``where``, best rank first, equal ranks oldest first (binds
    ``:q``, ``:cand``, ``:limit``, ``:offset`` and the filters'; no snippet: see
    :func:`fts_snippets`)."""
    table = _fts_table(table)
    # not Core: an FTS5 MATCH. FTS5 walks its doclist newest first for ORDER BY rowid DESC,
    # so the inner LIMIT stops after the candidates, and ``rank`` is computed for them only;
    # one walk (a separate floor statement walked the same range twice: 39 + 56 ms for a
    # common-word phrase at 2,000,000 messages).
    cols = ", ".join(c.split(".")[1] for c in HIT_COLS.split(", "))
    return (f"SELECT {cols} FROM (SELECT {HIT_COLS}, {table}.rank AS r FROM {table} "
            f"JOIN messages m ON m.id = {table}.rowid JOIN sessions s ON s.id = m.session_id "
            f"WHERE {table} MATCH :q AND {where} ORDER BY {table}.rowid DESC LIMIT :cand) "
            f"ORDER BY r, id LIMIT :limit OFFSET :offset")


def fts_page(table: str, where: str, sort: str) -> str:
    """One page of hits of FTS5 ``table`` for ``MATCH :q`` (no snippet: see
    :func:`fts_snippets`), newest or oldest first (``sort``); relevance order is
    :func:`fts_ranked_page`."""
    table = _fts_table(table)
    order = {"newest": f"m.timestamp DESC, {table}.rank",
             "oldest": f"m.timestamp ASC, {table}.rank"}[sort]
    return (f"SELECT {HIT_COLS} FROM {table} JOIN messages m ON m.id = {table}.rowid "
            f"JOIN sessions s ON s.id = m.session_id WHERE {table} MATCH :q AND {where} "
            f"ORDER BY {order} LIMIT :limit OFFSET :offset")


def fts_snippets(table: str, count: int) -> str:
    """``(rowid, snippet)`` of the ``count`` rows ``:i0 …`` of a page, for ``MATCH :q``
    (computed by FTS5 from the indexed text, never in Python)."""
    table = _fts_table(table)
    return (f"SELECT rowid, snippet({table}, -1, '{HIGHLIGHT_START}', '{HIGHLIGHT_END}', "
            f"'...', 40) FROM {table} WHERE {table} MATCH :q AND rowid IN "
            f"({_placeholders('i', count)})")


# -------------------------------------------------------------------------------------
# PostgreSQL full-text route
# -------------------------------------------------------------------------------------

_PG_LAST_WORD_RE = re.compile(r"[^\W_]+(?=[\W_]*$)")
_PG_WORD_CHAR_RE = re.compile(r"[^\W_]")


def _pg_prefix_quote(word: str) -> str:
    """``word`` as a prefix tsquery lexeme: ``'word':*`` (quotes doubled, backslashes escaped)."""
    return "'" + word.replace("\\", "\\\\").replace("'", "''") + "':*"


def pg_tsquery(sanitized: str, params: dict[str, Any], prefix: str = "t", *,
               fold: bool = False) -> str | None:
    """SQL ``tsquery`` expression for a sanitized query, every term a bound parameter.

    FTS5 precedence (NOT > AND > OR): ``OR`` starts a new group, terms of a group are AND-ed
    (``&&``), ``NOT x`` becomes ``&& !!x``. A term is split exactly as the stored document
    is (``regexp_replace`` with ``sql.PG_FTS_SPLIT``, then the 'simple' parser) and matched
    as a phrase: ``chat-send`` ⇒ ``'chat' <-> 'send'``, ``gateway/run.py`` ⇒ ``'gateway' <->
    'run' <-> 'py'``. A prefix term (``word*``, ``foo_ba*``, ``"some phra"*``) puts ``:*`` on
    its last word, as FTS5 does: ``'foo' <-> 'ba':*``. ``None`` when no positive term is
    left. ``fold``: every term passes through ``hermes_fold`` before it is split (the folded
    document of :mod:`.fold`)."""
    f = (lambda e: f"hermes_fold({e})") if fold else (lambda e: e)
    groups: list[list[str]] = [[]]
    n = 0
    for tok, negate in operands(query_tokens(sanitized)):
        if tok is None:
            groups.append([])
            continue
        text = bare_token(tok)
        last = _PG_LAST_WORD_RE.search(text) if tok.endswith("*") else None
        if not text.strip() or (tok.endswith("*") and last is None):
            continue
        key = f"{prefix}{n}"
        n += 1
        if last is not None:
            params[key] = _pg_prefix_quote(last.group(0))
            term = f"to_tsquery('simple', {f(':' + key)})"
            head = text[:last.start()]
            if _PG_WORD_CHAR_RE.search(head):
                params[key + "h"] = head
                split = f"regexp_replace({f(':' + key + 'h')}, '{PG_FTS_SPLIT}', ' ', 'g')"
                term = f"tsquery_phrase(phraseto_tsquery('simple', {split}), {term})"
        else:
            params[key] = text
            split = f"regexp_replace({f(':' + key)}, '{PG_FTS_SPLIT}', ' ', 'g')"
            term = f"phraseto_tsquery('simple', {split})"
        if negate and groups[-1]:
            groups[-1].append(f"!!{term}")
        elif not negate:
            groups[-1].append(term)
    ors = ["(" + " && ".join(g) + ")" for g in groups if any(not t.startswith("!!") for t in g)]
    return "(" + " || ".join(ors) + ")" if ors else None


#: A filter's reference to the session row (``s.source``) in a ``filter_where`` text.
_SESSION_REF = re.compile(r"\bs\.")


def pg_fts_page(tsq: str, where: str, sort: str | None, *, folded: bool = False,
                rank_tsq: str | None = None, bitmap: bool = False) -> str:
    """One page of the standard route on PostgreSQL, the headline as a ninth column.

    ``tsq`` comes from :func:`pg_tsquery` (bound terms). Binds expected: ``limit``,
    ``offset``, ``cand`` (ranked candidates), ``hl`` (headline characters) and ``fence`` (the
    replacement that fences each ASCII punctuation run, so the parser reads the headline
    text as it read the document; the fence is removed from the snippet afterwards).

    ``folded``: ``tsq`` (built with ``fold=True``) matches the accent-folded document
    (GIN ``messages_fts_fold``); relevance and headline use ``rank_tsq`` (the unfolded
    query) on the stored ``fts_document``, so no candidate's document is recomputed — a row
    matched only through folding ranks after the exact-accent ones.

    ``bitmap`` (relevance order): the candidates are ordered by ``m.id + 0``, which no index
    provides, so the planner reads them from the GIN index and sorts them instead of walking
    ``messages_pkey`` backwards filtering every row. The caller asks for it when the matches
    are known to be few (a phrase of two words: the planner multiplies their frequencies and
    expected 3,458 rows for ``"with file"`` — 11 exist, found after reading all 200,000) and
    for the folded tier (the walk recomputes ``hermes_fold``/``to_tsvector`` per row)."""
    document = pg_folded_document("m") if folded else PG_FTS_DOCUMENT
    rank_q = rank_tsq or tsq
    head = (f"ts_headline('simple', regexp_replace(concat_ws(' ', left(m.content, :hl), "
            f"m.tool_name, left(m.tool_calls, :hl)), '{PG_FTS_SPLIT}', :fence, 'g'), {rank_q}, "
            f"'{PG_HEADLINE_OPTS}')")
    if sort in (None, "rank"):
        # Rank the newest ``cand`` matches (GIN index scan), then page. The candidates carry
        # their stored document out of the scan that matched them: ranking it there costs
        # no second lookup per candidate (re-joining ``messages`` by id cost ~3–8 ms on a
        # word with 1,000+ matches), and no rank is computed for a row the limit drops.
        # The session join only when a filter reads the session (``messages.session_id``
        # references ``sessions``: without a filter the join drops no row; it cost a hash of
        # every session or a lookup per candidate).
        join = "JOIN sessions s ON s.id = m.session_id " if _SESSION_REF.search(where) else ""
        return (
            f"WITH cand AS (SELECT m.id, {PG_FTS_DOCUMENT} AS d FROM messages m "
            f"{join}WHERE {document} @@ {tsq} AND {where} "
            f"ORDER BY m.id{' + 0' if bitmap else ''} DESC LIMIT :cand), "
            f"page AS (SELECT cand.id, ts_rank(cand.d, {rank_q}) AS r FROM cand "
            "ORDER BY r DESC, cand.id DESC LIMIT :limit OFFSET :offset) "
            f"SELECT {HIT_COLS}, {head} FROM page JOIN messages m ON m.id = page.id "
            "JOIN sessions s ON s.id = m.session_id ORDER BY page.r DESC, m.id DESC")
    direction = "DESC" if sort == "newest" else "ASC"
    # not Core: the tsvector route (``@@`` on the stored or folded document, ts_headline on
    # the page) — the same shape as the relevance branch above
    return (
        f"WITH page AS (SELECT m.id, m.timestamp FROM messages m JOIN sessions s "
        f"ON s.id = m.session_id WHERE {document} @@ {tsq} AND {where} "
        f"ORDER BY m.timestamp {direction}, m.id {direction} LIMIT :limit OFFSET :offset) "
        f"SELECT {HIT_COLS}, {head} FROM page JOIN messages m ON m.id = page.id "
        f"JOIN sessions s ON s.id = m.session_id "
        f"ORDER BY page.timestamp {direction}, m.id {direction}")


# -------------------------------------------------------------------------------------
# Context window (docs/sessions.md §7.3)
# -------------------------------------------------------------------------------------

#: A neighbour's content, bounded: a multimodal row (marker ``:jp`` of ``:jl`` units) is cut
#: to ``:jn`` units, any other to ``:cn`` characters. The SQLite marker starts with NUL,
#: which SQLite's text functions stop at: compare and cut it as bytes (decoded in Python, a
#: cut character replaced). PostgreSQL text holds no NUL: its marker is ordinary text.
CONTEXT_CUT = ("CASE WHEN substr(CAST(m.content AS BLOB), 1, :jl) = CAST(:jp AS BLOB) "
               "THEN substr(CAST(m.content AS BLOB), 1, :jn) ELSE substr(m.content, 1, :cn) END")
PG_CONTEXT_CUT = ("CASE WHEN left(m.content, :jl) = :jp THEN left(m.content, :jn) "
                  "ELSE left(m.content, :cn) END")


@lru_cache(maxsize=64)
def context_neighbours(count: int, include_inactive: bool, *,
                       postgresql: bool) -> DriverPrepared:
    """``(hit id, side, role, bounded content)`` of the previous (side 0) and next (side 1)
    visible message of ``count`` hits bound as ``(:h<k>, :s<k>, :t<k>)`` (id, session,
    timestamp), each neighbour found through ``messages(session_id, timestamp)``: a Core
    ``VALUES`` CTE of the hits, one correlated ``LIMIT 1`` keyset probe per hit and side
    (``(n.timestamp, n.id) < (ts, id)``), compiled once per shape; the bounded content
    (:data:`CONTEXT_CUT`) is a named text fragment."""
    def build() -> sa.Select:
        hits = sa.values(sa.column("hid"), sa.column("sid"), sa.column("ts"), name="hits").data(
            [(bp(f"h{k}"), bp(f"s{k}"), bp(f"t{k}")) for k in range(count)]).cte("hits")

        def side(number: int) -> sa.Select:
            n = messages.alias("n")
            key, at = sa.tuple_(n.c.timestamp, n.c.id), sa.tuple_(hits.c.ts, hits.c.hid)
            visible = [not_hidden(n.c.display_kind)]
            if not include_inactive:
                visible.append(sa.or_(n.c.active == const(1), n.c.compacted == const(1)))
            order = ((n.c.timestamp.desc(), n.c.id.desc()) if number == 0
                     else (n.c.timestamp.asc(), n.c.id.asc()))
            nid = (sa.select(n.c.id)
                   .where(n.c.session_id == hits.c.sid, key < at if number == 0 else key > at,
                          *visible)
                   .order_by(*order).limit(const(1)).scalar_subquery())
            return sa.select(hits.c.hid, const(number).label("side"), nid.label("nid"))

        nb = sa.union_all(side(0), side(1)).cte("nb")
        m = messages.alias("m")
        cut = PG_CONTEXT_CUT if postgresql else CONTEXT_CUT
        return (sa.select(nb.c.hid, nb.c.side, m.c.role, sa.text(cut))
                .select_from(nb.join(m, m.c.id == nb.c.nid)).order_by(nb.c.hid, nb.c.side))
    return DriverPrepared("search_context_neighbours", build)
