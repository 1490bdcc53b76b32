"""PostgreSQL search objects created at the writable open (issue 16 item 5): accent folding.

FTS5's unicode61 tokenizer removes diacritics (``cafe`` finds ``café`` and back); the
PostgreSQL 'simple' configuration does not, and ``unaccent`` is only STABLE, so it cannot
serve the stored generated column of s02. These objects add the folding beside it:

* the ``unaccent`` extension (``CREATE EXTENSION IF NOT EXISTS``);
* ``hermes_unaccent(text)``: an IMMUTABLE, PARALLEL SAFE SQL wrapper calling ``unaccent``
  with its dictionary schema-qualified (the documented way to index ``unaccent``);
* ``messages_fts_folded``: a GIN expression index on the folded document — the s02 document
  (:data:`PG_FTS_SOURCE`, split as :data:`PG_FTS_SPLIT`) passed through ``hermes_unaccent``
  before ``to_tsvector('simple', …)``.

They are created by :func:`hermes_data.sessions.search_index.ensure_pg_search_objects`, an
idempotent function the PostgreSQL writable open calls, not by an Alembic revision (the
sessions history is s01, s02, then the extension revisions); a later revision may adopt them
add-only with these very texts. Every text here is fixed; the extension's schema name comes
from the catalogue and is quoted with :func:`quote_ident`.
"""

from __future__ import annotations

import re

from sqlalchemy import text
from sqlalchemy.sql.elements import TextClause

from .core import quote_ident
from .fts import PG_FTS_SOURCE, PG_FTS_SPLIT

#: The folding wrapper's name (also the capability probe's).
PG_FOLD_FUNCTION = "hermes_unaccent"
#: The folded-document GIN index.
PG_FOLDED_INDEX = "messages_fts_folded"

#: Both objects present in the current schema? ``(functions, indexes)`` counts.
PG_FOLD_PRESENT = text(
    "SELECT (SELECT count(*) FROM pg_proc p WHERE p.proname = 'hermes_unaccent' "
    "AND p.pronamespace = current_schema()::regnamespace), "
    "(SELECT count(*) FROM pg_indexes WHERE schemaname = current_schema() "
    "AND tablename = 'messages' AND indexname = 'messages_fts_folded')")
#: Serialises concurrent opens creating the objects (transaction-scoped advisory lock).
PG_FOLD_LOCK = text("SELECT pg_advisory_xact_lock(hashtext('hermes_data.search_index'))")
#: The extension (needs CREATE on the database; a failure leaves folding unavailable).
PG_CREATE_UNACCENT = text("CREATE EXTENSION IF NOT EXISTS unaccent")
#: Schema holding the extension's ``unaccent`` function and dictionary.
PG_UNACCENT_SCHEMA = text(
    "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace "
    "WHERE e.extname = 'unaccent'")


def pg_fold_function_ddl(schema: str) -> TextClause:
    """``CREATE OR REPLACE FUNCTION hermes_unaccent(text)`` calling the ``unaccent`` of
    ``schema`` (a catalogue name, quoted here) with its dictionary schema-qualified."""
    ident = quote_ident(schema)
    dictionary = (ident + ".unaccent").replace("'", "''")
    return text(
        "CREATE OR REPLACE FUNCTION hermes_unaccent(text) RETURNS text LANGUAGE sql "
        "IMMUTABLE PARALLEL SAFE STRICT AS "
        f"$fold$ SELECT {ident}.unaccent('{dictionary}'::regdictionary, $1) $fold$")


def pg_folded_document(alias: str | None = None) -> str:
    """The folded document expression; ``alias`` qualifies the columns (``m``) for queries —
    the same expression as the index's, so the planner uses :data:`PG_FOLDED_INDEX`."""
    source = PG_FTS_SOURCE if alias is None else re.sub(
        r"\b(role|content|tool_name|tool_calls)\b", alias + r".\1", PG_FTS_SOURCE)
    return (f"to_tsvector('simple'::regconfig, hermes_unaccent(regexp_replace({source}, "
            f"'{PG_FTS_SPLIT}', ' ', 'g')))")


#: The folded-document index (built in the open's transaction: a one-off on existing rows).
PG_FOLDED_INDEX_DDL = text(
    f"CREATE INDEX IF NOT EXISTS messages_fts_folded ON messages USING gin "
    f"(({pg_folded_document()}))")
