"""v15 — canonical model name on pricing snapshots.

Ledger: "v15 | pricing_snapshots.resolved_model: canonical model name captured when a dated id
was normalized; NULL when the raw name resolved directly".
"""

import sqlalchemy as sa
from alembic import op

from hermes_data.errors import ForwardOnlyError
from hermes_data.migrate.ops import add_column_if_missing, record_ledger_version
from hermes_data.types import INTEGER, REAL, TEXT

revision = "v15"
down_revision = "v14"
branch_labels = None
depends_on = None

# Frozen DDL of its time: this file never imports the head metadata.


def upgrade() -> None:
    add_column_if_missing("pricing_snapshots", sa.Column("resolved_model", TEXT))
    record_ledger_version(15)


def downgrade() -> None:
    raise ForwardOnlyError(f"revision {revision} cannot be downgraded: the history is forward-only")
