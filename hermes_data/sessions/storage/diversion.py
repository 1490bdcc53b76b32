"""Transcript diversion (docs/sessions-storage.md §3.11): when ``state.db`` was replaced
underneath a live process (``StateDbReplacedError``, ``DeletedWalGenerationError``) or
quarantined, the turn in memory must not be lost with the process. Upstream's gateway and
agent append it to ``$HERMES_HOME/sessions/<id>.jsonl``; :func:`divert_session_transcript_jsonl`
is that function, with upstream's signature, file and format.

It never touches the database: the file is the one place left to write. What it adds to
upstream's: a session id that would name another directory is refused, a new directory is
owner-only and a new file ``0600``, a planted symbolic link is never followed, and the lines
are fsynced before the path is returned.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any, Iterable

from hermes_data.config import hermes_home
from hermes_data.files import make_private_dirs

log = logging.getLogger("hermes_data.sessions.storage.diversion")

#: Mode of a transcript file this function creates (an existing file keeps its own).
TRANSCRIPT_FILE_MODE = 0o600


def _unsafe(sid: str) -> bool:
    """The id would name a path outside the sessions directory (or no file at all)."""
    return ("/" in sid or "\\" in sid or "\x00" in sid or sid in (".", "..")
            or (len(sid) >= 2 and sid[0].isalpha() and sid[1] == ":"))


def _line(message: Any) -> str:
    if isinstance(message, dict):
        return json.dumps(message, ensure_ascii=False, default=str) + "\n"
    return json.dumps({"content": str(message)}, ensure_ascii=False) + "\n"


def divert_session_transcript_jsonl(session_id: Any, messages: Iterable[Any] | None, *,
                                    sessions_dir: str | os.PathLike[str] | None = None
                                    ) -> Path | None:
    """Append ``messages`` as JSON lines to ``<sessions_dir>/<session_id>.jsonl`` and return
    that path; ``None`` (nothing written, nothing created) when the stripped id is empty or
    there are no messages.

    ``sessions_dir`` defaults to ``$HERMES_HOME/sessions`` (upstream's place; created if
    missing). Each dict message is one line, ``json.dumps(message, ensure_ascii=False,
    default=str)``; any other non-None value becomes ``{"content": str(value)}``; ``None`` is
    skipped. A lone surrogate is written as its JSON escape, so every line stays valid JSON.
    An id containing a path separator, NUL, a drive prefix, or equal to ``.``/``..`` ⇒
    :class:`ValueError` naming it; the file's own errors (``OSError``) propagate.
    """
    sid = str(session_id or "").strip()
    if not sid or not messages:
        return None
    if _unsafe(sid):
        raise ValueError(f"session id {sid!r} cannot name a transcript file: it would leave "
                         "the sessions directory")
    lines = [_line(m) for m in messages if m is not None]
    base = Path(sessions_dir) if sessions_dir is not None else hermes_home() / "sessions"
    make_private_dirs(base)
    path = base / f"{sid}.jsonl"
    flags = (os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
             | getattr(os, "O_CLOEXEC", 0))
    fd = os.open(path, flags, TRANSCRIPT_FILE_MODE)
    with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as handle:
        handle.writelines(lines)
        handle.flush()
        os.fsync(handle.fileno())
    log.warning("%s: %d message(s) of session %s diverted to JSON lines", path, len(lines), sid)
    return path
