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
Remaining difference: diacritics are not folded (``cafe`` does not find ``café``; FTS5's
``remove_diacritics`` does), and the document is one text, so a phrase may span from
``content`` into ``tool_name`` where FTS5's columns keep them apart.

Search never raises for any query text: a query FTS5 still rejects yields ``[]`` (logged at
DEBUG); a corrupt index falls back to LIKE (logged at WARNING). Only a database that stays
locked past the busy timeout raises — that is never turned into a silent "no results".
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from . import encoding as enc
from . import opening

log = logging.getLogger("hermes_data.sessions.search")

#: Queries are cut to this many characters before anything else happens.
MAX_QUERY_CHARS = 2048
#: Canonical result fields, in order (§7.3).
RESULT_FIELDS = ("id", "session_id", "role", "snippet", "timestamp", "tool_name", "source",
                 "model", "session_started", "context")
#: Highlight markers of FTS snippets.
HIGHLIGHT_START = ">>>"
HIGHLIGHT_END = "<<<"
#: Characters of each context neighbour kept (§7.3).
CONTEXT_CHARS = 200
#: Hits whose neighbours one context statement fetches.
CONTEXT_CHUNK = 500
#: Bytes of a multimodal (JSON) neighbour read to recover its text parts.
_CONTEXT_JSON_PREFIX = 65536
SORTS = (None, "rank", "newest", "oldest")
OPERATORS = frozenset({"AND", "OR", "NOT"})

# -------------------------------------------------------------------------------------
# Character classes
# -------------------------------------------------------------------------------------

#: ASCII characters FTS5 reads as grammar or rejects outside a string (spec §7.1 step 2).
#: ``"``, ``%``, ``*``, ``.`` and ``-`` are handled by their own steps.
_STRIP_PUNCT = "!#$&'()+,/:;<=>?@[\\]^`{|}~"
_CONTROLS = "".join(chr(c) for c in range(0x20) if chr(c) not in "\t\n\r") + "\x7f"
#: Assembled with ``re.escape`` so the backslash really is in the class (seed 003).
_STRIP_RE = re.compile("[" + re.escape(_STRIP_PUNCT + _CONTROLS) + "]")
_CJK_RANGES = ("\u4e00-\u9fff\u3400-\u4dbf\U00020000-\U0002a6df\u3000-\u303f\u3040-\u309f"
               "\u30a0-\u30ff\uac00-\ud7af")
_CJK_RE = re.compile(f"[{_CJK_RANGES}]")
_INNER_STAR_RE = re.compile(r"\*+(?=[^\s*])")
_PHRASE_RE = re.compile(r'"[^"]*"')
_DOTTED_RE = re.compile(r"\b\w+(?:[._-]\w+)+\b")
_QUOTED_SPLIT_RE = re.compile(r'("[^"]*")')
_TOKEN_RE = re.compile(r'"[^"]*"\*?|\S+')
_LIKE_TOKEN_RE = re.compile(r'"[^"]+"|\S+')
# Placeholder for a protected phrase: private-use delimiters, never \w, never stripped.
_PH_OPEN, _PH_CLOSE = "\ue000", "\ue001"
_PLACEHOLDER_RE = re.compile(f"{_PH_OPEN}(\\d+){_PH_CLOSE}")


def has_cjk(text: str) -> bool:
    """True when ``text`` holds a character of the CJK ranges of spec §7.2."""
    return _CJK_RE.search(text) is not None


def cjk_count(text: str) -> int:
    """Number of CJK characters in ``text``."""
    return len(_CJK_RE.findall(text))


# -------------------------------------------------------------------------------------
# The sanitizer (§7.1)
# -------------------------------------------------------------------------------------


def sanitize_fts_query(query: str | None) -> str | None:
    """Turn user text into an FTS5 query that parses, or ``None`` when nothing is left.

    Pure and total: it never raises and never looks at a database. Rules, in order:

    ======  ===============================  ==============================================
    Step    Input                            Result
    ======  ===============================  ==============================================
    0       ``None``, non-text, blank        ``None`` (no query — not an error)
    0       longer than 2048 characters      cut to the first 2048
    0       lone surrogates, NUL             U+FFFD / space (unbindable; NUL ends a phrase)
    1       balanced ``"…"`` (left to right) kept verbatim as a phrase; empty ``""`` dropped
    1       any leftover ``"``               space
    2       ``! # $ & ' ( ) + , / : ; < = >``  space, outside phrases (no column filters,
            ``? @ [ \\ ] ^ ` { | } ~``, DEL,  ``NEAR(…)`` groups, ``^``/``+`` or syntax
            ASCII controls but TAB/LF/CR     errors from user text)
    3       ``%`` in a query without CJK     space (``50%`` ⇒ ``50``)
    3       ``%`` in a query with CJK        kept: the CJK LIKE route escapes it itself
    4       ``**…``                          one ``*`` (prefix marker)
    4       ``*`` starting a token           removed (a prefix needs a character)
    4       ``*`` inside a token (``a*b``)   space (FTS5 ends the bareword there anyway)
    4       ``AND*`` / ``OR*`` / ``NOT*``    the star is dropped (operators take none)
    5       ``a.b``, ``chat-send``, ``a_b.c``  quoted as one phrase: ``"chat-send"``
    6       other ``.`` / ``-``              space (``foo.``, ``-bar``, ``...``)
    7       ``AND`` / ``OR`` / ``NOT``        kept only between two non-operator terms;
                                             leading, trailing, consecutive ones dropped
    7       lower-case ``and``/``or``/``not``  ordinary words
    8       nothing left                     ``None``
    ======  ===============================  ==============================================

    A query with CJK keeps ``%``: it is answered by the trigram index (every token quoted,
    :func:`trigram_match`) or by LIKE, never by a bare MATCH on the unicode61 index.

    Everything else — ASCII letters, digits, ``_``, U+001A and every non-ASCII character — is
    an FTS5 bareword character and passes through. Terms are implicitly AND-ed by FTS5.
    """
    if not isinstance(query, str):
        return None
    text = enc.scrub(query[:MAX_QUERY_CHARS]) or ""
    text = text.replace("\x00", " ")
    if not text.strip():
        return None
    cjk = has_cjk(text)

    # Step 1: protect balanced phrases; leftover quotes become spaces.
    phrases: list[str] = []

    def protect(m: re.Match[str]) -> str:
        body = m.group(0)
        if not body[1:-1].strip():
            return " "
        phrases.append(body)
        return f" {_PH_OPEN}{len(phrases) - 1}{_PH_CLOSE}"

    text = _PHRASE_RE.sub(protect, text).replace('"', " ")
    # Step 2: grammar and rejected characters.
    text = _STRIP_RE.sub(" ", text)
    # Step 3: '%' only survives for the CJK LIKE route.
    if not cjk:
        text = text.replace("%", " ")
    # Step 5: dotted / dashed / underscored compounds become phrases (one pass).
    text = _DOTTED_RE.sub(lambda m: f'"{m.group(0)}"', text)
    # Step 6: every other '.' or '-' outside quotes becomes a space.
    parts = _QUOTED_SPLIT_RE.split(text)
    text = "".join(p if p.startswith('"') else p.replace(".", " ").replace("-", " ")
                   for p in parts)
    # Steps 4 and 7 work on tokens (after step 6, so 'foo.*' cannot leave a bare '*').
    # FTS5 ends a bareword at '*': an inner star ('AND*N') splits the token.
    text = _INNER_STAR_RE.sub(" ", text)
    tokens = [_clean_star(t) for t in _TOKEN_RE.findall(text)]
    tokens = [t for t in tokens if t]
    kept: list[str] = []
    for i, tok in enumerate(tokens):
        if tok in OPERATORS:
            before = tokens[i - 1] if i > 0 else None
            after = tokens[i + 1] if i + 1 < len(tokens) else None
            if before is None or after is None or before in OPERATORS or after in OPERATORS:
                continue
        kept.append(tok)
    # Step 8: restore the phrases.
    out = " ".join(kept)
    out = _PLACEHOLDER_RE.sub(lambda m: phrases[int(m.group(1))], out).strip()
    return out or None


def _clean_star(token: str) -> str:
    if token.startswith('"'):
        return token  # a (possibly prefix) phrase: '"foo"*'
    token = re.sub(r"\*+", "*", token).lstrip("*")
    # An operator word cannot take a prefix star ('AND*' is a syntax error): drop it.
    return token.rstrip("*") if token.rstrip("*") in OPERATORS else token


def query_tokens(sanitized: str) -> list[str]:
    """Whitespace tokens of a sanitized query; a quoted phrase (optionally ``*``) is one token."""
    return _TOKEN_RE.findall(sanitized)


def _bare(token: str) -> str:
    """A token without its phrase quotes and prefix star."""
    t = token.rstrip("*")
    if len(t) >= 2 and t.startswith('"') and t.endswith('"'):
        t = t[1:-1]
    return t


def trigram_match(sanitized: str) -> str:
    """MATCH text for the trigram index: every non-operator token double-quoted."""
    out = []
    for tok in query_tokens(sanitized):
        if tok in OPERATORS:
            out.append(tok)
        else:
            out.append('"' + _bare(tok).replace('"', '""') + '"')
    return " ".join(out)


# -------------------------------------------------------------------------------------
# Routing (§7.2)
# -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SearchCapabilities:
    """What the database behind a connection offers to search right now."""

    fts5: bool  # FTS5 module present and ``messages_fts`` exists
    trigram: bool  # ``messages_fts_trigram`` usable
    stale: bool  # ``fts_stale`` set: the indexes are detached


@dataclass(frozen=True)
class LikeTerm:
    """One LIKE term: ``text`` matched as a substring; ``negated`` for a NOT term."""

    text: str
    negated: bool = False


@dataclass(frozen=True)
class SearchPlan:
    """How a query is answered.

    ``route`` is ``"fts"`` (unicode61 index), ``"trigram"``, ``"like"`` (AND-groups OR-ed,
    the stale/tool/no-FTS5 compilation) or ``"cjk_like"`` (one substring per token, OR-ed).
    ``match`` is the MATCH text for index routes; ``groups`` the LIKE terms otherwise.
    ``trigram_fallback`` is the quoted MATCH text to retry on the trigram index when the
    unicode61 route finds nothing (``None`` when not applicable).
    """

    route: str
    match: str | None = None
    groups: tuple[tuple[LikeTerm, ...], ...] = ()
    trigram_fallback: str | None = None
    reason: str = ""


def _like_groups(sanitized: str) -> tuple[tuple[LikeTerm, ...], ...]:
    groups: list[list[LikeTerm]] = [[]]
    negate = False
    for tok in _LIKE_TOKEN_RE.findall(sanitized):
        if tok == "OR":
            groups.append([])
            negate = False
            continue
        if tok in ("AND", "NEAR"):
            continue
        if tok == "NOT":
            negate = True
            continue
        term = tok.replace('"', "").replace("*", "")
        if term:
            groups[-1].append(LikeTerm(term, negate))
        negate = False
    return tuple(tuple(g) for g in groups if any(not t.negated for t in g))


def _cjk_like_groups(sanitized: str) -> tuple[tuple[LikeTerm, ...], ...]:
    terms = [_bare(t) for t in query_tokens(sanitized) if t not in OPERATORS]
    return tuple((LikeTerm(t),) for t in terms if t)


def plan_search(sanitized: str, caps: SearchCapabilities, *,
                role_filter: Sequence[str] | None = None,
                source_filter: Sequence[str] | None = None) -> SearchPlan:
    """Choose the route for an already sanitized query (pure; spec §7.2 steps 2–6)."""
    wants_tool = bool(role_filter) and "tool" in role_filter  # type: ignore[operator]
    if wants_tool:
        return SearchPlan("like", groups=_like_groups(sanitized),
                          reason="tool rows are indexed only to 8192 characters")
    if caps.stale or not caps.fts5:
        return SearchPlan("like", groups=_like_groups(sanitized),
                          reason="FTS index stale" if caps.stale else "FTS5 unavailable")
    terms = [_bare(t) for t in query_tokens(sanitized) if t not in OPERATORS]
    if has_cjk(sanitized):
        excluded_src = bool(source_filter) and any(
            s in ("cron", "subagent") for s in source_filter)  # type: ignore[union-attr]
        cjk_ok = (cjk_count(sanitized) >= 3 and terms
                  and all(len(t) >= 3 for t in terms)
                  and all(cjk_count(t) >= 3 for t in terms if has_cjk(t)))
        if caps.trigram and cjk_ok and not excluded_src:
            return SearchPlan("trigram", match=trigram_match(sanitized), reason="CJK ≥ 3")
        return SearchPlan("cjk_like", groups=_cjk_like_groups(sanitized),
                          reason="short CJK or no trigram index")
    fallback = None
    if caps.trigram and terms and all(len(t) >= 3 for t in terms):
        fallback = trigram_match(sanitized)
    return SearchPlan("fts", match=sanitized, trigram_fallback=fallback, reason="standard")


# -------------------------------------------------------------------------------------
# Result rows
# -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ContextMessage:
    """A neighbour of a hit: role and content (decoded, flattened, cut to 200 characters)."""

    role: str
    content: str


@dataclass(frozen=True)
class SearchResult:
    """One search hit (§7.3). Fields not requested through ``fields`` are ``None``."""

    id: int | None = None
    session_id: str | None = None
    role: str | None = None
    snippet: str | None = None
    timestamp: float | None = None
    tool_name: str | None = None
    source: str | None = None
    model: str | None = None
    session_started: float | None = None
    context: tuple[ContextMessage, ...] | None = None
    route: str = field(default="", compare=False)

    def to_json(self, fields: Sequence[str] | None = None) -> dict[str, object]:
        """JSON-ready mapping of the requested fields (all canonical fields by default)."""
        names = RESULT_FIELDS if fields is None else _check_fields(fields)
        out: dict[str, object] = {}
        for name in names:
            value = getattr(self, name)
            if name == "context" and value is not None:
                value = [{"role": c.role, "content": c.content} for c in value]
            out[name] = value
        return out


def _check_fields(fields: Sequence[str] | None) -> tuple[str, ...]:
    if fields is None:
        return RESULT_FIELDS
    if isinstance(fields, (str, bytes)):
        raise TypeError("fields must be a sequence of field names, not a string")
    names = list(fields)
    unknown = [n for n in names if n not in RESULT_FIELDS]
    if unknown:
        raise ValueError(f"unknown search result field(s) {unknown}; known: {list(RESULT_FIELDS)}")
    return tuple(n for n in RESULT_FIELDS if n in names)


def _names(value: str | Iterable[str] | None) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]


# -------------------------------------------------------------------------------------
# Reading the database's search state
# -------------------------------------------------------------------------------------


def read_capabilities(conn: Connection) -> SearchCapabilities:
    """Which indexes can answer now: FTS5 module, tables present, ``fts_stale`` (PK read).

    PostgreSQL: the two GIN indexes of the head (server-maintained, never stale); a
    capability override of :func:`opening.force_capabilities` applies to both backends."""
    if conn.dialect.name == "postgresql":
        forced = opening._forced_capabilities
        names = {r[0] for r in conn.exec_driver_sql(
            "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() "
            "AND tablename = 'messages' AND indexname IN ('messages_fts_document', 'messages_fts_trgm')")}
        fts = "messages_fts_document" in names and (forced is None or forced.fts5)
        tri = fts and "messages_fts_trgm" in names and (forced is None or forced.trigram)
        return SearchCapabilities(fts5=fts, trigram=tri, stale=False)
    caps = opening.capabilities(conn)
    names = {r[0] for r in conn.exec_driver_sql(
        "SELECT name FROM sqlite_master WHERE type = 'table' "
        "AND name IN ('messages_fts', 'messages_fts_trigram')")}
    stale = conn.exec_driver_sql(
        "SELECT 1 FROM state_meta WHERE key = 'fts_stale'").first() is not None
    fts5 = caps.fts5 and "messages_fts" in names
    return SearchCapabilities(fts5=fts5, trigram=fts5 and caps.trigram
                              and "messages_fts_trigram" in names, stale=stale)


# -------------------------------------------------------------------------------------
# Execution
# -------------------------------------------------------------------------------------

_HIT_COLS = ("m.id, m.session_id, m.role, m.timestamp, m.tool_name, s.source, s.model, "
             "s.started_at")
_LIKE_COLS = ("COALESCE(m.content, '') LIKE {p} ESCAPE '\\'",
              "COALESCE(m.tool_name, '') LIKE {p} ESCAPE '\\'",
              "COALESCE(m.tool_calls, '') LIKE {p} ESCAPE '\\'")
#: PostgreSQL: the same columns, case-insensitively (SQLite's LIKE already folds ASCII).
_ILIKE_COLS = tuple(c.replace(" LIKE ", " ILIKE ") for c in _LIKE_COLS)


def _pattern_where(groups, templates: Sequence[str], params: dict[str, Any]) -> str:
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


@dataclass
class _Filters:
    sources: list[str]
    excluded: list[str]
    roles: list[str]
    include_inactive: bool

    def sql(self, params: dict[str, Any]) -> str:
        parts = ["COALESCE(m.display_kind, '') <> 'hidden'"]
        if not self.include_inactive:
            parts.append("(m.active = 1 OR m.compacted = 1)")
        for key, values, op in (("src", self.sources, "IN"), ("xsrc", self.excluded, "NOT IN"),
                                ("role", self.roles, "IN")):
            if values:
                names = [f"{key}{i}" for i in range(len(values))]
                params.update(zip(names, values))
                col = "m.role" if key == "role" else "s.source"
                parts.append(f"{col} {op} ({', '.join(':' + n for n in names)})")
        return " AND ".join(parts)


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
    names = _check_fields(fields)
    if sort not in SORTS:
        raise ValueError(f"sort must be one of {SORTS[1:]} or None, not {sort!r}")
    limit, offset = max(0, int(limit)), max(0, int(offset))
    sanitized = sanitize_fts_query(query)
    if sanitized is None or limit == 0:
        return []
    roles = _names(role_filter)
    sources = _names(source_filter)
    filters = _Filters(sources, _names(exclude_sources), roles, include_inactive)
    caps = read_capabilities(conn)
    plan = plan_search(sanitized, caps, role_filter=roles, source_filter=sources)
    log.debug("search %r -> %r via %s (%s)", query, sanitized, plan.route, plan.reason)
    if conn.dialect.name == "postgresql":
        hits = _pg_run_plan(conn, plan, filters, limit, offset, sort)
    else:
        hits = _run_plan(conn, plan, filters, limit, offset, sort)
    if not hits:
        return []
    if "context" in names:
        hits = _attach_context(conn, hits, include_inactive)
    if fields is not None:
        blank = {n: None for n in RESULT_FIELDS if n not in names}
        hits = [replace(h, **blank) for h in hits]
    return hits


def _run_plan(conn: Connection, plan: SearchPlan, filters: _Filters, limit: int, offset: int,
              sort: str | None) -> list[SearchResult]:
    if plan.route in ("like", "cjk_like"):
        return _like(conn, plan, filters, limit, offset, sort)
    table = "messages_fts_trigram" if plan.route == "trigram" else "messages_fts"
    assert plan.match is not None
    try:
        hits = _fts(conn, table, plan.match, filters, limit, offset, sort)
    except sa.exc.OperationalError as exc:
        if _is_lock_error(exc):
            raise  # the database is busy, not the query wrong: never a silent "no results"
        log.debug("FTS5 rejected %r on %s: %s", plan.match, table, exc.orig)
        return []
    except sa.exc.DatabaseError as exc:
        log.warning("FTS index %s unusable (%s); answering through LIKE", table, exc.orig)
        like = SearchPlan("cjk_like" if plan.route == "trigram" else "like",
                          groups=(_cjk_like_groups(plan.match) if plan.route == "trigram"
                                  else _like_groups(plan.match)))
        return _like(conn, like, filters, limit, offset, sort)
    if hits or plan.trigram_fallback is None:
        return hits
    if offset and _fts_safe(conn, table, plan.match, filters, 1, 0, sort):
        return hits  # an empty later page, not an empty result
    # unicode61 puts no boundary between Latin and adjacent CJK: retry on the trigram index.
    return _fts_safe(conn, "messages_fts_trigram", plan.trigram_fallback, filters, limit,
                     offset, sort)


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
    # ``table`` comes from the fixed pair above, never from input.
    params: dict[str, Any] = {"q": match, "limit": limit, "offset": offset}
    where = filters.sql(params)
    order = {None: f"{table}.rank", "rank": f"{table}.rank",
             "newest": f"m.timestamp DESC, {table}.rank",
             "oldest": f"m.timestamp ASC, {table}.rank"}[sort]
    rows = conn.execute(sa.text(
        f"SELECT {_HIT_COLS} FROM {table} JOIN messages m ON m.id = {table}.rowid "
        f"JOIN sessions s ON s.id = m.session_id WHERE {table} MATCH :q AND {where} "
        f"ORDER BY {order} LIMIT :limit OFFSET :offset"), params).fetchall()
    if not rows:
        return []
    # Snippets for the page only (computed by FTS5 from the indexed text, never in Python).
    ids = [r[0] for r in rows]
    sp: dict[str, Any] = {"q": match}
    sp.update({f"i{k}": v for k, v in enumerate(ids)})
    snippets = dict(conn.execute(sa.text(
        f"SELECT rowid, snippet({table}, -1, '{HIGHLIGHT_START}', '{HIGHLIGHT_END}', '...', 40) "
        f"FROM {table} WHERE {table} MATCH :q AND rowid IN "
        f"({', '.join(':i' + str(k) for k in range(len(ids)))})"), sp).fetchall())
    route = "trigram" if table == "messages_fts_trigram" else "fts"
    return [_result(r, snippets.get(r[0]), route) for r in rows]


def _like(conn: Connection, plan: SearchPlan, filters: _Filters, limit: int, offset: int,
          sort: str | None, *, postgresql: bool = False) -> list[SearchResult]:
    if not plan.groups:
        return []
    params: dict[str, Any] = {"limit": limit, "offset": offset}
    matches = _pattern_where(plan.groups, _ILIKE_COLS if postgresql else _LIKE_COLS, params)
    where = filters.sql(params)
    # Newest first by id (insertion order, the store's transcript order; spec §7.2 says
    # timestamp): walking the rowid b-tree lets LIMIT stop the scan at the first page of
    # matches — a common 2-character CJK term on 200,000 rows: ~95 ms → ~2 ms.
    direction = "ASC" if sort == "oldest" else "DESC"
    # Snippet: a 120-character window around the first term (never the whole content).
    snippet = (_PG_LIKE_SNIPPET if postgresql
               else "substr(m.content, max(1, instr(m.content, :first) - 40), 120)")
    rows = conn.execute(sa.text(
        f"SELECT {_HIT_COLS}, {snippet} "
        f"FROM messages m JOIN sessions s ON s.id = m.session_id "
        f"WHERE ({matches}) AND {where} "
        f"ORDER BY m.id {direction} LIMIT :limit OFFSET :offset"),
        params).fetchall()
    return [_result(r, r[8], plan.route) for r in rows]


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
#: Characters of a row ``ts_headline`` reads (a multi-MB tool row is never read whole).
PG_HEADLINE_CHARS = 8192
_PG_HEADLINE_OPTS = (f"StartSel={HIGHLIGHT_START}, StopSel={HIGHLIGHT_END}, MaxWords=40, "
                     "MinWords=15")
#: SQLSTATEs that mean "busy", never "bad query": lock_not_available, deadlock_detected,
#: serialization_failure, query_canceled (statement_timeout), admin/crash shutdown.
_PG_BUSY_SQLSTATES = {"55P03", "40P01", "40001", "57014", "57P01", "57P02", "57P03"}
#: Sessions whose rows the SQLite trigram index holds (TRI_SESSION of sql.py, PostgreSQL twin).
_PG_TRI_SESSION = ("s.source NOT IN ('cron', 'subagent') "
                   "AND hermes_json_get(s.model_config, '_delegate_from') IS NULL")


_PG_LAST_WORD_RE = re.compile(r"[^\W_]+(?=[\W_]*$)")
_PG_WORD_CHAR_RE = re.compile(r"[^\W_]")


def _pg_prefix_quote(word: str) -> str:
    """``word`` as a prefix tsquery lexeme: ``'word':*`` (quotes doubled, backslashes escaped)."""
    return "'" + word.replace("\\", "\\\\").replace("'", "''") + "':*"


def pg_tsquery(sanitized: str, params: dict[str, Any], prefix: str = "t") -> str | None:
    """SQL ``tsquery`` expression for a sanitized query, every term a bound parameter.

    FTS5 precedence (NOT > AND > OR): ``OR`` starts a new group, terms of a group are AND-ed
    (``&&``), ``NOT x`` becomes ``&& !!x``. A term is split exactly as the stored document
    is (``regexp_replace`` with ``sql.PG_FTS_SPLIT``, then the 'simple' parser) and matched
    as a phrase: ``chat-send`` ⇒ ``'chat' <-> 'send'``, ``gateway/run.py`` ⇒ ``'gateway' <->
    'run' <-> 'py'``. A prefix term (``word*``, ``foo_ba*``, ``"some phra"*``) puts ``:*`` on
    its last word, as FTS5 does: ``'foo' <-> 'ba':*``. ``None`` when no positive term is
    left."""
    from .sql import PG_FTS_SPLIT

    groups: list[list[str]] = [[]]
    negate = False
    n = 0
    for tok in query_tokens(sanitized):
        if tok == "OR":
            groups.append([])
            negate = False
            continue
        if tok in ("AND", "NEAR"):
            continue
        if tok == "NOT":
            negate = True
            continue
        text = _bare(tok)
        last = _PG_LAST_WORD_RE.search(text) if tok.endswith("*") else None
        if not text.strip() or (tok.endswith("*") and last is None):
            negate = False
            continue
        key = f"{prefix}{n}"
        n += 1
        if last is not None:
            params[key] = _pg_prefix_quote(last.group(0))
            term = f"to_tsquery('simple', :{key})"
            head = text[:last.start()]
            if _PG_WORD_CHAR_RE.search(head):
                params[key + "h"] = head
                term = (f"tsquery_phrase(phraseto_tsquery('simple', regexp_replace(:{key}h, "
                        f"'{PG_FTS_SPLIT}', ' ', 'g')), {term})")
        else:
            params[key] = text
            term = f"phraseto_tsquery('simple', regexp_replace(:{key}, '{PG_FTS_SPLIT}', ' ', 'g'))"
        if negate and groups[-1]:
            groups[-1].append(f"!!{term}")
        elif not negate:
            groups[-1].append(term)
        negate = False
    ors = ["(" + " && ".join(g) + ")" for g in groups if any(not t.startswith("!!") for t in g)]
    return "(" + " || ".join(ors) + ")" if ors else None


def _pg_busy(exc: sa.exc.DBAPIError) -> bool:
    return getattr(exc.orig, "sqlstate", None) in _PG_BUSY_SQLSTATES


def _pg_attempt(conn: Connection, what: str, fn) -> list[SearchResult] | None:
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
    if plan.route in ("like", "cjk_like"):
        return _pg_attempt(conn, plan.route,
                           lambda: _like(conn, plan, filters, limit, offset, sort, postgresql=True)) or []
    assert plan.match is not None
    if plan.route == "trigram":
        return _pg_attempt(conn, "trigram", lambda: _pg_trigram(
            conn, plan.match, filters, limit, offset, sort)) or []
    hits = _pg_attempt(conn, "fts", lambda: _pg_fts(conn, plan.match, filters, limit, offset,
                                                    sort))
    if hits is None:
        return []  # rejected (as FTS5's OperationalError): no fallback, no error
    if hits or plan.trigram_fallback is None:
        return hits
    if offset and _pg_attempt(conn, "fts", lambda: _pg_fts(conn, plan.match, filters, 1, 0,
                                                           sort)):
        return hits  # an empty later page, not an empty result
    # The parser puts no boundary between Latin and adjacent CJK (``修改youer服务端``), and
    # a word may sit inside a longer one: retry as substrings through the trigram index.
    return _pg_attempt(conn, "trigram", lambda: _pg_trigram(
        conn, plan.trigram_fallback, filters, limit, offset, sort)) or []


def _pg_fts(conn: Connection, match: str, filters: _Filters, limit: int, offset: int,
            sort: str | None) -> list[SearchResult]:
    from .sql import PG_FTS_DOCUMENT, PG_FTS_SPLIT

    params: dict[str, Any] = {"limit": limit, "offset": offset, "cand": PG_RANK_CANDIDATES,
                              "hl": PG_HEADLINE_CHARS}
    tsq = pg_tsquery(match, params)
    if tsq is None:
        return []
    where = filters.sql(params)
    # The parser reads the headline text as it read the document: each ASCII punctuation run
    # is fenced with U+0001 (a boundary for the parser in every locale), removed afterwards.
    head = (f"ts_headline('simple', regexp_replace(concat_ws(' ', left(m.content, :hl), "
            f"m.tool_name, left(m.tool_calls, :hl)), '{PG_FTS_SPLIT}', :fence, 'g'), {tsq}, "
            f"'{_PG_HEADLINE_OPTS}')")
    params["fence"] = _PG_FENCE + "\\&" + _PG_FENCE
    if sort in (None, "rank"):
        # Rank the newest PG_RANK_CANDIDATES matches (GIN index scan), then page.
        sql_text = (
            f"WITH cand AS (SELECT m.id FROM messages m JOIN sessions s ON s.id = m.session_id "
            f"WHERE {PG_FTS_DOCUMENT} @@ {tsq} AND {where} ORDER BY m.id DESC LIMIT :cand), "
            f"page AS (SELECT m.id, ts_rank({PG_FTS_DOCUMENT}, {tsq}) AS r FROM cand "
            "JOIN messages m ON m.id = cand.id ORDER BY r DESC, m.id DESC "
            "LIMIT :limit OFFSET :offset) "
            f"SELECT {_HIT_COLS}, {head} FROM page JOIN messages m ON m.id = page.id "
            "JOIN sessions s ON s.id = m.session_id ORDER BY page.r DESC, m.id DESC")
    else:
        direction = "DESC" if sort == "newest" else "ASC"
        sql_text = (
            f"WITH page AS (SELECT m.id, m.timestamp FROM messages m JOIN sessions s "
            f"ON s.id = m.session_id WHERE {PG_FTS_DOCUMENT} @@ {tsq} AND {where} "
            f"ORDER BY m.timestamp {direction}, m.id {direction} LIMIT :limit OFFSET :offset) "
            f"SELECT {_HIT_COLS}, {head} FROM page JOIN messages m ON m.id = page.id "
            f"JOIN sessions s ON s.id = m.session_id "
            f"ORDER BY page.timestamp {direction}, m.id {direction}")
    rows = conn.execute(sa.text(sql_text), params).fetchall()
    return [_result(r, _pg_join_marks(r[8]), "fts") for r in rows]


#: Parser boundary fenced around punctuation in the headline text (never a word character).
_PG_FENCE = "\x01"


_PG_SPLIT_MARKS_RE = re.compile(
    re.escape(HIGHLIGHT_END) + r"((?:[^\s\w]|_){1,3})" + re.escape(HIGHLIGHT_START))


def _pg_join_marks(snippet: Any) -> Any:
    """``>>>read<<<_>>>file<<<`` ⇒ ``>>>read_file<<<``: ts_headline marks each lexeme of a
    phrase the parser split at punctuation; FTS5's snippet marks the phrase as one span."""
    if not isinstance(snippet, str):
        return snippet
    return _PG_SPLIT_MARKS_RE.sub(r"\1", snippet.replace(_PG_FENCE, ""))


def _pg_trigram(conn: Connection, match: str, filters: _Filters, limit: int, offset: int,
                sort: str | None) -> list[SearchResult]:
    params: dict[str, Any] = {"limit": limit, "offset": offset}
    groups = _like_groups(match)
    if not groups:
        return []
    matches = _pattern_where(groups, ("m.content ILIKE {p} ESCAPE '\\'",), params)
    where = filters.sql(params)
    direction = "ASC" if sort == "oldest" else "DESC"
    order = (f"m.timestamp {direction}, m.id {direction}" if sort in ("newest", "oldest")
             else "m.id DESC")
    rows = conn.execute(sa.text(
        f"SELECT {_HIT_COLS}, {_PG_LIKE_SNIPPET} FROM messages m "
        f"JOIN sessions s ON s.id = m.session_id WHERE m.role <> 'tool' "
        f"AND ({matches}) AND {_PG_TRI_SESSION} AND {where} "
        f"ORDER BY {order} LIMIT :limit OFFSET :offset"), params).fetchall()
    return [_result(r, r[8], "trigram") for r in rows]


#: LIKE-route snippet on PostgreSQL: 120 characters around the first term (case-insensitive
#: position, like the match itself).
_PG_LIKE_SNIPPET = ("substr(m.content, greatest(1, strpos(lower(m.content), lower(:first)) - 40), "
                    "120)")


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
    visible = "COALESCE(n.display_kind, '') <> 'hidden'" + (
        "" if include_inactive else " AND (n.active = 1 OR n.compacted = 1)")
    out: dict[int, tuple[ContextMessage, ...]] = {}
    pg = conn.dialect.name == "postgresql"
    prefix = enc.content_prefix(conn.dialect.name)
    if pg:
        # PostgreSQL text holds no NUL: its marker is ordinary text, cut by characters.
        cut = ("CASE WHEN left(m.content, :jl) = :jp THEN left(m.content, :jn) "
               "ELSE left(m.content, :cn) END")
    else:
        # The multimodal marker starts with NUL, which SQLite's text functions stop at:
        # compare and cut it as bytes (decoded in Python, a cut character replaced).
        cut = ("CASE WHEN substr(CAST(m.content AS BLOB), 1, :jl) = CAST(:jp AS BLOB) "
               "THEN substr(CAST(m.content AS BLOB), 1, :jn) ELSE substr(m.content, 1, :cn) END")
    for start in range(0, len(hits), CONTEXT_CHUNK):
        chunk = hits[start:start + CONTEXT_CHUNK]
        params: dict[str, Any] = {"jp": prefix.encode() if not pg else prefix,
                                  "jl": len(prefix.encode()) if not pg else len(prefix),
                                  "jn": _CONTEXT_JSON_PREFIX,
                                  "cn": CONTEXT_CHARS}
        values = []
        for k, (hid, sid, ts) in enumerate(chunk):
            params.update({f"h{k}": hid, f"s{k}": sid, f"t{k}": ts})
            values.append(f"(:h{k}, :s{k}, :t{k})")
        rows = conn.execute(sa.text(
            f"WITH hits(hid, sid, ts) AS (VALUES {', '.join(values)}), "
            "nb(hid, side, nid) AS ("
            " SELECT hid, 0, (SELECT n.id FROM messages n WHERE n.session_id = hits.sid "
            f"  AND (n.timestamp, n.id) < (hits.ts, hits.hid) AND {visible} "
            "  ORDER BY n.timestamp DESC, n.id DESC LIMIT 1) FROM hits"
            " UNION ALL"
            " SELECT hid, 1, (SELECT n.id FROM messages n WHERE n.session_id = hits.sid "
            f"  AND (n.timestamp, n.id) > (hits.ts, hits.hid) AND {visible} "
            "  ORDER BY n.timestamp ASC, n.id ASC LIMIT 1) FROM hits) "
            f"SELECT nb.hid, nb.side, m.role, {cut} "
            "FROM nb JOIN messages m ON m.id = nb.nid ORDER BY nb.hid, nb.side"),
            params).fetchall()
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
