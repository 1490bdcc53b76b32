"""The legacy FTS layout migration, ``optimize-storage`` (docs/sessions-storage.md §3.6).

An upstream ``state.db`` written before its v23 keeps both FTS tables *inline*: each holds
its own copy of every message (a concatenation of content, tool name and tool calls), tool
rows and every source included. Storage layout 1 (a trigram table declaring ``tool_calls``)
indexes the repetitive tool-call JSON three characters at a time. The core serves both as
they are (docs/sessions.md §2.7); this module moves a file to the current external-content
layout (docs/sessions.md §2.6) — foreground, resumable, without ever holding the write lock for long:

1. **Bookkeeping** (one transaction): repairs a high water without progress (the triggers
   may have indexed rows above the old mark: the indexes are emptied with ``'delete-all'``
   and the whole table becomes the window) and seeds markers over an empty current-layout
   index. Markers are never invented on a legacy file.
2. **Demote** (one ``BEGIN IMMEDIATE`` under ``<db>.fts_rebuild.lock``): the six triggers
   and the source views are dropped, the two virtual tables are forgotten by editing the
   catalogue (``writable_schema``), their shadow tables are renamed by explicit name to
   ``fts_v22_trash_<name>`` — no page of the old index is read or written — and the current
   objects are created with the window markers ``(0, MAX(id)]`` (core ``GATE``: the new
   triggers index every newer row at once, the backfill the older ones). A crash before
   ``COMMIT`` leaves the legacy layout as it was. A build without ``writable_schema =
   RESET`` (< 3.33) takes upstream's two-step shape: markers first and the tables forgotten
   with a schema-cookie bump, then the renames and the new objects in a second transaction
   (a crash between them still opens: :mod:`.fts_shadow`).
3. **Steps**, with a pause of ``max(0.2 s, 4 × step time)`` between them (≤ 20 % duty):
   :func:`fts_rebuild_step` (500 ids per transaction; the re-read of the progress under the
   write lock is the claim, so concurrent runners interleave), a CJK-bigram step, and one
   trash chunk (500 rows after a persisted key marker, in key order: O(n) in total,
   ``WITHOUT ROWID`` compound keys included).
4. The checks, core ``vacuum()`` (PASSIVE checkpoints only), and the **settle**:
   ``fts_storage_version='3'`` in one transaction that re-checks everything first.

While the window is open, search adds the rows the index does not hold yet through LIKE
(the gap supplement, :mod:`.fts_gap`). PostgreSQL has no such layouts:
:func:`optimize_fts_storage` there is ``optimize_fts()`` plus the core ``vacuum()``.

Every pause, chunk size, patience, clock, ``disk_usage`` and a fault-injection hook
(:data:`fault_point`) are module attributes so tests can zero or replace them.
"""

from __future__ import annotations

import json
import logging
import shutil
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from hermes_data.errors import DatabaseBusyError
from hermes_data.sessions.backends.locks import pause_between_steps
from hermes_data.sessions.storage.fts import shadow as fts_shadow
from hermes_data.sessions.storage import opening
from hermes_data.sessions.errors import StateDbCorruptError, StateDbReplacedError
from hermes_data.sessions.rows import FtsRebuildStatus
from hermes_data.sessions.storage.fts import layout_sql as q
from hermes_data.sessions.sql.ddl import squash

log = logging.getLogger("hermes_data.sessions.storage.fts.layout")

#: Message ids one backfill transaction covers (an id bound: deleted ids never shrink it).
CHUNK_IDS = 500
#: Trash rows one teardown transaction drains.
TRASH_CHUNK_ROWS = 500
#: The finish re-checks ``(high water − margin, high water + margin]`` for missing documents.
FINISH_MARGIN = 1000
#: Pause between steps: ``max(PAUSE_MIN_S, PAUSE_FACTOR × step time)`` (tests zero both).
PAUSE_MIN_S = 0.2
PAUSE_FACTOR = 4.0
#: Write-lock patience of one step (busy ⇒ "work remains", the loop pauses and retries).
STEP_PATIENCE_S = 2.0
#: Admission-lock wait of the demote.
ADMISSION_WAIT_S = 120.0
#: Headroom a run needs beyond the file's logical size: max(256 MiB, 2 % of the volume).
DISK_HEADROOM_BYTES = 256 * 1024 * 1024
DISK_HEADROOM_FRACTION = 0.02

#: ``PRAGMA writable_schema = RESET`` usable (None: by SQLite version, see :func:`reset_supported`).
RESET_SUPPORTED: bool | None = None

#: Injectable clock, sleep and free-space probe.
monotonic: Callable[[], float] = time.monotonic
sleep: Callable[[float], None] = time.sleep
disk_usage: Callable[[Any], Any] = shutil.disk_usage
#: Test seam: called with a point name (``"demote:before-commit"``, ``"step:after"``,
#: ``"trash:before-commit"``, …) — a test process may ``os._exit`` there.
fault_point: Callable[[str], None] | None = None


def _fault(name: str) -> None:
    if fault_point is not None:
        fault_point(name)


@dataclass(frozen=True)
class OptimizeProgress:
    """One progress report of :func:`optimize_fts_storage`; ``phase`` is ``backfill``,
    ``teardown``, ``vacuum`` or ``done``."""

    phase: str
    percent: int
    indexed: int
    total: int


@dataclass(frozen=True)
class OptimizeStorageResult:
    """What :func:`optimize_fts_storage` did: ``ok`` (settled at storage version 3), the
    ``reason`` when not (``read_only``, ``fts5_unavailable``, ``fts_stale``,
    ``insufficient_disk``, ``busy``, ``backfill_incomplete``, ``teardown_incomplete``), and
    whether the VACUUM ran."""

    ok: bool
    reason: str | None
    vacuumed: bool


# ---------------------------------------------------------------------------------------
# Reading the state
# ---------------------------------------------------------------------------------------


def _meta(conn: Connection, stmt: str = q.READ_STORAGE_META) -> dict[str, str]:
    return {k: v for k, v in conn.exec_driver_sql(stmt).fetchall()}


def _int(value: str | None, default: int = 0) -> int:
    try:
        return int(value) if value is not None else default
    except ValueError:
        return default


def upgrade_needed(state: opening.FtsState) -> bool:
    """The file holds a layout the migration replaces: legacy inline (``messages_fts``
    without ``tool_name``, or such a trigram table) or storage layout 1 (a trigram table
    declaring ``tool_calls``)."""
    if state.layout == "legacy":
        return True
    tri = state.objects.get("messages_fts_trigram")
    if tri is None:
        return False
    text = squash(tri, lower=True)
    return "tool_name" not in text or "tool_calls" in text


def _index_empty(conn: Connection, state: opening.FtsState) -> bool:
    """A current-layout base index without any document while ``messages`` has rows."""
    return (state.layout == "current" and state.messages_nonempty
            and conn.exec_driver_sql(q.BASE_DOCSIZE_NONEMPTY).first() is None)


def _trash_left(conn: Connection) -> bool:
    return conn.exec_driver_sql(q.TRASH_EXISTS).first() is not None


def _sqlite_writable(store: Any) -> bool:
    backend = store.backend
    return backend.dialect == "sqlite" and not backend.read_only


def fts_optimize_available(store: Any) -> bool:
    """Would ``optimize-storage`` do anything here? False on PostgreSQL, read-only handles,
    without FTS5 and while ``fts_stale`` is set; else True for a legacy inline or layout-1
    file, an open backfill window, trash left to drain, an empty base index beside messages,
    or pending CJK-bigram work (its backfill or stale flag)."""
    if not _sqlite_writable(store):
        return False

    def read(conn: Connection) -> bool:
        if not opening.capabilities(conn).fts5:
            return False
        meta = _meta(conn)
        if "fts_stale" in meta:
            return False
        state = opening.read_fts_state(conn)
        return (upgrade_needed(state) or q.HIGH_WATER_KEY in meta or _trash_left(conn)
                or _index_empty(conn, state) or any(k in meta for k in q.CJK_WORK_KEYS))

    return bool(store.backend.read(read))


def _status(meta: dict[str, str]) -> FtsRebuildStatus | None:
    if q.HIGH_WATER_KEY not in meta:
        return None
    total = _int(meta[q.HIGH_WATER_KEY])
    if total <= 0:
        return None
    indexed = max(0, _int(meta.get(q.PROGRESS_KEY)))
    return FtsRebuildStatus.window(indexed, total)


def fts_rebuild_status(store: Any) -> FtsRebuildStatus | None:
    """The backfill window, or ``None`` without a high water (or one ≤ 0) and on
    PostgreSQL; ``percent`` = min(100, 100 × indexed // total)."""
    if store.backend.dialect != "sqlite":
        return None
    return _status(store.backend.read(lambda c: _meta(c, q.READ_GATE)))


# ---------------------------------------------------------------------------------------
# The backfill step and its finish
# ---------------------------------------------------------------------------------------


def _has_table(tx: Connection, name: str) -> bool:
    return tx.exec_driver_sql(q.TABLE_EXISTS, (name,)).first() is not None


def _finish(tx: Connection, high: int) -> None:
    """Index the rows near the high water that have no document yet (both indexes), then
    delete both markers — one transaction, idempotent."""
    lo, hi = high - FINISH_MARGIN, high + FINISH_MARGIN
    if high > 0 and _has_table(tx, "messages_fts_docsize"):
        tx.exec_driver_sql(q.FINISH_BASE, (lo, hi))
        if _has_table(tx, "messages_fts_trigram_docsize"):
            tx.exec_driver_sql(q.FINISH_TRIGRAM, (lo, hi))
    tx.exec_driver_sql(q.CLEAR_REBUILD_MARKERS)
    log.info("FTS backfill finished (high water %s): markers deleted", high)


def _rebuild_step(tx: Connection) -> bool:
    """One backfill chunk inside ``BEGIN IMMEDIATE``; True while work remains."""
    meta = _meta(tx, q.READ_GATE)  # read under the write lock: this is the claim
    if q.HIGH_WATER_KEY not in meta:
        return False
    high = _int(meta[q.HIGH_WATER_KEY])
    progress = _int(meta.get(q.PROGRESS_KEY), -1)
    if high <= 0 or progress >= high:
        _finish(tx, high)
        return False
    progress = max(progress, 0)
    upto = min(progress + CHUNK_IDS, high)
    tx.exec_driver_sql(q.BACKFILL_BASE, (progress, upto))
    if _has_table(tx, "messages_fts_trigram"):
        tx.exec_driver_sql(q.BACKFILL_TRIGRAM, (progress, upto))
    tx.exec_driver_sql(q.SET_META, (q.PROGRESS_KEY, str(upto)))
    _fault("step:before-commit")
    return True


def fts_rebuild_step(store: Any) -> bool:
    """Index the next 500 ids of the backfill window (one short write transaction); at its
    end, the finish. True while work remains (also when the write lock was busy); False
    without a window, on PostgreSQL, read-only handles or without FTS5."""
    if not _sqlite_writable(store):
        return False
    backend = store.backend
    backend.guard()

    def probe(conn: Connection) -> bool:
        return (opening.capabilities(conn).fts5
                and q.HIGH_WATER_KEY in _meta(conn, q.READ_GATE))

    if not backend.read(probe):
        return False
    try:
        more = bool(backend.write(_rebuild_step, patience=STEP_PATIENCE_S))
    except DatabaseBusyError:
        return True
    _fault("step:after")
    return more


# ---------------------------------------------------------------------------------------
# Bookkeeping and the demote
# ---------------------------------------------------------------------------------------


def _set_window(tx: Connection) -> int:
    high = int(tx.exec_driver_sql(q.MAX_MESSAGE_ID).scalar() or 0)
    tx.exec_driver_sql(q.SET_META, (q.HIGH_WATER_KEY, str(high)))
    tx.exec_driver_sql(q.SET_META, (q.PROGRESS_KEY, "0"))
    return high


def _external(ddl: str | None) -> bool:
    return "content=" in squash(ddl, lower=True).replace(" ", "")


def _bookkeeping(tx: Connection) -> list[str]:
    """docs/sessions-storage.md §3.6 step 2, one transaction: repair a high water without progress, seed markers
    over an empty current-layout index. Returns what it did."""
    done: list[str] = []
    meta = _meta(tx)
    state = opening.read_fts_state(tx)
    if q.HIGH_WATER_KEY in meta and q.PROGRESS_KEY not in meta:
        if state.layout != "current":
            tx.exec_driver_sql(q.CLEAR_REBUILD_MARKERS)  # a legacy layout never reads them
            done.append("removed a stray high water from a legacy layout")
            return done
        if tx.exec_driver_sql(q.BASE_DOCSIZE_NONEMPTY).first() is not None:
            for table, stmt in q.DELETE_ALL.items():
                if _external(state.objects.get(table)):
                    tx.exec_driver_sql(stmt)
        high = _set_window(tx)
        done.append(f"high water without progress: indexes emptied, backfill of (0, {high}]")
    elif (q.HIGH_WATER_KEY not in meta and not upgrade_needed(state)
          and _index_empty(tx, state)):
        tx.exec_driver_sql(q.DELETE_META, (q.STORAGE_VERSION_KEY,))
        high = _set_window(tx)
        done.append(f"empty base index: backfill of (0, {high}] seeded")
    elif q.HIGH_WATER_KEY in meta and state.layout == "legacy":
        tx.exec_driver_sql(q.CLEAR_REBUILD_MARKERS)
        done.append("removed stray markers from a legacy layout")
    return done


def reset_supported() -> bool:
    """``PRAGMA writable_schema = RESET`` re-reads the catalogue inside the transaction
    (SQLite ≥ 3.33); :data:`RESET_SUPPORTED` overrides the version check (tests)."""
    if RESET_SUPPORTED is not None:
        return RESET_SUPPORTED
    return sqlite3.sqlite_version_info >= (3, 33, 0)


def _forget_tables(tx: Connection, reset: bool) -> None:
    """Drop the six triggers and the source views, and delete the two virtual tables'
    catalogue rows (their shadow tables stay). Without RESET the schema cookie is bumped so
    every connection, this one included, re-reads the catalogue after the commit."""
    for stmt in q.DROP_TRIGGERS + q.DROP_VIEWS:
        tx.exec_driver_sql(stmt)
    cookie = int(tx.exec_driver_sql(q.SCHEMA_COOKIE).scalar() or 0)
    tx.exec_driver_sql(q.WRITABLE_SCHEMA_ON)
    tx.exec_driver_sql(q.DELETE_VTAB_ROWS)
    if reset:
        tx.exec_driver_sql(q.WRITABLE_SCHEMA_RESET)
    tx.exec_driver_sql(q.WRITABLE_SCHEMA_OFF)
    if not reset:
        tx.exec_driver_sql(q.set_schema_cookie(cookie + 1))


def _demote_legacy_fts_to_trash(tx: Connection, trigram: bool) -> tuple[str | None, bool]:
    """docs/sessions-storage.md §3.6 step 3 inside one ``BEGIN IMMEDIATE`` (re-read under the lock): (what it did —
    ``None`` when another process already did it —, whether a second transaction must
    follow: the two-step shape of a build without ``writable_schema = RESET``)."""
    meta = _meta(tx)
    state = opening.read_fts_state(tx)
    if q.HIGH_WATER_KEY in meta:  # markers present: create what is missing
        moved = fts_shadow.demote_orphan_shadows(tx)
        created = opening.create_current_layout(tx, trigram=trigram)
        if not (moved or created):
            return None, False
        return (f"moved {len(moved)} orphan shadow tables to trash; created missing FTS "
                f"objects: {', '.join(created) or 'none'}"), False
    if not upgrade_needed(state):
        return None, False
    if not reset_supported():  # upstream's two-step shape: markers first, then forget
        high = _set_window(tx)
        tx.exec_driver_sql(q.DELETE_META, (q.STORAGE_VERSION_KEY,))
        _forget_tables(tx, reset=False)
        return f"forgot the {state.layout} FTS tables; backfill of (0, {high}]", True
    _forget_tables(tx, reset=True)
    moved = fts_shadow.demote_orphan_shadows(tx)
    opening.create_current_layout(tx, trigram=trigram)
    tx.exec_driver_sql(q.DELETE_META, (q.STORAGE_VERSION_KEY,))
    high = _set_window(tx)
    _fault("demote:before-commit")
    return (f"demoted the {state.layout} FTS layout ({len(moved)} shadow tables to trash); "
            f"backfill of (0, {high}]"), False


def _demote_under_lock(store: Any, trigram: bool) -> tuple[bool, list[str]]:
    """(admitted, what the demote did)."""
    with opening.rebuild_admission(store.backend.path, ADMISSION_WAIT_S) as admitted:
        if not admitted:
            return False, []
        done, again = store.backend.write(lambda tx: _demote_legacy_fts_to_trash(tx, trigram))
        out = [done] if done else []
        if again:  # the second step: shadow tables to trash, current objects
            _fault("demote:between")
            more, _ = store.backend.write(lambda tx: _demote_legacy_fts_to_trash(tx, trigram))
            out += [more] if more else []
        return True, out


# ---------------------------------------------------------------------------------------
# The trash teardown
# ---------------------------------------------------------------------------------------


def _encode_key(values: tuple[Any, ...]) -> str:
    """The teardown marker: a JSON array of the last drained key, blobs as ``{"blob": hex}``."""
    return json.dumps([{"blob": bytes(v).hex()} if isinstance(v, (bytes, bytearray, memoryview))
                       else v for v in values])


def _decode_key(text: str | None, width: int) -> tuple[Any, ...] | None:
    if text is None:
        return None
    try:
        raw = json.loads(text)
    except ValueError:
        return None
    if not isinstance(raw, list) or len(raw) != width:
        return None
    return tuple(bytes.fromhex(v["blob"]) if isinstance(v, dict) and "blob" in v else v
                 for v in raw)


def _key_columns(tx: Connection, name: str, ddl: str | None) -> list[str]:
    """``["rowid"]`` for a rowid table; the primary-key columns in key order for a
    ``WITHOUT ROWID`` table."""
    if "without rowid" not in squash(ddl, lower=True):
        return ["rowid"]
    info = tx.exec_driver_sql(q.table_info(name)).fetchall()
    return [r[1] for r in sorted((r for r in info if r[5]), key=lambda r: r[5])]


def _marker_key(name: str) -> str:
    return f"{q.TEARDOWN_PREFIX}{name}{q.TEARDOWN_SUFFIX}"


def _trash_chunk(tx: Connection) -> tuple[bool, int]:
    """One teardown chunk of the first trash table by name: (work remains, rows drained)."""
    first = tx.exec_driver_sql(q.TRASH_TABLES).first()
    if first is None:
        return False, 0
    name, ddl = first
    keys = _key_columns(tx, name, ddl)
    marker = _marker_key(name)
    row = tx.exec_driver_sql(q.GET_META, (marker,)).first()
    after = _decode_key(row[0] if row else None, len(keys))
    chunk = tx.exec_driver_sql(q.trash_chunk_keys(name, keys, after is not None),
                               (*(after or ()), TRASH_CHUNK_ROWS)).fetchall()
    if not chunk:
        tx.exec_driver_sql(q.drop_trash(name))
        tx.exec_driver_sql(q.DELETE_META, (marker,))
        return True, 0
    last = tuple(chunk[-1])
    tx.exec_driver_sql(q.trash_delete_range(name, keys, after is not None),
                       (*(after or ()), *last))
    tx.exec_driver_sql(q.SET_META, (marker, _encode_key(last)))
    _fault("trash:before-commit")
    return True, len(chunk)


def _fts_teardown_trash_step(store: Any) -> tuple[bool, int]:
    try:
        return store.backend.write(_trash_chunk, patience=STEP_PATIENCE_S)
    except DatabaseBusyError:
        return True, 0


# ---------------------------------------------------------------------------------------
# optimize_fts_storage
# ---------------------------------------------------------------------------------------

#: The errors a VACUUM failure may not swallow (the handle is unusable, not the VACUUM).
_STICKY = (StateDbCorruptError, StateDbReplacedError)


def _report(progress_cb: Callable[[OptimizeProgress], None] | None, phase: str, percent: int,
            indexed: int, total: int) -> None:
    if progress_cb is not None:
        progress_cb(OptimizeProgress(phase, max(0, min(100, percent)), indexed, total))


def _disk_refusal(store: Any, vacuum: bool) -> bool:
    """Free space < logical size × (3 with VACUUM, else 1) + max(256 MiB, 2 % of the volume)."""
    size = int(store.backend.logical_size_bytes())
    usage = disk_usage(Path(store.backend.path).parent)
    need = size * (3 if vacuum else 1) + max(DISK_HEADROOM_BYTES,
                                             int(usage.total * DISK_HEADROOM_FRACTION))
    if usage.free < need:
        log.warning("%s: optimize-storage refused: %d bytes free, %d needed (logical size %d; "
                    "pass force=True to run anyway)", store.backend.path, usage.free, need, size)
        return True
    return False


def _incomplete(conn: Connection) -> str | None:
    """docs/sessions-storage.md §3.6 step 5: what is left (``backfill_incomplete`` / ``teardown_incomplete``)."""
    meta = _meta(conn)
    state = opening.read_fts_state(conn)
    if q.HIGH_WATER_KEY in meta or _index_empty(conn, state) or upgrade_needed(state):
        return "backfill_incomplete"
    if _trash_left(conn):
        return "teardown_incomplete"
    return None


def _optimize_settle(tx: Connection) -> str | None:
    """docs/sessions-storage.md §3.6 step 7 in one transaction: re-check (a concurrent process), then storage version
    3 and the upstream advert and orphan teardown keys deleted. Returns a refusal reason."""
    reason = _incomplete(tx)
    if reason is not None:
        return reason
    tx.exec_driver_sql(q.SET_META, (q.STORAGE_VERSION_KEY, "3"))
    tx.exec_driver_sql(q.DELETE_META, (q.ADVERT_KEY,))
    for (key,) in tx.exec_driver_sql(q.TEARDOWN_KEYS).fetchall():
        tx.exec_driver_sql(q.DELETE_META, (key,))
    return None


def _pause(started: float) -> None:
    pause_between_steps(started, min_pause_s=PAUSE_MIN_S, factor=PAUSE_FACTOR,
                        clock=monotonic, sleep=sleep)


def _run_steps(store: Any, progress_cb: Callable[[OptimizeProgress], None] | None) -> None:
    """docs/sessions-storage.md §3.6 step 4: backfill, CJK-bigram and trash steps, paced, until none has work."""
    trash_total: int | None = None
    drained = 0
    while True:
        started = monotonic()
        more = fts_rebuild_step(store)
        try:
            cjk_more = bool(store.cjk_index_step())
        except DatabaseBusyError:
            cjk_more = True  # busy: the next round retries
        trash_more, rows = _fts_teardown_trash_step(store)
        drained += rows
        status = fts_rebuild_status(store)
        if status is not None:
            _report(progress_cb, "backfill", status.percent, status.indexed, status.total)
        elif trash_more:
            if trash_total is None:
                trash_total = drained + store.backend.read(_trash_rows)
            _report(progress_cb, "teardown", 100 * drained // max(1, trash_total), drained,
                    trash_total)
        if not (more or cjk_more or trash_more):
            return
        _pause(started)


def _trash_rows(conn: Connection) -> int:
    """Rows left in every trash table (counted once, for the teardown's percentage)."""
    names = [r[0] for r in conn.exec_driver_sql(q.TRASH_TABLES).fetchall()]
    return sum(int(conn.exec_driver_sql(q.trash_count(n)).scalar() or 0) for n in names)


def _postgresql(store: Any, progress_cb: Callable[[OptimizeProgress], None] | None
                ) -> OptimizeStorageResult:
    """docs/sessions-storage.md §3.10: ``optimize_fts()`` (when this build has it) plus the core ``vacuum()``."""
    optimize = getattr(store, "optimize_fts", None)
    if callable(optimize):
        optimize()
    _report(progress_cb, "vacuum", 0, 0, 0)
    store.backend.vacuum()
    _report(progress_cb, "done", 100, 0, 0)
    return OptimizeStorageResult(True, None, True)


def _recover(store: Any) -> bool:
    """One core recovery attempt of a stale FTS (and a stale CJK-bigram) index; True when
    ``fts_stale`` is gone afterwards."""
    options = store.backend.state.options  # the handle's sessions.cjk_index and reaping
    store.backend.write(lambda tx: opening.apply_fts_checks(tx, None, options))
    return "fts_stale" not in store.backend.read(_meta)


def optimize_fts_storage(store: Any, *,
                         progress_cb: Callable[[OptimizeProgress], None] | None = None,
                         vacuum: bool = True, force: bool = False) -> OptimizeStorageResult:
    """Move the file to the current FTS layout (docs/sessions-storage.md §3.6; see the module docstring):
    bookkeeping, the one-transaction demote, the paced backfill / CJK / teardown steps, an
    optional VACUUM and the settle. Resumable after any crash; safe beside other processes
    (they keep writing and searching). ``progress_cb`` receives :class:`OptimizeProgress`.
    ``force`` skips the free-space refusal. Raises the handle's sticky error on quarantined
    or replaced handles, and :class:`~hermes_data.errors.CorruptDatabaseError` on a file
    ``PRAGMA quick_check`` finds damaged, before anything is written (issue 31); other
    refusals are results (``ok=False`` with a reason)."""
    backend = store.backend
    if backend.dialect != "sqlite":
        return _postgresql(store, progress_cb)
    if backend.read_only:
        return OptimizeStorageResult(False, "read_only", False)
    backend.guard()
    opening.refuse_if_corrupt(store)  # every step below writes; the VACUUM rewrites the file
    caps = backend.read(opening.capabilities)
    if not caps.fts5:
        return OptimizeStorageResult(False, "fts5_unavailable", False)
    meta = backend.read(_meta)
    if ("fts_stale" in meta or q.CJK_WORK_KEYS[1] in meta) and not _recover(store):
        return OptimizeStorageResult(False, "fts_stale", False)
    if not force and _disk_refusal(store, vacuum):
        return OptimizeStorageResult(False, "insufficient_disk", False)
    for done in backend.write(_bookkeeping):
        log.info("%s: %s", backend.path, done)
    for _attempt in range(2):  # a second pass only when an upgrade waited behind markers
        admitted, done = _demote_under_lock(store, caps.trigram)
        if not admitted:
            return OptimizeStorageResult(False, "busy", False)
        for line in done:
            log.info("%s: %s", backend.path, line)
        _run_steps(store, progress_cb)
        if not backend.read(lambda c: upgrade_needed(opening.read_fts_state(c))):
            break
    reason = backend.read(_incomplete)
    if reason is not None:
        return OptimizeStorageResult(False, reason, False)
    vacuumed = False
    if vacuum:
        _report(progress_cb, "vacuum", 0, 0, 0)
        try:
            backend.vacuum()
            vacuumed = True
        except _STICKY:
            raise
        except (sa.exc.DBAPIError, sqlite3.Error, DatabaseBusyError, OSError) as exc:
            log.warning("%s: VACUUM after optimize-storage failed (%s); not fatal",
                        backend.path, exc)
    reason = backend.write(_optimize_settle)
    if reason is not None:
        return OptimizeStorageResult(False, reason, vacuumed)
    _report(progress_cb, "done", 100, 0, 0)
    log.info("%s: FTS storage settled at version 3", backend.path)
    return OptimizeStorageResult(True, None, vacuumed)
