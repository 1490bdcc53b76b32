"""A fresh clone with nothing beside it runs its tests (the fixtures travel in the repo)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from .conftest import REPO


@pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(),
                    reason="needs git and a git checkout")
def test_a_clone_without_shared_collects_everything_and_adopts_a_fixture(tmp_path):
    clone = tmp_path / "lonely" / "hermes-data"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(REPO), str(clone)], check=True,
                   timeout=120)
    assert not (clone.parent / "shared").exists()
    env_cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    collected = subprocess.run([*env_cmd, "--collect-only"], cwd=clone, capture_output=True,
                               text=True, timeout=300)
    assert collected.returncode == 0, collected.stdout[-2000:] + collected.stderr[-2000:]
    count = int(collected.stdout.strip().splitlines()[-1].split()[0])
    assert count > 500, collected.stdout[-500:]
    run = subprocess.run([*env_cmd, "tests/migrations/test_telemetry_adoption.py", "-k", "v1_"],
                         cwd=clone, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert " passed" in run.stdout
