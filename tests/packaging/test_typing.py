"""Type checkers see hermes_data's annotations: ``py.typed`` ships, and the lazily imported
``from hermes_data import SessionStore, TelemetryStore`` are the real classes to mypy (not Any).

mypy runs on two probe scripts (never executed): one uses the stores correctly and must pass,
the other makes deliberate type errors that must each be flagged.
"""

from __future__ import annotations

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


def _run_mypy(tmp_path: Path, *options: str, env: dict[str, str] | None = None) -> str:
    (tmp_path / "good.py").write_text(GOOD)
    (tmp_path / "bad.py").write_text(BAD)
    (tmp_path / "mypy.ini").write_text("[mypy]\n")  # the probe's own config, not the project's
    cmd = [sys.executable, "-m", "mypy", "--config-file", str(tmp_path / "mypy.ini"),
           "--cache-dir", str(tmp_path / ".mypy_cache"), "--show-error-codes", "--no-pretty",
           *options, "good.py", "bad.py"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert "Traceback" not in proc.stderr, proc.stderr
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


def test_the_package_and_its_migrations_type_check():
    """``mypy`` with the project's configuration (pyproject ``[tool.mypy]``) finds nothing."""
    run = subprocess.run([sys.executable, "-m", "mypy"], cwd=REPO, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "Success" in run.stdout
