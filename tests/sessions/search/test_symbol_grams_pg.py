"""The symbol-gram index on PostgreSQL (issue 16; revision ``s08_symbol_grams``):
``hermes_symbol_grams`` and the GIN index ``messages_symbol_grams``. The literal tier of a
literal holding punctuation, symbols or emoji takes its candidates from the index (rare
grams), scans newest first without ``pg_trgm`` (a common literal of symbols only) or keeps
``pg_trgm`` and the word index; every way returns the rows of the core ``ILIKE`` predicate.

Properties (hypothesis, real server): the grams of any substring of a text are grams of the
text (the candidates are a superset); each of the three ways pages exactly like the
reference ``ILIKE`` statement.
"""

from __future__ import annotations

import random

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from hermes_data.migrate import runner as migrate
from hermes_data.sessions.search import postgres as search_pg
from hermes_data.sessions.search.execute import Filters
from hermes_data.sessions.search.capabilities import forget_capabilities, read_capabilities
from hermes_data.sessions.store import SessionStore

from tests.sessions.conftest import _truncate

pytestmark = pytest.mark.journal_independent("PostgreSQL only")

PROFILE = settings(max_examples=80, deadline=None,
                   suppress_health_check=[HealthCheck.function_scoped_fixture,
                                          HealthCheck.too_slow])
ALPHABET = list("abcXYZ019 .,;:!?'\"()[]{}<>=+-*/\\_#@$%^&|~`\n") + [
    "é", "ß", "🚀", "🦀", "⨁", "→", "©", "广", "西", "Σ", "ς", "İ", "\u0301"]
TEXT = st.lists(st.sampled_from(ALPHABET), min_size=1, max_size=40).map("".join)


def _grams(conn, text: str) -> set[str]:
    return set(conn.exec_driver_sql("SELECT hermes_symbol_grams('user', %s)", (text,)).scalar())


@pytest.fixture(scope="module")
def corpus(pg_session_url):
    """Rows of symbols, words and emoji in every scope: trigram-eligible sessions, a cron
    session, tool rows, a hidden row."""
    _truncate(pg_session_url)
    rng = random.Random(16)
    with SessionStore(pg_session_url) as s:
        s.create_session("cli1", "cli")
        s.create_session("cron1", "cron")
        rows = ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 60)))
                for _ in range(300)]
        s.append_messages_batch("cli1", [
            {"role": rng.choice(["user", "assistant", "tool"]), "content": t,
             "timestamp": 1_000.0 + i} for i, t in enumerate(rows)])
        s.append_messages_batch("cron1", [{"role": "user", "content": t, "timestamp": 5_000.0}
                                          for t in rows[:30]])
        with s.engine.begin() as conn:
            conn.exec_driver_sql("UPDATE messages SET display_kind = 'hidden' WHERE mod(id, 37) = 0")
            conn.exec_driver_sql("ANALYZE messages")
        forget_capabilities(s.engine)
        yield s, rows


def test_head_has_the_function_and_the_index(corpus):
    store, _rows = corpus
    with store.engine.connect() as conn:
        assert read_capabilities(conn).symbols
        assert _grams(conn, "a -> b, C++ 🦀") == {" -", "->", "> ", "-", ">", ", ", "b,", ",",
                                                   " 🦀", "🦀", "c+", "++", "+", "+ "}
        assert _grams(conn, "plain words only") == set()
        assert conn.exec_driver_sql(
            "SELECT hermes_symbol_grams('tool', '🦀'), hermes_symbol_grams('user', NULL)"
        ).one() == ([], [])


@PROFILE
@given(text=TEXT, data=st.data())
def test_grams_of_a_substring_are_grams_of_the_text(corpus, text, data):
    store, _rows = corpus
    start = data.draw(st.integers(0, len(text) - 1))
    end = data.draw(st.integers(start + 1, len(text)))
    with store.engine.connect() as conn:
        assert _grams(conn, text[start:end]) <= _grams(conn, text)
        # ILIKE compares the server's lower() of both sides: a query in other case that
        # ILIKE finds in the text has its grams in the text's
        other = text[start:end].swapcase()
        if conn.exec_driver_sql("SELECT strpos(lower(%s), lower(%s)) > 0",
                                (text, other)).scalar():
            assert _grams(conn, other) <= _grams(conn, text)


def _reference(store, literal: str, limit: int, offset: int) -> list[int]:
    """The literal tier's rows, written out: content ILIKE the literal, non-tool rows of
    trigram-eligible sessions, visible, newest first."""
    pattern = "%" + literal.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    with store.engine.connect() as conn:
        return [r[0] for r in conn.execute(sa.text(
            "SELECT m.id FROM messages m JOIN sessions s ON s.id = m.session_id "
            "WHERE m.role <> 'tool' AND s.source NOT IN ('cron', 'subagent') "
            "AND m.content ILIKE :p ESCAPE '\\' AND COALESCE(m.display_kind, '') <> 'hidden' "
            "AND (m.active = 1 OR m.compacted = 1) ORDER BY m.id DESC LIMIT :l OFFSET :o"),
            {"p": pattern, "l": limit, "o": offset})]


@PROFILE
@given(data=st.data(), way=st.sampled_from(["grams", "scan", "trigram"]),
       limit=st.integers(1, 30), offset=st.integers(0, 5))
def test_every_way_of_the_literal_tier_pages_like_ilike(corpus, monkeypatch, data, way, limit,
                                                        offset):
    store, rows = corpus
    text = data.draw(st.sampled_from(rows))
    start = data.draw(st.integers(0, len(text) - 1))
    literal = text[start:data.draw(st.integers(start + 1, len(text)))].strip()
    assume(literal and search_pg.has_symbol(literal))
    if way == "scan":
        assume(not any(ch.isalnum() for ch in literal))
    high, low = 10 ** 12, -1.0
    monkeypatch.setattr(search_pg, "PG_GRAM_CANDIDATES", high if way == "grams" else low)
    monkeypatch.setattr(search_pg, "PG_GRAM_CANDIDATES_WORDS", high if way == "grams" else low)
    with store.engine.connect() as conn:
        hits = search_pg._pg_literal(conn, literal, Filters([], [], [], False), limit, offset,
                                     None, symbols=True)
    assert [h.id for h in hits] == _reference(store, literal, limit, offset), (literal, way)


def test_an_emoji_is_found_through_the_index(corpus):
    store, _rows = corpus
    mid = store.append_message("cli1", "user", "shipped 🛸 today", timestamp=9_000.0)
    hits = store.search_messages("🛸")
    assert [h.id for h in hits] == [mid] and hits[0].route == "literal"


def test_upgrade_from_s07_builds_the_index_over_existing_rows(pg_url):
    migrate.upgrade("sessions", pg_url, "s07_storage")
    engine = sa.create_engine(pg_url, poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql("INSERT INTO sessions(id, source, started_at) "
                                 "VALUES ('s1', 'cli', 1.0)")
            conn.exec_driver_sql("INSERT INTO messages(session_id, role, content, timestamp) "
                                 "VALUES ('s1', 'user', 'deploy 🚀 now', 2.0)")
        report = migrate.upgrade("sessions", pg_url)
        assert "s08_symbol_grams" in report.applied
        with engine.connect() as conn:
            assert conn.exec_driver_sql(
                "SELECT 1 FROM pg_indexes WHERE indexname = 'messages_symbol_grams'").first()
            assert conn.exec_driver_sql(
                "SELECT count(*) FROM messages WHERE hermes_symbol_grams(role, content) "
                "@> ARRAY['🚀']").scalar() == 1
        assert migrate.check("sessions", pg_url) == []
        assert migrate.upgrade("sessions", pg_url).applied == []  # idempotent at head
    finally:
        engine.dispose()
    with SessionStore(pg_url) as s:
        assert [h.route for h in s.search_messages("🚀")] == ["literal"]
