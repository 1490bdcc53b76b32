"""The installed artefact works outside the checkout, and the README tells the truth."""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
import zipfile

from hermes_data.cli import build_parser

from ..conftest import REPO


def test_wheel_carries_migrations_and_upgrades_outside_the_checkout(tmp_path):
    # Built the way a release is built: pip's isolated build environment.
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "dist"), str(REPO)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=300)
    [wheel] = (tmp_path / "dist").glob("hermes_data-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "hermes_data/migrations/telemetry/env.py" in names
    assert "hermes_data/migrations/telemetry/versions/0018_v18_turn_identity.py" in names
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    db = tmp_path / "elsewhere" / "telemetry.db"
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import hermes_data, hermes_data.cli as c; "
        "assert hermes_data.__file__.startswith(sys.argv[1]), hermes_data.__file__; "
        "sys.exit(c.main(['upgrade', '--store', 'telemetry', '--url', sys.argv[2]]))"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(site), str(db)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    con = sqlite3.connect(db)
    assert con.execute("SELECT version_num FROM alembic_version").fetchone() == ("v18",)
    con.close()


def test_every_cli_command_is_documented_in_readme():
    readme = (REPO / "README.md").read_text()
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name in sub.choices:
        assert re.search(rf"hermes-data {name}\b", readme), f"README does not document `hermes-data {name}`"


def test_readme_test_command_is_what_ci_runs():
    readme = (REPO / "README.md").read_text()
    ci = (REPO / ".ci" / "run").read_text()
    assert "python -m pytest -q" in readme and "python -m pytest -q" in ci
    assert "pip install -e '.[test,postgres]'" in readme and "-e '.[test,postgres]'" in ci
    assert "hermes-data upgrade && hermes-data status" in readme and \
        "hermes-data upgrade && hermes-data status" in ci


def test_readme_python_examples_run(tmp_path, monkeypatch):
    """Every ```python block of the README runs as written (against stores under a scratch
    HOME, created first with the documented upgrade)."""
    from hermes_data import migrate

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("HERMES_HOME", raising=False)
    migrate.upgrade("telemetry", tmp_path / ".hermes" / "telemetry" / "telemetry.db")
    migrate.upgrade("sessions", tmp_path / ".hermes" / "state.db")
    readme = (REPO / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, re.S)
    assert len(blocks) >= 2
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {"print": lambda *a, **k: None})
