"""v07 — provider-assumed pricing visibility.

Ledger: "v7 | llm_calls.provider_assumed flag + runs.provider_assumed_calls counter (issue #42)".
The upstream step swallowed lock errors and wedged files (column missing, row present);
here any error propagates and rolls the step back with its ledger row.
"""

import sqlalchemy as sa
from alembic import op

from hermes_data.errors import ForwardOnlyError
from hermes_data.migrate.ops import add_column_if_missing, record_ledger_version
from hermes_data.types import INTEGER, REAL, TEXT

revision = "v07"
down_revision = "v06"
branch_labels = None
depends_on = None

# Frozen DDL of its time: this file never imports the head metadata.


def upgrade() -> None:
    add_column_if_missing("llm_calls", sa.Column("provider_assumed", INTEGER, server_default=sa.text("0")))
    add_column_if_missing("runs", sa.Column("provider_assumed_calls", INTEGER, server_default=sa.text("0")))
    record_ledger_version(7)


def downgrade() -> None:
    raise ForwardOnlyError(f"revision {revision} cannot be downgraded: the history is forward-only")
