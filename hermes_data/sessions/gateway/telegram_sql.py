"""Statements of Telegram DM topic mode (docs/sessions-gateway.md §2.5, §3.8).

On SQLite the two tables are the user's opt-in: ``apply_telegram_topic_migration`` creates
or upgrades them with the frozen v3 DDL below (these texts never change; a later shape needs
a new upgrade step). On PostgreSQL revision ``s06_gateway`` created them.

The statements are Core constructs over the two tables of :mod:`hermes_data.sessions.schema`
(declared there for both dialects), compiled once per dialect on first use
(:class:`hermes_data.sessions.sql.dialect.driver_statement`); callers pass positional tuples
in each statement's declared order. The DDL, catalogue reads and the v1/v2 copy stay text.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

import sqlalchemy as sa

from hermes_data.sessions.sql.meta_sql import meta_get, meta_upsert
from hermes_data.sessions.schema import sessions, system_prompts
from hermes_data.sessions.schema import telegram_dm_topic_bindings as bindings
from hermes_data.sessions.schema import telegram_dm_topic_mode as mode
from hermes_data.sessions.sql.constructs import bp, const, dialect_insert
from hermes_data.sessions.sql.core import SESSION_ROW_COLS
from hermes_data.sessions.sql.ddl import checked_drop
from hermes_data.sessions.sql.dialect import Statements, driver_statement
from hermes_data.sessions.sql.predicates import last_active_of, preview_of

MODE = "telegram_dm_topic_mode"
BINDINGS = "telegram_dm_topic_bindings"
TABLES = (MODE, BINDINGS)
SCHEMA_KEY = "telegram_dm_topic_schema_version"
SCHEMA_VERSION = "3"

#: Frozen v3 DDL (``{name}``: the table name, ``<t>`` or ``<t>_new``).
V3_DDL = {
    MODE: ("CREATE TABLE {name} (profile_name TEXT NOT NULL DEFAULT 'default', "
           "chat_id TEXT NOT NULL, user_id TEXT NOT NULL, enabled INTEGER NOT NULL DEFAULT 1, "
           "activated_at REAL NOT NULL, updated_at REAL NOT NULL, has_topics_enabled INTEGER, "
           "allows_users_to_create_topics INTEGER, capability_checked_at REAL, "
           "intro_message_id TEXT, pinned_message_id TEXT, PRIMARY KEY (profile_name, chat_id))"),
    BINDINGS: ("CREATE TABLE {name} (profile_name TEXT NOT NULL DEFAULT 'default', "
               "chat_id TEXT NOT NULL, thread_id TEXT NOT NULL, user_id TEXT NOT NULL, "
               "session_key TEXT NOT NULL, session_id TEXT NOT NULL REFERENCES sessions(id) "
               "ON DELETE CASCADE, managed_mode TEXT NOT NULL DEFAULT 'auto', "
               "linked_at REAL NOT NULL, updated_at REAL NOT NULL, "
               "PRIMARY KEY (profile_name, chat_id, thread_id))"),
}
V3_COLUMNS = {
    MODE: ("profile_name", "chat_id", "user_id", "enabled", "activated_at", "updated_at",
           "has_topics_enabled", "allows_users_to_create_topics", "capability_checked_at",
           "intro_message_id", "pinned_message_id"),
    BINDINGS: ("profile_name", "chat_id", "thread_id", "user_id", "session_key", "session_id",
               "managed_mode", "linked_at", "updated_at"),
}
INDEXES = (
    ("idx_telegram_dm_topic_bindings_session",
     f"CREATE UNIQUE INDEX idx_telegram_dm_topic_bindings_session ON {BINDINGS} (session_id)"),
    ("idx_telegram_dm_topic_bindings_user",
     f"CREATE INDEX idx_telegram_dm_topic_bindings_user ON {BINDINGS} "
     "(profile_name, user_id, chat_id)"),
)
#: SQLite catalogue reads of the read gate.
SQLITE_OBJECTS = ("SELECT type, name FROM sqlite_master WHERE name LIKE 'telegram_dm_topic%' "
                  "OR name LIKE 'idx_telegram_dm_topic%'")


def table_columns(name: str) -> str:
    """``PRAGMA table_info`` of a fixed table name (SQLite)."""
    return f'PRAGMA table_info("{name}")'


def drop_table(name: str) -> str:
    """Drop one of :data:`TABLES` or its ``<table>_new`` rebuild copy."""
    return checked_drop("TABLE", name, (*TABLES, *(f"{t}_new" for t in TABLES)),
                        "a Telegram topic table", if_exists=False)


def rename_table(old: str, new: str) -> str:
    """Rename a fixed table name of this module."""
    return f"ALTER TABLE {old} RENAME TO {new}"


def copy_into_new(table: str, columns: list[str]) -> str:
    """Copy a v1/v2 table into ``<table>_new`` under profile ``'default'`` (bindings: only
    rows whose session exists)."""
    cols = ", ".join(columns)
    where = (" WHERE EXISTS (SELECT 1 FROM sessions s WHERE s.id = o.session_id)"
             if table == BINDINGS else "")
    # not Core: the frozen v3 upgrade copies a legacy table (its columns read by PRAGMA) into
    # its ``<table>_new`` rebuild copy, neither of them a metadata table
    return (f"INSERT INTO {table}_new (profile_name, {cols}) SELECT 'default', "
            f"{', '.join('o.' + c for c in columns)} FROM {table} o{where}")


def _rowid(t: Any) -> Any:
    """SQLite's ``rowid`` of ``t`` (an alias): the pseudo-column no Table declares."""
    return sa.literal_column(f"{t.name}.rowid")


def _newer_duplicate(b: Any) -> Any:
    """A newer binding of ``b``'s session exists (later ``updated_at``, ties: later rowid)."""
    n = bindings.alias("n")
    return sa.select(const(1)).where(n.c.session_id == b.c.session_id, sa.or_(
        n.c.updated_at > b.c.updated_at,
        sa.and_(n.c.updated_at == b.c.updated_at, _rowid(n) > _rowid(b)))).exists()


def _dedupe_count(d: str) -> sa.Select:
    b = bindings.alias("b")
    return sa.select(sa.func.count()).select_from(b).where(_newer_duplicate(b))


def _dedupe(d: str) -> sa.Delete:
    b = bindings.alias("b")
    return sa.delete(bindings).where(sa.literal_column("rowid").in_(
        sa.select(_rowid(b)).select_from(b).where(_newer_duplicate(b))))


def _count(table: Any) -> driver_statement:
    return driver_statement(lambda d: sa.select(sa.func.count()).select_from(table))


def _enable(d: str) -> Any:
    ins = dialect_insert(d)(mode).values(
        profile_name=bp("p"), chat_id=bp("chat"), user_id=bp("user"), enabled=const(1),
        activated_at=bp("activated"), updated_at=bp("updated"), has_topics_enabled=bp("has"),
        allows_users_to_create_topics=bp("allows"), capability_checked_at=bp("checked"))
    ex = ins.excluded
    return ins.on_conflict_do_update(
        index_elements=[mode.c.profile_name, mode.c.chat_id],
        set_={"user_id": ex.user_id, "enabled": const(1), "updated_at": ex.updated_at,
              "has_topics_enabled": ex.has_topics_enabled,
              "allows_users_to_create_topics": ex.allows_users_to_create_topics,
              "capability_checked_at": ex.capability_checked_at})


def _bind(d: str) -> Any:
    b = bindings
    ins = dialect_insert(d)(b).values({c: bp("v_" + c) for c in V3_COLUMNS[BINDINGS]})
    ex = ins.excluded
    return ins.on_conflict_do_update(
        index_elements=[b.c.profile_name, b.c.chat_id, b.c.thread_id],
        set_={"user_id": ex.user_id, "session_key": ex.session_key,
              "linked_at": sa.case((b.c.session_id == ex.session_id, b.c.linked_at),
                                   else_=ex.linked_at),
              "session_id": ex.session_id, "managed_mode": ex.managed_mode,
              "updated_at": ex.updated_at})


def _chat(t: Any) -> list[Any]:
    return [t.c.profile_name == bp("p"), t.c.chat_id == bp("chat")]


def _topic() -> list[Any]:
    return [*_chat(bindings), bindings.c.thread_id == bp("thread")]


def _binding_rows(*where: Any) -> sa.Select:
    return sa.select(*(bindings.c[c] for c in V3_COLUMNS[BINDINGS])).where(*where)


def _unlinked(bound: bool) -> driver_statement:
    """A user's Telegram sessions of a profile not ended in ``compression`` (``bound``: and
    no topic bound to them), most recently active first, with prompt, preview and
    ``last_active``."""
    def build(d: str) -> sa.Select:
        s, sp = sessions.alias("s"), system_prompts.alias("sp")
        la = last_active_of(s).label("la")
        profile = sa.func.coalesce(sa.func.nullif(sa.func.trim(s.c.profile_name), const("")),
                                   const("default"))
        where = [s.c.source == const("telegram"), s.c.user_id == bp("user"),
                 profile == bp("profile"),
                 sa.not_(sa.and_(s.c.ended_at.is_not(None),
                                 sa.func.coalesce(s.c.end_reason, const(""))
                                 == const("compression")))]
        if bound:
            ub = bindings.alias("ub")
            where.append(~sa.select(const(1)).where(ub.c.session_id == s.c.id).exists())
        newest = la.desc().nulls_last() if d == "postgresql" else la.desc()
        return (sa.select(*(s.c[c] for c in SESSION_ROW_COLS),
                          sa.func.coalesce(sp.c.prompt, s.c.system_prompt), preview_of(s, d), la)
                .select_from(s.outerjoin(sp, sp.c.hash == s.c.system_prompt_hash))
                .where(*where).order_by(newest, s.c.started_at.desc(), s.c.id.desc())
                .limit(bp("limit")))
    return driver_statement(build, "user", "profile", "limit")


class TelegramStatements(Statements):
    """The Telegram statements of one dialect (Core constructs over the two topic tables,
    compiled on first use; callers pass positional tuples in each statement's declared
    order)."""

    #: Bindings with a newer binding of the same session (the v3 migration's dedupe; SQLite).
    DEDUPE_COUNT = driver_statement(_dedupe_count)
    #: Delete those older duplicates.
    DEDUPE = driver_statement(_dedupe)
    #: Rows of a table before its v1/v2 ⇒ v3 copy (SQLite).
    MODE_COUNT = _count(mode)
    BINDINGS_COUNT = _count(bindings)
    META_GET = driver_statement(meta_get, "key")
    META_SET = driver_statement(meta_upsert, "key", "value")
    #: Topic mode on for a chat: the latest capability probe wins, ``activated_at`` and the
    #: message ids are kept.
    ENABLE = driver_statement(_enable, "p", "chat", "user", "activated", "updated", "has",
                              "allows", "checked")
    #: Topic mode off for a chat (any user).
    DISABLE = driver_statement(lambda d: sa.update(mode).ordered_values(
        (mode.c.enabled, const(0)), (mode.c.updated_at, bp("at"))).where(*_chat(mode)),
        "at", "p", "chat")
    #: Every binding of a chat.
    CLEAR_CHAT = driver_statement(lambda d: sa.delete(bindings).where(*_chat(bindings)),
                                  "p", "chat")
    IS_ENABLED = driver_statement(lambda d: sa.select(const(1)).select_from(mode).where(
        *_chat(mode), mode.c.user_id == bp("user"), mode.c.enabled != const(0)),
        "p", "chat", "user")
    BINDING = driver_statement(lambda d: _binding_rows(*_topic()), "p", "chat", "thread")
    BINDING_BY_SESSION = driver_statement(lambda d: _binding_rows(
        bindings.c.session_id == bp("sid")), "sid")
    BINDINGS_FOR_CHAT = driver_statement(lambda d: _binding_rows(*_chat(bindings)).order_by(
        bindings.c.updated_at.desc(), bindings.c.thread_id), "p", "chat")
    LINKED = driver_statement(lambda d: sa.select(const(1)).select_from(bindings).where(
        bindings.c.session_id == bp("sid")), "sid")
    #: Bind a topic; re-pointing it to another session resets ``linked_at``.
    BIND = driver_statement(_bind, *("v_" + c for c in V3_COLUMNS[BINDINGS]))
    DELETE_BINDING = driver_statement(lambda d: sa.delete(bindings).where(*_topic()),
                                      "p", "chat", "thread")
    CHAT_HAS_BINDINGS = driver_statement(lambda d: sa.select(const(1)).select_from(
        bindings).where(*_chat(bindings)), "p", "chat")

    #: Unbound sessions of a user, with / without the bindings table.
    UNLINKED_BOUND = _unlinked(True)
    UNLINKED_ANY = _unlinked(False)

    @cached_property
    def UNLINKED(self) -> dict[bool, str]:
        """:data:`UNLINKED_BOUND` / :data:`UNLINKED_ANY` by "the bindings table exists"."""
        return {True: self.UNLINKED_BOUND, False: self.UNLINKED_ANY}

    @cached_property
    def LEGACY_COUNT(self) -> dict[str, str]:
        """The row count of each of :data:`TABLES` by name."""
        return {MODE: self.MODE_COUNT, BINDINGS: self.BINDINGS_COUNT}

    def __init__(self, d: str) -> None:
        super().__init__(d)
        pg = d == "postgresql"
        r = self.render
        # not Core: a transaction-scoped advisory lock (a server function, no table)
        self.ADVISORY_LOCK = (r("SELECT pg_advisory_xact_lock(hashtextextended(?, 0))")
                              if pg else None)


#: The TelegramStatements of a dialect (built once per process).
for_dialect = TelegramStatements.for_dialect
