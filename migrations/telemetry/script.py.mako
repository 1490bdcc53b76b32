"""${message}

Ledger row: (write the ledger table row for this version here, verbatim.)

Revision ID: ${up_revision}
Revises: ${down_revision | comma,n}
Create Date: ${create_date}
"""

import sqlalchemy as sa
from alembic import op

from hermes_data.errors import ForwardOnlyError
from hermes_data.ops import record_ledger_version
from hermes_data.types import INTEGER, REAL, TEXT

revision = ${repr(up_revision)}
down_revision = ${repr(down_revision)}
branch_labels = ${repr(branch_labels)}
depends_on = ${repr(depends_on)}

# Frozen DDL: never import the head metadata here; it keeps changing, this file must not.


def upgrade() -> None:
    ${upgrades if upgrades else "raise NotImplementedError('write the upgrade by hand')"}
    # record_ledger_version(N)  # the upstream schema_version row, same transaction


def downgrade() -> None:
    raise ForwardOnlyError(f"revision {revision} cannot be downgraded: the history is forward-only")
