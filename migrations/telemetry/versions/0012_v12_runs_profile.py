"""v12 — per-profile attribution.

Ledger: "v12 | Add runs.profile (per-profile cost attribution) + idx_runs_profile".
"""

import sqlalchemy as sa
from alembic import op

from hermes_data.errors import ForwardOnlyError
from hermes_data.migrate.ops import add_column_if_missing, record_ledger_version
from hermes_data.types import INTEGER, REAL, TEXT

revision = "v12"
down_revision = "v11"
branch_labels = None
depends_on = None

# Frozen DDL of its time: this file never imports the head metadata.


def upgrade() -> None:
    add_column_if_missing("runs", sa.Column("profile", TEXT))
    op.create_index("idx_runs_profile", "runs", ["profile"], if_not_exists=True)
    record_ledger_version(12)


def downgrade() -> None:
    raise ForwardOnlyError(f"revision {revision} cannot be downgraded: the history is forward-only")
