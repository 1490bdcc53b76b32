"""s03 — the agent turn API (docs/sessions-agent.md §2): accounting, activity, cwd/git
and tool-name columns on ``sessions``; ``session_model_usage``; ``conversation_generations``;
the agent indexes.

Add-only and read-gated (a store that has everything sees no write here):

1. the docs/sessions-agent.md §2.1 ``sessions`` columns that are missing are appended with their canonical
   expression (the core reconcile rule: ``duplicate column`` DEBUG, ``locked``/``busy``
   re-raised into the open's lock patience, anything else a WARNING naming table.column);
   columns an upstream file already has are left exactly as they are;
2. ``session_model_usage``: absent ⇒ created, then seeded once from the session totals
   (upstream's v20 step: one ``task = ''`` row per session whose five token counters sum
   above zero); present ⇒ missing columns added, and a primary key without ``task``
   (upstream #73823: every usage upsert failed "ON CONFLICT clause does not match any
   PRIMARY KEY") rebuilt: renamed to ``session_model_usage_legacy_pk``, the canonical table
   created, rows copied (route/task columns ``COALESCE(…, '')``, the first row of a key
   whose session exists), both indexes created. Nothing is dropped: the rows that could not
   be merged (rows of sessions that no longer exist — upstream switched foreign keys off for
   the copy, impossible inside the upgrade's transaction — and later rows of a key that is
   now one row) stay in ``session_model_usage_legacy_pk``, which is dropped only when empty;
   a WARNING counts them;
3. ``conversation_generations`` and the agent indexes when absent;
4. PostgreSQL: the same objects and data steps, plus ``idx_sessions_cron_id_c`` (a
   byte-order range index for ``list_cron_job_runs``).

Revision ID: s03_agent_turn
Revises: s02_pg_stored_tsvector
"""

import logging

import sqlalchemy as sa
from alembic import op

from hermes_data.errors import ForwardOnlyError
from hermes_data.migrate.ops import add_missing_columns
from hermes_data.types import INTEGER, REAL, TEXT

revision = "s03_agent_turn"
down_revision = "s02_pg_stored_tsvector"
branch_labels = None
depends_on = None

log = logging.getLogger("hermes_data.sessions.migrations")

# Frozen DDL of its time: this file never imports the head metadata.


def _zero():
    return sa.text("0")


def _session_columns():
    """The docs/sessions-agent.md §2.1 columns, in the order a fresh store appends them."""
    return [
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
    ]


def _tables():
    md = sa.MetaData()
    # Referenced only (never created here): lets the foreign key compile.
    sa.Table("sessions", md, sa.Column("id", TEXT, primary_key=True))
    empty = sa.text("''")
    usage = sa.Table(
        "session_model_usage", md,
        sa.Column("session_id", TEXT, sa.ForeignKey("sessions.id", ondelete="CASCADE"),
                  primary_key=True, nullable=False),
        sa.Column("model", TEXT, primary_key=True, nullable=False),
        sa.Column("billing_provider", TEXT, primary_key=True, nullable=False, server_default=empty),
        sa.Column("billing_base_url", TEXT, primary_key=True, nullable=False, server_default=empty),
        sa.Column("billing_mode", TEXT, primary_key=True, nullable=False, server_default=empty),
        sa.Column("task", TEXT, primary_key=True, nullable=False, server_default=empty),
        *[sa.Column(n, INTEGER, nullable=False, server_default=_zero())
          for n in ("api_call_count", "input_tokens", "output_tokens", "cache_read_tokens",
                    "cache_write_tokens", "reasoning_tokens")],
        sa.Column("estimated_cost_usd", REAL, nullable=False, server_default=_zero()),
        sa.Column("actual_cost_usd", REAL, nullable=False, server_default=_zero()),
        sa.Column("cost_status", TEXT),
        sa.Column("cost_source", TEXT),
        sa.Column("first_seen", REAL),
        sa.Column("last_seen", REAL),
    )
    generations = sa.Table(
        "conversation_generations", md,
        sa.Column("source", TEXT, primary_key=True, nullable=False),
        sa.Column("session_key", TEXT, primary_key=True, nullable=False),
        sa.Column("generation", INTEGER, nullable=False, server_default=_zero()),
    )
    return usage, generations


_USAGE_KEY = ("session_id", "model", "billing_provider", "billing_base_url", "billing_mode", "task")

_INDEXES = (
    ("idx_session_model_usage_session",
     "CREATE INDEX IF NOT EXISTS idx_session_model_usage_session "
     "ON session_model_usage (session_id)"),
    ("idx_session_model_usage_model",
     "CREATE INDEX IF NOT EXISTS idx_session_model_usage_model ON session_model_usage (model)"),
    ("idx_messages_platform_msg_id",
     "CREATE INDEX IF NOT EXISTS idx_messages_platform_msg_id "
     "ON messages (session_id, platform_message_id) WHERE platform_message_id IS NOT NULL"),
    ("idx_messages_assistant_calls_by_session",
     "CREATE INDEX IF NOT EXISTS idx_messages_assistant_calls_by_session ON messages "
     "(session_id) WHERE role = 'assistant' AND tool_calls IS NOT NULL"),
)
_PG_CRON_INDEX = ("idx_sessions_cron_id_c",
                  'CREATE INDEX IF NOT EXISTS idx_sessions_cron_id_c ON sessions '
                  '((id COLLATE "C")) WHERE source = \'cron\'')

# Upstream's v20 seed: one main-loop row per session with token totals.
_SEED_USAGE = (
    "INSERT INTO session_model_usage (session_id, model, billing_provider, billing_base_url, "
    "billing_mode, task, api_call_count, input_tokens, output_tokens, cache_read_tokens, "
    "cache_write_tokens, reasoning_tokens, estimated_cost_usd, actual_cost_usd, cost_status, "
    "cost_source, first_seen, last_seen) "
    "SELECT id, COALESCE(model, 'unknown'), COALESCE(billing_provider, ''), "
    "COALESCE(billing_base_url, ''), COALESCE(billing_mode, ''), '', "
    "COALESCE(api_call_count, 0), COALESCE(input_tokens, 0), COALESCE(output_tokens, 0), "
    "COALESCE(cache_read_tokens, 0), COALESCE(cache_write_tokens, 0), "
    "COALESCE(reasoning_tokens, 0), COALESCE(estimated_cost_usd, 0), "
    "COALESCE(actual_cost_usd, 0), cost_status, cost_source, started_at, "
    "COALESCE(ended_at, started_at) FROM sessions "
    "WHERE COALESCE(input_tokens, 0) + COALESCE(output_tokens, 0) + COALESCE(cache_read_tokens, 0) "
    "+ COALESCE(cache_write_tokens, 0) + COALESCE(reasoning_tokens, 0) > 0 "
    "ON CONFLICT DO NOTHING"
)
_LEGACY = "session_model_usage_legacy_pk"
_COPY_COLUMNS = ("session_id", "model", "billing_provider", "billing_base_url", "billing_mode",
                 "task", "api_call_count", "input_tokens", "output_tokens", "cache_read_tokens",
                 "cache_write_tokens", "reasoning_tokens", "estimated_cost_usd",
                 "actual_cost_usd", "cost_status", "cost_source", "first_seen", "last_seen")
_COALESCED = {"billing_provider", "billing_base_url", "billing_mode", "task"}


def _copy_legacy(order: str) -> str:
    cols = ", ".join(_COPY_COLUMNS)
    exprs = ", ".join(f"COALESCE(u.{c}, '')" if c in _COALESCED else f"u.{c}"
                      for c in _COPY_COLUMNS)
    return (f"INSERT INTO session_model_usage ({cols}) SELECT {exprs} FROM {_LEGACY} u "
            "WHERE EXISTS (SELECT 1 FROM sessions s WHERE s.id = u.session_id) "
            f"ORDER BY {order} ON CONFLICT DO NOTHING")


def _forget_copied(row_id: str) -> str:
    """Delete from the legacy table exactly the rows :func:`_copy_legacy` copied: per new key,
    the first row (in ``row_id`` order) whose session exists."""
    key = ", ".join(f"COALESCE(u.{c}, '')" if c in _COALESCED else f"u.{c}"
                    for c in _COPY_COLUMNS[:6])
    return (f"DELETE FROM {_LEGACY} WHERE {row_id} IN (SELECT rid FROM (SELECT u.{row_id} AS rid, "
            f"ROW_NUMBER() OVER (PARTITION BY {key} ORDER BY u.{row_id}) AS rn FROM {_LEGACY} u "
            "WHERE EXISTS (SELECT 1 FROM sessions s WHERE s.id = u.session_id)) firsts "
            "WHERE rn = 1)")


def _tables_present(bind) -> set[str]:
    return set(sa.inspect(bind).get_table_names())


def _index_names(bind, table: str) -> set[str]:
    return {str(ix["name"]) for ix in sa.inspect(bind).get_indexes(table)}


def _rebuild_usage(bind, usage: sa.Table) -> None:
    """Replace a ``session_model_usage`` whose key lacks ``task`` with the canonical table."""
    pg = bind.dialect.name == "postgresql"
    pk_name = sa.inspect(bind).get_pk_constraint("session_model_usage").get("name")
    bind.exec_driver_sql(f"ALTER TABLE session_model_usage RENAME TO {_LEGACY}")
    if pg and pk_name:
        # The constraint keeps its name through the rename and would collide with the new key;
        # renamed (not dropped), so the kept legacy rows keep their key.
        bind.exec_driver_sql(f'ALTER TABLE {_LEGACY} RENAME CONSTRAINT "{pk_name}" '
                             f'TO "{_LEGACY}_pkey"')
    bind.execute(sa.schema.CreateTable(usage))
    total = bind.exec_driver_sql(f"SELECT COUNT(*) FROM {_LEGACY}").scalar() or 0
    orphans = bind.exec_driver_sql(
        f"SELECT COUNT(*) FROM {_LEGACY} u WHERE NOT EXISTS "
        "(SELECT 1 FROM sessions s WHERE s.id = u.session_id)").scalar() or 0
    copied = bind.exec_driver_sql(_copy_legacy("ctid" if pg else "rowid")).rowcount
    bind.exec_driver_sql(_forget_copied("ctid" if pg else "rowid"))
    kept = bind.exec_driver_sql(f"SELECT COUNT(*) FROM {_LEGACY}").scalar() or 0
    if not kept:
        bind.exec_driver_sql(f"DROP TABLE {_LEGACY}")
    log.warning("session_model_usage: rebuilt with task in its primary key (upstream #73823); "
                "%d of %d row(s) copied; %d row(s) kept in %s (%d of sessions that no longer "
                "exist, %d later row(s) of a merged key), nothing dropped", copied, total, kept,
                _LEGACY, orphans, kept - orphans)


def upgrade() -> None:
    bind = op.get_bind()
    pg = bind.dialect.name == "postgresql"
    usage, generations = _tables()
    add_missing_columns(bind, "sessions", _session_columns(), log)
    tables = _tables_present(bind)
    if "session_model_usage" not in tables:
        bind.execute(sa.schema.CreateTable(usage))
        seeded = bind.exec_driver_sql(_SEED_USAGE).rowcount
        if seeded:
            log.info("session_model_usage: seeded %d row(s) from session totals", seeded)
    else:
        add_missing_columns(bind, "session_model_usage", usage.columns, log)
        key = sa.inspect(bind).get_pk_constraint("session_model_usage")["constrained_columns"]
        if "task" not in key:
            _rebuild_usage(bind, usage)
    if "conversation_generations" not in tables:
        bind.execute(sa.schema.CreateTable(generations))
    have = _index_names(bind, "session_model_usage") | _index_names(bind, "messages")
    indexes = _INDEXES + ((_PG_CRON_INDEX,) if pg else ())
    if pg:
        have |= _index_names(bind, "sessions")
    for name, ddl in indexes:
        if name not in have:
            bind.exec_driver_sql(ddl)


def downgrade() -> None:
    raise ForwardOnlyError(f"revision {revision} cannot be downgraded: the history is forward-only")
