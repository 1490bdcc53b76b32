"""Compression failure cooldowns, streaks and the recovery deadline
(docs/sessions-coordination.md §3.12–§3.13): per-session (per-segment) anti-thrash state a
rebuilt compressor inherits across restarts.

Values are caller wall time (never the server clock). Getters read through the read pool
and turn NULL / junk into the neutral value; setters never store NULL in the ``NOT NULL``
counters.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Any, Mapping

from sqlalchemy.engine import Connection

from hermes_data.storable import check_text
from hermes_data.sessions.core import encoding as enc
from hermes_data.sessions.backends import ROUTINE_PATIENCE_S
from hermes_data.sessions.coordination.compression_locks import STORAGE_FAILURES
from hermes_data.sessions.errors import CooldownRestoreError
from hermes_data.sessions.coordination.sql import CoordinationStatements, for_dialect
from hermes_data.sessions.handle import UNSET, either_spelling

log = logging.getLogger("hermes_data.sessions.coordination.cooldowns")

#: Called between a restore's commit and its verification (tests inject races here).
_before_verify: Any = None
#: Busy budget of ``record`` / ``clear`` (routine); a module attribute so tests can shorten it.
COOLDOWN_PATIENCE_S = ROUTINE_PATIENCE_S


@dataclass(frozen=True)
class CooldownState:
    """A cooldown still in force: until when, how long from now, the latest error."""

    cooldown_until: float
    remaining_seconds: float
    error: str | None


@dataclass(frozen=True)
class CooldownRow:
    """The exact stored cooldown of a session (no expiry filter), for snapshot/restore."""

    session_exists: bool
    cooldown_until: float | None
    error: str | None


def _cs(store: Any) -> CoordinationStatements:
    return for_dialect(store.backend.dialect)


def _wall(store: Any) -> float:
    return float(getattr(store, "wall", time.time)())


def _real(value: Any) -> float | None:
    """A finite float, or None for NULL / junk / non-finite."""
    if value is None or isinstance(value, bool):
        return None
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def record_compression_failure_cooldown(store: Any, session_id: str, cooldown_until: float,
                                        error: str | None = None) -> None:
    """Record a failure cooldown: the stored deadline becomes ``max(stored, cooldown_until)``
    (a shorter later write never reopens the window), the error is always the latest. Blank
    id or missing row ⇒ no-op; ``cooldown_until`` not a finite real ⇒ ``ValueError`` before
    writing; storage failures ⇒ WARNING, swallowed."""
    if isinstance(cooldown_until, bool) or not isinstance(cooldown_until, (int, float)) \
            or not math.isfinite(cooldown_until):
        raise ValueError(f"cooldown_until must be a finite number, not {cooldown_until!r}")
    check_text("session_id", session_id)
    if not session_id:
        return
    until = float(cooldown_until)
    params = (until, until, enc.scrub_label(error), session_id)
    cs = _cs(store)
    try:
        store.backend.write(lambda c: c.exec_driver_sql(cs.RECORD_COOLDOWN, params),
                            patience=COOLDOWN_PATIENCE_S)
    except STORAGE_FAILURES as exc:
        log.warning("compression failure cooldown of %r not recorded: %s", session_id, exc)


def get_compression_failure_cooldown_row(store: Any, session_id: str) -> CooldownRow:
    """The stored cooldown exactly; blank or missing session ⇒ ``(False, None, None)``."""
    if not session_id:
        return CooldownRow(False, None, None)
    cs = _cs(store)
    row = store.backend.read(lambda c: c.exec_driver_sql(cs.COOLDOWN_ROW, (session_id,)).first())
    if row is None:
        return CooldownRow(False, None, None)
    return CooldownRow(True, None if row[0] is None else row[0], row[1])


def get_compression_failure_cooldown(store: Any, session_id: str) -> CooldownState | None:
    """The cooldown in force (stored deadline ``> wall()``), else None (also for junk)."""
    row = get_compression_failure_cooldown_row(store, session_id)
    if row.cooldown_until is None:
        return None
    until = _real(row.cooldown_until)
    if until is None:
        log.debug("session %r: unreadable cooldown %r ignored", session_id, row.cooldown_until)
        return None
    now = _wall(store)
    return CooldownState(until, until - now, row.error) if until > now else None


def _snapshot(snapshot: Any) -> CooldownRow:
    if isinstance(snapshot, CooldownRow):
        return snapshot
    if isinstance(snapshot, Mapping):
        return CooldownRow(bool(snapshot["session_exists"]), snapshot.get("cooldown_until"),
                           snapshot.get("error"))
    raise ValueError(f"a cooldown snapshot is a CooldownRow or a mapping, not "
                     f"{type(snapshot).__name__}")


def restore_compression_failure_cooldown_row(store: Any, session_id: str, snapshot: Any, *,
                                             raise_if_vanished: bool = False) -> None:
    """Put back a snapshot taken with :func:`get_compression_failure_cooldown_row` (exactly,
    no merge-max), then verify it on the writer. An absent snapshot is a no-op while the row
    is absent and :class:`CooldownRestoreError` once it exists; a row that vanished ⇒
    WARNING (docs/sessions-coordination.md §3.12), or with ``raise_if_vanished=True``
    :class:`CooldownRestoreError` as upstream raised ("session missing" before the write,
    "verification failed" after it); a concurrent overwrite ⇒ :class:`CooldownRestoreError`.
    Failures propagate."""
    check_text("session_id", session_id)
    snap = _snapshot(snapshot)
    cs = _cs(store)
    if not snap.session_exists:
        if session_id and get_compression_failure_cooldown_row(store, session_id).session_exists:
            raise CooldownRestoreError(f"cooldown snapshot of {session_id!r} says the session "
                                       "did not exist, but it does now; nothing restored")
        return
    until = _real(snap.cooldown_until) if snap.cooldown_until is not None else None
    params = (until, snap.error, session_id)
    changed = store.backend.write(lambda c: c.exec_driver_sql(cs.SET_COOLDOWN, params).rowcount)
    if changed == 0:
        if raise_if_vanished:
            raise CooldownRestoreError(
                f"compression cooldown rollback session missing: {session_id}")
        log.warning("cooldown of %r not restored: the session row vanished", session_id)

    def reread(conn: Connection) -> Any:
        return conn.exec_driver_sql(cs.COOLDOWN_ROW, (session_id,)).first()

    if _before_verify is not None:
        _before_verify()
    now = store.backend.read_on_writer(reread)
    if now is None:
        if raise_if_vanished:
            raise CooldownRestoreError(
                f"compression cooldown rollback verification failed for {session_id!r}: "
                f"expected ({until!r}, {snap.error!r}), the session row is gone")
        log.warning("cooldown of %r restored, but the session row vanished before the check",
                    session_id)
        return
    if (_real(now[0]), now[1]) != (until, snap.error):
        raise CooldownRestoreError(
            f"compression cooldown rollback verification failed: the cooldown of "
            f"{session_id!r} was overwritten before it could be verified: "
            f"expected ({until!r}, {snap.error!r}), found ({now[0]!r}, {now[1]!r})")


def clear_compression_failure_cooldown(store: Any, session_id: str) -> None:
    """Clear the cooldown (both columns NULL); failures ⇒ WARNING."""
    check_text("session_id", session_id)
    if not session_id:
        return
    cs = _cs(store)
    try:
        store.backend.write(lambda c: c.exec_driver_sql(cs.SET_COOLDOWN, (None, None, session_id)),
                            patience=COOLDOWN_PATIENCE_S)
    except STORAGE_FAILURES as exc:
        log.warning("compression failure cooldown of %r not cleared: %s", session_id, exc)


# -- streaks and the recovery deadline (docs/sessions-coordination.md §3.13) ---------------------------------------------


def _get(store: Any, which: str, session_id: str) -> Any:
    if not session_id:
        return None
    stmt = _cs(store).GET_COLUMN[which]
    row = store.backend.read(lambda c: c.exec_driver_sql(stmt, (session_id,)).first())
    return None if row is None else row[0]


def _get_count(store: Any, which: str, session_id: str) -> int:
    value = _real(_get(store, which, session_id))
    return max(0, int(value)) if value is not None else 0


def _set_count(store: Any, which: str, session_id: str, value: Any) -> None:
    if isinstance(value, bool):
        raise ValueError(f"a compression streak must be an int, not {value!r}")
    n = max(0, int(value))  # conversion errors before writing
    check_text("session_id", session_id)
    if not session_id:
        return
    stmt = _cs(store).SET_COLUMN[which]
    store.backend.write(lambda c: c.exec_driver_sql(stmt, (n, session_id)))


def get_compression_fallback_streak(store: Any, session_id: str) -> int:
    """Consecutive fallback compressions (0 for blank, missing, NULL, junk, negative)."""
    return _get_count(store, "fallback", session_id)


def set_compression_fallback_streak(store: Any, session_id: str, value: int = UNSET, *,
                                    streak: int = UNSET) -> None:
    """Store ``max(0, int(value))``; bool ⇒ ``ValueError``; missing row ⇒ no-op. ``streak=``
    is upstream's name for ``value`` (either, not both)."""
    _set_count(store, "fallback", session_id, either_spelling("value", value, "streak", streak))


def get_compression_ineffective_count(store: Any, session_id: str) -> int:
    """Anti-thrash strikes a rebuilt compressor inherits (0 when unset or junk)."""
    return _get_count(store, "ineffective", session_id)


def set_compression_ineffective_count(store: Any, session_id: str, value: int = UNSET, *,
                                      count: int = UNSET) -> None:
    """Store ``max(0, int(value))``; bool ⇒ ``ValueError``; missing row ⇒ no-op. ``count=``
    is upstream's name for ``value`` (either, not both)."""
    _set_count(store, "ineffective", session_id, either_spelling("value", value, "count", count))


def get_compression_overload_streak(store: Any, session_id: str) -> int:
    """Consecutive overloaded summary calls (0 when unset or junk)."""
    return _get_count(store, "overload", session_id)


def set_compression_overload_streak(store: Any, session_id: str, value: int) -> None:
    """Store ``max(0, int(value))``; bool ⇒ ``ValueError``; missing row ⇒ no-op."""
    _set_count(store, "overload", session_id, value)


def get_compression_recovery_deadline(store: Any, session_id: str) -> float:
    """The durable recovery deadline (wall epoch); 0.0 = unarmed (blank, missing, NULL, junk,
    negative)."""
    value = _real(_get(store, "deadline", session_id))
    return value if value is not None and value > 0 else 0.0


def set_compression_recovery_deadline(store: Any, session_id: str, deadline: Any) -> None:
    """Arm (wall epoch) or disarm the recovery deadline: None, ≤ 0 or junk ⇒ NULL; NaN/±inf
    ⇒ NULL with a WARNING (never armed forever)."""
    check_text("session_id", session_id)
    if not session_id:
        return
    value: float | None = None
    if deadline is not None and not isinstance(deadline, bool):
        try:
            raw = float(deadline)
        except (TypeError, ValueError):
            raw = 0.0
        if not math.isfinite(raw):
            log.warning("session %r: recovery deadline %r is not finite; stored as unarmed",
                        session_id, deadline)
        elif raw > 0:
            value = raw
    stmt = _cs(store).SET_COLUMN["deadline"]
    store.backend.write(lambda c: c.exec_driver_sql(stmt, (value, session_id)))
