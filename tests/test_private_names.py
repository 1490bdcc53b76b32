"""Private names stay private to their module.

A ``_name`` is a module's own business; a sibling that imports it couples itself to a detail
the owner may change without notice. This test scans the AST of every ``hermes_data`` module
for the two ways a private name crosses a module line:

* ``from hermes_data.x import _y`` (absolute or relative, ``_y`` a function, constant or a
  private submodule), and
* ``m._y`` where ``m`` is a name bound to a ``hermes_data`` module by an import
  (``import hermes_data.x as m``, ``from hermes_data import x``, ``from . import x as m``,
  or a dotted ``hermes_data.x._y``).

Everything is counted, the SQL renderer's helpers and the lock predicates included.
Dunder names (``__version__``) are public. A module importing from itself is not counted,
and neither is an access through ``self`` or any other non-module value. The count may only
go down: :data:`LIMIT` is the number in the tree today, and each remaining import carries a
comment on its line saying why it stays.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import NamedTuple

import pytest

from tests.test_import_graph import MODULES as import_graph_modules

pytestmark = pytest.mark.journal_independent("static scan of the package source")

PACKAGE = "hermes_data"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE

#: The private names that may still cross a module line (see ``test_the_count_stays_down``).
LIMIT = 0


class Crossing(NamedTuple):
    """One private name used outside the module that defines it."""

    importer: str
    source: str
    name: str
    line: int
    #: The source line it is on (where the comment saying why must be).
    text: str


MODULES = import_graph_modules  # every hermes_data module by dotted name (one builder)


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _is_ours(module: str) -> bool:
    return module == PACKAGE or module.startswith(PACKAGE + ".")


def _resolve_from(module: str, node: ast.ImportFrom, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _dotted(node: ast.AST) -> str | None:
    """``a.b.c`` of a chain of attribute accesses on a plain name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def private_crossings(module: str, source: str | None = None, *,
                      is_package: bool | None = None) -> list[Crossing]:
    """Every private name of another ``hermes_data`` module that ``module`` uses (``source``
    stands in for the file's text; ``is_package`` for whether it is an ``__init__``)."""
    if source is None:
        source = MODULES[module].read_text()
    if is_package is None:
        is_package = module in MODULES and MODULES[module].name == "__init__.py"
    tree = ast.parse(source)
    lines = source.splitlines()
    found: list[Crossing] = []

    def cross(owner: str, name: str, node: ast.stmt | ast.expr) -> None:
        found.append(Crossing(module, owner, name, node.lineno, lines[node.lineno - 1]))

    # Names bound to a hermes_data module: alias -> dotted module name.
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if not _is_ours(alias.name):
                    continue
                if alias.asname:
                    bound[alias.asname] = alias.name
                else:  # ``import hermes_data.x.y`` binds ``hermes_data``; chains resolve below
                    bound[PACKAGE] = PACKAGE
                for part in alias.name.split("."):
                    if _is_private(part):
                        cross(alias.name, part, node)
        elif isinstance(node, ast.ImportFrom):
            target = _resolve_from(module, node, is_package)
            if not _is_ours(target) or target == module:
                continue
            for alias in node.names:
                if _is_private(alias.name):
                    cross(target, alias.name, node)
                # ``from pkg import x`` may bind a submodule; names bound to anything else
                # are harmless here (their private attributes are no module's privates).
                sub = f"{target}.{alias.name}"
                bound[alias.asname or alias.name] = sub
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and _is_private(node.attr)):
            continue
        chain = _dotted(node.value)
        if chain is None:
            continue
        head, _, rest = chain.partition(".")
        if head not in bound:
            continue
        owner = f"{bound[head]}.{rest}" if rest else bound[head]
        if owner in MODULES and owner != module:
            cross(owner, node.attr, node)
    return found


def all_crossings() -> list[Crossing]:
    """:func:`private_crossings` of every module of the package, in file order."""
    return [c for module in MODULES for c in private_crossings(module)]


def problems(crossings: list[Crossing], limit: int) -> list[str]:
    """What is wrong with ``crossings``: more than ``limit`` of them, or one whose line has no
    comment saying why it stays (empty when all is well)."""
    out = []
    if len(crossings) > limit:
        listing = "\n".join(f"  {c.importer}:{c.line} uses {c.source}.{c.name}"
                            for c in crossings)
        out.append(f"{len(crossings)} private names cross a module line (limit {limit}); "
                   f"make each public or move it where it belongs:\n{listing}")
    out += [f"{c.importer}:{c.line}: say in a comment why {c.source}.{c.name} is used here"
            for c in crossings if "#" not in c.text]
    return out


def test_the_scan_sees_every_form():
    """The scanner itself, on a synthetic module: each way across the line counts once;
    dunders, own names, non-module values and third-party privates do not."""
    source = '''
import os
import hermes_data.sessions.core.lifecycle
import hermes_data.engine as eng
from hermes_data.config import _load, resolve_url, __doc__
from hermes_data.sessions import store
from .core import titles as ttl
from .backends import sqlite
from .errors import _private_helper
from sqlalchemy import _private_thing

def f(self):
    eng._settings()
    store._record_init_error("x", None)
    ttl._marker
    hermes_data.sessions.core.lifecycle._insert
    self._own
    os._exit
    sqlite.public
    resolve_url._cache
'''
    got = {(c.source, c.name) for c in private_crossings("hermes_data.sessions.example", source)}
    assert got == {
        ("hermes_data.config", "_load"),
        ("hermes_data.sessions.errors", "_private_helper"),
        ("hermes_data.engine", "_settings"),
        ("hermes_data.sessions.store", "_record_init_error"),
        ("hermes_data.sessions.core.titles", "_marker"),
        ("hermes_data.sessions.core.lifecycle", "_insert"),
    }
    # A module's own privates, reached through its own package name, are not crossings.
    assert private_crossings("hermes_data.engine", "from hermes_data.engine import _x") == []


def test_the_check_fails_a_tree_above_the_limit():
    """The check itself: one more private import than the limit fails, and so does one
    without a comment; a commented one within the limit passes."""
    tree = all_crossings()
    bare = private_crossings("hermes_data.sessions.example",
                             "from hermes_data.sessions.store import _record_init_error\n")
    said = private_crossings("hermes_data.sessions.example",
                             "from hermes_data.sessions.store import _record_init_error"
                             "  # the facade's own record, read by its twin\n")
    assert len(bare) == len(said) == 1
    assert problems(tree, LIMIT) == []
    above = problems(tree + said, LIMIT)
    assert len(above) == 1 and "_record_init_error" in above[0]
    assert problems(tree + said, LIMIT + 1) == []
    uncommented = problems(tree + bare, LIMIT + 1)
    assert len(uncommented) == 1 and "say in a comment why" in uncommented[0]


def test_the_count_stays_down():
    """At most :data:`LIMIT` private names cross a module line, each with a comment on its
    line saying why."""
    assert problems(all_crossings(), LIMIT) == []
