"""The parent side of the fault matrix: run a scenario's positions in an armed child and
judge each one (issue 31; docs/development.md "Fault matrix")."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.faults.fiu import child_env
from tests.faults.scenarios import SCENARIOS

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Result:
    """One (scenario, fault) run: the positions it counted and one record per position."""

    scenario: str
    fault: str
    positions: int = 0
    records: list[dict[str, Any]] = field(default_factory=list)
    failure: str | None = None

    def problems(self) -> list[str]:
        """Every position that broke a promise, one line each (empty: all held)."""
        found = [f"{self.scenario}/{self.fault}: {self.failure}"] if self.failure else []
        for rec in self.records:
            found += [f"{self.scenario}/{self.fault} k={rec['k']} ({rec.get('fired')}): {p}"
                      for p in problems(rec, SCENARIOS[self.scenario].idempotent)]
        return found


def problems(rec: dict[str, Any], idempotent: bool = False) -> list[str]:
    """What one position's record shows wrong (see tests/faults/child.py)."""
    found = []
    if rec["integrity"] != "ok":
        found.append(f"integrity_check: {rec['integrity']}")
    if not rec["opens"]:
        found.append(f"the store does not open: {rec.get('open_error')}")
    if not rec["prior_intact"]:
        found.append("rows acknowledged before the fault changed or went missing")
    if rec["outcome"] == "raw":
        found.append(f"raw error reached the caller: {rec['error']}: {rec['message']}")
    elif rec["outcome"] == "typed" and not rec["names_file"]:
        found.append(f"typed error does not name the file: {rec['error']}: {rec['message']}")
    done = rec["units_after_fault"]
    allowed = {0, 1}
    if done not in allowed:
        found.append(f"half-visible: {done} units after the failed call")
    if rec["outcome"] == "ok" and done != 1:  # idempotent too: the pristine files are before it
        found.append("the call reported success but its rows are not there")
    if rec["rerun"]["outcome"] != "ok":
        found.append(f"rerun without the fault failed: {rec['rerun'].get('error')}: "
                     f"{rec['rerun'].get('message')}")
    want = 1 if idempotent else done + 1
    if rec["rerun"]["outcome"] == "ok" and rec["units_after_rerun"] != want:
        found.append(f"after the rerun {rec['units_after_rerun']} units, expected {want}")
    if rec["integrity_after_rerun"] != "ok":
        found.append(f"integrity_check after the rerun: {rec['integrity_after_rerun']}")
    return found


def run(scenario: str, fault: str, spec: str, *, timeout: float = 900,
        env: dict[str, str] | None = None) -> Result:
    """Run ``scenario`` under ``fault`` at the positions ``spec`` names (``all``,
    ``sample:S``, ``k1,k2``) in a fresh armed child; the parsed result."""
    result = Result(scenario, fault)
    with tempfile.TemporaryDirectory(prefix="hermes-fault-") as work:
        proc = subprocess.run([sys.executable, "-m", "tests.faults.child", scenario, fault,
                               str(Path(work) / "run"), spec],
                              cwd=REPO, env=child_env(env), capture_output=True, text=True,
                              timeout=timeout)
    for line in proc.stdout.splitlines():
        if not line.startswith("{"):
            continue
        rec = json.loads(line)
        if rec.get("measure"):
            result.positions = rec["positions"]
            if rec["outcome"] != "ok":
                result.failure = f"the unarmed run failed: {rec.get('message')}"
        else:
            result.records.append(rec)
    if proc.returncode != 0 and result.failure is None:
        result.failure = f"the child exited {proc.returncode}: {proc.stderr[-3000:]}"
    return result
