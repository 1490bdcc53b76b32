"""FTS index maintenance: ``optimize_fts``, ``rebuild_fts``, incremental merges and the
in-process retry of a deferred stale recovery (docs/sessions-storage.md §3.7, §3.8 and
docs/sessions-storage.md §3.10).

* :func:`optimize_fts` — each queryable index (``messages_fts``, ``messages_fts_trigram``,
  ``messages_cjk_fts``) merged into one segment, as ``'optimize'`` does, but paced: bounded
  ``'merge'`` commands, each its own write transaction, a pause between them (a single
  ``'optimize'`` held the write lock for seconds per index on large files, core P-11).
  Nothing calls it automatically except core ``vacuum()``.
* :func:`rebuild_fts` — under the cross-process admission lock ``<db>.fts_rebuild.lock``
  (two concurrent rebuilds corrupted production databases): one ``BEGIN IMMEDIATE`` that
  rebuilds the base and trigram indexes and deletes the ``fts_rebuild_*`` markers [D]
  (upstream committed per table and kept the markers). A legacy inline layout is refilled
  from ``messages`` instead. Admission refused ⇒ WARNING and 0.
* :func:`merge_fts` — bounded incremental merges: per present index, ``usermerge`` is set to
  2 once per handle (only when the persisted value differs), then up to ``max_commands``
  ``'merge'`` commands of ``max_pages`` pages, each its own ``BEGIN IMMEDIATE`` with **zero**
  lock patience (a held write lock ends that index's pass at once), stopping when a command
  changed fewer than 2 rows (the command row itself counts 1: nothing left to merge).
* :func:`after_append` — the cadence: every :data:`MERGE_EVERY`-th successful transcript write
  of a handle (``append_message`` / ``append_messages_batch``: the writes that add FTS
  segments; heartbeats, titles and flags never touch the indexes), post-commit, one
  ``merge_fts(CADENCE_PAGES, 4)`` inside ``except Exception`` (``SystemError`` included): maintenance
  never makes a caller replay a committed write (#90734, #85079). Skipped on read-only,
  quarantined or replaced handles, while ``fts_stale`` is set, and without FTS.
* :func:`retry_deferred_fts_recovery` — a long-lived host's tick: core stale recovery with
  admission timeout 0, at most once per backoff (60 s doubling to 3,600 s, reset on
  success); True only when the index was rebuilt; never raises.

The merge constants come from ``benchmarks/fts_merge.py`` (the rule of docs/sessions-storage.md §3.7: the largest
``max_pages`` with a p95 single command ≤ 50 ms, a pass ≤ 250 ms per index, ≤ 1 ms amortised
per write).

PostgreSQL (docs/sessions-storage.md §3.10): ``optimize_fts`` = ``gin_clean_pending_list`` per GIN index of
``messages``; ``rebuild_fts`` = ``REINDEX INDEX`` of the search GIN indexes under the
maintenance advisory lock (0 when another session holds it); merges do not apply (0); the
retry answers False.
"""

from __future__ import annotations

import logging
import time
from functools import partial
from typing import Any, Callable

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from hermes_data.errors import DatabaseBusyError
from hermes_data.sessions.storage.fts import ddl as fts_ddl
from hermes_data.sessions.storage.fts import index_cache
from hermes_data.sessions.storage import opening
from hermes_data.sessions.backends.base import FTS_RETRY_BACKOFF_START_S, FtsMergeState
from hermes_data.sessions.backends.locks import pause_between_steps
from hermes_data.sessions.backends.sqlite import is_busy
from hermes_data.sessions.storage.fts import sql as q

log = logging.getLogger("hermes_data.sessions.storage.fts.maintenance")

#: ``merge_fts`` defaults (upstream's signature; docs/sessions-storage.md §5 P-S4).
MERGE_PAGES = 500
MERGE_COMMANDS = 4
#: The cadence's pages per command, by the reference's rule (docs/sessions-storage.md §3.7) (largest value with a p95 single
#: command ≤ 50 ms on the benchmark corpus): ``benchmarks/fts_merge.py`` on this project's
#: reference machine (SQLite 3.40.1, 2 cores) measured p95 45 ms at 250 pages, 78 ms at 500;
#: four commands keep a pass under 250 ms per index.
CADENCE_PAGES = 250
#: Pages one step of the paced ``optimize_fts`` merges (docs/sessions-storage.md §3.7): the
#: ``merge_fts`` default, ≈ 41–78 ms per command on the reference corpus (P-S4), far under
#: the 250 ms a step may hold the write lock.
OPTIMIZE_STEP_PAGES = MERGE_PAGES
#: Pause between two steps: ``max(OPTIMIZE_PAUSE_MIN_S, OPTIMIZE_PAUSE_FACTOR × step)``.
#: 100 ms is the longest sleep of SQLite's busy handler, so a writer waiting on the lock
#: always tries once inside the pause (tests zero both).
OPTIMIZE_PAUSE_MIN_S = 0.1
OPTIMIZE_PAUSE_FACTOR = 1.0
#: A bound on one index's steps (a file of ~8 GB of index at 500 pages a step, or writers
#: that never stop adding segments); the next optimize picks the merge up where it stopped.
OPTIMIZE_MAX_STEPS = 4096
USERMERGE = 2
#: A merge pass every this many successful transcript writes of a handle.
MERGE_EVERY = 1000
#: ``rebuild_fts`` waits this long for the admission lock (then 0, no progress).
REBUILD_ADMISSION_WAIT_S = 120.0
#: Retry backoff of a deferred stale recovery (seconds).
RETRY_BACKOFF_START_S = FTS_RETRY_BACKOFF_START_S
RETRY_BACKOFF_MAX_S = 3600.0
#: A retry waits at most this long for the write lock (a tick must stay short).
RETRY_LOCK_PATIENCE_S = 1.0
#: Injectable monotonic clock of the retry backoff.
clock: Callable[[], float] = time.monotonic


def _state(backend: Any) -> FtsMergeState:
    """This module's bookkeeping of the handle (a field of the backend's handle state)."""
    return backend.state.fts_merge


def _guard(backend: Any) -> None:
    """Raise the handle's sticky error (quarantined / replaced / split WAL), as writes do."""
    guard = getattr(backend, "guard", None)
    if guard is not None:
        guard()


def _queryable(backend: Any, tables: tuple[str, ...]) -> list[str]:
    """The tables of ``tables`` this handle can query (a ``DatabaseError`` other than a lock
    conflict ⇒ absent; a lock waits, then ``DatabaseBusyError``: a busy file is no missing
    index); the CJK-bigram index not while ``cjk_bigram_stale`` marks it damaged."""

    def usable(table: str) -> Callable[[Connection], bool]:
        def probe(conn: Connection) -> bool:
            try:
                conn.exec_driver_sql(q.probe(table)).fetchall()
            except sa.exc.DatabaseError as exc:
                if is_busy(exc):
                    raise
                return False
            return not (table == q.CJK_FTS and conn.exec_driver_sql(q.READ_CJK_STALE).first())
        return probe

    return [table for table in tables if backend.read_on_writer(usable(table))]


class _CjkIndexError(Exception):
    """An error of the CJK-bigram index, kept out of the backend's FTS fail-open (which
    concerns the message indexes: a damaged bigram index must not mark them stale)."""


def _on_table(table: str, fn: Callable[[Connection], Any]) -> Callable[[Connection], Any]:
    """``fn`` for the write transaction; errors of the CJK-bigram index become
    :class:`_CjkIndexError` (its own drain marks it stale, docs/sessions-storage.md §3.9.2)."""
    if table != q.CJK_FTS:
        return fn

    def wrapped(conn: Connection) -> Any:
        try:
            return fn(conn)
        except sa.exc.DBAPIError as exc:
            if is_busy(exc):
                raise
            raise _CjkIndexError(f"{table}: {exc.orig}") from exc

    return wrapped


# ---------------------------------------------------------------------------------------
# optimize
# ---------------------------------------------------------------------------------------


def optimize_fts(store: Any) -> int:
    """Optimize each queryable FTS index, paced (PostgreSQL: ``gin_clean_pending_list`` per
    GIN index of ``messages``); returns how many were optimized. A per-index
    ``OperationalError`` is a WARNING; the handle's sticky error (quarantined, replaced) is
    raised.

    SQLite: the index is merged into one segment as FTS5's ``'optimize'`` would, but in
    steps (docs/sessions-storage.md §3.7): one ``'merge'`` of ``-OPTIMIZE_STEP_PAGES``
    (every segment to one level, the merge started), then ``'merge'`` of
    ``+OPTIMIZE_STEP_PAGES`` until a command changes fewer than 2 rows, each its own write
    transaction, with :func:`~hermes_data.sessions.backends.locks.pause_between_steps`
    between them, so no step holds the write lock for more than one bounded merge."""
    backend = store.backend
    if backend.dialect == "postgresql":
        return _pg_optimize(backend)
    _guard(backend)
    done = 0
    for table in _queryable(backend, q.MAINTAINED_FTS_TABLES):
        try:
            steps = _optimize_paced(backend, table)
            done += 1
            log.debug("%s: %s optimized in %d merge steps", backend.path, table, steps)
        except sa.exc.OperationalError as exc:
            log.warning("%s: 'optimize' of %s failed: %s", backend.path, table, exc.orig)
        except _CjkIndexError as exc:
            log.warning("%s: 'optimize' of the CJK-bigram index failed: %s", backend.path, exc)
    return done


def _optimize_paced(backend: Any, table: str) -> int:
    """The steps of one index's paced optimize; returns how many ran. Only the first merge
    is negative: FTS5 restarts a merge when a later negative one finds new segments, while
    positive ones run the started merge to its end (and, with ``usermerge`` 2, merge what
    concurrent writers add meanwhile)."""
    pages = -OPTIMIZE_STEP_PAGES
    for step in range(1, OPTIMIZE_MAX_STEPS + 1):
        started = time.monotonic()
        changed = backend.write(_on_table(table, partial(_merge_once, table=table,
                                                         pages=pages)))
        if changed < 2:
            return step
        pages = OPTIMIZE_STEP_PAGES
        pause_between_steps(started, min_pause_s=OPTIMIZE_PAUSE_MIN_S,
                            factor=OPTIMIZE_PAUSE_FACTOR)
    log.warning("%s: optimize of %s stopped after %d merge steps with work left (writers "
                "kept adding segments); the next optimize continues it", backend.path, table,
                OPTIMIZE_MAX_STEPS)
    return OPTIMIZE_MAX_STEPS


def _pg_optimize(backend: Any) -> int:
    def work(conn: Connection) -> int:
        n = 0
        for _name, oid in conn.exec_driver_sql(q.PG_MESSAGES_GIN_INDEXES).fetchall():
            conn.exec_driver_sql(q.PG_GIN_CLEAN_PENDING_LIST, (int(oid),))
            n += 1
        return n

    return int(backend.write(work))


# ---------------------------------------------------------------------------------------
# rebuild
# ---------------------------------------------------------------------------------------


def rebuild_fts(store: Any) -> int:
    """Rebuild the base and trigram indexes in one transaction under the admission lock and
    delete the ``fts_rebuild_*`` markers (legacy inline layout: refill from ``messages``);
    returns how many indexes were rebuilt — 0 when the admission lock was not obtained within
    :data:`REBUILD_ADMISSION_WAIT_S` (WARNING; nothing changed) or without FTS. PostgreSQL:
    ``REINDEX INDEX`` of the search GIN indexes under the maintenance advisory lock."""
    backend = store.backend
    if backend.dialect == "postgresql":
        return _pg_rebuild(backend)
    _guard(backend)
    tables = _queryable(backend, q.REBUILT_FTS_TABLES)
    if not tables:
        return 0
    with opening.rebuild_admission(backend.path, wait_s=REBUILD_ADMISSION_WAIT_S) as admitted:
        if not admitted:
            log.warning("%s: rebuild_fts: another process holds %s.fts_rebuild.lock; nothing "
                        "rebuilt, retry later", backend.path, backend.path)
            return 0

        def work(conn: Connection) -> int:
            layout = opening.read_fts_state(conn).layout
            for table in tables:
                if layout == "legacy":
                    for stmt in fts_ddl.legacy_repopulate(table):
                        conn.execute(stmt)
                else:
                    conn.exec_driver_sql(q.rebuild(table))
            conn.exec_driver_sql(q.CLEAR_REBUILD_MARKERS)
            return len(tables)

        return int(backend.write(work))


def _pg_rebuild(backend: Any) -> int:
    lock = backend.maintenance_lock()
    try:
        if not lock.acquire():
            log.warning("%s: rebuild_fts: the maintenance advisory lock is held by another "
                        "session; nothing rebuilt", backend.path)
            return 0
        try:
            with backend.engine.connect() as conn:
                conn = conn.execution_options(isolation_level="AUTOCOMMIT")
                names = [r[0] for r in conn.exec_driver_sql(q.PG_MESSAGES_GIN_INDEXES)]
                wanted = [n for n in names if n in q.PG_SEARCH_GIN_INDEXES]
                for name in wanted:
                    conn.exec_driver_sql(q.pg_reindex(name))
            index_cache.forget(backend.engine)  # re-read the index set at the next search
            return len(wanted)
        finally:
            lock.release()
    finally:
        lock.close()


# ---------------------------------------------------------------------------------------
# merges
# ---------------------------------------------------------------------------------------


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {value!r}")
    if value <= 0:
        raise ValueError(f"{name} must be positive, not {value}")
    return value


def merge_fts(store: Any, max_pages: int = MERGE_PAGES, max_commands: int = MERGE_COMMANDS) -> int:
    """Incremental merges of each present FTS index (see the module docstring); returns the
    number of ``'merge'`` commands run. ``max_pages`` and ``max_commands`` are positive ints
    (``TypeError`` / ``ValueError`` otherwise). PostgreSQL: 0."""
    _positive_int("max_pages", max_pages)
    _positive_int("max_commands", max_commands)
    backend = store.backend
    if backend.dialect != "sqlite":
        return 0
    _guard(backend)
    st = _state(backend)
    ran = 0
    for table in _queryable(backend, q.MAINTAINED_FTS_TABLES):
        try:
            ran += _merge_table(backend, st, table, max_pages, max_commands)
        except _CjkIndexError as exc:
            log.warning("%s: merging the CJK-bigram index failed: %s", backend.path, exc)
    return ran


def _merge_table(backend: Any, st: FtsMergeState, table: str, pages: int, commands: int) -> int:
    if table not in st.usermerge_checked:
        if not _zero_patience(backend, _on_table(table, partial(_ensure_usermerge, table=table))):
            return 0  # busy: this index's pass ends here
        st.usermerge_checked.add(table)
    ran = 0
    for _ in range(commands):
        changed = _zero_patience(backend, _on_table(table, partial(_merge_once, table=table,
                                                                   pages=pages)))
        if changed is None:
            break
        ran += 1
        if changed < 2:
            break
    return ran


def _ensure_usermerge(conn: Connection, table: str) -> bool:
    row = conn.exec_driver_sql(q.read_usermerge(table)).first()
    if row is None or str(row[0]) != str(USERMERGE):
        conn.exec_driver_sql(q.set_usermerge(table), (USERMERGE,))
    return True


def _merge_once(conn: Connection, table: str, pages: int) -> int:
    before = int(conn.exec_driver_sql(q.TOTAL_CHANGES).scalar() or 0)
    conn.exec_driver_sql(q.merge(table), (pages,))
    return int(conn.exec_driver_sql(q.TOTAL_CHANGES).scalar() or 0) - before


def _zero_patience(backend: Any, fn: Callable[[Connection], Any]) -> Any:
    """``fn`` in one ``BEGIN IMMEDIATE`` that never waits for the write lock: SQLite's busy
    handler is set to 0 on the writer for the attempt and the retry budget is 0. Busy ⇒
    None. Holds the handle's lock so no other thread's write runs without its patience."""
    with backend._lock:
        raw = backend._raw
        if raw is None:
            return backend.write(fn, patience=0.0)  # closed: the backend's own error
        previous = int(raw.execute(q.BUSY_TIMEOUT).fetchone()[0])
        raw.execute(q.set_busy_timeout(0))
        try:
            return backend.write(fn, patience=0.0)
        except DatabaseBusyError:
            return None
        finally:
            raw.execute(q.set_busy_timeout(previous))


def _cadence_skips(backend: Any) -> bool:
    if backend.dialect != "sqlite" or backend.read_only or backend.quarantined:
        return True
    if getattr(backend, "_sticky", None) is not None:
        return True  # replaced / split WAL
    if not any(backend.fts_available.values()):
        return True
    with backend.reading_on_writer() as conn:
        return conn.exec_driver_sql(q.READ_FTS_STALE).first() is not None


def after_append(store: Any) -> None:
    """The post-commit merge cadence of a transcript write (never raises; see the module
    docstring)."""
    backend = store.backend
    st = _state(backend)
    st.writes += 1
    if st.writes % MERGE_EVERY:
        return
    try:
        if _cadence_skips(backend):
            return
        merge_fts(store, CADENCE_PAGES, MERGE_COMMANDS)
    except Exception as exc:  # noqa: BLE001 - SystemError included: the write already committed
        log.info("%s: post-commit FTS merge skipped: %s: %s", getattr(backend, "path", "?"),
                 type(exc).__name__, exc)


# ---------------------------------------------------------------------------------------
# retry of a deferred stale recovery (docs/sessions-storage.md §3.8)
# ---------------------------------------------------------------------------------------


def retry_deferred_fts_recovery(store: Any) -> bool:
    """Retry core stale-FTS recovery on a long-lived writable handle (a host's tick, never a
    write or search path): at most once per backoff window (60 s doubling to 3,600 s, reset
    on success), admission timeout 0. True only when the index was rebuilt; never raises.
    PostgreSQL, read-only, quarantined or replaced handles, or no ``fts_stale``: False."""
    try:
        backend = store.backend
        if backend.dialect != "sqlite" or backend.read_only or backend.quarantined \
                or getattr(backend, "_sticky", None) is not None:
            return False
        st = _state(backend)
        now = clock()
        if st.retry_after is not None and now < st.retry_after:
            return False
        with backend.reading_on_writer() as conn:
            if conn.exec_driver_sql(q.READ_FTS_STALE).first() is None:
                st.retry_after, st.backoff = None, RETRY_BACKOFF_START_S
                return False
        done: list[str] = []

        def work(conn: Connection) -> bool:
            # The open's core recovery, deferral included, under the handle's open options.
            opening.apply_fts_checks(conn, done, backend.state.options)
            return conn.exec_driver_sql(q.READ_FTS_STALE).first() is None

        rebuilt = bool(backend.write(work, patience=RETRY_LOCK_PATIENCE_S))
        if rebuilt:
            st.retry_after, st.backoff = None, RETRY_BACKOFF_START_S
            with backend._lock:
                if backend._raw is not None:
                    backend.fts_available = opening.probe_fts_tables(backend._raw)
            log.info("%s: deferred FTS recovery succeeded: %s", backend.path, "; ".join(done))
            return True
        st.retry_after = clock() + st.backoff
        st.backoff = min(st.backoff * 2, RETRY_BACKOFF_MAX_S)
        return False
    except Exception as exc:  # noqa: BLE001 - a host tick never fails on maintenance
        log.info("deferred FTS recovery retry failed: %s: %s", type(exc).__name__, exc)
        try:
            st = _state(store.backend)
            st.retry_after = clock() + st.backoff
            st.backoff = min(st.backoff * 2, RETRY_BACKOFF_MAX_S)
        except Exception:  # noqa: BLE001
            pass
        return False


__all__ = ["CADENCE_PAGES", "MERGE_COMMANDS", "MERGE_EVERY", "MERGE_PAGES", "REBUILD_ADMISSION_WAIT_S",
           "RETRY_BACKOFF_MAX_S", "RETRY_BACKOFF_START_S", "USERMERGE", "after_append",
           "merge_fts", "optimize_fts", "rebuild_fts", "retry_deferred_fts_recovery"]
