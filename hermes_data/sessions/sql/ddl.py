"""DDL text helpers: ``DROP`` statements for schema objects whose names come from a fixed
allow-list, and the whitespace-collapsed form stored DDL is compared in.

Object names cannot be bound as parameters, so every builder that interpolates one checks it
against the module's own tuple of names first; this is the one place that check lives.
"""

from __future__ import annotations

from typing import Collection


def checked_drop(kind: str, name: str, allowed: Collection[str], what: str, *,
                 if_exists: bool = True, schema: str = "", on: str = "") -> str:
    """``DROP <kind> [IF EXISTS] [<schema>.]<name> [ON <on>]`` for ``name`` in ``allowed``.

    ``what`` names the allow-list in the error (``"an FTS trigger"``); a name outside it raises
    ``ValueError`` naming the value, so no caller can turn a stray string into DDL.
    """
    if name not in allowed:
        raise ValueError(f"not {what}: {name!r}")
    target = f"{schema}.{name}" if schema else name
    return (f"DROP {kind} {'IF EXISTS ' if if_exists else ''}{target}"
            + (f" ON {on}" if on else ""))


def squash(ddl: str | None, *, lower: bool = False) -> str:
    """``ddl`` (None: empty) with every whitespace run collapsed to one space and the ends
    stripped, lower-cased when ``lower``: how stored trigger and table SQL is compared with
    ours. (The display triggers' digests use :func:`.display.normalise`, pinned to the four
    ASCII whitespace characters, instead.)"""
    text = " ".join((ddl or "").split())
    return text.lower() if lower else text
