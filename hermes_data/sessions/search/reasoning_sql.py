"""Statements of ``search_messages(include_reasoning=True)`` (docs/sessions-ui.md §4.9):
the canonical LIKE route over the content, tool name and tool calls and, on assistant rows,
the reasoning columns — ``reasoning``, ``reasoning_content``, a non-JSON
``reasoning_details`` as text, and every JSON string value of a JSON one (root included).
Reasoning is in no derived index: an opt-in scan. Snippets are made in SQL; the content is
never selected whole."""

from __future__ import annotations

from hermes_data.sessions.search.sql import hit_page
from hermes_data.statements import DriverPrepared


def templates(dialect: str) -> tuple[str, ...]:
    """Per-term match templates (``{p}``: the term's ``%…%`` parameter)."""
    if dialect == "postgresql":
        like = "ILIKE"
        details = ("(m.reasoning_details IS NOT NULL AND hermes_jsonb(m.reasoning_details) IS NULL "
                   "AND m.reasoning_details ILIKE {p} "
                   "ESCAPE '\\') OR EXISTS (SELECT 1 FROM jsonb_path_query(hermes_jsonb("
                   "m.reasoning_details), 'strict $.**') AS jv(v) WHERE jsonb_typeof(jv.v) = "
                   "'string' AND (jv.v #>> '{{}}') ILIKE {p} ESCAPE '\\')")
    else:
        like = "LIKE"
        details = ("(m.reasoning_details IS NOT NULL AND NOT json_valid(m.reasoning_details) "
                   "AND m.reasoning_details LIKE {p} ESCAPE '\\') OR (json_valid("
                   "m.reasoning_details) AND EXISTS (SELECT 1 FROM json_tree(m.reasoning_details) "
                   "AS jt WHERE jt.type = 'text' AND jt.value LIKE {p} ESCAPE '\\'))")
    plain = [f"COALESCE(m.{c}, '') {like} {{p}} ESCAPE '\\'"
             for c in ("content", "tool_name", "tool_calls")]
    reasoning = (f"(m.role = 'assistant' AND (COALESCE(m.reasoning, '') {like} {{p}} ESCAPE '\\' "
                 f"OR COALESCE(m.reasoning_content, '') {like} {{p}} ESCAPE '\\' OR {details}))")
    return (*plain, reasoning)


def _window(field: str, dialect: str) -> tuple[str, str]:
    find = "strpos" if dialect == "postgresql" else "instr"
    top = "greatest" if dialect == "postgresql" else "max"
    pos = f"{find}(lower({field}), lower(:first))"
    return pos, f"substr({field}, {top}(1, {pos} - 40), 120)"


def snippet(dialect: str) -> str:
    """A 120-character window around the first positive term in the first field holding it
    (content, tool name, tool calls, reasoning, reasoning content, raw details), else ''."""
    arms = []
    for field in ("m.content", "m.tool_name", "m.tool_calls", "m.reasoning",
                  "m.reasoning_content", "m.reasoning_details"):
        pos, window = _window(field, dialect)
        arms.append(f"WHEN {pos} > 0 THEN {window}")
    return f"(CASE {' '.join(arms)} ELSE '' END)"


def page(matches: str, where: str, sort: str | None, dialect: str) -> DriverPrepared:
    """One page of hits, ``timestamp DESC, id DESC`` (``oldest``: ascending): a Core page
    (:func:`~hermes_data.sessions.search.sql.hit_page`)."""
    return hit_page(snippet(dialect), (f"({matches})", where), ("timestamp", "id"),
                    sort != "oldest")
