"""``/save`` rendering (docs/sessions-ui.md §4.13): pure functions over an export
document, no database access.

* ``json`` renders the export itself (the import shape); ``md`` and ``html`` render what the
  user sees (callers pass the compaction-aware transcript when they have it).
* ``redact`` (the agent's secret patterns) is applied exactly once, to the whole document
  before rendering.
* HTML is one standalone UTF-8 document: inline CSS, no script, no external resource, every
  text HTML-escaped (quotes too); missing title/model read ``Untitled session`` / ``unknown
  model``, never ``None``.
"""

from __future__ import annotations

import html
import json
import os
import re
from datetime import datetime, timezone
from typing import Any, Callable, Mapping

FORMATS = ("json", "md", "html")
_ALIASES = {"json": "json", "snapshot": "json", "md": "md", "markdown": "md", "html": "html"}


def normalize_save_format(fmt: str | None) -> str:
    """``None`` ⇒ ``json``; ``json``/``snapshot`` ⇒ ``json``, ``md``/``markdown`` ⇒ ``md``,
    ``html`` (trimmed, any case); else :class:`ValueError` naming the formats."""
    if fmt is None:
        return "json"
    key = str(fmt).strip().lower()
    if key not in _ALIASES:
        raise ValueError(f"unknown save format {fmt!r}: use one of {', '.join(FORMATS)}")
    return _ALIASES[key]


def default_save_filename(session_id: str, fmt: str) -> str:
    """``hermes_session_<id: alphanumerics, - and _ only; 'session' if empty>.<fmt>``."""
    safe = re.sub(r"[^A-Za-z0-9_-]", "", str(session_id or "")) or "session"
    return f"hermes_session_{safe}.{normalize_save_format(fmt)}"


def save_filename(name: str) -> str:
    """A user-supplied file name reduced to its basename; empty, ``.`` or ``..`` ⇒
    :class:`ValueError`."""
    base = os.path.basename(str(name or "").replace("\\", "/").rstrip("/"))
    if base in ("", ".", ".."):
        raise ValueError(f"not a usable file name: {name!r}")
    return base


def _document(export: Any) -> dict[str, Any]:
    if isinstance(export, Mapping):
        return dict(export)
    to_json = getattr(export, "to_json", None)
    if to_json is None:
        raise TypeError(f"render_session_for_save needs an export, got {type(export).__name__}")
    return dict(to_json())


def _iso(ts: Any) -> str:
    try:
        return datetime.fromtimestamp(float(ts), tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (TypeError, ValueError, OverflowError, OSError):
        return str(ts)


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for p in content:
            if isinstance(p, dict) and isinstance(p.get("text"), str):
                parts.append(p["text"])
            elif isinstance(p, dict) and "image" in str(p.get("type", "")):
                parts.append("[image]")
            elif isinstance(p, str):
                parts.append(p)
        return "\n".join(parts)
    return str(content)


def _fence(body: str) -> str:
    runs = [len(m) for m in re.findall(r"`+", body)]
    return "`" * max(3, max(runs, default=0) + 1)


def _role_title(role: str) -> str:
    return {"user": "User", "assistant": "Assistant"}.get(role, role.capitalize() or "Message")


def _markdown(doc: dict[str, Any]) -> str:
    msgs = [m for m in doc.get("messages") or [] if isinstance(m, dict)
            and m.get("role") != "system"]
    title = doc.get("title") or doc.get("id") or "session"
    lines = [f"# Session: {title}", "",
             f"- **ID:** {doc.get('id')}", f"- **Source:** {doc.get('source') or 'unknown'}",
             f"- **Model:** {doc.get('model') or 'unknown model'}",
             f"- **Title:** {doc.get('title') or 'Untitled session'}",
             f"- **Started:** {_iso(doc.get('started_at'))}",
             f"- **Messages:** {len(msgs)}", ""]
    if not msgs:
        lines.append("_No messages found._")
    for m in msgs:
        role = str(m.get("role") or "")
        body = _text(m.get("content"))
        if role == "tool":
            fence = _fence(body)
            lines += [f"## Tool: {m.get('tool_name') or 'unknown'}", "", "<details>",
                      "<summary>Output</summary>", "", fence, body, fence, "", "</details>", ""]
        else:
            lines += [f"## {_role_title(role)} - {_iso(m.get('timestamp'))}", "", body, ""]
    return "\n".join(lines).rstrip() + "\n"


_CSS = ("body{font-family:system-ui,sans-serif;max-width:52em;margin:2em auto;padding:0 1em;"
        "line-height:1.5}h1{font-size:1.4em}.msg{border-top:1px solid #ddd;padding:.5em 0}"
        ".role{font-weight:bold}pre{white-space:pre-wrap;background:#f6f6f6;padding:.5em}"
        ".meta{color:#555}")


def _html(doc: dict[str, Any]) -> str:
    e = lambda v: html.escape(str(v), quote=True)  # noqa: E731
    msgs = [m for m in doc.get("messages") or [] if isinstance(m, dict)
            and m.get("role") != "system"]
    title = doc.get("title") or "Untitled session"
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>{e(title)}</title><style>{_CSS}</style></head><body>",
           f"<h1>{e(title)}</h1>",
           f'<p class="meta">{e(doc.get("id") or "")} · {e(doc.get("model") or "unknown model")}'
           f" · {e(_iso(doc.get('started_at')))} · {len(msgs)} messages</p>"]
    if not msgs:
        out.append("<p><em>No messages found.</em></p>")
    for m in msgs:
        role = str(m.get("role") or "")
        body = e(_text(m.get("content")))
        if role == "tool":
            out.append(f'<div class="msg"><details><summary class="role">Tool: '
                       f"{e(m.get('tool_name') or 'unknown')}</summary><pre>{body}</pre>"
                       "</details></div>")
        else:
            out.append(f'<div class="msg"><div class="role">{e(_role_title(role))} '
                       f'<span class="meta">{e(_iso(m.get("timestamp")))}</span></div>'
                       f"<pre>{body}</pre></div>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def render_session_for_save(export: Any, fmt: str | None,
                            *, redact: Callable[[str], str] | None = None) -> str:
    """The export rendered as ``json`` (indent 2, non-ASCII kept), ``md`` or ``html``;
    ``redact`` runs once over the document's JSON before rendering."""
    fmt = normalize_save_format(fmt)
    doc = _document(export)
    if redact is not None:
        doc = json.loads(redact(json.dumps(doc, ensure_ascii=False, default=str)))
    if fmt == "json":
        return json.dumps(doc, ensure_ascii=False, indent=2, default=str)
    return _markdown(doc) if fmt == "md" else _html(doc)
