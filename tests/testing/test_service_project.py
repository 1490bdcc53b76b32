"""The pytest plugin as a service gets it: a throwaway project in ``tmp_path`` (its own test
file and ini, none of this suite's conftest) run by a child pytest with the plugin loaded by
``-p hermes_data.testing`` or through the ``pytest11`` entry point the package declares."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import sqlalchemy as sa

from hermes_data.testing import PG_URL_ENV, SCRATCH_PREFIX

from ..conftest import FIXTURES, PG_ADMIN_URL, REPO

pytestmark = pytest.mark.journal_independent("the plugin's mechanics, in a child pytest run")

#: A server nothing listens on: configured but unreachable.
DEAD_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:1/test"

SERVICE_TESTS = '''
import os
import sqlalchemy as sa
from hermes_data.telemetry import get_run, start_run


def _log(url):
    log = os.environ.get("SCRATCH_LOG")
    if log and not url.endswith(".db"):
        with open(log, "a") as f:
            f.write(sa.engine.make_url(url).database + "\\n")


def test_write_then_read(session_store, session_store_url, telemetry_store,
                         telemetry_store_url):
    _log(session_store_url)
    _log(telemetry_store_url)
    session_store.create_session("svc-1", "cli")
    session_store.append_message("svc-1", "user", "from the service")
    assert [m.content for m in session_store.get_messages("svc-1")] == ["from the service"]
    start_run(telemetry_store, "svc-run", model="m")
    assert get_run(telemetry_store, "svc-run").model == "m"


def test_fresh_per_test(session_store, telemetry_store):
    assert session_store.get_session("svc-1") is None
    assert get_run(telemetry_store, "svc-run") is None
'''

LEGACY_TESTS = '''
import sqlite3


def _legacy(path):
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE t (x)")
    return path


def test_reads_only_the_copy(legacy_copy, tmp_path):
    copy = legacy_copy(_legacy(tmp_path / "old.db"))
    with sqlite3.connect(copy) as con:
        con.execute("INSERT INTO t VALUES (1)")


def test_writes_the_original(legacy_copy, tmp_path):
    original = _legacy(tmp_path / "old.db")
    legacy_copy(original)
    with sqlite3.connect(original) as con:
        con.execute("INSERT INTO t VALUES (1)")
'''


def _project(tmp_path: Path, ini: str = "", tests: str = SERVICE_TESTS) -> Path:
    project = tmp_path / "service"
    project.mkdir(parents=True)
    (project / "pytest.ini").write_text("[pytest]\n" + ini)
    (project / "test_service.py").write_text(textwrap.dedent(tests))
    return project


def _run(project: Path, *args: str, pg_env: str | None = None,
         extra_path: Path | None = None) -> tuple[dict[str, tuple[str, str]], str]:
    """Run the child pytest; returns {test id: (outcome, message)} and its output."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_", "HERMES")) and k not in ("PYTHONPATH", PG_URL_ENV)}
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in (REPO, extra_path) if p)
    env["SCRATCH_LOG"] = str(project / "scratch.log")
    if pg_env is not None:
        env[PG_URL_ENV] = pg_env
    report = project / "report.xml"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA",
         f"--junitxml={report}", *args], cwd=project, env=env, capture_output=True,
        text=True, timeout=300)
    output = done.stdout + done.stderr
    assert report.exists(), output[-3000:]
    outcomes: dict[str, tuple[str, str]] = {}
    for case in ET.parse(report).iter("testcase"):
        name = case.get("name", "")
        kinds = [(child.tag, child.get("message", "") + (child.text or ""))
                 for child in case if child.tag in ("skipped", "error", "failure")]
        outcomes[name] = kinds[-1] if kinds else ("passed", "")
    return outcomes, output


def _scratch_names(project: Path) -> set[str]:
    log = project / "scratch.log"
    return set(log.read_text().split()) if log.exists() else set()


def _existing_scratch_databases() -> set[str]:
    engine = sa.create_engine(PG_ADMIN_URL, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            return set(conn.exec_driver_sql(
                "SELECT datname FROM pg_database WHERE datname LIKE %s",
                (SCRATCH_PREFIX + "%",)).scalars())
    finally:
        engine.dispose()


def test_unconfigured_the_postgresql_runs_skip_and_say_how(tmp_path):
    project = _project(tmp_path)
    outcomes, output = _run(project, "-p", "hermes_data.testing")
    assert outcomes["test_write_then_read[sqlite]"] == ("passed", ""), output[-3000:]
    assert outcomes["test_fresh_per_test[sqlite]"] == ("passed", ""), output[-3000:]
    for test in ("test_write_then_read[postgresql]", "test_fresh_per_test[postgresql]"):
        kind, message = outcomes[test]
        assert kind == "skipped", output[-3000:]
        for how in ("--hermes-data-pg-url", "hermes_data_pg_url", PG_URL_ENV):
            assert how in message, message


def docs_example() -> str:
    """The example test file of docs/testing.md ("An example test of a service")."""
    text = (REPO / "docs" / "testing.md").read_text()
    [code] = re.findall(r"```python\n(# test_service_example\.py\n.*?)```", text, re.S)
    return code


def test_configured_by_the_environment_runs_and_drops_the_scratch_databases(tmp_path):
    """The service's tests and the docs' example, on both backends, with the upstream
    schema-21 state.db as the service's legacy file."""
    project = _project(tmp_path)
    (project / "test_service_example.py").write_text(docs_example())
    (project / "data").mkdir()
    shutil.copyfile(FIXTURES / "legacy-sessions" / "state_fork_v21.db",
                    project / "data" / "old-state.db")
    outcomes, output = _run(project, "-p", "hermes_data.testing", pg_env=PG_ADMIN_URL)
    assert set(outcomes.values()) == {("passed", "")}, output[-3000:]
    assert len(outcomes) == 4 + 3 * 2 + 1, sorted(outcomes)
    names = _scratch_names(project)
    assert {n.rsplit("_", 1)[0] for n in names} == {f"{SCRATCH_PREFIX}sessions",
                                                     f"{SCRATCH_PREFIX}telemetry"}, names
    assert not names & _existing_scratch_databases(), "scratch databases left behind"


SOURCE_TEST = '''
import os


def test_source(hermes_data_scratch_databases):
    with open(os.environ["SCRATCH_LOG"], "w") as f:
        f.write(hermes_data_scratch_databases.describe())
'''


def test_the_option_wins_over_the_ini_key_which_wins_over_the_environment(tmp_path):
    """Three servers, one per level (nothing is created: the test only asks which one the
    plugin would use, and where it was configured)."""
    ini = "hermes_data_pg_url = postgresql+psycopg://u@127.0.0.1:2/ini\n"
    env = "postgresql+psycopg://u@127.0.0.1:3/env"
    for where, args, ini_text, expected in (
            ("all", ["--hermes-data-pg-url", "postgresql+psycopg://u@127.0.0.1:1/opt"], ini,
             "postgresql+psycopg://u@127.0.0.1:1/opt (from --hermes-data-pg-url)"),
            ("ini", [], ini,
             "postgresql+psycopg://u@127.0.0.1:2/ini (from the ini key hermes_data_pg_url)"),
            ("env", [], "", f"postgresql+psycopg://u@127.0.0.1:3/env (from ${PG_URL_ENV})")):
        project = _project(tmp_path / where, ini=ini_text, tests=SOURCE_TEST)
        outcomes, output = _run(project, "-p", "hermes_data.testing", *args, pg_env=env)
        assert outcomes == {"test_source": ("passed", "")}, output[-3000:]
        assert (project / "scratch.log").read_text() == expected


def test_a_configured_server_that_is_down_errors_never_skips(tmp_path):
    project = _project(tmp_path)
    outcomes, output = _run(project, "-p", "hermes_data.testing", pg_env=DEAD_PG_URL)
    assert outcomes["test_write_then_read[sqlite]"] == ("passed", ""), output[-3000:]
    for test in ("test_write_then_read[postgresql]", "test_fresh_per_test[postgresql]"):
        kind, message = outcomes[test]
        assert kind == "error", output[-3000:]
        assert "127.0.0.1:1" in message and "unreachable" in message, message
        assert f"${PG_URL_ENV}" in message, message


def test_a_changed_legacy_original_fails_the_test(tmp_path):
    project = _project(tmp_path, tests=LEGACY_TESTS)
    outcomes, output = _run(project, "-p", "hermes_data.testing")
    assert outcomes["test_reads_only_the_copy"] == ("passed", ""), output[-3000:]
    kind, message = outcomes["test_writes_the_original"]
    assert kind == "error", output[-3000:]
    assert "old.db" in message and "changed" in message, message


def _entry_point_distribution(root: Path) -> Path:
    """A dist-info on the child's path declaring the entry points of pyproject.toml, as an
    install of the package does (the checkout itself is not installed with them)."""
    tomllib = pytest.importorskip("tomllib")
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["entry-points"]
    info = root / "hermes_data_plugin_probe-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: hermes-data-plugin-probe\n"
                                   "Version: 0\n")
    (info / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{name} = {target}\n" for name, target in eps.items())
        for group, eps in declared.items()))
    return root


def test_pyproject_declares_the_pytest11_entry_point():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["pytest11"] == {"hermes_data": "hermes_data.testing"}


@pytest.mark.parametrize("also", [(), ("-p", "hermes_data.testing")],
                         ids=["entry-point", "entry-point-and-p"])
def test_the_entry_point_loads_the_plugin(tmp_path, also):
    """Installed, the plugin needs no ``-p``; naming it as well is harmless (one
    registration, not "Plugin already registered")."""
    site = _entry_point_distribution(tmp_path / "site")
    project = _project(tmp_path)
    outcomes, output = _run(project, *also, extra_path=site)
    assert outcomes["test_write_then_read[sqlite]"] == ("passed", ""), output[-3000:]
    assert outcomes["test_write_then_read[postgresql]"][0] == "skipped", output[-3000:]


def test_importing_the_plugin_loads_no_database_library():
    """pytest imports the plugin in every run of a project that has hermes-data installed."""
    done = subprocess.run(
        [sys.executable, "-c", "import sys, hermes_data.testing; print(sorted(m for m in "
         "sys.modules if m.split('.')[0] in ('sqlalchemy', 'alembic', 'psycopg')))"],
        env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
        timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
