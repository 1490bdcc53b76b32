"""Head shape of the session store (``state.db``): the single schema authority for its tables.

The core columns of spec sessions.md §2 are declared, plus the agent turn API's columns and
tables (sessions-ext-agent.md §2, revision ``s03_agent_turn``) and the coordination columns
(sessions-ext-coordination.md §2.1, revision ``s04_coordination``). Upstream databases carry
more columns and tables; the store tolerates them (explicit column lists everywhere) and
never drops them. Column order follows the spec tables, which is also the order a fresh
``alembic -n sessions upgrade head`` produces; adopted files keep their upstream order and
get missing core columns appended (order is not part of this store's contract, §2.8).

The full-text objects (two views, two FTS5 tables, six triggers) are not expressible in Core;
they are named ``text()`` fragments in :mod:`hermes_data.sessions.sql`.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.schema import CreateIndex

from ..types import INTEGER, REAL, TEXT

metadata = sa.MetaData()

# TEXT primary keys are declared nullable on purpose: upstream wrote ``id TEXT PRIMARY KEY``,
# which PRAGMA table_info reports as notnull=0, and an adopted file must match the head.


def _zero() -> sa.TextClause:
    return sa.text("0")


system_prompts = sa.Table(
    "system_prompts", metadata,
    sa.Column("hash", TEXT, primary_key=True, nullable=True),
    sa.Column("prompt", TEXT, nullable=False),
)

sessions = sa.Table(
    "sessions", metadata,
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
    # Agent turn API (sessions-ext-agent §2.1, revision s03_agent_turn): appended, in the
    # order that revision adds them; upstream files keep their own order.
    sa.Column("cache_read_tokens", INTEGER, server_default=_zero()),
    sa.Column("cache_write_tokens", INTEGER, server_default=_zero()),
    sa.Column("reasoning_tokens", INTEGER, server_default=_zero()),
    sa.Column("api_call_count", INTEGER, server_default=_zero()),
    sa.Column("billing_base_url", TEXT),
    sa.Column("billing_mode", TEXT),
    sa.Column("cost_status", TEXT),
    sa.Column("cost_source", TEXT),
    sa.Column("pricing_version", TEXT),
    sa.Column("last_activity_description", TEXT),
    sa.Column("last_activity_provenance", TEXT),
    sa.Column("git_metadata_generation", INTEGER, nullable=False, server_default=_zero()),
    sa.Column("tool_names", TEXT),
    sa.Column("expiry_finalized", INTEGER, server_default=_zero()),
    # Coordination (sessions-ext-coordination §2.1, revision s04_coordination).
    sa.Column("compression_failure_cooldown_until", REAL),
    sa.Column("compression_failure_error", TEXT),
    sa.Column("compression_fallback_streak", INTEGER, nullable=False, server_default=_zero()),
    sa.Column("compression_ineffective_count", INTEGER, nullable=False, server_default=_zero()),
    sa.Column("compression_recovery_deadline", REAL),
    sa.Column("compression_overload_streak", INTEGER, nullable=False, server_default=_zero()),
    sa.Column("rewind_count", INTEGER, nullable=False, server_default=_zero()),
)

messages = sa.Table(
    "messages", metadata,
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
    # Ids are never reused after deletes: the FTS indexes and keyset paging key on them.
    sqlite_autoincrement=True,
)

state_meta = sa.Table(
    "state_meta", metadata,
    sa.Column("key", TEXT, primary_key=True, nullable=True),
    sa.Column("value", TEXT),
)

compression_locks = sa.Table(
    "compression_locks", metadata,
    sa.Column("session_id", TEXT, primary_key=True, nullable=True),
    sa.Column("holder", TEXT, nullable=False),
    sa.Column("acquired_at", REAL, nullable=False),
    sa.Column("expires_at", REAL, nullable=False),
)

session_turn_leases = sa.Table(
    "session_turn_leases", metadata,
    sa.Column("conversation_id", TEXT, primary_key=True, nullable=True),
    sa.Column("holder", TEXT, nullable=False),
    sa.Column("acquired_at", REAL, nullable=False),
    sa.Column("expires_at", REAL, nullable=False),
)

_EMPTY = sa.text("''")

# Per-session, per-route, per-task accounting (sessions-ext-agent §2.2). Rows go only through
# the foreign key's cascade when their session is deleted.
session_model_usage = sa.Table(
    "session_model_usage", metadata,
    sa.Column("session_id", TEXT, sa.ForeignKey("sessions.id", ondelete="CASCADE"),
              primary_key=True, nullable=False),
    sa.Column("model", TEXT, primary_key=True, nullable=False),
    sa.Column("billing_provider", TEXT, primary_key=True, nullable=False, server_default=_EMPTY),
    sa.Column("billing_base_url", TEXT, primary_key=True, nullable=False, server_default=_EMPTY),
    sa.Column("billing_mode", TEXT, primary_key=True, nullable=False, server_default=_EMPTY),
    sa.Column("task", TEXT, primary_key=True, nullable=False, server_default=_EMPTY),
    sa.Column("api_call_count", INTEGER, nullable=False, server_default=_zero()),
    sa.Column("input_tokens", INTEGER, nullable=False, server_default=_zero()),
    sa.Column("output_tokens", INTEGER, nullable=False, server_default=_zero()),
    sa.Column("cache_read_tokens", INTEGER, nullable=False, server_default=_zero()),
    sa.Column("cache_write_tokens", INTEGER, nullable=False, server_default=_zero()),
    sa.Column("reasoning_tokens", INTEGER, nullable=False, server_default=_zero()),
    sa.Column("estimated_cost_usd", REAL, nullable=False, server_default=_zero()),
    sa.Column("actual_cost_usd", REAL, nullable=False, server_default=_zero()),
    sa.Column("cost_status", TEXT),
    sa.Column("cost_source", TEXT),
    sa.Column("first_seen", REAL),
    sa.Column("last_seen", REAL),
)

# Monotonic reset generation per routing peer (sessions-ext-agent §2.3): never deleted.
conversation_generations = sa.Table(
    "conversation_generations", metadata,
    sa.Column("source", TEXT, primary_key=True, nullable=False),
    sa.Column("session_key", TEXT, primary_key=True, nullable=False),
    sa.Column("generation", INTEGER, nullable=False, server_default=_zero()),
)

# §2.5 indexes. Expression indexes are written as text so SQLite stores exactly this form.
# A partial index declares its predicate once, as ``sqlite_where``; PostgreSQL's DDL gets the
# same predicate when it is compiled (``_pg_partial_where``). A ``postgresql_*`` keyword here
# would import the PostgreSQL dialect (SQLAlchemy validates a dialect keyword by loading its
# dialect) in every SQLite process (issue 14).


@compiles(CreateIndex, "postgresql")
def _pg_partial_where(create: CreateIndex, compiler: Any, **kw: Any) -> str:
    index = create.element
    where = index.dialect_options["sqlite"]["where"]
    if where is not None and index.dialect_options["postgresql"]["where"] is None:
        index.dialect_options["postgresql"]["where"] = where
    return str(compiler.visit_create_index(create, **kw))


sa.Index("idx_sessions_source", sessions.c.source)
sa.Index("idx_sessions_source_id", sessions.c.source, sessions.c.id)
sa.Index("idx_sessions_parent", sessions.c.parent_session_id)
sa.Index("idx_sessions_started", sessions.c.started_at.desc())
sa.Index("idx_sessions_session_key", sessions.c.session_key, sessions.c.started_at.desc())
sa.Index("idx_sessions_system_prompt_hash", sessions.c.system_prompt_hash)
sa.Index(
    "idx_sessions_effective_activity",
    sa.text("COALESCE(last_activity_at, started_at) DESC"),
    sessions.c.started_at.desc(),
)
sa.Index(
    "idx_sessions_title_unique", sessions.c.title, unique=True,
    sqlite_where=sessions.c.title.isnot(None),
)
sa.Index("idx_messages_session", messages.c.session_id, messages.c.timestamp)
sa.Index("idx_messages_session_id", messages.c.session_id, messages.c.id)
sa.Index("idx_messages_session_active", messages.c.session_id, messages.c.active, messages.c.timestamp)
sa.Index("idx_messages_active_null", messages.c.active, sqlite_where=messages.c.active.is_(None))
sa.Index("idx_compression_locks_expires", compression_locks.c.expires_at)
sa.Index("idx_session_turn_leases_expires", session_turn_leases.c.expires_at)

# Agent indexes (sessions-ext-agent §2.4). PostgreSQL's byte-order cron range index
# (idx_sessions_cron_id_c) has no SQLite form: it is part of the PostgreSQL head shape only
# (sql.agent.PG_CRON_INDEX, migration.expected_shape_on).
sa.Index("idx_session_model_usage_session", session_model_usage.c.session_id)
sa.Index("idx_session_model_usage_model", session_model_usage.c.model)
_HAS_PMID = messages.c.platform_message_id.isnot(None)
sa.Index("idx_messages_platform_msg_id", messages.c.session_id, messages.c.platform_message_id,
         sqlite_where=_HAS_PMID)
_ASSISTANT_CALLS = sa.and_(messages.c.role == sa.literal_column("'assistant'"),
                           messages.c.tool_calls.isnot(None))
sa.Index("idx_messages_assistant_calls_by_session", messages.c.session_id,
         sqlite_where=_ASSISTANT_CALLS)

#: Core table names.
CORE_TABLES = tuple(t.name for t in metadata.sorted_tables)
