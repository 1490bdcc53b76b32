"""Stale-FTS deferral bookkeeping and its escalation (docs/sessions-storage.md §3.8,
amending core docs/sessions.md §4.7).

Core stale recovery rebuilds the FTS indexes only when no other process holds the database.
A host where that never happens (a forgotten desktop backend) kept search on LIKE forever
and nobody could tell. So every recovery that finds holders records, in the open's own
transaction, the JSON ``state_meta`` key ``fts_rebuild_deferral``::

    {first_seen, last_seen, attempts, holder_pids, holders_since, holders_attempts, futile}

``attempts`` counts deferred recoveries; ``first_seen`` is kept (a future or negative value
is reset to now); ``holder_pids`` are the sorted positive pids; a changed set of pids resets
``holders_since``/``holders_attempts``; ``futile`` (``doctor`` reports it) = holders present,
``holders_attempts ≥ 5`` and ``now − holders_since ≥ 3600``. A malformed record starts afresh.

At ``attempts ≥ 3`` and ``now − first_seen ≥ 60`` the escalation reaps orphan desktop
backends (:mod:`.reaping`; setting ``sessions.reap_orphan_desktop_backends``) and scans
again; holders left ⇒ an ERROR naming them and the remedy. A successful recovery deletes
``fts_stale`` and ``fts_rebuild_deferral``.

The clock, the holder scan and the reaper are module attributes: tests replace them.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from hermes_data.sessions.storage import reaping
from hermes_data.sessions.storage.fts import sql as q

log = logging.getLogger("hermes_data.sessions.storage.fts.deferral")

#: Escalate (reap, then scan again) from this many deferred recoveries …
ESCALATE_ATTEMPTS = 3
#: … spanning at least this long (seconds since ``first_seen``).
ESCALATE_AFTER_S = 60.0
#: ``futile``: the same holders for this many attempts and this long.
FUTILE_ATTEMPTS = 5
FUTILE_AFTER_S = 3600.0

#: Injectable: wall clock (epoch seconds), holder scan, reaper.
clock: Callable[[], float] = time.time
holder_scan: Callable[[Path | None], list[tuple[int, str]]] = reaping.scan_holders
reaper: Callable[..., list[int]] = reaping.reap_orphan_desktop_backends


@dataclass(frozen=True)
class Deferral:
    """The ``fts_rebuild_deferral`` record."""

    first_seen: float
    last_seen: float
    attempts: int
    holder_pids: list[int]
    holders_since: float
    holders_attempts: int
    futile: bool


def parse(value: str | None) -> Deferral | None:
    """The record stored in ``value``; None when absent or malformed."""
    if value is None:
        return None
    try:
        raw = json.loads(value)
        return Deferral(float(raw["first_seen"]), float(raw["last_seen"]), int(raw["attempts"]),
                        sorted(int(p) for p in raw["holder_pids"]), float(raw["holders_since"]),
                        int(raw["holders_attempts"]), bool(raw["futile"]))
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def read(conn: Any) -> Deferral | None:
    """The stored record (None: absent or malformed)."""
    row = conn.exec_driver_sql(q.READ_DEFERRAL).first()
    return parse(None if row is None else row[0])


def advance(prev: Deferral | None, holders: Iterable[tuple[int, str]], now: float) -> Deferral:
    """The record after one more deferred recovery (pure: no I/O)."""
    pids = sorted({int(p) for p, _ in holders if isinstance(p, int) and p > 0})
    if prev is None:
        return Deferral(now, now, 1, pids, now, 1, False)
    first = prev.first_seen if 0 <= prev.first_seen <= now else now
    if pids != prev.holder_pids:
        since, count = now, 1
    else:
        since = prev.holders_since if 0 <= prev.holders_since <= now else now
        count = prev.holders_attempts + 1
    futile = bool(pids) and count >= FUTILE_ATTEMPTS and now - since >= FUTILE_AFTER_S
    return Deferral(first, now, prev.attempts + 1, pids, since, count, futile)


def record(conn: Any, holders: Iterable[tuple[int, str]]) -> Deferral:
    """Update the record inside the caller's write transaction; returns it."""
    d = advance(read(conn), holders, clock())
    conn.exec_driver_sql(q.WRITE_DEFERRAL, (json.dumps(asdict(d), sort_keys=True),))
    return d


def holders_cleared(conn: Any, db_path: Path | None, done: list[str], *,
                    reap: bool = reaping.DEFAULT_ENABLED) -> bool:
    """Core docs/sessions.md §4.7's "no other process holds the database", with the deferral bookkeeping and
    the escalation: True when recovery may proceed (inside the caller's transaction).
    ``reap``: the handle's ``sessions.reap_orphan_desktop_backends`` (the escalation may end
    orphaned desktop backends)."""
    holders = holder_scan(db_path)
    if not holders:
        return True
    d = record(conn, holders)
    done.append(f"stale FTS recovery deferred: the database is held by {_names(holders)} "
                f"(attempt {d.attempts})")
    if d.attempts < ESCALATE_ATTEMPTS or clock() - d.first_seen < ESCALATE_AFTER_S:
        return False
    if reap and db_path is not None:
        reaped = reaper(db_path, holders)
        if reaped:
            done.append(f"reaped orphan desktop backends {', '.join(map(str, reaped))}")
        holders = holder_scan(db_path)
        if not holders:
            return True
    log.error("%s: the full-text index has been stale since %s and its rebuild was deferred %d "
              "times because other processes hold the database (%s); search answers through "
              "LIKE meanwhile. Stop those processes (or restart the gateway) so the next open "
              "or retry can rebuild the index.", db_path,
              time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(d.first_seen)), d.attempts,
              _names(holders))
    return False


def doctor_facts(con: Any) -> tuple[dict | None, str | None]:
    """For ``hermes-data doctor`` (a read-only DB-API connection): the deferral record, and a
    warning when it is futile (the same holders for ≥ 5 attempts over ≥ 1 h)."""
    try:
        row = con.execute(q.READ_DEFERRAL).fetchone()
    except Exception:  # noqa: BLE001 - no state_meta (an old upstream file): nothing deferred
        return None, None
    d = parse(None if row is None else row[0])
    if d is None:
        return None, None
    warning = None
    if d.futile:
        warning = (f"the stale full-text index's rebuild has been deferred {d.attempts} times "
                   f"since {time.strftime('%Y-%m-%d %H:%M', time.localtime(d.first_seen))}: "
                   f"processes {', '.join(map(str, d.holder_pids)) or '(unknown)'} keep the "
                   "database open; stop them so the next open rebuilds it")
    return asdict(d), warning


def _names(holders: Iterable[tuple[int, str]]) -> str:
    by_pid: dict[int, list[str]] = {}
    for pid, path in holders:
        by_pid.setdefault(pid, []).append(str(path))
    return "; ".join(f"pid {p} ({', '.join(paths)})" if p > 0 else ", ".join(paths)
                     for p, paths in sorted(by_pid.items()))


__all__ = ["Deferral", "ESCALATE_AFTER_S", "ESCALATE_ATTEMPTS", "FUTILE_AFTER_S",
           "FUTILE_ATTEMPTS", "advance", "doctor_facts", "holders_cleared", "parse", "read",
           "record"]
