"""Session search (spec sessions.md §7.1–§7.3): sanitizer, routing, results, CLI."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3

import pytest

from hermes_data import cli
from hermes_data.sessions.storage import opening
from hermes_data.sessions.search.messages import (ContextMessage, SearchCapabilities, SearchResult,
                                         plan_search, sanitize_fts_query)
from hermes_data.sessions.store import SessionStore

from tests.sessions.conftest import LEGACY_DB

# -------------------------------------------------------------------------------------
# The sanitizer: pure, one case per rule of its docstring table
# -------------------------------------------------------------------------------------


@pytest.mark.parametrize("raw, expected", [
    (None, None), ("", None), ("   \t\n", None), ('""', None), ("?!", None), ("OR", '"OR"'),
    ("AND NOT", '"AND" "NOT"'), ("*", None), ("AND*", '"AND"'), ("NOT", '"NOT"'),
    ("AND now", '"AND" now'), ("x OR", 'x "OR"'), ("NOT OR x", '"NOT" "OR" x'),
    ("it's", "it s"), ("gateway/run.py", 'gateway "run.py"'), ("user@host", "user host"),
    ("a,b", "a b"), ("why?", "why"), ("e=mc2", "e mc2"), ("C:\\path\\file", "C path file"),
    ("`x`", "x"), ("TODO: fix", "TODO fix"), ("50%", "50"), ("100%服务", "100%服务"),
    ("foo.", "foo"), ("-bar", "bar"), ("...", None), ("foo AND OR bar", "foo bar"),
    ("foo OR NOT bar", "foo bar"), ("AND foo", '"AND" foo'), ("foo NOT", 'foo "NOT"'),
    ("foo and bar", "foo and bar"), ("foo OR bar", "foo OR bar"),
    ("b NOT a c", "b NOT a AND c"), ('b NOT "x y" c OR d', 'b NOT "x y" AND c OR d'),
    ('"quoted phrase"', '"quoted phrase"'), ('say "a (b) c', "say a b c"),
    ('"it\'s: here" now?', '"it\'s: here" now'), ("chat-send", '"chat-send"'),
    ("my-app.config.ts", '"my-app.config.ts"'), ("P2.2", '"P2.2"'),
    ("conf**", "conf*"), ("*conf", "conf"), ("a*b", "a b"), ("foo.*", "foo"),
    ("NEAR(a b)", "NEAR a b"), ("col:val", "col val"), ("^x +y", "x y"),
    ("a\x00b\x7fc\x01d", "a b c d"), ("x\ud800y", "x\ufffdy"), ("x" * 3000, "x" * 2048),
])
def test_sanitizer_rules(raw, expected):
    assert sanitize_fts_query(raw) == expected


def test_sanitized_queries_parse_on_a_real_fts5_table(tmp_path):
    # Every rule's output parses: the seed-003 list and its residue, checked against FTS5.
    con = sqlite3.connect(tmp_path / "f.db")
    con.execute("CREATE VIRTUAL TABLE t USING fts5(x)")
    for q in ["it's", "gateway/run.py", "user@host", "a,b", "why?", "e=mc2", "C:\\path\\file",
              "`x`", "TODO: fix", "50%", "foo.", "-bar", "foo AND OR bar", "a*b*", "**",
              "x OR", "NOT*", "AND*N", '"a" NOT "b"', "{x}", "[x]", "x|y", "~x", "$x", "#x"]:
        sanitized = sanitize_fts_query(q)
        if sanitized is not None:  # None means "no query": the search returns [] unasked
            con.execute("SELECT * FROM t WHERE t MATCH ?", (sanitized,)).fetchall()
    con.close()


# -------------------------------------------------------------------------------------
# Routing (pure)
# -------------------------------------------------------------------------------------

FULL = SearchCapabilities(fts5=True, trigram=True, stale=False)


@pytest.mark.parametrize("query, caps, kwargs, route", [
    ("hello", FULL, {}, "fts"),
    ("广西桂林", FULL, {}, "trigram"),
    ("广西 OR 桂林", FULL, {}, "cjk_like"),
    ("广西桂林 ab", FULL, {}, "cjk_like"),  # a 2-character token would empty the AND
    ("广西桂林", SearchCapabilities(True, False, False), {}, "cjk_like"),
    ("广西桂林", FULL, {"source_filter": ["cron"]}, "cjk_like"),
    ("hello", FULL, {"role_filter": ["tool"]}, "like"),
    ("hello", SearchCapabilities(True, True, True), {}, "like"),
    ("hello", SearchCapabilities(False, False, False), {}, "like"),
])
def test_routing(query, caps, kwargs, route):
    assert plan_search(sanitize_fts_query(query), caps, **kwargs).route == route


def test_latin_zero_result_fallback_only_for_three_char_tokens():
    assert plan_search("youer", FULL).trigram_fallback == '"youer"'
    assert plan_search("yo er", FULL).trigram_fallback is None
    assert plan_search("youer", SearchCapabilities(True, False, False)).trigram_fallback is None


def test_like_compilation_groups_and_negation():
    plan = plan_search(sanitize_fts_query('alpha beta OR "gamma delta" NOT eps*'),
                       SearchCapabilities(False, False, False))
    assert [[(t.text, t.negated) for t in g] for g in plan.groups] == [
        [("alpha", False), ("beta", False)], [("gamma delta", False), ("eps", True)]]


# -------------------------------------------------------------------------------------
# Against real stores
# -------------------------------------------------------------------------------------


@pytest.fixture
def filled(store):
    store.create_session("s1", "cli", model="m1")
    store.create_session("s2", "telegram", model="m2")
    store.create_session("c1", "cron")
    t = 1_700_000_000.0
    rows = [
        "it's broken in gateway/run.py", "login as user@host", "values a,b here", "why? because",
        "e=mc2 physics", "open C:\\path\\file now", "run `x` twice", "TODO: fix later",
        "progress 50% done", "this is the quoted phrase indeed", "phrase quoted the wrong way",
        "chat-send failed", "chat and send separately", "foo. bar", "-bar option",
        "foo and bar and OR", "我们明天去广西桂林旅游", "只有广西", "只有桂林", "100%服务 上线",
        "100X服务 上线", "修改youer服务端",
    ]
    ids = []
    for i, text in enumerate(rows):
        ids.append(store.append_message("s1", "user", text, timestamp=t + i))
    store.append_messages_batch("s2", [
        {"role": "assistant", "content": "calling", "timestamp": t + 100,
         "tool_calls": [{"function": {"name": "read_file", "arguments": "{}"}}]},
        {"role": "tool", "tool_name": "read_file", "timestamp": t + 101,
         "content": "x" * 9000 + " beyondprefix marker"},
    ])
    store.append_message("c1", "user", "cron nightly report 广西桂林", timestamp=t + 200)
    return store, ids


SEED_003_QUERIES = [("it's", "it's broken"), ("gateway/run.py", "gateway/run.py"),
                    ("user@host", "user@host"), ("a,b", "a,b"), ("why?", "why?"),
                    ("e=mc2", "e=mc2"), ("C:\\path\\file", "C:\\path\\file"), ("`x`", "`x`"),
                    ("TODO: fix", "TODO: fix"), ("50%", "50%"), ("foo.", "foo. bar"),
                    ("-bar", "-bar option"), ("foo AND OR bar", "foo and bar")]


def _texts(store, hits):
    with store.engine.connect() as c:
        return [c.exec_driver_sql("SELECT content FROM messages WHERE id = ?", (h.id,)).scalar()
                for h in hits]


@pytest.mark.parametrize("query, expect", SEED_003_QUERIES)
def test_ordinary_queries_find_their_row(filled, query, expect):
    store, _ = filled
    hits = store.search_messages(query, limit=50)
    assert any(expect in t for t in _texts(store, hits)), (query, _texts(store, hits))


def test_phrases_dashed_terms_and_percent(filled):
    store, _ = filled
    texts = _texts(store, store.search_messages('"quoted phrase"'))
    assert texts == ["this is the quoted phrase indeed"]
    assert _texts(store, store.search_messages("chat-send")) == ["chat-send failed"]
    # CJK keeps '%' literal on the LIKE route; Latin strips it.
    assert _texts(store, store.search_messages("100%服务")) == ["100%服务 上线"]
    assert "progress 50% done" in _texts(store, store.search_messages("50%"))


def test_cjk_routes(filled):
    store, _ = filled
    hits = store.search_messages("广西桂林")
    assert [h.route for h in hits] == ["trigram"]  # the cron row is not trigram-indexed
    assert _texts(store, hits) == ["我们明天去广西桂林旅游"]
    both = store.search_messages("广西 OR 桂林")
    # Short CJK: the CJK-bigram index (same scope as trigram; PostgreSQL: the s07 GIN grams).
    assert {h.route for h in both} == {"bigram"}
    assert {"只有广西", "只有桂林", "我们明天去广西桂林旅游"} <= set(_texts(store, both))
    cron = store.search_messages("广西桂林", source_filter=["cron"])
    assert _texts(store, cron) == ["cron nightly report 广西桂林"]
    mixed = store.search_messages("youer")
    assert [h.route for h in mixed] == ["trigram"]
    assert _texts(store, mixed) == ["修改youer服务端"]


def test_tool_calls_and_tool_bodies(filled):
    store, _ = filled
    hits = store.search_messages("read_file", role_filter=["assistant"])
    assert len(hits) == 1 and hits[0].role == "assistant" and ">>>read_file<<<" in hits[0].snippet
    assert store.search_messages("beyondprefix") == []  # past the 8192-character index prefix
    tool = store.search_messages("beyondprefix", role_filter=["tool"])
    assert [(h.role, h.route) for h in tool] == [("tool", "like")]
    assert "beyondprefix" in tool[0].snippet and len(tool[0].snippet) <= 120


def test_filters_sort_limit_offset(filled):
    store, _ = filled
    assert {h.source for h in store.search_messages("广西桂林", source_filter=["cron", "cli"])} \
        == {"cron", "cli"}
    # Short CJK searches the trigram scope (the CJK-bigram index's on SQLite, the same on
    # PostgreSQL): cron rows only when a source filter names cron.
    assert store.search_messages("广西", exclude_sources=["cli"]) == []
    assert {h.source for h in store.search_messages("广西", source_filter=["cron"])} == {"cron"}
    newest = store.search_messages("广西", sort="newest")
    oldest = store.search_messages("广西", sort="oldest")
    assert [h.id for h in newest] == [h.id for h in reversed(oldest)]
    assert [h.timestamp for h in newest] == sorted((h.timestamp for h in newest), reverse=True)
    page = store.search_messages("广西", sort="oldest", limit=1, offset=1)
    assert [h.id for h in page] == [oldest[1].id]
    assert store.search_messages("广西", limit=0) == []
    with pytest.raises(ValueError):
        store.search_messages("x", sort="sideways")


def test_fields_subset_and_validation(filled):
    store, _ = filled
    (hit,) = store.search_messages("physics", fields=["source", "id"])
    assert hit.id is not None and hit.source == "cli" and hit.snippet is None and hit.context is None
    assert hit.to_json(["id", "source"]) == {"id": hit.id, "source": "cli"}
    with pytest.raises(ValueError, match="bogus"):
        store.search_messages("physics", fields=["id", "bogus"])
    with pytest.raises(TypeError):
        store.search_messages("physics", fields="id")


def test_snippets_context_and_no_content_column(filled):
    store, ids = filled
    statements: list[str] = []

    from sqlalchemy import event

    def trace(conn, cursor, statement, *a):
        statements.append(statement)

    from sqlalchemy.engine import Engine

    # Every engine: in WAL the reads run on the read pool's, not the writer's.
    event.listen(Engine, "before_cursor_execute", trace)
    try:
        hits = store.search_messages("physics")
        tool = store.search_messages("beyondprefix", role_filter=["tool"])
    finally:
        event.remove(Engine, "before_cursor_execute", trace)
    (hit,) = hits
    assert hit.snippet == "e=mc2 >>>physics<<<"
    assert hit.context == (ContextMessage("user", "why? because"),
                           ContextMessage("user", "open C:\\path\\file now"))
    assert tool[0].context == (ContextMessage("assistant", "calling"),)
    selects = [s for s in statements if s.lstrip().upper().startswith(("SELECT", "WITH"))]
    assert selects
    for s in selects:
        # content only ever appears inside substr()/instr()/LIKE, never as a selected column
        assert not re.search(r"(SELECT|,)\s*(m|n)\.content\s*(,|FROM)", s), s


def test_context_is_bounded_and_flattened(store):
    store.create_session("s", "cli")
    big = "y" * 3_000_000
    store.append_messages_batch("s", [
        {"role": "user", "content": [{"type": "text", "text": "look at this"},
                                     {"type": "image_url", "image_url": {"url": "data:" + "A" * 500_000}}],
         "timestamp": 1.0},
        {"role": "user", "content": "needle here", "timestamp": 2.0},
        {"role": "tool", "tool_name": "t", "content": big, "timestamp": 3.0},
    ])
    (hit,) = store.search_messages("needle")
    assert hit.context == (ContextMessage("user", "look at this"), ContextMessage("tool", "y" * 200))


def test_inactive_and_hidden_rows(store):
    store.create_session("s", "cli")
    a = store.append_message("s", "user", "rewound zebra")
    b = store.append_message("s", "user", "compacted zebra")
    c = store.append_message("s", "user", "hidden zebra", display_kind="hidden")
    d = store.append_message("s", "user", "live zebra")
    with store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE messages SET active = 0 WHERE id = ?", (a,))
        conn.exec_driver_sql("UPDATE messages SET active = 0, compacted = 1 WHERE id = ?", (b,))
    assert {h.id for h in store.search_messages("zebra")} == {b, d}
    assert {h.id for h in store.search_messages("zebra", include_inactive=True)} == {a, b, d}
    assert c not in {h.id for h in store.search_messages("zebra", role_filter=["user", "tool"])}


def test_stale_index_and_missing_fts5_use_like(store):
    store.create_session("s", "cli")
    store.append_message("s", "user", "stale giraffe 广西")
    if store.engine.dialect.name == "sqlite":
        # fts_stale is SQLite's detached-FTS5 state; PostgreSQL's indexes are never stale.
        with store.engine.begin() as conn:
            conn.exec_driver_sql("INSERT INTO state_meta(key, value) VALUES ('fts_stale', '1')")
        assert [h.route for h in store.search_messages("giraffe")] == ["like"]
        with store.engine.begin() as conn:
            conn.exec_driver_sql("DELETE FROM state_meta WHERE key = 'fts_stale'")
    assert [h.route for h in store.search_messages("giraffe")] == ["fts"]
    opening.force_capabilities(opening.FtsCapabilities(False, False))
    try:
        assert [h.route for h in store.search_messages("giraffe")] == ["like"]
        assert [h.route for h in store.search_messages("广西")] == ["like"]
    finally:
        opening.force_capabilities(None)


def test_syntax_error_after_sanitizing_returns_empty(filled, monkeypatch):
    store, _ = filled
    from hermes_data.sessions.search import messages as search
    from hermes_data.sessions.search import postgres as search_pg

    if store.engine.dialect.name == "sqlite":
        monkeypatch.setattr(search, "sanitize_fts_query", lambda q: "foo AND")
        assert store.search_messages("anything") == []
        return
    # PostgreSQL builds its tsquery from bound terms, so it cannot fail to parse; force a
    # rejected statement instead: [] and the read transaction stays usable (savepoint).
    assert store.search_messages("physics", fields=["id"])
    monkeypatch.setattr(search_pg, "pg_tsquery",
                        lambda sanitized, params, prefix="t", **kw: "to_tsquery('simple', '&(')")
    # The word tier is rejected ([] from it); the literal tier still answers in the same
    # read transaction, so the savepoint kept it usable.
    assert [h.route for h in store.search_messages("physics")] == ["literal"]
    monkeypatch.undo()
    assert len(store.search_messages("physics")) == 1


def test_legacy_inline_fixture_is_searchable(tmp_path):
    path = tmp_path / "legacy.db"
    shutil.copyfile(LEGACY_DB, path)
    with SessionStore(path) as s:
        hits = s.search_messages("session_search")  # only inside a row's tool_calls
        assert 20 in {h.id for h in hits}
        assert any(">>>" in (h.snippet or "") for h in hits)
        assert 8 in {h.id for h in s.search_messages("压缩逻辑")}
        assert 25 in {h.id for h in s.search_messages("数据")}
        assert s.search_messages("it's?") is not None


# -------------------------------------------------------------------------------------
# CLI
# -------------------------------------------------------------------------------------


def test_cli_search_human_and_json(filled, capsys):
    store, _ = filled
    url = (str(store.path) if store.engine.dialect.name == "sqlite"
           else store.url.render_as_string(hide_password=False))
    assert cli.main(["search", "physics", "--url", url]) == 0
    out = capsys.readouterr().out
    assert "physics" in out and "s1" in out and "1 result" in out
    assert cli.main(["search", "广西", "--url", url, "--json", "--source", "cron",
                     "--limit", "5"]) == 0
    data = json.loads(capsys.readouterr().out)["sessions"]
    assert [r["source"] for r in data] == ["cron"] and "snippet" in data[0]
    assert cli.main(["search", "?!", "--url", url]) == 0
    assert "no results" in capsys.readouterr().out


def test_result_rows_are_typed():
    r = SearchResult(id=1, session_id="s", context=(ContextMessage("user", "x"),))
    assert r.to_json(["id", "context"]) == {"id": 1, "context": [{"role": "user", "content": "x"}]}


# -------------------------------------------------------------------------------------
# PostgreSQL specifics: the routes use the GIN indexes; compound lexemes
# -------------------------------------------------------------------------------------


def _explain_search(store, query, **kwargs) -> str:
    """EXPLAIN (seq scans disabled) of the first search statement ``query`` sends."""
    from sqlalchemy import event

    sent: list[tuple] = []

    def trace(conn, cursor, statement, parameters, context, executemany):
        # (a Core page names the alias ``messages AS m``, issue 32)
        if re.search(r"FROM messages (AS )?m\b", statement) and not sent:
            sent.append((statement, parameters))

    event.listen(store.engine, "before_cursor_execute", trace)
    try:
        store.search_messages(query, **kwargs)
    finally:
        event.remove(store.engine, "before_cursor_execute", trace)
    statement, parameters = sent[0]
    with store.engine.connect() as conn:
        raw = conn.connection.driver_connection
        with raw.transaction():
            raw.execute("SET LOCAL enable_seqscan = off")
            # Once autovacuum has analyzed the shared test database, a LIMIT 1 backward scan
            # of the primary key looks cheapest on these tiny tables: rule it out too, so the
            # plan shows which index the statement's shape lets the route use.
            raw.execute("SET LOCAL enable_indexscan = off")
            return "\n".join(r[0] for r in raw.execute("EXPLAIN " + statement, parameters))


def test_postgresql_routes_use_the_gin_indexes(pg_store):
    pg_store.create_session("s", "cli")
    pg_store.append_messages_batch("s", [{"role": "user", "content": f"row {i} 我们去广西桂林"}
                                         for i in range(50)])
    assert "messages_fts_document" in _explain_search(pg_store, "row")
    assert "messages_fts_document" in _explain_search(pg_store, "row", sort="newest")
    assert "messages_fts_trgm" in _explain_search(pg_store, "广西桂林")


def test_postgresql_splits_compounds_like_unicode61(pg_store):
    # The stored document (s02) splits on every ASCII non-alphanumeric, as unicode61 does:
    # a word inside a path, host, e-mail or URL is found on the standard route itself.
    pg_store.create_session("s", "cli")
    mid = pg_store.append_message("s", "user", "crash in gateway/run.py today")
    mail = pg_store.append_message("s", "user", "write to Ops@Example.org or https://docs.io/a?b=1")
    under = pg_store.append_message("s", "assistant", "calling", tool_calls=[
        {"function": {"name": "read_file", "arguments": "{}"}}])
    hits = pg_store.search_messages("gateway")
    assert [(h.id, h.route) for h in hits] == [(mid, "fts")]
    assert hits[0].snippet == "crash in >>>gateway<<</run.py today"
    assert [h.id for h in pg_store.search_messages("run.py")] == [mid]
    (whole,) = pg_store.search_messages("gateway/run.py")
    assert whole.id == mid and whole.snippet == "crash in >>>gateway/run.py<<< today"
    assert [h.id for h in pg_store.search_messages("py")] == [mid]
    # Case folds on both sides; hosts and URLs split too.
    assert [(h.id, h.route) for h in pg_store.search_messages("EXAMPLE")] == [(mail, "fts")]
    assert [h.id for h in pg_store.search_messages("docs")] == [mail]
    # Phrases keep word order: 'run gateway' as a phrase is not 'gateway run'.
    assert pg_store.search_messages('"run gateway"') == []
    assert [h.id for h in pg_store.search_messages('"gateway run"')] == [mid]
    # Prefixes put ':*' on the last word of the term, like FTS5.
    assert [h.id for h in pg_store.search_messages("gatew*")] == [mid]
    assert [h.id for h in pg_store.search_messages("read_fi*")] == [under]
    assert [h.id for h in pg_store.search_messages('"gateway ru"*')] == [mid]
    assert pg_store.search_messages("read_zz*") == []
    assert [h.id for h in pg_store.search_messages("gateway NOT today")] == []
    assert [h.id for h in pg_store.search_messages("gateway OR docs", sort="oldest")] \
        == [mid, mail]


def test_postgresql_tsquery_splits_terms_like_the_document():
    from hermes_data.sessions.search.messages import pg_tsquery

    params: dict = {}
    sql_text = pg_tsquery('chat-send "foo_ba"* NOT x', params)
    assert "regexp_replace(:t0" in sql_text and "tsquery_phrase" in sql_text
    assert params["t0"] == "chat-send"
    assert params["t1"] == "'ba':*" and params["t1h"] == "foo_"
    assert "!!phraseto_tsquery" in sql_text
    # A prefix term with no word character left has nothing to match.
    assert pg_tsquery("__*", {}) is None

# -------------------------------------------------------------------------------------
# Relevance ranks the newest matches only (docs/sessions.md §7.2, issue 34)
# -------------------------------------------------------------------------------------


def test_relevance_ranks_only_the_newest_matches_that_pass_the_filters(store, monkeypatch):
    """Relevance order considers the newest ``RANK_CANDIDATES`` matches that pass the
    filters, on both backends: an old, strongly matching row outside that window is not
    ranked (``sort='oldest'`` still finds it), and a filter moves the window to the newest
    rows it keeps, not to the newest rows overall."""
    from hermes_data.sessions.search import sql as search_sql

    monkeypatch.setattr(search_sql, "RANK_CANDIDATES", 4)
    store.create_session("old", "cli")
    store.append_message("old", "user", "zeta zeta zeta")  # the best match, oldest
    store.append_message("old", "user", "zeta zeta")
    store.create_session("new", "cli")
    newest_cli = [store.append_message("new", "user", f"zeta and a long line of words {i}")
                  for i in range(5)]
    store.create_session("tg", "telegram")
    tg = [store.append_message("tg", "user", f"zeta in a telegram chat {i}") for i in range(6)]

    # A page the word tier fills (limit = the window): no literal tier after it.
    ranked = {h.id for h in store.search_messages("zeta", limit=4)}
    assert ranked == set(tg[-4:])  # the four newest matches, whatever their relevance
    cli_ranked = {h.id for h in store.search_messages("zeta", source_filter="cli", limit=4)}
    assert cli_ranked == set(newest_cli[-4:])  # the newest four *cli* rows
    oldest = store.search_messages("zeta", sort="oldest", limit=2)
    assert [h.session_id for h in oldest] == ["old", "old"]  # time order has no window
    monkeypatch.setattr(search_sql, "RANK_CANDIDATES", 100)
    assert {h.session_id for h in store.search_messages("zeta", limit=2)} == {"old"}
