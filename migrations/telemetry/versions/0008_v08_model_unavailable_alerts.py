"""v08 — model-unavailable alerts.

Ledger: "v8 | New table: model_unavailable_alerts (404s captured via api_request_error)", plus
idx_model_unavailable_last_seen.
"""

import sqlalchemy as sa
from alembic import op

from hermes_data.errors import ForwardOnlyError
from hermes_data.migrate.ops import add_column_if_missing, record_ledger_version
from hermes_data.types import INTEGER, REAL, TEXT

revision = "v08"
down_revision = "v07"
branch_labels = None
depends_on = None

# Frozen DDL of its time: this file never imports the head metadata.


def upgrade() -> None:
    op.create_table(
        "model_unavailable_alerts",
        sa.Column("model", TEXT, nullable=False),
        sa.Column("provider", TEXT, nullable=False, server_default=""),
        sa.Column("error_code", INTEGER, nullable=False),
        sa.Column("error_message", TEXT),
        sa.Column("first_seen_at", TEXT, nullable=False),
        sa.Column("last_seen_at", TEXT, nullable=False),
        sa.Column("occurrences", INTEGER, nullable=False, server_default=sa.text("1")),
        sa.PrimaryKeyConstraint("model", "provider"),
        if_not_exists=True,
    )
    op.create_index("idx_model_unavailable_last_seen", "model_unavailable_alerts", ["last_seen_at"], if_not_exists=True)
    record_ledger_version(8)


def downgrade() -> None:
    raise ForwardOnlyError(f"revision {revision} cannot be downgraded: the history is forward-only")
