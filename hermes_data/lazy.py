"""Lazy re-exports for package ``__init__`` modules: the one mechanism behind
``from hermes_data.sessions import SessionStore`` and its kin.

A package names what it re-exports and from which submodule; importing the package loads
none of them (a cold start pays only for what it uses), and the first access imports the
submodule and caches the value in the package's namespace. Type checkers see the real
definitions through each package's ``if TYPE_CHECKING:`` imports.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Mapping, MutableMapping


def lazy_exports(package: str, table: Mapping[str, str],
                 namespace: MutableMapping[str, Any]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: ``table`` maps an exported name to the
    submodule (relative to ``package``) that defines it; ``namespace`` is the package's
    ``globals()``, where a resolved value is cached. An unknown name raises
    :class:`AttributeError` naming the package."""

    def resolve(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        namespace[name] = value
        return value

    return resolve
