"""v05 — known free models.

Ledger: "v5 | New table: known_free_models (free->paid transition tracking)".
"""

import sqlalchemy as sa
from alembic import op

from hermes_data.errors import ForwardOnlyError
from hermes_data.migrate.ops import add_column_if_missing, record_ledger_version
from hermes_data.types import INTEGER, REAL, TEXT

revision = "v05"
down_revision = "v04"
branch_labels = None
depends_on = None

# Frozen DDL of its time: this file never imports the head metadata.


def upgrade() -> None:
    op.create_table(
        "known_free_models",
        sa.Column("model", TEXT, nullable=False),
        sa.Column("provider", TEXT, nullable=False, server_default=""),
        sa.Column("first_seen_at", TEXT, nullable=False),
        sa.PrimaryKeyConstraint("model", "provider"),
        if_not_exists=True,
    )
    record_ledger_version(5)


def downgrade() -> None:
    raise ForwardOnlyError(f"revision {revision} cannot be downgraded: the history is forward-only")
