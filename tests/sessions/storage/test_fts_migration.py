"""optimize-storage, the legacy FTS layout migration (spec sessions-ext-storage.md §3.6,
§3.10; acceptance 13, 15–17): the upstream schema-21 fixture and generated legacy files,
storage layout 1, bookkeeping, the O(n) teardown, refusals, and PostgreSQL's answer.
Pauses are zeroed (seed 003: the pause was most of a test's time)."""

from __future__ import annotations

import fcntl
import os
import sqlite3
from collections import namedtuple

import pytest

from hermes_data.sessions.storage.fts import layout as fts_storage
from hermes_data.sessions.storage import opening
from hermes_data.sessions.backends import sqlite_open
from hermes_data.sessions.store import SessionStore

from tests.sessions.storage.fts_migration_support import (counts, fixture_terms, fts_check, layout, legacy_file,
                                    meta, search_ids)


@pytest.fixture(autouse=True)
def no_pauses(monkeypatch):
    monkeypatch.setattr(fts_storage, "PAUSE_MIN_S", 0.0)
    monkeypatch.setattr(fts_storage, "PAUSE_FACTOR", 0.0)


class Stop(Exception):
    """Raised from a fault point: the run stops there (its transaction rolls back)."""


def stop_at(monkeypatch, point: str, count: int) -> None:
    seen = [0]

    def hook(name: str) -> None:
        if name == point:
            seen[0] += 1
            if seen[0] >= count:
                raise Stop(name)

    monkeypatch.setattr(fts_storage, "fault_point", hook)


def _substring_rows(path, term: str) -> set[int]:
    con = sqlite3.connect(path)
    try:
        return {r[0] for r in con.execute(
            "SELECT id FROM messages WHERE lower(COALESCE(content,'') || ' ' || "
            "COALESCE(tool_name,'') || ' ' || COALESCE(tool_calls,'')) LIKE ?",
            (f"%{term}%",))}
    finally:
        con.close()


def test_the_legacy_fixture_moves_to_the_current_layout_and_every_term_stays_found(
        tmp_path, monkeypatch):
    """Acceptance 13 on state_fork_v21: available, ok, current layout, no trash,
    fts_storage_version 3, schema_version still 21, the same hits before, during (the gap
    supplement) and after, 'integrity-check' passing."""
    path = legacy_file(tmp_path)
    terms = fixture_terms(path)
    assert len(terms) >= 10
    monkeypatch.setattr(fts_storage, "CHUNK_IDS", 60)
    with SessionStore(path) as s:
        assert s.fts_optimize_available()
        assert s.fts_rebuild_status() is None
        s.set_meta("fts_optimize_available", "1")  # upstream's advert: deleted at settle
        s.set_meta("fts_teardown_fts_v22_trash_gone_progress", "[7]")  # an orphan marker
        before = search_ids(s, terms)
        assert sum(map(len, before.values())) > 0
        during = []

        def cb(p):
            if p.phase == "backfill" and 0 < p.percent < 100:
                during.append((p, search_ids(s, terms), s.fts_rebuild_status()))

        result = s.optimize_fts_storage(progress_cb=cb)
        assert result.ok and result.reason is None and result.vacuumed
        assert during, "the backfill reported progress"
        for p, hits, status in during:
            assert status is not None and status.pending and status.indexed == p.indexed
            for t in terms:
                missing = set(before[t]) - set(hits[t])
                # LIKE cannot see past the NUL of an encoded multimodal row, FTS can.
                assert not missing - _encoded_rows(path), (t, missing)
                assert set(hits[t]) - set(before[t]) <= _substring_rows(path, t)
        assert search_ids(s, terms) == before
        assert not s.fts_optimize_available()
        assert s.fts_rebuild_status() is None
        assert s.get_meta("fts_storage_version") == "3"
    objs = layout(path)
    assert not [n for n in objs if n.startswith("fts_v22_trash_")]
    assert "tool_name" in objs["messages_fts"] and "tool_calls" not in objs["messages_fts_trigram"]
    assert "fts_teardown" not in " ".join(meta(path))
    assert "fts_optimize_available" not in meta(path)
    con = sqlite3.connect(path)
    assert con.execute("SELECT MAX(version) FROM schema_version").fetchone()[0] == 21
    con.close()
    fts_check(path)
    n, docs = counts(path)
    assert n == docs


def _encoded_rows(path) -> set[int]:
    con = sqlite3.connect(path)
    try:
        return {r[0] for r in con.execute(
            "SELECT id FROM messages WHERE substr(CAST(content AS BLOB), 1, 1) = x'00'")}
    finally:
        con.close()


def _to_layout_1(path) -> None:
    """Replace the current trigram half by storage layout 1 (the trigram declares and
    indexes ``tool_calls``)."""
    con = sqlite3.connect(path)
    con.executescript("""
        DROP TRIGGER messages_fts_trigram_insert; DROP TRIGGER messages_fts_trigram_delete;
        DROP TRIGGER messages_fts_trigram_update; DROP TABLE messages_fts_trigram;
        DROP VIEW messages_fts_trigram_src;
        CREATE VIEW messages_fts_trigram_src AS SELECT m.id, m.content, m.tool_name, m.tool_calls
            FROM messages m;
        CREATE VIRTUAL TABLE messages_fts_trigram USING fts5(content, tool_name, tool_calls,
            content='messages_fts_trigram_src', content_rowid='id', tokenize='trigram');
        CREATE TRIGGER messages_fts_trigram_insert AFTER INSERT ON messages BEGIN
            INSERT INTO messages_fts_trigram(rowid, content, tool_name, tool_calls)
            VALUES (new.id, new.content, new.tool_name, new.tool_calls); END;
        CREATE TRIGGER messages_fts_trigram_delete AFTER DELETE ON messages BEGIN
            INSERT INTO messages_fts_trigram(messages_fts_trigram, rowid, content, tool_name,
            tool_calls) VALUES ('delete', old.id, old.content, old.tool_name, old.tool_calls); END;
        CREATE TRIGGER messages_fts_trigram_update AFTER UPDATE OF content, tool_name,
            tool_calls ON messages BEGIN
            INSERT INTO messages_fts_trigram(messages_fts_trigram, rowid, content, tool_name,
            tool_calls) VALUES ('delete', old.id, old.content, old.tool_name, old.tool_calls);
            INSERT INTO messages_fts_trigram(rowid, content, tool_name, tool_calls)
            VALUES (new.id, new.content, new.tool_name, new.tool_calls); END;
        INSERT INTO messages_fts_trigram(messages_fts_trigram) VALUES ('rebuild');
    """)
    con.close()


def test_a_layout_1_trigram_is_upgraded_and_tool_calls_stay_found_through_messages_fts(
        tmp_path):
    path = tmp_path / "state.db"
    calls = [{"id": "c1", "type": "function",
              "function": {"name": "zyxwquartz", "arguments": "{}"}}]
    with SessionStore(path) as s:
        s.create_session("a", "cli")
        s.append_messages_batch("a", [{"role": "user", "content": f"plain text {i}"}
                                      for i in range(20)])
        s.append_message("a", "assistant", "calling a tool", tool_calls=calls)
    _to_layout_1(path)
    sqlite_open.forget_stamps()
    with SessionStore(path) as s:
        assert "tool_calls" in layout(path)["messages_fts_trigram"]
        assert s.fts_optimize_available()
        assert [h.id for h in s.search_messages("zyxwquartz")]
        assert s.optimize_fts_storage(vacuum=False).ok
        hits = s.search_messages("zyxwquartz")
        assert len(hits) == 1 and hits[0].route in ("fts", "gap")
    assert "tool_calls" not in layout(path)["messages_fts_trigram"]
    con = sqlite3.connect(path)
    assert con.execute("SELECT COUNT(*) FROM messages_fts_trigram WHERE messages_fts_trigram "
                       "MATCH '\"zyxwquartz\"'").fetchone()[0] == 0
    assert con.execute("SELECT COUNT(*) FROM messages_fts WHERE messages_fts "
                       "MATCH 'zyxwquartz'").fetchone()[0] == 1
    con.close()
    fts_check(path)


def test_an_interrupted_run_keeps_its_markers_across_opens_and_resumes(tmp_path, monkeypatch):
    """Acceptance 15 (in process): stopped after 3 chunks, the next opens neither rebuild nor
    clear the markers; a second run resumes and indexes no row twice."""
    path = legacy_file(tmp_path, extra=2000)
    monkeypatch.setattr(fts_storage, "CHUNK_IDS", 200)
    stop_at(monkeypatch, "step:after", 3)
    with SessionStore(path) as s:
        with pytest.raises(Stop):
            s.optimize_fts_storage()
        status = s.fts_rebuild_status()
        assert status is not None and status.indexed == 600 and status.pending
    kept = {k: v for k, v in meta(path).items() if k.startswith("fts_rebuild")}
    for _ in range(2):
        sqlite_open.forget_stamps()
        with SessionStore(path) as s:
            assert not any("rebuil" in r for r in s.open_repairs), s.open_repairs
            assert s.search_messages("basalt", limit=5)
        assert {k: v for k, v in meta(path).items() if k.startswith("fts_rebuild")} == kept
    monkeypatch.setattr(fts_storage, "fault_point", None)
    with SessionStore(path) as s:
        assert s.optimize_fts_storage(vacuum=False).ok
    fts_check(path)
    assert counts(path)[0] == counts(path)[1]


def _data_version_after_open(path) -> tuple[int, int]:
    watcher = sqlite3.connect(path)
    try:
        before = watcher.execute("PRAGMA data_version").fetchone()[0]
        with SessionStore(path) as s:
            assert s.open_repairs == []
        return before, watcher.execute("PRAGMA data_version").fetchone()[0]
    finally:
        watcher.close()


def test_an_empty_legacy_store_settles_and_reopens_write_free(tmp_path):
    path = legacy_file(tmp_path)
    con = sqlite3.connect(path)
    con.execute("DELETE FROM messages")
    con.commit()
    con.close()
    with SessionStore(path) as s:
        assert s.fts_optimize_available()
        r = s.optimize_fts_storage()
        assert r.ok, r
        assert s.get_meta("fts_storage_version") == "3"
        assert s.fts_rebuild_status() is None
    assert not any(k.startswith("fts_rebuild") for k in meta(path))
    for _ in range(2):
        sqlite_open.forget_stamps()
        before, after = _data_version_after_open(path)
        assert before == after  # nothing committed by the open
    fts_check(path)


def test_a_high_water_without_progress_is_repaired_and_every_row_indexed_once(tmp_path):
    """Acceptance 17: the triggers indexed rows above a high water that has no progress;
    bookkeeping empties the indexes and backfills the whole table."""
    path = tmp_path / "state.db"
    with SessionStore(path) as s:
        s.create_session("a", "cli")
        s.append_messages_batch("a", [{"role": "user", "content": f"first pewter {i}"}
                                      for i in range(300)])
        s.set_meta("fts_rebuild_high_water", "150")
        s.append_messages_batch("a", [{"role": "user", "content": f"second garnet {i}"}
                                      for i in range(200)])
        assert s.fts_rebuild_status() is not None
        r = s.optimize_fts_storage(vacuum=False)
        assert r.ok, r
        assert len(s.search_messages("pewter", limit=1000)) == 300
        assert len(s.search_messages("garnet", limit=1000)) == 200
    fts_check(path)
    assert counts(path) == (500, 500)


def test_an_empty_base_index_beside_messages_is_backfilled(tmp_path):
    path = tmp_path / "state.db"
    with SessionStore(path) as s:
        s.create_session("a", "cli")
        s.append_messages_batch("a", [{"role": "user", "content": f"onyx {i}"}
                                      for i in range(50)])
    con = sqlite3.connect(path)
    for t in ("messages_fts", "messages_fts_trigram"):
        con.execute(f"INSERT INTO {t}({t}) VALUES ('delete-all')")
    con.commit()
    con.close()
    sqlite_open.forget_stamps()
    with SessionStore(path) as s:
        assert s.fts_optimize_available()
        assert s.optimize_fts_storage(vacuum=False).ok
        assert len(s.search_messages("onyx", limit=100)) == 50
    fts_check(path)


def _steps(store, fn) -> int:
    """VM steps (progress-handler ticks of 100 instructions) ``fn`` costs on the writer."""
    ticks = [0]

    def tick() -> int:
        ticks[0] += 1
        return 0

    raw = store.backend._raw
    raw.set_progress_handler(tick, 100)
    try:
        fn()
    finally:
        raw.set_progress_handler(None, 100)
    return ticks[0]


def test_a_300000_row_trash_table_drains_with_constant_steps_per_chunk(tmp_path, monkeypatch):
    """Acceptance 16: chunks at the start and at the end cost the same VM steps (no re-scan
    from the start: O(n) in total); the drain ends with the table dropped, marker gone."""
    monkeypatch.setattr(fts_storage, "TRASH_CHUNK_ROWS", 2000)
    path = tmp_path / "state.db"
    with SessionStore(path) as s:
        s.create_session("a", "cli")
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE fts_v22_trash_messages_fts_data(id INTEGER PRIMARY KEY, block BLOB)")
    con.execute("WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < 300000) "
                "INSERT INTO fts_v22_trash_messages_fts_data SELECT i, zeroblob(8) FROM k")
    con.commit()
    con.close()
    sqlite_open.forget_stamps()
    with SessionStore(path) as s:
        cost = []
        rounds = 0
        while True:
            result = []
            cost.append(_steps(s, lambda: result.append(fts_storage._fts_teardown_trash_step(s))))
            rounds += 1
            if not result[0][0]:
                break
        drained = cost[:-2]  # the last two: the DROP and the empty check
        assert len(drained) == 150
        assert max(drained[-5:]) <= 1.2 * max(drained[:5]) + 50, (drained[:5], drained[-5:])
        assert not s.fts_optimize_available()
    assert "fts_v22_trash_messages_fts_data" not in layout(path)
    assert not [k for k in meta(path) if k.startswith("fts_teardown_")]


def test_a_compound_key_trash_table_drains_in_key_order_and_resumes_from_its_marker(
        tmp_path, monkeypatch):
    monkeypatch.setattr(fts_storage, "TRASH_CHUNK_ROWS", 7)
    path = tmp_path / "state.db"
    with SessionStore(path) as s:
        s.create_session("a", "cli")
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE fts_v22_trash_messages_fts_idx(segid, term, pgno, "
                "PRIMARY KEY(segid, term)) WITHOUT ROWID")
    rows = [(seg, bytes([b, 0, 255 - b]), seg * b) for seg in range(1, 6) for b in range(0, 40)]
    con.executemany("INSERT INTO fts_v22_trash_messages_fts_idx VALUES (?, ?, ?)", rows)
    con.commit()
    con.close()
    ordered = sorted((seg, term) for seg, term, _ in rows)
    key = "fts_teardown_fts_v22_trash_messages_fts_idx_progress"
    sqlite_open.forget_stamps()
    with SessionStore(path) as s:
        stop_at(monkeypatch, "trash:before-commit", 3)
        for _ in range(2):
            assert fts_storage._fts_teardown_trash_step(s) == (True, 7)
        with pytest.raises(Stop):
            fts_storage._fts_teardown_trash_step(s)  # stopped before its commit: nothing kept
        monkeypatch.setattr(fts_storage, "fault_point", None)
        assert fts_storage._decode_key(s.get_meta(key), 2) == ordered[13]
        left = _left(path)
        assert left == ordered[14:]
        while fts_storage._fts_teardown_trash_step(s)[0]:
            rest = _left(path)
            assert rest == ordered[len(ordered) - len(rest):]  # always a suffix in key order
            marker = s.get_meta(key)
            if marker is not None and rest:
                assert fts_storage._decode_key(marker, 2) < rest[0]
    assert "fts_v22_trash_messages_fts_idx" not in layout(path)
    assert key not in meta(path)


def _left(path):
    con = sqlite3.connect(path)
    try:
        if not con.execute("SELECT 1 FROM sqlite_master WHERE name = "
                           "'fts_v22_trash_messages_fts_idx'").fetchone():
            return []
        return [tuple(r) for r in con.execute(
            "SELECT segid, term FROM fts_v22_trash_messages_fts_idx ORDER BY segid, term")]
    finally:
        con.close()


def test_the_demote_renames_only_its_own_shadow_tables(tmp_path):
    """Explicit names (#103647): tables that merely begin with ``messages_fts`` — upstream's
    ``messages_fts_cjk`` shadows — are never swept into the trash."""
    path = legacy_file(tmp_path)
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE messages_fts_cjk_data(id INTEGER PRIMARY KEY, block BLOB)")
    con.execute("INSERT INTO messages_fts_cjk_data VALUES (1, x'00')")
    con.commit()
    con.close()
    with SessionStore(path) as s:
        assert s.optimize_fts_storage(vacuum=False).ok
    assert "messages_fts_cjk_data" in layout(path)


Usage = namedtuple("Usage", "total used free")


def test_refusals(tmp_path, monkeypatch):
    path = legacy_file(tmp_path)
    with SessionStore(path) as s:
        monkeypatch.setattr(fts_storage, "disk_usage", lambda p: Usage(10**12, 0, 10**6))
        assert s.optimize_fts_storage() == fts_storage.OptimizeStorageResult(
            False, "insufficient_disk", False)
        assert "messages_fts_src" not in layout(path)  # nothing done
        lock = os.open(f"{path}.fts_rebuild.lock", os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(lock, fcntl.LOCK_EX)
        monkeypatch.setattr(fts_storage, "ADMISSION_WAIT_S", 0.0)
        try:
            assert s.optimize_fts_storage(force=True).reason == "busy"
        finally:
            os.close(lock)
        assert "tool_name" not in layout(path)["messages_fts"]  # still legacy
    con = sqlite3.connect(path)
    con.execute("INSERT INTO state_meta(key, value) VALUES ('fts_stale', '1')")
    con.commit()
    con.close()
    with SessionStore(path, read_only=True) as ro:
        assert not ro.fts_optimize_available()  # read-only, and stale
    con = sqlite3.connect(path)
    con.execute("DELETE FROM state_meta WHERE key = 'fts_stale'")
    con.commit()
    con.close()
    with SessionStore(path, read_only=True) as ro:
        assert ro.optimize_fts_storage().reason == "read_only"
        assert not ro.fts_optimize_available() and not ro.fts_rebuild_step()
    opening.force_capabilities(opening.FtsCapabilities(False, False))
    try:
        with SessionStore(path) as s:
            assert s.optimize_fts_storage().reason == "fts5_unavailable"
            assert not s.fts_optimize_available()
    finally:
        opening.force_capabilities(None)


def test_a_fresh_store_has_nothing_to_optimize_and_settles_at_once(sqlite_store):
    s = sqlite_store
    s.create_session("a", "cli")
    s.append_message("a", "user", "hello")
    assert not s.fts_optimize_available()
    assert s.fts_rebuild_status() is None and not s.fts_rebuild_step()
    seen = []
    assert s.optimize_fts_storage(progress_cb=seen.append).ok
    assert [p.phase for p in seen] == ["vacuum", "done"]


def test_postgresql_optimize_storage_is_optimize_and_vacuum(pg_store):
    """§3.10: ok=True; the migration's other entries answer False / None."""
    pg_store.create_session("a", "cli")
    pg_store.append_message("a", "user", "hello postgres")
    seen = []
    assert pg_store.optimize_fts_storage(progress_cb=seen.append) == \
        fts_storage.OptimizeStorageResult(True, None, True)
    assert [p.phase for p in seen] == ["vacuum", "done"]
    assert not pg_store.fts_optimize_available()
    assert not pg_store.fts_rebuild_step()
    assert pg_store.fts_rebuild_status() is None
    assert pg_store.search_messages("postgres")


def test_a_stale_index_gets_one_core_recovery_first(tmp_path):
    """§3.6 step 1: ``fts_stale`` ⇒ not available; optimize-storage first runs the core
    recovery (nobody else holds the file here), then migrates."""
    path = legacy_file(tmp_path, extra=100)
    with SessionStore(path) as s:
        con = sqlite3.connect(path)
        con.execute("INSERT INTO state_meta(key, value) VALUES ('fts_stale', '1')")
        con.execute("DROP TRIGGER messages_fts_insert")
        con.commit()
        con.close()
        assert not s.fts_optimize_available()
        r = s.optimize_fts_storage(vacuum=False)
        assert r.ok, r
        assert s.get_meta("fts_stale") is None
        assert len(s.search_messages("amber", limit=100)) == len(
            [i for i in range(1, 101) if i % 16 == 0 or (i // 16) % 16 == 0])
    fts_check(path)


def test_a_sibling_handle_keeps_writing_through_the_demote_and_the_backfill(
        tmp_path, monkeypatch):
    """A handle opened on the legacy layout re-reads the schema after the demote (the cookie
    moved): its appends during the backfill are indexed by the gated triggers, once."""
    path = legacy_file(tmp_path, extra=600)
    monkeypatch.setattr(fts_storage, "CHUNK_IDS", 100)
    sid = "20260801_090000_a1b2c3"
    with SessionStore(path) as sibling, SessionStore(path) as s:
        sibling.append_message(sid, "user", "written on the legacy layout quokkaword")
        written = []

        def cb(p):
            if p.phase == "backfill" and len(written) < 3:
                sibling.append_message(sid, "user", f"sibling quokkaword {len(written)}")
                sibling.append_messages_batch(sid, [{"role": "user", "content": "batch quokkaword"}
                                                    for _ in range(5)])
                written.append(p.indexed)
                assert len(s.search_messages("quokkaword", limit=100)) == 1 + 6 * len(written)

        assert s.optimize_fts_storage(progress_cb=cb, vacuum=False).ok
        assert len(written) == 3
        assert len(sibling.search_messages("quokkaword", limit=100)) == 19
    fts_check(path)
    assert counts(path)[0] == counts(path)[1]


def test_without_writable_schema_reset_the_two_step_shape_migrates_too(tmp_path, monkeypatch):
    """§3.6 step 3, a build refusing ``writable_schema = RESET`` (< 3.33; injected here):
    markers first and the tables forgotten with a schema-cookie bump, then the shadow tables
    renamed and the current objects created in a second transaction."""
    monkeypatch.setattr(fts_storage, "RESET_SUPPORTED", False)
    path = legacy_file(tmp_path, extra=300)
    terms = fixture_terms(path)
    with SessionStore(path) as s:
        before = search_ids(s, terms)
        r = s.optimize_fts_storage(vacuum=False)
        assert r.ok, r
        assert search_ids(s, terms) == before
    fts_check(path)
    assert counts(path)[0] == counts(path)[1]
    assert not [n for n in layout(path) if n.startswith("fts_v22_trash_")]
