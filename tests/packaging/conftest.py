"""The wheel, built once per run the way a release is built and installed into a throwaway
venv outside the checkout (shared by the wheel and typing tests)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from ..conftest import REPO


@dataclass(frozen=True)
class InstalledWheel:
    wheel: Path
    venv: Path
    python: Path
    site: Path
    #: A directory outside the checkout to run from, with a scrubbed environment.
    elsewhere: Path
    env: dict[str, str]


def _site_packages_of(module) -> Path:
    """The directory a dependency was imported from (its site-packages)."""
    path = Path(module.__file__).resolve()
    return path.parent.parent if path.name == "__init__.py" else path.parent


@pytest.fixture(scope="session")
def installed_wheel(tmp_path_factory) -> InstalledWheel:
    root = tmp_path_factory.mktemp("wheel")
    # Built the way a release is built: pip's isolated build environment.
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(root / "dist"), str(REPO)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=300)
    [wheel] = (root / "dist").glob("hermes_data-*.whl")

    # pip installs the wheel itself; the dependencies (already installed for this test run)
    # are borrowed through a .pth file.
    import alembic
    import mako
    import markupsafe
    import psutil
    import sqlalchemy
    import typing_extensions

    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    elsewhere = root / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HERMES", "PYTHON", "MYPY"))}
    env["HOME"] = str(elsewhere)
    # Installed with that environment too: with PYTHONPATH at the checkout, pip would take the
    # hermes_data.egg-info the in-tree build leaves there for an installed hermes-data and
    # skip the wheel ("Requirement already satisfied").
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                    "--no-index", str(wheel)], check=True, capture_output=True, env=env, timeout=300)
    site = Path(subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True).stdout.strip())
    deps = {str(_site_packages_of(m)) for m in (sqlalchemy, alembic, mako, markupsafe, psutil,
                                                     typing_extensions)}
    (site / "zz_borrowed_deps.pth").write_text("\n".join(sorted(deps)) + "\n")
    return InstalledWheel(wheel, venv, python, site, elsewhere, env)
