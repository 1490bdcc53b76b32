"""Value encodings of the session store (docs/sessions.md §6.1) and title sanitizing (docs/sessions.md §4.5).

Multimodal ``content`` (a list or dict of parts) is stored as text: a marker prefix followed
by its JSON. The marker is decided **per dialect**, because the two engines' text types
differ:

* **SQLite** — ``"\x00json:"`` (:data:`JSON_CONTENT_PREFIX`), the upstream format every
  existing ``state.db`` holds. Plain strings are stored as given.
* **PostgreSQL** — ``"\ufdd0json:"`` (:data:`PG_JSON_CONTENT_PREFIX`). PostgreSQL ``text``
  cannot hold NUL at all, so the SQLite marker (and any string containing NUL) cannot be
  written there. U+FDD0 is a Unicode *noncharacter* ("for process-internal use"), valid in
  UTF-8 and in PostgreSQL text, and never produced by normal text input. To stay lossless
  for *every* string anyway, a plain string that contains NUL or starts with U+FDD0 is
  stored as the marker plus its JSON *string* (``"\ufdd0json:" + json.dumps(s)``); decoding
  a JSON string gives back exactly ``s``. So on PostgreSQL the marker is unambiguous: a
  stored value starts with it if and only if it was encoded by this module.

:func:`encode_content` / :func:`decode_content` take the dialect; :func:`translate_content`
converts a stored value between the two forms (``hermes-data copy`` uses it), keeping the
JSON text verbatim, so a copied message reads back identically on both engines.
"""

from __future__ import annotations

import json
import logging
import re
import time
from datetime import datetime
from typing import Any

log = logging.getLogger("hermes_data.sessions.core.encoding")

#: Prefix marking JSON-encoded multimodal content (SQLite; the upstream format).
JSON_CONTENT_PREFIX = "\x00json:"
#: Prefix marking JSON-encoded content on PostgreSQL (text cannot hold NUL there).
PG_JSON_CONTENT_PREFIX = "\ufdd0json:"
_PG_ESCAPE_LEAD = "\ufdd0"
#: Longest title kept, in characters (upstream's ``MAX_TITLE_LENGTH``): longer is refused.
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


def scrub_label(value: str | None) -> str | None:
    """:func:`scrub`, and NUL → U+FFFD: free diagnostic text (an error message, an activity
    label) that neither backend may refuse — PostgreSQL ``text`` cannot hold NUL (issue 31)."""
    value = scrub(value)
    return value.replace("\x00", "\ufffd") if value and "\x00" in value else value


def _dumps(value: Any) -> str:
    """JSON text of ``value`` that UTF-8 can hold: lone surrogates inside strings (a
    multimodal part, a tool argument) become U+FFFD, as in plain text (:func:`scrub`)."""
    return _SURROGATES.sub("\ufffd", json.dumps(value, ensure_ascii=False))


def content_prefix(dialect: str = "sqlite") -> str:
    """The multimodal marker of ``dialect`` (``sqlite`` or ``postgresql``)."""
    return PG_JSON_CONTENT_PREFIX if dialect == "postgresql" else JSON_CONTENT_PREFIX


def encode_content(value: Any, dialect: str = "sqlite") -> Any:
    """Store form of ``content``: multimodal parts become the dialect's marker + JSON.

    On PostgreSQL a string holding NUL or starting with U+FDD0 is stored as marker + JSON
    string (see the module docstring), so every string round-trips."""
    if value is None or isinstance(value, (bytes, int, float)):
        return value
    prefix = content_prefix(dialect)
    if isinstance(value, str):
        text = scrub(value)
        assert text is not None  # scrub keeps a str a str
        if dialect == "postgresql" and ("\x00" in text or text.startswith(_PG_ESCAPE_LEAD)):
            return prefix + json.dumps(text, ensure_ascii=False)
        return text
    if isinstance(value, (list, dict)):
        return prefix + _dumps(value)
    return encode_content(str(value), dialect)


def decode_content(value: Any, dialect: str = "sqlite") -> Any:
    """Reverse :func:`encode_content`; an undecodable payload is returned raw with a warning."""
    prefix = content_prefix(dialect)
    if isinstance(value, str) and value.startswith(prefix):
        try:
            return json.loads(value[len(prefix):])
        except ValueError:
            log.warning("undecodable JSON message content; returning it raw")
    return value


def translate_content(value: Any, source: str, target: str) -> Any:
    """A stored ``content`` value of dialect ``source`` in the store form of ``target``.

    The marker is swapped and the JSON text kept verbatim (so checksums and reads agree);
    a SQLite string PostgreSQL cannot hold as text (NUL inside, or a leading U+FDD0) — and an
    undecodable SQLite marker value, which readers return raw — becomes a JSON string; a PostgreSQL JSON *string* becomes the plain string again on SQLite.
    ``decode_content(translate_content(v, a, b), b) == decode_content(v, a)`` for every
    stored ``v``."""
    if source == target or not isinstance(value, str):
        return value
    src, dst = content_prefix(source), content_prefix(target)
    if target == "postgresql":
        if value.startswith(src) and "\x00" not in value[len(src):] \
                and _parses(value[len(src):]):
            return dst + value[len(src):]
        if "\x00" in value or value.startswith(_PG_ESCAPE_LEAD):
            return dst + json.dumps(value, ensure_ascii=False)
        return value
    if value.startswith(src):
        body = value[len(src):]
        try:
            parsed = json.loads(body)
        except ValueError:
            return value  # undecodable on both sides: returned raw by either reader
        if isinstance(parsed, str) and not parsed.startswith(dst):
            return parsed
        return dst + body
    return value


def _parses(body: str) -> bool:
    try:
        json.loads(body)
    except ValueError:
        return False
    return True


def encode_tool_calls(value: Any) -> str | None:
    """JSON text of a tool-call list (a JSON string is parsed first); NULL when empty."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            value = []
    return _dumps(value) if value else None


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
        return scrub(value)
    return _dumps(value)


def encode_display_metadata(value: Any) -> str | None:
    """A dict ⇒ JSON; a string must parse to an object, else NULL with a warning."""
    if value is None:
        return None
    if isinstance(value, dict):
        return _dumps(value)
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
        raise ValueError(f"title too long: {len(cleaned)} characters, the limit is "
                         f"{MAX_TITLE_LENGTH}")
    return cleaned


def escape_like(value: str) -> str:
    """Escape ``\\``, ``%`` and ``_`` for ``LIKE … ESCAPE '\\'``."""
    return value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
