"""How the command line opens a session store for a command that only looks (``search``,
``prune`` without ``--apply``, ``export``): read-only, after
:func:`hermes_data.migrate.runner.require_settled` — never created, adopted, migrated or
switched to another journal mode; a missing, foreign, empty or not-yet-upgraded file is
refused in one line and left byte-identical (docs/cli.md "Reading a store without writing
it"). Commands that maintain a store (``prune --apply``, ``vacuum``, ``optimize-storage``,
``import``) open it writable themselves.
"""

from __future__ import annotations

from typing import Any

from hermes_data.migrate import runner as migrate
from hermes_data.sessions.store import SessionStore


def looking_session_store(url: Any) -> SessionStore:
    """The session store at ``url`` (default location when None), opened read-only for a
    command that only looks; refused unchanged unless it exists at the head."""
    migrate.require_settled("sessions", url)
    return SessionStore(url, read_only=True)
