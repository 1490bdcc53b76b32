"""The maintenance area of ``hermes_data.compat.SessionDB``, checked against upstream's
documented behaviour (docs/compat.md "Maintenance"): prune filters and their dry runs,
deletes with their delegate cascade and transcript files, the marker purge, sizes, VACUUM
and the startup auto-maintenance, on SQLite and PostgreSQL (the ``db`` fixture).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from hermes_data.compat import AUTO_VACUUM_MIN_FREELIST_RATIO, SessionDB
from hermes_data.errors import ConfigurationError
from hermes_data.sessions.errors import StateDbCorruptError

from ..sessions.storage.test_corrupt_handle import DAMAGE

#: The keys upstream's dry-run rows carry.
CANDIDATE_KEYS = {"id", "source", "title", "model", "started_at", "last_active", "ended_at",
                  "message_count", "archived"}


def ended(db: SessionDB, sid: str, source: str = "cli", reason: str = "user_exit", **kw) -> str:
    db.create_session(sid, source, **kw)
    db.end_session(sid, reason)
    return sid


def is_postgresql(db: SessionDB) -> bool:
    return db.store.url.get_backend_name() == "postgresql"


# -- prune filters -------------------------------------------------------------------------


def test_list_prune_candidates_are_ended_sessions_as_dicts(db):
    ended(db, "a")
    ended(db, "b", source="telegram")
    db.create_session("open", "cli")
    got = db.list_prune_candidates()  # upstream: no age filter by default
    assert sorted(r["id"] for r in got) == ["a", "b"]
    assert all(type(r) is dict and set(r) == CANDIDATE_KEYS for r in got)
    assert [r["id"] for r in db.list_prune_candidates(source="telegram")] == ["b"]
    assert db.list_prune_candidates(older_than_days=30) == []  # both were active just now


def test_prune_counters(db):
    ended(db, "a")
    ended(db, "b", source="telegram")
    db.create_session("open1", "cli")
    db.create_session("open2", "telegram")
    assert db.count_prune_matches() == 2
    assert db.count_prune_matches(source="cli") == 1
    assert db.count_open_prune_matches() == 2
    assert db.count_open_prune_matches(source="telegram") == 1
    assert db.count_prune_matches(older_than_days=1) == 0


def test_an_unknown_prune_filter_is_a_type_error(db):
    with pytest.raises(TypeError):
        db.count_prune_matches(colour="blue")


def test_prune_sessions_deletes_ended_matches_and_their_files(db, tmp_path):
    ended(db, "old")
    db.create_session("child", "cli", parent_session_id="old")
    db.create_session("open", "cli")
    (tmp_path / "old.jsonl").write_text("{}\n")
    (tmp_path / "open.jsonl").write_text("{}\n")
    assert db.prune_sessions() == 0  # upstream's default: 90 days inactive
    assert db.prune_sessions(older_than_days=0, sessions_dir=tmp_path) == 1
    assert db.get_session("old") is None
    assert db.get_session("open") is not None  # open sessions are never pruned
    assert db.get_session("child")["parent_session_id"] is None  # orphaned, not deleted
    assert not (tmp_path / "old.jsonl").exists() and (tmp_path / "open.jsonl").exists()


def test_archive_sessions_archives_lineages_idempotently(db):
    ended(db, "root", reason="compression")
    db.create_session("tip", "cli", parent_session_id="root")
    db.end_session("tip", "user_exit")
    ended(db, "other", source="telegram")
    assert db.archive_sessions(source="cli") == 2
    assert db.get_session("root")["archived"] == 1 and db.get_session("tip")["archived"] == 1
    assert db.get_session("other")["archived"] == 0
    assert db.archive_sessions(source="cli") == 0  # only unarchived rows by default


# -- deleting ------------------------------------------------------------------------------


def test_delete_targets_and_delete_session(db, tmp_path):
    db.create_session("p", "cli")
    db.store.create_child_session("p", "d2", "delegate")
    db.store.create_child_session("p", "d1", "delegate")
    db.store.create_child_session("p", "br", "branch")
    assert db.get_session_delete_targets("p") == ["p", "d1", "d2"]
    assert db.get_session_delete_targets("missing") == []
    assert db.delete_session("p", expected_delete_ids=["p", "d1"]) is False  # set changed
    assert db.get_session("p") is not None
    (tmp_path / "d1.json").write_text("{}")
    assert db.delete_session("p", sessions_dir=tmp_path,
                             expected_delete_ids=["p", "d1", "d2"]) is True
    assert [db.get_session(s) for s in ("p", "d1", "d2")] == [None, None, None]
    assert not (tmp_path / "d1.json").exists()
    assert db.get_session("br")["parent_session_id"] is None  # a branch is orphaned
    assert db.delete_session("p") is False


def test_delete_sessions_counts_what_existed(db):
    for sid in ("a", "b", "c"):
        db.create_session(sid, "cli")
    db.store.append_message("a", "user", "hi")
    assert db.delete_sessions(["a", "b", "b", "missing", None]) == 2
    assert db.get_session("a") is None and db.get_session("c") is not None
    assert db.get_messages("a") == []
    assert db.delete_sessions([]) == 0


# -- the marker purge ----------------------------------------------------------------------


def _marker_rows(db: SessionDB) -> tuple[int, int]:
    db.create_session("s1", "cli")
    calls = [{"id": "c1", "type": "function", "function": {"name": "memory"}}]
    stale = db.store.append_message("s1", "assistant", "[memory]", tool_calls=calls)
    real = db.store.append_message("s1", "assistant", "real text", tool_calls=calls)
    return stale, real


def test_purge_stale_tool_call_markers_dry_run_then_write(db):
    stale, real = _marker_rows(db)
    report = db.purge_stale_tool_call_markers(dry_run=True)
    assert report == {"dry_run": True, "rows_affected": 1, "row_ids": [stale],
                      "backup_path": None}
    assert db.get_messages("s1")[0]["content"] == "[memory]"
    report = db.purge_stale_tool_call_markers(backup=False)
    assert report == {"dry_run": False, "rows_affected": 1, "row_ids": [stale],
                      "backup_path": None}
    contents = {m["id"]: m["content"] for m in db.get_messages("s1")}
    assert not contents[stale] and contents[real] == "real text"
    assert db.purge_stale_tool_call_markers(backup=False)["rows_affected"] == 0  # idempotent


def test_purge_stale_tool_call_markers_backs_up_first(db):
    if is_postgresql(db):
        pytest.skip("upstream's VACUUM INTO backup is a SQLite file beside the database")
    _marker_rows(db)
    report = db.purge_stale_tool_call_markers()
    assert report["rows_affected"] == 1
    backup = Path(report["backup_path"])
    assert backup.is_file() and backup.parent == Path(db.db_path).parent
    assert "pre-clean-markers-backup" in backup.name


# -- sizes, VACUUM and auto-maintenance ----------------------------------------------------


def test_logical_size_bytes(db):
    size = db.logical_size_bytes()
    assert isinstance(size, int) and size > 0


def test_logical_size_bytes_of_a_closed_handle_raises_naming_the_store(db):
    """Kept difference (CHANGELOG "Changed (against the upstream plugin)"): upstream's
    ``logical_size_bytes`` answered None for a closed handle or any failed read (logged at
    DEBUG); ours raises the store's typed error naming the store."""
    db.store.close()
    with pytest.raises(ConfigurationError, match="closed") as info:
        db.logical_size_bytes()
    assert str(db.store.path) in str(info.value)


def test_vacuum_keeps_the_data(db):
    ended(db, "a")
    db.create_session("keep", "cli")
    db.store.append_message("keep", "user", "still here")
    db.prune_sessions(older_than_days=0)
    db.vacuum()
    assert [m["content"] for m in db.get_messages("keep")] == ["still here"]


def test_vacuum_returns_the_number_of_optimized_indexes(db):
    assert isinstance(db.vacuum(), int)


def test_vacuum_on_a_quarantined_handle_raises_and_leaves_the_file(db):
    """Kept difference (CHANGELOG "Changed (against the upstream plugin)"): upstream's
    ``vacuum`` ran VACUUM on its connection directly, past the quarantine that stops every
    other write, so a handle that had seen structural corruption rewrote the damaged file;
    ours refuses with the handle's sticky ``StateDbCorruptError`` before writing anything."""
    if is_postgresql(db):
        pytest.skip("a quarantine is a SQLite handle's state (PostgreSQL has none)")
    path = Path(db.db_path)
    db.create_session("a", "cli")
    page, size = db.store.backend.read(lambda c: (
        c.exec_driver_sql("SELECT rootpage FROM sqlite_master WHERE name = 'sessions'").scalar(),
        c.exec_driver_sql("PRAGMA page_size").scalar()))
    db.store.backend.checkpoint()
    subprocess.run([sys.executable, "-c", DAMAGE, str(path), str(page), str(size)], check=True,
                   timeout=30)
    with pytest.raises(StateDbCorruptError) as first:
        db.append_message("a", "user", "x")  # the write that quarantines the handle
    damaged = path.read_bytes()
    with pytest.raises(StateDbCorruptError) as info:
        db.vacuum()
    assert info.value is first.value  # the handle's sticky error, raised again
    assert path.read_bytes() == damaged


def test_maybe_auto_prune_and_vacuum_runs_once_per_interval(db):
    assert AUTO_VACUUM_MIN_FREELIST_RATIO == 0.25
    first = db.maybe_auto_prune_and_vacuum(retention_days=90, vacuum=False)
    assert type(first) is dict
    assert (first["skipped"], first["pruned"], first["closed"], first["vacuumed"]) == \
        (False, 0, 0, False)
    assert "error" not in first
    assert float(db.get_meta("last_auto_prune")) == pytest.approx(time.time(), abs=60)
    again = db.maybe_auto_prune_and_vacuum()
    assert again["skipped"] is True


def test_maybe_auto_prune_and_vacuum_treats_a_garbled_marker_as_never_run(db):
    db.set_meta("last_auto_prune", "not a time")
    assert db.maybe_auto_prune_and_vacuum(vacuum=False)["skipped"] is False
