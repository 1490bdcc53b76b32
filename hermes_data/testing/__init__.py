"""pytest plugin: real hermes-data stores for a service's own tests (docs/testing.md).

Installed with the package and loaded by pytest through the ``pytest11`` entry point
``hermes_data`` (or explicitly: ``-p hermes_data.testing``). It gives:

* ``hermes_data_backend`` — ``"sqlite"`` or ``"postgresql"``; every test that uses a store
  fixture runs once per backend. The PostgreSQL run is skipped, with the reason, while no
  server is configured; a configured server that cannot be reached makes it an error.
* ``session_store`` / ``telemetry_store`` — a fresh, open store for this test (closed after
  it): a new file under ``tmp_path`` on SQLite; on PostgreSQL a scratch database of this
  test session, upgraded to head once and emptied before each test, dropped at the end.
* ``session_store_url`` / ``telemetry_store_url`` — where that fresh store lives, unopened.
* ``legacy_copy`` — ``legacy_copy(path)`` copies a legacy database file (and its sidecars)
  into a fresh directory and returns the copy; the test fails if the original changed.

PostgreSQL is configured by the first of: the ``--hermes-data-pg-url`` option, the
``hermes_data_pg_url`` ini key, the ``HERMES_DATA_TEST_PG_URL`` environment variable — an
administrator URL on which the plugin may ``CREATE DATABASE`` and ``DROP DATABASE``.

Importing this module imports neither SQLAlchemy nor the stores: pytest loads it in every
run of a project that has hermes-data installed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import pytest

from hermes_data.testing.legacy import LegacyCopies
from hermes_data.testing.scratch import SCRATCH_PREFIX, ScratchDatabaseError, ScratchDatabases

if TYPE_CHECKING:  # annotations only
    from hermes_data.sessions.store import SessionStore
    from hermes_data.telemetry.store import TelemetryStore

__all__ = ["BACKENDS", "PG_URL_ENV", "PG_URL_INI", "PG_URL_OPTION", "SCRATCH_PREFIX",
           "configured_pg_url", "not_configured_reason"]

#: The values of ``hermes_data_backend`` (and the ids of its parameters).
BACKENDS = ("sqlite", "postgresql")
PG_URL_OPTION = "--hermes-data-pg-url"
PG_URL_INI = "hermes_data_pg_url"
PG_URL_ENV = "HERMES_DATA_TEST_PG_URL"
#: The names pytest may know this module by: the entry point's and the module's own.
_PLUGIN_NAMES = ("hermes_data", "hermes_data.testing")


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    """Registered under one name (the entry point's, or the module's through ``-p`` /
    ``pytest_plugins``), block the other: pytest would otherwise register this module a
    second time and stop with "Plugin already registered under a different name"."""
    import sys

    mine = pluginmanager.get_name(sys.modules[__name__])
    for name in _PLUGIN_NAMES:
        if name != mine and not pluginmanager.has_plugin(name):
            pluginmanager.set_blocked(name)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("hermes-data", "hermes-data test stores")
    group.addoption(
        PG_URL_OPTION, dest="hermes_data_pg_url", default=None, metavar="URL",
        help="PostgreSQL administrator URL (postgresql+psycopg://user@host:port/db) on which "
             "the session_store / telemetry_store fixtures create and drop scratch "
             f"databases; default: the {PG_URL_INI} ini key, then ${PG_URL_ENV}. Unset: "
             "their PostgreSQL runs are skipped")
    parser.addini(PG_URL_INI, default="",
                  help=f"PostgreSQL administrator URL for hermes-data's test stores (see "
                       f"{PG_URL_OPTION})")


def configured_pg_url(config: pytest.Config) -> tuple[str, str] | None:
    """The PostgreSQL administrator URL configured for this run and where it came from
    (option, ini key, environment variable, in that order), or None."""
    candidates = (
        (config.getoption("hermes_data_pg_url", default=None), PG_URL_OPTION),
        (config.getini(PG_URL_INI), f"the ini key {PG_URL_INI}"),
        (os.environ.get(PG_URL_ENV), f"${PG_URL_ENV}"),
    )
    for value, source in candidates:
        if isinstance(value, str) and value.strip():
            return value.strip(), source
    return None


def not_configured_reason() -> str:
    """Why the PostgreSQL runs are skipped, and how to turn them on."""
    return (f"no PostgreSQL server configured for hermes-data's test stores: pass "
            f"{PG_URL_OPTION}=URL, set {PG_URL_INI} in the pytest ini file, or set {PG_URL_ENV} "
            "(an administrator URL such as postgresql+psycopg://postgres@127.0.0.1:5432/postgres "
            "on which the tests may CREATE and DROP databases)")


@pytest.fixture(params=BACKENDS, ids=BACKENDS)
def hermes_data_backend(request: pytest.FixtureRequest) -> str:
    """The backend of this test's stores: ``"sqlite"`` or ``"postgresql"`` (skipped while
    no server is configured)."""
    if request.param == "postgresql" and configured_pg_url(request.config) is None:
        pytest.skip(not_configured_reason())
    return request.param


@pytest.fixture(scope="session")
def hermes_data_scratch_databases(request: pytest.FixtureRequest) -> Iterator[ScratchDatabases]:
    """The scratch PostgreSQL databases of this test session (one per store, created on
    first use), dropped when the session ends."""
    configured = configured_pg_url(request.config)
    if configured is None:
        pytest.skip(not_configured_reason())
    try:
        scratch = ScratchDatabases(*configured)
    except ScratchDatabaseError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield scratch
    finally:
        scratch.drop_all()


def _fresh_url(request: pytest.FixtureRequest, backend: str, store: str, path: Path) -> str:
    if backend == "sqlite":
        return str(path)
    scratch: ScratchDatabases = request.getfixturevalue("hermes_data_scratch_databases")
    try:
        return scratch.empty(store)
    except ScratchDatabaseError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture
def session_store_url(request: pytest.FixtureRequest, hermes_data_backend: str,
                      tmp_path: Path) -> str:
    """Where this test's fresh session store lives, not opened: ``tmp_path/state.db`` (not
    created yet) or the emptied scratch PostgreSQL database's URL."""
    return _fresh_url(request, hermes_data_backend, "sessions", tmp_path / "state.db")


@pytest.fixture
def telemetry_store_url(request: pytest.FixtureRequest, hermes_data_backend: str,
                        tmp_path: Path) -> str:
    """Where this test's fresh telemetry store lives, not opened: ``tmp_path/telemetry.db``
    (not created yet) or the emptied scratch PostgreSQL database's URL."""
    return _fresh_url(request, hermes_data_backend, "telemetry", tmp_path / "telemetry.db")


@pytest.fixture
def session_store(session_store_url: str) -> Iterator[SessionStore]:
    """A fresh, empty :class:`hermes_data.SessionStore` for this test, closed after it."""
    from hermes_data.sessions.store import SessionStore

    with SessionStore(session_store_url) as store:
        yield store


@pytest.fixture
def telemetry_store(telemetry_store_url: str) -> Iterator[TelemetryStore]:
    """A fresh, empty :class:`hermes_data.telemetry.TelemetryStore` for this test (the
    PostgreSQL flavour on PostgreSQL), closed after it."""
    from hermes_data.telemetry.store import TelemetryStore

    with TelemetryStore(telemetry_store_url) as store:
        yield store


@pytest.fixture
def legacy_copy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LegacyCopies]:
    """``legacy_copy(path, name=None)``: a private copy of a legacy database file (with its
    ``-wal``/``-shm``/``-journal`` sidecars) in a fresh directory. The original is read as
    bytes, never opened as a database; the test fails if it changed by the end."""
    copies = LegacyCopies(lambda: tmp_path_factory.mktemp("legacy-copy"))
    yield copies
    changed = copies.changed()
    if changed:
        pytest.fail("legacy originals changed during the test (open the copy, never the "
                    "original): " + "; ".join(f"{p}: {what}" for p, what in changed.items()),
                    pytrace=False)
