"""Statements of Telegram DM topic mode (docs/sessions-gateway.md §2.5, §3.8).

On SQLite the two tables are the user's opt-in: ``apply_telegram_topic_migration`` creates
or upgrades them with the frozen v3 DDL below (these texts never change; a later shape needs
a new upgrade step). On PostgreSQL revision ``s06_gateway`` created them.
"""

from __future__ import annotations

from hermes_data.sessions.sql.core import SESSION_ROW_COLS
from hermes_data.sessions.sql.ddl import checked_drop
from hermes_data.sessions.sql.dialect import Statements
from hermes_data.sessions.sql.predicates import last_active, preview_sql

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
    return (f"INSERT INTO {table}_new (profile_name, {cols}) SELECT 'default', "
            f"{', '.join('o.' + c for c in columns)} FROM {table} o{where}")


_BINDING_COLS = ", ".join(V3_COLUMNS[BINDINGS])


class TelegramStatements(Statements):
    """The Telegram statements of one dialect."""

    def __init__(self, d: str) -> None:
        super().__init__(d)
        pg = d == "postgresql"
        r = self.render
        self.ADVISORY_LOCK = (r("SELECT pg_advisory_xact_lock(hashtextextended(?, 0))")
                              if pg else None)
        self.DEDUPE_COUNT = (f"SELECT COUNT(*) FROM {BINDINGS} b WHERE EXISTS (SELECT 1 FROM "
                             f"{BINDINGS} n WHERE n.session_id = b.session_id AND "
                             "(n.updated_at > b.updated_at OR (n.updated_at = b.updated_at "
                             "AND n.rowid > b.rowid)))")
        self.DEDUPE = (f"DELETE FROM {BINDINGS} WHERE rowid IN (SELECT b.rowid FROM {BINDINGS} "
                       f"b WHERE EXISTS (SELECT 1 FROM {BINDINGS} n WHERE n.session_id = "
                       "b.session_id AND (n.updated_at > b.updated_at OR (n.updated_at = "
                       "b.updated_at AND n.rowid > b.rowid))))")
        self.BINDINGS_COUNT = f"SELECT COUNT(*) FROM {BINDINGS}"
        self.LEGACY_COUNT = "SELECT COUNT(*) FROM {t}"
        self.META_GET = r("SELECT value FROM state_meta WHERE key = ?")
        self.META_SET = r("INSERT INTO state_meta (key, value) VALUES (?, ?) "
                          "ON CONFLICT (key) DO UPDATE SET value = excluded.value")
        self.ENABLE = r(
            f"INSERT INTO {MODE} (profile_name, chat_id, user_id, enabled, activated_at, "
            "updated_at, has_topics_enabled, allows_users_to_create_topics, "
            "capability_checked_at) VALUES (?, ?, ?, 1, ?, ?, ?, ?, ?) ON CONFLICT "
            "(profile_name, chat_id) DO UPDATE SET user_id = excluded.user_id, enabled = 1, "
            "updated_at = excluded.updated_at, has_topics_enabled = excluded.has_topics_enabled, "
            "allows_users_to_create_topics = excluded.allows_users_to_create_topics, "
            "capability_checked_at = excluded.capability_checked_at")
        self.DISABLE = r(f"UPDATE {MODE} SET enabled = 0, updated_at = ? WHERE profile_name = ? "
                         "AND chat_id = ?")
        self.CLEAR_CHAT = r(f"DELETE FROM {BINDINGS} WHERE profile_name = ? AND chat_id = ?")
        self.IS_ENABLED = r(f"SELECT 1 FROM {MODE} WHERE profile_name = ? AND chat_id = ? AND "
                            "user_id = ? AND enabled <> 0")
        sel = f"SELECT {_BINDING_COLS} FROM {BINDINGS}"
        self.BINDING = r(f"{sel} WHERE profile_name = ? AND chat_id = ? AND thread_id = ?")
        self.BINDING_BY_SESSION = r(f"{sel} WHERE session_id = ?")
        self.BINDINGS_FOR_CHAT = r(f"{sel} WHERE profile_name = ? AND chat_id = ? "
                                   "ORDER BY updated_at DESC, thread_id")
        self.LINKED = r(f"SELECT 1 FROM {BINDINGS} WHERE session_id = ?")
        self.BIND = r(
            f"INSERT INTO {BINDINGS} ({_BINDING_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (profile_name, chat_id, thread_id) DO UPDATE SET "
            "user_id = excluded.user_id, session_key = excluded.session_key, "
            f"linked_at = CASE WHEN {BINDINGS}.session_id = excluded.session_id THEN "
            f"{BINDINGS}.linked_at ELSE excluded.linked_at END, "
            "session_id = excluded.session_id, managed_mode = excluded.managed_mode, "
            "updated_at = excluded.updated_at")
        self.DELETE_BINDING = r(f"DELETE FROM {BINDINGS} WHERE profile_name = ? AND "
                                "chat_id = ? AND thread_id = ?")
        self.CHAT_HAS_BINDINGS = r(f"SELECT 1 FROM {BINDINGS} WHERE profile_name = ? AND "
                                   "chat_id = ?")
        nulls = " NULLS LAST" if pg else ""
        unlinked = (
            f"SELECT {', '.join('s.' + c for c in SESSION_ROW_COLS)}, "
            f"COALESCE(sp.prompt, s.system_prompt), {preview_sql('s', d)}, {last_active('s')} "
            "AS la FROM sessions s LEFT JOIN system_prompts sp ON sp.hash = "
            "s.system_prompt_hash WHERE s.source = 'telegram' AND s.user_id = ? AND "
            "COALESCE(NULLIF(TRIM(s.profile_name), ''), 'default') = ? AND NOT "
            "(s.ended_at IS NOT NULL AND COALESCE(s.end_reason, '') = 'compression'){b} "
            f"ORDER BY la DESC{nulls}, s.started_at DESC, s.id DESC LIMIT ?")
        #: Unbound sessions of a user (with / without the bindings table).
        self.UNLINKED = {True: r(unlinked.format(
            b=f" AND NOT EXISTS (SELECT 1 FROM {BINDINGS} ub WHERE ub.session_id = s.id)")),
            False: r(unlinked.format(b=""))}


#: The TelegramStatements of a dialect (built once per process).
for_dialect = TelegramStatements.for_dialect
