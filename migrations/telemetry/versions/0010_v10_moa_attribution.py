"""v10 — Mixture-of-Agents attribution.

Ledger: "v10 | llm_calls.moa_preset (preset name for a MoA aggregator call; NULL otherwise) +
runs.moa_calls (per-session counter)".
"""

import sqlalchemy as sa
from alembic import op

from hermes_data.errors import ForwardOnlyError
from hermes_data.migrate.ops import add_column_if_missing, record_ledger_version
from hermes_data.types import INTEGER, REAL, TEXT

revision = "v10"
down_revision = "v09"
branch_labels = None
depends_on = None

# Frozen DDL of its time: this file never imports the head metadata.


def upgrade() -> None:
    add_column_if_missing("llm_calls", sa.Column("moa_preset", TEXT))
    add_column_if_missing("runs", sa.Column("moa_calls", INTEGER, server_default=sa.text("0")))
    record_ledger_version(10)


def downgrade() -> None:
    raise ForwardOnlyError(f"revision {revision} cannot be downgraded: the history is forward-only")
