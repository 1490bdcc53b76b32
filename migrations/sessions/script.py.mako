"""${message}

Revision ID: ${up_revision}
Revises: ${down_revision | comma,n}
Create Date: ${create_date}
"""

import sqlalchemy as sa
from alembic import op

from hermes_data.errors import ForwardOnlyError
from hermes_data.types import INTEGER, REAL, TEXT

revision = ${repr(up_revision)}
down_revision = ${repr(down_revision)}
branch_labels = ${repr(branch_labels)}
depends_on = ${repr(depends_on)}

# Frozen DDL: never import the head metadata here; it keeps changing, this file must not.
# The session store never writes upstream's schema_version table (docs/sessions.md §2.8).


def upgrade() -> None:
    ${upgrades if upgrades else "raise NotImplementedError('write the upgrade by hand')"}


def downgrade() -> None:
    raise ForwardOnlyError(f"revision {revision} cannot be downgraded: the history is forward-only")
