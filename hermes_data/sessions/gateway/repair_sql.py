"""Statements of the gateway's repair reads and writes
(docs/sessions-gateway.md §3.4–§3.5): never-active keyed sessions and orphaned unkeyed sessions.

Core constructs over :mod:`hermes_data.sessions.schema`, compiled once per dialect on first
use (:class:`hermes_data.sessions.sql.dialect.driver_statement`); callers pass positional
tuples in each statement's declared order. ``with_for_update()`` renders nothing on SQLite.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

import sqlalchemy as sa

from hermes_data.sessions.schema import gateway_routing, messages, sessions, \
    telegram_dm_topic_bindings
from hermes_data.sessions.sql.constructs import bp, const, json_marker, left_chars
from hermes_data.sessions.sql.dialect import Statements, driver_statement
from hermes_data.sessions.sql.meta_sql import meta_get, meta_upsert
from hermes_data.sessions.sql.predicates import last_active_of

_ZERO_COLS = ("message_count", "tool_call_count", "api_call_count", "input_tokens",
              "output_tokens", "pinned", "archived")


def _blank(col: Any) -> Any:
    """``COALESCE(col, '')`` (NULL and empty alike)."""
    return sa.func.coalesce(col, const(""))


def never_active(s: Any, bindings: bool) -> list[Any]:
    """NEVER_ACTIVE(s, cutoff) over the ``sessions`` alias ``s`` (binds the cutoff once, as
    ``cutoff``); ``bindings``: the Telegram bindings table exists (a bound lane is explicit
    intent)."""
    na_m, na_c = messages.alias("na_m"), sessions.alias("na_c")
    out = [_blank(s.c.session_key) != const(""), s.c.ended_at.is_(None),
           _blank(s.c.title) == const(""), s.c.last_activity_at.is_(None),
           *(sa.func.coalesce(s.c[c], const(0)) == const(0) for c in _ZERO_COLS),
           s.c.started_at < bp("cutoff"),
           ~sa.select(const(1)).where(na_m.c.session_id == s.c.id).exists(),
           ~sa.select(const(1)).where(na_c.c.parent_session_id == s.c.id).exists()]
    if bindings:
        na_b = telegram_dm_topic_bindings.alias("na_b")
        out.append(~sa.select(const(1)).where(na_b.c.session_id == s.c.id).exists())
    return out


def _never_active(bindings: bool) -> driver_statement:
    def build(d: str) -> sa.Select:
        s = sessions.alias("s")
        return (sa.select(s.c.id, s.c.session_key, s.c.source, s.c.chat_id, s.c.chat_type,
                          s.c.user_id, s.c.started_at)
                .where(*never_active(s, bindings)).order_by(s.c.started_at, s.c.id))
    return driver_statement(build, "cutoff")


def _never_active_one(bindings: bool) -> driver_statement:
    def build(d: str) -> sa.Select:
        s = sessions.alias("s")
        return (sa.select(s.c.id).where(s.c.id == bp("id"), *never_active(s, bindings))
                .with_for_update())
    return driver_statement(build, "id", "cutoff")


def _donor(d: str) -> sa.Select:
    p = sessions.alias("p")
    return sa.select(p.c.id, p.c.session_key).where(
        p.c.id == bp("id"), _blank(p.c.session_key) != const(""),
        _blank(p.c.source) == bp("source"))


def _adopt_rows(d: str) -> sa.Select:
    s = sessions
    return (sa.select(s.c.id, _blank(s.c.source), s.c.session_key, s.c.ended_at, s.c.end_reason)
            .where(s.c.id.in_([bp("orphan"), bp("donor")])).order_by(s.c.id).with_for_update())


#: The routing columns an adoption fills from the donor (where the orphan has NULL).
_FILL = ("chat_id", "chat_type", "thread_id", "user_id", "origin_json", "display_name")


def _adopt_orphan(d: str) -> sa.Update:
    s = sessions
    return (sa.update(s).ordered_values(
        (s.c.session_key, bp("key")),
        *((s.c[c], sa.func.coalesce(s.c[c], bp(c))) for c in _FILL))
        .where(s.c.id == bp("id"), s.c.session_key.is_(None)))


def _supersede_donor(d: str) -> sa.Update:
    s = sessions
    return (sa.update(s).ordered_values(
        (s.c.ended_at, sa.func.coalesce(s.c.ended_at, bp("at"))),
        (s.c.end_reason, const("superseded_by_repair"))).where(s.c.id == bp("id")))


def _retag_kanban(d: str) -> sa.Update:
    # Exact, case-sensitive prefix on both dialects: substr(cwd, 1, n) / left(cwd, n).
    s = sessions
    return sa.update(s).values(source=const("kanban")).where(
        s.c.source == const("cli"),
        sa.or_(s.c.cwd == bp("root"),
               left_chars(s.c.cwd, bp("n")).in_([bp("slash"), bp("backslash")])))


def _routing_for_session(d: str) -> sa.Delete:
    g = gateway_routing
    return sa.delete(g).where(json_marker(g.c.entry_json, "session_id") == bp("sid"))


def _orphans(d: str) -> sa.Select:
    o, om, oe = sessions.alias("o"), messages.alias("om"), messages.alias("oe")
    count = sa.select(sa.func.count()).select_from(om).where(om.c.session_id == o.c.id)
    return (sa.select(o.c.id, _blank(o.c.source), count.scalar_subquery(), o.c.started_at,
                      last_active_of(o), o.c.parent_session_id, o.c.user_id)
            .where(o.c.session_key.is_(None),
                   sa.select(const(1)).where(oe.c.session_id == o.c.id).exists(),
                   _blank(o.c.source) != const("tool"),
                   json_marker(o.c.model_config, "_branched_from").is_(None),
                   json_marker(o.c.model_config, "_delegate_from").is_(None))
            .order_by(o.c.started_at, o.c.id))


def _contiguous_donors(d: str) -> sa.Select:
    c = sessions.alias("d")
    la = last_active_of(c)
    return (sa.select(c.c.id, c.c.session_key)
            .where(c.c.id != bp("id"), _blank(c.c.session_key) != const(""),
                   _blank(c.c.source) == bp("source"),
                   sa.or_(_blank(c.c.user_id) == const(""), _blank(bp("user")) == const(""),
                          c.c.user_id == bp("user2")),
                   la.between(bp("lo"), bp("hi")), la < bp("last"))
            .order_by(la.desc(), c.c.id.desc()).limit(const(2)))


class RepairStatements(Statements):
    """The repair statements of one dialect."""

    #: Never-active candidates, oldest first (``cutoff``): without / with the bindings table.
    NEVER_ACTIVE_PLAIN = _never_active(False)
    NEVER_ACTIVE_TG = _never_active(True)
    #: One candidate re-checked inside the prune's transaction (locked on PostgreSQL).
    NEVER_ACTIVE_ONE_PLAIN = _never_active_one(False)
    NEVER_ACTIVE_ONE_TG = _never_active_one(True)
    #: Routing entries of every scope naming a session (malformed JSON never raises).
    ROUTING_FOR_SESSION = driver_statement(_routing_for_session, "sid")
    #: Orphans: unkeyed, with messages, not tool rows, no branch/delegate marker.
    ORPHANS = driver_statement(_orphans)
    #: A lineage donor: the parent, keyed, of the same source.
    PARENT_DONOR = driver_statement(_donor, "id", "source")
    #: Contiguity donors (at most two: one is an answer, two are ambiguous).
    CONTIGUOUS_DONORS = driver_statement(_contiguous_donors, "id", "source", "user", "user2",
                                         "lo", "hi", "last")
    #: Both rows of an adoption, locked in id order on PostgreSQL.
    ADOPT_ROWS = driver_statement(_adopt_rows, "orphan", "donor")
    #: Give the orphan the donor's key; fill its NULL routing columns.
    ADOPT_ORPHAN = driver_statement(_adopt_orphan, "key", *_FILL, "id")
    #: The donor's routing columns.
    DONOR_ROUTING = driver_statement(lambda d: sa.select(
        *(sessions.c[c] for c in _FILL)).where(sessions.c.id == bp("id")), "id")
    #: End the donor (an end already set is kept, the reason replaced).
    SUPERSEDE_DONOR = driver_statement(_supersede_donor, "at", "id")
    # -- kanban retag (docs/sessions-gateway.md §3.9)
    META_GET = driver_statement(meta_get, "key")
    META_SET = driver_statement(meta_upsert, "key", "value")
    RETAG_KANBAN = driver_statement(_retag_kanban, "root", "n", "slash", "backslash")

    @cached_property
    def NEVER_ACTIVE(self) -> dict[bool, str]:
        """The candidate listing by "the bindings table exists"."""
        return {False: self.NEVER_ACTIVE_PLAIN, True: self.NEVER_ACTIVE_TG}

    @cached_property
    def NEVER_ACTIVE_ONE(self) -> dict[bool, str]:
        """The candidate re-check by "the bindings table exists"."""
        return {False: self.NEVER_ACTIVE_ONE_PLAIN, True: self.NEVER_ACTIVE_ONE_TG}

    def __init__(self, d: str) -> None:
        super().__init__(d)
        pg = d == "postgresql"
        r = self.render
        #: Does a table exist (the opt-in Telegram tables on SQLite)?
        # not Core: a catalogue read (pg_tables / sqlite_master)
        self.TABLE_EXISTS = r(
            "SELECT 1 FROM pg_tables WHERE schemaname = current_schema() AND tablename = ?"
            if pg else "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?")


#: The RepairStatements of a dialect (built once per process).
for_dialect = RepairStatements.for_dialect
