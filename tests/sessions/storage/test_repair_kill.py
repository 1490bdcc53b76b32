"""Crash safety of the repair (storage spec §3.3; acceptance behaviour 6 and the issue's
"SIGKILL at random points never leaves a worse file than before").

Each trial forks a real process (``multiprocessing`` with ``fork``: the interpreter is already
loaded, so a trial costs milliseconds, not an import) that repairs a damaged copy of the shared
legacy ``state.db`` and dies — by ``os._exit`` at a named phase, or by SIGKILL from this process
after a random delay. Afterwards the file must hold either the damaged image's content or the
fully repaired one (compared logically: the schema rows and every table's rows, read from a
copy with its ``-wal``), every published bundle must be the damaged image byte for byte, and
the next run must finish the repair and remove the scratch and staging debris. Every third
random trial damages the copy beyond repair (a truncated file): it must stay byte-identical.

The default suite runs :data:`DEFAULT_TRIALS` random kills; the issue's ≥ 50 trials run with
``HERMES_DATA_REPAIR_KILL_TRIALS=50`` (or more) in the environment.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path

import pytest

from hermes_data.sessions.storage.repair import procedure as repair
from hermes_data.sessions.storage.repair import backup as rb

from tests.sessions.storage.repair_support import (duplicate_schema_row, file_digest, legacy_copy, table_digests,
                             truncate)

pytestmark = pytest.mark.journal_independent("repairs copied legacy files in both journal modes "
                                             "itself; the store's policy plays no part")

DEFAULT_TRIALS = 12
TRIALS = max(DEFAULT_TRIALS, int(os.environ.get("HERMES_DATA_REPAIR_KILL_TRIALS") or 0))
_fork = multiprocessing.get_context("fork")


def _schema_rows(path: Path) -> list[tuple] | None:
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "c.db"
        shutil.copyfile(path, copy)
        if Path(f"{path}-wal").exists():
            shutil.copyfile(f"{path}-wal", f"{copy}-wal")
        con = sqlite3.connect(copy)
        try:
            con.execute("PRAGMA writable_schema = ON")
            return sorted(con.execute("SELECT type, name, tbl_name, sql FROM sqlite_master"))
        except sqlite3.DatabaseError:
            return None
        finally:
            con.close()


def _state(path: Path) -> tuple:
    return _schema_rows(path), table_digests(path)


def _damaged(directory: Path, mode: str) -> Path:
    path = legacy_copy(directory)
    if mode == "truncated":  # not repairable: every run must refuse and change nothing
        truncate(path)
        return path
    if mode == "delete":
        con = sqlite3.connect(path, isolation_level=None)
        con.execute("PRAGMA journal_mode = delete")
        con.close()
    duplicate_schema_row(path)
    return path


@pytest.fixture(scope="module")
def references(tmp_path_factory) -> dict:
    """Per journal mode: the damaged image's digest and state, the repaired state, and how
    long one repair takes here."""
    out = {}
    for mode in ("wal", "delete"):
        d = tmp_path_factory.mktemp(f"ref-{mode}")
        path = _damaged(d, mode)
        damaged = _state(path)
        digest = file_digest(path)
        started = time.monotonic()
        report = repair.repair_state_db_schema(path)
        took = time.monotonic() - started
        assert report.repaired, report.error
        out[mode] = {"digest": digest, "damaged": damaged, "repaired": _state(path),
                     "seconds": took}
    path = _damaged(tmp_path_factory.mktemp("ref-truncated"), "truncated")
    digest = file_digest(path)
    started = time.monotonic()
    assert repair.repair_state_db_schema(path).error
    out["truncated"] = {"digest": digest, "seconds": time.monotonic() - started}
    return out


def _child(path: str, phase: str | None, started) -> None:
    if phase is not None:
        def hook(at: str) -> None:
            if at == phase:
                os._exit(17)
        repair.checkpoint_hook = rb.checkpoint_hook = hook
        repair.PROMOTE_PAGES = 16  # several promotion steps, one destination transaction
    started.set()
    repair.repair_state_db_schema(path)
    os._exit(0)


def _check_refused_after_crash(path: Path, ref: dict) -> str:
    assert file_digest(path) == ref["digest"], "the crash changed an unrepairable file"
    for bundle in rb.bundles(path):
        assert file_digest(bundle) == ref["digest"]
    report = repair.repair_state_db_schema(path)
    assert report.error and file_digest(path) == ref["digest"]
    assert not rb.scratch_path(path).exists()
    assert not [n for n in os.listdir(path.parent) if ".backup-staging-" in n]
    return "unchanged"


def _check_after_crash(path: Path, ref: dict) -> str:
    if "repaired" not in ref:
        return _check_refused_after_crash(path, ref)
    state = _state(path)
    assert state in (ref["damaged"], ref["repaired"]), "the crash left a worse file"
    for bundle in rb.bundles(path):  # staging debris never counts as a bundle
        assert file_digest(bundle) == ref["digest"]
    report = repair.repair_state_db_schema(path)  # the next run finishes and cleans up
    assert report.ok, report.error
    assert _state(path) == ref["repaired"]
    assert not rb.scratch_path(path).exists()
    assert not [n for n in os.listdir(path.parent) if ".backup-staging-" in n]
    return "repaired" if state == ref["repaired"] else "unchanged"


PHASES = ["copy", "copy:staged", "snapshot", "strategy:rebuild_fts", "strategy:reindex_btree",
          "strategy:dedup_schema", "promote", "promote:step", "verify"]


@pytest.mark.parametrize("mode", ["wal", "delete"])
@pytest.mark.parametrize("phase", PHASES)
def test_exit_at_each_phase_leaves_the_file_unchanged_or_repaired(tmp_path, references, mode,
                                                                  phase):
    path = _damaged(tmp_path, mode)
    started = _fork.Event()
    proc = _fork.Process(target=_child, args=(str(path), phase, started))
    proc.start()
    proc.join(60)
    assert proc.exitcode == 17, f"the child never reached {phase}"
    if phase == "copy:staged":  # staged copies exist, yet no bundle does
        assert [n for n in os.listdir(tmp_path) if ".backup-staging-" in n]
        assert rb.bundles(path) == []
    outcome = _check_after_crash(path, references[mode])
    # Nothing is promoted before the promotion commits; after it, the repair is durable.
    assert outcome == ("repaired" if phase == "verify" else "unchanged")


def test_sigkill_at_random_points(tmp_path, references):
    rng = random.Random(int(os.environ.get("HERMES_DATA_REPAIR_KILL_SEED") or 2112))
    outcomes: dict[str, int] = {"unchanged": 0, "repaired": 0}
    for trial in range(TRIALS):
        mode = ("wal", "delete", "truncated")[trial % 3]
        directory = tmp_path / f"t{trial}"
        directory.mkdir()
        path = _damaged(directory, mode)
        started = _fork.Event()
        proc = _fork.Process(target=_child, args=(str(path), None, started))
        proc.start()
        assert started.wait(30)
        time.sleep(rng.uniform(0, 1.3 * references[mode]["seconds"]))
        proc.kill()
        proc.join(30)
        outcomes[_check_after_crash(path, references[mode])] += 1
    print(f"{TRIALS} SIGKILL trials: {outcomes}")
    assert sum(outcomes.values()) == TRIALS
