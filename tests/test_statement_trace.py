"""The suite-wide statement trace (tests/conftest.py): what it counts as one ``IN`` list."""

from __future__ import annotations

import sqlite3

from .conftest import _WIDE_IN_LISTS, MAX_IN_LIST, in_list_sizes


def test_in_lists_are_counted_past_strings_and_subqueries():
    assert in_list_sizes("SELECT 1 WHERE x IN (1, 2, 3)") == [3]
    assert in_list_sizes("DELETE FROM t WHERE id in ('a,b', 'c''d', 'e')") == [3]
    assert in_list_sizes("SELECT 1 WHERE a IN (SELECT f(x, y) FROM t) AND b IN (4,5)") == [1, 2]


def test_a_wide_in_list_is_recorded_by_the_trace(tmp_path):
    """A traced connection that binds 901 values in one IN list is recorded (the record is
    removed again: this statement is the probe, not a defect)."""
    before = len(_WIDE_IN_LISTS)
    con = sqlite3.connect(tmp_path / "probe.db")
    try:
        marks = ",".join("?" * (MAX_IN_LIST + 1))
        con.execute(f"SELECT 1 WHERE 0 IN ({marks})", tuple(range(1, MAX_IN_LIST + 2))).fetchall()
        con.execute(f"SELECT 1 WHERE 0 IN ({marks[:-2]})", tuple(range(1, MAX_IN_LIST + 1)))
    finally:
        con.close()
    try:
        assert len(_WIDE_IN_LISTS) == before + 1
    finally:
        del _WIDE_IN_LISTS[before:]
