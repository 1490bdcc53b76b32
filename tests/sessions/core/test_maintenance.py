"""Delete, prune, archive, auto-maintenance and VACUUM (spec sessions.md §7.4–§7.6, §10 #44–#47)."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import textwrap
import time

import pytest

from hermes_data.sessions.backends import locks
from hermes_data.sessions.core import maintenance as mt
from hermes_data.sessions.backends.sql import PG_MAINTENANCE_LOCK_KEY
from hermes_data.sessions.store import SessionStore

OLD = time.time() - 200 * 86400


def _session(store, sid, *, ended=True, started=OLD, **cols):
    store.create_session(sid, cols.pop("source", "cli"), cwd=cols.pop("cwd", None))
    sets = {"started_at": started, **cols}
    if ended:
        sets.update(ended_at=started + 10, end_reason=sets.get("end_reason", "user_exit"))
    with store.engine.begin() as c:
        c.exec_driver_sql(f"UPDATE sessions SET {', '.join(f'{k} = ?' for k in sets)} WHERE id = ?",
                          (*sets.values(), sid))


def test_cwd_prefix_is_escaped_sibling_directories_are_spared(store):
    for sid, cwd in [("target", "/home/me/my_project"), ("child", "/home/me/my_project/src"),
                     ("sibling", "/home/me/myXproject/src"), ("longer", "/home/me/my_project2"),
                     ("win", "C:\\w\\my_proj\\x"), ("winsib", "C:\\w\\myXproj\\x")]:
        _session(store, sid, cwd=cwd)
    got = {c.id for c in mt.list_prune_candidates(store, cwd_prefix="/home/me/my_project/")}
    assert got == {"target", "child"}
    assert {c.id for c in mt.list_prune_candidates(store, cwd_prefix="C:\\w\\my_proj")} == {"win"}
    assert mt.prune_sessions(store, cwd_prefix="/home/me/my_project") == 2
    assert store.get_session("sibling") is not None and store.get_session("longer") is not None


def test_blank_text_filters_and_a_non_bool_archived_filter_nothing(store):
    """As upstream's prune filter: an empty text filter is no filter (it had matched only rows
    holding ''), and ``archived`` filters only as ``True`` / ``False`` themselves."""
    _session(store, "cli1", user_id="u1", chat_id="c1", chat_type="dm", model="m1")
    _session(store, "tg1", source="telegram", archived=1, billing_provider="openai")
    everything = {"cli1", "tg1"}

    def ids(**filters):
        return {c.id for c in mt.list_prune_candidates(store, **filters)}

    assert mt.list_prune_candidates(store, None, "") == mt.list_prune_candidates(store)
    for name in ("source", "end_reason", "user_id", "chat_id", "chat_type", "provider",
                 "title_like", "model_like", "branch_like", "cwd_prefix"):
        assert ids(**{name: ""}) == everything, name
        assert mt.count_prune_matches(store, **{name: ""}) == 2, name
    assert ids(source="telegram") == {"tg1"} and ids(user_id="u1") == {"cli1"}
    assert ids(provider="OpenAI") == {"tg1"}
    assert ids(archived=True) == {"tg1"} and ids(archived=False) == {"cli1"}
    for other in (None, 1, 0, "false", ""):
        assert ids(archived=other) == everything, other
        assert mt.count_prune_matches(store, archived=other) == 2, other
    assert mt.prune_sessions(store, source="", older_than_days=None) == 2


def test_prune_spares_open_pinned_and_guarded_sessions_and_orphans_children(store):
    _session(store, "old")
    _session(store, "open", ended=False)
    _session(store, "pinned", pinned=1)
    _session(store, "locked")
    _session(store, "recent", started=time.time())
    store.create_session("kid", "cli", parent_session_id="old", system_prompt="p1")
    store.append_message("old", "user", "bye")
    with store.engine.begin() as c:
        c.exec_driver_sql("UPDATE sessions SET started_at = ?, ended_at = ? WHERE id = 'old'",
                          (OLD, OLD))
        c.exec_driver_sql("UPDATE messages SET timestamp = ? WHERE session_id = 'old'", (OLD,))
        c.exec_driver_sql("INSERT INTO compression_locks VALUES ('locked', 'x', ?, ?)",
                          (time.time(), time.time() + 600))
    # prune's default age (90 days) passed explicitly: the dry run and counters have none
    assert mt.count_prune_matches(store, 90) == 2  # old, locked (pinned and open excluded)
    assert mt.count_open_prune_matches(store, 90) == 1
    assert [c.id for c in mt.list_prune_candidates(store, 90, include_pinned=True)] \
        and mt.count_prune_matches(store, 90, include_pinned=True) == 3
    assert mt.prune_sessions(store, exclude_active_write_guards=True) == 1
    with store.engine.connect() as conn:  # closed: a leaked read would block the next TRUNCATE
        ids = {r[0] for r in conn.exec_driver_sql("SELECT id FROM sessions")}
    assert ids == {"open", "pinned", "locked", "recent", "kid"}
    assert store.get_session("kid").parent_session_id is None  # orphaned, not deleted
    assert store.get_messages("old") == []


def test_prune_of_more_than_900_ids_and_linear_steps(store):
    def steps_to_prune(n: int, tag: str) -> int:
        with store.engine.begin() as c:
            c.exec_driver_sql(
                "INSERT INTO sessions (id, source, started_at, ended_at, end_reason) "
                "VALUES (?, 'cli', ?, ?, 'x')", [(f"{tag}{i:06d}", OLD, OLD) for i in range(n)])
        if store.engine.dialect.name == "postgresql":  # no VM-step counter: count rows only
            assert mt.prune_sessions(store, source="cli") == n
            return 0
        count = [0]
        store.backend._raw.set_progress_handler(lambda: count.__setitem__(0, count[0] + 1), 100)
        try:
            assert mt.prune_sessions(store, source="cli") == n
        finally:
            store.backend._raw.set_progress_handler(None, 0)
        return count[0]

    small, large = steps_to_prune(2000, "a"), steps_to_prune(8000, "b")
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT COUNT(*) FROM sessions").scalar() == 0
    if store.engine.dialect.name == "sqlite":
        assert large < 4 * small * 1.5, (small, large)  # O(n): 4x rows, ~4x steps (not 16x)


def _tiny_steps(monkeypatch, module, job: str, unit: str, first: int) -> None:
    """A paced job's steps as small as they go and no pauses (a test corpus is small): its
    ``<JOB>_FIRST_STEP_<UNIT>``, ``_STEP_TARGET_S``, ``_PAUSE_MIN_S`` and ``_PAUSE_FACTOR``."""
    monkeypatch.setattr(module, f"{job}_FIRST_STEP_{unit}", first)
    monkeypatch.setattr(module, f"{job}_STEP_TARGET_S", 1e-6)
    monkeypatch.setattr(module, f"{job}_PAUSE_MIN_S", 0.0)
    monkeypatch.setattr(module, f"{job}_PAUSE_FACTOR", 0.0)


@pytest.fixture
def small_steps(monkeypatch):
    """Prune steps of about one session."""
    _tiny_steps(monkeypatch, mt, "PRUNE", "MESSAGES", 5)


def _old_sessions_with_messages(store, n: int, per: int) -> list[str]:
    ids = [f"s{i:02d}" for i in range(n)]
    for sid in ids:
        store.create_session(sid, "cli")
        store.append_messages_batch(sid, [{"role": "user", "content": f"{sid} m{j}"}
                                          for j in range(per)])
        store.end_session(sid, "user_exit")
    with store.engine.begin() as c:
        c.exec_driver_sql("UPDATE sessions SET started_at = ?, ended_at = ?", (OLD, OLD + 1))
        c.exec_driver_sql("UPDATE messages SET timestamp = ?", (OLD,))
    return ids


def test_prune_deletes_in_paced_steps_of_whole_sessions(store, small_steps, monkeypatch):
    """Each step is its own write transaction over whole sessions, the dry run's order; the
    filter is checked again inside each step, so a session resumed or pinned while the
    prune pauses between steps is spared (docs/sessions.md §7.5)."""
    ids = _old_sessions_with_messages(store, 8, 5)
    expected = [c.id for c in mt.list_prune_candidates(store, 90)]
    assert sorted(expected) == ids
    changed: list[str] = []

    def meanwhile(started, **kw):  # between two steps, outside any transaction
        if not changed:
            with store.engine.begin() as c:  # another writer: resume one, pin another
                c.exec_driver_sql("UPDATE sessions SET ended_at = NULL WHERE id = ?",
                                  (expected[-1],))
                c.exec_driver_sql("UPDATE sessions SET pinned = 1 WHERE id = ?",
                                  (expected[-2],))
            changed.extend(expected[-2:])
        return 0.0

    monkeypatch.setattr(locks, "pause_between_steps", meanwhile)
    seen: list[tuple[int, int]] = []
    assert mt.prune_sessions(store, progress=lambda d, t: seen.append((d, t))) == 6
    assert seen == [(k, 8) for k in range(1, 7)]  # one session a step, counted as a whole
    with store.engine.connect() as conn:
        rows = dict(conn.exec_driver_sql(
            "SELECT s.id, COUNT(m.id) FROM sessions s LEFT JOIN messages m "
            "ON m.session_id = s.id GROUP BY s.id").fetchall())
    assert rows == {sid: 5 for sid in changed}, rows


def test_a_prune_killed_between_steps_leaves_every_session_whole(tmp_path, small_steps):
    """Killed mid-prune: the steps that committed are gone whole, the step in flight rolled
    back whole; no session is left with part of its messages."""
    path = tmp_path / "state.db"
    with SessionStore(path) as s:
        ids = _old_sessions_with_messages(s, 10, 6)
    child = textwrap.dedent(f"""
        import os
        from hermes_data.sessions.core import maintenance as mt
        from hermes_data.sessions.store import SessionStore
        mt.PRUNE_FIRST_STEP_MESSAGES = 5
        mt.PRUNE_STEP_TARGET_S = 1e-6
        mt.PRUNE_PAUSE_MIN_S = mt.PRUNE_PAUSE_FACTOR = 0.0
        s = SessionStore({str(path)!r})
        def progress(done, total):
            if done == 4:  # inside the 4th step's transaction, after its deletes
                os._exit(7)
        mt.prune_sessions(s, progress=progress)
    """)
    run = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 7, run.stderr
    with SessionStore(path) as s, s.engine.connect() as conn:
        rows = dict(conn.exec_driver_sql(
            "SELECT s.id, (SELECT COUNT(*) FROM messages m WHERE m.session_id = s.id) "
            "FROM sessions s").fetchall())
        fts = conn.exec_driver_sql("SELECT COUNT(*) FROM messages_fts "
                                   "WHERE messages_fts MATCH 'm0'").scalar()
    assert len(rows) == 7 and set(rows) < set(ids) and set(rows.values()) == {6}, rows  # 3 steps committed
    assert fts == 7  # the index agrees: the deleted sessions' rows are gone from it too


def test_delete_session_takes_delegates_and_honours_the_fence(store, tmp_path):
    store.create_session("p", "cli")
    store.create_child_session("p", "d1", "delegate")
    store.create_child_session("d1", "d2", "delegate")
    store.create_child_session("p", "b", "branch")
    (tmp_path / "p.jsonl").write_text("x")
    (tmp_path / "request_dump_p_1.json").write_text("x")
    assert not mt.delete_session(store, "p", expected_delete_ids={"p", "d1"})
    assert mt.delete_session(store, "p", sessions_dir=tmp_path, expected_delete_ids={"p", "d1", "d2"})
    assert store.get_session("d2") is None and store.get_session("b").parent_session_id is None
    assert not list(tmp_path.glob("*p*.json*"))


def test_archive_archives_whole_lineages_idempotently(store):
    _session(store, "a1")
    _session(store, "a2", source="telegram")
    assert mt.archive_sessions(store, source="cli") == 1
    assert store.get_session("a1").archived and not store.get_session("a2").archived
    assert mt.archive_sessions(store, source="cli") == 0


def _hold_maintenance_lock(store):
    """Another process holding the auto-maintenance lock: the lock file's flock on SQLite,
    the advisory lock on PostgreSQL. Returns the Popen; write a line to its stdin to end it."""
    if store.engine.dialect.name == "postgresql":
        code = textwrap.dedent(f"""
            import sys, sqlalchemy as sa
            e = sa.create_engine(sys.argv[1])
            with e.connect() as c:
                c.exec_driver_sql("SELECT pg_advisory_lock({PG_MAINTENANCE_LOCK_KEY})")
                c.commit()
                print("locked", flush=True)
                sys.stdin.readline()
            """)
        arg = store.url.render_as_string(hide_password=False)
    else:
        code = textwrap.dedent("""
            import fcntl, os, sys
            fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX)
            print("locked", flush=True)
            sys.stdin.readline()
            """)
        arg = f"{store.path}.auto-maintenance.lock"
    holder = subprocess.Popen([sys.executable, "-c", code, arg], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    return holder


def _last_vacuum_of_messages(store):
    with store.engine.connect() as c:
        c.exec_driver_sql("SELECT pg_stat_clear_snapshot()")
        return c.exec_driver_sql("SELECT last_vacuum FROM pg_stat_user_tables "
                                 "WHERE relname = 'messages'").scalar()


def test_auto_maintenance_interval_lock_vacuum_gate_and_errors(store):
    pg = store.engine.dialect.name == "postgresql"
    r = mt.maybe_auto_prune_and_vacuum(store)
    assert r == {"skipped": False, "pruned": 0, "closed": 0, "vacuumed": False}
    assert store.get_meta("last_auto_prune") is not None  # recorded with nothing pruned
    assert mt.maybe_auto_prune_and_vacuum(store)["skipped"]  # within 24 h
    store.set_meta("last_auto_prune", str(time.time() - 2 * 86400))
    holder = _hold_maintenance_lock(store)
    assert mt.maybe_auto_prune_and_vacuum(store)["skipped"]
    holder.stdin.write("\n")
    holder.stdin.flush()
    holder.wait(timeout=10)
    # Many pruned rows with big messages: freelist ratio well above 0.25 ⇒ VACUUM.
    store.create_session("big", "cli")
    store.append_messages_batch("big", [{"role": "user", "content": "x" * 4000}] * 300)
    with store.engine.begin() as c:
        c.exec_driver_sql("UPDATE sessions SET started_at = ?, ended_at = ?, end_reason = 'x' "
                          "WHERE id = 'big'", (OLD, OLD))
        c.exec_driver_sql("UPDATE messages SET timestamp = ?", (OLD,))
    before = mt.logical_size_bytes(store)
    assert before > 0
    vacuumed_before = _last_vacuum_of_messages(store) if pg else None
    r = mt.maybe_auto_prune_and_vacuum(store)
    assert r["pruned"] == 1 and r["vacuumed"] and store.get_meta("last_vacuum")
    if pg:
        # No freelist on PostgreSQL; VACUUM (ANALYZE) really ran (autocommit) on the tables.
        assert r["freelist_ratio"] is None
        assert _last_vacuum_of_messages(store) not in (None, vacuumed_before)
    else:
        assert r["freelist_ratio"] > 0.25 and mt.logical_size_bytes(store) < before
    store.set_meta("last_auto_prune", "not a number")  # counts as never run (upstream's rule)
    r = mt.maybe_auto_prune_and_vacuum(store)
    assert "error" not in r and not r["skipped"]


def test_vacuum_skipped_at_exactly_the_ratio_and_within_the_interval(store):
    if store.engine.dialect.name == "sqlite":  # the freelist gate is SQLite's
        _session(store, "gone")
        store.set_meta("last_auto_prune", "0")
        r = mt.maybe_auto_prune_and_vacuum(store, min_vacuum_freelist_ratio=1.0)
        assert r["pruned"] == 1 and not r["vacuumed"] and r["freelist_ratio"] <= 1.0
    _session(store, "gone2")
    store.set_meta("last_auto_prune", "0")
    store.set_meta("last_vacuum", str(time.time()))
    r = mt.maybe_auto_prune_and_vacuum(store)
    assert r["pruned"] == 1 and not r["vacuumed"] and "freelist_ratio" not in r


def test_vacuum_directly_reports_sizes(store):
    store.create_session("s", "cli")
    store.append_messages_batch("s", [{"role": "user", "content": "y" * 2000}] * 50)
    out = mt.vacuum(store)
    assert out["before_bytes"] > 0 and out["after_bytes"] > 0
    assert out["reclaimed_bytes"] == out["before_bytes"] - out["after_bytes"]
    assert [m.content for m in store.get_messages("s")][:1] == ["y" * 2000]


@pytest.fixture
def paced_vacuum(monkeypatch):
    """Incremental-vacuum steps of a few pages."""
    from hermes_data.sessions.backends import sqlite as sqlite_backend

    _tiny_steps(monkeypatch, sqlite_backend, "VACUUM", "PAGES", 8)


def _traced(store) -> list[str]:
    """The statements the writer connection runs from now on (a script's one by one)."""
    log: list[str] = []
    store.backend._raw.set_trace_callback(lambda sql: log.append(sql.strip().rstrip(";")))
    return log


def _pragma(store, name: str) -> int:
    return int(store.backend._raw.execute(f"PRAGMA {name}").fetchone()[0])


def _free_some_pages(store) -> None:
    store.create_session("big", "cli")
    store.append_messages_batch("big", [{"role": "user", "content": f"{i} " + "z" * 3000}
                                        for i in range(200)])
    store.create_session("kept", "cli")
    store.append_message("kept", "user", "still here")
    store.end_session("big", "user_exit")
    assert mt.delete_session(store, "big")
    assert _pragma(store, "freelist_count") > 50


@pytest.mark.sqlite_only("auto-vacuum is a SQLite file format setting")
def test_a_new_store_vacuums_in_paced_incremental_steps(sqlite_store, paced_vacuum):
    """Every file the package creates is in INCREMENTAL auto-vacuum mode, so ``vacuum()``
    returns its free pages in short write transactions (``incremental_vacuum`` steps), never
    one ``VACUUM`` holding the write lock for the whole rewrite (docs/sessions.md §7.6)."""
    assert _pragma(sqlite_store, "auto_vacuum") == 2
    _free_some_pages(sqlite_store)
    pages = _pragma(sqlite_store, "page_count")
    log = _traced(sqlite_store)
    out = mt.vacuum(sqlite_store)
    sqlite_store.backend._raw.set_trace_callback(None)
    steps = [line for line in log if line.startswith("PRAGMA incremental_vacuum(")]
    assert len(steps) > 3 and "VACUUM" not in log  # small steps; no whole-file VACUUM
    at = [i for i, line in enumerate(log) if line.startswith("PRAGMA incremental_vacuum(")]
    assert all(log[i - 1] == "BEGIN IMMEDIATE" and log[i + 1] == "COMMIT" for i in at)
    assert _pragma(sqlite_store, "freelist_count") == 0
    assert _pragma(sqlite_store, "page_count") < pages and out["reclaimed_bytes"] > 0
    assert sqlite_store.backend._raw.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert [m.content for m in sqlite_store.get_messages("kept")] == ["still here"]
    assert [r.session_id for r in sqlite_store.search_messages("still")] == ["kept"]


@pytest.mark.sqlite_only("auto-vacuum is a SQLite file format setting")
def test_a_file_without_auto_vacuum_is_converted_by_its_first_vacuum(tmp_path, paced_vacuum):
    """A file made without auto-vacuum (upstream's, or ours before issue 34) gets one whole
    VACUUM, which converts it; its next vacuum runs in paced steps."""
    from dataclasses import replace

    from hermes_data.engine import SqliteSettings

    path = tmp_path / "state.db"
    legacy = replace(SqliteSettings(busy_timeout_ms=5000), new_file_auto_vacuum=None)
    with SessionStore(path, settings=legacy) as s:
        assert _pragma(s, "auto_vacuum") == 0
    with SessionStore(path) as s:  # an existing file is never switched at open
        assert _pragma(s, "auto_vacuum") == 0
        _free_some_pages(s)
        log = _traced(s)
        mt.vacuum(s)
        assert "VACUUM" in log and not any("incremental_vacuum" in x for x in log)
        assert _pragma(s, "auto_vacuum") == 2 and _pragma(s, "freelist_count") == 0
        s.create_session("more", "cli")
        s.append_messages_batch("more", [{"role": "user", "content": "w" * 3000}] * 100)
        assert mt.delete_session(s, "more")
        log.clear()
        mt.vacuum(s)
        s.backend._raw.set_trace_callback(None)
        assert "VACUUM" not in log and any("incremental_vacuum" in x for x in log)
        assert [m.content for m in s.get_messages("kept")] == ["still here"]


def test_stale_open_cron_session_is_closed_then_deleted_a_window_later(store):
    _session(store, "cron1", ended=False, source="cron")
    _session(store, "tg", ended=False, source="telegram")
    r = mt.maybe_auto_prune_and_vacuum(store)
    assert r["closed"] == 1 and r["pruned"] == 0
    assert store.get_session("cron1").end_reason == "startup_orphan_reap"
    assert store.get_session("tg").ended_at is None
    store.set_meta("last_auto_prune", "0")
    assert mt.maybe_auto_prune_and_vacuum(store)["pruned"] == 0  # swept rows age from the close
    with store.engine.begin() as c:
        c.exec_driver_sql("UPDATE sessions SET ended_at = ? WHERE id = 'cron1'", (OLD,))
    store.set_meta("last_auto_prune", "0")
    assert mt.maybe_auto_prune_and_vacuum(store)["pruned"] == 1
    assert store.get_session("tg") is not None


def test_unknown_filter_is_rejected(store):
    """An unknown filter is a TypeError, as upstream's unexpected keyword argument was."""
    for fn in (mt.count_prune_matches, mt.count_open_prune_matches, mt.list_prune_candidates,
               mt.prune_sessions, mt.archive_sessions):
        with pytest.raises(TypeError, match="bogus"):
            fn(store, bogus=1)


def test_dry_run_and_counters_have_no_default_age_as_upstream(store):
    """Issue 33: ``list_prune_candidates`` and the two counters filter by age only when
    ``older_than_days`` is given (upstream's default None; prune keeps 90 days); ``source``
    is their second positional parameter, as upstream's."""
    _session(store, "old")
    _session(store, "young", started=time.time() - 86400)
    _session(store, "young_cron", source="cron", started=time.time() - 86400)
    _session(store, "live", ended=False, started=time.time() - 86400)
    assert {c.id for c in store.list_prune_candidates()} == {"old", "young", "young_cron"}
    assert store.count_prune_matches() == 3 and store.count_open_prune_matches() == 1
    assert [c.id for c in store.list_prune_candidates(None, "cron")] == ["young_cron"]
    assert store.count_prune_matches(None, "cli") == 2
    assert store.count_open_prune_matches(None, "cron") == 0
    assert [c.id for c in store.list_prune_candidates(90)] == ["old"]
    assert store.count_prune_matches(90) == 1
    assert store.prune_sessions() == 1  # prune's default stays 90 days
    assert store.get_session("young") is not None


def test_maintenance_functions_are_store_methods(store, tmp_path):
    """Issue 33: upstream's ``SessionDB`` had the maintenance functions as methods; so does
    the store (the ``MaintenanceAPI`` table), with upstream's keyword spellings too."""
    _session(store, "a")
    _session(store, "b")
    _session(store, "c")
    store.create_child_session("a", "a-dlg", "delegate")
    assert store.get_session_delete_targets("a") == ["a", "a-dlg"]
    assert store.delete_session("a") is True and store.get_session("a-dlg") is None
    assert store.delete_sessions(session_ids=["b", "gone"]) == 1
    with pytest.raises(TypeError, match="ids= or session_ids="):
        store.delete_sessions(["c"], session_ids=["c"])
    assert store.get_session("c") is not None
    assert store.archive_sessions(source="cli") == 1 and store.get_session("c").archived
    assert store.logical_size_bytes() > 0
    assert SessionStore.sanitize_title("  a\u200b  b ") == store.sanitize_title("a b") == "a b"
    assert store.purge_stale_tool_call_markers(dry_run=True).rows_affected == 0
    assert store.prune_sessions(0, "cli") == 1 and store.get_session("c") is None
    _session(store, "d")
    with pytest.raises(TypeError, match="vacuum_enabled= or vacuum="):
        store.maybe_auto_prune_and_vacuum(vacuum_enabled=True, vacuum=True)
    result = store.maybe_auto_prune_and_vacuum(vacuum=False)
    assert (result["pruned"], result["vacuumed"]) == (1, False)


@pytest.mark.sqlite_only("VACUUM's FTS optimize count is SQLite's FTS5 indexes")
def test_vacuum_reports_the_optimized_fts_indexes(store):
    """``fts_optimized`` is what upstream's ``vacuum()`` returned."""
    store.create_session("s", "cli")
    store.append_message("s", "user", "hello")
    out = store.vacuum()
    assert out["fts_optimized"] == store.optimize_fts() > 0


def test_cli_prune_dry_run_then_apply_and_export_jsonl(tmp_path, capsys):
    import json

    from hermes_data.cli import main
    from hermes_data.sessions.store import SessionStore

    path = tmp_path / "state.db"
    with SessionStore(path) as s:
        _session(s, "old")
        s.create_session("keep", "cli")
        s.append_messages_batch("keep", [{"role": "user", "content": f"m{i}"} for i in range(7)])
    assert main(["prune", "--url", str(path)]) == 0
    out = capsys.readouterr().out
    assert "old" in out and "1 session(s) would be deleted" in out
    with SessionStore(path) as s:
        assert s.get_session("old") is not None  # dry run deleted nothing
    assert main(["prune", "--url", str(path), "--apply"]) == 0
    assert "deleted 1 session(s)" in capsys.readouterr().out
    dest = tmp_path / "keep.jsonl"
    assert main(["export", "keep", "--url", str(path), "-o", str(dest), "--page-size", "3"]) == 0
    lines = [json.loads(x) for x in dest.read_text().splitlines()]
    assert [m["content"] for m in lines] == [f"m{i}" for i in range(7)]
    assert "exported 7" in capsys.readouterr().err
    assert main(["vacuum", "--url", str(path)]) == 0


@pytest.mark.parametrize("marker", ["", "yesterday", "inf", "nan"])
def test_a_garbled_maintenance_marker_counts_as_never_run(store, marker):
    """Issue 33 ("Robustness"): an empty or garbled ``last_auto_prune`` (or ``last_vacuum``)
    made startup maintenance fail at every start without pruning (``inf`` would have skipped
    it forever); upstream treats such a marker as no prior run."""
    _session(store, "old")
    store.set_meta("last_auto_prune", marker)
    store.set_meta("last_vacuum", marker)
    r = mt.maybe_auto_prune_and_vacuum(store)
    assert "error" not in r and not r["skipped"] and r["pruned"] == 1
    assert float(store.get_meta("last_auto_prune")) > time.time() - 60  # a real stamp now
