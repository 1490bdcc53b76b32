"""Issue 31 item 5: the test isolation guard (docs/sessions-storage.md §3.1) covers the
entry points that create or rewrite a store without opening a store object:
``hermes_data.migrate.upgrade()``, ``hermes-data upgrade`` and ``hermes-data copy`` (both
ends). From a test process each refuses a file of the real Hermes home with
:class:`ProductionStateDbError` (the command line: one line, exit 2) and creates nothing
there; the same calls against a temporary ``HERMES_HOME`` still work.

The "real home" is a fake one: ``HOME`` points at a temporary directory (the guard reads
``os.path.expanduser("~")`` at call time), ``HERMES_HOME`` is unset so the default locations
resolve under it, and the bypass variable is unset.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hermes_data import ProductionStateDbError, isolation
from hermes_data.copy.transfer import copy_store
from hermes_data.migrate import runner as migrate
from hermes_data.sessions.store import SessionStore

from tests.conftest import REPO

pytestmark = pytest.mark.usefixtures("default_journal_policy")


@pytest.fixture
def fake_home(tmp_path, monkeypatch) -> Path:
    """A temporary "real home" whose ``.hermes`` the default locations resolve to."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("HERMES_HOME", raising=False)
    monkeypatch.delenv(isolation.BYPASS_ENV, raising=False)
    assert isolation.in_test_context()
    return home


def _tree(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))


def _session_source(where: Path) -> Path:
    """A small session store at head, outside any home."""
    where.mkdir(parents=True, exist_ok=True)
    path = where / "source.db"
    with SessionStore(path) as store:
        store.create_session("s1", "cli")
        store.append_message("s1", "user", "hi")
    return path


def _existing_production_file(home: Path) -> tuple[Path, bytes]:
    db = home / ".hermes" / "state.db"
    db.parent.mkdir(parents=True)
    db.write_bytes(b"not touched")
    return db, db.read_bytes()


# -- migrate.upgrade() -----------------------------------------------------------------------

@pytest.mark.parametrize("store, url", [
    ("sessions", None), ("telemetry", None),  # the default locations under ~/.hermes
    ("sessions", "~/.hermes/profiles/p/state.db"),
    ("telemetry", "{home}/.hermes/telemetry/telemetry.db"),
])
def test_upgrade_refuses_the_real_home_and_creates_nothing(fake_home, store, url):
    with pytest.raises(ProductionStateDbError, match="refusing to open a production store"):
        migrate.upgrade(store, url.format(home=fake_home) if url else None)
    assert _tree(fake_home) == []


def test_upgrade_leaves_an_existing_production_file_alone(fake_home):
    db, before = _existing_production_file(fake_home)
    with pytest.raises(ProductionStateDbError):
        migrate.upgrade("sessions", db)
    assert _tree(fake_home / ".hermes") == ["state.db"] and db.read_bytes() == before


def test_upgrade_still_creates_stores_under_a_temporary_hermes_home(fake_home, tmp_path,
                                                                  monkeypatch):
    home = tmp_path / "hermes-home"
    monkeypatch.setenv("HERMES_HOME", str(home))
    for store in ("sessions", "telemetry"):
        assert migrate.upgrade(store).after_revision == migrate.head_revision(store)
    assert (home / "state.db").is_file() and (home / "telemetry" / "telemetry.db").is_file()
    assert _tree(fake_home) == []


# -- copy_store() ----------------------------------------------------------------------------

def test_copy_refuses_a_real_home_target_and_creates_nothing(fake_home, tmp_path):
    source = _session_source(tmp_path / "elsewhere")
    for target in ("~/.hermes/state.db", fake_home / ".hermes" / "profiles" / "p" / "state.db"):
        with pytest.raises(ProductionStateDbError):
            copy_store(source, target, store="sessions")
    assert _tree(fake_home) == []


def test_copy_refuses_a_real_home_source_before_touching_either(fake_home, tmp_path):
    db, before = _existing_production_file(fake_home)
    target = tmp_path / "target.db"
    with pytest.raises(ProductionStateDbError):
        copy_store(db, target, store="sessions")
    assert not target.exists()
    assert _tree(fake_home / ".hermes") == ["state.db"] and db.read_bytes() == before


def test_copy_still_works_under_a_temporary_hermes_home(fake_home, tmp_path, monkeypatch):
    home = tmp_path / "hermes-home"
    monkeypatch.setenv("HERMES_HOME", str(home))
    source = _session_source(tmp_path / "elsewhere")
    report = copy_store(source, home / "state.db", store="sessions")
    assert report.verified and report.copied_rows > 0
    assert _tree(fake_home) == []


# -- the command line (a real process: test context inherited, HOME the fake home) ---------

def _cli(home: Path, *args: str, hermes_home: Path | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if k not in ("HERMES_HOME", isolation.BYPASS_ENV)}
    env["HOME"] = str(home)
    if hermes_home is not None:
        env["HERMES_HOME"] = str(hermes_home)
    return subprocess.run([sys.executable, "-m", "hermes_data.cli", *args], env=env,
                          cwd=str(REPO), capture_output=True, text=True, timeout=120)


def _refused(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("hermes-data: error: "), lines[0]
    assert "refusing to open a production store" in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("args", [
    [],                                                    # both stores, default locations
    ["--store", "telemetry"],
    ["--store", "sessions", "--url", "~/.hermes/profiles/p/state.db"],
], ids=["all", "telemetry", "profile"])
def test_cli_upgrade_refuses_the_real_home(fake_home, args):
    _refused(_cli(fake_home, "upgrade", *args))
    assert _tree(fake_home) == []


def test_cli_upgrade_without_store_does_not_read_a_real_home_file(fake_home):
    db, before = _existing_production_file(fake_home)
    _refused(_cli(fake_home, "upgrade", "--url", str(db)))
    assert _tree(fake_home / ".hermes") == ["state.db"] and db.read_bytes() == before


def test_cli_copy_refuses_the_real_home_at_either_end(fake_home, tmp_path):
    source = _session_source(tmp_path / "elsewhere")
    _refused(_cli(fake_home, "copy", "--from", str(source), "--to", "~/.hermes/state.db"))
    assert _tree(fake_home) == []
    db, before = _existing_production_file(fake_home)
    target = tmp_path / "target.db"
    _refused(_cli(fake_home, "copy", "--from", "~/.hermes/state.db", "--to", str(target)))
    _refused(_cli(fake_home, "copy", "--store", "sessions",
                  "--from", "~/.hermes/state.db", "--to", str(target)))
    assert not target.exists()
    assert _tree(fake_home / ".hermes") == ["state.db"] and db.read_bytes() == before


def test_cli_upgrade_and_copy_still_work_under_a_temporary_hermes_home(fake_home, tmp_path):
    home = tmp_path / "hermes-home"
    proc = _cli(fake_home, "upgrade", hermes_home=home)
    assert proc.returncode == 0, proc.stderr
    assert (home / "state.db").is_file() and (home / "telemetry" / "telemetry.db").is_file()
    source = _session_source(tmp_path / "elsewhere")
    target = tmp_path / "copied" / "state.db"
    proc = _cli(fake_home, "copy", "--from", str(source), "--to", str(target), hermes_home=home)
    assert proc.returncode == 0, proc.stderr
    assert target.is_file()
    assert _tree(fake_home) == []


# -- a bare `alembic` run (migrations/*/env.py → run_env): no --url, the default location --

def _alembic(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("HERMES_HOME", isolation.BYPASS_ENV)
           and not (k.startswith("HERMES_DATA_") and k.endswith("_URL"))}
    env["HOME"] = str(home)
    env[isolation.TEST_ISOLATION_ENV] = "1"  # what tests/conftest.py sets for the test process
    env["PYTHONPATH"] = os.pathsep.join((str(REPO), env.get("PYTHONPATH", "")))  # this tree
    return subprocess.run([sys.executable, "-m", "alembic", "-c", str(REPO / "alembic.ini"),
                           *args], env=env, cwd=str(home), capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("args", [
    ["upgrade", "head"],                                    # telemetry, ~/.hermes/telemetry/
    ["-n", "sessions", "upgrade", "head"],                  # sessions, ~/.hermes/state.db
    ["-n", "sessions", "-x", "url=~/.hermes/profiles/p/state.db", "upgrade", "head"],
    ["-n", "sessions", "current"],                          # a command that only compares
], ids=["telemetry", "sessions", "profile", "current"])
def test_bare_alembic_refuses_the_real_home(fake_home, args):
    proc = _alembic(fake_home, *args)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "Traceback" not in out, out
    lines = out.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("FAILED: "), out
    assert "refusing to open a production store" in lines[0], out
    assert _tree(fake_home) == []


def test_bare_alembic_leaves_an_existing_real_home_file_untouched(fake_home):
    db, before = _existing_production_file(fake_home)
    proc = _alembic(fake_home, "-n", "sessions", "upgrade", "head")
    assert proc.returncode != 0 and "refusing to open a production store" in proc.stdout + proc.stderr
    assert _tree(fake_home / ".hermes") == ["state.db"] and db.read_bytes() == before


def test_bare_alembic_still_works_under_a_temporary_hermes_home(fake_home, tmp_path):
    home = tmp_path / "hermes-home"
    env_home = {"HERMES_HOME": str(home)}
    proc = subprocess.run([sys.executable, "-m", "alembic", "-c", str(REPO / "alembic.ini"),
                           "-n", "sessions", "upgrade", "head"],
                          env={**{k: v for k, v in os.environ.items()
                                  if not (k.startswith("HERMES_DATA_") and k.endswith("_URL"))},
                               "HOME": str(fake_home), "PYTHONPATH": str(REPO), **env_home},
                          cwd=str(tmp_path), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert (home / "state.db").is_file()
    assert _tree(fake_home) == []
