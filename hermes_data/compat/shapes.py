"""The one shape adapter of the compatibility layer: typed rows become the plain dicts and
lists upstream's callers index (docs/compat.md "Return shapes")."""

from __future__ import annotations

import dataclasses
import json
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


# -- upstream's spellings of particular rows (the names differ, the data does not) ------------

#: Row fields upstream's dicts spell with a leading underscore (ours → upstream's key).
_UPSTREAM_KEYS = {"lineage_root_id": "_lineage_root_id"}


def session_dict(row: Any) -> dict[str, Any] | None:
    """A session row (``SessionRow``, ``RecentSessionRow`` …) as upstream's session dict:
    :func:`as_dict`, with ``tool_names`` back as the JSON array text upstream stores and
    ``lineage_root_id`` spelled ``_lineage_root_id``; ``None`` stays ``None``."""
    d = as_dict(row)
    if d is None:
        return None
    if isinstance(d.get("tool_names"), tuple):
        d["tool_names"] = json.dumps(list(d["tool_names"]))
    return {_UPSTREAM_KEYS.get(k, k): v for k, v in d.items()}


def session_dicts(rows: Iterable[Any]) -> list[dict[str, Any]]:
    """Each of ``rows`` through :func:`session_dict`, as a list."""
    return [d for d in (session_dict(r) for r in rows) if d is not None]


def message_dict(row: Any) -> dict[str, Any] | None:
    """A ``MessageRow`` as upstream's ``get_messages`` dict: :func:`as_dict`, with
    ``compressed_summary`` spelled ``_compressed_summary`` and present only when true (as
    upstream pops a false marker); ``None`` stays ``None``."""
    d = as_dict(row)
    if d is None:
        return None
    if d.pop("compressed_summary", False):
        d["_compressed_summary"] = True
    return d


def message_dicts(rows: Iterable[Any]) -> list[dict[str, Any]]:
    """Each of ``rows`` through :func:`message_dict`, as a list."""
    return [d for d in (message_dict(r) for r in rows) if d is not None]


def plain_dict(row: Any) -> dict[str, Any] | None:
    """:func:`as_dict` with tuple values as lists (upstream's result dicts hold lists, e.g.
    ``purge_stale_tool_call_markers``' ``row_ids``); ``None`` stays ``None``."""
    d = as_dict(row)
    if d is None:
        return None
    return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}
