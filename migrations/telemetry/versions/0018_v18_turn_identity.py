"""v18 — turn identity and the per-call failure ledger.

Ledger: "v18 | Turn identity + failure ledger. llm_calls: turn_id, task_id, api_request_id.
tool_calls: turn_id, tool_call_id. New table llm_call_errors (+ idx_llm_call_errors_session),
plus idx_llm_turn on llm_calls(turn_id) and idx_tool_turn on tool_calls(turn_id)".
llm_call_errors has the 17 columns of docs/telemetry.md §2.13 (decision docs/telemetry.md §8.3).
"""

import sqlalchemy as sa
from alembic import op

from hermes_data.errors import ForwardOnlyError
from hermes_data.migrate.ops import add_column_if_missing, record_ledger_version
from hermes_data.types import INTEGER, REAL, TEXT

revision = "v18"
down_revision = "v17"
branch_labels = None
depends_on = None

# Frozen DDL of its time: this file never imports the head metadata.


def upgrade() -> None:
    for name in ("turn_id", "task_id", "api_request_id"):
        add_column_if_missing("llm_calls", sa.Column(name, TEXT))
    for name in ("turn_id", "tool_call_id"):
        add_column_if_missing("tool_calls", sa.Column(name, TEXT))
    op.create_table(
        "llm_call_errors",
        sa.Column("id", INTEGER, primary_key=True),
        sa.Column("ts", TEXT, nullable=False),
        sa.Column("session_id", TEXT, nullable=False),
        sa.Column("turn_id", TEXT),
        sa.Column("task_id", TEXT),
        sa.Column("api_request_id", TEXT),
        sa.Column("api_call_count", INTEGER),
        sa.Column("model", TEXT, nullable=False, server_default=""),
        sa.Column("provider", TEXT, nullable=False, server_default=""),
        sa.Column("status_code", INTEGER),
        sa.Column("error_type", TEXT, nullable=False, server_default=""),
        sa.Column("error_message", TEXT, nullable=False, server_default=""),
        sa.Column("reason", TEXT, nullable=False, server_default=""),
        sa.Column("retryable", INTEGER),
        sa.Column("retry_count", INTEGER),
        sa.Column("max_retries", INTEGER),
        sa.Column("duration_ms", INTEGER),
        sqlite_autoincrement=True,
        if_not_exists=True,
    )
    op.create_index("idx_llm_call_errors_session", "llm_call_errors", ["session_id"], if_not_exists=True)
    op.create_index("idx_llm_turn", "llm_calls", ["turn_id"], if_not_exists=True)
    op.create_index("idx_tool_turn", "tool_calls", ["turn_id"], if_not_exists=True)
    record_ledger_version(18)


def downgrade() -> None:
    raise ForwardOnlyError(f"revision {revision} cannot be downgraded: the history is forward-only")
