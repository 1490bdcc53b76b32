"""Value encodings of the session store (spec sessions.md §6.1) and title sanitizing (§4.5)."""

from __future__ import annotations

import json
import logging
import re
import time
from datetime import datetime
from typing import Any

log = logging.getLogger("hermes_data.sessions.encoding")

#: Prefix marking JSON-encoded multimodal content.
JSON_CONTENT_PREFIX = "\x00json:"
MAX_TITLE_LENGTH = 100

_SURROGATES = re.compile(r"[\ud800-\udfff]")
_TITLE_STRIP = re.compile(
    "[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f\u200b-\u200f\u2028-\u202e"
    "\u2060-\u2069\ufeff\ufff9-\ufffb\ufffc]")
_WS = re.compile(r"\s+")


def scrub(value: str | None) -> str | None:
    """Replace lone surrogates (unencodable in UTF-8) by U+FFFD; never raises."""
    if value is None:
        return None
    return _SURROGATES.sub("\ufffd", value)


def encode_content(value: Any) -> Any:
    """Store form of ``content``: multimodal parts become ``\\x00json:`` + JSON."""
    if value is None or isinstance(value, (bytes, int, float)):
        return value
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, (list, dict)):
        return JSON_CONTENT_PREFIX + json.dumps(value, ensure_ascii=False)
    return scrub(str(value))


def decode_content(value: Any) -> Any:
    """Reverse :func:`encode_content`; an undecodable payload is returned raw with a warning."""
    if isinstance(value, str) and value.startswith(JSON_CONTENT_PREFIX):
        try:
            return json.loads(value[len(JSON_CONTENT_PREFIX):])
        except ValueError:
            log.warning("undecodable JSON message content; returning it raw")
    return value


def encode_tool_calls(value: Any) -> str | None:
    """JSON text of a tool-call list (a JSON string is parsed first); NULL when empty."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            value = []
    return json.dumps(value, ensure_ascii=False) if value else None


def decode_tool_calls(value: str | None) -> list[Any] | None:
    """Parse stored tool calls; unparsable ⇒ ``[]`` with a warning."""
    if value is None:
        return None
    try:
        parsed = json.loads(value)
    except ValueError:
        log.warning("unparsable tool_calls JSON; returning []")
        return []
    return parsed if isinstance(parsed, list) else [parsed]


def count_tool_calls(encoded: str | None) -> int:
    """Tool-call count of a stored row: list length, 1 for a non-list value, 0 when empty."""
    if not encoded:
        return 0
    try:
        parsed = json.loads(encoded)
    except ValueError:
        return 0
    if isinstance(parsed, list):
        return len(parsed)
    return 1 if parsed else 0


def encode_json_text(value: Any) -> str | None:
    """Strings stored as given, structures dumped (never double-encoded)."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def encode_display_metadata(value: Any) -> str | None:
    """A dict ⇒ JSON; a string must parse to an object, else NULL with a warning."""
    if value is None:
        return None
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            return value
    log.warning("display_metadata is not a JSON object; stored as NULL")
    return None


def decode_display_metadata(value: str | None) -> dict[str, Any] | None:
    """Decode display metadata, unwrapping one extra layer of double encoding."""
    if value is None:
        return None
    try:
        parsed = json.loads(value)
        if isinstance(parsed, str):
            parsed = json.loads(parsed)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def coerce_timestamp(value: Any) -> float | None:
    """Explicit timestamp (datetime or number) as epoch seconds; invalid ⇒ None (debug log)."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    log.debug("ignoring invalid message timestamp %r", value)
    return None


def now() -> float:
    """Wall-clock epoch seconds (what every state.db row stores)."""
    return time.time()


def sanitize_title(title: str | None) -> str | None:
    """Clean a session title: controls, zero-width and bidi characters removed, whitespace
    collapsed, stripped; blank ⇒ None; more than 100 characters ⇒ ``ValueError``."""
    if title is None:
        return None
    cleaned = _TITLE_STRIP.sub("", scrub(str(title)) or "")
    cleaned = _WS.sub(" ", cleaned).strip()
    if not cleaned:
        return None
    if len(cleaned) > MAX_TITLE_LENGTH:
        raise ValueError(f"title is {len(cleaned)} characters long; the limit is {MAX_TITLE_LENGTH}")
    return cleaned


def escape_like(value: str) -> str:
    """Escape ``\\``, ``%`` and ``_`` for ``LIKE … ESCAPE '\\'``."""
    return value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
