"""How a PostgreSQL word/phrase page finds its candidates (issue 16): the GIN index and a sort
when the document statistics say the matches are few, else a newest-first walk. The choice
changes the cost only — the rows are checked on both backends by test_search*.py."""

from __future__ import annotations

import pytest

from hermes_data.sessions.search import postgres as search_pg

pytestmark = pytest.mark.journal_independent("pure: statistics stubbed")

ROWS = 200_000
FREQ = {"with": 21_600, "file": 32_600, "of": 49_400, "the": 109_000, "to": 65_000,
        "be": 30_500, "sorted": 1_100, "methods": 5_600}


@pytest.fixture()
def stats(monkeypatch):
    def rows(_conn, _which, words):
        return min(FREQ[w] for w in words) if words else None

    def joint(_conn, _which, words):
        out = float(ROWS)
        for w in set(words):
            out *= FREQ[w] / ROWS
        return out

    monkeypatch.setattr(search_pg, "element_rows", rows)
    monkeypatch.setattr(search_pg, "joint_rows", joint)
    monkeypatch.setattr(search_pg, "table_rows", lambda _conn, _which: float(ROWS))


@pytest.mark.parametrize("match, few", [
    ("sorted", True),                 # a rare word: the GIN index
    ("methods", False),               # common: the walk stops early
    ("with file", False),             # two common words, not a phrase: the AND is common
    ('"with file"', True),            # rare as a phrase: joint ~3,500 ⇒ the GIN index
    ('"of the"', False),              # common phrase: joint ~27,000 ⇒ the walk
    ('"to be"', False),               # joint ~9,900 ⇒ the walk
    ('"with file" OR methods', False),  # a group without a phrase: the word bound decides
    ('"with file" OR sorted', True),    # ... which is low
    ('"with file" OR "of the"', False),
])
def test_phrase_pages_read_the_index_when_the_words_rarely_meet(stats, match, few):
    assert search_pg._pg_few_matches(None, match) is few  # type: ignore[arg-type]


@pytest.mark.parametrize("match, few", [
    ('"with file"', True),   # joint ~35,000 of 2,000,000 (1.8 %): the GIN index
    ('"to be"', False),      # joint ~99,000 (5 %): above the 4 % share, the walk
    ('"of the"', False),     # joint ~270,000 (13 %): the walk stops early
])
def test_the_phrase_bound_grows_with_the_table(stats, monkeypatch, match, few):
    """At ten times the rows (every frequency ×10), a phrase's walk reads up to ten times as
    many rows when the phrase is rare, so the bound is a share of the table, not a count."""
    monkeypatch.setattr(search_pg, "table_rows", lambda _conn, _which: float(ROWS * 10))
    monkeypatch.setattr(search_pg, "element_rows",
                        lambda _c, _w, words: min(FREQ[w] for w in words) * 10.0)

    def joint(_conn, _which, words):
        out = float(ROWS * 10)
        for w in set(words):
            out *= FREQ[w] / ROWS
        return out

    monkeypatch.setattr(search_pg, "joint_rows", joint)
    share = search_pg.PG_PHRASE_BITMAP_SHARE * ROWS * 10
    assert (joint(None, None, match.strip('"').split()) <= share) is few
    assert search_pg._pg_few_matches(None, match) is few  # type: ignore[arg-type]
