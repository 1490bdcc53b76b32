"""s10 — a ``pg_trgm`` index over the tool columns of non-tool rows (issue 16 item 5).

PostgreSQL only. A short-CJK query mixing CJK letters with Latin tokens (``qRm 日 西AK3R2G``)
matches each token as a substring of ``content``, ``tool_name`` or ``tool_calls``; the CJK
letters have ``messages_cjk_grams`` (s07), the content has ``messages_fts_trgm`` (s01), but
the two tool columns had no index: the route compared every row (0.4–1.6 s at 200,000
messages). ``messages_tool_trgm`` is one GIN index over both columns (``gin_trgm_ops``),
partial on ``role <> 'tool'`` — the rows of the short-CJK scope; the search OR-s one
``ILIKE`` per column and the planner combines two scans of the index (``BitmapOr``). The
index gives candidates, the search's ``ILIKE`` verifies them: results are unchanged.
Storage: 4 MB at 50,000 messages, 12 MB at 200,000 (``messages_fts_trgm``: 17 / 55 MB);
built in the revision's transaction (~1.8 s at 200,000 messages). Without ``pg_trgm`` (s01
then skipped ``messages_fts_trgm`` too) the revision creates nothing; the route keeps
scanning.

SQLite needs nothing: its CJK route is served by the CJK-bigram index (docs/sessions-storage.md §3.9.3).

Add-only and idempotent (``IF NOT EXISTS``); forward only.

Revision ID: s10_tool_trigrams
Revises: s09_accent_fold
"""

import logging

from alembic import op

from hermes_data.errors import ForwardOnlyError

revision = "s10_tool_trigrams"
down_revision = "s09_accent_fold"
branch_labels = None
depends_on = None

log = logging.getLogger("hermes_data.sessions.migrations")

# Frozen DDL of its time: this file never imports the head metadata or fragments.
_PG_TRGM_INSTALLED = "SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm'"
_PG_TOOL_TRGM_INDEX = (
    "CREATE INDEX IF NOT EXISTS messages_tool_trgm ON messages USING gin "
    "(tool_name gin_trgm_ops, tool_calls gin_trgm_ops) WHERE role <> 'tool'")


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return  # SQLite: the CJK-bigram index serves the route
    if bind.exec_driver_sql(_PG_TRGM_INSTALLED).first() is None:
        log.warning("s10: pg_trgm is not installed; messages_tool_trgm not created "
                    "(mixed CJK/Latin search scans the tool columns)")
        return
    bind.exec_driver_sql(_PG_TOOL_TRGM_INDEX)
    log.info("s10: tool-column trigram index messages_tool_trgm ready")


def downgrade() -> None:
    raise ForwardOnlyError(f"revision {revision} cannot be downgraded: the history is forward-only")
