"""s08 — the symbol-gram index of the literal search tier (issue 16 items 1, 3 and 5).

PostgreSQL only. ``pg_trgm`` extracts trigrams from words alone: a literal made of
punctuation, symbols or emoji (``...``, ``C++``, ``a -> b``, ``🚀``) gave the literal tier's
``ILIKE`` no index (or the trigrams of its one-letter words, which match most rows) and it
scanned. SQLite needs nothing: its FTS5 trigram index sees every character.

1. ``hermes_symbol_grams(role, content)`` (IMMUTABLE, PARALLEL SAFE, plain SQL): ``'{}'`` for
   tool rows and ``NULL`` content, else — over ``lower(content)``, the text ``ILIKE`` compares
   — the distinct *symbol characters* (neither ``[[:alnum:]]`` nor ``[[:space:]]``) and every
   adjacent character pair holding one. Each pair is read inside a maximal symbol run
   widened by one character on each side (two ``regexp_matches`` passes: the run with the
   character before it, the run with the character after it), which covers every such pair.
   The search computes the literal's grams with the same function, so the rows whose content
   holds the literal (``ILIKE``) hold all of them: the index gives candidates, ``ILIKE``
   verifies, results are unchanged.
   Declared ``COST 2000`` (~40 µs a call over this corpus' rows, measured; the default
   100 would let the planner evaluate it per row where the index answers).
2. The GIN index ``messages_symbol_grams`` over it, built in the revision's transaction
   (~15 s at 200,000 messages). Not partial (tool rows index ``'{}'``): the planner reads
   the statistics of an index expression only from an index without a predicate.
3. ``ANALYZE messages``: the planner reads the grams' element frequencies from the index
   expression's statistics (a common ``..`` walks the newest ids, a rare ``🚀`` takes the
   index).

Add-only and idempotent (``CREATE OR REPLACE``, ``IF NOT EXISTS``); forward only.

Revision ID: s08_symbol_grams
Revises: s07_storage
"""

import logging

from alembic import op

from hermes_data.errors import ForwardOnlyError

revision = "s08_symbol_grams"
down_revision = "s07_storage"
branch_labels = None
depends_on = None

log = logging.getLogger("hermes_data.sessions.migrations")

# Frozen DDL of its time: this file never imports the head metadata or fragments.
_SYMBOL = "[^[:alnum:][:space:]]"
_PG_SYMBOL_GRAMS_FUNCTION = (
    "CREATE OR REPLACE FUNCTION hermes_symbol_grams(text, text) RETURNS text[] "
    "LANGUAGE sql IMMUTABLE PARALLEL SAFE COST 2000 AS $grams$ "
    "SELECT CASE WHEN $1 = 'tool' OR $2 IS NULL THEN '{}'::text[] ELSE ARRAY("
    "SELECT DISTINCT g FROM ("
    f"SELECT r.m[1] AS run FROM regexp_matches(lower($2), '.?{_SYMBOL}+', 'g') AS r(m) "
    f"UNION ALL SELECT r.m[1] FROM regexp_matches(lower($2), '{_SYMBOL}+.?', 'g') AS r(m)"
    ") AS runs, LATERAL ("
    "SELECT substr(runs.run, i, 2) FROM generate_series(1, length(runs.run) - 1) AS i "
    f"UNION ALL SELECT u.c[1] FROM regexp_matches(runs.run, '{_SYMBOL}', 'g') AS u(c)"
    ") AS t(g) ORDER BY g) END $grams$")
_PG_SYMBOL_GRAMS_INDEX = (
    "CREATE INDEX IF NOT EXISTS messages_symbol_grams ON messages USING gin "
    "(hermes_symbol_grams(role, content))")


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return  # SQLite: the FTS5 trigram index already sees symbols
    bind.exec_driver_sql(_PG_SYMBOL_GRAMS_FUNCTION)
    bind.exec_driver_sql(_PG_SYMBOL_GRAMS_INDEX)
    bind.exec_driver_sql("ANALYZE messages")
    log.info("s08: symbol-gram index messages_symbol_grams ready")


def downgrade() -> None:
    raise ForwardOnlyError(f"revision {revision} cannot be downgraded: the history is forward-only")
