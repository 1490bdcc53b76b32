"""Listing and bulk helpers of the agent turn API and the unavailable-store message (spec
sessions-ext-agent.md §3.11–§3.12; acceptance behaviours 43–46, 48), on SQLite files and
PostgreSQL."""

from __future__ import annotations

import sqlite3
import threading

import pytest

from hermes_data.sessions import store as store_module
from hermes_data.sessions.storage import ownership
from hermes_data.sessions.agent.bulk import classify_session_status
from hermes_data.sessions.core.maintenance import delete_sessions, get_session_delete_targets
from hermes_data.sessions.store import SessionStore
from hermes_data.sessions.agent.unavailable import format_session_db_unavailable


def _sql(store, statement, params=()):
    with store.engine.begin() as conn:
        result = conn.exec_driver_sql(statement, params)
        return result.fetchall() if result.returns_rows else None


def test_classify_session_status():
    """§3.11: role and reason trimmed and lower-cased; unknown shapes are complete."""
    assert classify_session_status(" Assistant ", False, None) == "complete"
    assert classify_session_status("assistant", True, "stop") == "interrupted"
    assert classify_session_status("user", False, None) == "interrupted"
    assert classify_session_status("tool", False, None) == "interrupted"
    assert classify_session_status("assistant", False, " Content_Filter ") == "error"
    assert classify_session_status("system", False, None) == "complete"


def test_ab43_lifecycle_statuses_over_2000_ids(store):
    """AB43: over 2000 ids: no rows ⇒ empty; last active user ⇒ interrupted; assistant with
    '[]' ⇒ complete; Content_Filter ⇒ error; a rewound trailing row is ignored."""
    for sid in ("u", "a", "e", "r"):
        store.create_session(sid, "cli")
    store.append_message("u", "user", "q")
    store.append_message("a", "user", "q")
    store.append_message("a", "assistant", "done")
    _sql(store, "UPDATE messages SET tool_calls = '[]' WHERE session_id = 'a' AND role = 'assistant'")
    store.append_message("e", "assistant", "blocked", finish_reason="Content_Filter")
    store.append_message("r", "assistant", "answer")
    tail = store.append_message("r", "user", "rewound")
    _sql(store, "UPDATE messages SET active = 0 WHERE id = ?", (tail,))
    ids = ["u", "a", "e", "r", "", "u"] + [f"none{i}" for i in range(2000)]
    got = store.session_lifecycle_statuses(ids)
    assert (got["u"], got["a"], got["e"], got["r"]) == ("interrupted", "complete", "error",
                                                         "complete")
    assert len(got) == 2004 and got["none1999"] == "empty" and "" not in got
    assert store.session_lifecycle_statuses([]) == {}
    # upstream's keyword spelling (issue 33); both spellings ⇒ TypeError naming both
    assert store.session_lifecycle_statuses(session_ids=["a", "u"]) == {
        "a": "complete", "u": "interrupted"}
    with pytest.raises(TypeError, match="ids= or session_ids="):
        store.session_lifecycle_statuses(["a"], session_ids=["a"])


def test_ab44_cron_job_runs(store):
    """AB44: ``list_cron_job_runs('abc')`` returns ``cron_abc_20260101_000000`` and
    ``cron_abc_1767225600``, not ``cron_abc_def_…`` nor non-cron rows, newest first."""
    rows = [("cron_abc_20260101_000000", "cron", 1_767_225_600.0),
            ("cron_abc_1767225600", "cron", 1_767_225_700.0),
            ("cron_abc_def_20260101_000000", "cron", 1_767_225_800.0),
            ("cron_abc_20260102_000000", "cli", 1_767_225_900.0),
            ("cron_abd_1", "cron", 1_767_225_950.0),
            ("cron_abc_", "cron", 1_767_225_990.0)]
    for sid, source, started in rows:
        _sql(store, "INSERT INTO sessions (id, source, started_at) VALUES (?, ?, ?)",
             (sid, source, started))
    store.append_message("cron_abc_1767225600", "user", "run the report")
    runs = store.list_cron_job_runs("abc")
    assert [r.id for r in runs] == ["cron_abc_1767225600", "cron_abc_20260101_000000"]
    assert runs[0].preview == "run the report" and runs[0].last_active is not None
    assert [r.id for r in store.list_cron_job_runs("abc", limit=1, offset=1)] == [
        "cron_abc_20260101_000000"]
    with pytest.raises(ValueError):
        store.list_cron_job_runs(" ")
    with pytest.raises(ValueError):
        store.list_cron_job_runs("abc", limit=-1)


def test_ab44_cron_range_under_a_linguistic_collation(pg_url):
    """AB44 (PG): the same on a database created with ``en_US.UTF-8`` (or ICU ``en-US`` where
    the server has no such libc locale): the range compares bytes, ``COLLATE "C"``."""
    import sqlalchemy as sa

    base = sa.engine.make_url(pg_url)
    admin = sa.create_engine(base.set(database="postgres"), isolation_level="AUTOCOMMIT")
    name = base.database + "_en"
    with admin.connect() as conn:
        try:
            conn.exec_driver_sql(f"CREATE DATABASE {name} TEMPLATE template0 "
                                 "LC_COLLATE 'en_US.UTF-8' LC_CTYPE 'en_US.UTF-8'")
        except sa.exc.DBAPIError:
            # No libc en_US locale here: the ICU English collation is as linguistic.
            conn.exec_driver_sql(f"CREATE DATABASE {name} TEMPLATE template0 "
                                 "LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'")
    try:
        url = base.set(database=name).render_as_string(hide_password=False)
        with SessionStore(url) as s:
            with s.engine.begin() as conn:
                for sid in ("cron_abc_20260101_000000", "cron_abc_1767225600",
                            "cron_abc_def_20260101_000000", "cron_ABC_1", "cron_abc-1"):
                    conn.exec_driver_sql("INSERT INTO sessions (id, source, started_at) "
                                         "VALUES (%s, 'cron', 1.0)", (sid,))
            assert sorted(r.id for r in s.list_cron_job_runs("abc")) == [
                "cron_abc_1767225600", "cron_abc_20260101_000000"]
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.dispose()


def test_ab45_count_by_source_matches_the_listing(store):
    """AB45: ``session_count_by_source(exclude_children=True)`` matches the listing per
    source; blank/NULL source ⇒ cli."""
    for i in range(3):
        store.create_session(f"t{i}", "telegram")
    store.create_session("c0", "cli")
    store.create_session("blank", "x")
    _sql(store, "UPDATE sessions SET source = '' WHERE id = 'blank'")
    store.create_child_session("t0", "branch", "branch")
    store.create_child_session("t0", "dlg", "delegate")
    store.create_session("arch", "telegram")
    store.set_session_archived("arch")
    got = store.session_count_by_source(exclude_children=True)
    assert got == {"telegram": 4, "cli": 2}  # the branch is a conversation of its own
    assert list(got) == ["telegram", "cli"]
    assert got["telegram"] == store.session_count(source="telegram", exclude_children=True)
    assert store.session_count_by_source(archived_only=True) == {"telegram": 1}
    assert store.session_count_by_source(include_archived=True)["telegram"] == 6
    assert store.session_count_by_source(include_archived=True,
                                         exclude_children=True)["telegram"] == 5


def test_ab46_delete_sessions(store, tmp_path):
    """AB46: ``delete_sessions([a, b, a, None, 'missing'])`` ⇒ 2; delegates and usage rows
    gone, a's branch child orphaned, prompts and transcript files cleaned, generations kept;
    ``get_session_delete_targets(a)`` equals what ``delete_sessions([a])`` removes."""
    store.create_session("a", "telegram", session_key="peer", system_prompt="only a")
    store.create_session("b", "cli")
    store.create_child_session("a", "a-d1", "delegate")
    store.create_child_session("a-d1", "a-d2", "delegate")
    store.create_child_session("a", "a-br", "branch")
    store.update_token_counts("a", input_tokens=5, model="m", billing_provider="p")
    store.append_message("a", "user", "bye")
    store.promote_to_session_reset("a")
    assert get_session_delete_targets(store, "a") == ["a", "a-d1", "a-d2"]
    assert get_session_delete_targets(store, "missing") == []
    sessions_dir = tmp_path / "transcripts"
    sessions_dir.mkdir()
    for sid in ("a", "a-d2", "b", "keep"):
        (sessions_dir / f"{sid}.jsonl").write_text("{}")
    assert delete_sessions(store, ["a", "b", "a", None, "missing", "a-d1"],
                           sessions_dir=sessions_dir) == 3
    for sid in ("a", "b", "a-d1", "a-d2"):
        assert store.get_session(sid) is None
    assert store.get_session("a-br").parent_session_id is None
    assert _sql(store, "SELECT COUNT(*) FROM session_model_usage") == [(0,)]
    assert _sql(store, "SELECT COUNT(*) FROM system_prompts") == [(0,)]
    assert sorted(p.name for p in sessions_dir.iterdir()) == ["keep.jsonl"]
    assert store.latest_conversation_boundary("peer", "telegram") == 1
    assert delete_sessions(store, []) == 0 and delete_sessions(store, ["missing"]) == 0


def test_ab46_delete_sessions_in_bulk(store):
    """AB46: 2000 ids work in one call."""
    with store.engine.begin() as conn:
        conn.exec_driver_sql("INSERT INTO sessions (id, source, started_at) VALUES "
                             + ", ".join(f"('bulk{i:04d}', 'cli', 1)" for i in range(2000)))
    assert delete_sessions(store, [f"bulk{i:04d}" for i in range(2000)]) == 2000
    assert store.session_count_ge(1) is False


@pytest.mark.sqlite_only("a failure injected with a SQLite trigger")
def test_ab46_a_failure_after_the_first_chunk_leaves_everything(store):
    """AB46: a failure after the first chunk leaves all in place (one transaction)."""
    with store.engine.begin() as conn:
        conn.exec_driver_sql("INSERT INTO sessions (id, source, started_at) VALUES "
                             + ", ".join(f"('f{i:04d}', 'cli', 1)" for i in range(1000)))
    con = sqlite3.connect(store.path)
    con.execute("CREATE TRIGGER refuse BEFORE DELETE ON sessions WHEN old.id = 'f0950' "
                "BEGIN SELECT RAISE(ABORT, 'injected'); END")
    con.commit()
    con.close()
    with pytest.raises(Exception, match="injected"):
        delete_sessions(store, [f"f{i:04d}" for i in range(1000)])
    assert _sql(store, "SELECT COUNT(*) FROM sessions") == [(1000,)]


def test_ab48_unavailable_message_keeps_the_last_failure(tmp_path, monkeypatch):
    """AB48: after a failed construction raising ``locking protocol`` the message carries the
    NFS/SMB hint; a later success in another thread does not clear it."""
    monkeypatch.setattr(ownership, "_last_init_error", None)
    assert format_session_db_unavailable() == "Session database not available."

    def failing_open(url, **options):
        raise sqlite3.OperationalError("locking protocol\nwhile opening")

    with monkeypatch.context() as m:
        m.setattr(store_module, "open_backend", failing_open)
        with pytest.raises(sqlite3.OperationalError):
            SessionStore(tmp_path / "x.db")
    ok = threading.Thread(target=lambda: SessionStore(tmp_path / "ok.db").close())
    ok.start()
    ok.join()
    msg = format_session_db_unavailable("Sessions off")
    assert msg.startswith("Sessions off: OperationalError: locking protocol while opening")
    assert "NFS/SMB/FUSE/ZFS" in msg and msg.endswith(".")
