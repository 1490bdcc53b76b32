"""s09 — accent folding on PostgreSQL identical to SQLite's (issue 16 item 5).

PostgreSQL only: SQLite's FTS5 unicode61 tokenizer (``remove_diacritics 1``) folds as it
indexes. Until now the PostgreSQL writable open created, outside the revision history, the
``unaccent`` extension, an IMMUTABLE wrapper ``hermes_unaccent`` and the GIN index
``messages_fts_folded`` on the ``unaccent``-ed document; ``unaccent`` also expands symbols and
ligatures (``©`` → ``(C)``: ``©`` found every row with the word ``c``; ``æ`` → ``ae``,
``ß`` → ``ss``), which SQLite does not. This revision owns the replacement, which needs no
extension:

1. ``hermes_fold(text)`` (IMMUTABLE, PARALLEL SAFE, plain SQL, not STRICT so that it is
   inlined): ``translate`` over a fixed mapping read off SQLite's tokenizer — 376 Latin
   letters to their ASCII letter, 25 combining marks removed (``_FOLD_LETTERS``,
   ``_FOLD_MARKS``); a text holding none of them (one regular-expression scan) is returned
   as it is.
2. The GIN index ``messages_fts_fold`` on ``to_tsvector('simple', <the s02 document's
   source, passed through hermes_fold, then split>)``, built in the revision's transaction
   (~9 s at 200,000 messages).
3. The at-open objects, when present: the index ``messages_fts_folded``, then the function
   ``hermes_unaccent(text)`` (kept, with a WARNING, when another object depends on it). The
   ``unaccent`` extension stays: it may serve others, and the store's role may not own it.

A database whose server encoding is not UTF8 cannot hold every folded character: the
mapping keeps those the server accepts (asked one by one; ``SQL_ASCII``, which stores bytes
unconverted, keeps none — ``hermes_fold`` is then the identity), which is still SQLite's
folding of every character such a database can store.

Add-only apart from the replaced objects, idempotent (``CREATE OR REPLACE``, ``IF NOT
EXISTS``, ``IF EXISTS``); forward only.

Revision ID: s09_accent_fold
Revises: s08_symbol_grams
"""

import logging

import sqlalchemy as sa
from alembic import op

from hermes_data.errors import ForwardOnlyError

revision = "s09_accent_fold"
down_revision = "s08_symbol_grams"
branch_labels = None
depends_on = None

log = logging.getLogger("hermes_data.sessions.migrations")

# Frozen DDL of its time: this file never imports the head metadata or fragments.

# SQLite 3.40.1, unicode61 remove_diacritics 1 (tests/sessions/fold_support.py): for each
# ASCII letter the characters folded to it; the combining marks dropped inside a word.
_FOLD_LETTERS = {
    "a": "ÀÁÂÃÄÅàáâãäåĀāĂăĄąǍǎȀȁȂȃȦȧḀḁẠạẢả\u212b",
    "b": "ḂḃḄḅḆḇ",
    "c": "ÇçĆćĈĉĊċČč",
    "d": "ĎďḊḋḌḍḎḏḐḑḒḓ",
    "e": "ÈÉÊËèéêëĒēĔĕĖėĘęĚěȄȅȆȇȨȩḘḙḚḛẸẹẺẻẼẽ",
    "f": "Ḟḟ",
    "g": "ĜĝĞğĠġĢģǦǧǴǵḠḡ",
    "h": "ĤĥȞȟḢḣḤḥḦḧḨḩḪḫẖ",
    "i": "ÌÍÎÏìíîïĨĩĪīĬĭĮįİǏǐȈȉȊȋḬḭỈỉỊị",
    "j": "Ĵĵǰ",
    "k": "ĶķǨǩḰḱḲḳḴḵ",
    "l": "ĹĺĻļĽľḶḷḺḻḼḽ",
    "m": "ḾḿṀṁṂṃ",
    "n": "ÑñŃńŅņŇňǸǹṄṅṆṇṈṉṊṋ",
    "o": "ÒÓÔÕÖòóôõöŌōŎŏŐőƠơǑǒǪǫȌȍȎȏȮȯỌọỎỏ",
    "p": "ṔṕṖṗ",
    "r": "ŔŕŖŗŘřȐȑȒȓṘṙṚṛṞṟ",
    "s": "ŚśŜŝŞşŠšȘșṠṡṢṣẛ",
    "t": "ŢţŤťȚțṪṫṬṭṮṯṰṱẗ",
    "u": "ÙÚÛÜùúûüŨũŪūŬŭŮůŰűŲųƯưǓǔȔȕȖȗṲṳṴṵṶṷỤụỦủ",
    "v": "ṼṽṾṿ",
    "w": "ŴŵẀẁẂẃẄẅẆẇẈẉẘ",
    "x": "ẊẋẌẍ",
    "y": "ÝýÿŶŷŸȲȳẎẏẙỲỳỴỵỶỷỸỹ",
    "z": "ŹźŻżŽžẐẑẒẓẔẕ",
}
_FOLD_MARKS = ("\u0300\u0301\u0302\u0303\u0304\u0306\u0307\u0308\u0309\u030a\u030b\u030c\u030f"
               "\u0311\u031b\u0323\u0324\u0325\u0326\u0327\u0328\u032d\u032e\u0330\u0331")
# Mapped to themselves ahead of the folded characters (``translate`` scans its ``from`` text
# from the start for every character): the ASCII a split document holds, by frequency.
_ASCII_FIRST = " etaoinsrhldcumfpgwybvkxjqzETAOINSRHLDCUMFPGWYBVKXJQZ0123456789"

_PG_SPLIT = r"[^0-9A-Za-z\u0080-\U0010FFFF]+"
_PG_SOURCE = ("CASE WHEN role = 'tool' THEN substr(COALESCE(content, ''), 1, 8192) "
              "ELSE COALESCE(content, '') END "
              "|| ' ' || COALESCE(tool_name, '') || ' ' || COALESCE(tool_calls, '')")
_PG_FOLD_INDEX = (
    "CREATE INDEX IF NOT EXISTS messages_fts_fold ON messages USING gin "
    f"((to_tsvector('simple'::regconfig, regexp_replace(hermes_fold({_PG_SOURCE}), "
    f"'{_PG_SPLIT}', ' ', 'g'))))")


def _fold_function(fold_from: str, fold_to: str) -> str:
    if not fold_from:
        body = "SELECT $1"
    else:
        body = (f"SELECT CASE WHEN $1 !~ '[{fold_from}]' THEN $1 ELSE translate($1, "
                f"'{_ASCII_FIRST}{fold_from}', '{_ASCII_FIRST}{fold_to}') END")
    return ("CREATE OR REPLACE FUNCTION hermes_fold(text) RETURNS text LANGUAGE sql "
            f"IMMUTABLE PARALLEL SAFE AS $fold$ {body} $fold$")


def fold_mapping(accepts=lambda ch: True) -> tuple[str, str]:
    """``translate``'s ``from`` and ``to`` texts, keeping the characters ``accepts``."""
    pairs = [(ch, letter) for letter, chars in _FOLD_LETTERS.items() for ch in chars]
    kept = [(ch, letter) for ch, letter in pairs if accepts(ch)]
    marks = "".join(ch for ch in _FOLD_MARKS if accepts(ch))
    return "".join(ch for ch, _ in kept) + marks, "".join(letter for _, letter in kept)


def _server_accepts(bind):
    encoding = bind.exec_driver_sql("SHOW server_encoding").scalar()
    if encoding == "UTF8":
        return lambda ch: True
    if encoding == "SQL_ASCII":
        log.warning("s09: server encoding SQL_ASCII stores bytes unconverted: hermes_fold "
                    "folds nothing")
        return lambda ch: False

    def accepts(ch: str) -> bool:
        try:
            with bind.begin_nested():
                bind.exec_driver_sql("SELECT CAST(%s AS text)", (ch,))
            return True
        except (sa.exc.DBAPIError, sa.exc.StatementError, UnicodeError):
            return False
    return accepts


def _drop_at_open_objects(bind) -> None:
    bind.exec_driver_sql("DROP INDEX IF EXISTS messages_fts_folded")
    try:
        with bind.begin_nested():
            bind.exec_driver_sql("DROP FUNCTION IF EXISTS hermes_unaccent(text)")
    except sa.exc.DBAPIError as exc:
        log.warning("s09: hermes_unaccent(text) kept (another object depends on it: %s)",
                    exc.orig)


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return  # SQLite: FTS5's unicode61 tokenizer folds as it indexes
    fold_from, fold_to = fold_mapping(_server_accepts(bind))
    bind.exec_driver_sql(_fold_function(fold_from, fold_to))
    bind.exec_driver_sql(_PG_FOLD_INDEX)
    _drop_at_open_objects(bind)
    log.info("s09: accent-folded index messages_fts_fold ready (%d characters folded)",
             len(fold_from))


def downgrade() -> None:
    raise ForwardOnlyError(f"revision {revision} cannot be downgraded: the history is forward-only")
