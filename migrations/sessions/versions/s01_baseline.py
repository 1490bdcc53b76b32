"""s01 — baseline of the session store: create the core shape, or adopt an upstream state.db.

Fresh file: the six core tables, the docs/sessions.md §2.5 indexes and the current-layout FTS objects (two
views, two external-content FTS5 tables, six narrowed triggers) — identical to
``metadata.create_all()`` followed by the canonical fragments of ``sessions/sql.py``.

Existing upstream file (adoption, docs/sessions.md §2.8): every object is created with
IF NOT EXISTS, missing core columns are appended with their full canonical expression, and
nothing existing is dropped, renamed or rewritten. An existing FTS layout (current or
legacy inline) is left to the store's FTS checks, which run right after this revision in
the same transaction (narrowing of broad update triggers, missing-trigger repair).

PostgreSQL (same revision, dialect-specific operations only where the engines differ): the
same tables through ``hermes_data.types`` (BIGINT / DOUBLE PRECISION, ``messages.id`` a
bigserial), the same indexes (partial ones with their WHERE, the expression index with
PostgreSQL's parenthesised expression), a non-throwing JSON marker function, and full-text
search as indexes instead of FTS5 objects and triggers: a GIN index over the ``tsvector`` of
the same text FTS5 indexes (tool rows cut to 8192 characters, plus ``tool_name`` and
``tool_calls``) and a ``pg_trgm`` GIN index over non-tool ``content`` for substring and CJK
search. Both are maintained by PostgreSQL itself, so there is nothing to trigger or rebuild.

Revision ID: s01_baseline
Revises:
"""

import logging

import sqlalchemy as sa
from alembic import op

from hermes_data.errors import ForwardOnlyError
from hermes_data.types import INTEGER, REAL, TEXT

revision = "s01_baseline"
down_revision = None
branch_labels = None
depends_on = None

log = logging.getLogger("hermes_data.sessions.migrations")

# Frozen DDL of its time: this file never imports the head metadata.


def _zero():
    return sa.text("0")


def _tables():
    """The core tables as of this revision, in dependency order."""
    md = sa.MetaData()
    compression_locks = sa.Table(
        "compression_locks", md,
        sa.Column("session_id", TEXT, primary_key=True, nullable=True),
        sa.Column("holder", TEXT, nullable=False),
        sa.Column("acquired_at", REAL, nullable=False),
        sa.Column("expires_at", REAL, nullable=False),
    )
    session_turn_leases = sa.Table(
        "session_turn_leases", md,
        sa.Column("conversation_id", TEXT, primary_key=True, nullable=True),
        sa.Column("holder", TEXT, nullable=False),
        sa.Column("acquired_at", REAL, nullable=False),
        sa.Column("expires_at", REAL, nullable=False),
    )
    state_meta = sa.Table(
        "state_meta", md,
        sa.Column("key", TEXT, primary_key=True, nullable=True),
        sa.Column("value", TEXT),
    )
    system_prompts = sa.Table(
        "system_prompts", md,
        sa.Column("hash", TEXT, primary_key=True, nullable=True),
        sa.Column("prompt", TEXT, nullable=False),
    )
    sessions = sa.Table(
        "sessions", md,
        sa.Column("id", TEXT, primary_key=True, nullable=True),
        sa.Column("source", TEXT, nullable=False),
        sa.Column("user_id", TEXT),
        sa.Column("session_key", TEXT),
        sa.Column("chat_id", TEXT),
        sa.Column("chat_type", TEXT),
        sa.Column("thread_id", TEXT),
        sa.Column("display_name", TEXT),
        sa.Column("origin_json", TEXT),
        sa.Column("model", TEXT),
        sa.Column("model_config", TEXT),
        sa.Column("system_prompt", TEXT),
        sa.Column("system_prompt_hash", TEXT, sa.ForeignKey("system_prompts.hash")),
        sa.Column("parent_session_id", TEXT, sa.ForeignKey("sessions.id")),
        sa.Column("started_at", REAL, nullable=False),
        sa.Column("ended_at", REAL),
        sa.Column("end_reason", TEXT),
        sa.Column("message_count", INTEGER, server_default=_zero()),
        sa.Column("tool_call_count", INTEGER, server_default=_zero()),
        sa.Column("input_tokens", INTEGER, server_default=_zero()),
        sa.Column("output_tokens", INTEGER, server_default=_zero()),
        sa.Column("cwd", TEXT),
        sa.Column("git_branch", TEXT),
        sa.Column("git_repo_root", TEXT),
        sa.Column("billing_provider", TEXT),
        sa.Column("estimated_cost_usd", REAL),
        sa.Column("actual_cost_usd", REAL),
        sa.Column("title", TEXT),
        sa.Column("title_source", TEXT),
        sa.Column("last_activity_at", REAL),
        sa.Column("profile_name", TEXT),
        sa.Column("archived", INTEGER, nullable=False, server_default=_zero()),
        sa.Column("pinned", INTEGER, nullable=False, server_default=_zero()),
        sa.Column("hidden", INTEGER, nullable=False, server_default=_zero()),
        sa.Column("last_read_at", REAL),
    )
    messages = sa.Table(
        "messages", md,
        sa.Column("id", INTEGER, primary_key=True),
        sa.Column("session_id", TEXT, sa.ForeignKey("sessions.id"), nullable=False),
        sa.Column("role", TEXT, nullable=False),
        sa.Column("content", TEXT),
        sa.Column("tool_call_id", TEXT),
        sa.Column("tool_calls", TEXT),
        sa.Column("tool_name", TEXT),
        sa.Column("timestamp", REAL, nullable=False),
        sa.Column("token_count", INTEGER),
        sa.Column("finish_reason", TEXT),
        sa.Column("reasoning", TEXT),
        sa.Column("reasoning_content", TEXT),
        sa.Column("reasoning_details", TEXT),
        sa.Column("codex_reasoning_items", TEXT),
        sa.Column("codex_message_items", TEXT),
        sa.Column("platform_message_id", TEXT),
        sa.Column("observed", INTEGER, server_default=_zero()),
        sa.Column("_compressed_summary", INTEGER, nullable=False, server_default=_zero()),
        sa.Column("effect_disposition", TEXT),
        sa.Column("active", INTEGER, nullable=False, server_default=sa.text("1")),
        sa.Column("compacted", INTEGER, nullable=False, server_default=_zero()),
        sa.Column("api_content", TEXT),
        sa.Column("display_kind", TEXT),
        sa.Column("display_metadata", TEXT),
        sqlite_autoincrement=True,
    )
    return [compression_locks, session_turn_leases, state_meta, system_prompts, sessions, messages]


# (name, table, columns, unique, where) — expression columns are written verbatim.
_INDEXES = (
    ("idx_compression_locks_expires", "compression_locks", ["expires_at"], False, None),
    ("idx_session_turn_leases_expires", "session_turn_leases", ["expires_at"], False, None),
    ("idx_sessions_source", "sessions", ["source"], False, None),
    ("idx_sessions_source_id", "sessions", ["source", "id"], False, None),
    ("idx_sessions_parent", "sessions", ["parent_session_id"], False, None),
    ("idx_sessions_started", "sessions", ["started_at DESC"], False, None),
    ("idx_sessions_session_key", "sessions", ["session_key", "started_at DESC"], False, None),
    ("idx_sessions_system_prompt_hash", "sessions", ["system_prompt_hash"], False, None),
    ("idx_sessions_effective_activity", "sessions",
     ["COALESCE(last_activity_at, started_at) DESC", "started_at DESC"], False, None),
    ("idx_sessions_title_unique", "sessions", ["title"], True, "title IS NOT NULL"),
    ("idx_messages_session", "messages", ["session_id", "timestamp"], False, None),
    ("idx_messages_session_id", "messages", ["session_id", "id"], False, None),
    ("idx_messages_session_active", "messages", ["session_id", "active", "timestamp"], False, None),
    ("idx_messages_active_null", "messages", ["active"], False, "active IS NULL"),
)

# Columns an ALTER cannot add (NOT NULL without a default): a file lacking one is not adoptable.
_REQUIRED = {
    "sessions": ("id", "source", "started_at"),
    "messages": ("id", "session_id", "role", "timestamp"),
    "state_meta": ("key",),
    "system_prompts": ("hash", "prompt"),
    "compression_locks": ("session_id", "holder", "acquired_at", "expires_at"),
    "session_turn_leases": ("conversation_id", "holder", "acquired_at", "expires_at"),
}

# Current-layout FTS objects (storage version 3) exactly as this revision creates them.
_FTS_BASE = (
    ('messages_fts_src', "CREATE VIEW IF NOT EXISTS messages_fts_src AS SELECT id, CASE WHEN messages.role = 'tool' THEN substr(COALESCE(messages.content, ''), 1, 8192) ELSE messages.content END AS content, tool_name, tool_calls FROM messages"),
    ('messages_fts', "CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts USING fts5(content, tool_name, tool_calls, content='messages_fts_src', content_rowid='id')"),
    ('messages_fts_insert', "CREATE TRIGGER IF NOT EXISTS messages_fts_insert AFTER INSERT ON messages WHEN (new.id > COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta WHERE key = 'fts_rebuild_high_water'), -1) OR new.id <= COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta WHERE key = 'fts_rebuild_progress'), -1)) BEGIN INSERT INTO messages_fts(rowid, content, tool_name, tool_calls) VALUES (new.id, CASE WHEN new.role = 'tool' THEN substr(COALESCE(new.content, ''), 1, 8192) ELSE new.content END, new.tool_name, new.tool_calls); END"),
    ('messages_fts_delete', "CREATE TRIGGER IF NOT EXISTS messages_fts_delete AFTER DELETE ON messages WHEN (old.id > COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta WHERE key = 'fts_rebuild_high_water'), -1) OR old.id <= COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta WHERE key = 'fts_rebuild_progress'), -1)) BEGIN INSERT INTO messages_fts(messages_fts, rowid, content, tool_name, tool_calls) VALUES ('delete', old.id, CASE WHEN old.role = 'tool' THEN substr(COALESCE(old.content, ''), 1, 8192) ELSE old.content END, old.tool_name, old.tool_calls); END"),
    ('messages_fts_update', "CREATE TRIGGER IF NOT EXISTS messages_fts_update AFTER UPDATE OF content, tool_name, tool_calls, role ON messages WHEN (old.content IS NOT new.content OR old.tool_name IS NOT new.tool_name OR old.tool_calls IS NOT new.tool_calls OR old.role IS NOT new.role) AND (old.id > COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta WHERE key = 'fts_rebuild_high_water'), -1) OR old.id <= COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta WHERE key = 'fts_rebuild_progress'), -1)) BEGIN INSERT INTO messages_fts(messages_fts, rowid, content, tool_name, tool_calls) VALUES ('delete', old.id, CASE WHEN old.role = 'tool' THEN substr(COALESCE(old.content, ''), 1, 8192) ELSE old.content END, old.tool_name, old.tool_calls); INSERT INTO messages_fts(rowid, content, tool_name, tool_calls) VALUES (new.id, CASE WHEN new.role = 'tool' THEN substr(COALESCE(new.content, ''), 1, 8192) ELSE new.content END, new.tool_name, new.tool_calls); END"),
)
_FTS_TRIGRAM = (
    ('messages_fts_trigram_src', "CREATE VIEW IF NOT EXISTS messages_fts_trigram_src AS SELECT m.id, m.role, m.content, m.tool_name FROM messages m JOIN sessions s ON s.id = m.session_id WHERE m.role <> 'tool' AND s.source NOT IN ('cron', 'subagent') AND json_extract(CASE WHEN json_valid(s.model_config) THEN s.model_config ELSE '{}' END, '$._delegate_from') IS NULL"),
    ('messages_fts_trigram', "CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts_trigram USING fts5(content, tool_name, content='messages_fts_trigram_src', content_rowid='id', tokenize='trigram')"),
    ('messages_fts_trigram_insert', "CREATE TRIGGER IF NOT EXISTS messages_fts_trigram_insert AFTER INSERT ON messages WHEN new.role <> 'tool' AND EXISTS (SELECT 1 FROM sessions WHERE id = new.session_id AND sessions.source NOT IN ('cron', 'subagent') AND json_extract(CASE WHEN json_valid(sessions.model_config) THEN sessions.model_config ELSE '{}' END, '$._delegate_from') IS NULL) AND (new.id > COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta WHERE key = 'fts_rebuild_high_water'), -1) OR new.id <= COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta WHERE key = 'fts_rebuild_progress'), -1)) BEGIN INSERT INTO messages_fts_trigram(rowid, content, tool_name) VALUES (new.id, new.content, new.tool_name); END"),
    ('messages_fts_trigram_delete', "CREATE TRIGGER IF NOT EXISTS messages_fts_trigram_delete AFTER DELETE ON messages WHEN old.role <> 'tool' AND EXISTS (SELECT 1 FROM sessions WHERE id = old.session_id AND sessions.source NOT IN ('cron', 'subagent') AND json_extract(CASE WHEN json_valid(sessions.model_config) THEN sessions.model_config ELSE '{}' END, '$._delegate_from') IS NULL) AND (old.id > COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta WHERE key = 'fts_rebuild_high_water'), -1) OR old.id <= COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta WHERE key = 'fts_rebuild_progress'), -1)) BEGIN INSERT INTO messages_fts_trigram(messages_fts_trigram, rowid, content, tool_name) VALUES ('delete', old.id, old.content, old.tool_name); END"),
    ('messages_fts_trigram_update', "CREATE TRIGGER IF NOT EXISTS messages_fts_trigram_update AFTER UPDATE OF content, tool_name, role ON messages WHEN (old.content IS NOT new.content OR old.tool_name IS NOT new.tool_name OR old.role IS NOT new.role) AND (old.id > COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta WHERE key = 'fts_rebuild_high_water'), -1) OR old.id <= COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta WHERE key = 'fts_rebuild_progress'), -1)) BEGIN INSERT INTO messages_fts_trigram(messages_fts_trigram, rowid, content, tool_name) SELECT 'delete', old.id, old.content, old.tool_name WHERE old.role <> 'tool' AND EXISTS (SELECT 1 FROM sessions WHERE id = old.session_id AND sessions.source NOT IN ('cron', 'subagent') AND json_extract(CASE WHEN json_valid(sessions.model_config) THEN sessions.model_config ELSE '{}' END, '$._delegate_from') IS NULL); INSERT INTO messages_fts_trigram(rowid, content, tool_name) SELECT new.id, new.content, new.tool_name WHERE new.role <> 'tool' AND EXISTS (SELECT 1 FROM sessions WHERE id = new.session_id AND sessions.source NOT IN ('cron', 'subagent') AND json_extract(CASE WHEN json_valid(sessions.model_config) THEN sessions.model_config ELSE '{}' END, '$._delegate_from') IS NULL); END"),
)


def _existing(bind) -> dict[str, str]:
    return {r[0]: r[1] for r in bind.exec_driver_sql(
        "SELECT name, type FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'").fetchall()}


def _column_ddl(bind, col: sa.Column) -> str:
    ddl = str(sa.schema.CreateColumn(col).compile(dialect=bind.dialect)).strip()
    for fk in col.foreign_keys:
        ddl += f" REFERENCES {fk.column.table.name}({fk.column.name})"
    return ddl


def _add_missing_columns(bind, table: sa.Table) -> None:
    present = {r[1] for r in bind.exec_driver_sql(f'PRAGMA table_info("{table.name}")')}
    lacking = [c for c in _REQUIRED[table.name] if c not in present]
    if lacking:
        from hermes_data.errors import AdoptionError
        raise AdoptionError(
            f"{table.name} lacks the required column(s) {', '.join(lacking)}; it cannot be "
            "adopted in place (no ALTER can add a NOT NULL column without a default)")
    for col in table.columns:
        if col.name in present:
            continue
        ddl = _column_ddl(bind, col)
        try:
            with bind.begin_nested():
                bind.exec_driver_sql(f'ALTER TABLE "{table.name}" ADD COLUMN {ddl}')
            log.info("added column %s.%s", table.name, col.name)
        except sa.exc.OperationalError as exc:
            msg = str(exc).lower()
            if "duplicate column" in msg:
                log.debug("column %s.%s added by a sibling", table.name, col.name)
            elif "locked" in msg or "busy" in msg:
                raise
            else:
                log.warning("could not add column %s.%s (%s); the store stays behind",
                            table.name, col.name, exc)


def _dedupe_titles(bind) -> None:
    # Keep the newest (largest rowid) holder of each duplicated title; clear the others.
    n = bind.exec_driver_sql(
        "UPDATE sessions SET title = NULL WHERE title IS NOT NULL AND rowid NOT IN "
        "(SELECT MAX(rowid) FROM sessions WHERE title IS NOT NULL GROUP BY title)").rowcount
    if n:
        log.warning("cleared %d duplicate session title(s) before creating "
                    "idx_sessions_title_unique (the newest holder keeps each title)", n)


# PostgreSQL twins (frozen with this revision).
_PG_JSON_FUNCTION = (
    "CREATE OR REPLACE FUNCTION hermes_json_get(doc text, key text) RETURNS text "
    "LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $fn$ BEGIN "
    "IF doc IS NULL OR strpos(doc, key) = 0 THEN RETURN NULL; END IF; "
    "RETURN doc::jsonb ->> key; "
    "EXCEPTION WHEN others THEN RETURN NULL; END $fn$"
)
_PG_JSON_OBJECT_FUNCTION = (
    "CREATE OR REPLACE FUNCTION hermes_json_object(doc text) RETURNS jsonb "
    "LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $fn$ DECLARE v jsonb; BEGIN "
    "v := doc::jsonb; IF jsonb_typeof(v) = 'object' THEN RETURN v; END IF; RETURN '{}'::jsonb; "
    "EXCEPTION WHEN others THEN RETURN '{}'::jsonb; END $fn$"
)
_PG_FTS = (
    ("messages_fts_tsv",
     "CREATE INDEX IF NOT EXISTS messages_fts_tsv ON messages USING gin ("
     "to_tsvector('simple'::regconfig, CASE WHEN role = 'tool' THEN "
     "substr(COALESCE(content, ''), 1, 8192) ELSE COALESCE(content, '') END "
     "|| ' ' || COALESCE(tool_name, '') || ' ' || COALESCE(tool_calls, '')))"),
    ("messages_fts_trgm",
     "CREATE INDEX IF NOT EXISTS messages_fts_trgm ON messages USING gin "
     "(content gin_trgm_ops) WHERE role <> 'tool'"),
)


def _upgrade_postgresql(bind) -> None:
    for table in _tables():
        bind.execute(sa.schema.CreateTable(table, if_not_exists=True))
    for name, table, cols, unique, where in _INDEXES:
        bind.exec_driver_sql(
            f"CREATE {'UNIQUE ' if unique else ''}INDEX IF NOT EXISTS {name} ON {table} "
            f"({', '.join(cols)})"
            + (f" WHERE {where}" if where else ""))
    bind.exec_driver_sql(_PG_JSON_FUNCTION)
    bind.exec_driver_sql(_PG_JSON_OBJECT_FUNCTION)
    try:
        with bind.begin_nested():
            bind.exec_driver_sql("CREATE EXTENSION IF NOT EXISTS pg_trgm")
        trigram = True
    except sa.exc.DBAPIError as exc:
        trigram = False
        log.warning("pg_trgm is not available (%s): substring/CJK search scans without an "
                    "index; install postgresql-contrib and rerun the upgrade", exc.orig)
    for name, ddl in _PG_FTS:
        if name == "messages_fts_trgm" and not trigram:
            continue
        bind.exec_driver_sql(ddl)


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        _upgrade_postgresql(bind)
        return
    existing = _existing(bind)
    for table in _tables():
        if table.name in existing:
            _add_missing_columns(bind, table)
        else:
            bind.execute(sa.schema.CreateTable(table, if_not_exists=True))
    existing = _existing(bind)
    for name, table, cols, unique, where in _INDEXES:
        if name in existing:
            continue
        ddl = (f"CREATE {'UNIQUE ' if unique else ''}INDEX IF NOT EXISTS {name} "
               f"ON {table} ({', '.join(cols)})" + (f" WHERE {where}" if where else ""))
        if name == "idx_sessions_title_unique":
            try:
                with bind.begin_nested():
                    _dedupe_titles(bind)
                    bind.exec_driver_sql(ddl)
            except sa.exc.OperationalError as exc:
                if "locked" in str(exc).lower() or "busy" in str(exc).lower():
                    raise
                log.warning("could not create idx_sessions_title_unique (%s); continuing", exc)
            continue
        bind.exec_driver_sql(ddl)
    if "messages_fts" not in existing:
        # No FTS yet (fresh file, or an upstream file from before full-text search). An
        # existing layout — current or legacy inline — is never replaced here.
        from hermes_data.sessions.storage.opening import capabilities
        caps = capabilities(bind)
        if caps.fts5:
            objects = _FTS_BASE + (_FTS_TRIGRAM if caps.trigram else ())
            for name, ddl in objects:
                if name not in existing:
                    bind.exec_driver_sql(ddl)
            if bind.exec_driver_sql("SELECT 1 FROM messages LIMIT 1").first():
                bind.exec_driver_sql("INSERT INTO messages_fts(messages_fts) VALUES ('rebuild')")
                if caps.trigram:
                    bind.exec_driver_sql(
                        "INSERT INTO messages_fts_trigram(messages_fts_trigram) VALUES ('rebuild')")
        else:
            log.warning("SQLite has no FTS5 module: full-text search disabled, search uses LIKE")


def downgrade() -> None:
    raise ForwardOnlyError(f"revision {revision} cannot be downgraded: the history is forward-only")
