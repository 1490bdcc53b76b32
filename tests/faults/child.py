"""The armed side of the fault matrix: ``python -m tests.faults.child SCENARIO FAULT DIR
POSITIONS``, started by :func:`tests.faults.matrix.run` with libfiu preloaded.

It builds the scenario's pristine files, runs the operation once unarmed to count its write
positions (N, and the imports done), then for each position k on a fresh copy: opens the
store, arms the injector to fail the k-th position with FAULT (``EIO`` / ``ENOSPC``), runs
the operation, disarms, and checks — faults off — what a user would: the file passes
``PRAGMA integrity_check``, the store opens, what was acknowledged before is intact, the
operation is all or nothing, and it succeeds when run again. One JSON line per position on
stdout (the parent judges them, :func:`tests.faults.matrix.problems`).
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import sys
import traceback
from pathlib import Path
from typing import Any

from tests.faults.fiu import ERRNOS, Injector
from tests.faults.base import CommandFailed
from tests.faults.scenarios import SCENARIOS, Scenario

#: What a driver says when nothing of ours translated it: on a command's error line, a raw error.
RAW_MARKERS = ("Traceback", "sqlite3.", "OperationalError", "DatabaseError", "[SQL:",
               "disk I/O error", "database or disk is full", "readonly database",
               "unable to open database file", "no such savepoint", "no transaction is active")
#: Our wording of a storage failure (errors.StoreIOError), which quotes the driver's text.
TYPED_IO = ("failed: an I/O error on the storage", "failed: the disk is full")


def positions(spec: str, total: int) -> list[int]:
    """``all`` → 1…N; ``sample:S`` → S positions spread over 1…N (first and last included);
    ``k1,k2,…`` → those."""
    if spec == "all":
        return list(range(1, total + 1))
    if spec.startswith("sample:"):
        want = max(1, int(spec.split(":", 1)[1]))
        if total <= want:
            return list(range(1, total + 1))
        step = (total - 1) / (want - 1) if want > 1 else 0
        return sorted({1 + round(i * step) for i in range(want)})
    return [int(k) for k in spec.split(",") if k]


def integrity(db: Path) -> str:
    """``PRAGMA integrity_check``'s answer, joined (a writable open: a hot journal is rolled
    back first, as any writer would)."""
    try:
        con = sqlite3.connect(db)
        try:
            return "; ".join(str(r[0]) for r in con.execute("PRAGMA integrity_check"))
        finally:
            con.close()
    except sqlite3.Error as exc:
        return f"unreadable: {exc}"


def _run_once(scenario: Scenario, directory: Path, injector: Injector | None = None,
              k: int = 0, err: int = 0) -> BaseException | None:
    handle = scenario.open(directory) if scenario.open is not None else None
    try:
        if injector is not None:
            injector.arm(k, err)
        try:
            scenario.run(handle, directory)
        except BaseException as exc:  # noqa: BLE001 - the outcome under test
            return exc
        finally:
            if injector is not None:
                injector.disarm()
        return None
    finally:
        if handle is not None:
            scenario.close(handle)


def describe(exc: BaseException | None, db: Path) -> dict[str, Any]:
    """The caller's view of an outcome: none, or the error's type, message and whether it is
    one of ours naming the file."""
    if exc is None:
        return {"outcome": "ok"}
    if isinstance(exc, CommandFailed):
        return describe_command(exc, db)
    from hermes_data.errors import HermesDataError

    typed = isinstance(exc, HermesDataError)
    return {"outcome": "typed" if typed else "raw",
            "error": f"{type(exc).__module__}.{type(exc).__qualname__}",
            "message": str(exc)[:500], "names_file": db.name in str(exc),
            "traceback": "" if typed else "".join(traceback.format_exception(exc))[-2000:]}


def describe_command(exc: CommandFailed, db: Path) -> dict[str, Any]:
    """A failed command as its user saw it: typed when stderr holds exactly one
    ``hermes-data: error:`` line, no traceback and no untranslated driver message."""
    lines = [ln for ln in exc.stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("hermes-data: error:")]
    message = errors[-1] if errors else (lines[-1] if lines else exc.stdout.strip()[-500:])
    raw = ("Traceback" in exc.stderr or len(errors) > 1
           or (not any(t in message for t in TYPED_IO)
               and any(m in message for m in RAW_MARKERS)))
    return {"outcome": "raw" if raw else "typed", "error": f"hermes-data rc={exc.rc}",
            "message": message[:500],
            "names_file": db.name in message or db.name in exc.stdout,
            "traceback": exc.stderr[-2000:] if raw else ""}


def main(argv: list[str]) -> int:
    name, fault, workdir, spec = argv
    scenario, err = SCENARIOS[name], ERRNOS[fault]
    root = Path(workdir)
    pristine = root / "pristine"
    pristine.mkdir(parents=True)
    scenario.prepare(pristine)
    injector = Injector()
    # A warm-up run first (its imports write bytecode, its caches fill): only what every run
    # of the operation writes is counted as its positions.
    warm = root / "warm"
    shutil.copytree(pristine, warm)
    _run_once(scenario, warm)
    shutil.rmtree(warm, ignore_errors=True)
    measure = root / "measure"
    shutil.copytree(pristine, measure)
    before = scenario.observe(measure)
    exc = _run_once(scenario, measure, injector, 0, err)
    total = injector.calls
    print(json.dumps({"measure": True, "positions": total, **describe(exc, measure / scenario.db),
                      "units": scenario.observe(measure)[1] - before[1]}), flush=True)
    if exc is not None:
        return 1
    shutil.rmtree(measure)
    for k in positions(spec, total):
        copy = root / f"k{k}"
        shutil.copytree(pristine, copy)
        prior, units = scenario.observe(copy)
        db = copy / scenario.db
        exc = _run_once(scenario, copy, injector, k, err)
        record: dict[str, Any] = {"k": k, "fired": injector.fired, **describe(exc, db)}
        if scenario.check is not None:  # the scenario's own judgement of the file
            record["integrity"] = scenario.check(copy)
            record["opens"] = record["integrity"] == "ok"
            record["open_error"] = record["integrity"]
        else:
            record["integrity"] = integrity(db)
            try:
                _close_quietly(scenario, copy)
                record["opens"] = True
            except Exception as exc2:  # noqa: BLE001 - reported, judged by the parent
                record["opens"] = False
                record["open_error"] = f"{type(exc2).__name__}: {exc2}"[:500]
        after_prior, after_units = scenario.observe(copy)
        record["prior_intact"] = after_prior == prior
        record["units_after_fault"] = after_units - units
        rerun = _run_once(scenario, copy)
        record["rerun"] = describe(rerun, db)
        record["units_after_rerun"] = scenario.observe(copy)[1] - units
        record["integrity_after_rerun"] = (scenario.check or (lambda d: integrity(db)))(copy)
        print(json.dumps(record), flush=True)
        shutil.rmtree(copy, ignore_errors=True)
    return 0


def _close_quietly(scenario: Scenario, directory: Path) -> None:
    """Open and close the scenario's store (for scenarios that open themselves: a plain
    read-only connection), faults off."""
    if scenario.open is not None:
        scenario.close(scenario.open(directory))
    else:
        sqlite3.connect(directory / scenario.db).execute("SELECT count(*) FROM sqlite_master").fetchone()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
