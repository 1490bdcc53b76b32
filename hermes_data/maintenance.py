"""Session-store maintenance: delete, prune, archive, VACUUM (spec sessions.md §7.4–§7.6).

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

PostgreSQL (a :class:`~hermes_data.sessions.pg_store.PgSessionStore`): delete, prune, archive
and the stale-open sweep run the same statements (dialect twins from ``store._sql``; the
doomed-id list is a session temp table, ``pg_temp.doomed``). What is SQLite-only stays so:

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

import fcntl
import glob
import logging
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import psutil
from sqlalchemy.engine import Connection

from .sessions import sql
from .sessions.encoding import escape_like
from .sessions.store import ROUTINE_PATIENCE_S, SessionStore

log = logging.getLogger("hermes_data.maintenance")

#: Ids per ``IN (…)`` list / per delete chunk (SQLite's old 999-variable ceiling).
CHUNK_IDS = 900
DEFAULT_RETENTION_DAYS = 90
DEFAULT_MIN_INTERVAL_HOURS = 24
DEFAULT_MIN_VACUUM_INTERVAL_DAYS = 30
DEFAULT_MIN_VACUUM_FREELIST_RATIO = 0.25
#: Automation sources whose stale open rows the auto-maintenance sweep may close.
SWEEPABLE_SOURCES = ("cli", "cron", "kanban", "acp", "api_server", "subagent", "tool")
SWEEP_END_REASON = "startup_orphan_reap"
_ENDED_GUARD = "s.ended_at IS NOT NULL"
_PID = re.compile(r"(?:^|:)pid=(\d+)(?::|$)")

Progress = Callable[[int, int], None]


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


def _activity(s: str = "s") -> str:
    return (f"COALESCE((SELECT MAX(m.timestamp) FROM messages m WHERE m.session_id = {s}.id), "
            f"{s}.started_at)")


def prune_where(**filters: Any) -> tuple[str, dict[str, Any]]:
    """The prune/archive WHERE over alias ``s`` and its parameters (§7.5).

    Always starts with the ended guard. Unknown filter names raise ``ValueError``.
    """
    conds = [_ENDED_GUARD]
    params: dict[str, Any] = {}
    f = dict(filters)

    def take(name: str) -> Any:
        return f.pop(name, None)

    v = take("last_active_before")
    if v is not None:
        conds.append(f"{_activity()} < :la_before AND (COALESCE(s.end_reason, '') <> "
                     f"'{SWEEP_END_REASON}' OR s.ended_at < :la_before)")
        params["la_before"] = float(v)
    v = take("last_active_after")
    if v is not None:
        conds.append(f"{_activity()} >= :la_after")
        params["la_after"] = float(v)
    for name, op in (("started_before", "<"), ("started_after", ">=")):
        v = take(name)
        if v is not None:
            conds.append(f"s.started_at {op} :{name}")
            params[name] = float(v)
    for col in ("source", "end_reason", "user_id", "chat_id", "chat_type"):
        v = take(col)
        if v is not None:
            conds.append(f"s.{col} = :{col}")
            params[col] = v
    v = take("provider")
    if v is not None:
        conds.append("LOWER(COALESCE(s.billing_provider, '')) = lower(:provider)")
        params["provider"] = v
    for name, col in (("title_like", "title"), ("model_like", "model"), ("branch_like", "git_branch")):
        v = take(name)
        if v is not None:
            conds.append(f"LOWER(COALESCE(s.{col}, '')) LIKE :{name} ESCAPE '\\'")
            params[name] = "%" + escape_like(str(v).lower()) + "%"
    v = take("cwd_prefix")
    if v:
        p = v.rstrip("/\\") or v
        conds.append("(s.cwd = :cwd OR s.cwd LIKE :cwd_child ESCAPE '\\' "
                     "OR s.cwd LIKE :cwd_winchild ESCAPE '\\')")
        params.update(cwd=p, cwd_child=escape_like(p) + "/%",
                      cwd_winchild=escape_like(p) + "\\\\%")
    ranges = {"messages": "COALESCE(s.message_count, 0)",
              "tokens": "COALESCE(s.input_tokens, 0) + COALESCE(s.output_tokens, 0)",
              "cost": "COALESCE(s.actual_cost_usd, s.estimated_cost_usd, 0)",
              "tool_calls": "COALESCE(s.tool_call_count, 0)"}
    for key, expr in ranges.items():
        for bound, op in (("min", ">="), ("max", "<=")):
            v = take(f"{bound}_{key}")
            if v is not None:
                conds.append(f"{expr} {op} :{bound}_{key}")
                params[f"{bound}_{key}"] = v
    archived = take("archived")
    if archived is not None:
        conds.append("s.archived = :archived")
        params["archived"] = 1 if archived else 0
    if not take("include_pinned"):
        conds.append("COALESCE(s.pinned, 0) = 0")
    if f:
        raise ValueError(f"unknown prune filter(s): {', '.join(sorted(f))}")
    return " AND ".join(conds), params


def _with_age(older_than_days: float | None, filters: dict[str, Any]) -> dict[str, Any]:
    out = dict(filters)
    if (older_than_days is not None and out.get("last_active_before") is None
            and out.get("started_before") is None):
        out["last_active_before"] = time.time() - float(older_than_days) * 86400
    return out


def list_prune_candidates(store: SessionStore, older_than_days: float | None = DEFAULT_RETENTION_DAYS,
                          **filters: Any) -> list[PruneCandidate]:
    """Dry run: what a prune with these filters would delete, least recently active first."""
    where, params = prune_where(**_with_age(older_than_days, filters))
    q = (f"SELECT s.id, s.source, s.title, s.model, s.started_at, {sql.last_active('s')}, "
         f"s.ended_at, COALESCE(s.message_count, 0), s.archived FROM sessions s WHERE {where} "
         "ORDER BY 6 ASC, s.started_at ASC")
    from sqlalchemy import text
    rows = store._read(lambda c: c.execute(text(q), params).fetchall())
    return [PruneCandidate(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], bool(r[8])) for r in rows]


def count_prune_matches(store: SessionStore, older_than_days: float | None = DEFAULT_RETENTION_DAYS,
                        **filters: Any) -> int:
    """How many ended sessions the filters match."""
    from sqlalchemy import text
    where, params = prune_where(**_with_age(older_than_days, filters))
    return store._read(lambda c: c.execute(
        text(f"SELECT COUNT(*) FROM sessions s WHERE {where}"), params).scalar())


def count_open_prune_matches(store: SessionStore,
                             older_than_days: float | None = DEFAULT_RETENTION_DAYS,
                             **filters: Any) -> int:
    """Open sessions the same filters would match (for "N open sessions were spared")."""
    from sqlalchemy import text
    where, params = prune_where(**_with_age(older_than_days, filters))
    assert where.startswith(_ENDED_GUARD), "the ended guard must lead every prune filter"
    where = "s.ended_at IS NULL" + where[len(_ENDED_GUARD):]
    return store._read(lambda c: c.execute(
        text(f"SELECT COUNT(*) FROM sessions s WHERE {where}"), params).scalar())


# ---------------------------------------------------------------------------------------
# Deleting (inside one write transaction on the store's writer)
# ---------------------------------------------------------------------------------------


def _holder_alive(holder: str) -> bool:
    m = _PID.search(holder or "")
    if not m:
        return True
    pid = int(m.group(1))
    if pid == os.getpid():
        return True
    try:
        return psutil.pid_exists(pid)
    except Exception:  # noqa: BLE001 - any doubt counts as alive
        return True


def _doomed(conn: Connection) -> str:
    # The temp table of doomed ids, schema-qualified per dialect (a constant, never input).
    return "pg_temp.doomed" if conn.dialect.name == "postgresql" else "temp.doomed"


def _delete_claimed(conn: Connection, progress: Progress | None, total: int) -> int:
    """Delete the sessions listed in the doomed temp table chunk by chunk, each chunk claimed
    by the id high-water mark (O(n)); orphan their children; drop unreferenced prompts."""
    hwm = ""
    done = 0
    doomed = _doomed(conn)
    while True:
        ids = [r[0] for r in conn.exec_driver_sql(
            f"SELECT id FROM {doomed} WHERE id > ? ORDER BY id LIMIT ?", (hwm, CHUNK_IDS))]
        if not ids:
            break
        marks = ", ".join("?" * len(ids))
        conn.exec_driver_sql(f"UPDATE sessions SET parent_session_id = NULL WHERE parent_session_id "
                             f"IN ({marks}) AND id NOT IN ({marks})", (*ids, *ids))
        conn.exec_driver_sql(f"DELETE FROM messages WHERE session_id IN ({marks})", tuple(ids))
        conn.exec_driver_sql(f"UPDATE sessions SET parent_session_id = NULL WHERE id IN ({marks})",
                             tuple(ids))
        conn.exec_driver_sql(f"DELETE FROM sessions WHERE id IN ({marks})", tuple(ids))
        hwm = ids[-1]
        done += len(ids)
        if progress is not None:
            progress(done, total)
    conn.exec_driver_sql("DELETE FROM system_prompts WHERE NOT EXISTS (SELECT 1 FROM sessions s "
                         "WHERE s.system_prompt_hash = system_prompts.hash)")
    return done


def _fill_doomed(conn: Connection, ids: list[str]) -> None:
    conn.exec_driver_sql("CREATE TEMP TABLE IF NOT EXISTS doomed (id TEXT PRIMARY KEY)")
    doomed = _doomed(conn)
    conn.exec_driver_sql(f"DELETE FROM {doomed}")
    conn.exec_driver_sql(f"INSERT INTO {doomed}(id) VALUES (?) ON CONFLICT DO NOTHING",
                         [(i,) for i in ids])


def _remove_transcripts(sessions_dir: str | os.PathLike | None, ids: list[str]) -> None:
    if sessions_dir is None:
        return
    base = Path(sessions_dir)
    for sid in ids:
        paths = [base / f"{sid}.json", base / f"{sid}.jsonl",
                 *map(Path, glob.glob(str(base / f"request_dump_{glob.escape(sid)}_*.json")))]
        for p in paths:
            try:
                p.unlink()
            except OSError:
                pass  # file errors are swallowed (§7.4)


def delete_session(store: SessionStore, session_id: str, sessions_dir: str | os.PathLike | None = None,
                   expected_delete_ids: set[str] | None = None) -> bool:
    """Delete a session and its delegate descendants in one transaction (§7.4).

    Returns False when the session is missing or, given ``expected_delete_ids``, when the set
    to delete changed since the caller looked (TOCTOU fence for export-before-delete).
    """
    deleted: list[str] = []
    frag = store._sql

    def work(conn: Connection) -> bool:
        if conn.exec_driver_sql("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).first() is None:
            return False
        delegates: list[str] = []
        seen = {session_id}
        frontier = [session_id]
        while frontier:
            nxt: list[str] = []
            for i in range(0, len(frontier), CHUNK_IDS):
                part = frontier[i:i + CHUNK_IDS]
                marks = ", ".join("?" * len(part))
                rows = conn.exec_driver_sql(
                    f"SELECT id FROM sessions WHERE {frag.J('model_config', '_delegate_from')} IN ({marks}) "
                    f"OR (parent_session_id IN ({marks}) AND {frag.J('model_config', '_delegate_from')} "
                    "IS NOT NULL)", (*part, *part)).fetchall()
                nxt += [r[0] for r in rows if r[0] not in seen]
            seen.update(nxt)
            delegates += nxt
            frontier = nxt
        if expected_delete_ids is not None and set(expected_delete_ids) != {session_id, *delegates}:
            return False
        _fill_doomed(conn, [session_id, *delegates])
        _delete_claimed(conn, None, len(delegates) + 1)
        deleted.extend([session_id, *delegates])
        return True

    ok = store._write(work)
    if ok:
        _remove_transcripts(sessions_dir, deleted)
    return ok


def prune_sessions(store: SessionStore, older_than_days: float | None = DEFAULT_RETENTION_DAYS,
                   source: str | None = None, sessions_dir: str | os.PathLike | None = None,
                   exclude_active_write_guards: bool = False, progress: Progress | None = None,
                   **filters: Any) -> int:
    """Delete ended sessions matching the filters in one transaction; returns the count.

    Open and (by default) pinned sessions are never deleted; with
    ``exclude_active_write_guards`` neither are sessions under a live compression lock or
    whose conversation holds a live turn lease (their expired/dead guard rows are removed).
    """
    if source is not None:
        filters["source"] = source
    where, params = prune_where(**_with_age(older_than_days, filters))
    from sqlalchemy import text
    deleted: list[str] = []

    def work(conn: Connection) -> int:
        ids = [r[0] for r in conn.execute(text(f"SELECT s.id FROM sessions s WHERE {where}"), params)]
        if exclude_active_write_guards and ids:
            now = time.time()
            locks = {r[0]: r[1] for r in conn.exec_driver_sql(
                "SELECT session_id, holder FROM compression_locks WHERE expires_at > ?", (now,))}
            leases = {r[0]: r[1] for r in conn.exec_driver_sql(
                "SELECT conversation_id, holder FROM session_turn_leases WHERE expires_at > ?", (now,))}
            live_locks = {k for k, h in locks.items() if _holder_alive(h)}
            live_leases = {k for k, h in leases.items() if _holder_alive(h)}
            kept = []
            for sid in ids:
                if sid in live_locks:
                    continue
                if live_leases and conn.execute(store._sql.ROOT_OF, {"id": sid}).scalar() in live_leases:
                    continue
                kept.append(sid)
            ids = kept
            for i in range(0, len(ids), CHUNK_IDS):  # fence late writers of the doomed rows
                part = ids[i:i + CHUNK_IDS]
                marks = ", ".join("?" * len(part))
                conn.exec_driver_sql(f"DELETE FROM compression_locks WHERE session_id IN ({marks})",
                                     tuple(part))
                conn.exec_driver_sql(
                    f"DELETE FROM session_turn_leases WHERE conversation_id IN ({marks})", tuple(part))
        if not ids:
            return 0
        _fill_doomed(conn, ids)
        n = _delete_claimed(conn, progress, len(ids))
        deleted.extend(ids)
        return n

    n = store._write(work, patience=ROUTINE_PATIENCE_S)
    _remove_transcripts(sessions_dir, deleted)
    return n


def archive_sessions(store: SessionStore, older_than_days: float | None = None,
                     source: str | None = None, **filters: Any) -> int:
    """Archive each match's whole lineage (idempotent: defaults to ``archived=False``)."""
    if source is not None:
        filters["source"] = source
    filters.setdefault("archived", False)
    matches = [c.id for c in list_prune_candidates(store, older_than_days, **filters)]
    for sid in matches:
        store.set_session_archived(sid, True)
    return len(matches)


# ---------------------------------------------------------------------------------------
# Sizes, VACUUM and auto-maintenance
# ---------------------------------------------------------------------------------------


def _is_pg(store: SessionStore) -> bool:
    return store._sql.dialect == "postgresql"


def _pg_tables(store: SessionStore) -> list[str]:
    from .sessions.schema import metadata

    return [t.name for t in metadata.sorted_tables]


def logical_size_bytes(store: SessionStore) -> int:
    """SQLite: ``page_count × page_size`` (never ``stat``: a live reader blocks the fold-back
    of the WAL and stat-based deltas came out negative). PostgreSQL: the summed
    ``pg_total_relation_size`` of the store's tables."""
    if _is_pg(store):
        from sqlalchemy import text

        names = _pg_tables(store)
        params = {f"t{i}": n for i, n in enumerate(names)}
        return int(store._read(lambda c: c.execute(text(
            "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r' "
            f"AND c.relname IN ({', '.join(':' + k for k in params)})"), params).scalar()))
    return store._read(lambda c: c.exec_driver_sql("PRAGMA page_count").scalar()
                       * c.exec_driver_sql("PRAGMA page_size").scalar())


def freelist_ratio(store: SessionStore) -> float | None:
    """``freelist_count / page_count`` on an existing connection; None when unreadable (and
    always on PostgreSQL, which has no freelist)."""
    if _is_pg(store):
        return None
    try:
        free, pages = store._read(lambda c: (c.exec_driver_sql("PRAGMA freelist_count").scalar(),
                                              c.exec_driver_sql("PRAGMA page_count").scalar()))
    except Exception as exc:  # noqa: BLE001 - unknown ratio falls back to the time throttle
        log.info("freelist ratio unreadable: %s", exc)
        return None
    return (free / pages) if pages else None


def _pg_vacuum(store: SessionStore) -> None:
    from .errors import ConfigurationError

    if store.read_only:
        raise ConfigurationError(f"{store.path}: this session store handle is read-only")
    tables = ", ".join(_pg_tables(store))  # metadata names: fixed identifiers
    with store.engine.connect() as conn:
        conn = conn.execution_options(isolation_level="AUTOCOMMIT")
        conn.exec_driver_sql(f"VACUUM (ANALYZE) {tables}")


def vacuum(store: SessionStore) -> dict[str, int]:
    """SQLite: optimize each FTS index, PASSIVE checkpoint, VACUUM, PASSIVE checkpoint again;
    refused on quarantined or replaced handles. PostgreSQL: ``VACUUM (ANALYZE)`` of the
    store's tables on an autocommit connection (see the module docstring).

    Returns logical sizes before and after."""
    if _is_pg(store):
        before = logical_size_bytes(store)
        _pg_vacuum(store)
        after = logical_size_bytes(store)
        return {"before_bytes": before, "after_bytes": after, "reclaimed_bytes": before - after}
    store._guard()
    before = logical_size_bytes(store)
    for table in sql.FTS_VIRTUAL_TABLES:
        if store._read(lambda c, t=table: c.exec_driver_sql(
                "SELECT 1 FROM sqlite_master WHERE name = ?", (t,)).first()):
            store._write(lambda c, t=table: c.exec_driver_sql(
                f"INSERT INTO {t}({t}) VALUES ('optimize')"))
    with store._lock:
        raw = store._raw
        store._checkpoint()
        raw.execute("VACUUM")  # outside any transaction; takes the write lock itself
        store._checkpoint()
        if store._identity is not None:  # VACUUM may have recreated the sidecars
            from .sessions.guards import FileIdentity
            store._identity = FileIdentity.record(store.path, wal=store.journal_mode == "wal")
    after = logical_size_bytes(store)
    return {"before_bytes": before, "after_bytes": after, "reclaimed_bytes": before - after}


def sweep_stale_open_sessions(store: SessionStore, retention_days: float) -> int:
    """Close (never delete) stale open automation sessions without live guard rows."""
    cutoff = time.time() - retention_days * 86400
    srcs = ", ".join(f"'{s}'" for s in SWEEPABLE_SOURCES)
    pred = (f"s.ended_at IS NULL AND s.source IN ({srcs}) AND COALESCE(s.pinned, 0) = 0 "
            f"AND s.started_at < :cutoff AND {sql.last_active('s')} < :cutoff "
            "AND NOT EXISTS (SELECT 1 FROM compression_locks l WHERE l.session_id = s.id "
            "AND l.expires_at > :now)")
    from sqlalchemy import text

    def work(conn: Connection) -> int:
        now = time.time()
        ids = [r[0] for r in conn.execute(text(f"SELECT s.id FROM sessions s WHERE {pred}"),
                                          {"cutoff": cutoff, "now": now})]
        leases = {r[0] for r in conn.exec_driver_sql(
            "SELECT conversation_id FROM session_turn_leases WHERE expires_at > ?", (now,))}
        ids = [i for i in ids
               if not leases or conn.execute(store._sql.ROOT_OF, {"id": i}).scalar() not in leases]
        n = 0
        for sid in ids:  # predicates re-applied in the UPDATE
            n += conn.execute(text(
                f"UPDATE sessions AS s SET ended_at = :now, end_reason = '{SWEEP_END_REASON}' "
                f"WHERE s.id = :id AND {pred}"), {"now": now, "cutoff": cutoff, "id": sid}).rowcount
        return n

    return store._write(work)


def maybe_auto_prune_and_vacuum(store: SessionStore, retention_days: float = DEFAULT_RETENTION_DAYS,
                                min_interval_hours: float = DEFAULT_MIN_INTERVAL_HOURS,
                                vacuum_enabled: bool = True,
                                sessions_dir: str | os.PathLike | None = None,
                                min_vacuum_interval_days: float = DEFAULT_MIN_VACUUM_INTERVAL_DAYS,
                                min_vacuum_freelist_ratio: float = DEFAULT_MIN_VACUUM_FREELIST_RATIO
                                ) -> dict[str, Any]:
    """Startup maintenance (§7.6); never raises. Result keys: ``skipped``, ``pruned``,
    ``closed``, ``vacuumed``, ``freelist_ratio`` (when VACUUM was considered), ``error``."""
    result: dict[str, Any] = {"skipped": False, "pruned": 0, "closed": 0, "vacuumed": False}
    try:
        lock = _MaintenanceLock(store)
    except Exception as exc:  # noqa: BLE001 - startup maintenance never raises
        return {**result, "skipped": True, "error": str(exc)}
    try:
        if not lock.acquire():
            return {**result, "skipped": True}
        try:
            now = time.time()
            last = store.get_meta("last_auto_prune")
            if last is not None and now - float(last) < min_interval_hours * 3600:
                return {**result, "skipped": True}
            result["pruned"] = prune_sessions(store, older_than_days=retention_days,
                                              sessions_dir=sessions_dir,
                                              exclude_active_write_guards=True)
            result["closed"] = sweep_stale_open_sessions(store, retention_days)
            if vacuum_enabled and result["pruned"] > 0:
                last_vac = store.get_meta("last_vacuum")
                if last_vac is None or now - float(last_vac) >= min_vacuum_interval_days * 86400:
                    ratio = freelist_ratio(store)
                    result["freelist_ratio"] = ratio
                    # The freelist gate is SQLite's; PostgreSQL's VACUUM is never a rewrite.
                    if _is_pg(store) or ratio is None or ratio > min_vacuum_freelist_ratio:
                        vacuum(store)
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


#: Advisory-lock key of the PostgreSQL auto-maintenance lock (any fixed bigint).
PG_MAINTENANCE_LOCK_KEY = 0x6865726D6573_01


class _MaintenanceLock:
    """Non-blocking cross-process lock: ``flock`` on ``<db>.auto-maintenance.lock`` (SQLite),
    a session-level ``pg_try_advisory_lock`` on a connection of its own (PostgreSQL)."""

    def __init__(self, store: SessionStore) -> None:
        self._fd: int | None = None
        self._conn = None
        if _is_pg(store):
            self._conn = store.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        else:
            self._fd = os.open(f"{store.path}.auto-maintenance.lock", os.O_RDWR | os.O_CREAT, 0o600)

    def acquire(self) -> bool:
        if self._conn is not None:
            return bool(self._conn.exec_driver_sql(
                f"SELECT pg_try_advisory_lock({PG_MAINTENANCE_LOCK_KEY})").scalar())
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False
        return True

    def release(self) -> None:
        if self._conn is not None:
            self._conn.exec_driver_sql(f"SELECT pg_advisory_unlock({PG_MAINTENANCE_LOCK_KEY})")
        else:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
        elif self._fd is not None:
            os.close(self._fd)
