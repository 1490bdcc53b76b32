"""The chaos soak (``benchmarks/soak.py``, issue 31) cannot rot: a 12-second run on SQLite in
the run's journal mode, with the chaos thread on, must pass its own checks (no row lost, no
raw error, every invariant) after killing at least one worker and acknowledging writes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_a_short_soak_kills_workers_and_loses_nothing(tmp_path):
    out = tmp_path / "soak.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "soak.py"), "--minutes", "0.2",
         "--backend", "sqlite", "--dir", str(tmp_path / "run"), "--json", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    figures = json.loads(out.read_text())
    assert figures["kills"] > 0
    assert figures["rows_acknowledged"] > 0
    assert figures["rows_lost"] == 0 and figures["raw_errors"] == 0
    assert figures["integrity_check"] == "ok"
