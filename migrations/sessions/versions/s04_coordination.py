"""s04 — transcript editing and coordination (docs/sessions-coordination.md §2): the
compression cooldown/streak columns and ``rewind_count`` on ``sessions``.

Add-only and read-gated: a column an upstream file already has is left exactly as it is
(values and declaration); the missing ones are appended with their canonical expression under
the core reconcile rule (``duplicate column`` DEBUG, ``locked``/``busy`` re-raised into the
open's lock patience, anything else a WARNING naming table.column). ``api_call_count`` is
owned by ``s03_agent_turn`` and only re-checked here. No table, index or data step.

Revision ID: s04_coordination
Revises: s03_agent_turn
"""

import logging

import sqlalchemy as sa
from alembic import op

from hermes_data.errors import ForwardOnlyError
from hermes_data.migrate.ops import add_missing_columns
from hermes_data.types import INTEGER, REAL, TEXT

revision = "s04_coordination"
down_revision = "s03_agent_turn"
branch_labels = None
depends_on = None

log = logging.getLogger("hermes_data.sessions.migrations")

# Frozen DDL of its time: this file never imports the head metadata.


def _session_columns():
    """Coordination docs/sessions-coordination.md §2.1, in the order a fresh store appends them."""
    zero = sa.text("0")
    return [
        sa.Column("compression_failure_cooldown_until", REAL),
        sa.Column("compression_failure_error", TEXT),
        sa.Column("compression_fallback_streak", INTEGER, nullable=False, server_default=zero),
        sa.Column("compression_ineffective_count", INTEGER, nullable=False, server_default=zero),
        sa.Column("compression_recovery_deadline", REAL),
        sa.Column("compression_overload_streak", INTEGER, nullable=False, server_default=zero),
        sa.Column("rewind_count", INTEGER, nullable=False, server_default=zero),
        sa.Column("api_call_count", INTEGER, server_default=zero),
    ]


def upgrade() -> None:
    add_missing_columns(op.get_bind(), "sessions", _session_columns(), log)


def downgrade() -> None:
    raise ForwardOnlyError(f"revision {revision} cannot be downgraded: the history is forward-only")
