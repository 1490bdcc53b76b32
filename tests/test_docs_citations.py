"""Every "§" citation in the code names its document in docs/ and resolves to a heading there.

A citation is ``docs/<file>.md §N`` (``N`` like ``8``, ``8.2``, ``3.9.2`` or ``8.7c`` — the
item letter is inside section ``8.7``), optionally continued by further sections of the same
document: ``§7.4–§7.6``, ``§3.12, §3.15``, ``§4.11 and §4.13``. A bare ``§`` anywhere else
is an error: a maintainer could not tell which document it means.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.journal_independent("static scan of the sources and docs")

REPO = Path(__file__).resolve().parents[1]
_NUM = r"(\d+(?:\.\d+)*)[a-z]?"
# A continuation stays on the citation's line: a § that starts a line names its document.
_CHAIN = re.compile(r"docs/([\w-]+)\.md §" + _NUM + r"((?:[ \t]*(?:–|-|,|and|or|/|&)[ \t]*§"
                    + _NUM + r")*)")
_HEADING = re.compile(r"^#+\s+(\d+(?:\.\d+)*)\.?\s", re.M)


def headings(doc: Path) -> set[str]:
    """The section numbers of ``doc``'s headings."""
    return set(_HEADING.findall(doc.read_text(encoding="utf-8")))


def citation_problems(text: str, where: str, docs: Path) -> list[str]:
    """What is wrong with the citations in ``text`` (empty when every one resolves)."""
    problems: list[str] = []
    covered: set[int] = set()
    cache: dict[str, set[str] | None] = {}
    for m in _CHAIN.finditer(text):
        name = m.group(1)
        if name not in cache:
            path = docs / f"{name}.md"
            cache[name] = headings(path) if path.is_file() else None
        numbers = [m.group(2)] + re.findall(r"§" + _NUM, m.group(3) or "")
        if cache[name] is None:
            problems.append(f"{where}: docs/{name}.md does not exist")
        else:
            problems += [f"{where}: docs/{name}.md has no section {n}"
                         for n in numbers if n not in cache[name]]
        covered.update(i for i, ch in enumerate(text[m.start():m.end()], m.start()) if ch == "§")
    for i, ch in enumerate(text):
        if ch == "§" and i not in covered:
            line = text.count("\n", 0, i) + 1
            problems.append(f"{where}:{line}: a § that names no docs/<file>.md")
    return problems


def test_every_citation_in_the_code_resolves():
    problems: list[str] = []
    for root in ("hermes_data", "migrations"):
        for path in sorted((REPO / root).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            if "§" in text:
                problems += citation_problems(text, str(path.relative_to(REPO)), REPO / "docs")
    assert not problems, "\n".join(problems[:40]) + f"\n({len(problems)} in all)"


def test_the_scan_finds_what_does_not_resolve(tmp_path):
    (tmp_path / "core.md").write_text("# Core\n## 7. Search\n### 7.4 Deletion\n### 7.6 VACUUM\n")
    good = "see docs/core.md §7.4–§7.6 and docs/core.md §7 (item c: docs/core.md §7.4c)"
    assert citation_problems(good, "ok.py", tmp_path) == []
    bad = "rule (§7.4); docs/core.md §7.5; docs/other.md §1; docs/core.md §7.4,\n§7.6"
    assert citation_problems(bad, "bad.py", tmp_path) == [
        "bad.py: docs/core.md has no section 7.5",
        "bad.py: docs/other.md does not exist",
        "bad.py:1: a § that names no docs/<file>.md",
        "bad.py:2: a § that names no docs/<file>.md"]
