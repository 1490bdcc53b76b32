"""Fault-matrix scenarios of whole commands — upgrade, copy, repair, optimize-storage
(:mod:`tests.faults.base`)."""

from __future__ import annotations

from tests.faults.base import Scenario

PATHS: list[Scenario] = []
