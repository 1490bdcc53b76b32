"""Head shape of the session store (``state.db``): the single schema authority for its tables.

The core columns of docs/sessions.md §2 are declared, plus the agent turn API's columns and
tables (docs/sessions-agent.md §2, revision ``s03_agent_turn``) and the coordination columns
(docs/sessions-coordination.md §2.1, revision ``s04_coordination``) and the display
ordering columns and indexes (docs/sessions-ui.md §2.1–§2.2, revision ``s05_ui_display``; its
four triggers are fragments of :mod:`hermes_data.sessions.storage.display_sql`). Upstream databases carry
more columns and tables; the store tolerates them (explicit column lists everywhere) and
never drops them. Column order follows the reference's tables (docs/sessions.md §2), which is also the order a fresh
``alembic -n sessions upgrade head`` produces; adopted files keep their upstream order and
get missing core columns appended (order is not part of this store's contract, docs/sessions.md §2.8).

The full-text objects (two views, two FTS5 tables, six triggers) are not expressible in Core;
they are named ``text()`` fragments in :mod:`hermes_data.sessions.sql`.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.schema import CreateIndex

from hermes_data.types import BLOB, INTEGER, REAL, TEXT

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
    # Agent turn API (docs/sessions-agent.md §2.1, revision s03_agent_turn): appended, in the
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
    # Coordination (docs/sessions-coordination.md §2.1, revision s04_coordination).
    sa.Column("compression_failure_cooldown_until", REAL),
    sa.Column("compression_failure_error", TEXT),
    sa.Column("compression_fallback_streak", INTEGER, nullable=False, server_default=_zero()),
    sa.Column("compression_ineffective_count", INTEGER, nullable=False, server_default=_zero()),
    sa.Column("compression_recovery_deadline", REAL),
    sa.Column("compression_overload_streak", INTEGER, nullable=False, server_default=_zero()),
    sa.Column("rewind_count", INTEGER, nullable=False, server_default=_zero()),
    # Gateway (docs/sessions-gateway.md §2.2, revision s06_gateway): upstream's three handoff
    # columns, then the claim/request extension (nullable, no default).
    sa.Column("handoff_state", TEXT),
    sa.Column("handoff_platform", TEXT),
    sa.Column("handoff_error", TEXT),
    sa.Column("handoff_requested_at", REAL),
    sa.Column("handoff_claimed_by", TEXT),
    sa.Column("handoff_claimed_at", REAL),
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
    # Display ordering (docs/sessions-ui.md §2.1, revision s05_ui_display): NULL = pending.
    sa.Column("display_identity", BLOB),
    sa.Column("display_order", INTEGER),
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

# Per-session, per-route, per-task accounting (docs/sessions-agent.md §2.2). Rows go only through
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

# Monotonic reset generation per routing peer (docs/sessions-agent.md §2.3): never deleted.
conversation_generations = sa.Table(
    "conversation_generations", metadata,
    sa.Column("source", TEXT, primary_key=True, nullable=False),
    sa.Column("session_key", TEXT, primary_key=True, nullable=False),
    sa.Column("generation", INTEGER, nullable=False, server_default=_zero()),
)

# Gateway tables (docs/sessions-gateway.md §2.1, revision s06_gateway). None references
# ``sessions``: routing entries, hygiene rows, heartbeats and delegations survive deletes.
gateway_routing = sa.Table(
    "gateway_routing", metadata,
    sa.Column("scope", TEXT, primary_key=True, nullable=False, server_default=_EMPTY),
    sa.Column("session_key", TEXT, primary_key=True, nullable=False),
    sa.Column("entry_json", TEXT, nullable=False),
    sa.Column("updated_at", REAL, nullable=False),
)

gateway_hygiene_state = sa.Table(
    "gateway_hygiene_state", metadata,
    sa.Column("session_key", TEXT, primary_key=True, nullable=True),
    sa.Column("failure_streak", INTEGER, nullable=False, server_default=_zero()),
)

gateway_heartbeats = sa.Table(
    "gateway_heartbeats", metadata,
    sa.Column("backend_id", TEXT, primary_key=True, nullable=True),
    sa.Column("pid", INTEGER, nullable=False),
    sa.Column("started_at", REAL, nullable=False),
    sa.Column("last_heartbeat", REAL, nullable=False),
    sa.Column("profile", TEXT, nullable=False, server_default=_EMPTY),
    sa.Column("host", TEXT, nullable=False, server_default=_EMPTY),
)

# Owned by the delegation tool (rows); the store owns the shape (docs/sessions-gateway.md §3.10).
async_delegations = sa.Table(
    "async_delegations", metadata,
    sa.Column("delegation_id", TEXT, primary_key=True, nullable=True),
    sa.Column("origin_session", TEXT, nullable=False),
    sa.Column("origin_ui_session_id", TEXT, nullable=False, server_default=_EMPTY),
    sa.Column("parent_session_id", TEXT),
    sa.Column("state", TEXT, nullable=False),
    sa.Column("dispatched_at", REAL, nullable=False),
    sa.Column("completed_at", REAL),
    sa.Column("updated_at", REAL, nullable=False),
    sa.Column("event_json", TEXT),
    sa.Column("result_json", TEXT),
    sa.Column("delivery_state", TEXT, nullable=False, server_default=sa.text("'pending'")),
    sa.Column("delivery_attempts", INTEGER, nullable=False, server_default=_zero()),
    sa.Column("delivered_at", REAL),
    sa.Column("owner_pid", INTEGER),
    sa.Column("owner_started_at", INTEGER),
    sa.Column("task_json", TEXT),
    sa.Column("delivery_claim", TEXT),
    sa.Column("delivery_claimed_at", REAL),
    sa.Column("origin_session_id", TEXT, nullable=False, server_default=_EMPTY),
)

# docs/sessions.md §2.5 indexes. Expression indexes are written as text so SQLite stores exactly this form.
# A partial index declares its predicate once, as ``sqlite_where``; PostgreSQL's DDL gets the
# same predicate when it is compiled (``_pg_partial_where``), or its own one from
# ``info["pg_where"]`` where they differ. A ``postgresql_*`` keyword here
# would import the PostgreSQL dialect (SQLAlchemy validates a dialect keyword by loading its
# dialect) in every SQLite process (issue 14).


@compiles(CreateIndex, "postgresql")
def _pg_partial_where(create: CreateIndex, compiler: Any, **kw: Any) -> str:
    index = create.element
    where = index.info.get("pg_where", index.dialect_options["sqlite"]["where"])
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

# Agent indexes (docs/sessions-agent.md §2.4). PostgreSQL's byte-order cron range index
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

# Display ordering (docs/sessions-ui.md §2.2); VIS = active = 1 OR compacted = 1. The four display
# triggers are text() fragments (sql.display).
_VIS = sa.or_(messages.c.active == sa.literal_column("1"),
              messages.c.compacted == sa.literal_column("1"))
# PostgreSQL adds ``display_order IS NOT NULL`` (a deliberate difference, same rows for every
# display-order read): without statistics its planner estimates the bare VIS predicate as highly
# selective and scanned this index for every search, whose WHERE implies VIS.
_PG_PAGE = sa.and_(messages.c.display_order.isnot(None), _VIS.self_group())
sa.Index("idx_messages_display_page", messages.c.session_id, messages.c.display_order,
         messages.c.active.desc(), messages.c.id.desc(), sqlite_where=_VIS,
         info={"pg_where": _PG_PAGE})
_PENDING = sa.and_(sa.or_(messages.c.display_order.is_(None),
                          messages.c.display_identity.is_(None)), _VIS.self_group())
sa.Index("idx_messages_display_backfill", messages.c.session_id,
         sqlite_where=_PENDING)
_IDENTIFIED = sa.and_(messages.c.display_identity.isnot(None), _VIS.self_group())
sa.Index("idx_messages_display_identity", messages.c.session_id, messages.c.display_identity,
         messages.c.display_order, sqlite_where=_IDENTIFIED)

# Gateway indexes (docs/sessions-gateway.md §2.3; upstream names and shapes).
sa.Index("idx_sessions_gateway_peer", sessions.c.source, sessions.c.user_id, sessions.c.chat_id,
         sessions.c.chat_type, sessions.c.thread_id, sessions.c.started_at.desc())
sa.Index("idx_sessions_handoff_state", sessions.c.handoff_state, sessions.c.started_at)
sa.Index("idx_async_delegations_delivery", async_delegations.c.delivery_state,
         async_delegations.c.completed_at)

#: Core table names.
CORE_TABLES = tuple(t.name for t in metadata.sorted_tables)

# Tables a named step creates instead of ``create_all`` (so they are not in ``metadata``, which
# the fresh path, reconciliation and ``hermes-data check`` create or require on every store).
# Each table's ``info`` says on which dialects it exists (``dialects``), where it may be absent
# from a store at the head (``optional_on``) and which step creates it (``created_by``).
# :func:`head_metadata` merges them into the head of each dialect. Their DDL on SQLite is a
# frozen fragment that never changes; tests/migrations/test_metadata_authority.py proves each
# fragment creates exactly the table declared here.
step_metadata = sa.MetaData()

# The CJK-bigram index's documents and queue (docs/sessions-storage.md §2.2; the FTS5 table
# over the documents is a virtual table, not an ordinary one, so it is not declared). SQLite
# only: PostgreSQL serves the same route with the GIN index ``messages_cjk_grams``.
_CJK_STEP = {"dialects": ("sqlite",), "optional_on": ("sqlite",),
             "created_by": "s07_storage and the writable open's CJK-bigram step "
                           "(storage.fts.cjk_sql; absent while sessions.cjk_index is off or "
                           "without FTS5)"}
# ``id INTEGER PRIMARY KEY`` in the fragments: a rowid alias, which PRAGMA table_info reports
# as notnull=0 (SQLite assigns a rowid for a NULL), hence nullable as declared there.
messages_cjk_doc = sa.Table(
    "messages_cjk_doc", step_metadata,
    sa.Column("id", INTEGER, primary_key=True, nullable=True),
    sa.Column("doc", TEXT, nullable=False),
    info=_CJK_STEP,
)
messages_cjk_queue = sa.Table(
    "messages_cjk_queue", step_metadata,
    sa.Column("id", INTEGER, primary_key=True, nullable=True),
    info=_CJK_STEP,
)

# Telegram DM topics (docs/sessions-gateway.md §2.1, §2.5): on SQLite the user's opt-in creates
# them (``apply_telegram_topic_migration``, frozen v3 DDL in gateway.telegram_sql); on
# PostgreSQL s06_gateway creates them, so they are part of its head.
_TELEGRAM_STEP = {"dialects": ("sqlite", "postgresql"), "optional_on": ("sqlite",),
                  "created_by": "SQLite: apply_telegram_topic_migration (the opt-in); "
                                "PostgreSQL: s06_gateway"}
_DEFAULT_PROFILE = sa.text("'default'")
telegram_dm_topic_mode = sa.Table(
    "telegram_dm_topic_mode", step_metadata,
    sa.Column("profile_name", TEXT, primary_key=True, nullable=False,
              server_default=_DEFAULT_PROFILE),
    sa.Column("chat_id", TEXT, primary_key=True, nullable=False),
    sa.Column("user_id", TEXT, nullable=False),
    sa.Column("enabled", INTEGER, nullable=False, server_default=sa.text("1")),
    sa.Column("activated_at", REAL, nullable=False),
    sa.Column("updated_at", REAL, nullable=False),
    sa.Column("has_topics_enabled", INTEGER),
    sa.Column("allows_users_to_create_topics", INTEGER),
    sa.Column("capability_checked_at", REAL),
    sa.Column("intro_message_id", TEXT),
    sa.Column("pinned_message_id", TEXT),
    info=_TELEGRAM_STEP,
)
telegram_dm_topic_bindings = sa.Table(
    "telegram_dm_topic_bindings", step_metadata,
    sa.Column("profile_name", TEXT, primary_key=True, nullable=False,
              server_default=_DEFAULT_PROFILE),
    sa.Column("chat_id", TEXT, primary_key=True, nullable=False),
    sa.Column("thread_id", TEXT, primary_key=True, nullable=False),
    sa.Column("user_id", TEXT, nullable=False),
    sa.Column("session_key", TEXT, nullable=False),
    # The column object, not "sessions.id": ``sessions`` lives in ``metadata``.
    sa.Column("session_id", TEXT, sa.ForeignKey(sessions.c.id, ondelete="CASCADE"),
              nullable=False),
    sa.Column("managed_mode", TEXT, nullable=False, server_default=sa.text("'auto'")),
    sa.Column("linked_at", REAL, nullable=False),
    sa.Column("updated_at", REAL, nullable=False),
    info=_TELEGRAM_STEP,
)
sa.Index("idx_telegram_dm_topic_bindings_session", telegram_dm_topic_bindings.c.session_id,
         unique=True)
sa.Index("idx_telegram_dm_topic_bindings_user", telegram_dm_topic_bindings.c.profile_name,
         telegram_dm_topic_bindings.c.user_id, telegram_dm_topic_bindings.c.chat_id)

#: Tables only the PostgreSQL head always has (on SQLite: the opt-in).
TELEGRAM_TABLES = ("telegram_dm_topic_mode", "telegram_dm_topic_bindings")
#: The CJK-bigram index's ordinary tables (SQLite only).
CJK_DOCUMENT_TABLES = ("messages_cjk_doc", "messages_cjk_queue")


def _merged(dialect: str) -> sa.MetaData:
    from hermes_data.migrate.spec import server_metadata

    md = sa.MetaData()
    for table in metadata.sorted_tables:
        table.to_metadata(md)
    for table in step_metadata.sorted_tables:
        if dialect in table.info["dialects"]:
            table.to_metadata(md)
    # On a server every primary-key column is NOT NULL whatever the declaration (the nullable
    # TEXT keys above are SQLite's reading of upstream's ``TEXT PRIMARY KEY``).
    return md if dialect == "sqlite" else server_metadata(md)


_heads: dict[str, sa.MetaData] = {}


def __getattr__(name: str) -> Any:
    # ``pg_metadata``, built on first use: a SQLite process never pays for the copy.
    if name == "pg_metadata":
        found = _heads.get("postgresql-tables")
        if found is None:
            found = _heads["postgresql-tables"] = _merged("postgresql")
        return found
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: ``pg_metadata`` (module attribute, built on first use): the PostgreSQL head's tables as
#: ``create_all`` makes them — the metadata plus the Telegram tables, primary keys NOT NULL
#: (:func:`head_metadata` adds PostgreSQL's own objects).
pg_metadata: sa.MetaData


def head_metadata(dialect: str) -> sa.MetaData:
    """Every table, column and index of the session store's head on ``dialect`` (``sqlite``
    or ``postgresql``), built once from the declarations of this module: what Alembic's
    comparison (``alembic -n sessions check``) and the PostgreSQL shape check compare with.

    SQLite: the metadata plus the step tables (CJK-bigram documents and queue, Telegram),
    which a store may lack (their ``info["optional_on"]``). PostgreSQL: :data:`pg_metadata`
    plus the objects only PostgreSQL has (:func:`_postgresql_objects`). Only a PostgreSQL
    head imports the PostgreSQL dialect (issue 14)."""
    found = _heads.get(dialect)
    if found is None:
        if dialect not in ("sqlite", "postgresql"):
            raise ValueError(f"no session-store head for dialect {dialect!r} "
                             "(sqlite or postgresql)")
        found = _merged(dialect)
        if dialect == "postgresql":
            _postgresql_objects(found)
        _heads[dialect] = found
    return found


def _postgresql_objects(md: sa.MetaData) -> None:
    """The PostgreSQL-only column and indexes of the head, each with the revision that creates
    it (``info["created_by"]``) and, for the trigram indexes, the extension they need
    (``info["requires_extension"]``: the revisions skip them without ``pg_trgm``). The
    revisions' frozen DDL creates them; these declarations describe the result."""
    from sqlalchemy.dialects.postgresql import TSVECTOR

    from hermes_data.sessions.storage.fts.ddl import PG_FTS_COLUMN, PG_FTS_GENERATED
    from hermes_data.sessions.storage.fts.fold_sql import pg_folded_document

    m, s = md.tables["messages"], md.tables["sessions"]
    # A stored generated column: never named by an insert (it is not in ``metadata``).
    m.append_column(sa.Column(PG_FTS_COLUMN, TSVECTOR, sa.Computed(PG_FTS_GENERATED,
                                                                   persisted=True),
                              info={"created_by": "s02_pg_stored_tsvector"}))
    not_tool = m.c.role != sa.literal_column("'tool'")
    trigram = {"requires_extension": "pg_trgm"}
    sa.Index("messages_fts_document", m.c[PG_FTS_COLUMN], postgresql_using="gin",
             info={"created_by": "s02_pg_stored_tsvector"})
    sa.Index("messages_fts_trgm", m.c.content, postgresql_using="gin",
             postgresql_ops={"content": "gin_trgm_ops"}, postgresql_where=not_tool,
             info={"created_by": "s01_baseline", **trigram})
    sa.Index("idx_sessions_cron_id_c", s.c.id.collate("C"),
             postgresql_where=s.c.source == sa.literal_column("'cron'"),
             info={"created_by": "s03_agent_turn"})
    # Expression indexes over functions the revisions define: bound to their table by hand
    # (no column of theirs names it).
    for index in (
            sa.Index("messages_cjk_grams",
                     sa.text("hermes_cjk_grams(role, content, tool_name, tool_calls)"),
                     postgresql_using="gin", postgresql_where=not_tool,
                     info={"created_by": "s07_storage"}),
            sa.Index("messages_symbol_grams", sa.text("hermes_symbol_grams(role, content)"),
                     postgresql_using="gin", info={"created_by": "s08_symbol_grams"}),
            sa.Index("messages_fts_fold", sa.text(pg_folded_document()),
                     postgresql_using="gin", info={"created_by": "s09_accent_fold"})):
        m.append_constraint(index)
    sa.Index("messages_tool_trgm", m.c.tool_name, m.c.tool_calls, postgresql_using="gin",
             postgresql_ops={"tool_name": "gin_trgm_ops", "tool_calls": "gin_trgm_ops"},
             postgresql_where=not_tool, info={"created_by": "s10_tool_trigrams", **trigram})
