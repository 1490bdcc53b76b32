"""``hermes-data copy --store sessions``: the legacy fork fixture, adopted on SQLite and copied
to PostgreSQL, answers the store's read functions identically (multimodal content, lineage,
search included); dangling parent references are refused by name."""

from __future__ import annotations

import dataclasses
import sqlite3

import pytest
import sqlalchemy as sa

from hermes_data.migrate import runner as migrate
from hermes_data.copy.transfer import CopyDanglingReferenceError, copy_store
from hermes_data.sessions.store import SessionStore

from tests.conftest import copy_fixture
from tests.sessions.conftest import _truncate

CHAIN = ["20260806_000000_cmp000", "20260806_010000_cmp001", "20260806_020000_cmp002",
         "20260806_030000_cmp003", "20260806_040000_cmp004"]
MULTIMODAL_SESSION = "20260809_080000_mmd013"
# "gateway" sits mostly inside paths (gateway/run.py): FTS5 splits them, and so does
# PostgreSQL's stored document since s02 (ASCII punctuation is a word boundary there too).
SEARCH_WORDS = ["gateway", "session_search", "压缩逻辑", "数据", "retry", "東京", "jitter*", '"the fix"',
                "it's?", "timeout", "部署"]


def _plain(value):
    if dataclasses.is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)
                if f.name != "route"}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _reads(store: SessionStore) -> dict:
    out: dict = {}
    ids = [s.id for s in store.list_sessions(include_children=True, include_archived=True,
                                             include_hidden=True,
                                             project_compression_tips=False)]
    out["list/all"] = store.list_sessions(include_children=True, include_archived=True,
                                          include_hidden=True, project_compression_tips=False)
    out["list/default"] = store.list_sessions()
    for sid in sorted(ids):
        out[f"session/{sid}"] = store.get_session(sid)
        out[f"messages/{sid}"] = store.get_messages(sid, include_inactive=True)
    for sid in CHAIN:
        out[f"tip/{sid}"] = store.get_compression_tip(sid)
        out[f"root/{sid}"] = store.get_compression_root(sid)
        out[f"chain/{sid}"] = store.get_compression_chain(sid)
    # The adopted file keeps its legacy FTS layout (§2.7), whose trigram index also holds
    # cron/subagent rows; the current layout (and PostgreSQL) leave them out of the trigram
    # route. So cron/subagent rows are compared through source_filter (LIKE on both), every
    # other row with exclude_sources.
    for word in SEARCH_WORDS:
        for scope, kw in (("main", {"exclude_sources": ["cron", "subagent"]}),
                          ("cron", {"source_filter": ["cron", "subagent"]})):
            # Row sets, not order: relevance ranks are engine-specific (bm25 vs ts_rank).
            hits = store.search_messages(word, limit=1000, fields=["id", "session_id", "role"],
                                         **kw)
            out[f"search/{scope}/{word}"] = sorted((h.id, h.session_id, h.role) for h in hits)
            newest = store.search_messages(word, limit=1000, sort="newest", fields=["id"], **kw)
            out[f"search-newest/{scope}/{word}"] = [h.id for h in newest]
    return _plain(out)


def test_legacy_fixture_adopted_then_copied_reads_identically(tmp_path, pg_url):
    # A database of its own: the copy carries the fixture's upstream-only columns and tables
    # onto the target (issue 12), which must not leak into the shared session database.
    pg_session_url = pg_url
    path = copy_fixture("legacy-sessions/state_fork_v21.db", tmp_path)
    migrate.upgrade("sessions", path)
    report = copy_store(path, pg_session_url, store="sessions", batch=7)
    assert report.verified and "messages_fts" in report.skipped
    assert {t.table for t in report.tables} >= {"sessions", "messages", "state_meta"}
    with SessionStore(path) as lite, SessionStore(pg_session_url) as pg:
        assert pg.engine.dialect.name == "postgresql"
        expected, got = _reads(lite), _reads(pg)
        assert expected.keys() == got.keys()
        for key in expected:
            assert got[key] == expected[key], key
        # The pieces the acceptance names, explicitly.
        assert got[f"tip/{CHAIN[0]}"] == CHAIN[-1] and got[f"root/{CHAIN[-1]}"] == CHAIN[0]
        multimodal = [m for m in pg.get_messages(MULTIMODAL_SESSION) if isinstance(m.content, list)]
        assert multimodal and multimodal == [
            m for m in lite.get_messages(MULTIMODAL_SESSION) if isinstance(m.content, list)]
        assert got["search/main/压缩逻辑"] and got["search/cron/压缩逻辑"]
        assert got["search/main/数据"] and got["search/main/session_search"]
        # Recall, not just agreement: FTS5 finds "gateway" inside paths, and PostgreSQL too.
        assert len(got["search/main/gateway"]) >= 30
    with sa.create_engine(pg_session_url).connect() as conn:
        raw = conn.exec_driver_sql("SELECT content FROM messages WHERE session_id = %s "
                                   "AND content LIKE %s", (MULTIMODAL_SESSION, "\ufdd0json:%")).all()
    assert raw  # stored in PostgreSQL's form, not NUL-prefixed


def test_dangling_parent_reference_is_refused_by_name(tmp_path, pg_session_url):
    path = tmp_path / "state.db"
    with SessionStore(path) as s:
        s.create_session("root", "cli")
        s.create_session("child", "cli")
    con = sqlite3.connect(path)  # SQLite never enforced the foreign key: legacy files can hold it
    con.execute("UPDATE sessions SET parent_session_id = 'deleted-parent' WHERE id = 'child'")
    con.commit()
    con.close()
    _truncate(pg_session_url)
    with pytest.raises(CopyDanglingReferenceError,
                       match=r"sessions\.parent_session_id: 1 row.*child -> 'deleted-parent'"):
        copy_store(path, pg_session_url, store="sessions")
    with sa.create_engine(pg_session_url).connect() as conn:
        assert conn.exec_driver_sql("SELECT COUNT(*) FROM sessions").scalar() == 0


def test_children_before_parents_in_key_order_copy_parents_first(tmp_path, pg_session_url):
    # Keys sort children first ('a…' < 'z…'): a key-ordered insert would violate the FK.
    path = tmp_path / "state.db"
    with SessionStore(path) as s:
        s.create_session("z-root", "cli")
        s.create_child_session("z-root", "m-mid", "branch")
        s.create_child_session("m-mid", "a-leaf", "branch")
        s.append_message("a-leaf", "user", [{"type": "text", "text": "leaf parts"}])
    _truncate(pg_session_url)
    report = copy_store(path, pg_session_url, store="sessions", batch=1)
    assert report.verified
    with SessionStore(pg_session_url) as pg:
        assert pg.get_session("a-leaf").parent_session_id == "m-mid"
        assert pg.get_messages("a-leaf")[0].content == [{"type": "text", "text": "leaf parts"}]
