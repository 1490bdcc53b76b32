"""pytest-alembic's built-in checks that fit a forward-only history.

``up_down_consistency`` is excluded on purpose: every downgrade raises ForwardOnlyError.
``model_definitions_match_ddl`` autogenerates against the head metadata; internal tables
(``sqlite_sequence``, ``alembic_version``) are filtered by name through the store's
``include_name`` — comparison itself stays on.
"""

from __future__ import annotations

import pytest
from pytest_alembic import Config as PytestAlembicConfig
from pytest_alembic.tests import (  # noqa: F401  (collected as tests of this module)
    test_model_definitions_match_ddl,
    test_single_head_revision,
    test_upgrade,
)

from hermes_data import migrate
from hermes_data.engine import create_sqlite_engine


@pytest.fixture
def alembic_config():
    cfg = migrate.alembic_config("telemetry")
    return PytestAlembicConfig(alembic_config=cfg)


@pytest.fixture
def alembic_engine(tmp_path):
    engine = create_sqlite_engine(tmp_path / "pytest-alembic.db")
    yield engine
    engine.dispose()
