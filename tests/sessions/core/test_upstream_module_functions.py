"""Issue 33: upstream's module-level functions that callers import and that have a public
meaning over hermes-data — ``resolve_synchronous_level``, ``resolved_max_resume_messages`` /
``resolved_max_export_messages``, ``is_automatic_end_reason``,
``is_advisory_lock_contention``, ``refuse_deleted_wal_generation`` — each one definition our
own code uses, exported where the compat layer re-exports them from."""

from __future__ import annotations

import errno
import fcntl
import os
import sqlite3
from pathlib import Path

import pytest

import hermes_data.sessions as sessions
from hermes_data.locking import is_advisory_lock_contention
from hermes_data.sessions import SessionStore
from hermes_data.sessions.errors import (CompressionPublishError, DeletedWalGenerationError,
                                         SessionResumeTooLargeError)
from hermes_data.sessions.sql import AUTOMATIC_END_REASONS
from hermes_data.sessions.storage.opening import configured_pragmas

NAMES = ("is_automatic_end_reason", "resolved_max_resume_messages",
         "resolved_max_export_messages", "refuse_deleted_wal_generation",
         "resolve_synchronous_level")


@pytest.mark.parametrize("name", NAMES)
def test_exported_from_the_sessions_package(name):
    assert name in sessions.__all__ and callable(getattr(sessions, name))


# ------------------------------------------------------------------ resolve_synchronous_level
@pytest.mark.parametrize("raw,level", [
    ("OFF", 0), ("normal", 1), (" Full ", 2), ("eXtRa", 3), (0, 0), (3, 3), ("2", 2),
    (" 1 ", 1), ("03", 3), (False, 0),
    (True, None), (4, None), (-1, None), ("4", None), ("", None), ("   ", None),
    ("fast", None), (2.0, None), ("2.0", None), (None, None), ([2], None),
])
def test_resolve_synchronous_level_follows_upstreams_rule(raw, level):
    assert sessions.resolve_synchronous_level(raw) == level


@pytest.mark.parametrize("raw,pragma", [(" 2 ", "PRAGMA synchronous = 2"),
                                        ("extra", "PRAGMA synchronous = 3"),
                                        (True, None), ("5", None)])
def test_configured_pragmas_use_the_same_rule(raw, pragma, caplog):
    out = configured_pragmas({"database": {"synchronous": raw}}, platform="linux")
    assert out == ([pragma] if pragma else [])
    assert (pragma is None) == any("synchronous" in r.getMessage() for r in caplog.records)


def test_a_store_opens_with_the_resolved_level(tmp_path):
    with SessionStore(tmp_path / "state.db", config={"database": {"synchronous": " 3 "}}) as s:
        with s.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 3


# ------------------------------------------------------------------ resolved guard limits
@pytest.mark.parametrize("config,resume,export", [
    (None, 20000, 20000),
    ({}, 20000, 20000),
    ({"sessions": {"max_resume_messages": 5}}, 5, 20000),
    ({"sessions": {"max_export_messages": "7"}}, 20000, 7),
    ({"sessions": {"max_resume_messages": 0, "max_export_messages": 0}}, 0, 0),
    ({"sessions": {"max_resume_messages": -3, "max_export_messages": "many"}}, 20000, 20000),
    (lambda: {"sessions": {"max_resume_messages": 9}}, 9, 20000),
])
def test_resolved_limits_read_the_configuration(config, resume, export):
    assert sessions.resolved_max_resume_messages(config) == resume
    assert sessions.resolved_max_export_messages(config) == export


def test_the_resolved_limit_is_the_one_the_store_applies(tmp_path):
    cfg = {"sessions": {"max_resume_messages": 2}}
    with SessionStore(tmp_path / "state.db", config=lambda: cfg) as store:
        store.create_session("s", "cli")
        for i in range(3):
            store.append_message("s", "user", f"m{i}")
        with pytest.raises(SessionResumeTooLargeError) as refused:
            store.assert_resume_safe("s")
        assert refused.value.limit == sessions.resolved_max_resume_messages(lambda: cfg) == 2
        cfg["sessions"]["max_resume_messages"] = 3  # both read the configuration at call time
        assert sessions.resolved_max_resume_messages(lambda: cfg) == 3
        assert store.assert_resume_safe("s") == 3


# ------------------------------------------------------------------ is_automatic_end_reason
@pytest.mark.parametrize("reason", AUTOMATIC_END_REASONS)
def test_the_automatic_reasons(reason):
    assert sessions.is_automatic_end_reason(reason) is True


@pytest.mark.parametrize("reason", ["compression", "session_reset", "user_exit", "",
                                    "AGENT_CLOSE", None, 3])
def test_deliberate_and_unknown_reasons_are_not_automatic(reason):
    assert sessions.is_automatic_end_reason(reason) is False


@pytest.mark.parametrize("reason", ["agent_close", "user_exit"])
def test_a_publish_clears_only_an_automatic_end(store, reason):
    store.create_session("p", "cli")
    store.append_message("p", "user", "hello")
    store.end_session("p", reason)
    publish = lambda: store.publish_compression_child(  # noqa: E731
        "p", "c", "cli", [{"role": "user", "content": "handoff"}])
    if sessions.is_automatic_end_reason(reason):
        publish()
        assert store.get_session("p").end_reason == "compression"
    else:
        with pytest.raises(CompressionPublishError):
            publish()


# ------------------------------------------------------------------ is_advisory_lock_contention
def test_a_held_flock_is_contention_and_a_bad_descriptor_is_not(tmp_path):
    path = tmp_path / "lock"
    holder = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    other = os.open(path, os.O_RDWR)  # another open file description: flock conflicts
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)
        with pytest.raises(OSError) as held:
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert is_advisory_lock_contention(held.value)
    finally:
        os.close(other)
        os.close(holder)
    with pytest.raises(OSError) as bad:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # closed: EBADF
    assert not is_advisory_lock_contention(bad.value)


@pytest.mark.parametrize("exc,contention", [
    (BlockingIOError(), True), (OSError(errno.EACCES, "held"), True),
    (OSError(errno.EDEADLK, "deadlock"), True), (OSError(errno.ENOLCK, "no locks"), False),
    (OSError("no errno"), False), (ValueError("x"), False),
])
def test_advisory_contention_by_errno(exc, contention):
    assert is_advisory_lock_contention(exc) is contention


# ------------------------------------------------------------------ refuse_deleted_wal_generation
def test_a_held_deleted_wal_is_refused_and_a_clean_file_is_not(tmp_path):
    path = tmp_path / "state.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (x)")
    con.close()
    assert sessions.refuse_deleted_wal_generation(path) is None
    wal = Path(f"{path}-wal")
    wal.write_bytes(b"")  # an older generation's WAL, still open here, then deleted
    held = open(wal, "rb")
    try:
        wal.unlink()
        with pytest.raises(DeletedWalGenerationError, match=f"pid {os.getpid()}") as refused:
            sessions.refuse_deleted_wal_generation(str(path))
        assert isinstance(refused.value, RuntimeError)  # upstream's base
        assert "refusing to open it" in str(refused.value) and str(path) in str(refused.value)
    finally:
        held.close()
    assert sessions.refuse_deleted_wal_generation(path) is None
