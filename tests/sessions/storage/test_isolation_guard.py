"""The test isolation guard (spec sessions-ext-storage §3.1, acceptance §4 item 1): under a test
run, a store of the real Hermes home (or a deny root) is refused before anything is created,
locked or opened; deeper and temporary paths open; both bypasses work; a child process whose
environment lost every test marker is still refused through its process ancestry; the default
path follows a late ``HERMES_HOME``.

The "real home" is a fake one: ``HOME`` points at a temporary directory (the guard reads
``os.path.expanduser("~")`` at call time), or a temporary deny root is added.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hermes_data import ProductionStateDbError, isolation
from hermes_data.errors import HermesDataError
from hermes_data.sessions.storage import registry
from hermes_data.sessions.store import SessionStore
from hermes_data.telemetry import TelemetryStore

from tests.conftest import REPO


@pytest.fixture
def fake_home(tmp_path, monkeypatch) -> Path:
    """A temporary "real home": ``~/.hermes`` of this test is ``<fake_home>/.hermes``."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    return home


def _tree(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))


@pytest.mark.parametrize("relative", [".hermes/state.db", ".hermes/profiles/p/state.db"])
def test_real_home_stores_are_refused_with_nothing_created(fake_home, relative):
    path = fake_home / relative
    for open_it in (lambda: SessionStore(path), lambda: SessionStore(path, read_only=True),
                    lambda: registry.acquire(path)):
        with pytest.raises(ProductionStateDbError) as info:
            open_it()
        message = str(info.value)
        assert str(path) in message and str(fake_home / ".hermes") in message
        assert "STATE_DB_GUARD_BYPASS" in message and "HERMES_STATE_DB_GUARD_BYPASS" in message
    assert isinstance(info.value, HermesDataError) and isinstance(info.value, RuntimeError)
    assert _tree(fake_home) == []  # no directory, file, lock or sidecar
    assert registry.stats() == registry.RegistryStats(0, 0, 0)


def test_an_existing_production_file_is_not_opened_locked_or_read(fake_home):
    hermes = fake_home / ".hermes"
    hermes.mkdir()
    db = hermes / "state.db"
    db.write_bytes(b"not touched")
    before = db.stat()
    with pytest.raises(ProductionStateDbError):
        SessionStore(db)
    after = db.stat()
    assert _tree(hermes) == ["state.db"] and db.read_bytes() == b"not touched"
    assert (after.st_mtime_ns, after.st_mode) == (before.st_mtime_ns, before.st_mode)


def test_repair_and_quarantine_entries_are_guarded_first(fake_home):
    """Storage §3.0 "guard first": repair, the zero probe's quarantine and its lock refuse
    a production path before any lock file, backup or byte read."""
    from hermes_data.sessions.storage import quarantine
    from hermes_data.sessions.storage.repair import procedure as repair
    hermes = fake_home / ".hermes"
    hermes.mkdir()
    db = hermes / "state.db"
    db.write_bytes(b"\0" * 4096)
    for call in (lambda: repair.repair_state_db_schema(db),
                 lambda: quarantine.quarantine_zeroed_state_db(db, already_locked=True),
                 lambda: quarantine.quarantine_cross_process_lock(db).__enter__()):
        with pytest.raises(ProductionStateDbError):
            call()
    assert _tree(hermes) == ["state.db"] and db.read_bytes() == b"\0" * 4096


def test_the_telemetry_store_is_guarded_too(fake_home):
    with pytest.raises(ProductionStateDbError):
        TelemetryStore(fake_home / ".hermes" / "telemetry" / "telemetry.db")
    assert _tree(fake_home) == []


def test_a_deny_root_is_refused(tmp_path, monkeypatch):
    root = tmp_path / "deployed-home"
    monkeypatch.setattr(isolation, "STATE_DB_GUARD_EXTRA_DENY_ROOTS",
                        [*isolation.STATE_DB_GUARD_EXTRA_DENY_ROOTS, root])
    for path in (root / "state.db", root / "profiles" / "work" / "state.db"):
        with pytest.raises(ProductionStateDbError, match="deployed-home"):
            SessionStore(path)
    assert not root.exists()


def test_the_suite_denies_the_home_it_was_started_with():
    """tests/conftest.py registers the pre-sandbox ``~/.hermes`` (and a pre-set HERMES_HOME)."""
    from tests.conftest import PRE_SANDBOX_HOMES

    assert PRE_SANDBOX_HOMES[0] == Path(os.path.expanduser("~")) / ".hermes"
    assert all(h in isolation.STATE_DB_GUARD_EXTRA_DENY_ROOTS for h in PRE_SANDBOX_HOMES)
    assert os.environ["HERMES_TEST_ISOLATION"] and isolation.in_test_context()
    with pytest.raises(ProductionStateDbError):
        isolation.ensure_test_isolation(PRE_SANDBOX_HOMES[0] / "state.db")


def test_deeper_and_temporary_paths_open(fake_home, tmp_path):
    for path in (fake_home / ".hermes" / "hermes-agent" / "worktrees" / "w" / "state.db",
                 fake_home / ".hermes" / "profiles" / "p" / "sub" / "state.db",
                 tmp_path / "state.db"):
        with SessionStore(path) as store:
            store.create_session("s1", "cli")
        assert path.exists()


def test_the_module_bypass_opens(fake_home, monkeypatch):
    monkeypatch.setattr(isolation, "STATE_DB_GUARD_BYPASS", True)
    with SessionStore(fake_home / ".hermes" / "state.db") as store:
        store.create_session("s1", "cli")


@pytest.mark.live_system_guard_bypass
def test_the_bypass_marker_opens(fake_home):
    assert isolation.STATE_DB_GUARD_BYPASS is True
    with SessionStore(fake_home / ".hermes" / "profiles" / "p" / "state.db") as store:
        store.create_session("s1", "cli")


def test_the_environment_bypass_opens(fake_home, monkeypatch):
    monkeypatch.setenv(isolation.BYPASS_ENV, "1")
    with SessionStore(fake_home / ".hermes" / "state.db") as store:
        store.create_session("s1", "cli")


_CHILD = textwrap.dedent("""
    import json, os, sys
    from hermes_data import ProductionStateDbError
    from hermes_data.sessions.store import SessionStore
    path = sys.argv[1]
    try:
        SessionStore(path).close()
        outcome = "opened"
    except ProductionStateDbError:
        outcome = "refused"
    markers = sorted(k for k in os.environ if k.startswith("PYTEST")
                     or k in ("HERMES_TEST_ISOLATION", "HERMES_HOME"))
    print(json.dumps({"outcome": outcome, "markers": markers}))
""")


def _scrubbed_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_", "HERMES_TEST_ISOLATION", "HERMES_HOME"))}
    env.update(HOME=str(home), **extra)
    return env


def _run_child(path: Path, env: dict[str, str]) -> dict:
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(path)], env=env, cwd=str(REPO),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_a_child_without_test_markers_is_refused_through_its_ancestry(fake_home):
    """#82770: a child that rebuilt its environment (no PYTEST_*, no HERMES_TEST_ISOLATION,
    no HERMES_HOME) would open ``~/.hermes/state.db``; its ancestry names pytest."""
    path = fake_home / ".hermes" / "state.db"
    report = _run_child(path, _scrubbed_env(fake_home))
    assert report == {"outcome": "refused", "markers": []}
    assert _tree(fake_home) == []
    # The same child with the environment bypass opens: the refusal was the guard's.
    bypassed = _run_child(path, _scrubbed_env(fake_home, HERMES_STATE_DB_GUARD_BYPASS="1"))
    assert bypassed["outcome"] == "opened" and path.exists()


@pytest.fixture
def no_test_markers(monkeypatch):
    """Call it in the test body (pytest sets PYTEST_CURRENT_TEST again at the call phase):
    this process then looks as a non-test process would (environment markers removed, the
    ancestry memo cleared); restored afterwards."""
    def scrub() -> None:
        for name in ("PYTEST_CURRENT_TEST", "PYTEST_VERSION", isolation.TEST_ISOLATION_ENV):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setattr(isolation, "_ANCESTRY", {})
    return scrub


def test_no_test_ancestor_means_no_test(fake_home, monkeypatch, no_test_markers):
    calls = []

    def argvs():
        calls.append(1)
        return [["/usr/bin/python3", "gateway.py", "--serve"], ["/sbin/init"]]

    monkeypatch.setattr(isolation, "ancestor_argvs", argvs)
    no_test_markers()
    assert not isolation.in_test_context()
    with SessionStore(fake_home / ".hermes" / "state.db") as store:  # a production run opens
        store.create_session("s1", "cli")
    assert not isolation.in_test_context()
    assert len(calls) == 1  # memoised per process


def test_ancestry_inspection_fails_open(monkeypatch, no_test_markers):
    def broken():
        raise PermissionError("no /proc here")

    monkeypatch.setattr(isolation, "ancestor_argvs", broken)
    no_test_markers()
    assert not isolation.in_test_context()
    isolation.ensure_test_isolation(Path(os.path.expanduser("~")) / ".hermes" / "state.db")


def test_a_pytest_ancestor_is_a_test(monkeypatch, no_test_markers):
    monkeypatch.setattr(isolation, "ancestor_argvs",
                        lambda: [["bash"], ["/venv/bin/python", "-m", "pytest", "-q"]])
    no_test_markers()
    assert isolation.in_test_context()


@pytest.mark.parametrize("argv, expected", [
    (["python", "-m", "pytest"], True),
    (["/usr/local/bin/py.test", "tests"], True),
    (['"C:\\Python\\Scripts\\pytest.exe"', "-q"], True),
    (["C:\\tools\\PY.TEST.EXE"], True),
    (["sh", "-c", "cd /repo && python -m pytest -q"], True),
    (["python", "pytester.py"], False),
    (["pytest-runner"], False),
    (["/opt/pytest/bin/hermes", "gateway"], False),
])
def test_pytest_argv_tokens(argv, expected):
    assert isolation.names_pytest(argv) is expected


def test_default_db_path_follows_a_late_hermes_home(tmp_path, monkeypatch):
    late = tmp_path / "late-home"
    monkeypatch.setenv("HERMES_HOME", str(late))
    assert isolation.default_db_path() == late / "state.db"
    with SessionStore() as store:
        assert Path(store.path) == late / "state.db"
    store = registry.acquire()
    try:
        assert Path(store.path) == late / "state.db"
    finally:
        registry.release(store)
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "later"))
    assert isolation.default_db_path() == tmp_path / "later" / "state.db"


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="Linux /proc walk only")
def test_proc_ancestry_matches_psutil():
    """The /proc walk (issue 14: no psutil import on a store's first open) sees the same
    ancestors, nearest first, with the same argv as psutil's ``parents()`` / ``cmdline()``."""
    import psutil

    expected = [p.cmdline() for p in psutil.Process().parents()]
    assert expected  # a test run has at least one ancestor
    assert list(isolation._proc_ancestor_argvs()) == expected
    assert list(isolation._ancestor_argvs()) == expected
