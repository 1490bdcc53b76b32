"""The CJK gram index on PostgreSQL (spec sessions-ext-storage.md §2.5, §3.9.3, §4 item 30):
``hermes_cjk_grams`` and the partial GIN index ``messages_cjk_grams`` from revision
``s07_storage``; the short-CJK route takes its candidates from the index and verifies them
with the core ILIKE predicate, so its pages equal the scoped ILIKE route's.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings

from hermes_data.sessions.search import cjk
from hermes_data.sessions.store import SessionStore

from tests.sessions.conftest import _truncate, qmark_for_tests
from tests.sessions.storage.test_cjk_index import CASES, _mix, check_route, fill_scopes, reference_statement

pytestmark = pytest.mark.journal_independent("PostgreSQL only")


@pytest.fixture(scope="module")
def pg_corpus(pg_session_url):
    """Rows in every scope (tool rows, cron/subagent/delegate sessions, hidden rows), then
    updates and deletes straight through SQL (the index follows them: no queue)."""
    _truncate(pg_session_url)
    rng = random.Random(30)
    with SessionStore(pg_session_url) as s:
        qmark_for_tests(s)
        fill_scopes(s, rng)
        with s.engine.begin() as conn:
            for mid in rng.sample(range(1, 200), 20):
                conn.exec_driver_sql("UPDATE messages SET content = ? WHERE id = ?",
                                     (_mix(rng), mid))
            for mid in rng.sample(range(1, 200), 10):
                conn.exec_driver_sql("DELETE FROM messages WHERE id = ?", (mid,))
        yield s


def _reference(store, groups, **kw) -> list[int]:
    """The scoped ILIKE route, written out (delegates: the only model_config in the corpus
    naming the key)."""
    sql, params = reference_statement(
        groups, like="ILIKE", ph="%s",
        delegate_free="COALESCE(s.model_config, '') NOT LIKE '%%_delegate_from%%'", **kw)
    raw = store.engine.raw_connection()
    try:
        cur = raw.cursor()
        cur.execute(sql, params)
        return [r[0] for r in cur.fetchall()]
    finally:
        raw.close()


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(**CASES)
def test_gram_route_equals_the_scoped_ilike_route(pg_corpus, monkeypatch, query, limit, offset,
                                                  sort, prescan, filters):
    check_route(pg_corpus, lambda groups, **kw: _reference(pg_corpus, groups, **kw),
                lambda groups: cjk.pg_gram_groups(groups) is not None, monkeypatch,
                query, limit, offset, sort, prescan, filters)


def test_grams_function_letters_and_pairs(pg_corpus):
    with pg_corpus.engine.connect() as conn:
        def grams(role, content, tool_name=None, tool_calls=None):
            return conn.exec_driver_sql(
                "SELECT hermes_cjk_grams(%s, %s, %s, %s)",
                (role, content, tool_name, tool_calls)).scalar()
        assert grams("user", "桂广西 hi 广") == sorted({"桂", "广", "西", "桂广", "广西"})
        assert grams("user", "ascii only", "tool", '{"a": 1}') == []
        assert grams("tool", "广西") == []  # tool rows are out of scope
        assert grams("user", None, "工具", '{"q": "日志"}') == sorted({"工", "具", "工具", "日",
                                                                       "志", "日志"})
        assert grams("user", "\U00020000\U00020001") == ["\U00020000", "\U00020000\U00020001",
                                                         "\U00020001"]


def test_short_cjk_examples_and_the_plan_uses_the_index(pg_corpus):
    s = pg_corpus
    s.create_session("ex", "cli")
    lone, triple, spaced, kana = (s.append_message("ex", "user", text) for text in
                                  ("广", "桂广西", "广 西", "ア・イ"))
    assert {lone, triple, spaced} <= {h.id for h in s.search_messages("广", limit=500)}
    pair = {h.id for h in s.search_messages("广西", limit=500)}
    assert triple in pair and spaced not in pair
    assert kana in {h.id for h in s.search_messages("ア・", limit=500)}
    with s.engine.connect() as conn:
        plan = "\n".join(r[0] for r in conn.exec_driver_sql(
            "EXPLAIN SELECT c.id FROM messages c WHERE c.role <> 'tool' AND "
            "hermes_cjk_grams(c.role, c.content, c.tool_name, c.tool_calls) @> "
            "ARRAY['广西']::text[]"))
    assert "messages_cjk_grams" in plan, plan


def test_storage_revision_objects_and_no_sqlite_markers(pg_corpus):
    with pg_corpus.engine.connect() as conn:
        index = conn.exec_driver_sql(
            "SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() "
            "AND indexname = 'messages_cjk_grams'").scalar()
        volatility = conn.exec_driver_sql(
            "SELECT provolatile, proparallel FROM pg_proc WHERE proname = 'hermes_cjk_grams' "
            "AND pronamespace = current_schema()::regnamespace").one()
        stats = conn.exec_driver_sql(
            "SELECT count(*) FROM pg_statistic_ext WHERE stxname = "
            "'sessions_delegate_from_stats'").scalar()
        markers = conn.exec_driver_sql(
            "SELECT count(*) FROM state_meta WHERE key LIKE 'cjk_bigram%%'").scalar()
    assert index is not None and "gin" in index and "role <> 'tool'" in index
    assert tuple(volatility) == ("i", "s")
    assert markers == 0
    assert stats == 1  # the scope's delegate test is estimated from statistics (PG >= 14)
    status = pg_corpus.cjk_index_status()
    assert not status.available and status.backfill is None


def test_exception_block_helpers_keep_queries_serial(pg_corpus):
    """s07: ``hermes_json_get``/``hermes_json_object``/``hermes_jsonb`` open a subtransaction
    (EXCEPTION block), which no process of a parallel query may; PARALLEL UNSAFE keeps every
    query calling them serial, so a forced parallel plan still answers (it failed with
    "cannot start subtransactions during a parallel operation" when they were SAFE)."""
    with pg_corpus.engine.connect() as conn:
        flags = dict(conn.exec_driver_sql(
            "SELECT proname, proparallel FROM pg_proc WHERE pronamespace = "
            "current_schema()::regnamespace AND proname IN "
            "('hermes_json_get', 'hermes_json_object', 'hermes_jsonb')").fetchall())
        assert flags == {"hermes_json_get": "u", "hermes_json_object": "u", "hermes_jsonb": "u"}
        version = int(conn.exec_driver_sql("SHOW server_version_num").scalar())
        force = "debug_parallel_query" if version >= 160000 else "force_parallel_mode"
        conn.exec_driver_sql(f"SET LOCAL {force} = on")
        n = conn.exec_driver_sql(
            "SELECT count(*) FROM sessions s WHERE hermes_json_get(s.model_config, "
            "'_delegate_from') IS NULL AND hermes_json_object(s.model_config) IS NOT NULL "
            "AND hermes_jsonb(s.model_config) IS NOT DISTINCT FROM hermes_jsonb(s.model_config)"
        ).scalar()
        assert n >= 4


def test_prescan_is_asked_only_by_terms_of_cjk_letters(pg_corpus, monkeypatch):
    """The pre-scan's statistics count a group only when its terms are CJK letters alone: a
    mixed term (``100%服务``) is rarer than its grams say, so its candidates answer. How the
    page finds its rows only — the property test above checks the rows either way."""
    from hermes_data.sessions.search.plan import LikeTerm

    monkeypatch.setattr(cjk, "element_rows", lambda conn, which, grams: 50_000.0)
    with pg_corpus.engine.connect() as conn:
        def common(*terms: str) -> bool:
            groups = [[LikeTerm(t)] for t in terms]
            grams = cjk.pg_gram_groups(groups)
            assert grams is not None
            return cjk._pg_common(conn, grams, groups)

        assert common("服务") and common("日 志") and common("西ZfWe7", "服务")
        assert not common("100%服务") and not common("西ZfWe7") and not common("广AW")
