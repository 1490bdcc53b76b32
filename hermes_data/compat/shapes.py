"""The one shape adapter of the compatibility layer: typed rows become the plain dicts and
lists upstream's callers index (docs/compat.md "Return shapes")."""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable


def as_dict(row: Any) -> dict[str, Any] | None:
    """``row`` (a row dataclass, a named tuple or a mapping) as a new plain ``dict``, field
    name to value; ``None`` stays ``None``."""
    if row is None:
        return None
    if dataclasses.is_dataclass(row) and not isinstance(row, type):
        return {f.name: getattr(row, f.name) for f in dataclasses.fields(row)}
    if isinstance(row, tuple) and hasattr(row, "_asdict"):
        return dict(row._asdict())
    if isinstance(row, dict):
        return dict(row)
    raise TypeError(f"as_dict: {type(row).__name__} is not a row")


def as_dicts(rows: Iterable[Any]) -> list[dict[str, Any]]:
    """Each of ``rows`` through :func:`as_dict`, as a list."""
    return [d for d in (as_dict(r) for r in rows) if d is not None]
