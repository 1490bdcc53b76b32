"""v04 — per-session cache token totals.

Ledger: "v4 | runs: cache_read_tokens, cache_write_tokens (per-session/cron cache breakdown)".
"""

import sqlalchemy as sa
from alembic import op

from hermes_data.errors import ForwardOnlyError
from hermes_data.migrate.ops import add_column_if_missing, record_ledger_version
from hermes_data.types import INTEGER, REAL, TEXT

revision = "v04"
down_revision = "v03"
branch_labels = None
depends_on = None

# Frozen DDL of its time: this file never imports the head metadata.


def upgrade() -> None:
    add_column_if_missing("runs", sa.Column("cache_read_tokens", INTEGER, server_default=sa.text("0")))
    add_column_if_missing("runs", sa.Column("cache_write_tokens", INTEGER, server_default=sa.text("0")))
    record_ledger_version(4)


def downgrade() -> None:
    raise ForwardOnlyError(f"revision {revision} cannot be downgraded: the history is forward-only")
