"""The WAL pass skips exactly the tests that cannot depend on the journal mode (tests/conftest.py)."""

from __future__ import annotations

import pytest

from .conftest import RUN_JOURNAL_MODE, journal_independence


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_only_the_postgresql_instance_of_a_backend_test_is_independent(request, backend):
    why = journal_independence(request.node)
    assert why == ("PostgreSQL backend" if backend == "postgresql" else None)
    # Reaching here in the WAL pass means the item was not skipped: it must be the SQLite one.
    assert RUN_JOURNAL_MODE != "wal" or backend == "sqlite"


@pytest.mark.journal_independent("a probe of the marker")
def test_a_marked_test_names_its_reason_and_runs_in_the_default_pass(request):
    assert journal_independence(request.node) == "a probe of the marker"
    assert RUN_JOURNAL_MODE != "wal"
