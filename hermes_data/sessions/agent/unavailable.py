"""``format_session_db_unavailable`` (docs/sessions-agent.md §3.12): the message a
service shows when its session store could not be opened, from the process-wide last
construction error (never cleared by a later success in another thread)."""

from __future__ import annotations

from hermes_data.sessions.storage.ownership import last_init_error

#: Causes that usually mean a network or copy-on-write filesystem under the database.
_FS_HINTS = ("locking protocol", "not authorized", "disk i/o error")
_HINT = " (state.db may be on NFS/SMB/FUSE/ZFS — see https://www.sqlite.org/wal.html)"
#: Longest cause shown.
MAX_CAUSE = 300


def format_session_db_unavailable(prefix: str = "Session database not available") -> str:
    """``"<prefix>."``, or ``"<prefix>: <ExceptionType>: <message><hint>."`` with the last
    construction error (newlines collapsed, cut to 300 characters; a filesystem hint for
    locking-protocol, not-authorized and disk I/O errors)."""
    last = last_init_error()
    if last is None:
        return f"{prefix}."
    exc = last[1]
    cause = " ".join(f"{type(exc).__name__}: {exc}".split())[:MAX_CAUSE]
    hint = _HINT if any(h in cause.lower() for h in _FS_HINTS) else ""
    return f"{prefix}: {cause}{hint}."
