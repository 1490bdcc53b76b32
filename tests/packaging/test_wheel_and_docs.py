"""The installed artefact works outside the checkout, and the README tells the truth."""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from hermes_data.migrate import runner as migrate
from hermes_data.cli.app import build_parser

from ..conftest import REPO


@pytest.mark.journal_independent("packaging: what the built wheel carries")
def test_wheel_carries_migrations_and_upgrades_outside_the_checkout(installed_wheel):
    """The wheel ships the top-level migrations/ as hermes_data.migrations plus py.typed;
    installed into a throwaway venv outside the checkout, it upgrades both stores from the
    scripts inside that venv."""
    names = set(zipfile.ZipFile(installed_wheel.wheel).namelist())
    assert "hermes_data/py.typed" in names
    assert "hermes_data/migrations/__init__.py" in names
    # Every file of the top-level migrations/ and every module of hermes_data/ is shipped.
    for root, prefix in ((REPO / "migrations", "hermes_data/migrations"), (REPO / "hermes_data", "hermes_data")):
        for path in root.rglob("*"):
            if path.suffix in (".py", ".mako") and "__pycache__" not in path.parts:
                assert f"{prefix}/{path.relative_to(root).as_posix()}" in names, path
    revisions = sorted(n for n in names if n.startswith("hermes_data/migrations/telemetry/versions/"))
    assert len(revisions) == 18 and revisions[-1].endswith("0018_v18_turn_identity.py")
    assert "hermes_data/migrations/sessions/env.py" in names

    python, site, elsewhere, env = (installed_wheel.python, installed_wheel.site,
                                    installed_wheel.elsewhere, installed_wheel.env)
    probe = subprocess.run(
        [str(python), "-c", "import hermes_data, importlib.resources as r; "
         "from hermes_data.migrate import runner as migrate; print(hermes_data.__file__); print(r.files('hermes_data.migrations')); print(migrate.MIGRATIONS_DIR)"],
        cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120)
    assert probe.returncode == 0, probe.stderr
    for line in probe.stdout.splitlines():
        assert Path(line).resolve().is_relative_to(site.resolve()), line
        assert not Path(line).resolve().is_relative_to(REPO), line

    heads = {"telemetry": migrate.head_revision("telemetry"), "sessions": migrate.head_revision("sessions")}
    for store, filename in (("telemetry", "telemetry.db"), ("sessions", "state.db")):
        db = elsewhere / filename
        cli = installed_wheel.venv / "bin" / "hermes-data"
        proc = subprocess.run([str(cli), "upgrade", "--store", store, "--url", str(db)],
                              cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        con = sqlite3.connect(db)
        assert con.execute("SELECT version_num FROM alembic_version").fetchone() == (heads[store],)
        con.close()


def test_editable_install_finds_the_top_level_migrations(tmp_path):
    """A checkout (editable install) reads the scripts from <repo>/migrations, also when run
    from outside the repository (there is no hermes_data.migrations package in a checkout:
    setup.py puts one into the wheel only)."""
    code = ("import hermes_data; from hermes_data.migrate import runner as migrate; "
            "print(hermes_data.__file__); print(migrate.MIGRATIONS_DIR)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    package, migrations_dir = proc.stdout.splitlines()
    if not Path(package).resolve().is_relative_to(REPO):
        pytest.skip(f"hermes_data is not installed from this checkout (imported from {package})")
    assert not (REPO / "hermes_data" / "migrations").exists(), \
        "a stale hermes_data/migrations/ (e.g. left-over __pycache__) shadows <repo>/migrations: remove it"
    assert Path(migrations_dir).resolve() == REPO / "migrations"
    assert (REPO / "migrations" / "telemetry" / "env.py").is_file()


def test_every_cli_command_is_documented_in_readme():
    readme = (REPO / "README.md").read_text()
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name in sub.choices:
        assert re.search(rf"hermes-data {name}\b", readme), f"README does not document `hermes-data {name}`"


def _cli_synopsis() -> dict[str, str]:
    """``hermes-data`` command → its synopsis text in docs/cli.md (continuation lines included)."""
    page = (REPO / "docs" / "cli.md").read_text()
    start = page.index("## Synopsis")
    section = page[start:page.index("\n## ", start + 1)]
    block = re.search(r"```\n(.*?)```", section, re.S).group(1)
    out: dict[str, str] = {}
    current = None
    for line in block.splitlines():
        m = re.match(r"hermes-data ([\w-]+)", line)
        if m:
            current = m.group(1)
            out[current] = out.get(current, "") + line
        elif line.startswith(" ") and current:
            out[current] += " " + line.strip()
    return out


def test_every_cli_option_is_in_the_docs_synopsis_and_has_help():
    """The synopsis line of each command in docs/cli.md names every option of that command (and
    every choice), and ``--help`` explains each one — an option without help text is
    undocumented."""
    synopsis = _cli_synopsis()
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name, command in sub.choices.items():
        text = synopsis.get(name)
        assert text, f"docs/cli.md synopsis lacks `hermes-data {name}`"
        for action in command._actions:
            if action.dest in ("help", "verbose"):
                continue
            where = f"`hermes-data {name} {(action.option_strings or [action.dest])[0]}`"
            assert action.help, f"{where} has no help text"
            if action.option_strings:
                assert any(re.search(rf"{re.escape(o)}\b", text) for o in action.option_strings), \
                    f"docs/cli.md synopsis lacks {where}"
                for choice in action.choices or ():
                    assert choice in text, f"docs/cli.md synopsis lacks {where} {choice}"


def test_top_level_help_is_plain_text():
    """``hermes-data --help`` shows no reStructuredText markup (double back-quotes, roles)."""
    text = build_parser().format_help()
    assert "``" not in text and ":mod:" not in text and ":func:" not in text


def test_readme_test_command_is_what_ci_runs():
    readme = (REPO / "README.md").read_text()
    ci = (REPO / ".ci" / "run").read_text()
    assert "python -m pytest -q" in readme and "python -m pytest -q" in ci
    assert "pip install -e '.[test,postgres]'" in readme and "-e '.[test,postgres]'" in ci
    assert "hermes-data upgrade && hermes-data status" in readme and \
        "hermes-data upgrade && hermes-data status" in ci
    # Migration CI (issue 32): the stores the set-up just created are checked against their
    # head, and the README says so.
    after = ci.split("hermes-data upgrade && hermes-data status", 1)[1]
    assert re.search(r"^hermes-data check$", after, re.M)
    assert "then `hermes-data check`" in readme


#: Guide pages whose ```python blocks run as written, like the README's (the examples moved there
#: from the README).
DOC_EXAMPLE_PAGES = ("docs/configuration.md", "docs/telemetry-api.md", "docs/sessions-guide.md",
                     "docs/compat.md")


def test_readme_python_examples_run(tmp_path, monkeypatch):
    """Every ```python block of the README and of the guide pages in DOC_EXAMPLE_PAGES runs as
    written — and again, as an operator trying them twice would — against the stores at the
    configured default location: with HERMES_HOME at a scratch directory (and HOME and the working directory
    elsewhere), after the documented `hermes-data upgrade`, nothing is created outside HERMES_HOME."""
    home, user_home, cwd = tmp_path / "hermes-home", tmp_path / "home", tmp_path / "cwd"
    for d in (home, user_home, cwd):
        d.mkdir()
    monkeypatch.setenv("HERMES_HOME", str(home))
    monkeypatch.setenv("HOME", str(user_home))
    monkeypatch.chdir(cwd)
    readme = (REPO / "README.md").read_text()
    blocks = [("README.md", b) for b in re.findall(r"```python\n(.*?)```", readme, re.S)]
    assert len(blocks) >= 3
    for page in DOC_EXAMPLE_PAGES:
        found = re.findall(r"```python\n(.*?)```", (REPO / page).read_text(), re.S)
        assert found, f"{page} has no Python example"
        blocks += [(page, b) for b in found]
    assert "~/.hermes" not in "".join(b for _, b in blocks), "an example hard-codes the default location"
    upgrade = subprocess.run([sys.executable, "-m", "hermes_data.cli", "upgrade"], cwd=cwd,
                             capture_output=True, text=True, timeout=300)
    assert upgrade.returncode == 0, upgrade.stderr
    printed: list[str] = []
    for _ in range(2):  # an operator runs an example again: it must not raise (issue 31)
        for source, block in blocks:
            exec(compile(block, source, "exec"),
                 {"print": lambda *a, **k: printed.append(" ".join(map(str, a)))})
    assert any(str(home / "state.db") in line for line in printed)
    assert list(user_home.iterdir()) == [] and list(cwd.iterdir()) == []
    created = {p.relative_to(home).as_posix() for p in home.rglob("*") if p.is_file()}
    assert {"state.db", "telemetry/telemetry.db"} <= created
    from hermes_data.sessions.store import SessionStore
    from hermes_data.telemetry import TelemetryStore, get_run

    with SessionStore(home / "state.db") as store:  # the examples wrote to the default stores
        assert store.get_session("abc") is not None
    with TelemetryStore(home / "telemetry" / "telemetry.db") as store:
        assert get_run(store, "cron_nightly_20260720_120000") is not None
