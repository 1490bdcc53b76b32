"""How the project is laid out for setuptools: hermes_data/ is found by ``packages.find`` with no
``package-dir`` mapping besides the root (so the editable install is a .pth path entry mypy
follows), and setup.py's build step ships the top-level migrations/ as hermes_data.migrations."""

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


def test_package_dir_maps_only_the_root():
    """Any ``package-dir`` entry besides ``""`` (e.g. the former ``"hermes_data.migrations" =
    "migrations"``) turns the README's editable install into an import-hook finder that mypy
    cannot follow; the migrations reach the wheel through setup.py instead."""
    config = _setuptools()
    assert config["package-dir"] == {"": "."}, \
        "map migrations/ in setup.py's build_py, not in pyproject.toml (see the comment there)"
    assert config["packages"] == {"find": {"include": ["hermes_data", "hermes_data.*"]}}


def test_setup_py_ships_every_directory_of_the_top_level_migrations(monkeypatch):
    """setup.py's build step maps each directory of migrations/ that holds Python files (what
    the wheel test then finds inside the wheel)."""
    import runpy

    import setuptools

    monkeypatch.chdir(REPO)
    monkeypatch.setattr(setuptools, "setup", lambda **kwargs: None)
    mapping = runpy.run_path(str(REPO / "setup.py"))["migration_packages"]()
    expected = {"hermes_data.migrations": "migrations"}
    for directory in (REPO / "migrations").rglob("*"):
        if directory.is_dir() and "__pycache__" not in directory.parts and any(directory.glob("*.py")):
            relative = directory.relative_to(REPO)
            expected[".".join(("hermes_data", *relative.parts))] = relative.as_posix()
    assert mapping == expected
    assert {"hermes_data.migrations.telemetry.versions", "hermes_data.migrations.sessions"} <= set(mapping)


def test_migrations_live_in_the_top_level_directory():
    config = _setuptools()
    assert (REPO / "migrations" / "__init__.py").is_file()
    assert "*/script.py.mako" in config["package-data"]["hermes_data.migrations"]
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


def test_a_stale_package_directory_is_reported_not_used(tmp_path):
    """An old checkout keeps hermes_data/migrations/ with only __pycache__ inside; where the
    installed wheel's scripts would be, it would hide <repo>/migrations. Locating the scripts
    says so instead of handing Alembic an empty directory."""
    from hermes_data.migrate import runner as migrate
    from hermes_data.errors import ConfigurationError

    package = tmp_path / "hermes_data"
    (package / "migrations" / "telemetry" / "__pycache__").mkdir(parents=True)
    (tmp_path / "migrations" / "telemetry").mkdir(parents=True)
    (tmp_path / "migrations" / "telemetry" / "env.py").write_text("")
    with pytest.raises(ConfigurationError, match="stale hermes_data/migrations/"):
        migrate._migrations_dir(package)


def test_the_scripts_are_found_in_a_wheel_and_in_a_checkout(tmp_path):
    """Installed wheel: hermes_data/migrations (and no checkout beside it). Checkout or
    editable install: <repo>/migrations beside the hermes_data package."""
    from hermes_data.migrate import runner as migrate
    from hermes_data.errors import ConfigurationError

    wheel = tmp_path / "site-packages" / "hermes_data"
    (wheel / "migrations" / "telemetry").mkdir(parents=True)
    (wheel / "migrations" / "telemetry" / "env.py").write_text("")
    assert migrate._migrations_dir(wheel) == wheel / "migrations"

    checkout = tmp_path / "repo" / "hermes_data"
    checkout.mkdir(parents=True)
    with pytest.raises(ConfigurationError, match="no Alembic scripts"):
        migrate._migrations_dir(checkout)
    (checkout.parent / "migrations" / "telemetry").mkdir(parents=True)
    (checkout.parent / "migrations" / "telemetry" / "env.py").write_text("")
    assert migrate._migrations_dir(checkout) == checkout.parent / "migrations"
