"""Alembic environment of the session store: everything runs in hermes_data.migrate.runner.

The one thing said here is what Alembic's comparison (``alembic -n sessions check``,
autogenerate, pytest-alembic's ``model_definitions_match_ddl``) must not report, object by
object, and why. It compares the live database with ``schema.head_metadata(<dialect>)``;
FTS5 virtual and shadow tables are not ordinary tables and are never compared
(``StoreSpec.not_ordinary_table``). docs/alembic.md "What `alembic check` compares" lists the
same exceptions.
"""

from alembic import context

from hermes_data.migrate.runner import run_env
from hermes_data.sessions.storage.adoption import (extension_installed, same_pg_index,
                                                   same_sqlite_foreign_key)

#: PostgreSQL indexes whose reflection Alembic cannot compare with the declaration, so the
#: hook compares PostgreSQL's own definition instead (``same_pg_index``):
#: * ``messages_fts_fold`` — the server prints its expression with added parentheses, casts
#:   and line breaks, which Alembic's expression clean-up does not remove;
#: * ``idx_sessions_cron_id_c`` — reflection reports its key ``id COLLATE "C"`` as plain
#:   ``id`` (the collation is dropped), so Alembic would see another key.
RE_RENDERED_INDEXES = ("messages_fts_fold", "idx_sessions_cron_id_c")
#: SQLite tables whose frozen DDL declares a foreign key inline (``session_id TEXT NOT NULL
#: REFERENCES sessions(id) ON DELETE CASCADE``, gateway.telegram_sql's v3 DDL): SQLAlchemy's
#: reflection reads ``ON DELETE`` only from a table-level ``FOREIGN KEY`` clause, so it reports
#: the key without its cascade; the hook compares ``PRAGMA foreign_key_list`` instead
#: (``same_sqlite_foreign_key``).
INLINE_FOREIGN_KEY_TABLES = ("telegram_dm_topic_bindings",)


def include_object(obj, name, type_, reflected, compare_to) -> bool:
    """Alembic's ``include_object``: False for a difference that is not drift."""
    conn = context.get_bind()
    absent = not reflected and compare_to is None  # declared, not in the database
    if type_ == "table" and absent and conn.dialect.name in obj.info.get("optional_on", ()):
        # SQLite: the CJK-bigram documents and queue exist only while the index is on and
        # FTS5 works; the Telegram DM-topic tables only after the user's opt-in.
        return False
    if type_ == "index" and absent and obj.info.get("requires_extension") \
            and not extension_installed(conn, obj.info["requires_extension"]):
        # PostgreSQL without pg_trgm: s01/s10 skip the trigram indexes (and say so).
        return False
    if type_ == "index" and compare_to is not None and not reflected \
            and name in RE_RENDERED_INDEXES:
        # Both sides present: compared on the server's definition (see above).
        return not same_pg_index(conn, obj)
    if type_ == "foreign_key_constraint" and conn.dialect.name == "sqlite" \
            and obj.table.name in INLINE_FOREIGN_KEY_TABLES:
        # Reported as a removed (reflected) plus an added (declared) key: neither is drift
        # when SQLite enforces the declared one (see above).
        return not same_sqlite_foreign_key(conn, obj)
    return True


run_env("sessions", include_object=include_object)
