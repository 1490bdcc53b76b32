"""Ship the top-level migrations/ in the wheel as the package ``hermes_data.migrations``.

All the metadata is in pyproject.toml; this file only adds the build step that pyproject.toml
cannot express without a ``package-dir`` mapping. Such a mapping (``"hermes_data.migrations" =
"migrations"``) would do the same for the wheel, but it also makes setuptools' editable install
an import-hook finder instead of a .pth path entry, and mypy cannot follow the finder, so a
service installed with ``pip install -e`` would see hermes_data as untyped (see the comment on
``package-dir`` in pyproject.toml).

So the mapping is given to ``build_py`` alone, for regular builds (wheel, sdist) only. An
editable install leaves migrations/ where it is and hermes_data.migrate.runner reads it there.
"""

from __future__ import annotations

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SOURCE = "migrations"  # relative to the project directory, where setuptools runs this file
PACKAGE = "hermes_data.migrations"


def migration_packages() -> dict[str, str]:
    """``hermes_data.migrations[.sub]`` → its directory, for every directory of migrations/ that
    holds Python files (``versions/`` has no ``__init__.py``: Alembic loads it by path)."""
    root = Path(SOURCE)
    directories = [root, *(p for p in root.rglob("*") if p.is_dir())]
    return {
        ".".join((PACKAGE, *d.relative_to(root).parts)): d.as_posix()
        for d in sorted(directories)
        if "__pycache__" not in d.parts and any(d.glob("*.py"))
    }


class build_py_with_migrations(build_py):
    def finalize_options(self) -> None:
        super().finalize_options()
        if self.editable_mode:
            return
        extra = migration_packages()
        # New containers: the distribution's own package list and package_dir stay as
        # pyproject.toml says (the editable install decides its strategy from them).
        self.packages = [*(self.packages or ()), *extra]
        self.package_dir = {**self.package_dir, **extra}


setup(cmdclass={"build_py": build_py_with_migrations})
