"""hermes_data.statements: a Core construct compiled once per dialect, its positional order
checked, and an IN list of any length spread into a compiled string without recompiling
(docs/architecture.md, "One mechanism per job")."""

from __future__ import annotations

import sqlite3

import pytest
import sqlalchemy as sa

from hermes_data.statements import DriverPrepared

pytestmark = pytest.mark.journal_independent("statement compilation, no store file")

_t = sa.table("t", sa.column("id"), sa.column("grp"), sa.column("v"))


def _in_list() -> DriverPrepared:
    return DriverPrepared("in_list", lambda: sa.select(_t.c.v).where(
        _t.c.grp == sa.bindparam("grp"), _t.c.id.in_(sa.bindparam("ids", expanding=True)))
        .order_by(_t.c.id))


def test_an_in_list_is_spread_per_length_and_runs_on_sqlite():
    p = _in_list()
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE t (id INTEGER, grp TEXT, v TEXT)")
    db.executemany("INSERT INTO t VALUES (?, ?, ?)",
                   [(i, "a" if i % 2 else "b", f"v{i}") for i in range(20)])
    for ids in ([3], [1, 3, 4, 5], list(range(20))):
        sql = p.expanded_sql("sqlite", ("grp", "ids"), len(ids))
        assert sql.count("?") == 1 + len(ids)
        rows = [r[0] for r in db.execute(sql, ("a", *ids))]
        assert rows == [f"v{i}" for i in ids if i % 2]
    # Compiled once: every length is a splice of the same compiled string.
    assert p.expanded_sql("sqlite", ("grp", "ids"), 2) is p.expanded_sql(
        "sqlite", ("grp", "ids"), 2)


def test_postgresql_gets_bare_format_markers():
    sql = _in_list().expanded_sql("postgresql", ("grp", "ids"), 3)
    assert "t.id IN (%s, %s, %s)" in sql and "t.grp = %s" in sql and "::" not in sql


@pytest.mark.parametrize("n", [0, -1, True, 2.0])
def test_a_length_below_one_or_not_an_int_is_refused(n):
    with pytest.raises(ValueError, match=r"in_list: an IN list needs at least one value"):
        _in_list().expanded_sql("sqlite", ("grp", "ids"), n)


def test_a_wrong_order_or_a_construct_without_an_expanding_list_is_refused():
    with pytest.raises(ValueError, match=r"in_list \(sqlite\) binds \('grp', 'ids'\)"):
        _in_list().expanded_sql("sqlite", ("ids", "grp"), 2)
    plain = DriverPrepared("plain", lambda: sa.select(_t.c.v).where(
        _t.c.id == sa.bindparam("id")))
    with pytest.raises(ValueError, match=r"plain \(sqlite\): no expanding IN parameter"):
        plain.expanded_sql("sqlite", ("id",), 2)


def test_two_lists_of_one_length_are_both_spread():
    p = DriverPrepared("two_lists", lambda: sa.select(_t.c.v).where(
        _t.c.id.in_(sa.bindparam("a", expanding=True)),
        _t.c.grp.not_in(sa.bindparam("b", expanding=True))))
    sql = p.expanded_sql("sqlite", ("a", "b"), 3)
    assert "t.id IN (?, ?, ?)" in sql and "(t.grp NOT IN (?, ?, ?))" in sql


def test_run_expanded_binds_the_list_and_the_named_values_on_a_connection():
    """``run_expanded`` on a SQLAlchemy connection: the list's values where the list is,
    the other parameters by name, a value repeated wherever the construct names it twice."""
    p = DriverPrepared("twice", lambda: sa.select(_t.c.v).where(
        _t.c.grp == sa.bindparam("grp"), _t.c.id.in_(sa.bindparam("ids", expanding=True)),
        _t.c.v != sa.bindparam("grp")).order_by(_t.c.id))
    engine = sa.create_engine("sqlite://")
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE t (id INTEGER, grp TEXT, v TEXT)")
        conn.exec_driver_sql("INSERT INTO t VALUES (?, ?, ?)",
                             [(i, "a" if i % 2 else "b", f"v{i}") for i in range(10)])
        for ids in ([1], [1, 2, 3, 5], list(range(10))):
            rows = [r[0] for r in p.run_expanded(conn, ids, {"grp": "a"})]
            assert rows == [f"v{i}" for i in ids if i % 2]
        with pytest.raises(ValueError, match="twice: an IN list needs at least one value"):
            p.run_expanded(conn, [], {"grp": "a"})
