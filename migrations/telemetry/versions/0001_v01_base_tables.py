"""v01 — base tables.

Ledger: "v1 | Base tables: runs, llm_calls, tool_calls, schema_version", plus the seven v1
indexes (idx_runs_started, idx_runs_platform, idx_runs_cron_job, idx_llm_session, idx_llm_ts,
idx_tool_session, idx_tool_name).
"""

import sqlalchemy as sa
from alembic import op

from hermes_data.errors import ForwardOnlyError
from hermes_data.migrate.ops import add_column_if_missing, record_ledger_version
from hermes_data.types import INTEGER, REAL, TEXT

revision = "v01"
down_revision = None
branch_labels = None
depends_on = None

# Frozen DDL of its time: this file never imports the head metadata.


def upgrade() -> None:
    op.create_table(
        "schema_version",
        sa.Column("version", INTEGER, primary_key=True, autoincrement=False),
        sa.Column("applied_at", TEXT, nullable=False),
        if_not_exists=True,
    )
    op.create_table(
        "runs",
        sa.Column("session_id", TEXT, primary_key=True, nullable=True),
        sa.Column("platform", TEXT),
        sa.Column("cron_job_id", TEXT),
        sa.Column("model", TEXT),
        sa.Column("provider", TEXT),
        sa.Column("started_at", TEXT, nullable=False),
        sa.Column("ended_at", TEXT),
        sa.Column("status", TEXT, server_default="running"),
        sa.Column("tokens_in", INTEGER, server_default=sa.text("0")),
        sa.Column("tokens_out", INTEGER, server_default=sa.text("0")),
        sa.Column("cost_usd", REAL, server_default=sa.text("0.0")),
        sa.Column("duration_ms", INTEGER),
        sa.Column("api_calls", INTEGER, server_default=sa.text("0")),
        sa.Column("tool_calls", INTEGER, server_default=sa.text("0")),
        if_not_exists=True,
    )
    op.create_table(
        "llm_calls",
        sa.Column("id", INTEGER, primary_key=True),
        sa.Column("session_id", TEXT, nullable=False),
        sa.Column("ts", TEXT, nullable=False),
        sa.Column("model", TEXT),
        sa.Column("provider", TEXT),
        sa.Column("tokens_in", INTEGER, server_default=sa.text("0")),
        sa.Column("tokens_out", INTEGER, server_default=sa.text("0")),
        sa.Column("cost_usd", REAL, server_default=sa.text("0.0")),
        sa.Column("latency_ms", INTEGER),
        sqlite_autoincrement=True,
        if_not_exists=True,
    )
    op.create_table(
        "tool_calls",
        sa.Column("id", INTEGER, primary_key=True),
        sa.Column("session_id", TEXT, nullable=False),
        sa.Column("ts", TEXT, nullable=False),
        sa.Column("tool_name", TEXT, nullable=False),
        sa.Column("ok", INTEGER, nullable=False, server_default=sa.text("1")),
        sa.Column("latency_ms", INTEGER),
        sqlite_autoincrement=True,
        if_not_exists=True,
    )
    op.create_index("idx_runs_started", "runs", ["started_at"], if_not_exists=True)
    op.create_index("idx_runs_platform", "runs", ["platform"], if_not_exists=True)
    op.create_index("idx_runs_cron_job", "runs", ["cron_job_id"], if_not_exists=True)
    op.create_index("idx_llm_session", "llm_calls", ["session_id"], if_not_exists=True)
    op.create_index("idx_llm_ts", "llm_calls", ["ts"], if_not_exists=True)
    op.create_index("idx_tool_session", "tool_calls", ["session_id"], if_not_exists=True)
    op.create_index("idx_tool_name", "tool_calls", ["tool_name"], if_not_exists=True)
    record_ledger_version(1)


def downgrade() -> None:
    raise ForwardOnlyError(f"revision {revision} cannot be downgraded: the history is forward-only")
