"""pytest-alembic's built-in checks that fit a forward-only history, on both stores and both
dialects.

The built-in tests are imported (see the pyproject comment) and run once per store and
dialect through the parametrised fixtures: ``alembic_config`` — ``[telemetry]`` (the ledger
v01..v18) and ``[sessions]`` (s01.., FTS5 layout included) — and ``alembic_engine`` — a fresh
SQLite file or a fresh PostgreSQL database (the ``pg_url`` fixture).

``up_down_consistency`` is excluded on purpose: every downgrade raises ForwardOnlyError
(tests/migrations/test_forward_only.py). ``model_definitions_match_ddl`` autogenerates against
the store's head metadata on the dialect (``StoreSpec.metadata_on``; the session store's
``schema.head_metadata``) with comparison on (``compare_type=True``), through the store's
``env.py``: the same comparison as ``alembic check`` (tests/migrations/test_alembic_check.py),
with the same exceptions — SQLite's and Alembic's own tables, the FTS5 virtual and shadow
tables (not ordinary tables) and the per-object ``include_object`` rules of
``migrations/sessions/env.py`` (docs/alembic.md "What `alembic check` compares").

One object is not compared by Alembic on SQLite: the expression index
``idx_sessions_effective_activity`` (its first key is an expression). SQLAlchemy cannot reflect
expression-based indexes on SQLite, so autogenerate skips it itself and says so in two
warnings, silenced below for that index name only. It is still checked: the store's own shape
comparison (``hermes-data check``) reads it with ``PRAGMA index_list`` / ``index_info``; on
PostgreSQL Alembic compares it.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa
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


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request):
    """The dialect of the database the built-in tests migrate (named ``backend`` so the
    WAL pass skips the PostgreSQL instances, tests/conftest.py)."""
    return request.param


@pytest.fixture
def alembic_engine(backend, tmp_path, request):
    if backend == "sqlite":
        engine = create_sqlite_engine(tmp_path / "pytest-alembic.db")
    else:
        engine = sa.create_engine(request.getfixturevalue("pg_url"))
    yield engine
    engine.dispose()
