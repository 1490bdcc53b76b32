"""Configured pragmas of the ``database:`` section (spec §8.3) on every connection kind."""

from __future__ import annotations

import logging

import pytest

from hermes_data.engine import SqliteSettings
from hermes_data.sessions.storage import opening
from hermes_data.sessions.store import SessionStore

pytestmark = pytest.mark.sqlite_only("PRAGMAs")

WAL = SqliteSettings(busy_timeout_ms=1000, journal_mode="wal")
CONFIG = {"database": {"cache_size": -4096, "mmap_size": 1 << 20, "temp_store": 2,
                       "wal_autocheckpoint": 500, "journal_size_limit": 1 << 20,
                       "synchronous": "full"}}
PER_CONNECTION = {"cache_size": -4096, "mmap_size": 1 << 20, "temp_store": 2, "synchronous": 2}


def _values(con, names):
    return {n: con.execute(f"PRAGMA {n}").fetchone()[0] for n in names}


def test_writer_and_read_connections_get_the_configured_pragmas(tmp_path):
    with SessionStore(tmp_path / "state.db", settings=WAL, config=CONFIG) as s:
        writer = _values(s.backend._raw, list(CONFIG["database"]))
        assert writer == {**PER_CONNECTION, "wal_autocheckpoint": 500, "journal_size_limit": 1 << 20}
        assert s.read_pool is not None
        seen = s.backend.read(lambda c: _values(c.connection.driver_connection, PER_CONNECTION))
        assert seen == PER_CONNECTION
        assert s.read_pool.idle_count() == 1  # that really was a pooled reader
    with SessionStore(tmp_path / "state.db", config=lambda: CONFIG, read_only=True) as ro:
        assert _values(ro.backend._raw, PER_CONNECTION) == PER_CONNECTION


def test_unconfigured_handles_keep_the_engine_defaults(tmp_path):
    with SessionStore(tmp_path / "state.db", settings=WAL) as s:
        assert _values(s.backend._raw, ["synchronous", "journal_size_limit", "temp_store"]) == \
            {"synchronous": 1, "journal_size_limit": 67108864, "temp_store": 0}


def test_invalid_values_warn_and_are_skipped_never_breaking_the_open(tmp_path, caplog):
    bad = {"database": {"cache_size": "64MB", "mmap_size": 1.5, "temp_store": True,
                        "wal_autocheckpoint": None, "synchronous": "sometimes"}}
    with caplog.at_level(logging.WARNING, logger="hermes_data.sessions.storage.opening"):
        with SessionStore(tmp_path / "state.db", settings=WAL, config=bad) as s:
            assert _values(s.backend._raw, ["cache_size", "mmap_size", "temp_store", "synchronous"]) == \
                {"cache_size": -2000, "mmap_size": 0, "temp_store": 0, "synchronous": 1}
            s.create_session("a", "cli")
    text = caplog.text
    for name in ("cache_size", "mmap_size", "temp_store", "synchronous"):
        assert f"database.{name}" in text
    assert "wal_autocheckpoint" not in text  # None means "not set", not "invalid"


def test_a_config_that_raises_never_breaks_an_open(tmp_path, caplog):
    def broken():
        raise RuntimeError("config file unreadable")

    with caplog.at_level(logging.WARNING, logger="hermes_data.sessions.storage.opening"):
        with SessionStore(tmp_path / "state.db", config=broken) as s:
            s.create_session("a", "cli")
    assert "config file unreadable" in caplog.text


@pytest.mark.parametrize("value,expected", [
    ("off", 0), ("Normal", 1), ("FULL", 2), ("extra", 3), (0, 0), (3, 3), (False, 0),
    ("2", 2), (True, None), (4, None), ("4", None), (-1, None), (1.0, None),
])
def test_synchronous_values(value, expected):
    stmts = opening.configured_pragmas({"database": {"synchronous": value}}, platform="linux")
    assert stmts == ([] if expected is None else [f"PRAGMA synchronous = {expected}"])


def test_macos_refuses_synchronous_below_full(caplog):
    with caplog.at_level(logging.WARNING, logger="hermes_data.sessions.storage.opening"):
        assert opening.configured_pragmas({"database": {"synchronous": "normal"}},
                                          platform="darwin") == []
        assert opening.configured_pragmas({"database": {"synchronous": "extra"}},
                                          platform="darwin") == ["PRAGMA synchronous = 3"]
    assert "macOS" in caplog.text


def test_a_failing_pragma_is_logged_and_skipped(tmp_path, caplog):
    import sqlite3
    con = sqlite3.connect(tmp_path / "x.db")
    con.close()  # every statement on a closed connection fails
    with caplog.at_level(logging.WARNING, logger="hermes_data.sessions.storage.opening"):
        opening.apply_pragmas(con, ["PRAGMA cache_size = 10"], "x.db")
    assert "cache_size" in caplog.text and "skipped" in caplog.text
