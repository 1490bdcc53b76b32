"""v14 — pricing snapshots.

Ledger: "v14 | New table: pricing_snapshots (append-per-change history of resolved tariffs, with
provenance) + idx_pricing_snapshots_model".
"""

import sqlalchemy as sa
from alembic import op

from hermes_data.errors import ForwardOnlyError
from hermes_data.migrate.ops import add_column_if_missing, record_ledger_version
from hermes_data.types import INTEGER, REAL, TEXT

revision = "v14"
down_revision = "v13"
branch_labels = None
depends_on = None

# Frozen DDL of its time: this file never imports the head metadata.


def upgrade() -> None:
    op.create_table(
        "pricing_snapshots",
        sa.Column("id", INTEGER, primary_key=True),
        sa.Column("provider", TEXT, nullable=False),
        sa.Column("model", TEXT, nullable=False),
        sa.Column("input_cost_per_million", REAL),
        sa.Column("output_cost_per_million", REAL),
        sa.Column("cache_read_cost_per_million", REAL),
        sa.Column("cache_write_cost_per_million", REAL),
        sa.Column("request_cost", REAL),
        sa.Column("source", TEXT),
        sa.Column("source_url", TEXT),
        sa.Column("pricing_version", TEXT),
        sa.Column("fetched_at", TEXT),
        sa.Column("captured_at", TEXT, nullable=False),
        sa.Column("base_url", TEXT),
        sa.Column("api_mode", TEXT),
        sqlite_autoincrement=True,
        if_not_exists=True,
    )
    op.create_index("idx_pricing_snapshots_model", "pricing_snapshots", ["provider", "model", "id"], if_not_exists=True)
    record_ledger_version(14)


def downgrade() -> None:
    raise ForwardOnlyError(f"revision {revision} cannot be downgraded: the history is forward-only")
