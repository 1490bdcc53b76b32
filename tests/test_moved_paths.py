"""Old deep module paths keep importing after the concern-package move (hermes_data/moved.py)."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from hermes_data.moved import MOVED

pytestmark = pytest.mark.journal_independent("import machinery")

PACKAGE = Path(__file__).resolve().parents[1] / "hermes_data"


def _file_of(dotted: str) -> Path:
    base = PACKAGE.parent / dotted.replace(".", "/")
    return base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"


def test_every_new_path_exists_and_no_old_path_does():
    for old, new in MOVED.items():
        assert _file_of(f"hermes_data.{new}").is_file(), new
        assert not _file_of(f"hermes_data.{old}").is_file(), f"{old} exists again beside its alias"


def test_an_old_path_is_the_new_module_with_a_warning():
    """In a fresh interpreter: the old name yields the very module object of the new one (so a
    monkeypatch through either patches both), and the warning names the new path."""
    code = (
        "import warnings, importlib\n"
        "warnings.simplefilter('error')\n"
        "try:\n"
        "    import hermes_data.sessions.guards\n"
        "except DeprecationWarning as w:\n"
        "    print('warned:', w)\n"
        "warnings.simplefilter('ignore')\n"
        "old = importlib.import_module('hermes_data.sessions.guards')\n"
        "new = importlib.import_module('hermes_data.sessions.storage.handle_guards')\n"
        "from hermes_data.sessions.render import render_session_for_save\n"
        "print(old is new, render_session_for_save.__module__)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout.splitlines()
    assert out[0] == ("warned: hermes_data.sessions.guards moved to "
                      "hermes_data.sessions.storage.handle_guards; import it from there")
    assert out[1] == "True hermes_data.sessions.ui.portability.render"


def test_an_unknown_name_is_still_an_import_error():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("hermes_data.sessions.no_such_module")


def test_documented_package_imports_are_unchanged():
    from hermes_data import SessionStore, TelemetryStore, upgrade
    from hermes_data.cli import main
    from hermes_data.copy import copy_store
    from hermes_data.migrate import check, status

    assert callable(main) and callable(copy_store) and callable(upgrade)
    assert SessionStore.__module__ == "hermes_data.sessions.store"
    assert TelemetryStore.__module__ == "hermes_data.telemetry.store"
    assert check.__module__ == status.__module__ == "hermes_data.migrate.runner"
