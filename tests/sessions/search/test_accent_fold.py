"""Accent folding identical on both backends (issue 16 item 5; revision ``s09_accent_fold``).

* The fixed mapping of ``hermes_fold`` (``sql/fold.py``) is what the running SQLite's
  tokenizer of ``messages_fts`` does (re-derived code point by code point), and the revision
  carries the same mapping and DDL.
* On the real PostgreSQL server, ``hermes_fold`` of ``a<c>b`` equals SQLite's fold for every
  code point of the BMP (one statement).
* Search finds the same rows on both backends for accents, ligatures, symbols, decomposed
  input and SQLite's own quirks (a letter with two diacritics keeps them).
* s08 → s09 on a database holding rows and the at-open ``unaccent`` objects: the accent
  queries match the same rows, ``©`` no longer matches the word ``c``, the old objects are
  gone (the extension stays); a LATIN1 database folds what it can store.
"""

from __future__ import annotations

import importlib.util
import logging
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa

from hermes_data.migrate import runner as migrate
from hermes_data.sessions.storage.fts import fold_sql as fold
from hermes_data.sessions.store import SessionStore

from tests.conftest import PG_ADMIN_URL
from tests.sessions.conftest import BACKENDS, module_target
from tests.sessions.search.fold_support import BMP, derive, observe, tokenize_option

REVISION = (Path(__file__).resolve().parents[3] / "migrations" / "sessions" / "versions"
            / "s09_accent_fold.py")


def _revision():
    spec = importlib.util.spec_from_file_location("s09_accent_fold", REVISION)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -------------------------------------------------------------------------------------
# The constant
# -------------------------------------------------------------------------------------


def test_messages_fts_uses_the_default_tokenizer():
    # The derivation reads the tokenizer of messages_fts: unicode61, remove_diacritics 1.
    assert tokenize_option() == ""


def test_the_mapping_is_what_sqlite_folds():
    letters, marks = derive(BMP)
    assert letters == fold.FOLD_LETTERS
    assert marks == fold.FOLD_MARKS
    assert len(fold.FOLD_FROM) == 401 and len(fold.FOLD_TO) == 376


def test_the_revision_carries_the_head_mapping_and_ddl():
    s09 = _revision()
    assert s09.fold_mapping() == (fold.FOLD_FROM, fold.FOLD_TO)
    assert s09._fold_function(*s09.fold_mapping()) == fold.PG_FOLD_FUNCTION_DDL
    assert s09._PG_FOLD_INDEX == fold.PG_FOLD_INDEX_DDL


def test_the_ddl_refuses_a_quote_in_the_mapping():
    with pytest.raises(ValueError):
        fold.pg_fold_function_ddl("'", "x")


# -------------------------------------------------------------------------------------
# hermes_fold against SQLite, every BMP code point
# -------------------------------------------------------------------------------------


def _sqlite_folds(points) -> dict[str, str]:
    """``a<c>b`` → what SQLite folds it to (diacritics only: case is 'simple''s business)."""
    folded, kept = observe(points)
    out = {}
    for c in folded:
        text = f"a{chr(c)}b"
        if folded[c] == kept[c]:
            out[text] = text
        elif folded[c] == ["ab"]:
            out[text] = "ab"
        else:
            out[text] = folded[c][0]
    return out


@pytest.mark.journal_independent("PostgreSQL only")
def test_hermes_fold_is_sqlites_fold_for_every_bmp_code_point(pg_session_url):
    expected = _sqlite_folds(BMP)
    engine = sa.create_engine(pg_session_url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            got = dict(conn.exec_driver_sql(
                "SELECT u.t, hermes_fold(u.t) FROM unnest(CAST(%s AS text[])) AS u(t)",
                (list(expected),)).all())
            assert conn.exec_driver_sql("SELECT hermes_fold(NULL)").scalar() is None
    finally:
        engine.dispose()
    wrong = {k: (v, got.get(k)) for k, v in expected.items() if got.get(k) != v}
    assert not wrong, dict(list(wrong.items())[:20])
    assert len(got) == len(expected) > 60_000


# -------------------------------------------------------------------------------------
# Search, both backends
# -------------------------------------------------------------------------------------

ROWS = [
    "le café est prêt", "a resume of cafe culture", "the c language is old",
    "copyright © 2024 acme", "encyclopædia britannica", "the encyclopaedia of aether",
    "Straße und Platz", "strasse two", "decomposed cafe\u0301 here", "pinyin lǖ tone",
    "pinyin lu tone", "ÉCOLE normale", "Łódź city", "lodz town",
]


@pytest.fixture(scope="module", params=BACKENDS)
def store(request, tmp_path_factory):
    with SessionStore(module_target(request, tmp_path_factory, "accent-fold")) as s:
        s.create_session("cli1", "cli")
        s.append_messages_batch("cli1", [{"role": "user", "content": t, "timestamp": 1_000.0 + i}
                                         for i, t in enumerate(ROWS)])
        yield s


def _found(store, query: str) -> set[str]:
    hits = store.search_messages(query, limit=50)
    with store.engine.connect() as conn:
        return {conn.execute(sa.text("SELECT content FROM messages WHERE id = :i"),
                             {"i": h.id}).scalar() for h in hits}


@pytest.mark.parametrize("query, expect", [
    # diacritics fold both ways, decomposed input too
    ("cafe", {"le café est prêt", "a resume of cafe culture", "decomposed cafe\u0301 here"}),
    ("café", {"le café est prêt", "a resume of cafe culture", "decomposed cafe\u0301 here"}),
    ("cafe\u0301", {"le café est prêt", "a resume of cafe culture",
                    "decomposed cafe\u0301 here"}),
    ("ecole", {"ÉCOLE normale"}),
    # a symbol is no letter: © is not the word c (unaccent made it "(C)")
    ("©", {"copyright © 2024 acme"}),
    # ligatures and letters of their own are not expanded (unaccent: æ → ae, ß → ss, ł → l)
    ("encyclopaedia", {"the encyclopaedia of aether"}),
    ("encyclopædia", {"encyclopædia britannica"}),
    ("strasse", {"strasse two"}),
    ("straße", {"Straße und Platz"}),
    ("lodz", {"lodz town"}),
    # SQLite's remove_diacritics 1 keeps a letter with two diacritics (ǖ)
    ("lu", {"pinyin lu tone"}),
    ("lǖ", {"pinyin lǖ tone"}),
])
def test_accents_fold_identically(store, query, expect):
    assert _found(store, query) == expect


# -------------------------------------------------------------------------------------
# The revision on PostgreSQL
# -------------------------------------------------------------------------------------

# The objects the writable open created before s09 (frozen texts of that code).
_SPLIT = r"[^0-9A-Za-z\u0080-\U0010FFFF]+"
_SOURCE = ("CASE WHEN role = 'tool' THEN substr(COALESCE(content, ''), 1, 8192) "
           "ELSE COALESCE(content, '') END "
           "|| ' ' || COALESCE(tool_name, '') || ' ' || COALESCE(tool_calls, '')")
_OLD_FUNCTION = ("CREATE OR REPLACE FUNCTION hermes_unaccent(text) RETURNS text LANGUAGE sql "
                 "IMMUTABLE PARALLEL SAFE STRICT AS "
                 "$fold$ SELECT public.unaccent('public.unaccent'::regdictionary, $1) $fold$")
_OLD_INDEX = ("CREATE INDEX IF NOT EXISTS messages_fts_folded ON messages USING gin "
              f"((to_tsvector('simple'::regconfig, hermes_unaccent(regexp_replace({_SOURCE}, "
              f"'{_SPLIT}', ' ', 'g')))))")


def _matches(conn, fn: str, query: str) -> set[str]:
    """Rows whose document, folded by ``fn`` as its index folds it, holds ``query``."""
    if fn == "hermes_unaccent":  # split, then fold
        doc = (f"to_tsvector('simple'::regconfig, {fn}(regexp_replace({_SOURCE}, '{_SPLIT}', "
               "' ', 'g')))")
        term = f"{fn}(regexp_replace(%s, '{_SPLIT}', ' ', 'g'))"
    else:  # the head: fold, then split
        doc = fold.pg_folded_document()
        term = f"regexp_replace({fn}(%s), '{_SPLIT}', ' ', 'g')"
    return {r[0] for r in conn.exec_driver_sql(
        f"SELECT content FROM messages WHERE {doc} @@ phraseto_tsquery('simple', {term})",
        (query,))}


def _names(conn, sql: str) -> set[str]:
    return {r[0] for r in conn.exec_driver_sql(sql)}


ACCENT_QUERIES = ("cafe", "café", "ecole", "pret", "prêt", "resume")


def _at_s08_with_the_open_objects(pg_url: str) -> sa.Engine:
    """A database at s08 holding what the writable open used to create (the ``unaccent``
    extension, ``hermes_unaccent``, ``messages_fts_folded``); returns an engine on it."""
    migrate.upgrade("sessions", pg_url, "s08_symbol_grams")
    engine = sa.create_engine(pg_url, poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE EXTENSION unaccent")
        conn.exec_driver_sql(_OLD_FUNCTION)
        conn.exec_driver_sql(_OLD_INDEX)
    return engine


@pytest.mark.journal_independent("PostgreSQL only")
def test_upgrade_from_s08_replaces_the_unaccent_objects(pg_url):
    engine = _at_s08_with_the_open_objects(pg_url)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql("INSERT INTO sessions(id, source, started_at) "
                                 "VALUES ('s1', 'cli', 1.0)")
            for i, text in enumerate(ROWS):
                conn.exec_driver_sql("INSERT INTO messages(session_id, role, content, timestamp) "
                                     "VALUES ('s1', 'user', %s, %s)", (text, 2.0 + i))
        with engine.connect() as conn:
            before = {q: _matches(conn, "hermes_unaccent", q) for q in ACCENT_QUERIES}
            assert "the c language is old" in _matches(conn, "hermes_unaccent", "©")
        report = migrate.upgrade("sessions", pg_url)
        assert report.applied == ["s09_accent_fold", "s10_tool_trigrams"]
        with engine.connect() as conn:
            assert {q: _matches(conn, "hermes_fold", q) for q in ACCENT_QUERIES} == before
            assert _matches(conn, "hermes_fold", "©") == set()
            indexes = _names(conn, "SELECT indexname FROM pg_indexes "
                                   "WHERE tablename = 'messages'")
            assert "messages_fts_fold" in indexes and "messages_fts_folded" not in indexes
            functions = _names(conn, "SELECT proname FROM pg_proc")
            assert "hermes_fold" in functions and "hermes_unaccent" not in functions
            assert _names(conn, "SELECT extname FROM pg_extension") >= {"unaccent"}
        assert migrate.check("sessions", pg_url) == []
        assert migrate.upgrade("sessions", pg_url).applied == []
    finally:
        engine.dispose()
    with SessionStore(pg_url) as s:
        assert {h.id for h in s.search_messages("cafe")} == {
            h.id for h in s.search_messages("café")} and len(s.search_messages("cafe")) == 3
        with s.engine.connect() as conn:  # the writable open creates nothing any more
            assert "hermes_unaccent" not in _names(conn, "SELECT proname FROM pg_proc")


@pytest.mark.journal_independent("PostgreSQL only")
def test_upgrade_keeps_an_unaccent_wrapper_another_object_uses(pg_url, caplog):
    engine = _at_s08_with_the_open_objects(pg_url)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql("CREATE VIEW user_view AS SELECT hermes_unaccent(title) AS t "
                                 "FROM sessions")
        with caplog.at_level(logging.WARNING, "hermes_data.sessions.migrations"):
            assert migrate.upgrade("sessions", pg_url).applied == ["s09_accent_fold",
                                                                  "s10_tool_trigrams"]
        assert "hermes_unaccent(text) kept" in caplog.text
        with engine.connect() as conn:
            assert "messages_fts_folded" not in _names(conn, "SELECT indexname FROM pg_indexes")
            assert "hermes_unaccent" in _names(conn, "SELECT proname FROM pg_proc")
    finally:
        engine.dispose()


@pytest.fixture
def latin1_url():
    """A fresh LATIN1 database (dropped afterwards)."""
    name = f"hd_l1_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f"CREATE DATABASE \"{name}\" ENCODING 'LATIN1' "
                                 "TEMPLATE template0 LC_COLLATE 'C' LC_CTYPE 'C'")
        yield sa.engine.make_url(PG_ADMIN_URL).set(database=name).render_as_string(
            hide_password=False)
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        admin.dispose()


@pytest.mark.journal_independent("PostgreSQL only")
def test_a_latin1_database_folds_the_characters_it_can_store(latin1_url):
    assert "s09_accent_fold" in migrate.upgrade("sessions", latin1_url).applied
    engine = sa.create_engine(latin1_url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT hermes_fold('Café Ñu æ ß ©')").scalar() \
                == "Cafe nu æ ß ©"
    finally:
        engine.dispose()
    assert migrate.check("sessions", latin1_url) == []


@pytest.mark.journal_independent("PostgreSQL only")
def test_the_folded_tier_query_matches_the_index_expression(pg_session_url):
    # The search's folded query (sql.search.pg_tsquery, fold=True) against the document of
    # sql.fold: the planner can answer it from messages_fts_fold (same expression).
    from hermes_data.sessions.search.sql import pg_tsquery
    params: dict = {}
    tsq = pg_tsquery('café "crème brûlée" pre*', params, "f", fold=True)
    engine = sa.create_engine(pg_session_url, poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
            plan = "\n".join(r[0] for r in conn.execute(sa.text(
                f"EXPLAIN SELECT m.id FROM messages m WHERE {fold.pg_folded_document('m')} "
                f"@@ {tsq}"), params))
    finally:
        engine.dispose()
    assert "messages_fts_fold" in plan, plan
