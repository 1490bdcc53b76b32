"""Type checkers see hermes_data's annotations: ``py.typed`` ships, and the lazily imported
``from hermes_data import SessionStore, TelemetryStore`` are the real classes to mypy (not Any).

mypy runs on two probe scripts (never executed): one uses the stores correctly and must pass,
the other makes deliberate type errors that must each be flagged.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import REPO

pytestmark = pytest.mark.journal_independent("static type checks")

pytest.importorskip("mypy")

GOOD = '''\
from hermes_data import SessionStore, TelemetryStore


def use(store: SessionStore, telemetry: TelemetryStore) -> int:
    telemetry.close()
    return store.message_count("s1")


reveal_type(SessionStore)
reveal_type(TelemetryStore)
'''

BAD = '''\
from hermes_data import SessionStore, TelemetryStore


def use(store: SessionStore, telemetry: TelemetryStore) -> None:
    store.message_count(42)
    count: str = store.message_count("s1")
    telemetry.close("now")
'''
#: (line of BAD, mypy error code) each deliberate mistake must produce.
EXPECTED = {(5, "arg-type"), (6, "assignment"), (7, "call-arg")}


def _run_mypy(tmp_path: Path, *options: str, env: dict[str, str] | None = None,
              python: Path | str = sys.executable) -> str:
    """mypy's report on the probes (exit 1: the deliberate errors in bad.py must be found)."""
    (tmp_path / "good.py").write_text(GOOD)
    (tmp_path / "bad.py").write_text(BAD)
    (tmp_path / "mypy.ini").write_text("[mypy]\n")  # the probe's own config, not the project's
    cmd = [str(python), "-m", "mypy", "--config-file", str(tmp_path / "mypy.ini"),
           "--cache-dir", str(tmp_path / ".mypy_cache"), "--show-error-codes", "--no-pretty",
           *options, "good.py", "bad.py"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 1, proc.stdout + proc.stderr
    return proc.stdout


def _check(output: str) -> None:
    assert "import-not-found" not in output and "import-untyped" not in output, output
    errors = re.findall(r"^(good|bad)\.py:(\d+): error: .*\[([\w-]+)\]$", output, re.M)
    assert {(int(line), code) for f, line, code in errors if f == "bad"} == EXPECTED, output
    assert not [e for e in errors if e[0] == "good"], output
    revealed = re.findall(r"^good\.py:\d+: note: Revealed type is \"(.*)\"$", output, re.M)
    assert len(revealed) == 2, output
    assert re.search(r"-> hermes_data\.[\w.]*\.SessionStore$", revealed[0]), revealed[0]
    assert re.search(r"-> hermes_data\.[\w.]*\.TelemetryStore$", revealed[1]), revealed[1]


def test_mypy_sees_the_real_store_classes_from_the_checkout(tmp_path):
    """Against the sources (MYPYPATH; errors inside hermes_data itself are not this test's)."""
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("MYPY")}
    env["MYPYPATH"] = str(REPO)
    _check(_run_mypy(tmp_path, "--follow-imports=silent", env=env))


def test_mypy_sees_the_real_store_classes_from_the_installed_wheel(installed_wheel):
    """Against the wheel installed in a venv outside the checkout: without ``py.typed`` mypy
    would refuse the package (import-untyped) and every store would be Any."""
    probe = installed_wheel.elsewhere / "typing-probe"
    probe.mkdir()
    output = _run_mypy(probe, "--python-executable", str(installed_wheel.python), env=installed_wheel.env)
    assert (installed_wheel.site / "hermes_data" / "py.typed").is_file()
    _check(output)


@pytest.mark.slow
def test_mypy_sees_the_real_store_classes_through_the_readme_editable_install(tmp_path):
    """A service in its own fresh venv that installs hermes-data the README's way
    (``pip install -e '.[test,postgres]'``) gets the real types, i.e. mypy finds hermes_data
    and its py.typed through the editable install. setuptools makes that install either a .pth
    path entry (mypy follows it) or, when pyproject.toml maps a package directory, an import
    hook (mypy cannot: "Cannot find implementation or library stub" / "missing library stubs
    or py.typed marker"). Needs the package index (it installs the dependencies)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=300)
    python = venv / "bin" / "python"
    # Nothing of this run's environment leads to the checkout: only the editable install does.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTHON", "MYPY", "VIRTUAL_ENV", "HERMES"))}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    service = tmp_path / "service"
    service.mkdir()
    install = subprocess.run([str(python), "-m", "pip", "install", "-q", "-e", f"{REPO}[test,postgres]"],
                             cwd=service, env=env, capture_output=True, text=True, timeout=1200)
    assert install.returncode == 0, install.stdout[-4000:] + install.stderr[-4000:]

    output = _run_mypy(service, "--python-executable", str(python), env=env, python=python)
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               env=env, check=True, capture_output=True, text=True).stdout.strip())
    editable = sorted(p.name for p in site.glob("__editable__*"))
    assert "import-not-found" not in output and "import-untyped" not in output, \
        f"mypy does not see hermes_data through the editable install ({editable}):\n{output}"
    _check(output)
    assert re.search(r'^bad\.py:6: error: Incompatible types in assignment \(expression has type "int", '
                     r'variable has type "str"\)', output, re.M), output
    # What makes it work: a path entry naming the checkout, no import hook.
    assert not [name for name in editable if name.endswith("_finder.py")], editable
    [pth] = site.glob("__editable__*hermes_data*.pth")
    assert Path(pth.read_text().strip()).resolve() == REPO, pth.read_text()


def test_the_package_and_its_migrations_type_check():
    """``mypy`` with the project's configuration (pyproject ``[tool.mypy]``) finds nothing."""
    run = subprocess.run([sys.executable, "-m", "mypy"], cwd=REPO, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "Success" in run.stdout
