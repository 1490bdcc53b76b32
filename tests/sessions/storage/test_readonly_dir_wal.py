"""A WAL store in a read-only directory is unwritable, not corrupt (issue 31).

SQLite cannot create ``-shm``/``-wal`` beside a WAL database in a directory it cannot write,
so every read fails with ``unable to open database file`` / ``attempt to write a readonly
database``; ``status``, ``doctor`` and a read-only ``SessionStore`` open used to call that
"corrupt" (or let the raw driver error out). Root ignores directory permission bits, so the
commands run in a real child process without ``CAP_DAC_OVERRIDE``/``CAP_DAC_READ_SEARCH``
(``setpriv``), or directly when the tests do not run as root.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hermes_data.sessions.store import SessionStore
from tests.conftest import REPO

_DROP = ["setpriv", "--inh-caps=-all",
         "--bounding-set=-dac_override,-dac_read_search,-fowner", "--"]


def _unprivileged(probe_dir: Path) -> list[str]:
    """The command prefix that runs a child which honours permission bits; skips the test
    with the reason when that cannot be arranged."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root and setpriv(1) is not available: cannot run a child that "
                    "honours directory permission bits")
    out = subprocess.run([*_DROP, "sh", "-c", f"touch {probe_dir}/probe"],
                         capture_output=True, text=True)
    if out.returncode == 0 or (probe_dir / "probe").exists():
        pytest.skip("setpriv could not drop CAP_DAC_OVERRIDE here (the child still writes a "
                    f"0555 directory): {out.stderr.strip()}")
    return _DROP


def _run(prefix: list[str], *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([*prefix, sys.executable, *args], capture_output=True, text=True,
                          timeout=120, env=env, cwd=str(REPO))


READ_ONLY_OPEN = textwrap.dedent("""
    import json, sys
    from hermes_data.sessions.store import SessionStore
    try:
        store = SessionStore(sys.argv[1], read_only=True)
    except Exception as exc:
        print(json.dumps({"type": type(exc).__name__, "path": getattr(exc, "path", None),
                          "permission": isinstance(exc, PermissionError),
                          "message": str(exc)}))
    else:
        store.close()
        print(json.dumps({"type": None}))
    """)


def test_wal_store_in_a_read_only_directory_is_reported_unwritable_not_corrupt(
        tmp_path, monkeypatch):
    monkeypatch.setenv("HERMES_DATA_JOURNAL_MODE", "wal")
    directory = tmp_path / "store"
    directory.mkdir()
    db = directory / "state.db"
    store = SessionStore(db)
    store.create_session("s1", source="cli")
    store.close()  # a clean close: the -wal is checkpointed and both sidecars removed
    header = db.read_bytes()[:100]
    assert header[18:20] == b"\x02\x02", "the store is not in WAL mode"
    assert not Path(f"{db}-shm").exists() and not Path(f"{db}-wal").exists()
    before = db.read_bytes()

    os.chmod(tmp_path, 0o755)
    os.chmod(directory, 0o555)
    try:
        prefix = _unprivileged(directory)

        status = _run(prefix, "-m", "hermes_data.cli", "status", "--store", "sessions",
                      "--url", str(db))
        text = status.stdout + status.stderr
        assert "corrupt" not in text.lower(), text
        assert "not writable" in text and f"directory {directory} " in text, text

        doctor = _run(prefix, "-m", "hermes_data.cli", "doctor", "--store", "sessions",
                      "--url", str(db))
        text = doctor.stdout + doctor.stderr
        assert "corrupt" not in text.lower(), text
        assert "not writable" in text and str(directory) in text, text

        opened = _run(prefix, "-c", READ_ONLY_OPEN, str(db))
        assert opened.returncode == 0, opened.stderr
        facts = json.loads(opened.stdout.strip().splitlines()[-1])
        assert facts["type"] == "StateDbPermissionError", facts
        assert facts["permission"] and facts["path"] == str(directory), facts
        assert "corrupt" not in facts["message"].lower(), facts
    finally:
        os.chmod(directory, 0o700)
    assert db.read_bytes() == before  # nothing was changed
    with SessionStore(db, read_only=True) as again:  # writable directory: reads as before
        assert again.get_session("s1") is not None
