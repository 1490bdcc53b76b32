"""The package list in pyproject.toml matches the tree (it is explicit because of the
package-dir mapping that ships the top-level migrations/ as hermes_data.migrations)."""

from __future__ import annotations

import sys

import pytest

from ..conftest import REPO

pytestmark = pytest.mark.journal_independent("packaging layout")

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    tomllib = pytest.importorskip("tomli")


def _setuptools() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]


def _packages_on_disk() -> set[str]:
    found = set()
    for init in (REPO / "hermes_data").rglob("__init__.py"):
        if "__pycache__" not in init.parts:
            found.add(".".join(init.parent.relative_to(REPO).parts))
    found.add("hermes_data.migrations")
    for directory in (REPO / "migrations").rglob("*"):
        if directory.is_dir() and "__pycache__" not in directory.parts and any(directory.glob("*.py")):
            found.add(".".join(("hermes_data", *directory.relative_to(REPO).parts)))
    return found


def test_every_package_under_hermes_data_is_listed_in_pyproject():
    listed = set(_setuptools()["packages"])
    on_disk = _packages_on_disk()
    assert not on_disk - listed, f"add to [tool.setuptools] packages in pyproject.toml: {sorted(on_disk - listed)}"
    assert not listed - on_disk, f"listed in pyproject.toml but not on disk: {sorted(listed - on_disk)}"


def test_migrations_are_mapped_from_the_top_level_directory():
    config = _setuptools()
    assert config["package-dir"] == {"hermes_data.migrations": "migrations"}
    assert (REPO / "migrations" / "__init__.py").is_file()
    assert "py.typed" in config["package-data"]["hermes_data"]
    assert (REPO / "hermes_data" / "py.typed").is_file()
    telemetry = sorted((REPO / "migrations" / "telemetry" / "versions").glob("*.py"))
    assert len(telemetry) == 18
    assert sorted((REPO / "migrations" / "sessions" / "versions").glob("*.py"))


def test_alembic_ini_points_at_the_top_level_migrations():
    ini = (REPO / "alembic.ini").read_text()
    assert "script_location = %(here)s/migrations/telemetry" in ini
    assert "script_location = %(here)s/migrations/sessions" in ini


def test_setuptools_floor_accepts_the_license_string():
    """PEP 639 ``license = "MIT"`` (a string) needs setuptools >= 77."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert isinstance(pyproject["project"]["license"], str)
    [req] = [r for r in pyproject["build-system"]["requires"] if r.startswith("setuptools")]
    floor = tuple(int(p) for p in req.split(">=")[1].split(",")[0].split("."))
    assert floor >= (77,), req


def test_a_stale_package_directory_is_reported_not_used(tmp_path, monkeypatch):
    """An old checkout keeps hermes_data/migrations/ with only __pycache__ inside; as a
    namespace package it would shadow <repo>/migrations. Locating the scripts says so."""
    import importlib.resources

    from hermes_data.migrate import runner as migrate
    from hermes_data.errors import ConfigurationError

    (tmp_path / "telemetry" / "__pycache__").mkdir(parents=True)
    monkeypatch.setattr(importlib.resources, "files", lambda package: tmp_path)
    with pytest.raises(ConfigurationError, match="stale hermes_data/migrations/"):
        migrate._migrations_dir()
