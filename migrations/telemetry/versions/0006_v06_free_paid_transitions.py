"""v06 — free-to-paid transitions.

Ledger: "v6 | New table: free_paid_transitions (historical free->paid flips)", plus
idx_free_paid_detected.
"""

import sqlalchemy as sa
from alembic import op

from hermes_data.errors import ForwardOnlyError
from hermes_data.migrate.ops import add_column_if_missing, record_ledger_version
from hermes_data.types import INTEGER, REAL, TEXT

revision = "v06"
down_revision = "v05"
branch_labels = None
depends_on = None

# Frozen DDL of its time: this file never imports the head metadata.


def upgrade() -> None:
    op.create_table(
        "free_paid_transitions",
        sa.Column("model", TEXT, nullable=False),
        sa.Column("provider", TEXT, nullable=False, server_default=""),
        sa.Column("detected_at", TEXT, nullable=False),
        sa.Column("session_id", TEXT),
        sa.Column("first_paid_cost_usd", REAL, nullable=False, server_default=sa.text("0.0")),
        sa.Column("first_free_seen_at", TEXT),
        sa.PrimaryKeyConstraint("model", "provider"),
        if_not_exists=True,
    )
    op.create_index("idx_free_paid_detected", "free_paid_transitions", ["detected_at"], if_not_exists=True)
    record_ledger_version(6)


def downgrade() -> None:
    raise ForwardOnlyError(f"revision {revision} cannot be downgraded: the history is forward-only")
