"""Issue 33 ("Errors"): every exception the upstream session store raised under a builtin base
keeps that base here, beside our own hierarchy — a caller's ``except ValueError:`` /
``except RuntimeError:`` / ``except sqlite3.OperationalError:`` written against upstream still
catches it (docs/sessions.md §8.13)."""

from __future__ import annotations

import sqlite3

import pytest

from hermes_data.errors import HermesDataError, WalUnsupportedError
from hermes_data.sessions import errors as se

UPSTREAM_BASES = [
    (se.SessionResumeTooLargeError, ValueError),
    (se.SessionExportTooLargeError, ValueError),
    (WalUnsupportedError, sqlite3.OperationalError),
    (se.CompressionSessionClosedError, RuntimeError),
    (se.CompressionSessionBusyError, RuntimeError),
    (se.SessionCompressionInProgressError, RuntimeError),
    (se.SessionTurnLeaseLostError, RuntimeError),
    (se.StateDbReplacedError, RuntimeError),
    (se.DeletedWalGenerationError, RuntimeError),
    (se.StateDbCorruptError, sqlite3.DatabaseError),
]


@pytest.mark.journal_independent("class hierarchy only")
@pytest.mark.parametrize("cls,base", UPSTREAM_BASES, ids=[c.__name__ for c, _ in UPSTREAM_BASES])
def test_upstream_base_is_kept(cls, base):
    assert issubclass(cls, base) and issubclass(cls, HermesDataError)


def test_an_oversized_export_is_caught_as_upstream_callers_catch_it(tmp_path):
    """A real raise, caught the way an upstream call site does."""
    from hermes_data import SessionStore

    with SessionStore(tmp_path / "state.db") as store:
        store.create_session("s", "cli")
        store.append_messages_batch("s", [{"role": "user", "content": str(i)} for i in range(3)])
        with pytest.raises(ValueError) as caught:
            store.assert_export_safe("s", max_messages=2)
    assert isinstance(caught.value, se.SessionExportTooLargeError)


def test_title_errors_carry_upstream_key_phrases(tmp_path):
    """Issue 33 ("Errors"): callers show or match upstream's title messages by "too long" and
    "already in use"."""
    from hermes_data import SessionStore

    with SessionStore(tmp_path / "state.db") as store:
        store.create_session("a", "cli")
        store.create_session("b", "cli")
        with pytest.raises(ValueError, match="too long"):
            store.set_session_title("a", "x" * 500)
        assert store.set_session_title("a", "Weekly report")
        with pytest.raises(ValueError, match="already in use"):
            store.set_session_title("b", "Weekly report")
        assert store.get_session("b").title is None


@pytest.mark.journal_independent("pure classification of messages")
@pytest.mark.parametrize("message,bucket", [
    ("attempt to write a readonly database", "disk"),
    ("the file system is read-only", "disk"),
    ("session abc was closed by compression; adopt its continuation", "compression_closed"),
    ("state.db was replaced underneath this process", "replaced"),
    ("a process still holds a deleted state.db-wal", "replaced"),
    ("[Errno 28] No space left on device", "disk"),
    ("ENOSPC", "disk"),
    (None, "unknown"),
])
def test_persistence_causes_match_upstream_phrases(message, bucket):
    """Issue 33 ("Robustness"): the classifier answered ``unknown`` for these phrases of
    upstream's, so a caller gave the wrong advice."""
    from hermes_data.sessions import PERSISTENCE_ERROR_CAUSES, classify_persistence_error

    assert classify_persistence_error(message) == bucket
    assert bucket in PERSISTENCE_ERROR_CAUSES


@pytest.mark.journal_independent("pure classification")
def test_is_disk_full_error():
    import errno

    from hermes_data.errors import StoreFullError
    from hermes_data.sessions import is_disk_full_error

    assert is_disk_full_error(OSError(errno.ENOSPC, "No space left on device"))
    assert is_disk_full_error(sqlite3.OperationalError("database or disk is full"))
    assert is_disk_full_error(StoreFullError("/x/state.db", "append_message"))
    assert not is_disk_full_error(sqlite3.OperationalError("database is locked"))
    assert not is_disk_full_error(None)
