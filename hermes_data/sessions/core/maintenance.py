"""Session-store maintenance: delete, prune, archive, VACUUM (docs/sessions.md §7.4–§7.6).

Rules every function here keeps:

* Prune only ever matches **ended** sessions (``s.ended_at IS NOT NULL`` is the first clause of
  every filter); pinned sessions are spared unless ``include_pinned=True``; with
  ``exclude_active_write_guards`` sessions holding a live compression lock or turn lease are
  spared too. Children of deleted rows are orphaned, never deleted.
* LIKE filters built from user text escape ``\\``, ``%`` and ``_`` and use ``ESCAPE '\\'``
  (an unescaped ``_`` in a ``cwd`` prefix once deleted a sibling project's history).
* Chunked deletes claim their rows by a key high-water mark (``id > :hwm ORDER BY id LIMIT n``
  over a temp table of the doomed ids): O(n) in total, never a re-scan from the start.
* Checkpoints are PASSIVE; sizes are ``page_count × page_size`` (:func:`logical_size_bytes`).

PostgreSQL: delete, prune, archive and the stale-open sweep run the same statements (dialect
twins from ``store.backend.sql``; the doomed-id list is a session temp table,
``pg_temp.doomed``). What differs is the backend's (:meth:`vacuum`, sizes, the lock):

* :func:`vacuum` runs ``VACUUM (ANALYZE)`` on the store's tables on an **autocommit**
  connection (VACUUM cannot run in a transaction block). It returns space inside the
  tables to PostgreSQL for reuse and refreshes planner statistics; it does not shrink files
  (``VACUUM FULL`` would take exclusive locks on a shared server — left to the operator).
  Sizes are ``pg_total_relation_size`` of the store's tables (heap + indexes + TOAST).
* :func:`freelist_ratio` is a SQLite fact (``None`` on PostgreSQL), and the auto-maintenance
  VACUUM gate does not consult it there: the interval gate and ``pruned > 0`` decide.
* The auto-maintenance lock is a ``pg_try_advisory_lock`` held on its own connection (the
  store is shared by several hosts, a lock file would not be), instead of ``flock`` on
  ``<db>.auto-maintenance.lock``.
"""

from __future__ import annotations

import logging
import math
import os
import re
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterable, Protocol

from sqlalchemy.engine import Connection

from hermes_data.sessions.backends import ROUTINE_PATIENCE_S
from hermes_data.sessions.backends.locks import Pacer
from hermes_data.sessions.core.doomed import delete_claimed as _delete_claimed
from hermes_data.sessions.core.doomed import fill_doomed as _fill_doomed
from hermes_data.sessions.core.doomed import remove_transcripts as _remove_transcripts
from hermes_data.sessions.coordination.lock_rows import holder_is_provably_dead
from hermes_data.sessions.core import maintenance_sql as mq
from hermes_data.sessions.core.maintenance_sql import (SWEEP_END_REASON, SWEEPABLE_SOURCES,
                              MaintenanceStatements, prune_where)
from hermes_data.sessions.handle import UNSET, StoreHandle, either_spelling
from hermes_data.sessions.sql.core import SESSION_EXISTS
from hermes_data.sessions.storage import opening

__all__ = ["CHUNK_IDS", "DEFAULT_MIN_INTERVAL_HOURS", "DEFAULT_MIN_VACUUM_FREELIST_RATIO",
           "DEFAULT_MIN_VACUUM_INTERVAL_DAYS", "DEFAULT_RETENTION_DAYS", "PruneCandidate",
           "SWEEPABLE_SOURCES", "SWEEP_END_REASON", "archive_sessions", "count_open_prune_matches",
           "count_prune_matches", "delete_session", "delete_sessions", "freelist_ratio",
           "get_session_delete_targets", "purge_stale_tool_call_markers", "list_prune_candidates",
           "logical_size_bytes", "maybe_auto_prune_and_vacuum", "prune_sessions", "prune_where",
           "sweep_stale_open_sessions", "vacuum"]

log = logging.getLogger("hermes_data.maintenance")

#: Ids per ``IN (…)`` list / per delete chunk (SQLite's old 999-variable ceiling).
CHUNK_IDS = 900
DEFAULT_RETENTION_DAYS = 90
#: A paced prune step aims to hold the write lock this long (docs/sessions.md §7.5): the
#: next step's size in messages is the last one's scaled by target / its time (at most
#: doubled), and a step is never less than one whole session.
PRUNE_STEP_TARGET_S = 0.1
#: The first step's size in messages (then adapted as above).
PRUNE_FIRST_STEP_MESSAGES = 2000
#: Pause between two steps: ``max(PRUNE_PAUSE_MIN_S, PRUNE_PAUSE_FACTOR × step)``; 100 ms
#: is the longest sleep of SQLite's busy handler, so a waiting writer tries inside the pause.
PRUNE_PAUSE_MIN_S = 0.1
PRUNE_PAUSE_FACTOR = 1.0
DEFAULT_MIN_INTERVAL_HOURS = 24
DEFAULT_MIN_VACUUM_INTERVAL_DAYS = 30
DEFAULT_MIN_VACUUM_FREELIST_RATIO = 0.25

Progress = Callable[[int, int], None]


class MaintainedStore(StoreHandle, Protocol):
    """What maintenance needs from the store beyond :class:`StoreHandle`: the public methods
    of other concerns it composes (``SessionStore`` has them; a concern never imports the
    facade, docs/architecture.md "Layers")."""

    def flush_token_counts(self, timeout: float = 5.0) -> bool: ...

    def get_meta(self, key: str) -> str | None: ...

    def set_meta(self, key: str, value: str | None) -> None: ...

    def set_session_archived(self, session_id: str, archived: bool = True) -> bool: ...

    def optimize_fts(self) -> int: ...

    def sweep_orphaned_sessions(self, *, max_idle_seconds: float,
                                sources: Iterable[str] = ("tui", "desktop", "subagent"),
                                exclude_ids: Iterable[str] = (), exclude_pinned: bool = False,
                                heartbeat_staleness_seconds: float | None = None,
                                heartbeat_ownership_grace_seconds: float | None = None,
                                respect_gateway_heartbeats: bool = True) -> list[str]: ...


def _ms(store: MaintainedStore) -> MaintenanceStatements:
    return MaintenanceStatements.for_dialect(store.backend.dialect)


@dataclass(frozen=True)
class PruneCandidate:
    """One session a prune would delete (dry run)."""

    id: str
    source: str
    title: str | None
    model: str | None
    started_at: float
    last_active: float | None
    ended_at: float | None
    message_count: int
    archived: bool


#: Prune filters reading token or cost columns (docs/sessions-agent.md §3.0 token barrier).
_ACCOUNTING_FILTERS = ("min_tokens", "max_tokens", "min_cost", "max_cost")


def _token_barrier(store: MaintainedStore, filters: dict[str, Any]) -> None:
    # A filter on tokens or cost must see this handle's queued deltas.
    if any(filters.get(k) is not None for k in _ACCOUNTING_FILTERS):
        store.flush_token_counts()


def _with_age(older_than_days: float | None, filters: dict[str, Any]) -> dict[str, Any]:
    out = dict(filters)
    if (older_than_days is not None and out.get("last_active_before") is None
            and out.get("started_before") is None):
        out["last_active_before"] = time.time() - float(older_than_days) * 86400
    return out


def _filters(source: str | None, filters: dict[str, Any]) -> dict[str, Any]:
    # ``source`` is the second positional parameter, as upstream's; a keyword filter too.
    return {**filters, "source": source} if source is not None else filters


def list_prune_candidates(store: MaintainedStore, older_than_days: float | None = None,
                          source: str | None = None, **filters: Any) -> list[PruneCandidate]:
    """Dry run: what a prune with these filters would delete, least recently active first.
    No age filter unless ``older_than_days`` is given (as upstream; ``prune_sessions``
    defaults to 90 days)."""
    filters = _filters(source, filters)
    _token_barrier(store, filters)
    where, params = prune_where(**_with_age(older_than_days, filters))
    rows = store.backend.read(lambda c: mq.prune_candidates(where).run(c, params).fetchall())
    return [PruneCandidate(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], bool(r[8]))
            for r in rows]


def count_prune_matches(store: MaintainedStore, older_than_days: float | None = None,
                        source: str | None = None, **filters: Any) -> int:
    """How many ended sessions the filters match (no age filter unless ``older_than_days``
    is given, as upstream)."""
    filters = _filters(source, filters)
    _token_barrier(store, filters)
    where, params = prune_where(**_with_age(older_than_days, filters))
    return int(store.backend.read(
        lambda c: mq.count_matches(where).run(c, params).scalar()) or 0)


def count_open_prune_matches(store: MaintainedStore, older_than_days: float | None = None,
                             source: str | None = None, **filters: Any) -> int:
    """Open sessions the same filters would match (for "N open sessions were spared"; no
    age filter unless ``older_than_days`` is given, as upstream)."""
    filters = _filters(source, filters)
    _token_barrier(store, filters)
    where, params = prune_where(**_with_age(older_than_days, filters))
    return int(store.backend.read(
        lambda c: mq.count_matches(mq.open_twin(where)).run(c, params).scalar()) or 0)


# ---------------------------------------------------------------------------------------
# Deleting (inside one write transaction on the store's writer)
# ---------------------------------------------------------------------------------------


def _holder_alive(holder: str, dialect: str = "sqlite") -> bool:
    # The one liveness rule (docs/sessions-coordination.md §3.2, A4): alive unless provably dead.
    return not holder_is_provably_dead(holder, dialect=dialect)


def _delegate_walk(conn: Connection, ms: MaintenanceStatements,
                   seeds: list[str]) -> list[str]:
    """Delegate descendants of ``seeds`` (never a seed itself), breadth first."""
    delegates: list[str] = []
    seen = set(seeds)
    frontier = list(seeds)
    while frontier:
        nxt: list[str] = []
        for i in range(0, len(frontier), CHUNK_IDS):
            part = frontier[i:i + CHUNK_IDS]
            rows = conn.exec_driver_sql(ms.delegates_of(len(part)), (*part, *part)).fetchall()
            for r in rows:
                if r[0] not in seen:
                    seen.add(r[0])
                    nxt.append(r[0])
        delegates += nxt
        frontier = nxt
    return delegates


def get_session_delete_targets(store: MaintainedStore, session_id: str) -> list[str]:
    """What deleting ``session_id`` removes: ``[session_id, *sorted(delegates)]`` (read on a
    read connection); a missing session ⇒ ``[]`` (docs/sessions-agent.md §3.11)."""
    if not session_id:
        return []
    ms = _ms(store)

    def work(conn: Connection) -> list[str]:
        if SESSION_EXISTS.run(conn, {"id": session_id}).first() is None:
            return []
        return [session_id, *sorted(_delegate_walk(conn, ms, [session_id]))]

    return store.backend.read(work)


def delete_sessions(store: MaintainedStore, ids: Any = UNSET,
                    sessions_dir: str | os.PathLike[str] | None = None, *,
                    session_ids: Any = UNSET) -> int:
    """Delete many sessions and their delegate descendants in one transaction (an explicit
    user action: open, pinned or mid-turn sessions go too). Unknown ids are skipped (UI
    selections race other tabs); children outside the set are orphaned; usage rows cascade;
    ``conversation_generations`` are kept. Returns how many requested ids existed;
    transcript files of every deleted id are removed after the commit. ``session_ids=`` is
    upstream's name for ``ids`` (either, not both)."""
    from hermes_data.sessions.agent.bulk_sql import for_dialect as bulk_sql

    given = either_spelling("ids", ids, "session_ids", session_ids)
    wanted = list(dict.fromkeys(i for i in (given or ()) if isinstance(i, str) and i))
    if not wanted:
        return 0
    ms = _ms(store)
    b = bulk_sql(store.backend.dialect)
    deleted: list[str] = []

    def work(conn: Connection) -> int:
        present: set[str] = set()
        for i in range(0, len(wanted), CHUNK_IDS):
            part = wanted[i:i + CHUNK_IDS]
            present.update(r[0] for r in conn.exec_driver_sql(b.existing_ids(len(part)),
                                                              tuple(part)))
        seeds = [i for i in wanted if i in present]
        if not seeds:
            return 0
        doomed = [*seeds, *_delegate_walk(conn, ms, seeds)]
        _fill_doomed(conn, ms, doomed)
        _delete_claimed(conn, ms, None, len(doomed))
        deleted[:] = doomed
        return len(seeds)

    n = store.backend.write(work)
    _remove_transcripts(sessions_dir, deleted)
    return n


_MARKER = re.compile(r"\[[A-Za-z_][A-Za-z0-9_.-]*\]")


def _marker_rows(conn: Connection, store: MaintainedStore) -> list[tuple[int, str, str]]:
    from hermes_data.sessions.agent.message_rows_sql import BLANK_CHARS, for_dialect as rows_sql

    st = rows_sql(store.backend.dialect).MARKER_CANDIDATES
    rows = conn.exec_driver_sql(st, (BLANK_CHARS, BLANK_CHARS)).fetchall()
    return [(int(r[0]), r[1], r[2]) for r in rows if _MARKER.fullmatch(r[2].strip())]


def _free_name(directory: Path, name: str) -> Path:
    path, n = directory / name, 1
    while path.exists():
        path, n = directory / f"{name}.{n}", n + 1
    return path


def purge_stale_tool_call_markers(store: MaintainedStore, *, dry_run: bool = False,
                                  backup: bool = True,
                                  backup_dir: str | os.PathLike[str] | None = None) -> Any:
    """Blank the content of assistant rows with tool calls whose whole text is a pre-#78148
    ``[marker]`` (docs/sessions-agent.md §3.6). Detection reads only short candidates; a backup
    is taken first (SQLite: ``VACUUM INTO`` beside the file or in ``backup_dir``, 0600;
    PostgreSQL: ``backup_dir`` required, JSON lines of the affected rows); then one
    transaction re-detects and clears. Only ``content`` changes; a rerun is idempotent."""
    import json as _json

    from hermes_data.sessions.rows import PurgeReport
    from hermes_data.sessions.agent.message_rows_sql import for_dialect as rows_sql

    pg = store.backend.dialect == "postgresql"
    if pg and backup and not dry_run and backup_dir is None:
        raise ValueError("purge_stale_tool_call_markers on PostgreSQL needs backup_dir "
                         "(the affected rows are written there as JSON lines)")
    found = store.backend.read(lambda c: _marker_rows(c, store))
    if dry_run or not found:
        return PurgeReport(dry_run, len(found), tuple(r[0] for r in found), None)
    backup_path: Path | None = None
    if backup:
        stamp = time.strftime("%Y%m%d_%H%M%S")
        if pg:
            directory = Path(backup_dir)  # type: ignore[arg-type]
            backup_path = _free_name(directory, f"session-markers-backup-{stamp}.jsonl")
            fd = os.open(backup_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                for rid, sid, content in found:
                    fh.write(_json.dumps({"id": rid, "session_id": sid, "content": content},
                                         ensure_ascii=False) + "\n")
        else:
            db = Path(store.path)
            directory = Path(backup_dir) if backup_dir is not None else db.parent
            backup_path = _free_name(directory, f"{db.name}.pre-clean-markers-backup-{stamp}")
            _vacuum_into(db, backup_path)
    rh = rows_sql(store.backend.dialect)

    def work(conn: Connection) -> list[int]:
        ids = [r[0] for r in _marker_rows(conn, store)]
        for i in range(0, len(ids), CHUNK_IDS):
            part = ids[i:i + CHUNK_IDS]
            conn.exec_driver_sql(rh.clear_content(len(part)), tuple(part))
        return ids

    ids = store.backend.write(work)
    return PurgeReport(False, len(ids), tuple(ids), None if backup_path is None else str(backup_path))


def _vacuum_into(db: Path, target: Path) -> None:
    from hermes_data.tracked import tracked_connect
    from hermes_data.sessions.core.maintenance_sql import VACUUM_INTO

    con = tracked_connect(str(db), isolation_level=None)  # counted (docs/sessions-storage.md §3.0)
    try:
        con.execute(VACUUM_INTO, (str(target),))
    finally:
        con.close()
    os.chmod(target, 0o600)


def delete_session(store: MaintainedStore, session_id: str,
                   sessions_dir: str | os.PathLike[str] | None = None,
                   expected_delete_ids: set[str] | None = None) -> bool:
    """Delete a session and its delegate descendants in one transaction (docs/sessions.md §7.4).

    Returns False when the session is missing or, given ``expected_delete_ids``, when the set
    to delete changed since the caller looked (TOCTOU fence for export-before-delete).
    """
    deleted: list[str] = []
    ms = _ms(store)

    def work(conn: Connection) -> bool:
        if SESSION_EXISTS.run(conn, {"id": session_id}).first() is None:
            return False
        delegates = _delegate_walk(conn, ms, [session_id])
        if expected_delete_ids is not None and set(expected_delete_ids) != {session_id, *delegates}:
            return False
        _fill_doomed(conn, ms, [session_id, *delegates])
        _delete_claimed(conn, ms, None, len(delegates) + 1)
        deleted.extend([session_id, *delegates])
        return True

    ok = store.backend.write(work)
    if ok:
        _remove_transcripts(sessions_dir, deleted)
    return ok


def prune_sessions(store: MaintainedStore, older_than_days: float | None = DEFAULT_RETENTION_DAYS,
                   source: str | None = None, sessions_dir: str | os.PathLike[str] | None = None,
                   exclude_active_write_guards: bool = False, progress: Progress | None = None,
                   **filters: Any) -> int:
    """Delete ended sessions matching the filters, paced; returns the count.

    Open and (by default) pinned sessions are never deleted; with
    ``exclude_active_write_guards`` neither are sessions under a live compression lock or
    whose conversation holds a live turn lease (their expired/dead guard rows are removed).

    The matches are read first (in the dry run's order, least recently active first), then
    deleted in steps (docs/sessions.md §7.5): each step is one write transaction over whole
    sessions that re-checks the filter and the guards, sized from the last step's time to
    hold the write lock about :data:`PRUNE_STEP_TARGET_S` and paused after (one
    :class:`~hermes_data.sessions.backends.locks.Pacer`); the longest step is logged.
    ``progress(done, total)`` follows the deleted sessions.
    """
    filters = _filters(source, filters)
    _token_barrier(store, filters)
    where, params = prune_where(**_with_age(older_than_days, filters))
    plan = [(r[0], max(1, int(r[7] or 0))) for r in
            store.backend.read(lambda c: mq.prune_candidates(where).run(c, params).fetchall())]
    ms = _ms(store)
    pacer = Pacer(PRUNE_FIRST_STEP_MESSAGES, target_s=PRUNE_STEP_TARGET_S,
                  min_pause_s=PRUNE_PAUSE_MIN_S, factor=PRUNE_PAUSE_FACTOR)
    deleted_total = 0
    i = 0
    while i < len(plan):
        step: list[str] = []
        weight = 0
        while i < len(plan) and len(step) < CHUNK_IDS and (
                not step or weight + plan[i][1] <= pacer.size):
            step.append(plan[i][0])
            weight += plan[i][1]
            i += 1
        started = time.monotonic()
        deleted = store.backend.write(
            partial(_prune_step, store=store, ms=ms, where=where, params=params, ids=step,
                    guarded=exclude_active_write_guards,
                    progress=_offset(progress, deleted_total, len(plan))),
            patience=ROUTINE_PATIENCE_S)
        deleted_total += len(deleted)
        _remove_transcripts(sessions_dir, deleted)
        pacer.step_done(started, more=i < len(plan))
    if deleted_total:  # once, not per step: a scan of every prompt
        store.backend.write(lambda c: c.exec_driver_sql(ms.DROP_UNUSED_PROMPTS),
                            patience=ROUTINE_PATIENCE_S)
    if plan:
        log.info("prune: %d of %d matching sessions deleted; longest step %.0f ms",
                 deleted_total, len(plan), pacer.longest_s * 1000)
    return deleted_total


def _offset(progress: Progress | None, base: int, total: int) -> Progress | None:
    """A step's ``progress`` as the whole prune's (``base`` sessions deleted before it)."""
    if progress is None:
        return None
    return lambda done, _step_total: progress(base + done, total)


def _prune_step(conn: Connection, *, store: MaintainedStore, ms: MaintenanceStatements,
                where: mq.PruneWhere, params: dict[str, Any], ids: list[str], guarded: bool,
                progress: Progress | None) -> list[str]:
    """One step of :func:`prune_sessions` in its write transaction: the step's ids the
    filter still matches, without live guards (``guarded``; the others' guard rows fenced),
    deleted whole. Returns the ids deleted."""
    ids = [r[0] for r in mq.still_matching(where).run_expanded(conn, ids, params)]
    if guarded and ids:
        now = time.time()
        dialect = store.backend.dialect
        locks = {r[0]: r[1] for r in conn.exec_driver_sql(ms.LIVE_LOCKS, (now,))}
        leases = {r[0]: r[1] for r in conn.exec_driver_sql(ms.LIVE_LEASES, (now,))}
        live_locks = {k for k, h in locks.items() if _holder_alive(h, dialect)}
        live_leases = {k for k, h in leases.items() if _holder_alive(h, dialect)}
        root_of = store.backend.sql.ROOT_OF
        ids = [sid for sid in ids if sid not in live_locks and not (
            live_leases and conn.execute(root_of, {"id": sid}).scalar() in live_leases)]
        if ids:  # fence late writers of the doomed rows
            for stmt in ms.fence_guards(len(ids)):
                conn.exec_driver_sql(stmt, tuple(ids))
    if not ids:
        return []
    _fill_doomed(conn, ms, ids)
    _delete_claimed(conn, ms, progress, len(ids), drop_prompts=False)
    return ids


def archive_sessions(store: MaintainedStore, older_than_days: float | None = None,
                     source: str | None = None, **filters: Any) -> int:
    """Archive each match's whole lineage (idempotent: defaults to ``archived=False``)."""
    filters = _filters(source, filters)
    filters.setdefault("archived", False)
    matches = [c.id for c in list_prune_candidates(store, older_than_days, **filters)]
    for sid in matches:
        store.set_session_archived(sid, True)
    return len(matches)


# ---------------------------------------------------------------------------------------
# Sizes, VACUUM and auto-maintenance
# ---------------------------------------------------------------------------------------


def logical_size_bytes(store: MaintainedStore) -> int:
    """SQLite: ``page_count × page_size``; PostgreSQL: the summed ``pg_total_relation_size``
    of the store's tables."""
    return store.backend.logical_size_bytes()


def freelist_ratio(store: MaintainedStore) -> float | None:
    """``freelist_count / page_count``; None when unreadable (always on PostgreSQL)."""
    return store.backend.freelist_ratio()


def vacuum(store: MaintainedStore) -> dict[str, int]:
    """SQLite: optimize each FTS index, PASSIVE checkpoint, VACUUM, PASSIVE checkpoint again;
    refused on quarantined or replaced handles. PostgreSQL: ``VACUUM (ANALYZE)`` of the
    store's tables on an autocommit connection (see the module docstring).

    A damaged SQLite file (``PRAGMA quick_check``) is refused with
    :class:`~hermes_data.errors.CorruptDatabaseError` before anything is written (issue 31).

    Returns logical sizes before and after, and ``fts_optimized``: how many FTS indexes were
    optimized first (what upstream's ``vacuum()`` returned)."""
    opening.refuse_if_corrupt(store)  # VACUUM would rewrite a damaged file whole
    optimized = store.optimize_fts()  # public (docs/sessions-storage.md §3.7); raises a quarantined handle's sticky error
    before = logical_size_bytes(store)
    store.backend.vacuum()
    after = logical_size_bytes(store)
    return {"before_bytes": before, "after_bytes": after, "reclaimed_bytes": before - after,
            "fts_optimized": optimized}


#: :func:`vacuum` under a name ``maybe_auto_prune_and_vacuum``'s parameter ``vacuum``
#: (upstream's spelling of ``vacuum_enabled``) does not shadow.
_vacuum = vacuum


def sweep_stale_open_sessions(store: MaintainedStore, retention_days: float) -> int:
    """Close (never delete) stale open automation sessions without live guard rows: core
    docs/sessions.md §7.6 step 4, which is ``sweep_orphaned_sessions`` (docs/sessions-coordination.md §3.18, A4)
    with the automation sources, ``retention_days × 86400``, pinned rows spared and no
    heartbeat clause. Returns how many were closed."""
    return len(store.sweep_orphaned_sessions(
        max_idle_seconds=retention_days * 86400, sources=SWEEPABLE_SOURCES, exclude_pinned=True,
        respect_gateway_heartbeats=False))


def _stamp(store: MaintainedStore, key: str) -> float | None:
    """The time a maintenance marker in ``state_meta`` records, or None when there is none —
    or when it is no finite number (empty, garbled by hand or by another tool): such a marker
    counts as "never ran", so it cannot make every start fail or skip forever."""
    raw = store.get_meta(key)
    if raw is None:
        return None
    try:
        value = float(raw)
    except (TypeError, ValueError):
        value = math.nan
    if not math.isfinite(value):
        log.info("%s: state_meta %s=%r is no time stamp; treated as never run", store.path,
                 key, raw)
        return None
    return value


def maybe_auto_prune_and_vacuum(store: MaintainedStore, retention_days: float = DEFAULT_RETENTION_DAYS,
                                min_interval_hours: float = DEFAULT_MIN_INTERVAL_HOURS,
                                vacuum_enabled: bool = UNSET,
                                sessions_dir: str | os.PathLike[str] | None = None,
                                min_vacuum_interval_days: float = DEFAULT_MIN_VACUUM_INTERVAL_DAYS,
                                min_vacuum_freelist_ratio: float = DEFAULT_MIN_VACUUM_FREELIST_RATIO,
                                *, vacuum: bool = UNSET) -> dict[str, Any]:
    """Startup maintenance (docs/sessions.md §7.6); never raises (but for passing both
    ``vacuum_enabled=`` and upstream's spelling ``vacuum=``: ``TypeError``; default True).
    Result keys: ``skipped``, ``pruned``, ``closed``, ``vacuumed``, ``freelist_ratio`` (when
    VACUUM was considered), ``error``."""
    vacuum_enabled = True if vacuum_enabled is UNSET and vacuum is UNSET \
        else bool(either_spelling("vacuum_enabled", vacuum_enabled, "vacuum", vacuum))
    result: dict[str, Any] = {"skipped": False, "pruned": 0, "closed": 0, "vacuumed": False}
    try:
        lock = store.backend.maintenance_lock()
    except Exception as exc:  # noqa: BLE001 - startup maintenance never raises
        return {**result, "skipped": True, "error": str(exc)}
    try:
        if not lock.acquire():
            return {**result, "skipped": True}
        try:
            now = time.time()
            last = _stamp(store, "last_auto_prune")
            if last is not None and now - last < min_interval_hours * 3600:
                return {**result, "skipped": True}
            result["pruned"] = prune_sessions(store, older_than_days=retention_days,
                                              sessions_dir=sessions_dir,
                                              exclude_active_write_guards=True)
            result["closed"] = sweep_stale_open_sessions(store, retention_days)
            if vacuum_enabled and result["pruned"] > 0:
                last_vac = _stamp(store, "last_vacuum")
                if last_vac is None or now - last_vac >= min_vacuum_interval_days * 86400:
                    ratio = freelist_ratio(store)
                    result["freelist_ratio"] = ratio
                    # The freelist gate is SQLite's; PostgreSQL's VACUUM is never a rewrite.
                    if store.backend.dialect == "postgresql" or ratio is None or ratio > min_vacuum_freelist_ratio:
                        _vacuum(store)
                        store.set_meta("last_vacuum", str(time.time()))
                        result["vacuumed"] = True
            store.set_meta("last_auto_prune", str(now))
        finally:
            lock.release()
    except Exception as exc:  # noqa: BLE001 - startup maintenance never raises
        log.warning("%s: auto-maintenance failed: %s", store.path, exc)
        result["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        lock.close()
    return result
