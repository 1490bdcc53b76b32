"""Every write path of the fault matrix, by name (issue 31): the registry the armed child
(:mod:`tests.faults.child`) and the matrix runners look scenarios up in. Each store's paths
live in their own module; :mod:`tests.faults.base` says what a scenario is."""

from __future__ import annotations

from tests.faults import command_paths, sessions_paths, telemetry_paths
from tests.faults.base import Scenario

SCENARIOS: dict[str, Scenario] = {
    s.name: s for module in (sessions_paths, telemetry_paths, command_paths)
    for s in module.PATHS}
