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


def lint_mini_tree(tmp_path: Path, files: dict[str, str],
                   contracts: str) -> subprocess.CompletedProcess[str]:
    """Lint a miniature package ``mini`` (``files``: path under it -> source) against the
    import-linter ``contracts`` (TOML, root package ``mini``)."""
    pkg = tmp_path / "mini"
    for rel, body in files.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(body)
    config = tmp_path / "contracts.toml"
    config.write_text('[tool.importlinter]\nroot_package = "mini"\n'
                      + textwrap.dedent(contracts))
    return lint(config, tmp_path, tmp_path)


def test_the_contracts_hold():
    done = lint(REPO / "pyproject.toml", REPO, REPO)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "Contracts: 5 kept, 0 broken." in done.stdout, done.stdout[-2000:]


def test_a_broken_boundary_fails(tmp_path):
    """The same contract shapes on a miniature tree, where a concern imports the facade and the
    generic layer imports a store: both are reported and the run fails."""
    done = lint_mini_tree(tmp_path, {
        "__init__.py": "",
        "engine.py": "from mini.sessions import store\n",          # generic -> store package
        "sessions/__init__.py": "",
        "sessions/store.py": "from mini.sessions.core import lifecycle\n",
        "sessions/core/__init__.py": "",
        "sessions/core/lifecycle.py": "from mini.sessions import store\n",  # concern -> facade
    }, """
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
    """)
    assert done.returncode == 1
    assert "Contracts: 0 kept, 2 broken." in done.stdout, done.stdout
    assert "mini.sessions.core.lifecycle -> mini.sessions.store" in done.stdout


def test_the_compat_contract_lists_every_other_top_level_module():
    """The compat layer is the top layer: every top-level module of hermes_data but compat is
    a source of its contract (a new module cannot slip past it), and the root is checked on
    its own (its descendants include compat)."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        tomllib = pytest.importorskip("tomli")
    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"][
        "contracts"]
    by_name = {c["name"]: c for c in contracts}
    layer = by_name["Nothing in hermes_data imports the compat layer"]
    package = REPO / "hermes_data"
    top = {f"hermes_data.{p.stem}" for p in package.glob("*.py") if p.stem != "__init__"} | {
        f"hermes_data.{p.name}" for p in package.iterdir() if (p / "__init__.py").is_file()}
    assert set(layer["source_modules"]) == top - {"hermes_data.compat"}
    assert layer["forbidden_modules"] == ["hermes_data.compat"]
    root = by_name["The package root does not import the compat layer"]
    assert (root["source_modules"], root["as_packages"]) == (["hermes_data"], False)


def test_an_import_of_the_compat_layer_fails(tmp_path):
    """The compat contracts' shapes on a miniature tree where a store package and the root
    import a compat module: both are reported."""
    done = lint_mini_tree(tmp_path, {
        "__init__.py": "from mini.compat import session_db\n",
        "compat/__init__.py": "",
        "compat/session_db.py": "",
        "sessions/__init__.py": "from mini.compat.session_db import x\n",
    }, """
        [[tool.importlinter.contracts]]
        name = "Nothing in mini imports the compat layer"
        type = "forbidden"
        source_modules = ["mini.sessions"]
        forbidden_modules = ["mini.compat"]

        [[tool.importlinter.contracts]]
        name = "The package root does not import the compat layer"
        type = "forbidden"
        source_modules = ["mini"]
        forbidden_modules = ["mini.compat", "mini.compat.**"]
        as_packages = false
    """)
    assert done.returncode == 1
    assert "Contracts: 0 kept, 2 broken." in done.stdout, done.stdout
    assert "mini.sessions -> mini.compat.session_db" in done.stdout
    assert "mini -> mini.compat.session_db" in done.stdout
