"""``async_delegations`` shape by opening order (spec sessions-ext-gateway.md §3.10,
acceptance behaviour 5)."""

from __future__ import annotations

import sqlite3

import pytest

from hermes_data.errors import ConfigurationError
from hermes_data.sessions import reconcile_state_schema
from hermes_data.sessions.store import SessionStore


def _shape(path) -> tuple:
    con = sqlite3.connect(path)
    try:
        info = con.execute("PRAGMA table_info(async_delegations)").fetchall()
        indexes = sorted((r[1], r[2], tuple(c[2] for c in con.execute(
            f"PRAGMA index_info('{r[1]}')"))) for r in con.execute(
            "PRAGMA index_list(async_delegations)"))
        return info, indexes
    finally:
        con.close()


@pytest.mark.sqlite_only("table_info of SQLite files in three opening orders")
def test_gw5_opening_orders_give_one_delegation_shape(tmp_path, legacy_copy):
    """Behaviour 5: fresh→reconcile_state_schema, legacy→store and legacy (one delegation
    row)→reconcile_state_schema→store give identical table_info and indexes; the row keeps
    its values and reads ``origin_session_id = ''``."""
    import shutil

    fresh = tmp_path / "fresh.db"
    SessionStore(fresh).close()
    reconcile_state_schema(fresh)
    other = tmp_path / "legacy2.db"
    shutil.copyfile(legacy_copy, other)
    with SessionStore(legacy_copy):
        pass
    con = sqlite3.connect(other)
    con.execute("INSERT INTO async_delegations (delegation_id, origin_session, state, "
                "dispatched_at, updated_at, task_json) VALUES ('d', 'o', 'done', 1.0, 2.0, '{}')")
    row = con.execute("SELECT * FROM async_delegations").fetchone()
    con.commit()
    con.close()
    reconcile_state_schema(str(other))
    with SessionStore(other) as s:
        reconcile_state_schema(s)
    assert _shape(fresh) == _shape(legacy_copy) == _shape(other)
    assert ("idx_async_delegations_delivery", 0, ("delivery_state", "completed_at")) \
        in _shape(fresh)[1]
    con = sqlite3.connect(other)
    try:
        assert con.execute("SELECT * FROM async_delegations").fetchall() == [row + ("",)]
    finally:
        con.close()
    with SessionStore(fresh, read_only=True) as ro:
        with pytest.raises(ConfigurationError):
            reconcile_state_schema(ro)
    with pytest.raises(TypeError):
        reconcile_state_schema(sqlite3.connect(fresh))
