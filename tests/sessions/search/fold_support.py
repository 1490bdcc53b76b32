"""SQLite's accent folding, read off the tokenizer of ``messages_fts`` (issue 16 item 5).

:func:`derive` asks the running SQLite, code point by code point, what the unicode61
tokenizer of ``messages_fts`` (the tokenize option of :data:`FTS_TABLE_DDL`: none, so
``unicode61`` with its default ``remove_diacritics 1``) does to a character between two ASCII
letters — the document ``a<c>b`` in an in-memory FTS5 table, read back through ``fts5vocab``:

* ``['a<x>b']`` — a token character, folded to ``x``;
* ``['ab']`` — a combining mark the tokenizer drops inside a word (never a token start:
  alone or after a separator it is itself a separator, which dropping it reproduces);
* ``['a', 'b']`` — a separator.

The same table with ``remove_diacritics 0`` separates case folding from diacritic removal:
the characters whose token differs between the two are the ones SQLite *un-accents*, each to
one ASCII letter. That is :data:`hermes_data.sessions.storage.fts.fold_sql.FOLD_LETTERS` and
:data:`~hermes_data.sessions.storage.fts.fold_sql.FOLD_MARKS`, the fixed mapping of PostgreSQL's
``hermes_fold`` (revision ``s09_accent_fold``); ``tests/sessions/search/test_accent_fold.py``
re-derives it and compares. Beyond the BMP SQLite removes no diacritic (its fold table stops
at U+FFFF; checked over every plane with ``--all`` when the constant was generated).

Run as a script to print the constant (``python -m tests.sessions.search.fold_support [--all]``).
"""

from __future__ import annotations

import re
import sqlite3
import sys
import unicodedata

from hermes_data.sessions.storage.fts.ddl import FTS_TABLE_DDL

BMP = range(0x80, 0x10000)
EVERY_PLANE = range(0x80, 0x110000)


def tokenize_option() -> str:
    """The tokenize option of ``messages_fts`` (empty: FTS5's default ``unicode61``)."""
    found = re.search(r"tokenize\s*=\s*'([^']*)'", FTS_TABLE_DDL)
    return found.group(1) if found else ""


def _tokens(db: sqlite3.Connection, name: str, tokenize: str,
            points: list[int]) -> dict[int, list[str]]:
    option = f", tokenize='{tokenize}'" if tokenize else ""
    db.execute(f"CREATE VIRTUAL TABLE {name} USING fts5(content{option})")
    db.execute(f"CREATE VIRTUAL TABLE {name}_v USING fts5vocab({name}, 'instance')")
    db.executemany(f"INSERT INTO {name}(rowid, content) VALUES (?, ?)",
                   [(c, f"a{chr(c)}b") for c in points])
    out: dict[int, list[str]] = {c: [] for c in points}
    for doc, term in db.execute(f"SELECT doc, term FROM {name}_v ORDER BY doc, offset"):
        out[doc].append(term)
    return out


def observe(points: range = BMP) -> tuple[dict[int, list[str]], dict[int, list[str]]]:
    """Tokens of ``a<c>b`` for every code point of ``points`` (surrogates skipped): with the
    tokenizer of ``messages_fts``, and with the same tokenizer keeping diacritics."""
    chosen = [c for c in points if not 0xD800 <= c <= 0xDFFF]
    base = tokenize_option() or "unicode61"
    if "remove_diacritics" in base or not base.startswith("unicode61"):
        raise ValueError(f"unexpected tokenize option of messages_fts: {base!r}")
    db = sqlite3.connect(":memory:")
    try:
        return (_tokens(db, "folded", tokenize_option(), chosen),
                _tokens(db, "kept", base + " remove_diacritics 0", chosen))
    finally:
        db.close()


def derive(points: range = BMP) -> tuple[dict[str, str], str]:
    """``(letters, marks)``: for each ASCII letter the characters SQLite folds to it (in code
    point order), and the combining marks it drops inside a word."""
    folded, kept = observe(points)
    letters: dict[str, str] = {}
    marks = []
    for c in sorted(folded):
        if folded[c] == kept[c]:
            continue
        if folded[c] == ["ab"]:
            marks.append(chr(c))
            continue
        (token,) = folded[c]
        if len(token) != 3 or not token[1].isascii() or not token[1].isalpha():
            raise ValueError(f"U+{c:04X} folds to {token!r}: not one ASCII letter")
        letters[token[1]] = letters.get(token[1], "") + chr(c)
    return dict(sorted(letters.items())), "".join(marks)


def _literal(ch: str) -> str:
    # Readable where the character is stable under NFC; escaped where an editor's
    # normalisation could silently replace it (U+212B ANGSTROM SIGN becomes U+00C5) and for
    # the combining marks (invisible on their own).
    if unicodedata.normalize("NFC", ch) == ch and not unicodedata.combining(ch):
        return ch
    return f"\\u{ord(ch):04x}"


def render(letters: dict[str, str], marks: str) -> str:
    """The Python text of the two constants (as ``sql/fold.py`` holds them)."""
    lines = ["FOLD_LETTERS: dict[str, str] = {"]
    for letter, chars in letters.items():
        parts = ["".join(_literal(ch) for ch in chars[i:i + 40]) for i in range(0, len(chars), 40)]
        lines.append(f'    "{letter}": "' + '"\n         "'.join(parts) + '",')
    lines.append("}")
    parts = ["".join(_literal(ch) for ch in marks[i:i + 13]) for i in range(0, len(marks), 13)]
    lines.append('FOLD_MARKS = ("' + '"\n              "'.join(parts) + '")')
    return "\n".join(lines)


if __name__ == "__main__":
    everything = derive(EVERY_PLANE if "--all" in sys.argv else BMP)
    print(f"# SQLite {sqlite3.sqlite_version}")
    print(render(*everything))
