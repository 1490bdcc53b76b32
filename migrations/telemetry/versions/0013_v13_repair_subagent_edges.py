"""v13 — repair pass for the v11 numbering collision.

Ledger: "v13 | Repair pass: re-creates subagent_edges (+ idx_subagent_edges_parent) via CREATE
TABLE IF NOT EXISTS" for files whose v11 meant runs.profile on a branch build. A real
repair: it creates the table and index wherever they are missing, no-op otherwise.
"""

import sqlalchemy as sa
from alembic import op

from hermes_data.errors import ForwardOnlyError
from hermes_data.migrate.ops import add_column_if_missing, record_ledger_version
from hermes_data.types import INTEGER, REAL, TEXT

revision = "v13"
down_revision = "v12"
branch_labels = None
depends_on = None

# Frozen DDL of its time: this file never imports the head metadata.


def upgrade() -> None:
    op.create_table(
        "subagent_edges",
        sa.Column("child_session_id", TEXT, primary_key=True, nullable=True),
        sa.Column("parent_session_id", TEXT, nullable=False),
        sa.Column("parent_turn_id", TEXT),
        sa.Column("parent_subagent_id", TEXT),
        sa.Column("child_subagent_id", TEXT),
        sa.Column("child_role", TEXT),
        sa.Column("started_at", TEXT, nullable=False),
        sa.Column("stopped_at", TEXT),
        sa.Column("child_status", TEXT),
        if_not_exists=True,
    )
    op.create_index("idx_subagent_edges_parent", "subagent_edges", ["parent_session_id"],
                    if_not_exists=True)
    record_ledger_version(13)


def downgrade() -> None:
    raise ForwardOnlyError(f"revision {revision} cannot be downgraded: the history is forward-only")
