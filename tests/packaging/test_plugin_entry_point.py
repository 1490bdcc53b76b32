"""The built wheel registers the pytest plugin (docs/testing.md): an installed hermes-data
gives a service's pytest run its fixtures with no ``-p``."""

from __future__ import annotations

import subprocess

import pytest


@pytest.mark.journal_independent("packaging: what the built wheel declares")
def test_the_installed_wheel_declares_the_pytest11_entry_point(installed_wheel):
    done = subprocess.run(
        [str(installed_wheel.python), "-c",
         "import importlib.metadata as m; d = m.distribution('hermes-data'); "
         "print(sorted((e.group, e.name, e.value) for e in d.entry_points "
         "if e.group == 'pytest11'))"],
        cwd=installed_wheel.elsewhere, env=installed_wheel.env, capture_output=True, text=True,
        timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[('pytest11', 'hermes_data', 'hermes_data.testing')]"
