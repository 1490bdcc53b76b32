"""The one shape adapter of the compatibility layer: typed rows become the plain dicts and
lists upstream's callers index (docs/compat.md "Return shapes")."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Iterable

from hermes_data.sessions.rows import MessageRow


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


def session_dict(row: Any, extra: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """A session row (``SessionRow``, ``RecentSessionRow`` …) as upstream's session dict:
    :func:`as_dict`, with ``tool_names`` back as the JSON array text upstream stores and
    ``lineage_root_id`` spelled ``_lineage_root_id``, and ``extra`` (the row's upstream-only
    columns, ``SessionStore.get_session_extra``) at the top level as upstream's ``SELECT s.*``
    has them; ``None`` stays ``None``."""
    d = as_dict(row)
    if d is None:
        return None
    if isinstance(d.get("tool_names"), tuple):
        d["tool_names"] = json.dumps(list(d["tool_names"]))
    out = {_UPSTREAM_KEYS.get(k, k): v for k, v in d.items()}
    for key, value in (extra or {}).items():
        out.setdefault(key, value)
    return out


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

def as_plain(value: Any) -> Any:
    """``value`` with every nested row made plain, recursively: a transcript row through
    :func:`raw_message_dict`, any other row dataclass or named tuple a ``dict``, a tuple or list a
    ``list``, a mapping a new ``dict``; anything else as is. For result objects upstream
    returns as a dict of rows and lists (a rewind result, a window of messages)."""
    if isinstance(value, MessageRow):
        return raw_message_dict(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: as_plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple) and hasattr(value, "_asdict"):
        return {k: as_plain(v) for k, v in value._asdict().items()}
    if isinstance(value, (list, tuple)):
        return [as_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: as_plain(v) for k, v in value.items()}
    return value


def raw_message_dict(row: MessageRow) -> dict[str, Any]:
    """A transcript row as the dict upstream builds from a whole ``messages`` row (its
    around-window and rewind target): the columns by name, content, ``tool_calls`` and
    ``display_metadata`` decoded, and the compression-summary flag always present as its
    column ``_compressed_summary`` (0 or 1) — unlike ``get_messages``, which keeps that key
    only when true."""
    out = row.to_dict()
    out["_compressed_summary"] = int(bool(out.pop("compressed_summary")))
    return out


def pick(row: Any, keys: Iterable[str]) -> dict[str, Any]:
    """``row`` through :func:`as_plain`, keeping only ``keys`` (in that order): upstream's
    narrower dict where our row carries more fields."""
    full = as_plain(row)
    return {k: full[k] for k in keys}


def without_none(mapping: dict[str, Any], keys: Iterable[str]) -> dict[str, Any]:
    """``mapping`` without those of ``keys`` whose value is None: upstream leaves such
    optional keys out instead of setting them to None."""
    drop = {k for k in keys if mapping.get(k) is None}
    return {k: v for k, v in mapping.items() if k not in drop}


def session_list_dict(row: Any) -> dict[str, Any] | None:
    """A session row — plain, with ``last_active``, or a rich row of a listing — as upstream's
    ``SELECT s.*`` dict: the columns at the top level (upstream-only columns of an adopted
    file too, not nested under ``extra``), ``tool_names`` as the JSON array text upstream
    stores, ``preview``/``last_active``/``unread`` where the row has them, and for a row
    projected onto its compression tip the chain under upstream's keys ``_lineage_root_id``
    and ``_lineage_ids`` (absent on an unprojected row, as upstream); ``None`` stays
    ``None``."""
    if row is None:
        return None
    out = as_plain(row)
    extra = out.pop("extra", None) or {}
    for key, value in extra.items():
        out.setdefault(key, value)
    if isinstance(out.get("tool_names"), list):
        out["tool_names"] = json.dumps(out["tool_names"])
    root = out.pop("lineage_root_id", None)
    ids = out.pop("lineage_ids", None)
    if root is not None:
        out["_lineage_root_id"] = root
        out["_lineage_ids"] = ids or None
    return out


def session_list_dicts(rows: Iterable[Any]) -> list[dict[str, Any]]:
    """Each of ``rows`` through :func:`session_list_dict`, as a list."""
    return [d for d in (session_list_dict(r) for r in rows) if d is not None]
