"""s02 — PostgreSQL: a stored, generated ``tsvector`` column for the standard full-text route.

SQLite: nothing. The FTS5 objects of s01_baseline stay exactly as they are; a SQLite file
passes through this revision unchanged except for its Alembic version row.

PostgreSQL: s01_baseline indexed ``to_tsvector('simple', <document>)`` as a GIN *expression*
index (``messages_fts_tsv``). Two measured gaps follow from that:

* recall — PostgreSQL's default parser keeps file paths, host names, e-mail addresses and
  URLs as one lexeme (``gateway/run.py``), where FTS5's unicode61 tokenizer splits on every
  character that is not a letter or digit, so ``gateway`` found nothing there;
* latency — ``ts_rank`` had to recompute the document of every ranked candidate.

This revision adds ``messages.fts_document``::

    tsvector GENERATED ALWAYS AS (to_tsvector('simple', regexp_replace(<document>,
        '[^0-9A-Za-z\\u0080-\\U0010FFFF]+', ' ', 'g'))) STORED

where ``<document>`` is the text FTS5 indexes (``content``, cut to 8192 characters on tool
rows, then ``tool_name`` and ``tool_calls``). Every run of ASCII characters that are not
letters or digits becomes a space *before* the parser sees the text, so ``gateway/run.py``
is the three lexemes ``gateway``, ``run``, ``py`` — unicode61's words. Non-ASCII characters
are left to the parser (which, under a Unicode ``LC_CTYPE`` such as ``C.UTF-8`` or
``en_US.UTF-8``, splits on non-letters like ``，`` or ``—`` as unicode61 does); the class is
spelled with explicit ranges rather than ``[:alnum:]`` because under a plain ``C`` collation
``[:alnum:]`` is ASCII-only and would erase every CJK or accented letter. Case folds
through the ``simple`` dictionary (lower-case); diacritics are *not* removed (unicode61
removes them; ``unaccent`` is not immutable, so it cannot serve a generated column).

A GIN index ``messages_fts_document`` is built on the column. ``messages_fts_tsv`` (the
expression index of s01_baseline) is dropped: no query uses its expression any more, so it
is strictly redundant and only costs writes. ``messages_fts_trgm`` is kept unchanged.

Adding a stored generated column rewrites ``messages`` (ACCESS EXCLUSIVE for the rewrite):
every existing row is backfilled by PostgreSQL itself, in this revision's transaction.

Revision ID: s02_pg_stored_tsvector
Revises: s01_baseline
"""

from alembic import op

from hermes_data.errors import ForwardOnlyError

revision = "s02_pg_stored_tsvector"
down_revision = "s01_baseline"
branch_labels = None
depends_on = None

# Frozen DDL of its time: this file never imports the head fragments.
_SPLIT = r"[^0-9A-Za-z\u0080-\U0010FFFF]+"
_DOCUMENT = (
    "CASE WHEN role = 'tool' THEN substr(COALESCE(content, ''), 1, 8192) "
    "ELSE COALESCE(content, '') END "
    "|| ' ' || COALESCE(tool_name, '') || ' ' || COALESCE(tool_calls, '')"
)
_ADD_COLUMN = (
    "ALTER TABLE messages ADD COLUMN IF NOT EXISTS fts_document tsvector "
    f"GENERATED ALWAYS AS (to_tsvector('simple'::regconfig, regexp_replace({_DOCUMENT}, "
    f"'{_SPLIT}', ' ', 'g'))) STORED"
)
_CREATE_INDEX = ("CREATE INDEX IF NOT EXISTS messages_fts_document ON messages "
                 "USING gin (fts_document)")
_DROP_OLD_INDEX = "DROP INDEX IF EXISTS messages_fts_tsv"


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return  # SQLite: FTS5 objects already tokenise with unicode61; nothing changes
    bind.exec_driver_sql(_ADD_COLUMN)
    bind.exec_driver_sql(_CREATE_INDEX)
    bind.exec_driver_sql(_DROP_OLD_INDEX)


def downgrade() -> None:
    raise ForwardOnlyError(f"revision {revision} cannot be downgraded: the history is forward-only")
