"""The package boundaries of docs/architecture.md "Layers", as import-linter contracts declared
in pyproject.toml ([tool.importlinter]) and checked here as CI checks them (``lint-imports``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.journal_independent("static import contracts")

REPO = Path(__file__).resolve().parents[1]
LINT = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")


def lint(config: Path, cwd: Path, path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(path)}
    return subprocess.run([LINT, "--no-cache", "--no-logo", str(config)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_the_contracts_hold():
    done = lint(REPO / "pyproject.toml", REPO, REPO)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "Contracts: 3 kept, 0 broken." in done.stdout, done.stdout[-2000:]


def test_a_broken_boundary_fails(tmp_path):
    """The same contract shapes on a miniature tree, where a concern imports the facade and the
    generic layer imports a store: both are reported and the run fails."""
    pkg = tmp_path / "mini"
    for rel, body in {
        "__init__.py": "",
        "engine.py": "from mini.sessions import store\n",          # generic -> store package
        "sessions/__init__.py": "",
        "sessions/store.py": "from mini.sessions.core import lifecycle\n",
        "sessions/core/__init__.py": "",
        "sessions/core/lifecycle.py": "from mini.sessions import store\n",  # concern -> facade
    }.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(body)
    config = tmp_path / "contracts.toml"
    config.write_text(textwrap.dedent("""
        [tool.importlinter]
        root_package = "mini"

        [[tool.importlinter.contracts]]
        name = "The generic layer imports no store package"
        type = "forbidden"
        source_modules = ["mini.engine"]
        forbidden_modules = ["mini.sessions"]

        [[tool.importlinter.contracts]]
        name = "Concern packages never import the session store facade"
        type = "forbidden"
        source_modules = ["mini.sessions.core"]
        forbidden_modules = ["mini.sessions.store"]
    """))
    done = lint(config, tmp_path, tmp_path)
    assert done.returncode == 1
    assert "Contracts: 0 kept, 2 broken." in done.stdout, done.stdout
    assert "mini.sessions.core.lifecycle -> mini.sessions.store" in done.stdout
