"""Compat-layer test support: every test gets an upstream-shaped ``SessionDB`` over the
``hermes_data.testing`` plugin's ``session_store`` (a fresh SQLite file, then the scratch
PostgreSQL database — docs/testing.md), so each upstream behaviour is checked on both."""

from __future__ import annotations

import pytest

from hermes_data.compat import SessionDB


@pytest.fixture
def db(session_store):
    """An upstream-shaped handle over the plugin's fresh store (closed with it)."""
    return SessionDB.over(session_store)
