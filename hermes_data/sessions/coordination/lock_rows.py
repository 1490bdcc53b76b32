"""Guard rows shared by compression locks and turn leases
(docs/sessions-coordination.md §3.1–§3.3): clocks, holders, the one liveness rule (``DEAD``/``LIVE``), the conversation key
and the claim protocol.

The claim runs inside the caller's write transaction and works on either a SQLAlchemy
``Connection`` (``exec_driver_sql``) or a DB-API level ``Driver`` (``execute``): callers
pass the bound execute function, so the append hot path and the routine writes share it.
"""

from __future__ import annotations

import math
import os
import re
import socket
import threading
import time
import uuid
from typing import Any, Callable

import psutil

from hermes_data.sessions.coordination.sql import CoordinationStatements, GuardStatements
from hermes_data.sessions.sql.core import CoreStatements

#: ``pid=<n>`` component of a holder (docs/sessions-coordination.md §3.2).
_PID = re.compile(r"(?:^|:)pid=(\d+)(?::|$)")
_HOST = re.compile(r"(?:^|:)host=([^:]*)(?::|$)")
#: Longest holder accepted (docs/sessions-coordination.md §3.2).
MAX_HOLDER_CHARS = 512
#: Shortest TTL; shorter ones are raised to it (docs/sessions-coordination.md §3.2).
MIN_TTL_S = 0.1
DEFAULT_TTL_S = 300.0

#: ``execute(statement, params)`` of a connection or driver inside a transaction.
Execute = Callable[..., Any]


def holder_is_provably_dead(holder: Any, *, dialect: str = "sqlite",
                            pid_exists: Callable[[int], bool] = psutil.pid_exists) -> bool:
    """``DEAD(holder)`` (docs/sessions-coordination.md §3.2): only a ``pid=<n>`` component with ``n > 0`` that is not this
    process, on this host (a ``host=`` naming another host is never dead; on PostgreSQL a
    holder without ``host=`` is never dead), whose process does not exist. Any doubt or
    exception ⇒ alive."""
    try:
        if not isinstance(holder, str):
            return False
        m = _PID.search(holder)
        if m is None:
            return False
        pid = int(m.group(1))
        if pid <= 0 or pid == os.getpid():
            return False
        h = _HOST.search(holder)
        if h is None:
            if dialect == "postgresql":
                return False
        elif h.group(1).lower() != socket.gethostname().lower():
            return False
        return not pid_exists(pid)
    except Exception:  # noqa: BLE001 - any doubt counts as alive
        return False


def make_holder(purpose: str) -> str:
    """A fresh holder: ``pid=<pid>:host=<hostname>:tid=<thread>:<purpose>:<12 hex>``."""
    return (f"pid={os.getpid()}:host={socket.gethostname()}:tid={threading.get_ident()}:"
            f"{purpose}:{uuid.uuid4().hex[:12]}")


def check_ttl(ttl: Any, name: str = "ttl_seconds") -> float:
    """A validated TTL: bools, non-numbers, NaN and ±inf ⇒ ``ValueError``; below 0.1 s ⇒ 0.1 s."""
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not math.isfinite(ttl):
        raise ValueError(f"{name} must be a finite number of seconds, not {ttl!r}")
    return max(MIN_TTL_S, float(ttl))


def usable_holder(holder: Any) -> bool:
    """Whether ``holder`` can own a guard: a non-empty ``str`` (others ⇒ the operation
    returns ``False`` / does nothing); longer than 512 characters ⇒ ``ValueError``."""
    if not isinstance(holder, str) or not holder:
        return False
    if len(holder) > MAX_HOLDER_CHARS:
        raise ValueError(f"holder is {len(holder)} characters long (at most "
                         f"{MAX_HOLDER_CHARS}): {holder[:40]!r}…")
    return True


class Clock:
    """The store's clocks and liveness probe as the guard code sees them (docs/sessions-coordination.md §3.1): ``wall`` /
    ``mono`` / ``pid_exists`` read from the store (injectable there), the dialect's rule
    for guard decisions."""

    __slots__ = ("store", "cs")

    def __init__(self, store: Any, cs: CoordinationStatements) -> None:
        self.store = store  # its clocks are read when used (nothing looked up per call)
        self.cs = cs

    @property
    def wall(self) -> Callable[[], float]:
        """The store's wall clock (``time.time`` unless injected)."""
        return getattr(self.store, "wall", time.time)

    @property
    def mono(self) -> Callable[[], float]:
        """The store's monotonic clock (``time.monotonic`` unless injected)."""
        return getattr(self.store, "mono", time.monotonic)

    @property
    def pid_exists(self) -> Callable[[int], bool]:
        """The store's liveness probe (``psutil.pid_exists`` unless injected)."""
        return getattr(self.store, "pid_exists", psutil.pid_exists)

    def now(self, ex: Execute) -> float:
        """The guard clock inside a transaction: the server's on PostgreSQL (hosts may
        differ), the injectable wall clock on SQLite."""
        server_now = CoreStatements.for_dialect(self.cs.dialect).SERVER_NOW
        if server_now is not None:
            return float(ex(server_now).fetchone()[0])
        return float(self.wall())

    def dead(self, holder: Any) -> bool:
        """``DEAD(holder)`` with the store's probe."""
        return holder_is_provably_dead(holder, dialect=self.cs.dialect,
                                       pid_exists=self.pid_exists)

    def live(self, row: Any, now: float) -> bool:
        """``LIVE(row, now)`` = ``expires_at > now AND NOT DEAD(holder)`` (equality expired)."""
        return row is not None and float(row[1]) > now and not self.dead(row[0])


def conversation_key(ex: Execute, cs: CoordinationStatements, session_id: str) -> str:
    """``KEY(session_id)`` inside the caller's transaction (docs/sessions-coordination.md §3.3)."""
    row = ex(cs.KEY_OF, (session_id,)).fetchone()
    return session_id if row is None or row[0] is None else str(row[0])


def claim(ex: Execute, gs: GuardStatements, clock: Clock, key: str, holder: str, ttl: float,
          now: float) -> tuple[bool, str | None]:
    """The acquire protocol (docs/sessions-coordination.md §3.10 step 2, docs/sessions-coordination.md §3.14) inside the caller's transaction: a STALE
    row is compare-and-deleted, a LIVE own row extended (never lowered), a new row inserted
    ``ON CONFLICT DO NOTHING`` and re-read. Returns (owned, reclaimed holder)."""
    reclaimed: str | None = None
    row = ex(gs.READ, (key,)).fetchone()
    if row is not None:
        if not clock.live(row, now):
            if ex(gs.DELETE_STALE, (key, row[0], row[1])).rowcount == 1:
                reclaimed = row[0]
        elif row[0] == holder:
            ex(gs.EXTEND, (now + ttl, now + ttl, key, holder))
            return True, None
        else:
            return False, None
    ex(gs.INSERT, (key, holder, now, now + ttl))
    row = ex(gs.READ, (key,)).fetchone()
    return row is not None and row[0] == holder, reclaimed


def clear_stale(ex: Execute, gs: GuardStatements, clock: Clock, key: str,
                now: float) -> tuple[str, float] | None:
    """Remove a STALE row of ``key`` (compare-and-delete); returns the LIVE row, if any."""
    row = ex(gs.READ, (key,)).fetchone()
    if row is None:
        return None
    if clock.live(row, now):
        return str(row[0]), float(row[1])
    ex(gs.DELETE_STALE, (key, row[0], row[1]))
    return None
