"""v03 — sender attribution and the budget-alert ledger.

Ledger: "v3 | runs.sender_id. New table: budget_alerts (anti-spam ledger)", plus idx_runs_sender.
"""

import sqlalchemy as sa
from alembic import op

from hermes_data.errors import ForwardOnlyError
from hermes_data.migrate.ops import add_column_if_missing, record_ledger_version
from hermes_data.types import INTEGER, REAL, TEXT

revision = "v03"
down_revision = "v02"
branch_labels = None
depends_on = None

# Frozen DDL of its time: this file never imports the head metadata.


def upgrade() -> None:
    add_column_if_missing("runs", sa.Column("sender_id", TEXT))
    op.create_table(
        "budget_alerts",
        sa.Column("id", INTEGER, primary_key=True),
        sa.Column("scope", TEXT, nullable=False),
        sa.Column("scope_id", TEXT, nullable=False, server_default=""),
        sa.Column("window", TEXT, nullable=False),
        sa.Column("period_key", TEXT, nullable=False),
        sa.Column("level", TEXT, nullable=False),
        sa.Column("fired_at", TEXT, nullable=False),
        sa.Column("spent_usd", REAL),
        sa.Column("limit_usd", REAL),
        sa.UniqueConstraint("scope", "scope_id", "window", "period_key", "level"),
        sqlite_autoincrement=True,
        if_not_exists=True,
    )
    op.create_index("idx_runs_sender", "runs", ["sender_id"], if_not_exists=True)
    record_ledger_version(3)


def downgrade() -> None:
    raise ForwardOnlyError(f"revision {revision} cannot be downgraded: the history is forward-only")
