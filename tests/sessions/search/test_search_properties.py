"""Property tests of session search (hypothesis, against a real store file and the real
PostgreSQL server: the corpus fixture runs once per backend).

1. For any text, ``search_messages`` never raises — on every route (unicode61, trigram, LIKE
   for tool rows, LIKE with FTS5 missing).
2. A word planted in a message is found by searching exactly that word, within the
   tokenizer's documented rules: a *word* is a run of unicode61 token characters (ASCII
   letters and digits, Latin/Greek/Cyrillic letters; case and diacritics fold alike on both
   sides) or of CJK characters (≥ 3 through the trigram index, 1–2 through LIKE), not one of
   the upper-case operators ``AND``/``OR``/``NOT``, with spaces around it in the message.
   On PostgreSQL the same words are lexemes of the 'simple' parser (a word between spaces
   is parsed alike in the message and in the query).
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hermes_data.sessions.storage import opening
from hermes_data.sessions.search.messages import OPERATORS, literal_text, sanitize_fts_query
from hermes_data.sessions.store import SessionStore

from tests.sessions.conftest import BACKENDS, module_target

PROFILE = settings(max_examples=150, deadline=None,
                   suppress_health_check=[HealthCheck.function_scoped_fixture,
                                          HealthCheck.too_slow])

HOSTILE = st.sampled_from(list("\"'*%.-_()[]{}:^+~`!?@#$&|\\/<>=,;\x00\x1a\x7f\t\n ")
                          + ["AND", "OR", "NOT", "NEAR", "广西", "桂林市", "\ud800", "é"])
QUERY = st.one_of(
    st.text(max_size=60),
    st.lists(st.one_of(HOSTILE, st.text(alphabet="abcXYZ09", min_size=1, max_size=5)),
             max_size=12).map("".join),
    st.lists(st.one_of(HOSTILE, st.text(alphabet="abcXYZ09", min_size=1, max_size=5)),
             max_size=8).map(" ".join),
)


@pytest.fixture(scope="module", params=BACKENDS)
def corpus(request, tmp_path_factory):
    with SessionStore(module_target(request, tmp_path_factory, "search-props")) as s:
        s.create_session("cli1", "cli")
        s.create_session("cron1", "cron")
        rows = [{"role": "user", "content": t, "timestamp": 1_000.0 + i} for i, t in enumerate([
            "it's in gateway/run.py", "50% of 广西桂林 users", "AND OR NOT near NEAR",
            "\"quoted\" (parens) [brackets] {braces}", "e=mc2 C:\\path\\file `x`"])]
        rows.append({"role": "tool", "tool_name": "terminal", "content": "z" * 9000 + " tail",
                     "timestamp": 2_000.0})
        rows.append({"role": "assistant", "content": "ok", "timestamp": 2_001.0,
                     "tool_calls": [{"function": {"name": "read_file"}}]})
        s.append_messages_batch("cli1", rows)
        s.append_message("cron1", "user", "nightly 广西桂林 report", timestamp=3_000.0)
        yield s


@PROFILE
@given(query=QUERY, mode=st.sampled_from(["default", "tool", "newest", "cron", "no_fts5"]))
def test_search_never_raises(corpus, query, mode):
    kwargs = {"tool": {"role_filter": ["tool", "user"]}, "newest": {"sort": "newest"},
              "cron": {"source_filter": ["cron"]}}.get(mode, {})
    if mode == "no_fts5":
        opening.force_capabilities(opening.FtsCapabilities(False, False))
    try:
        hits = corpus.search_messages(query, limit=5, **kwargs)
    finally:
        opening.force_capabilities(None)
    assert isinstance(hits, list) and len(hits) <= 5
    assert all(isinstance(h.id, int) for h in hits)
    if literal_text(query) is None:
        assert hits == []
    elif sanitize_fts_query(query) is None and mode in ("default", "newest"):
        # Nothing for the word index ('?!', '"'): only rows holding the typed text (issue 16).
        assert all(h.route == "literal" for h in hits)


LATIN = st.text(alphabet=st.sampled_from(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    "àéîõüçñßøåÆÉÖΩαβγδλπДЖЯжяё"), min_size=1, max_size=12)
CJK = st.text(alphabet=st.sampled_from("广西桂林数据库服务器日志搜索索引会话压缩漢字東京"
                                       "ひらがなカタカナ한국어서버"), min_size=1, max_size=6)
WORD = st.one_of(LATIN, CJK).filter(lambda w: w not in OPERATORS)

_ts = itertools.count(10_000_000)


@PROFILE
@given(word=WORD, before=st.sampled_from(["", "see", "日志", "x1"]),
       source=st.sampled_from(["cli", "telegram"]))
def test_planted_word_is_found_by_searching_it(corpus, word, before, source):
    sid = f"plant-{source}"
    if corpus.get_session(sid) is None:
        corpus.create_session(sid, source)
    ts = float(next(_ts))
    mid = corpus.append_message(sid, "user", f"{before} {word} trailing words", timestamp=ts)
    # Newest first: the planted row is the most recent match whatever else also matches.
    hits = corpus.search_messages(word, sort="newest", limit=3)
    assert mid in {h.id for h in hits}, (word, [h.route for h in hits])
