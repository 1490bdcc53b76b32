"""v16 — dashboard caches.

Ledger: "v16 | New tables: endpoint_payload_cache and model_efficiency_cache for
standalone-dashboard caches". IF NOT EXISTS: dashboard branch builds created both tables
before the ledger knew them.
"""

import sqlalchemy as sa
from alembic import op

from hermes_data.errors import ForwardOnlyError
from hermes_data.migrate.ops import add_column_if_missing, record_ledger_version
from hermes_data.types import INTEGER, REAL, TEXT

revision = "v16"
down_revision = "v15"
branch_labels = None
depends_on = None

# Frozen DDL of its time: this file never imports the head metadata.


def upgrade() -> None:
    op.create_table(
        "endpoint_payload_cache",
        sa.Column("cache_name", TEXT, nullable=False),
        sa.Column("cache_key", TEXT, nullable=False),
        sa.Column("payload_json", TEXT, nullable=False),
        sa.Column("rows_count", INTEGER, nullable=False),
        sa.Column("built_at", TEXT, nullable=False),
        sa.PrimaryKeyConstraint("cache_name", "cache_key"),
        if_not_exists=True,
    )
    op.create_index("idx_endpoint_payload_cache_name", "endpoint_payload_cache",
                    ["cache_name", "built_at"], if_not_exists=True)
    op.create_table(
        "model_efficiency_cache",
        sa.Column("cache_key", TEXT, primary_key=True, nullable=True),
        sa.Column("window_hours", INTEGER, nullable=False),
        sa.Column("include_deleted", INTEGER, nullable=False),
        sa.Column("limit_n", INTEGER, nullable=False),
        sa.Column("payload_json", TEXT, nullable=False),
        sa.Column("rows_count", INTEGER, nullable=False),
        sa.Column("built_at", TEXT, nullable=False),
        if_not_exists=True,
    )
    op.create_index("idx_me_cache_window", "model_efficiency_cache",
                    ["window_hours", "include_deleted"], if_not_exists=True)
    record_ledger_version(16)


def downgrade() -> None:
    raise ForwardOnlyError(f"revision {revision} cannot be downgraded: the history is forward-only")
