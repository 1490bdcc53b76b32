"""Async delegations: the store owns the table's shape (spec sessions-ext-gateway.md §3.10).

The delegation tool owns the rows of ``async_delegations``; its own DDL once added
``origin_session_id`` as bare nullable TEXT, so the shape depended on which opened the file
first (seed 003 #94691). The tool must not create or alter the table: it calls
:func:`reconcile_state_schema`, which runs exactly the store's writable-open schema path.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from sqlalchemy.engine import URL

from hermes_data.errors import ConfigurationError

log = logging.getLogger("hermes_data.sessions.gateway")


def reconcile_state_schema(target: Any) -> None:
    """Bring the session store at ``target`` — a path, a URL or an open ``SessionStore`` —
    to the head through the writable-open path (Alembic to head, adoption, FTS checks), then
    close what was opened here. A read-only store ⇒ ``ConfigurationError``; anything else (a
    raw DB-API connection) ⇒ ``TypeError``: DDL outside the history is refused."""
    from hermes_data.sessions.store import SessionStore

    if isinstance(target, SessionStore):
        if target.read_only:
            raise ConfigurationError(
                f"{target.path}: reconcile_state_schema needs a writable store handle")
        where: Any = target.url if target.engine.dialect.name != "sqlite" else target.path
    elif isinstance(target, (str, os.PathLike, URL)):
        where = target
    else:
        raise TypeError("reconcile_state_schema takes a path, a URL or a SessionStore, not "
                        f"{type(target).__name__} (no DDL outside the store's history)")
    with SessionStore(where):
        log.debug("session store schema reconciled at %s", where)
