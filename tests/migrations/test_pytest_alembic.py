"""pytest-alembic's built-in checks that fit a forward-only history, on both stores.

The built-in tests are imported (see the pyproject comment) and run once per store through
the parametrised ``alembic_config`` fixture: ``[telemetry]`` (the ledger v01..v18) and
``[sessions]`` (s01.., FTS5 layout included).

``up_down_consistency`` is excluded on purpose: every downgrade raises ForwardOnlyError.
``model_definitions_match_ddl`` autogenerates against the head metadata with comparison on
(``compare_type=True``). What the metadata does not own is filtered by name through the
store's ``include_name`` (``StoreSpec.include_name`` → ``ignore_table``): the internal tables
``sqlite_sequence`` / ``alembic_version`` / ``sqlite_stat*`` on both stores, and on the session
store the FTS5 virtual tables (``messages_fts``, ``messages_fts_trigram``) and their shadow
tables (``*_data``, ``*_idx``, ``*_content``, ``*_docsize``, ``*_config``), which its FTS
fragments create.

One object is not compared by Alembic on the session store: the expression index
``idx_sessions_effective_activity`` (its first key is an expression). SQLAlchemy cannot reflect
expression-based indexes on SQLite, so autogenerate skips it itself and says so in two
warnings, silenced below for that index name only. It is still checked: the store's own shape
comparison (``hermes-data check``) reads it with ``PRAGMA index_list`` / ``index_info``.
"""

from __future__ import annotations

import pytest
from pytest_alembic import Config as PytestAlembicConfig
from pytest_alembic.tests import (  # noqa: F401  (collected as tests of this module)
    test_model_definitions_match_ddl,
    test_single_head_revision,
    test_upgrade,
)

from hermes_data.migrate import runner as migrate
from hermes_data.engine import create_sqlite_engine

pytestmark = [
    pytest.mark.filterwarnings(
        "ignore:Skipped unsupported reflection of expression-based index "
        "idx_sessions_effective_activity"),
    pytest.mark.filterwarnings(
        "ignore:autogenerate skipping metadata-specified expression-based index "
        "'idx_sessions_effective_activity'"),
]


@pytest.fixture(params=["telemetry", "sessions"])
def alembic_config(request):
    cfg = migrate.alembic_config(request.param)
    return PytestAlembicConfig(alembic_config=cfg)


@pytest.fixture
def alembic_engine(tmp_path):
    engine = create_sqlite_engine(tmp_path / "pytest-alembic.db")
    yield engine
    engine.dispose()
