"""Pure half of message search (docs/sessions.md §7.1–§7.3): no database, no SQLAlchemy.

* :func:`sanitize_fts_query` — a pure function turning whatever a user typed into an FTS5
  query that parses (or ``None`` when nothing searchable is left). Its docstring is the
  table of rules.
* :func:`query_tokens`, :func:`operands`, :func:`bare_token` — the tokenizing every route
  compiles from (the LIKE groups here, the PostgreSQL ``tsquery`` in ``sql/search.py``).
* :func:`plan_search` — pure routing: which index (or the LIKE fallback) answers a query,
  given what the database offers (:class:`SearchCapabilities`).
* The result rows (:class:`SearchResult`, :class:`ContextMessage`) and their field list.

:mod:`hermes_data.sessions.search.messages` runs a plan on a connection (SQLite and PostgreSQL) and
re-exports every public name of this module; the SQL texts live in
:mod:`hermes_data.sessions.search.sql`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Sequence

from hermes_data.sessions.core import encoding as enc
from hermes_data.storable import searchable
#: Queries are cut to this many characters before anything else happens.
MAX_QUERY_CHARS = 2048
#: Canonical result fields, in order (docs/sessions.md §7.3).
RESULT_FIELDS = ("id", "session_id", "role", "snippet", "timestamp", "tool_name", "source",
                 "model", "session_started", "context")
#: Highlight markers of FTS snippets.
HIGHLIGHT_START = ">>>"
HIGHLIGHT_END = "<<<"
#: Characters of each context neighbour kept (docs/sessions.md §7.3).
CONTEXT_CHARS = 200
#: Hits whose neighbours one context statement fetches.
CONTEXT_CHUNK = 500
SORTS = (None, "rank", "newest", "oldest")
OPERATORS = frozenset({"AND", "OR", "NOT"})

# -------------------------------------------------------------------------------------
# Character classes
# -------------------------------------------------------------------------------------

#: ASCII characters FTS5 reads as grammar or rejects outside a string (docs/sessions.md §7.1 step 2).
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
#: A bareword stops at a quote, as in FTS5's query syntax: a compound quoted by step 5 of the
#: sanitizer right after a character that is no word character nor a separator
#: (``aaaaa🚀广.a`` ⇒ ``aaaaa🚀"广.a"``) is a term of its own, not part of the bareword.
_TOKEN_RE = re.compile(r'"[^"]*"\*?|[^\s"]+')
_LIKE_TOKEN_RE = re.compile(r'"[^"]+"|\S+')
# Placeholder for a protected phrase: private-use delimiters, never \w, never stripped.
_PH_OPEN, _PH_CLOSE = "\ue000", "\ue001"
_PLACEHOLDER_RE = re.compile(f"{_PH_OPEN}(\\d+){_PH_CLOSE}")


def has_cjk(text: str) -> bool:
    """True when ``text`` holds a character of the CJK ranges of docs/sessions.md §7.2."""
    return _CJK_RE.search(text) is not None


def cjk_count(text: str) -> int:
    """Number of CJK characters in ``text``."""
    return len(_CJK_RE.findall(text))


# -------------------------------------------------------------------------------------
# The sanitizer (docs/sessions.md §7.1)
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
    7       ``AND`` / ``OR`` / ``NOT``        an operator only alone between two terms;
            between two terms, in a run       dropped (``foo AND OR bar`` ⇒ ``foo bar``)
            alone or at an edge               a word, quoted: ``NOT`` ⇒ ``"NOT"``,
                                             ``AND now`` ⇒ ``"AND" now`` (issue 16)
    7       a term juxtaposed after the term  an explicit ``AND`` before it: ``b NOT a c`` ⇒
            ``NOT`` negates                   ``b NOT a AND c`` (FTS5 would read ``b NOT (a c)``)
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
    negated_last = False
    for tok, role in zip(tokens, operator_roles(tokens)):
        if role == "skip":
            continue
        if role == "op":
            kept.append(tok)
            negated_last = False
            continue
        if negated_last:
            # FTS5 binds juxtaposed terms tighter than NOT ('b NOT a c' is 'b NOT (a c)');
            # NOT negates the next term only (operands(), the LIKE and PostgreSQL routes).
            kept.append("AND")
        kept.append(f'"{tok}"' if role == "word" else tok)
        negated_last = len(kept) >= 2 and kept[-2] == "NOT"
    # Step 8: restore the phrases.
    out = " ".join(kept)
    out = _PLACEHOLDER_RE.sub(lambda m: phrases[int(m.group(1))], out).strip()
    return out or None


def operator_roles(tokens: Sequence[str]) -> list[str]:
    """Role of each token for step 7: ``"term"``, ``"op"`` (an operator between two terms),
    ``"skip"`` (one of several operators in a row between two terms: ``foo AND OR bar``) or
    ``"word"`` (an operator keyword at an edge of the query, alone or in a run touching an
    edge: ``NOT``, ``AND now``, ``x OR`` — a word to find, like lower-case ``not``)."""
    roles = ["term" if t not in OPERATORS else "" for t in tokens]
    i = 0
    while i < len(tokens):
        if roles[i]:
            i += 1
            continue
        j = i
        while j < len(tokens) and not roles[j]:
            j += 1  # tokens[i:j] is a run of operator keywords
        if i == 0 or j == len(tokens):
            fill = ["word"] * (j - i)
        else:
            fill = ["op"] if j - i == 1 else ["skip"] * (j - i)
        roles[i:j] = fill
        i = j
    return roles


def _clean_star(token: str) -> str:
    if token.startswith('"'):
        return token  # a (possibly prefix) phrase: '"foo"*'
    token = re.sub(r"\*+", "*", token).lstrip("*")
    # An operator word cannot take a prefix star ('AND*' is a syntax error): drop it.
    return token.rstrip("*") if token.rstrip("*") in OPERATORS else token


# -------------------------------------------------------------------------------------
# The literal text (issue 16): what was typed, matched as a substring
# -------------------------------------------------------------------------------------

#: A literal shorter than this has no trigram: the literal tier scans for it, newest first.
LITERAL_TRIGRAM_MIN = 3
#: A literal longer than this takes its candidates from the word index when it has words.
LITERAL_WORDS_MIN = 16


def literal_text(query: str | None) -> str | None:
    """The text as typed, for the literal tier and the LIKE routes: cut to 2048 characters,
    lone surrogates replaced, NUL made a space, trimmed; ``None`` when blank or not text."""
    if not isinstance(query, str):
        return None
    text = (enc.scrub(query[:MAX_QUERY_CHARS]) or "").replace("\x00", " ").strip()
    return text or None


def word_invisible(literal: str) -> bool:
    """True when ``literal`` holds a character the word index cannot see: anything but
    letters, digits and whitespace, except the phrase quote ``"`` and a prefix ``*`` ending
    a token (query syntax, not text). ``what?``, ``~/.config``, ``C#``, ``x->y``, ``🚀``,
    ``read_file`` are; ``hello world``, ``"a phrase"``, ``conf*`` are not."""
    return any(not ch.isalnum() and ch != '"'
               for tok in literal.split() for ch in tok.rstrip("*"))


def literal_groups(literal: str) -> tuple[tuple[LikeTerm, ...], ...]:
    """LIKE terms of the typed text (the LIKE routes: ``--role tool``, stale index, no FTS5).

    Nothing is reinterpreted: a balanced ``"…"`` is one term (its text verbatim), every other
    whitespace-separated token is a term as typed (``1=1``, ``100%``, ``'``, ``--`` are text;
    only the quote character and a ``*`` ending a token — the prefix marker — are removed).
    ``AND``/``OR``/``NOT`` are operators under the sanitizer's step-7 rule (alone between two
    terms; otherwise words, or dropped in a run between terms): ``OR`` starts a new group,
    ``NOT`` negates the next term. Groups without a positive term are dropped."""
    tokens = _LIKE_TOKEN_RE.findall(literal)
    groups: list[list[LikeTerm]] = [[]]
    negate = False
    for tok, role in zip(tokens, operator_roles(tokens)):
        if role == "skip":
            continue
        if role == "op":
            if tok == "OR":
                groups.append([])
                negate = False
            elif tok == "NOT":
                negate = True
            continue
        if tok.startswith('"') and tok.endswith('"') and len(tok) >= 2:
            term = tok[1:-1]
        else:
            term = tok.replace('"', "").rstrip("*")
        if term:
            groups[-1].append(LikeTerm(term, negate))
        negate = False
    return tuple(tuple(g) for g in groups if any(not t.negated for t in g))


_LEADING_WORD_RE = re.compile(r"^[^\W_]+")
_WORD_CHAR_RE = re.compile(r"[^\W_]")


def literal_word_phrase(literal: str) -> str | None:
    """A word-index phrase every row holding ``literal`` matches (PostgreSQL's literal tier
    takes its candidates from it): the literal without a leading word (it may end a longer
    one), quoted, with a prefix ``*`` when it ends inside a word; ``None`` when no word is
    left (``C#``, ``🚀``, ``?!``). ``[more]python`` ⇒ ``"[more]python"*``."""
    if any(ord(ch) > 127 and not (ch.isalnum() or ch.isspace()) for ch in literal):
        return None  # symbols/emoji: tokenizers disagree on them; the trigram/scan decides
    text = _LEADING_WORD_RE.sub("", literal).replace('"', " ")
    if not _WORD_CHAR_RE.search(text):
        return None
    return '"' + text + '"' + ("*" if _WORD_CHAR_RE.match(text[-1]) else "")


def phrase_match(sanitized: str) -> str | None:
    """The exact-phrase form of a query of two or more plain terms (no operator, no prefix):
    ``foo bar`` ⇒ ``"foo bar"``; ``None`` otherwise (issue 16 item 6: a phrase match ranks
    above scattered words)."""
    tokens = query_tokens(sanitized)
    if len(tokens) < 2 or any(t in OPERATORS or t.endswith("*") for t in tokens):
        return None
    return '"' + " ".join(bare_token(t).replace('"', '""') for t in tokens) + '"'


def query_tokens(sanitized: str) -> list[str]:
    """Whitespace tokens of a sanitized query; a quoted phrase (optionally ``*``) is one token."""
    return _TOKEN_RE.findall(sanitized)


def bare_token(token: str) -> str:
    """A token without its phrase quotes and prefix star."""
    t = token.rstrip("*")
    if len(t) >= 2 and t.startswith('"') and t.endswith('"'):
        t = t[1:-1]
    return t


def operands(tokens: Iterable[str]) -> Iterator[tuple[str | None, bool]]:
    """FTS5 precedence (NOT > AND > OR) over query tokens: ``(None, False)`` where ``OR``
    starts a new group, ``(token, negated)`` for every other term; ``AND``/``NEAR`` are
    dropped and ``NOT`` negates the next term only."""
    negate = False
    for tok in tokens:
        if tok == "OR":
            yield None, False
            negate = False
            continue
        if tok in ("AND", "NEAR"):
            continue
        if tok == "NOT":
            negate = True
            continue
        yield tok, negate
        negate = False


def trigram_match(sanitized: str) -> str:
    """MATCH text for the trigram index: every non-operator token double-quoted."""
    out = []
    for tok in query_tokens(sanitized):
        if tok in OPERATORS:
            out.append(tok)
        else:
            out.append('"' + bare_token(tok).replace('"', '""') + '"')
    return " ".join(out)


# -------------------------------------------------------------------------------------
# Routing (docs/sessions.md §7.2)
# -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SearchCapabilities:
    """What the database behind a connection offers to search right now."""

    fts5: bool  # FTS5 module present and ``messages_fts`` exists
    trigram: bool  # ``messages_fts_trigram`` usable
    stale: bool  # ``fts_stale`` set: the indexes are detached
    folded: bool = False  # PostgreSQL: the accent-folded document index (s09) is there
    #: A CJK-bigram index may serve short CJK (SQLite: the route checks its objects;
    #: PostgreSQL: the ``messages_cjk_grams`` GIN index is there).
    bigram: bool = True
    #: PostgreSQL: the symbol-gram index ``messages_symbol_grams`` (s08) narrows the literal
    #: tier of a literal holding punctuation, symbols or emoji.
    symbols: bool = False


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
    #: The literal tier (``fts`` route only): rows whose content holds this text as typed.
    literal: str | None = None
    #: Literal hits rank first (the text has characters the word index cannot see);
    #: otherwise they follow the word hits (substrings inside longer words).
    literal_first: bool = False
    #: Exact-phrase MATCH text ranked above the scattered-word matches, or ``None``.
    phrase: str | None = None
    #: The literal tier can use the trigram index (≥ 3 characters and the index present);
    #: otherwise it scans, newest first.
    literal_indexed: bool = False
    #: SQLite: a long literal's candidates come from this word-index phrase
    #: (:func:`literal_word_phrase`), checked by ``LIKE`` — a long trigram phrase reads the
    #: doclists of dozens of common trigrams.
    literal_words: str | None = None
    #: PostgreSQL: match the accent-folded document (``messages_fts_fold``, s09).
    folded: bool = False
    #: PostgreSQL: the literal tier may narrow its candidates by the symbol-gram index (s08).
    symbols: bool = False
    #: ``cjk_like`` on SQLite: try the CJK-bigram index first (docs/sessions-storage.md §3.9.3; the route
    #: checks the objects and falls back to this plan's LIKE when it cannot serve).
    bigram: bool = False


def like_groups(sanitized: str) -> tuple[tuple[LikeTerm, ...], ...]:
    """LIKE terms of a sanitized query: AND-groups (to be OR-ed), FTS5 precedence."""
    groups: list[list[LikeTerm]] = [[]]
    for tok, negate in operands(_LIKE_TOKEN_RE.findall(sanitized)):
        if tok is None:
            groups.append([])
            continue
        term = tok.replace('"', "").replace("*", "")
        if term:
            groups[-1].append(LikeTerm(term, negate))
    return tuple(tuple(g) for g in groups if any(not t.negated for t in g))


def cjk_like_groups(sanitized: str) -> tuple[tuple[LikeTerm, ...], ...]:
    """LIKE terms of the CJK substring route: one group per token, so any token matches."""
    terms = [bare_token(t) for t in query_tokens(sanitized) if t not in OPERATORS]
    return tuple((LikeTerm(t),) for t in terms if t)


def plan_search(sanitized: str | None, caps: SearchCapabilities, *,
                role_filter: Sequence[str] | None = None,
                source_filter: Sequence[str] | None = None,
                literal: str | None = None) -> SearchPlan:
    """Choose the route for an already sanitized query (pure; docs/sessions.md §7.2 steps 2–6, amended
    by issue 16). ``literal`` is :func:`literal_text` of the query as typed: the LIKE routes
    compile it (:func:`literal_groups`), the standard route adds its literal tier.

    The steps, in order, each a function below: a query the FTS index cannot serve takes the
    LIKE route; one with no indexable word takes its literal alone; CJK text takes the
    trigram or the CJK route; everything else the standard FTS route."""
    wants_tool = bool(role_filter) and "tool" in role_filter  # type: ignore[operator]
    if wants_tool or caps.stale or not caps.fts5:
        return _like_plan(sanitized, literal, wants_tool=wants_tool, stale=caps.stale)
    excluded_src = bool(source_filter) and any(
        s in ("cron", "subagent") for s in source_filter)  # type: ignore[union-attr]
    if sanitized is None:
        return _literal_only_plan(literal, caps, excluded_src=excluded_src)
    terms = [bare_token(t) for t in query_tokens(sanitized) if t not in OPERATORS]
    if has_cjk(sanitized):
        return _cjk_plan(sanitized, terms, caps, excluded_src=excluded_src)
    return _standard_plan(sanitized, terms, literal, caps, excluded_src=excluded_src)


def _like_plan(sanitized: str | None, literal: str | None, *, wants_tool: bool,
               stale: bool) -> SearchPlan:
    """The LIKE route: tool rows asked for (indexed only in part), a stale index, no FTS5."""
    reason = ("tool rows are indexed only to 8192 characters" if wants_tool
              else "FTS index stale" if stale else "FTS5 unavailable")
    groups = (literal_groups(literal) if literal is not None
              else like_groups(sanitized) if sanitized else ())
    return SearchPlan("like", groups=groups, reason=reason)


def _literal_only_plan(literal: str | None, caps: SearchCapabilities, *,
                       excluded_src: bool) -> SearchPlan:
    """Nothing the word index can see (``'?!'``, ``'->'``, ``'⨁'``): the literal alone."""
    if literal is None or excluded_src:
        return SearchPlan("none", reason="nothing searchable")
    return SearchPlan("fts", literal=literal, literal_first=True, reason="literal only",
                      literal_indexed=caps.trigram and len(literal) >= LITERAL_TRIGRAM_MIN,
                      symbols=caps.symbols)


def _cjk_plan(sanitized: str, terms: list[str], caps: SearchCapabilities, *,
              excluded_src: bool) -> SearchPlan:
    """CJK text: the trigram index when every term is long enough for it, else the CJK route
    (the bigram index when there is one)."""
    cjk_ok = (cjk_count(sanitized) >= 3 and terms
              and all(len(t) >= 3 for t in terms)
              and all(cjk_count(t) >= 3 for t in terms if has_cjk(t)))
    if caps.trigram and cjk_ok and not excluded_src:
        return SearchPlan("trigram", match=trigram_match(sanitized), reason="CJK ≥ 3")
    return SearchPlan("cjk_like", groups=cjk_like_groups(sanitized),
                      reason="short CJK or no trigram index",
                      bigram=caps.fts5 and caps.bigram and not excluded_src)


def _standard_plan(sanitized: str, terms: list[str], literal: str | None,
                   caps: SearchCapabilities, *, excluded_src: bool) -> SearchPlan:
    """The standard FTS route, with its trigram fallback, phrase and literal tiers."""
    fallback = None
    if caps.trigram and terms and all(len(t) >= 3 for t in terms):
        fallback = trigram_match(sanitized)
    lit, first = None, False
    if literal is not None and not excluded_src:
        first = word_invisible(literal)
        if first or len(literal) >= LITERAL_TRIGRAM_MIN:
            lit = literal
    return SearchPlan("fts", match=sanitized, trigram_fallback=fallback, reason="standard",
                      literal=lit, literal_first=first and lit is not None,
                      phrase=phrase_match(sanitized), literal_indexed=caps.trigram and (
                          lit is not None and len(lit) >= LITERAL_TRIGRAM_MIN),
                      literal_words=(literal_word_phrase(lit) if lit is not None
                                     and len(lit) > LITERAL_WORDS_MIN else None),
                      folded=caps.folded, symbols=caps.symbols)


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
    """One search hit (docs/sessions.md §7.3). Fields not requested through ``fields`` are ``None``."""

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
        names = RESULT_FIELDS if fields is None else check_fields(fields)
        out: dict[str, object] = {}
        for name in names:
            value = getattr(self, name)
            if name == "context" and value is not None:
                value = [{"role": c.role, "content": c.content} for c in value]
            out[name] = value
        return out


def check_fields(fields: Sequence[str] | None) -> tuple[str, ...]:
    """The requested result fields in canonical order; ``TypeError``/``ValueError`` if bad."""
    if fields is None:
        return RESULT_FIELDS
    if isinstance(fields, (str, bytes)):
        raise TypeError("fields must be a sequence of field names, not a string")
    names = list(fields)
    unknown = [n for n in names if n not in RESULT_FIELDS]
    if unknown:
        raise ValueError(f"unknown search result field(s) {unknown}; known: {list(RESULT_FIELDS)}")
    return tuple(n for n in RESULT_FIELDS if n in names)


def name_list(value: str | Iterable[str] | None) -> list[str]:
    """A filter argument (one name, several or ``None``) as a list of names; a lone
    surrogate becomes U+FFFD and NUL a space, as in the query text (no stored name holds
    either, issue 31), so a filter never makes a search raise."""
    if value is None:
        return []
    if isinstance(value, str):
        return [searchable(value)]
    return [searchable(str(v)) for v in value]
