"""Shared test support: locations of the legacy fixtures and small helpers."""

from __future__ import annotations

import atexit
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from contextlib import contextmanager
from pathlib import Path

import pytest

#: The package's own pytest plugin (hermes_data/testing, docs/testing.md): its fixtures are
#: tested here (tests/testing/), and a checkout that is not installed has no entry point.
#: Loaded through the entry point as well, it blocks this second name itself.
pytest_plugins = ("hermes_data.testing",)

REPO = Path(__file__).resolve().parent.parent
#: The legacy databases the tests use, carried by the repository (tests/fixtures/README.md).
FIXTURE_ARCHIVE = REPO / "tests" / "fixtures" / "legacy.tar.xz"
FIXTURE_SHA256 = "c69858b4278f98b1968f7702a5560ec188b86484126a2563e87ead7ee4db63a8"


def _unpack_fixtures() -> Path:
    """Unpack the fixture archive once per test process into a private temporary directory
    (removed at exit); the files are made read-only so a test can only open copies."""
    data = FIXTURE_ARCHIVE.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != FIXTURE_SHA256:
        raise RuntimeError(f"{FIXTURE_ARCHIVE}: checksum {digest} does not match the one in "
                           "tests/conftest.py (see tests/fixtures/README.md)")
    dest = Path(tempfile.mkdtemp(prefix="hermes-data-fixtures-"))
    atexit.register(shutil.rmtree, dest, True)
    with tarfile.open(FIXTURE_ARCHIVE) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(dest, filter="data")
        else:  # pragma: no cover - Python without extraction filters
            tar.extractall(dest)
    for path in dest.rglob("*"):
        if path.is_file():
            path.chmod(0o444)
    return dest


FIXTURES = _unpack_fixtures()

#: The Hermes homes this run was started with, taken before anything sandboxes it: the real
#: ``~/.hermes`` and a pre-set ``HERMES_HOME``. The test isolation guard (spec
#: sessions-ext-storage §3.1) refuses to open a store directly under them, even in a test that
#: points ``HOME`` elsewhere.
PRE_SANDBOX_HOMES = [Path(os.path.expanduser("~")) / ".hermes"] + (
    [Path(os.environ["HERMES_HOME"].strip()).expanduser()]
    if os.environ.get("HERMES_HOME", "").strip() else [])
_SESSION_ENV = ("HERMES_HOME", "HERMES_TEST_ISOLATION")
_saved_env: dict[str, str | None] = {}
#: The journal-mode override this test run was started with (None: the default policy).
RUN_JOURNAL_MODE = os.environ.get("HERMES_DATA_JOURNAL_MODE") or None


@pytest.fixture
def default_journal_policy(monkeypatch):
    """Run a test under the default journal-mode policy in both CI passes. For tests that count
    what the command line prints: on a WAL-reset-vulnerable build (this machine's 3.40.1) a
    forced HERMES_DATA_JOURNAL_MODE=wal adds a policy warning line to every command."""
    monkeypatch.delenv("HERMES_DATA_JOURNAL_MODE", raising=False)


def known_wal_defect(reason: str) -> pytest.MarkDecorator:
    """A defect the WAL pass still shows (tracked in the issue named by ``reason``): expected to
    fail there, strictly — the day it passes, the marker must go."""
    return pytest.mark.xfail(RUN_JOURNAL_MODE == "wal", reason=reason, strict=True)


def pytest_configure(config) -> None:
    config.addinivalue_line(
        "markers", "journal_independent(reason): nothing the test exercises can depend on the "
        "SQLite journal mode (PostgreSQL only, static checks, pure functions); the WAL pass "
        "skips it with that reason and the default pass runs it")
    config.addinivalue_line(
        "markers", "live_system_guard_bypass: the test may open stores under the real Hermes "
        "home (sets hermes_data.isolation.STATE_DB_GUARD_BYPASS for its duration)")
    # The test isolation guard: a sandbox HERMES_HOME for the whole session (module-level code
    # and session fixtures included; each test gets its own below), a test context every
    # child process inherits, and the pre-sandbox homes as deny roots.
    from hermes_data import isolation

    for name in (*_SESSION_ENV, "HERMES_DATA_TEST_PG_URL"):
        _saved_env.setdefault(name, os.environ.get(name))
    # The plugin's PostgreSQL runs use this suite's server unless the run names another.
    if not os.environ.get("HERMES_DATA_TEST_PG_URL", "").strip():
        os.environ["HERMES_DATA_TEST_PG_URL"] = PG_ADMIN_URL
    sandbox = Path(tempfile.mkdtemp(prefix="hermes-data-session-home-"))
    atexit.register(shutil.rmtree, sandbox, True)
    os.environ["HERMES_HOME"] = str(sandbox)
    os.environ["HERMES_TEST_ISOLATION"] = "1"
    for home in PRE_SANDBOX_HOMES:
        if home not in isolation.STATE_DB_GUARD_EXTRA_DENY_ROOTS:
            isolation.STATE_DB_GUARD_EXTRA_DENY_ROOTS.append(home)


def pytest_unconfigure(config) -> None:
    for name, value in _saved_env.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(autouse=True)
def _state_db_guard_bypass(request, monkeypatch):
    """Tests marked ``live_system_guard_bypass`` run with the isolation guard off."""
    if request.node.get_closest_marker("live_system_guard_bypass") is not None:
        from hermes_data import isolation

        monkeypatch.setattr(isolation, "STATE_DB_GUARD_BYPASS", True)


def journal_independence(item: pytest.Item) -> str | None:
    """Why ``item`` cannot depend on the SQLite journal mode, or None when it may.

    A test is independent when it is marked ``journal_independent`` or when it is the
    PostgreSQL instance of a backend-parametrized test (``backend`` = ``postgresql``): the
    journal mode is a property of a SQLite file and PostgreSQL has none. The package's
    pytest plugin names its parameter ``hermes_data_backend``; it counts the same way."""
    marker = item.get_closest_marker("journal_independent")
    if marker is not None:
        return marker.args[0] if marker.args else "marked journal_independent"
    callspec = getattr(item, "callspec", None)
    if callspec is not None and "postgresql" in (
            callspec.params.get("backend"), callspec.params.get("hermes_data_backend")):
        return "PostgreSQL backend"
    return None


def pytest_collection_modifyitems(config, items) -> None:
    """In the WAL pass (``HERMES_DATA_JOURNAL_MODE=wal``), skip the tests whose outcome cannot
    depend on the journal mode: the default pass already ran them, unchanged."""
    if RUN_JOURNAL_MODE != "wal":
        return
    for item in items:
        why = journal_independence(item)
        if why is not None:
            item.add_marker(pytest.mark.skip(
                reason=f"journal-mode independent ({why}): run by the default pass"))


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory, monkeypatch):
    """Never touch the user's real stores: every test gets its own HERMES_HOME."""
    home = tmp_path_factory.mktemp("hermes-home")
    monkeypatch.setenv("HERMES_HOME", str(home))
    monkeypatch.delenv("HERMES_TELEMETRY_HOME", raising=False)
    monkeypatch.delenv("HERMES_DATA_TELEMETRY_URL", raising=False)
    monkeypatch.delenv("HERMES_DATA_SESSIONS_URL", raising=False)
    # CI runs the suite twice: the default policy and HERMES_DATA_JOURNAL_MODE=wal. The mode
    # the run was started with applies to every test; a test that needs one mode sets it.
    if RUN_JOURNAL_MODE:
        monkeypatch.setenv("HERMES_DATA_JOURNAL_MODE", RUN_JOURNAL_MODE)
    else:
        monkeypatch.delenv("HERMES_DATA_JOURNAL_MODE", raising=False)
    yield home


def copy_fixture(relpath: str, dest_dir: Path) -> Path:
    """Copy a shared fixture (and any sidecars) into ``dest_dir``; never open the original."""
    src = FIXTURES / relpath
    if not src.exists():
        pytest.fail(f"fixture {relpath} is not in {FIXTURE_ARCHIVE}")
    dest = dest_dir / src.name
    shutil.copyfile(src, dest)
    for suffix in ("-wal", "-shm"):
        side = Path(f"{src}{suffix}")
        if side.exists():
            shutil.copyfile(side, Path(f"{dest}{suffix}"))
    return dest


def run_cli(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``hermes-data`` in a fresh interpreter (real process, real imports)."""
    return subprocess.run(
        [sys.executable, "-m", "hermes_data.cli", *args],
        capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})},
        cwd=str(REPO),
    )


PG_ADMIN_URL = os.environ.get("HERMES_DATA_PG_ADMIN_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


@pytest.fixture
def pg_url():
    """A fresh, empty PostgreSQL database for this test only (dropped afterwards).

    The server must be running (``.ci/run`` starts it); a missing server fails the test
    rather than skipping it, so CI cannot go green without PostgreSQL.
    """
    import uuid

    import sqlalchemy as sa

    name = f"hd_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        yield sa.engine.make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        admin.dispose()


_CHECKPOINTS: list[str] = []
#: The most values one ``IN (…)`` list may carry (coordination C49, gateway 42, agent: "≤ 900
#: ids per statement"): SQLite builds of the upstream era cap a statement at 999 variables.
MAX_IN_LIST = 900
_WIDE_IN_LISTS: list[str] = []
_IN_OPEN = re.compile(r"\bIN\s*\(", re.IGNORECASE)


def in_list_sizes(statement: str) -> list[int]:
    """Number of items of every ``IN (…)`` list of an (expanded) SQL statement; string
    literals and nested parentheses are skipped, so a subquery counts as one item list."""
    sizes = []
    for m in _IN_OPEN.finditer(statement):
        depth, items, quoted = 0, 1, False
        for ch in statement[m.end():]:
            if quoted:
                quoted = ch != "'"
            elif ch == "'":
                quoted = True
            elif ch == "(":
                depth += 1
            elif ch == ")":
                if depth == 0:
                    break
                depth -= 1
            elif ch == "," and depth == 0:
                items += 1
        sizes.append(items)
    return sizes


@pytest.fixture(scope="session", autouse=True)
def _checkpoint_watch():
    """Trace every statement of every sqlite3 connection opened in this process during the
    run (bound values expanded); fail the session if any checkpoint other than PASSIVE was
    issued, or if any statement bound more than :data:`MAX_IN_LIST` values in one ``IN``
    list (the suite-wide statement trace of the coordination and gateway specs)."""
    import sqlite3
    import sqlite3.dbapi2

    # SQLAlchemy's pysqlite dialect connects through sqlite3.dbapi2.connect, the library's
    # own raw connections through sqlite3.connect: watch both.
    real_connect = sqlite3.connect
    real_dbapi_connect = sqlite3.dbapi2.connect

    def trace(statement: str) -> None:
        if "wal_checkpoint" in statement.lower():
            _CHECKPOINTS.append(statement)
        # An IN list of more than 900 values is at least 1801 characters long.
        if len(statement) > 2 * MAX_IN_LIST and any(
                n > MAX_IN_LIST for n in in_list_sizes(statement)):
            _WIDE_IN_LISTS.append(statement[:300])

    def traced(real):
        def connect(*args, **kwargs):
            con = real(*args, **kwargs)
            con.set_trace_callback(trace)
            return con
        return connect

    sqlite3.connect = traced(real_connect)
    sqlite3.dbapi2.connect = traced(real_dbapi_connect)
    try:
        yield
    finally:
        sqlite3.connect = real_connect
        sqlite3.dbapi2.connect = real_dbapi_connect
    bad = [s for s in _CHECKPOINTS if "passive" not in s.lower()]
    assert not bad, f"non-PASSIVE checkpoints issued during the run: {bad[:5]}"
    assert not _WIDE_IN_LISTS, \
        f"statements binding more than {MAX_IN_LIST} values in one IN list: {_WIDE_IN_LISTS[:3]}"


@pytest.fixture
def checkpoint_log() -> list[str]:
    """Checkpoint statements seen so far in this test session."""
    return _CHECKPOINTS


@contextmanager
def scratch_store_database(store: str, prefix: str):
    """A PostgreSQL database for a whole test session, upgraded to ``store``'s head once.

    ``synchronous_commit=off`` for this scratch database only: the tests check atomicity and
    results, not fsync durability, and it keeps thousands of tiny commits fast.
    """
    import uuid

    import sqlalchemy as sa

    from hermes_data.migrate import runner as migrate

    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
            conn.exec_driver_sql(f'ALTER DATABASE "{name}" SET synchronous_commit = off')
        url = sa.engine.make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
        migrate.upgrade(store, url)
        yield url
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        admin.dispose()


def truncate_tables(url: str, tables: str) -> None:
    """``TRUNCATE tables RESTART IDENTITY`` on a scratch PostgreSQL database."""
    import sqlalchemy as sa

    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(f"TRUNCATE {tables} RESTART IDENTITY")
    finally:
        engine.dispose()


@contextmanager
def tiny_tmpfs(mnt: Path, size: str):
    """Mount a tmpfs of ``size`` (``"64k"``) at ``mnt`` — a real full disk (ENOSPC) for a
    test; skips the test where mounting is not permitted (root with CAP_SYS_ADMIN can: CI)."""
    mnt.mkdir()
    if shutil.which("mount") is None or os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)
