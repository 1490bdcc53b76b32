"""Fresh telemetry store at the head (used by :mod:`hermes_data.migrate.fresh`).

After the head metadata's DDL, a fresh file gets what the revisions v01..v18 would leave
beside the tables: one upstream ``schema_version`` ledger row per level (an upstream plugin
build opening the file must never re-run a step). v17's data-only repair has nothing to
delete in an empty store. ``tests/migrations/test_fresh_path.py`` compares the result with
the revision path.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import bindparam
from sqlalchemy.engine import Connection

from hermes_data.clock import utcnow_iso
from hermes_data.telemetry.migration import LEVELS, revision_for_level
from hermes_data.telemetry.schema import schema_version

#: The revisions a fresh file stands for, in order (a test keeps them equal to the scripts).
REVISIONS = tuple(revision_for_level(level) for level in sorted(LEVELS))


_LEDGER_INSERT = schema_version.insert().values(version=bindparam("v"), applied_at=bindparam("t"))


def create_head(conn: Connection, cursor: Any, options: Any = None) -> None:
    """The ledger rows of every level, in the caller's transaction (tables already exist).
    ``options``: the opening handle's options (the runner's ``hook_options``; unused here)."""
    now = utcnow_iso()
    statement = _LEDGER_INSERT.compile(dialect=conn.dialect)
    cursor.executemany(str(statement),
                       [(level, now) for level in sorted(LEVELS)])
