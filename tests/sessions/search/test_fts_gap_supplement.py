"""Search during an FTS backfill: the gap supplement (spec sessions-ext-storage.md §3.6,
amending core §7.2; acceptance 18). The window ``(progress, high_water]`` is not indexed
yet; a short FTS page is filled by the LIKE compilation over it, with NOT honoured and the
offset carried across the two sources."""

from __future__ import annotations

import sqlite3

import pytest

from hermes_data.sessions.storage.fts import layout as fts_storage
from hermes_data.sessions.backends import sqlite_open
from hermes_data.sessions.store import SessionStore

from tests.sessions.storage.fts_migration_support import fts_check


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    monkeypatch.setattr(fts_storage, "PAUSE_MIN_S", 0.0)
    monkeypatch.setattr(fts_storage, "PAUSE_FACTOR", 0.0)
    monkeypatch.setattr(fts_storage, "CHUNK_IDS", 20)


def _store_with_window(path, contents, steps: int) -> SessionStore:
    """A store holding ``contents`` (ids 1…n, in order) whose indexes were emptied and given
    the window (0, n], then ``steps`` backfill chunks of 20 ids: ids above 20 × steps are
    not indexed."""
    with SessionStore(path) as s:
        s.create_session("a", "cli")
        s.create_session("c", "cron")
        s.append_messages_batch("a", [{"role": "user", "content": c} for c in contents])
    con = sqlite3.connect(path)
    for t in ("messages_fts", "messages_fts_trigram"):
        con.execute(f"INSERT INTO {t}({t}) VALUES ('delete-all')")
    con.execute("INSERT INTO state_meta(key, value) VALUES ('fts_rebuild_high_water', ?), "
                "('fts_rebuild_progress', '0')", (str(len(contents)),))
    con.commit()
    con.close()
    sqlite_open.forget_stamps()
    s = SessionStore(path)
    for _ in range(steps):
        assert s.fts_rebuild_step()
    status = s.fts_rebuild_status()
    assert status is not None and status.indexed == 20 * steps
    return s


def _finish(s: SessionStore) -> None:
    while s.fts_rebuild_step():
        pass
    assert s.fts_rebuild_status() is None


def test_a_term_only_in_an_unindexed_row_is_found(tmp_path):
    contents = [f"filler words number {i}" for i in range(100)]
    contents[89] = "the solitaryterm lives here"
    contents[5] = "indexedonly term"
    s = _store_with_window(tmp_path / "state.db", contents, 2)
    try:
        hits = s.search_messages("solitaryterm")
        assert [(h.id, h.route) for h in hits] == [(90, "gap")]
        assert hits[0].snippet and "solitaryterm" in hits[0].snippet
        assert [h.route for h in s.search_messages("indexedonly")] == ["fts"]
        assert len(s.search_messages("filler", limit=500)) == 98
        _finish(s)
        assert [(h.id, h.route) for h in s.search_messages("solitaryterm")] == [(90, "fts")]
    finally:
        s.close()
    fts_check(tmp_path / "state.db")


def test_not_excludes_rows_in_the_window_too(tmp_path):
    contents = []
    for i in range(120):
        contents.append(f"foo item {i}" + (" bar" if i % 3 == 0 else ""))
    expected = {i + 1 for i in range(120) if i % 3}
    s = _store_with_window(tmp_path / "state.db", contents, 3)
    try:
        during = {h.id for h in s.search_messages("foo NOT bar", limit=500)}
        assert during == expected  # upstream read ``NOT bar`` as ``bar``
        assert {h.id for h in s.search_messages("foo bar", limit=500)} == \
            {i + 1 for i in range(120) if i % 3 == 0}
        _finish(s)
        assert {h.id for h in s.search_messages("foo NOT bar", limit=500)} == expected
    finally:
        s.close()


def _pages(s: SessionStore, query: str, size: int, **kw) -> list[list[int]]:
    pages, offset = [], 0
    while True:
        page = [h.id for h in s.search_messages(query, limit=size, offset=offset, **kw)]
        if not page:
            return pages
        pages.append(page)
        offset += size


@pytest.mark.parametrize("sort", [None, "newest"])
def test_pages_never_repeat_a_row_across_the_index_and_the_window(tmp_path, sort):
    contents = [f"pagedterm entry {i}" for i in range(90)]
    s = _store_with_window(tmp_path / "state.db", contents, 2)  # 40 indexed, 50 in the window
    try:
        pages = _pages(s, "pagedterm", 7, sort=sort)
        flat = [i for p in pages for i in p]
        assert set(pages[0]).isdisjoint(pages[1])
        assert len(flat) == len(set(flat)) == 90
        assert all(len(p) == 7 for p in pages[:-1])
        # a page that starts inside the window (offset past every FTS hit)
        assert [h.id for h in s.search_messages("pagedterm", limit=5, offset=60, sort=sort)] \
            == flat[60:65]
    finally:
        s.close()


def test_the_window_after_the_trigram_route_keeps_the_trigram_scope(tmp_path):
    """A ≥ 3-character CJK query answers from the trigram index (no tool rows, no
    cron/subagent sessions): its supplement keeps that scope."""
    path = tmp_path / "state.db"
    contents = [f"普通的消息 {i}" for i in range(60)]
    s = _store_with_window(path, contents, 1)
    s.append_message("c", "user", "普通的消息 from cron")  # above the high water: indexed
    s.close()
    con = sqlite3.connect(path)
    con.execute("UPDATE messages SET session_id = 'c' WHERE id = 50")  # a cron row in the window
    con.commit()
    con.close()
    with SessionStore(path) as s:
        hits = s.search_messages("普通的", limit=500)
        ids = {h.id for h in hits}
        assert 50 not in ids and len(ids) == 59
        assert {h.route for h in hits} == {"trigram", "gap"}


# ---------------------------------------------------------------------------------------
# Property: during a backfill, search equals the query's meaning over every row
# ---------------------------------------------------------------------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from hermes_data.sessions.search.plan import like_groups, sanitize_fts_query  # noqa: E402

#: Whole tokens only (none inside another, none holding "or"/"and"/"not"): a word match and
#: a substring match agree.
VOCAB = ("amber", "basalt", "cobalt", "dolmen", "ember", "fjell", "garnet", "hollow")


def _rows():
    out = []
    for i in range(200):
        words = [VOCAB[i % 8], VOCAB[(i // 8) % 8]] + ([VOCAB[(i * 5) % 8]] if i % 3 else [])
        out.append(" ".join(words) + f" n{i}")
    return out


@pytest.fixture(scope="module")
def window_store(tmp_path_factory):
    """200 rows, ids 61–200 not indexed yet (a backfill at 30 %)."""
    import hermes_data.sessions.storage.fts.layout as fs
    saved = fs.CHUNK_IDS
    fs.CHUNK_IDS = 20
    try:
        s = _store_with_window(tmp_path_factory.mktemp("gap") / "state.db", _rows(), 3)
    finally:
        fs.CHUNK_IDS = saved
    yield s
    s.close()


def _meaning(query: str) -> set[int]:
    sanitized = sanitize_fts_query(query)
    groups = like_groups(sanitized) if sanitized else ()
    out = set()
    for i, text in enumerate(_rows()):
        words = set(text.split())
        if any(all((t.text in words) != t.negated for t in g) for g in groups):
            out.add(i + 1)
    return out


TERM = st.sampled_from(VOCAB)
QUERY = st.builds(lambda a, op, b, op2, c: " ".join(x for x in (a, op, b, op2 if c else "", c)
                                                   if x),
                  TERM, st.sampled_from(["", "OR", "NOT"]), TERM,
                  st.sampled_from(["", "OR", "NOT"]), st.sampled_from(("",) + VOCAB))


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(query=QUERY, size=st.integers(3, 40), sort=st.sampled_from([None, "newest", "oldest"]))
def test_search_during_a_backfill_means_the_query_over_every_row(window_store, query, size,
                                                                  sort):
    expected = _meaning(query)
    full = [h.id for h in window_store.search_messages(query, limit=1000, sort=sort)]
    assert set(full) == expected and len(full) == len(set(full)), query
    paged: list[int] = []
    for offset in range(0, len(expected) + size, size):
        paged += [h.id for h in window_store.search_messages(query, limit=size, offset=offset,
                                                             sort=sort)]
    assert len(paged) == len(set(paged)) and set(paged) == expected, (query, size)
    if sort is not None:
        assert paged == full  # one timeline, cut into pages
