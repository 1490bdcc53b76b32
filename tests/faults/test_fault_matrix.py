"""The fault matrix, sampled (issue 31): every write path, with an I/O error and with a full
disk, at a spread of its write positions — first, last and between. After each fault the
file passes ``integrity_check``, the store opens, every write acknowledged before the fault
is intact, the operation is all or nothing, the caller saw one of our typed errors naming
the file, and the same operation succeeds once the fault is gone.

The full matrix (every position) is ``python benchmarks/fault_matrix.py``; its figures are
in the README's reliability section. Both CI passes run this sample: the journal mode (the
child inherits ``HERMES_DATA_JOURNAL_MODE``) changes which writes an operation makes.
"""

from __future__ import annotations

import os

import pytest

from tests.faults import command_paths, fiu, matrix
from tests.faults.scenarios import SCENARIOS

#: Positions tried per (path, fault) in the default run.
SAMPLE = int(os.environ.get("HERMES_FAULT_SAMPLE", "5"))

pytestmark = pytest.mark.skipif(
    not fiu.available() and not os.environ.get("CI"),
    reason="libfiu is not installed (Debian: fiu-utils libfiu0; .ci/run installs it)")


@pytest.mark.parametrize("fault", sorted(fiu.ERRNOS))
@pytest.mark.parametrize("path", [
    pytest.param(name, marks=pytest.mark.xfail(reason=command_paths.PENDING[name], strict=False))
    if name in command_paths.PENDING else name for name in sorted(SCENARIOS)])
def test_every_sampled_fault_position_keeps_the_store_whole(path, fault):
    result = matrix.run(path, fault, f"sample:{SAMPLE}")
    assert result.failure is None, result.failure
    assert result.positions > 0 and result.records, "the operation made no write to fail"
    # The sample reached faults that fired (not positions past the operation's end).
    assert any(rec["fired"] for rec in result.records)
    assert result.problems() == []


def test_a_fault_is_injected_where_the_matrix_says():
    """The harness itself: position 1 of an append fails it (with the errno given) and the
    unarmed count is stable, so "position k" means the same write in every run."""
    first = matrix.run("append_message", "ENOSPC", "1")
    second = matrix.run("append_message", "ENOSPC", "1")
    assert first.positions == second.positions > 1
    (rec,) = first.records
    assert rec["fired"] and rec["outcome"] != "ok"
