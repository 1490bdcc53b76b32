"""v09 — repair pass for silently skipped columns.

Ledger: "v9 | Repair pass: re-adds any column from v2/v3/v4/v7 that was silently skipped by the
old blanket except-OperationalError pattern". Add-if-missing, same typedefs; a re-added
column lands at the end of its table. No-op on healthy files.
"""

from typing import Any

import sqlalchemy as sa
from alembic import op

from hermes_data.errors import ForwardOnlyError
from hermes_data.migrate.ops import add_column_if_missing, record_ledger_version
from hermes_data.types import INTEGER, REAL, TEXT

revision = "v09"
down_revision = "v08"
branch_labels = None
depends_on = None

# Frozen DDL of its time: this file never imports the head metadata.


def upgrade() -> None:
    int0: dict[str, Any] = dict(server_default=sa.text("0"))
    for name in ("cache_read_tokens", "cache_write_tokens", "reasoning_tokens", "estimated",
                 "provider_assumed"):
        add_column_if_missing("llm_calls", sa.Column(name, INTEGER, **int0))
    add_column_if_missing("runs", sa.Column("parent_session_id", TEXT))
    add_column_if_missing("runs", sa.Column("estimated_llm_calls", INTEGER, **int0))
    add_column_if_missing("runs", sa.Column("sender_id", TEXT))
    for name in ("cache_read_tokens", "cache_write_tokens", "provider_assumed_calls"):
        add_column_if_missing("runs", sa.Column(name, INTEGER, **int0))
    record_ledger_version(9)


def downgrade() -> None:
    raise ForwardOnlyError(f"revision {revision} cannot be downgraded: the history is forward-only")
