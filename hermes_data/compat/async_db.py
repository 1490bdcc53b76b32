"""``AsyncSessionDB``: upstream's asyncio door onto :class:`~hermes_data.compat.SessionDB`
(docs/compat.md "AsyncSessionDB").

Like upstream's, it is a generic forwarder: every callable attribute of the wrapped
``SessionDB`` is returned as an ``async`` function that runs it through
``asyncio.to_thread`` (the loop's default executor, ``contextvars`` copied), and every other
attribute passes through unchanged. The typed store's own asyncio twin,
:class:`~hermes_data.sessions.AsyncSessionStore`, is generated from ``SessionStore``'s
surface and does not cover this class's upstream-shaped methods; a service moving to the
typed API moves to that one.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

from hermes_data.compat.session_db import SessionDB


class AsyncSessionDB:
    """``AsyncSessionDB(db)``: ``await adb.get_session(sid)`` runs ``db.get_session(sid)`` in
    a worker thread; non-callable attributes (``adb.db_path``) are ``db``'s own."""

    def __init__(self, db: SessionDB) -> None:
        #: The wrapped ``SessionDB``.
        self.db = db

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.db, name)
        if not callable(attr):
            return attr

        @functools.wraps(attr)
        async def offloaded(*args: Any, **kwargs: Any) -> Any:
            return await asyncio.to_thread(attr, *args, **kwargs)

        return offloaded
