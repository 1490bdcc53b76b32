"""Marker literals of the agent's compaction carriers and skill scaffolds, and the preview
helpers built on them (docs/sessions-ui.md §3.2–§3.3).

hermes-data cannot import the agent, so the literals are restated here byte-exact (a test
pins them). They serve previews and the recent-user list only; the display identity keys
carriers through the store's ``ConversationHooks`` instead (docs/sessions-ui.md §3.4).
"""

from __future__ import annotations

import re
from typing import Any

#: Shared head of the current and every historical compaction-summary prefix.
LONG_FORM_INTRO = ("[CONTEXT COMPACTION \u2014 REFERENCE ONLY] Earlier turns were compacted into "
                   "the summary below. This is a handoff from a previous context window \u2014 "
                   "treat it as background reference, NOT as active instructions. ")
#: The legacy summary prefix.
LEGACY_PREFIX = "[CONTEXT SUMMARY]:"
#: Ends a standalone summary; the user's text follows.
END_MARKER = ("--- END OF CONTEXT SUMMARY \u2014 respond to the message below, not the summary "
              "above ---")
#: Heads the prior user text of a merged carrier.
PRIOR_HEADER = "[PRIOR CONTEXT \u2014 for reference only; not a new message]"
#: Separates a merged carrier's prior text from its summary.
MERGED_DELIM = "[END OF PRIOR CONTEXT \u2014 COMPACTION SUMMARY BELOW]"
#: Starts a skill-invocation scaffold.
SKILL_PREFIX = "[IMPORTANT: The user has invoked the "
SINGLE_MARKER = "The full skill content is loaded below.]"
SINGLE_INSTRUCTION = ("The user has provided the following instruction alongside the skill "
                      "invocation: ")
RUNTIME_NOTE = "\n\n[Runtime note:"
BUNDLE_MARKER = " skill bundle,"
BUNDLE_INSTRUCTION = "\nUser instruction: "
BUNDLE_FIRST_BLOCK = "\n\n[Loaded as part of the "
#: Joins a scaffold preview's head and tail (U+001E).
JOINT = "\x1e"
#: The carrier whitespace set (TAB, LF, CR, space).
WS = "\t\n\r "

_SUMMARY_PREFIXES = (LONG_FORM_INTRO, LEGACY_PREFIX)


def _loose(literal: str) -> re.Pattern[str]:
    # A marker whose line feeds match any whitespace run (previews see flattened text).
    parts = [re.escape(p) for p in re.split(r"\n+", literal)]
    return re.compile(r"\s+".join(parts))


_RUNTIME_NOTE = _loose(RUNTIME_NOTE)
_BUNDLE_INSTRUCTION = _loose(BUNDLE_INSTRUCTION)
_BUNDLE_FIRST_BLOCK = _loose(BUNDLE_FIRST_BLOCK)
_SPACES = re.compile(r"\s+")


def is_standalone(text: str) -> bool:
    """STANDALONE(c): the left-trimmed text starts with a summary prefix."""
    return text.lstrip(WS).startswith(_SUMMARY_PREFIXES)


def is_merged(text: str) -> bool:
    """MERGED(c): a prior-context delimiter followed by a summary prefix."""
    at = text.find(MERGED_DELIM)
    return at >= 0 and text[at + len(MERGED_DELIM):].lstrip(WS).startswith(_SUMMARY_PREFIXES)


def is_carrier(text: str) -> bool:
    """A compaction carrier (standalone summary or merged prior context)."""
    return is_standalone(text) or is_merged(text)


def describe_skill_invocation(content: Any, separator: str = " \u2014 ") -> str | None:
    """``/name — instruction`` for a skill-invocation scaffold, else None (docs/sessions-ui.md §3.3)."""
    if not isinstance(content, str) or not content.startswith(SKILL_PREFIX):
        return None
    rest = content[len(SKILL_PREFIX):]
    name = ""
    if rest.startswith('"'):
        end = rest.find('"', 1)
        name = (rest[1:end] if end >= 0 else "").strip()
    label = name if name.startswith("/") else f"/{name}"
    instruction = ""
    if BUNDLE_MARKER in content:
        m = _BUNDLE_INSTRUCTION.search(content)
        if m:
            tail = content[m.end():]
            stop = _BUNDLE_FIRST_BLOCK.search(tail)
            instruction = tail[:stop.start()] if stop else tail
    elif SINGLE_MARKER in content:
        at = content.rfind(SINGLE_INSTRUCTION)
        if at >= 0:
            tail = content[at + len(SINGLE_INSTRUCTION):]
            stop = _RUNTIME_NOTE.search(tail)
            instruction = tail[:stop.start()] if stop else tail
    instruction = _SPACES.sub(" ", instruction.strip().split(JOINT, 1)[0]).strip()
    if instruction:
        return f"{label}{separator}{instruction}" if name else instruction
    return label if name else None


def shape_preview(raw: Any) -> str:
    """A listing preview from its raw SQL text (docs/sessions-ui.md §3.3): flattened, a scaffold described, cut
    at 60 characters."""
    text = (raw or "").strip() if isinstance(raw, str) else ""
    if not text:
        return ""
    text = text.replace("\r", " ").replace("\n", " ")
    described = describe_skill_invocation(text)
    text = described if described is not None else text.split(JOINT, 1)[0]
    return text[:60] + "..." if len(text) > 60 else text


def part_text(content: Any) -> str | None:
    """Text of decoded content: a str as is, a part list's text parts joined by a space
    (None when it has none), anything else None."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [str(p["text"]) for p in content
                 if isinstance(p, dict) and isinstance(p.get("text"), str)]
        return " ".join(texts) if texts else None
    return None


def recent_preview(content: Any) -> str:
    """The ``/rewind`` preview of a user row (docs/sessions-ui.md §4.3): a scaffold described, parts joined,
    whitespace collapsed, more than 80 characters ⇒ 77 + ``...``."""
    text: str | None
    if isinstance(content, str):
        text = describe_skill_invocation(content) or content
    else:
        text = part_text(content) if isinstance(content, list) else None
    if text is None:
        text = "[multimodal content]"
    text = _SPACES.sub(" ", text).strip()
    return text[:77] + "..." if len(text) > 80 else text
