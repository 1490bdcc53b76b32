"""Issue 16: search finds what was typed, first — on both backends (real SQLite file, real
PostgreSQL server; the corpus fixture runs once per backend).

Properties (hypothesis):

1. For a message planted in a trigram-eligible session (non-tool row, not cron/subagent) and
   any substring of it typed as the query whose trimmed length is ≥ 3 characters, the
   message is in the results.
2. For any text a user can type, every hit is explained by the semantics documented in
   ``search.py``: the row's content holds the typed text (literal tier; case folded), or the
   row holds, as substrings, every word of the positive terms of one OR-group of the word
   query (case and diacritics folded), or — CJK route — one of its tokens.

Examples: literal-punctuation text ranks first although its words are everywhere; operator
words at an edge are words; the LIKE route (``--role tool``) reads operators and ``=`` as
typed; emoji and symbols are found; an exact phrase ranks above scattered words; accents
fold alike on both backends.
"""

from __future__ import annotations

import itertools
import re
import unicodedata

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from hermes_data.sessions.search.messages import (cjk_like_groups, has_cjk, like_groups, literal_text,
                                         plan_search, sanitize_fts_query)
from hermes_data.sessions.search.plan import LikeTerm, SearchCapabilities, literal_groups
from hermes_data.sessions.store import SessionStore

from tests.sessions.conftest import BACKENDS, module_target

PROFILE = settings(max_examples=120, deadline=None,
                   suppress_health_check=[HealthCheck.function_scoped_fixture,
                                          HealthCheck.too_slow])

FILLER = [
    "hermes config json for the gateway", "the config of hermes is json", "and now we wait",
    "AND OR NOT near NEAR and or not", "see ~/.config/hermes/config.json please",
    "use x->y for the mapping", "C# and C++ and [list] items", "it's in gateway/run.py",
    "deploy 🚀 shipped", "sum ⨁ of parts", "le café est prêt", "a resume of cafe culture",
    "我们明天去广西桂林旅游", "日志 北京", "scattered words: fox the quick brown",
    "the quick brown fox jumps", "50% of 100% done", "why? because",
]


@pytest.fixture(scope="module", params=BACKENDS)
def store(request, tmp_path_factory):
    with SessionStore(module_target(request, tmp_path_factory, "search-literal")) as s:
        s.create_session("cli1", "cli")
        s.create_session("cron1", "cron")
        s.append_messages_batch("cli1", [{"role": "user", "content": t, "timestamp": 1_000.0 + i}
                                         for i, t in enumerate(FILLER)])
        s.append_messages_batch("cli1", [
            {"role": "assistant", "content": "calling", "timestamp": 2_000.0,
             "tool_calls": [{"function": {"name": "terminal", "arguments": "{}"}}]},
            {"role": "tool", "tool_name": "terminal", "content": "progress 100% ok",
             "timestamp": 2_001.0}])
        yield s


def _row(store, mid):
    with store.engine.connect() as c:
        row = c.exec_driver_sql(
            "SELECT content, tool_name, tool_calls FROM messages WHERE id = %s"
            if store.engine.dialect.name == "postgresql" else
            "SELECT content, tool_name, tool_calls FROM messages WHERE id = ?", (mid,)).one()
    return [v or "" for v in row]


def _fold(text: str) -> str:
    # Case and diacritics folded (a superset of unicode61's and unaccent's folding).
    return "".join(c for c in unicodedata.normalize("NFKD", text.casefold())
                   if not unicodedata.combining(c)).casefold()


_WORD = re.compile(r"[^\W_]+")


def explained(query: str, row: list[str]) -> bool:
    """The documented semantics of a hit (module docstring, property 2)."""
    literal = literal_text(query)
    content = row[0]
    if literal is not None and _fold(literal) in _fold(content):
        return True
    whole = _fold(" ".join(row))
    sanitized = sanitize_fts_query(query)
    if sanitized is None:
        return False
    if has_cjk(sanitized):
        if any(_fold(t.text) in whole for g in cjk_like_groups(sanitized) for t in g):
            return True
    for group in like_groups(sanitized):
        words = [w for t in group if not t.negated for w in _WORD.findall(_fold(t.text))]
        if all(w in whole for w in words):
            return True
    return False


# -------------------------------------------------------------------------------------
# Examples of each item
# -------------------------------------------------------------------------------------


def _contents(store, hits):
    return [_row(store, h.id)[0] for h in hits]


@pytest.mark.parametrize("query, expect", [
    ("~/.config", "see ~/.config/hermes/config.json please"),
    ("x->y", "use x->y for the mapping"),
    ("[list]", "C# and C++ and [list] items"),
    ("C#", "C# and C++ and [list] items"),
    ("why?", "why? because"),
])
def test_literal_text_ranks_first(store, query, expect):
    hits = store.search_messages(query, limit=5)
    assert hits and _contents(store, hits)[0] == expect
    assert hits[0].route == "literal" and ">>>" in (hits[0].snippet or "")


@pytest.mark.parametrize("query", ["NOT", "AND now", "OR", "x OR"])
def test_operator_words_at_an_edge_are_words(store, query):
    sanitized = sanitize_fts_query(query)
    assert sanitized is not None and '"' in sanitized
    if query == "AND now":
        assert _contents(store, store.search_messages(query)) == ["and now we wait"]
    elif query != "x OR":
        assert "AND OR NOT near NEAR and or not" in _contents(store, store.search_messages(query))


def test_not_negates_the_next_term_only_on_every_route(store):
    """``the NOT jumps gateway`` means the, gateway and not jumps — on the word index (where
    FTS5 alone would read ``the NOT (jumps gateway)`` and return every other row with
    "the"), on the LIKE route and on PostgreSQL alike."""
    for role_filter in (None, ["user", "tool"]):
        assert len(store.search_messages("the NOT jumps", role_filter=role_filter)) > 2
        assert _contents(store, store.search_messages(
            "the NOT jumps gateway", role_filter=role_filter)) == \
            ["hermes config json for the gateway"]
        assert store.search_messages("the NOT jumps wait", role_filter=role_filter) == []


def test_like_route_does_not_reinterpret_operators_or_split_on_equals(store):
    for q in ("' OR 1=1 --", "1=1"):
        assert store.search_messages(q, role_filter=["tool"]) == []
    hits = store.search_messages("100%", role_filter=["tool"])
    assert _contents(store, hits) == ["progress 100% ok"]


@pytest.mark.parametrize("query, expect", [("🚀", "deploy 🚀 shipped"), ("⨁", "sum ⨁ of parts")])
def test_emoji_and_symbols_are_searchable(store, query, expect):
    assert expect in _contents(store, store.search_messages(query))


def test_exact_phrase_ranks_above_scattered_words(store):
    hits = store.search_messages("quick brown fox")
    assert _contents(store, hits)[:2] == ["the quick brown fox jumps",
                                          "scattered words: fox the quick brown"]


def test_recency_breaks_ties_in_the_literal_tier(store):
    store.append_message("cli1", "user", "older a::b text", timestamp=float(next(_ts)))
    newer = store.append_message("cli1", "user", "newer a::b text", timestamp=float(next(_ts)))
    hits = store.search_messages("a::b")
    assert hits[0].id == newer and len(hits) == 2


def test_relevance_ties_in_the_word_tier(store):
    ids = [store.append_message("cli1", "user", "tiebreak zebra", timestamp=float(next(_ts)))
           for _ in range(3)]
    # PostgreSQL: newest first; SQLite keeps FTS5's order (oldest first; search.py says why).
    expected = ids[::-1] if store.engine.dialect.name == "postgresql" else ids
    assert [h.id for h in store.search_messages("zebra")] == expected


def test_pages_across_tiers_are_disjoint_and_complete(store):
    everything = [h.id for h in store.search_messages("config", limit=100)]
    paged = [h.id for o in range(0, len(everything), 2)
             for h in store.search_messages("config", limit=2, offset=o)]
    assert paged == everything and len(set(everything)) == len(everything)


def test_plan_of_a_punctuation_only_query_is_the_literal():
    caps = SearchCapabilities(fts5=True, trigram=True, stale=False)
    plan = plan_search(None, caps, literal="?!")
    assert plan.route == "fts" and plan.literal == "?!" and plan.literal_first
    assert not plan.literal_indexed  # two characters: no trigram, a scan


def test_a_compound_glued_to_a_symbol_is_a_term_of_its_own(store):
    """The sanitizer quotes ``广.a`` right after an emoji (``aaaaa🚀"广.a"``); the tokens read
    it as FTS5 does — a bareword stops at the quote — so the short-CJK route's terms are
    ``aaaaa🚀`` and ``广.a``, not one term holding the quotes (found by the property below)."""
    assert cjk_like_groups(sanitize_fts_query("aaaaa🚀广.a") or "") == (
        (LikeTerm("aaaaa🚀"),), (LikeTerm("广.a"),))
    mid = store.append_message("cli1", "user", "aaaaa🚀广.a", timestamp=float(9_999_000))
    assert mid in {h.id for h in store.search_messages("aaaaa🚀广.a", fields=["id"])}


# -------------------------------------------------------------------------------------
# Properties (after the examples: pytest groups a module fixture's tests by backend in file
# order, and the properties plant rows the examples must not see)
# -------------------------------------------------------------------------------------

_ts = itertools.count(10_000_000)
TEXT = st.lists(st.sampled_from(
    list("abcdefxyzABC019 .,;:!?'\"()[]{}<>=+-*/\\_#@$%^&|~`")
    + ["é", "ü", "ñ", "ß", "🚀", "⨁", "→", "广", "西", "桂", "林", "日", " AND ", " OR ", "NOT"]),
    min_size=3, max_size=30).map("".join)


@PROFILE
@given(text=TEXT, data=st.data())
def test_any_substring_of_three_or_more_finds_the_message(store, text, data):
    start = data.draw(st.integers(0, len(text) - 3))
    end = data.draw(st.integers(start + 3, len(text)))
    query = text[start:end]
    assume(len(query.strip()) >= 3)
    mid = store.append_message("cli1", "user", text, timestamp=float(next(_ts)))
    hits = store.search_messages(query, limit=1000, fields=["id"])
    assert mid in {h.id for h in hits}, (text, query)


QUERY = st.one_of(
    TEXT,
    st.lists(st.sampled_from(["hermes", "config", "json", "AND", "OR", "NOT", "~/.config",
                              "x->y", "C#", "🚀", "cafe", "café", "what?", "the", "fox",
                              "广西", "日志", "50%", "1=1", "'", "--", '"quick brown"', "*"]),
             min_size=1, max_size=5).map(" ".join),
)


@PROFILE
@given(query=QUERY, sort=st.sampled_from([None, "newest"]))
def test_hits_are_explained_by_the_documented_semantics(store, query, sort):
    hits = store.search_messages(query, limit=50, sort=sort, fields=["id"])
    assert len({h.id for h in hits}) == len(hits)  # no row twice across tiers
    for h in hits:
        assert explained(query, _row(store, h.id)), (query, _row(store, h.id))


@PROFILE
@given(query=QUERY)
def test_like_route_hits_hold_the_typed_terms(store, query):
    hits = store.search_messages(query, role_filter=["tool", "user"], limit=50, fields=["id"])
    literal = literal_text(query)
    groups = literal_groups(literal) if literal else ()
    for h in hits:
        whole = " ".join(_row(store, h.id)).casefold()
        assert any(all(t.text.casefold() in whole for t in g if not t.negated)
                   for g in groups), (query, whole)


ACCENTED = st.sampled_from(list("éèêëàâäçñüöïîôûáíóúÉÀÇÑÜ"))


@pytest.mark.parametrize("query, expect", [
    ("cafe", "le café est prêt"), ("café", "a resume of cafe culture"),
    ("pret", "le café est prêt"), ("résumé", "a resume of cafe culture"),
])
def test_accents_fold_alike_on_both_backends(store, query, expect):
    assert expect in _contents(store, store.search_messages(query, limit=50))
