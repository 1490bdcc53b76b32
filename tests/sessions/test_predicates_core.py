"""The kit predicates as Core constructs (issue 32) decide exactly what their string twins
decide: every predicate is evaluated both ways over a store whose rows cover each branch
(markers naming the parent or not, malformed ``model_config``, tool runs, reset and
branched parents with and without keys, implausible clocks), on SQLite and PostgreSQL."""

from __future__ import annotations

import itertools

import pytest
import sqlalchemy as sa

from hermes_data.sessions.schema import messages, sessions
from hermes_data.sessions.sql import markers as mk
from hermes_data.sessions.sql import predicates as P
from hermes_data.sessions.sql.constructs import json_marker

PAST = 1_700_000_000.0
FUTURE = 5_000_000_000.0  # beyond EPOCH_MAX: implausible


def _rows() -> tuple[list[dict], list[dict]]:
    """Sessions and messages covering the predicates' branches."""
    rows: list[dict] = []

    def add(sid, **kw):
        row = {"id": sid, "source": "cli", "started_at": PAST, "model_config": None,
               "parent_session_id": None, "end_reason": None, "ended_at": None,
               "session_key": None, "last_activity_at": None}
        row.update(kw)
        rows.append(row)

    add("root")
    add("comp", end_reason="compression", ended_at=PAST + 10)
    add("cont", parent_session_id="comp", started_at=PAST + 11)
    add("tool", parent_session_id="comp", source="tool")
    add("mark_branch", parent_session_id="comp", model_config='{"_branched_from": "comp"}')
    add("mark_other", parent_session_id="comp", model_config='{"_branched_from": "zzz"}')
    add("mark_delegate", parent_session_id="root", model_config='{"_delegate_from": "root"}')
    add("mark_reset", parent_session_id="reset_parent",
        model_config='{"_reset_from": "reset_parent"}')
    add("broken_json", parent_session_id="comp", model_config='{"_branched_from": ')
    add("branched", end_reason="branched", ended_at=PAST + 5)
    add("branch_late", parent_session_id="branched", started_at=PAST + 6)
    add("branch_early", parent_session_id="branched", started_at=PAST + 1)
    add("reset_parent", end_reason="session_reset", ended_at=PAST + 3, session_key="k1")
    add("reset_same_key", parent_session_id="reset_parent", session_key="k1")
    add("reset_other_key", parent_session_id="reset_parent", session_key="k2")
    add("reset_blank_key", parent_session_id="reset_parent", session_key="")
    add("idle_parent", end_reason="idle", ended_at=PAST + 3, session_key="k3")
    add("idle_child", parent_session_id="idle_parent", session_key="k3")
    add("future_clock", started_at=FUTURE, last_activity_at=FUTURE)
    add("heartbeat", last_activity_at=PAST + 500)
    add("blank_source", source="", parent_session_id="comp")
    msgs = [
        {"session_id": "root", "role": "user", "content": "hello there", "timestamp": PAST + 50},
        {"session_id": "root", "role": "assistant", "content": "hi", "timestamp": PAST + 60},
        {"session_id": "heartbeat", "role": "user", "content": "x", "timestamp": PAST + 900},
        {"session_id": "future_clock", "role": "user", "content": "y", "timestamp": FUTURE},
        {"session_id": "cont", "role": "user", "content": "line\nbreak", "timestamp": PAST + 12},
    ]
    # Preview shapes (docs/sessions-ui.md §3.3), one session each, several rows where the
    # first eligible one is not the first row.
    summary = mk.LONG_FORM_INTRO + "old turns\n" + mk.END_MARKER
    previews = {
        "comp": [" \t" + summary + "\n  the real question\r\nsecond line"],
        "tool": [mk.LEGACY_PREFIX + " only a summary", "then a plain one"],
        "mark_branch": [summary + " \n\t ", "after an empty remainder"],
        "mark_other": [mk.PRIOR_HEADER + "\n prior words " + mk.MERGED_DELIM + "\n" + summary],
        "mark_delegate": ["no header prior " + mk.MERGED_DELIM + mk.LEGACY_PREFIX + "x"],
        "mark_reset": [mk.MERGED_DELIM + mk.LEGACY_PREFIX + "nothing before"],
        "broken_json": [mk.SKILL_PREFIX + "big skill]\n" + "word " * 300 + "\ntail end"],
        "branched": [mk.SKILL_PREFIX + "small]\r\nuse it"],
        "branch_late": ["x" * 100 + "\ny" * 10],
        "branch_early": ["a\u00e9\u4e2d\U0001F600 multibyte " * 5],
        "reset_parent": ["visible but hidden kind"],
        "reset_same_key": ["first", "second"],
    }
    for sid, contents in previews.items():
        for i, text in enumerate(contents):
            msgs.append({"session_id": sid, "role": "user", "content": text,
                         "timestamp": PAST + 100 + i,
                         "display_kind": "hidden" if sid == "reset_parent" else None})
    msgs.append({"session_id": "reset_same_key", "role": "assistant", "content": "zero",
                 "timestamp": PAST + 50})
    return rows, msgs


@pytest.fixture
def populated(session_store):
    rows, msgs = _rows()
    with session_store.engine.begin() as conn:
        # Parents first (the foreign key), then the links.
        conn.execute(sa.insert(sessions), [dict(r, parent_session_id=None) for r in rows])
        for r in rows:
            if r["parent_session_id"]:
                conn.execute(sa.update(sessions).where(sessions.c.id == r["id"]).values(
                    parent_session_id=r["parent_session_id"]))
        # One key set for every row (executemany compiles the first row's columns).
        conn.execute(sa.insert(messages), [{"display_kind": None, **m} for m in msgs])
    return session_store


def _string_value(conn, expr: str, *aliases: str, ids: tuple[str, ...]) -> object:
    froms = ", ".join(f"sessions {a}" for a in aliases)
    where = " AND ".join(f"{a}.id = :{a}" for a in aliases)
    sql = f"SELECT {expr} FROM {froms} WHERE {where}"
    return conn.execute(sa.text(sql), dict(zip(aliases, ids))).scalar()


def _core_value(conn, expr: object, *aliases, ids: tuple[str, ...]) -> object:
    source = aliases[0] if len(aliases) == 1 else aliases[0].join(aliases[1], sa.true())
    stmt = sa.select(expr).select_from(source).where(
        *[a.c.id == sa.bindparam(a.name) for a in aliases])
    return conn.execute(stmt, dict(zip([a.name for a in aliases], ids))).scalar()


def _truth(value: object) -> object:
    # SQLite answers 0/1, PostgreSQL booleans; NULL stays NULL.
    return None if value is None else bool(value)


def test_every_core_predicate_matches_its_string_twin(populated):
    d = populated.engine.dialect.name
    ids = [r["id"] for r in _rows()[0]]
    s, c, p = sessions.alias("s"), sessions.alias("c"), sessions.alias("p")
    unary = {
        "listable": (P.listable("s", d), P.listable_of(s)),
        "branch_child": (P.branch_child("s", d=d), P.branch_child_of(s)),
        "reset_child": (P.reset_child("s", d=d), P.reset_child_of(s)),
        "legacy_reset_child": (P.legacy_reset_child("s"), P.legacy_reset_child_of(s)),
    }
    checked = 0
    previews: dict[str, object] = {}
    with populated.engine.connect() as conn:
        for name, (text_expr, core_expr) in unary.items():
            for sid in ids:
                want = _truth(_string_value(conn, text_expr, "s", ids=(sid,)))
                got = _truth(_core_value(conn, core_expr, s, ids=(sid,)))
                assert got == want, f"{name}({sid}) on {d}: Core {got!r}, string {want!r}"
                checked += 1
        for sid in ids:
            want = _string_value(conn, P.last_active("s"), "s", ids=(sid,))
            got = _core_value(conn, P.last_active_of(s), s, ids=(sid,))
            assert got == want, f"last_active({sid}) on {d}: Core {got!r}, string {want!r}"
            for key in ("_branched_from", "_delegate_from"):
                want = _string_value(conn, P.J("s.model_config", key, d), "s", ids=(sid,))
                got = _core_value(conn, json_marker(s.c.model_config, key), s, ids=(sid,))
                assert got == want, f"J({sid}, {key}) on {d}: Core {got!r}, string {want!r}"
            want = _string_value(conn, P.preview_sql("s", d), "s", ids=(sid,))
            got = _core_value(conn, P.preview_of(s, d), s, ids=(sid,))
            assert got == want, f"preview({sid}) on {d}: Core {got!r}, string {want!r}"
            previews[sid] = got
        for pid, cid in itertools.product(ids, ids):
            for name, text_expr, core_expr in (
                    ("edge", P.edge("p", "c", d), P.edge_of(p, c)),
                    ("fork", P.fork("c", "p", d), P.fork_of(c, p))):
                want = _truth(_string_value(conn, text_expr, "p", "c", ids=(pid, cid)))
                got = _truth(_core_value(conn, core_expr, p, c, ids=(pid, cid)))
                assert got == want, (f"{name}(p={pid}, c={cid}) on {d}: Core {got!r}, "
                                     f"string {want!r}")
                checked += 1
    assert checked == 4 * len(ids) + 2 * len(ids) ** 2
    # The rows reach every preview branch: summary remainder, merged prior (with and without
    # its header), long and short scaffolds, plain text cut to 63, nothing eligible.
    assert previews["comp"].startswith("\n  the real question")
    assert previews["tool"] == "then a plain one"
    assert previews["mark_branch"] == "after an empty remainder"
    assert previews["mark_other"] == "prior words"
    assert previews["mark_delegate"] == "no header prior"
    assert previews["mark_reset"] is None and previews["reset_parent"] is None
    assert "\x1e" in previews["broken_json"] and len(previews["broken_json"]) == 801
    assert previews["branched"] == mk.SKILL_PREFIX + "small]  use it"
    assert len(previews["branch_early"]) == 63 and previews["reset_same_key"] == "first"


def test_the_rows_reach_both_answers(populated):
    s = sessions.alias("s")
    with populated.engine.connect() as conn:
        listable = {r[0] for r in conn.execute(
            sa.select(s.c.id).where(P.listable_of(s)))}
        p, c = sessions.alias("p"), sessions.alias("c")
        edges = {tuple(r) for r in conn.execute(
            sa.select(p.c.id, c.c.id).where(P.edge_of(p, c)))}
    assert "root" in listable and "mark_delegate" not in listable
    assert "reset_same_key" in listable and "reset_other_key" not in listable
    assert "branch_late" in listable and "branch_early" not in listable
    assert edges == {("comp", "cont"), ("comp", "mark_other"), ("comp", "broken_json"),
                     ("comp", "blank_source")}


def test_json_marker_refuses_a_key_that_is_not_a_plain_name():
    with pytest.raises(ValueError, match="json_marker key"):
        json_marker(sessions.c.model_config, "a'b")


def test_the_predicates_correlate_from_inside_a_nested_subquery(populated):
    """Two levels down (an EXISTS inside the WHERE of a subquery of the outer alias), each
    predicate still reads the outer row, not a second uncorrelated ``sessions``."""
    s, x = sessions.alias("s"), sessions.alias("x")
    d = populated.engine.dialect.name
    with populated.engine.connect() as conn:
        for name, pred in (("listable", P.listable_of), ("reset_child", P.reset_child_of),
                           ("branch_child", P.branch_child_of),
                           ("legacy_reset_child", P.legacy_reset_child_of)):
            flat = {r[0] for r in conn.execute(sa.select(s.c.id).where(pred(s)))}
            inner = sa.select(x.c.id).where(x.c.id == s.c.id, pred(s)).exists()
            nested = {r[0] for r in conn.execute(sa.select(s.c.id).where(inner))}
            sql = str(sa.select(s.c.id).where(inner).compile(populated.engine))
            assert nested == flat, f"{name} on {d}: nested {nested}, flat {flat}"
            assert sql.count("FROM sessions AS s") == 1, sql
            assert flat and flat != {r["id"] for r in _rows()[0]}
