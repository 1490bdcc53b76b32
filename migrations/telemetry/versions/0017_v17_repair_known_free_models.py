"""v17 — data-only repair of known_free_models (issue #89).

Ledger: "v17 | Data-only repair: deletes known_free_models rows with no evidence of being
genuinely free (no wildcard provider='', and no llm_calls row for the same model+provider with
cost_usd = 0 AND tokens > 0), plus their free_paid_transitions rows. No shape change."

Interpretation (docs/telemetry.md §3.2): tokens = tokens_in + tokens_out; a wildcard row
protects only itself; "their" transitions share the (model, provider) pair. Transitions go
first, while the candidate rows still exist.
"""

import sqlalchemy as sa
from alembic import op

from hermes_data.errors import ForwardOnlyError
from hermes_data.migrate.ops import add_column_if_missing, record_ledger_version
from hermes_data.types import INTEGER, REAL, TEXT

revision = "v17"
down_revision = "v16"
branch_labels = None
depends_on = None

# Frozen DDL of its time: this file never imports the head metadata.


def upgrade() -> None:
    # Like the plugin's own guard: a file whose ledger already has row 17 ran this repair;
    # running it again would delete rows recorded since.
    done = op.get_bind().execute(sa.text("SELECT 1 FROM schema_version WHERE version = 17")).first()
    if done is None:
        op.execute(sa.text(_DELETE_TRANSITIONS))
        op.execute(sa.text(_DELETE_FREE_MODELS))
    record_ledger_version(17)


# A known_free_models row k is a candidate when it is provider-specific and no llm_calls
# row proves that (model, provider) was really served for free.
_CANDIDATE = """
    k.provider <> ''
    AND NOT EXISTS (
        SELECT 1 FROM llm_calls lc
        WHERE lc.model = k.model AND lc.provider = k.provider
          AND lc.cost_usd = 0
          AND COALESCE(lc.tokens_in, 0) + COALESCE(lc.tokens_out, 0) > 0
    )
"""

_DELETE_TRANSITIONS = f"""
DELETE FROM free_paid_transitions
WHERE EXISTS (
    SELECT 1 FROM known_free_models k
    WHERE k.model = free_paid_transitions.model
      AND k.provider = free_paid_transitions.provider
      AND {_CANDIDATE}
)
"""

_DELETE_FREE_MODELS = f"""
DELETE FROM known_free_models
WHERE EXISTS (
    SELECT 1 FROM known_free_models k
    WHERE k.model = known_free_models.model
      AND k.provider = known_free_models.provider
      AND {_CANDIDATE}
)
"""


def downgrade() -> None:
    raise ForwardOnlyError(f"revision {revision} cannot be downgraded: the history is forward-only")
