"""Short CJK mixed with Latin tokens on PostgreSQL (issue 16 item 5): the ``cjk_like`` route's
groups without CJK take their candidates from ``messages_fts_trgm`` (content) and
``messages_tool_trgm`` (``tool_name`` / ``tool_calls``, revision ``s10_tool_trigrams``),
the CJK groups from ``messages_cjk_grams``; the scoped ILIKE predicate verifies them, so
the pages equal the scan's — Latin tokens found only in the tool columns, 1–2-character
Latin tokens (still scanned), LIKE metacharacters ``% _ \\`` and NULL columns included.
"""

from __future__ import annotations

import random

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from hermes_data.sessions.search import cjk
from hermes_data.sessions.search import postgres as search_pg
from hermes_data.sessions.search.messages import (SearchCapabilities, cjk_like_groups, plan_search,
                                         sanitize_fts_query)
from hermes_data.sessions.store import SessionStore

from tests.sessions.conftest import _truncate
from tests.sessions.search.test_cjk_grams_pg import _reference
from tests.sessions.storage.test_cjk_index import LETTERS

pytestmark = pytest.mark.journal_independent("PostgreSQL only")

#: Latin characters of the corpus and the queries: few, so three-letter tokens recur.
LATIN = "abAB9%_\\"


def _text(rng: random.Random, cjk_share: float) -> str:
    return "".join(rng.choice(LETTERS) if rng.random() < cjk_share else rng.choice(LATIN + " ")
                   for _ in range(rng.randint(1, 14)))


@pytest.fixture(scope="module")
def mixed_corpus(pg_session_url):
    """Every scope (tool rows, cron/subagent/delegate sessions, hidden rows); NULL content;
    Latin text that only the tool columns of some rows hold."""
    _truncate(pg_session_url)
    rng = random.Random(44)
    with SessionStore(pg_session_url) as s:
        for sid, source in (("u", "cli"), ("t", "telegram"), ("c", "cron"), ("sa", "subagent")):
            s.create_session(sid, source)
        s.create_session("d", "cli", model_config={"_delegate_from": "u"})
        for sid in ("u", "t", "c", "sa", "d"):
            rows = []
            for i in range(60):
                row = {"role": rng.choice(["user", "assistant", "assistant", "tool"]),
                       "content": None if i % 7 == 0 else _text(rng, 0.3),
                       "timestamp": 100.0 + i}
                if i % 5 == 1:
                    row["tool_name"] = _text(rng, 0.1)
                if i % 4 == 2:
                    row["role"] = "assistant"
                    row["tool_calls"] = [{"function": {"name": _text(rng, 0.1),
                                                       "arguments": "{}"}}]
                if i % 13 == 3:
                    row["display_kind"] = "hidden"
                rows.append(row)
            s.append_messages_batch(sid, rows)
        with s.engine.begin() as conn:
            ids = [r[0] for r in conn.exec_driver_sql("SELECT id FROM messages ORDER BY id")]
            for mid in rng.sample(ids, 30):  # raw tool columns (no JSON escaping), user rows too
                conn.execute(sa.text("UPDATE messages SET tool_calls = :tc, tool_name = :tn "
                                     "WHERE id = :id"),
                             {"tc": _text(rng, 0.1), "tn": rng.choice([None, _text(rng, 0)]),
                              "id": mid})
            conn.exec_driver_sql("ANALYZE messages")
        yield s


CJK_TERM = st.one_of(
    st.text(alphabet=LETTERS[:6] + "ab%", min_size=1, max_size=2).filter(
        lambda t: any(ch in LETTERS for ch in t)),
    st.tuples(st.text(alphabet="abAB9", min_size=3, max_size=3),
              st.sampled_from(LETTERS[:6])).map(lambda p: p[0] + p[1]))
LATIN_TERM = st.one_of(
    st.text(alphabet=LATIN, min_size=1, max_size=4).filter(lambda t: t.strip("%_\\")),
    st.tuples(st.sampled_from(["", "%", "_", "\\"]), st.text(alphabet="abAB9", min_size=3,
                                                           max_size=4)).map("".join))
QUERY = st.tuples(st.lists(CJK_TERM, min_size=1, max_size=2),
                  st.lists(LATIN_TERM, min_size=1, max_size=2)).map(
    lambda parts: " ".join(parts[0] + parts[1]))


def _mixed_indexed(groups) -> bool:
    """Groups the index path serves: a Latin group needs three letters or digits in a row."""
    import re
    return all(cjk.pg_gram_groups([g]) is not None or re.search(r"[A-Za-z0-9]{3}", g[0].text)
               for g in groups)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(query=QUERY, limit=st.sampled_from([1, 3, 50]), offset=st.sampled_from([0, 2]),
       sort=st.sampled_from([None, "newest", "oldest"]), prescan=st.sampled_from([0, 7, 4096]),
       cap=st.sampled_from([0, 5, 2000]), first=st.sampled_from([0, 3, 512]),
       filters=st.sampled_from([{}, {"role_filter": ["user"]}, {"source_filter": ["cli"]},
                                {"exclude_sources": ["telegram"]}]))
def test_mixed_route_equals_the_scoped_ilike_scan(mixed_corpus, monkeypatch, query, limit,
                                                  offset, sort, prescan, cap, first,
                                                  filters):
    sanitized = sanitize_fts_query(query)
    if sanitized is None:
        return
    groups = cjk_like_groups(sanitized)
    plan = plan_search(sanitized, SearchCapabilities(True, True, False, bigram=True))
    if plan.route != "cjk_like" or not plan.bigram:
        return
    monkeypatch.setattr(cjk, "PRESCAN_ROWS", prescan)
    monkeypatch.setattr(search_pg, "PG_MIXED_CANDIDATES", cap)  # 0, 5: the pre-scan runs
    monkeypatch.setattr(search_pg, "PG_MIXED_PRESCAN_ROWS", first)
    hits = mixed_corpus.search_messages(query, limit=limit, offset=offset, sort=sort,
                                        fields=["id"], **filters)
    want = _reference(mixed_corpus, groups, sources=filters.get("source_filter", ()),
                      roles=filters.get("role_filter", ()),
                      excluded=filters.get("exclude_sources", ()), oldest=sort == "oldest")
    event("page has hits" if want[offset:offset + limit] else "empty page")
    assert [h.id for h in hits] == want[offset:offset + limit], (query, sanitized)
    mixed = cjk.pg_gram_groups(groups) is None  # (else the gram route, test_cjk_grams_pg)
    if mixed and _mixed_indexed(groups):
        event("served by the indexes")
        assert {h.route for h in hits} <= {"bigram"}, (query, sanitized)
    elif mixed:
        event("scanned (short Latin token)")
        assert {h.route for h in hits} <= {"cjk_like"}, (query, sanitized)


def test_tool_column_only_tokens_and_null_content(mixed_corpus, monkeypatch):
    monkeypatch.setattr(cjk, "PRESCAN_ROWS", 0)  # the candidates answer, not the pre-scan
    monkeypatch.setattr(search_pg, "PG_MIXED_CANDIDATES", 0)
    monkeypatch.setattr(search_pg, "PG_MIXED_PRESCAN_ROWS", 0)
    s = mixed_corpus
    s.create_session("ex", "cli")
    only_name = s.append_message("ex", "assistant", None, tool_name="zqxName")
    only_calls = s.append_message("ex", "assistant", None, tool_calls=[
        {"function": {"name": "Wvk_50%\\x", "arguments": "{}"}}])
    cjk_row = s.append_message("ex", "user", "广西")
    tool_row = s.append_message("ex", "tool", "zqxname wvk_50%", tool_name="zqxName")
    for query, want in (("广 zqxname", {only_name, cjk_row}), ("西 WVK_50%", {only_calls, cjk_row}),
                        ("广 _50%\\", {only_calls, cjk_row})):
        hits = s.search_messages(query, limit=50)
        ids = {h.id for h in hits}
        assert want <= ids and tool_row not in ids, (query, ids)
    assert {h.route for h in s.search_messages("广 zqxname", limit=50)} == {"bigram"}


def test_tool_trigram_index_serves_the_tool_columns(mixed_corpus):
    with mixed_corpus.engine.begin() as conn:
        names = {r[0] for r in conn.exec_driver_sql(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'messages'")}
        assert {"messages_tool_trgm", "messages_fts_trgm", "messages_cjk_grams"} <= names
        conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
        plan = "\n".join(r[0] for r in conn.exec_driver_sql(
            "EXPLAIN SELECT c.id FROM messages c WHERE c.role <> 'tool' AND "
            "(c.tool_name IS NOT NULL OR c.tool_calls IS NOT NULL) AND "
            "(c.tool_name ILIKE '%%zqx%%' OR c.tool_calls ILIKE '%%zqx%%') "
            "UNION ALL SELECT c.id FROM messages c WHERE c.role <> 'tool' "
            "AND c.content ILIKE '%%zqx%%'"))
    assert "messages_tool_trgm" in plan and "messages_fts_trgm" in plan, plan
