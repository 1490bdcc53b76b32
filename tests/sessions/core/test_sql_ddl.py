"""The allow-listed DROP builders: a name outside the list never becomes DDL, and every name
inside it yields a statement SQLite accepts. And the one whitespace-collapsed form stored DDL
is compared in."""

from __future__ import annotations

import re
import sqlite3

import pytest

from hermes_data.sessions.storage.fts import cjk_sql as cjk
from hermes_data.sessions.storage import display_sql as display
from hermes_data.sessions.storage.fts import sql as fts_maintenance
from hermes_data.sessions.storage import opening_sql as opening
from hermes_data.sessions.gateway import telegram_sql as telegram
from hermes_data.sessions.sql.ddl import checked_drop, squash

BUILDERS = [
    (cjk.drop_object, cjk.CJK_OBJECT_NAMES),
    (fts_maintenance.drop_upstream_cjk_trigger, fts_maintenance.UPSTREAM_CJK_TRIGGERS),
    (opening.drop_fts_trigger, opening.FTS_TRIGGERS),
    (opening.drop_fts_table, opening.FTS_VIRTUAL_TABLES),
    (opening.drop_fts_view, opening.FTS_VIEWS),
    (display.drop_trigger, display.TRIGGER_NAMES),
    (telegram.drop_table, telegram.TABLES),
]


@pytest.mark.parametrize("build,names", BUILDERS, ids=lambda x: getattr(x, "__name__", ""))
@pytest.mark.parametrize("stray", ["sessions", "messages; DROP TABLE sessions", "", "x\"y"])
def test_a_name_outside_the_allow_list_is_refused_and_named(build, names, stray) -> None:
    assert stray not in names
    with pytest.raises(ValueError, match="^not an? .*: " + re.escape(repr(stray)) + "$"):
        build(stray)


@pytest.mark.parametrize("build,names", BUILDERS[:-1], ids=lambda x: getattr(x, "__name__", ""))
def test_every_allowed_if_exists_drop_runs_on_an_empty_file(build, names, tmp_path) -> None:
    con = sqlite3.connect(tmp_path / "empty.db")
    for name in names:
        con.execute(build(name))  # IF EXISTS: absent objects are fine
    con.close()


def test_the_drop_spells_schema_target_and_table_clause() -> None:
    assert checked_drop("TABLE", "t", ("t",), "a t", if_exists=False, schema="temp") \
        == "DROP TABLE temp.t"
    assert checked_drop("TRIGGER", "g", ("g",), "a g", on="messages") \
        == "DROP TRIGGER IF EXISTS g ON messages"
    con = sqlite3.connect(":memory:")
    con.execute("CREATE TEMP TABLE hermes_probe_t (x)")
    con.execute(checked_drop("TABLE", "hermes_probe_t", ("hermes_probe_t",), "a probe",
                             if_exists=False, schema="temp"))
    assert con.execute("SELECT count(*) FROM temp.sqlite_master").fetchone()[0] == 0


def test_squash_collapses_every_whitespace_run_and_lowers_on_request():
    """Stored DDL compares in one form whatever whitespace it was written with (TAB, CR,
    form feed, non-breaking space all count, unlike the display digests' four characters)."""
    stored = "CREATE TRIGGER t\tAFTER INSERT ON messages\r\n\fBEGIN\u00a0 SELECT 1; END\n"
    assert squash(stored) == "CREATE TRIGGER t AFTER INSERT ON messages BEGIN SELECT 1; END"
    assert squash(stored, lower=True) == "create trigger t after insert on messages begin select 1; end"
    assert squash(None) == "" and squash("   ") == ""
