"""Cross-process locks for startup maintenance (docs/sessions.md §7.6): ``flock`` on a
sidecar lock file for a SQLite store (never on the database file itself: closing a
descriptor of it would drop this process's POSIX locks), a session-level advisory lock for a
PostgreSQL store (shared by several hosts, where a lock file would not be).
"""

from __future__ import annotations

import fcntl
import os
import random
import time
from pathlib import Path
from typing import Callable

from sqlalchemy.engine import Connection, Engine

from hermes_data.errors import DatabaseBusyError
from hermes_data.files import open_lock_file
from hermes_data.sessions.backends import sql as q


class Patience:
    """A budget for waiting out a sibling's lock: jittered pauses (short during the first 2 s,
    longer after, so waiters spread out) until ``seconds`` have passed; then
    :class:`DatabaseBusyError` with the caller's message — never a raw driver error."""

    def __init__(self, seconds: float, *, start: float | None = None) -> None:
        self.seconds = seconds
        self.start = time.monotonic() if start is None else start  # monotonic clock
        self.deadline = self.start + seconds

    def wait(self, exc: BaseException, message: str) -> None:
        """Sleep before the next attempt, or raise ``DatabaseBusyError(message)`` from ``exc``
        once the budget is spent."""
        now = time.monotonic()
        if now >= self.deadline:
            raise DatabaseBusyError(message) from exc
        pause = random.uniform(0.02, 0.15) if now - self.start < 2.0 else random.uniform(0.25, 1.0)
        time.sleep(min(pause, self.deadline - now))


def pause_between_steps(started: float, *, min_pause_s: float, factor: float,
                        clock: Callable[[], float] = time.monotonic,
                        sleep: Callable[[float], None] = time.sleep) -> float:
    """Yield the write lock between two steps of a paced job (the FTS layout migration,
    ``optimize_fts``, prune, the incremental vacuum: docs/sessions-storage.md §3.6–§3.7,
    docs/sessions.md §7.5–§7.6):
    after a step that began at ``started`` (``clock`` time), sleep ``max(min_pause_s,
    factor × the step's time)`` so that writers waiting on the lock get it before the next
    step takes it again. Returns the pause slept (seconds)."""
    pause = max(min_pause_s, factor * (clock() - started))
    if pause > 0:
        sleep(pause)
    return max(0.0, pause)


class Pacer:
    """The size of a paced job's steps (sessions' messages for prune, pages for the
    incremental vacuum): after each step the next size is the last one scaled by
    ``target_s`` / the step's time, at most doubled, never below 1, so a step holds the
    write lock about ``target_s`` whatever the machine; between two steps
    :func:`pause_between_steps` with ``min_pause_s`` and ``factor``."""

    def __init__(self, size: int, *, target_s: float, min_pause_s: float,
                 factor: float) -> None:
        self.size = max(1, int(size))
        self.target_s, self.min_pause_s, self.factor = target_s, min_pause_s, factor
        #: The longest step so far (seconds): what the job reports as its longest hold.
        self.longest_s = 0.0

    def step_done(self, started: float, *, more: bool) -> None:
        """A step that began at ``started`` (``time.monotonic``) committed: size the next
        one and, when ``more`` work is left, pause before it."""
        took = time.monotonic() - started
        self.longest_s = max(self.longest_s, took)
        self.size = max(1, min(2 * self.size, int(self.size * self.target_s / max(took, 1e-3))))
        if more:
            pause_between_steps(started, min_pause_s=self.min_pause_s, factor=self.factor)


class FileLock:
    """Non-blocking ``flock`` on a sidecar lock file (owner-only)."""

    def __init__(self, path: Path) -> None:
        # O_NOFOLLOW, 0600, never truncated; a planted link raises UnsafeLockFileError.
        self._fd: int | None = open_lock_file(path)

    def acquire(self) -> bool:
        """Take the lock if nobody holds it."""
        assert self._fd is not None
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False
        return True

    def release(self) -> None:
        """Drop the lock."""
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        """Close the lock file (drops the lock)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class AdvisoryLock:
    """Non-blocking cross-host lock: a session-level advisory lock on its own connection."""

    def __init__(self, engine: Engine) -> None:
        self._conn: Connection | None = engine.connect().execution_options(
            isolation_level="AUTOCOMMIT")

    def acquire(self) -> bool:
        """Take the lock if no session holds it."""
        assert self._conn is not None
        return bool(self._conn.exec_driver_sql(q.PG_TRY_MAINTENANCE_LOCK).scalar())

    def release(self) -> None:
        """Drop the lock."""
        if self._conn is not None:
            self._conn.exec_driver_sql(q.PG_MAINTENANCE_UNLOCK)

    def close(self) -> None:
        """Close the lock's connection (drops the lock)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
