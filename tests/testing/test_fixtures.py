"""The pytest plugin's fixtures (hermes_data/testing, docs/testing.md) used the way a service
uses them, on both backends: each test gets a real, open, empty store of its own."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import sqlalchemy as sa

from hermes_data import ConfigurationError, SessionStore
from hermes_data.telemetry import TelemetryStore, get_run, record_llm_call, start_run
from hermes_data.testing.scratch import SCRATCH_PREFIX


def test_the_backend_parameter_has_both_ids(request, hermes_data_backend):
    assert request.node.callspec.id == hermes_data_backend
    assert hermes_data_backend in ("sqlite", "postgresql")


def test_a_session_and_its_message_read_back(session_store, hermes_data_backend):
    assert isinstance(session_store, SessionStore)
    assert session_store.engine.dialect.name == hermes_data_backend
    session_store.create_session("plugin-1", "cli", model="m1")
    mid = session_store.append_message("plugin-1", "user", "hello from a service")
    [msg] = session_store.get_messages("plugin-1")
    assert (msg.id, msg.role, msg.content) == (mid, "user", "hello from a service")
    assert session_store.get_session("plugin-1").model == "m1"


def test_the_next_test_sees_an_empty_session_store(session_store):
    """Runs after the test above (file order): nothing it wrote is left, ids restart."""
    assert session_store.get_session("plugin-1") is None
    assert session_store.list_sessions() == []
    session_store.create_session("plugin-2", "cli")
    assert session_store.append_message("plugin-2", "user", "x") == 1


def test_a_telemetry_run_and_its_call_read_back(telemetry_store, hermes_data_backend):
    assert isinstance(telemetry_store, TelemetryStore)
    assert telemetry_store.dialect == hermes_data_backend
    start_run(telemetry_store, "tel-1", model="m1", platform="cli")
    record_llm_call(telemetry_store, "tel-1", None, "m1", "p1", tokens_in=7, tokens_out=3,
                    cost_usd=0.5)
    run = get_run(telemetry_store, "tel-1")
    assert (run.platform, run.model, run.tokens_in, run.tokens_out) == ("cli", "m1", 7, 3)


def test_the_next_test_sees_an_empty_telemetry_store(telemetry_store):
    assert get_run(telemetry_store, "tel-1") is None


def test_the_urls_name_fresh_unopened_stores(session_store_url, telemetry_store_url,
                                             hermes_data_backend, tmp_path):
    if hermes_data_backend == "sqlite":
        assert session_store_url == str(tmp_path / "state.db")
        assert telemetry_store_url == str(tmp_path / "telemetry.db")
        assert not (tmp_path / "state.db").exists()
        assert not (tmp_path / "telemetry.db").exists()
        return
    for url, store in ((session_store_url, "sessions"), (telemetry_store_url, "telemetry")):
        assert sa.engine.make_url(url).database.startswith(f"{SCRATCH_PREFIX}{store}_")
    # Upgraded to head already: the store opens it without an upgrade.
    with SessionStore(session_store_url) as s:
        assert s.list_sessions() == []


def test_both_stores_in_one_test_share_the_backend(session_store, telemetry_store,
                                                   hermes_data_backend):
    assert session_store.engine.dialect.name == telemetry_store.dialect == hermes_data_backend


_KEPT: dict[str, object] = {}


def test_keep_the_stores_past_the_test(session_store, telemetry_store, hermes_data_backend):
    _KEPT[f"session-{hermes_data_backend}"] = session_store
    _KEPT[f"telemetry-{hermes_data_backend}"] = telemetry_store


@pytest.mark.parametrize("name", ["session-sqlite", "session-postgresql", "telemetry-sqlite",
                                  "telemetry-postgresql"])
def test_the_stores_were_closed_after_their_test(name):
    """Runs after the test above (file order): the fixtures closed what they gave it."""
    if name not in _KEPT:
        pytest.skip(f"{name} did not run")
    store = _KEPT.pop(name)
    with pytest.raises(ConfigurationError, match="is closed"):
        store.list_sessions() if name.startswith("session") else store.connection()


# -- legacy_copy -------------------------------------------------------------------------------

def _legacy_file(path, journal="delete"):
    con = sqlite3.connect(path)
    con.execute(f"PRAGMA journal_mode={journal}")
    con.execute("CREATE TABLE sessions (id TEXT PRIMARY KEY)")
    con.execute("INSERT INTO sessions VALUES ('old')")
    con.commit()
    return con


def _wal_set(tmp_path):
    """A legacy file with its ``-wal`` and ``-shm`` (the bytes of a live WAL database, copied
    while its writer held it open), read-only, in a directory nothing has open."""
    import shutil

    live = tmp_path / "live" / "state.db"
    live.parent.mkdir()
    con = _legacy_file(live, "wal")
    original = tmp_path / "orig" / "state.db"
    original.parent.mkdir()
    for suffix in ("", "-wal", "-shm"):
        shutil.copyfile(f"{live}{suffix}", f"{original}{suffix}")
        Path(f"{original}{suffix}").chmod(0o444)
    con.close()
    return original


def test_legacy_copy_copies_the_file_and_its_sidecars(legacy_copy, tmp_path):
    original = _wal_set(tmp_path)
    copy = legacy_copy(original)
    assert copy != original and copy.name == "state.db"
    assert not copy.parent.is_relative_to(original.parent)
    for suffix in ("", "-wal", "-shm"):
        assert (copy.parent / f"state.db{suffix}").read_bytes() == \
            (original.parent / f"state.db{suffix}").read_bytes()
        assert (copy.parent / f"state.db{suffix}").stat().st_mode & 0o777 == 0o600
    # The copy is a working database: its committed row lives in the copied -wal.
    with sqlite3.connect(copy) as con:
        assert con.execute("SELECT id FROM sessions").fetchall() == [("old",)]
    renamed = legacy_copy(original, name="sessions.sqlite")
    assert renamed.name == "sessions.sqlite" and (renamed.parent / "sessions.sqlite-wal").exists()
    assert renamed.parent != copy.parent


def test_legacy_copy_refuses_a_missing_file_and_a_path_as_name(legacy_copy, tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.db"):
        legacy_copy(tmp_path / "nope.db")
    (tmp_path / "a.db").write_bytes(b"")
    with pytest.raises(ValueError, match="sub/b.db"):
        legacy_copy(tmp_path / "a.db", name="sub/b.db")


def test_legacy_copy_reports_a_changed_original(tmp_path):
    """What the fixture checks at teardown: a byte change, an appearing sidecar, a deleted
    original (the pytester run in test_service_project.py shows the test failing)."""
    from hermes_data.testing.legacy import LegacyCopies

    dirs = iter(range(100))
    copies = LegacyCopies(lambda: (d := tmp_path / f"copy{next(dirs)}", d.mkdir(), d)[2])
    original = tmp_path / "state.db"
    _legacy_file(original).close()
    copy = copies(original)
    assert copies.changed() == {}
    with sqlite3.connect(copy) as con:  # the copy may change freely
        con.execute("INSERT INTO sessions VALUES ('new')")
    assert copies.changed() == {}
    con = sqlite3.connect(original)
    con.execute("PRAGMA journal_mode=wal")  # opening in WAL: sidecars appear
    con.execute("SELECT * FROM sessions").fetchall()
    assert copies.changed() == {original.resolve(): "state.db changed, state.db-shm appeared, "
                                "state.db-wal appeared"}
    con.close()
    original.unlink()
    assert "state.db was deleted" in copies.changed()[original.resolve()]
