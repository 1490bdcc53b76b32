"""Upstream's v18 gateway metadata backfill from the gateway's ``sessions.json``
(docs/sessions-storage.md §3.12).

Upstream's schema step for a file below schema version 18 (#9006) copied what the gateway's
routing index ``$HERMES_HOME/sessions/sessions.json`` knew of each session into the columns
that version added, so gateway sessions from before it are discoverable from ``state.db``
alone. The adoption of such a file (:func:`hermes_data.sessions.storage.adoption.after_upgrade`)
runs the same step, once, inside the upgrade's transaction: :func:`backfill_gateway_metadata`.

Only NULL columns are filled (``expiry_finalized`` only raised from 0 to 1): a value written by
newer code is never overwritten, and a second run changes nothing. A file that is missing is
nothing to do; one that cannot be read, is not JSON or not a JSON object is ignored with one
WARNING naming it (upstream skipped it silently, at DEBUG), and the adoption goes on.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from sqlalchemy.engine import Connection

from hermes_data import storable
from hermes_data.sessions.storage import adoption_sql as mq

log = logging.getLogger("hermes_data.sessions.storage.sessions_json")

#: Upstream schema versions below this one predate the backfilled columns (v18, #9006).
BACKFILL_BELOW_VERSION = 18


def sessions_json_for(db_path: str | os.PathLike[str]) -> Path:
    """The gateway's routing index beside a session store: ``<its directory>/sessions/
    sessions.json`` (``$HERMES_HOME/sessions/sessions.json`` for the default
    ``$HERMES_HOME/state.db``, upstream's file)."""
    return Path(db_path).parent / "sessions" / "sessions.json"


def read_sessions_json(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The routing index as a JSON object, or None: missing (silently), or unreadable, not
    JSON, not an object (one WARNING naming the file)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        log.warning("%s: the gateway's sessions.json cannot be read (%s); gateway metadata "
                    "not backfilled from it", path, exc)
        return None
    try:
        data = json.loads(text)
    except ValueError as exc:
        log.warning("%s: the gateway's sessions.json is not valid JSON (%s); gateway metadata "
                    "not backfilled from it", path, exc)
        return None
    if not isinstance(data, dict):
        log.warning("%s: the gateway's sessions.json holds a JSON %s, not an object; gateway "
                    "metadata not backfilled from it", path, type(data).__name__)
        return None
    return data


def _text(value: Any) -> str | None:
    """A value a TEXT column can take: a storable string, or a number as text; else None
    (a nested or malformed value is ignored, never bound)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str) and storable.is_storable(value):
        return value
    return None


def backfill_values(data: dict[str, Any]) -> list[tuple[Any, ...]]:
    """One parameter tuple of ``BACKFILL_GATEWAY_METADATA`` per usable entry, as upstream
    read them: keys starting with ``_`` and non-object entries skipped, ``session_id``
    required; ``session_key`` (else the entry's key), ``chat_type``, ``display_name``; from
    ``origin`` (an object) ``chat_id``, ``thread_id`` and its JSON; finalized when
    ``expiry_finalized`` or ``memory_flushed`` is set."""
    out: list[tuple[Any, ...]] = []
    for key, entry in data.items():
        if str(key).startswith("_") or not isinstance(entry, dict):
            continue
        session_id = _text(entry.get("session_id"))
        if not session_id:
            continue
        origin = entry.get("origin")
        if not isinstance(origin, dict):
            origin = None
        out.append((
            _text(entry.get("session_key")) or _text(key),
            _text(origin.get("chat_id")) if origin is not None else None,
            _text(entry.get("chat_type")),
            _text(origin.get("thread_id")) if origin is not None else None,
            _text(entry.get("display_name")),
            json.dumps(origin) if origin is not None else None,
            1 if entry.get("expiry_finalized") or entry.get("memory_flushed") else 0,
            session_id,
        ))
    return out


def backfill_gateway_metadata(conn: Connection, sessions_json: str | os.PathLike[str]) -> int:
    """Fill the NULL gateway columns of the sessions ``sessions_json`` names (see the module
    docstring) on a SQLite connection inside the caller's transaction; returns how many
    session rows its entries matched (0 for a missing or ignored file)."""
    data = read_sessions_json(sessions_json)
    if not data:
        return 0
    values = backfill_values(data)
    if not values:
        return 0
    st = mq.BACKFILL_GATEWAY_METADATA.positional_sql(conn.dialect.name,
                                                     mq.BACKFILL_GATEWAY_ORDER)
    matched = conn.exec_driver_sql(st, values).rowcount
    return max(0, int(matched or 0))
