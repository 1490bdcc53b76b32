"""Griffe extension for the docs build: render the docstrings' Sphinx roles as code.

The package's docstrings use reStructuredText roles (``:class:`~a.b.C```, ``:func:`f```,
``:mod:`m```, …), which Markdown would show verbatim. This turns each role into an inline code
span of its target (``~`` keeps the last dotted component, as Sphinx displays it). It only
rewrites the text mkdocstrings renders; the docstrings themselves are unchanged.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|exc|data|obj|const|ref|term):`([^`]+)`")


def _target(match: re.Match[str]) -> str:
    text = match.group(1).strip()
    label = re.match(r"(.*?)\s*<([^>]+)>$", text)  # :ref:`label <target>`
    if label:
        return f"`{label.group(1)}`"
    if text.startswith("~"):
        text = text[1:].rsplit(".", 1)[-1]
    return f"`{text.lstrip('.')}`"


class SphinxRoles(griffe.Extension):
    """Rewrite Sphinx roles in every docstring griffe loads."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _ROLE.sub(_target, obj.docstring.value)
