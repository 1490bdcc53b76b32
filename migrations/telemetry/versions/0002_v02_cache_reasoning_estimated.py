"""v02 — cache/reasoning tokens and the estimated flag.

Ledger: "v2 | llm_calls: cache_read_tokens, cache_write_tokens, reasoning_tokens, estimated.
runs: parent_session_id, estimated_llm_calls".
"""

import sqlalchemy as sa
from alembic import op

from hermes_data.errors import ForwardOnlyError
from hermes_data.migrate.ops import add_column_if_missing, record_ledger_version
from hermes_data.types import INTEGER, REAL, TEXT

revision = "v02"
down_revision = "v01"
branch_labels = None
depends_on = None

# Frozen DDL of its time: this file never imports the head metadata.


def upgrade() -> None:
    for name in ("cache_read_tokens", "cache_write_tokens", "reasoning_tokens", "estimated"):
        add_column_if_missing("llm_calls", sa.Column(name, INTEGER, server_default=sa.text("0")))
    add_column_if_missing("runs", sa.Column("parent_session_id", TEXT))
    add_column_if_missing("runs", sa.Column("estimated_llm_calls", INTEGER, server_default=sa.text("0")))
    record_ledger_version(2)


def downgrade() -> None:
    raise ForwardOnlyError(f"revision {revision} cannot be downgraded: the history is forward-only")
