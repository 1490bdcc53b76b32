"""The CJK-bigram index (issue 16 item 4; spec sessions-ext-storage.md §2.2, §3.9.2–§3.9.3).

SQLite only: PostgreSQL's gram index (revision ``s07_storage``) is tested in
``test_cjk_grams_pg.py``. Real files; a
"foreign writer" is a plain ``sqlite3`` connection that never imports the package.
"""

from __future__ import annotations

import random
import sqlite3

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from hermes_data.sessions.search import cjk as cjk_search
from hermes_data.sessions.storage.fts import cjk
from hermes_data.sessions.rows import FtsRebuildStatus
from hermes_data.sessions.search.messages import (SearchCapabilities, cjk_like_groups, plan_search,
                                         sanitize_fts_query)
from hermes_data.sessions.store import SessionStore

from tests.sessions.storage.test_open_path import dbapi_trace, writes_in

CJK_OBJECTS = {"messages_cjk_doc", "messages_cjk_queue", "messages_cjk_fts",
               "messages_cjk_doc_ai", "messages_cjk_doc_ad", "messages_cjk_doc_au",
               "messages_cjk_enqueue_insert", "messages_cjk_enqueue_update",
               "messages_cjk_enqueue_delete"}
#: Letters of the corpus: a few frequent ones (1-letter queries hit often), kana with the
#: katakana middle dot, Hangul and two supplementary-plane ideographs.
LETTERS = "广西桂林日志库ア・イ서버\U00020000\U00020001"
LATIN = "ab%_ Z"


def _objects(path) -> set[str]:
    con = sqlite3.connect(path)
    try:
        return {r[0] for r in con.execute("SELECT name FROM sqlite_master "
                                          "WHERE name LIKE 'messages_cjk%'")}
    finally:
        con.close()


def _run_out(store: SessionStore) -> None:
    while store.cjk_index_step(500):
        pass


def _ids(hits) -> list[int]:
    return [h.id for h in hits]


# -------------------------------------------------------------------------------------
# Documents and tokens (pure)
# -------------------------------------------------------------------------------------


def test_document_and_match_expression():
    assert cjk.cjk_document("我们去广西", "x", None) == "们去 去广 广西 我们 西"
    assert cjk.cjk_document("广 a 广", None, "桂") == "广 桂"  # lone letters, distinct
    assert cjk.cjk_document("ascii only", "read_file", "[]") == ""
    assert cjk.cjk_runs("ア・イ and 𠀀𠀁") == ["ア・イ", "\U00020000\U00020001"]
    assert cjk.cjk_index_tokens("x广西y广") == [("广西", False), ("广", True)]
    groups = cjk_like_groups(sanitize_fts_query("广西 OR 桂"))
    assert cjk_search.cjk_match_expression(groups) == '("广西") OR ("桂"*)'
    assert cjk_search.cjk_match_expression(cjk_like_groups(sanitize_fts_query("广 abc"))) is None


# -------------------------------------------------------------------------------------
# Objects, open path, writes
# -------------------------------------------------------------------------------------


def test_fresh_store_has_the_objects_and_reopens_write_free(tmp_path):
    path = tmp_path / "state.db"
    with SessionStore(path) as s:
        s.create_session("a", "cli")
        s.append_message("a", "user", "北京 日志")
    assert _objects(path) >= CJK_OBJECTS
    with dbapi_trace() as seen:
        with SessionStore(path) as s:
            assert s.open_repairs == []
            assert _ids(s.search_messages("日")) == [1]
    assert seen and writes_in(seen) == [], writes_in(seen)


def test_adopted_legacy_file_backfills_in_chunks(legacy_copy):
    con = sqlite3.connect(legacy_copy)
    con.execute("INSERT INTO sessions(id, source, started_at) VALUES ('zh', 'cli', 1.0)")
    con.execute("INSERT INTO messages(session_id, role, content, timestamp) "
                "VALUES ('zh', 'user', '旧的 广西 消息', 2.0)")
    con.commit()
    top = con.execute("SELECT MAX(id) FROM messages").fetchone()[0]
    con.close()
    with SessionStore(legacy_copy) as s:  # adopted: s07_storage creates the objects
        status = s.cjk_index_status()
        assert status.available and status.backfill == FtsRebuildStatus(True, top, 0, 0)
        # Mid-backfill the window is searched too (the gap arm of the candidates).
        hits = s.search_messages("广西")
        assert top in _ids(hits) and {h.route for h in hits} == {"bigram"}
        steps = 0
        while s.cjk_index_step(max_rows=7):
            steps += 1
        assert steps >= top // 7 and s.cjk_index_status().backfill is None
        assert top in _ids(s.search_messages("广西"))
        with pytest.raises(ValueError):
            s.cjk_index_step(0)
        with pytest.raises(TypeError):
            s.cjk_index_step(True)
    with dbapi_trace() as seen:  # settled again: markers gone, nothing to write
        with SessionStore(legacy_copy) as s:
            assert s.open_repairs == []
    assert writes_in(seen) == [], writes_in(seen)


def test_queue_is_drained_after_appends_and_scoped(tmp_path):
    with SessionStore(tmp_path / "state.db") as s:
        s.create_session("a", "cli")
        s.create_session("c", "cron")
        s.append_message("a", "user", "广西桂林")
        assert s.cjk_index_status().queued == 0
        s.append_messages_batch("a", [{"role": "user", "content": f"日志 {i}"} for i in range(450)])
        assert s.cjk_index_status().queued == 450 - cjk.DRAIN_ROWS  # one bounded drain
        s.append_message("a", "user", "plain ascii")  # earlier work remains: drains again
        s.append_message("a", "user", "plain ascii")
        assert s.cjk_index_status().queued == 0
        # Out of scope or ASCII only: nothing queued, no document.
        s.append_message("a", "tool", "广西 tool output", tool_name="terminal")
        s.append_message("c", "user", "广西 cron")
        s.append_message("a", "user", "ascii", tool_name="read_file")
        con = sqlite3.connect(tmp_path / "state.db")
        assert con.execute("SELECT count(*) FROM messages_cjk_queue").fetchone()[0] == 0
        assert con.execute("SELECT count(*) FROM messages_cjk_doc").fetchone()[0] == 451
        con.close()
        assert len(s.search_messages("日志", limit=500)) == 450
        assert _ids(s.search_messages("广西")) == [1]  # the tool and cron rows: out of scope
        assert [h.role for h in s.search_messages("广西", role_filter=["tool"])] == ["tool"]
        assert [h.source for h in s.search_messages("广西", source_filter=["cron"])] == ["cron"]


def test_foreign_writer_inserts_updates_and_deletes(tmp_path):
    path = tmp_path / "state.db"
    with SessionStore(path) as s:
        s.create_session("a", "cli")
        keep = s.append_message("a", "user", "广西 原文")
        gone = s.append_message("a", "user", "桂林 将被删除")
        con = sqlite3.connect(path, isolation_level=None)  # no package: pure-SQL triggers
        con.execute("INSERT INTO messages(session_id, role, content, timestamp) "
                    "VALUES ('a', 'user', '外部 写入 北京', 9.0)")
        new = con.execute("SELECT MAX(id) FROM messages").fetchone()[0]
        con.execute("UPDATE messages SET content = '上海 改写' WHERE id = ?", (keep,))
        con.execute("DELETE FROM messages WHERE id = ?", (gone,))
        con.execute("INSERT INTO messages(session_id, role, content, timestamp) "
                    "VALUES ('a', 'user', 'only ascii from outside', 9.5)")
        assert {r[0] for r in con.execute("SELECT id FROM messages_cjk_queue")} \
            == {new, keep, gone}
        for query, want in (("北京", [new]), ("上海", [keep]), ("广西", []), ("桂林", [])):
            assert _ids(s.search_messages(query)) == want, query  # before the drain
        _run_out(s)
        for query, want in (("北京", [new]), ("上海", [keep]), ("广西", []), ("桂林", [])):
            assert _ids(s.search_messages(query)) == want, query  # after it
        assert con.execute("SELECT count(*) FROM messages_cjk_queue").fetchone()[0] == 0
        assert con.execute("SELECT count(*) FROM messages_cjk_doc WHERE id NOT IN "
                           "(SELECT id FROM messages)").fetchone()[0] == 0
        con.execute("INSERT INTO messages_cjk_fts(messages_cjk_fts) VALUES ('integrity-check')")
        for (ddl,) in con.execute("SELECT sql FROM sqlite_master WHERE type = 'trigger' "
                                  "AND tbl_name = 'messages' AND name LIKE 'messages_cjk%'"):
            assert "fts" not in ddl.lower()  # a writer without FTS5 never fails on them
        con.close()


def test_corrupt_index_sets_stale_and_search_stays_exact(tmp_path):
    path = tmp_path / "state.db"
    with SessionStore(path) as s:
        s.create_session("a", "cli")
        first = s.append_message("a", "user", "广西 一")
        con = sqlite3.connect(path, isolation_level=None)
        # Damage the index's structure record (SQLITE_CORRUPT_VTAB on its next write).
        con.execute("UPDATE messages_cjk_fts_data SET block = x'0102030405' WHERE id = 10")
        con.close()
        second = s.append_message("a", "user", "广西 二")  # the append itself succeeds
        assert s.cjk_index_status().stale
        assert _ids(s.search_messages("广西")) == [second, first]
    with SessionStore(path) as s:  # the next open rebuilds from the documents
        assert not s.cjk_index_status().stale
        _run_out(s)
        assert _ids(s.search_messages("广西")) == [second, first]
        assert {h.route for h in s.search_messages("广西")} == {"bigram"}


# -------------------------------------------------------------------------------------
# Property: the bigram route equals the scoped LIKE route
# -------------------------------------------------------------------------------------


def _mix(rng: random.Random) -> str:
    return "".join(rng.choice(LETTERS) if rng.random() < 0.6 else rng.choice(LATIN)
                   for _ in range(rng.randint(1, 12)))


def fill_scopes(s: SessionStore, rng: random.Random) -> None:
    """Sessions of every scope (cli, telegram, cron, subagent, a delegate), 40 mixed rows
    each: tool rows, tool names, hidden rows (shared with the PostgreSQL gram tests)."""
    for sid, source in (("u", "cli"), ("t", "telegram"), ("c", "cron"), ("sa", "subagent")):
        s.create_session(sid, source)
    s.create_session("d", "cli", model_config={"_delegate_from": "u"})
    for sid in ("u", "t", "c", "sa", "d"):
        rows = [{"role": rng.choice(["user", "assistant", "assistant", "tool"]),
                 "content": _mix(rng), "timestamp": 100.0 + i} for i in range(40)]
        for r in rows[::9]:
            r["tool_name"] = _mix(rng)
        for r in rows[3::11]:
            r["display_kind"] = "hidden"
        s.append_messages_batch(sid, rows)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Mixed rows in every scope; a pending backfill window; undrained foreign writes."""
    path = tmp_path_factory.mktemp("cjk-corpus") / "state.db"
    rng = random.Random(16)
    with SessionStore(path) as s:
        fill_scopes(s, rng)
        _run_out(s)
        con = sqlite3.connect(path, isolation_level=None)
        # A pending backfill over (20, 60]: documents missing there, markers set.
        con.execute("DELETE FROM messages_cjk_doc WHERE id > 20 AND id <= 60")
        con.executemany("INSERT INTO state_meta(key, value) VALUES (?, ?)",
                        (("cjk_bigram_high_water", "60"), ("cjk_bigram_progress", "20")))
        # Undrained foreign inserts, updates and deletes.
        for i in range(15):
            con.execute("INSERT INTO messages(session_id, role, content, timestamp) "
                        "VALUES (?, 'user', ?, ?)", (rng.choice("ut"), _mix(rng), 500.0 + i))
        for mid in rng.sample(range(1, 200), 20):
            con.execute("UPDATE messages SET content = ? WHERE id = ?", (_mix(rng), mid))
        for mid in rng.sample(range(1, 200), 10):
            con.execute("DELETE FROM messages WHERE id = ?", (mid,))
        con.close()
    with SessionStore(path) as s:
        yield s, path


def reference_statement(groups, *, like: str, ph: str, delegate_free: str, sources=(),
                        roles=(), excluded=(), oldest=False) -> tuple[str, list]:
    """The core LIKE route over ``groups`` restricted to the index's scope (no tool rows,
    trigram-eligible sessions), visible rows, by id — written out independently of the
    library: ``like`` is ``LIKE`` or ``ILIKE``, ``ph`` the driver's placeholder,
    ``delegate_free`` the backend's "not a delegate session" test."""
    def pattern(term: str) -> str:
        return "%" + term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    ors, params = [], []
    for group in groups:
        ands = []
        for t in group:
            cols = " OR ".join(f"COALESCE(m.{c}, '') {like} {ph} ESCAPE '\\'"
                               for c in ("content", "tool_name", "tool_calls"))
            params += [pattern(t.text)] * 3
            ands.append(("NOT " if t.negated else "") + f"({cols})")
        ors.append("(" + " AND ".join(ands) + ")")
    where = [f"({' OR '.join(ors)})", "m.role <> 'tool'",
             "s.source NOT IN ('cron', 'subagent')", delegate_free,
             "COALESCE(m.display_kind, '') <> 'hidden'", "(m.active = 1 OR m.compacted = 1)"]
    for col, op, values in (("s.source", "IN", sources), ("s.source", "NOT IN", excluded),
                            ("m.role", "IN", roles)):
        if values:
            where.append(f"{col} {op} ({', '.join([ph] * len(values))})")
            params += list(values)
    return ("SELECT m.id FROM messages m JOIN sessions s ON s.id = m.session_id "
            f"WHERE {' AND '.join(where)} ORDER BY m.id " + ("ASC" if oldest else "DESC"),
            params)


def _reference(path, groups, **kw) -> list[int]:
    sql, params = reference_statement(
        groups, like="LIKE", ph="?", delegate_free="json_extract(CASE WHEN "
        "json_valid(s.model_config) THEN s.model_config ELSE '{}' END, '$._delegate_from') "
        "IS NULL", **kw)
    con = sqlite3.connect(path)
    try:
        return [r[0] for r in con.execute(sql, params).fetchall()]
    finally:
        con.close()


TERM = st.text(alphabet=LETTERS + "ab%_", min_size=1, max_size=3).filter(
    lambda t: any(ch in LETTERS for ch in t))
QUERY = st.lists(st.tuples(st.sampled_from(["", "OR ", "NOT "]), TERM),
                 min_size=1, max_size=3).map(
    lambda parts: " ".join(op + t for op, t in parts).removeprefix("OR ").removeprefix("NOT "))


#: The property's cases: query, page, order, pre-scan window and filters.
CASES = dict(query=QUERY, limit=st.sampled_from([1, 3, 50]), offset=st.sampled_from([0, 2]),
             sort=st.sampled_from([None, "newest", "oldest"]),
             prescan=st.sampled_from([0, 7, 4096]),
             filters=st.sampled_from([{}, {"role_filter": ["user"]}, {"source_filter": ["cli"]},
                                      {"exclude_sources": ["telegram"]}]))


def check_route(store, reference, eligible, monkeypatch, query, limit, offset, sort, prescan,
                filters) -> None:
    """One case: when the plan sends ``query`` to a CJK index (``eligible(groups)``), the
    page equals ``reference(groups, …)``'s ids, served by the index."""
    sanitized = sanitize_fts_query(query)
    if sanitized is None:
        return
    groups = cjk_like_groups(sanitized)
    plan = plan_search(sanitized, SearchCapabilities(True, True, False))
    if not plan.bigram or not eligible(groups):
        return  # CJK of 3+ letters per term: the trigram route (test_search.py)
    monkeypatch.setattr(cjk_search, "PRESCAN_ROWS", prescan)
    hits = store.search_messages(query, limit=limit, offset=offset, sort=sort, fields=["id"],
                                 **filters)
    want = reference(groups, sources=filters.get("source_filter", ()),
                     roles=filters.get("role_filter", ()),
                     excluded=filters.get("exclude_sources", ()), oldest=sort == "oldest")
    event("page has hits" if want[offset:offset + limit] else "empty page")
    assert _ids(hits) == want[offset:offset + limit], (query, sanitized)
    assert {h.route for h in hits} <= {"bigram"}  # served by the index


@settings(max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(**CASES)
def test_bigram_route_equals_the_scoped_like_route(corpus, monkeypatch, query, limit, offset,
                                                   sort, prescan, filters):
    store, path = corpus
    check_route(store, lambda groups, **kw: _reference(path, groups, **kw),
                lambda groups: cjk_search.cjk_match_expression(groups) is not None, monkeypatch,
                query, limit, offset, sort, prescan, filters)


def test_short_cjk_examples_round_trip(tmp_path):
    """§4 item 26: a letter finds every row holding it, a pair needs adjacency; kana with
    the middle dot and supplementary-plane pairs are indexed and found."""
    with SessionStore(tmp_path / "state.db") as s:
        s.create_session("a", "cli")
        triple, lone, spaced, kana, supp = (s.append_message("a", "user", t) for t in (
            "桂广西", "广", "广 西", "ア・イ です", "x \U00020000\U00020001 y"))
        _run_out(s)
        assert {h.route for h in s.search_messages("广")} == {"bigram"}
        assert set(_ids(s.search_messages("广"))) == {triple, lone, spaced}
        assert _ids(s.search_messages("广西")) == [triple]
        assert _ids(s.search_messages("ア・イ")) == [kana]
        assert _ids(s.search_messages("・")) == [kana]
        assert _ids(s.search_messages("\U00020000\U00020001")) == [supp]
        assert _ids(s.search_messages("\U00020001")) == [supp]


def _meta_keys(path) -> set[str]:
    con = sqlite3.connect(path)
    try:
        return {r[0] for r in con.execute("SELECT key FROM state_meta "
                                          "WHERE key LIKE 'cjk_bigram%'")}
    finally:
        con.close()


def test_cjk_index_setting_drops_and_recreates(tmp_path):
    """§4 item 28: ``sessions.cjk_index: false`` drops every object and key in one
    transaction (search answers through LIKE, with the same rows); ``true`` recreates them
    with a backfill window; a settled file opens write-free either way."""
    path = tmp_path / "state.db"
    off = {"sessions": {"cjk_index": False}}
    with SessionStore(path) as s:
        s.create_session("a", "cli")
        ids = [s.append_message("a", "user", f"广西 {i}") for i in range(5)]
        s.backend.write(lambda tx: tx.exec_driver_sql(
            "INSERT INTO state_meta(key, value) VALUES ('cjk_bigram_stale', '1')"))
    with dbapi_trace() as seen:
        with SessionStore(path, config=off) as s:
            assert any("cjk_index is off" in r for r in s.open_repairs), s.open_repairs
            hits = s.search_messages("广西", limit=50)
            assert sorted(_ids(hits)) == ids and {h.route for h in hits} == {"cjk_like"}
            s.append_message("a", "user", "广西 later")  # no trigger left to queue it
    assert _objects(path) == set() and _meta_keys(path) == set()
    # One transaction: every DROP and the key deletion between one BEGIN and its COMMIT.
    first = next(i for i, st in enumerate(seen) if "DROP TRIGGER IF EXISTS messages_cjk" in st)
    begin = max(i for i, st in enumerate(seen[:first]) if st.upper().startswith("BEGIN"))
    end = next(i for i, st in enumerate(seen) if i > first and st.upper().startswith("COMMIT"))
    drops = [st for st in seen if st.startswith("DROP") and "messages_cjk" in st]
    assert len(drops) == len(CJK_OBJECTS)
    assert all(begin < seen.index(st) < end for st in drops)
    assert any("cjk_bigram_stale" in st and st.startswith("DELETE") for st in seen[begin:end])
    for config in (off, None):  # settled: off stays off; a later true open recreates
        with dbapi_trace() as seen:
            with SessionStore(path, config=config) as s:
                pass
        if config is off:
            assert writes_in(seen) == [], writes_in(seen)
    assert _objects(path) >= CJK_OBJECTS
    assert _meta_keys(path) == {"cjk_bigram_high_water", "cjk_bigram_progress"}
    with SessionStore(path) as s:
        _run_out(s)
        assert len(s.search_messages("广西", limit=50)) == 6
    with dbapi_trace() as seen:
        with SessionStore(path) as s:
            pass
    assert writes_in(seen) == [], writes_in(seen)
    # Only booleans are read; anything else is the default (logged).
    assert cjk.configured_index({"sessions": {"cjk_index": "no"}}) is True
    assert cjk.configured_index(lambda: off) is False


def test_step_waits_out_a_lock_held_past_the_busy_timeout(tmp_path, monkeypatch):
    """Found by the chaos soak (issue 31): in a rollback-journal mode a sibling holding the
    file past the 1 s busy timeout (a VACUUM, a long commit) made ``cjk_index_step``'s read of
    the index objects raise a raw ``sqlite3.OperationalError: database is locked``. It now
    waits with the read patience, like every other read, and then does its step."""
    import threading
    import time

    monkeypatch.setenv("HERMES_DATA_JOURNAL_MODE", "delete")  # WAL readers are never blocked
    path = tmp_path / "state.db"
    with SessionStore(path) as store:
        store.create_session("s", "cli")
        holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        holder.execute("BEGIN EXCLUSIVE")
        release = threading.Timer(1.6, lambda: holder.execute("COMMIT"))
        release.start()
        try:
            t0 = time.monotonic()
            assert store.cjk_index_step() is False  # nothing queued: no work, no error
            assert time.monotonic() - t0 >= 1.0
        finally:
            release.join()
            holder.close()
