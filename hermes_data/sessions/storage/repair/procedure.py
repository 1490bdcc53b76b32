"""Malformed-schema repair of a SQLite session store (docs/sessions-storage.md §3.3).

:func:`repair_state_db_schema` never raises (bar the test guard's refusal): it returns a
:class:`RepairReport`. The order is the reference's (docs/sessions-storage.md §3.3): refuse with a tracked connection here or an
exhausted ledger; take ``<db>.repair.lock``; refuse with holders or a held lock; probe; back
up (hard stop on refusal); guard (``locking_mode=EXCLUSIVE``, held through promotion);
snapshot into ``<db>.repair-scratch`` with the online backup API; inventory; strategies on
the scratch; promote into the guard with the backup API (one destination transaction, same
inode); verify; ledger.

The zeroed-file quarantine (docs/sessions-storage.md §3.4) lives in :mod:`.quarantine`, the ledger and bundles in
:mod:`.repair_backup`; their public names are re-exported here.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import sys
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from hermes_data.errors import (ConfigurationError, StoreIOError, UnsafeLockFileError,
                                store_io_error)
from hermes_data.files import SQLITE_MAGIC
from hermes_data.isolation import ensure_test_isolation
from hermes_data.sessions.storage.repair import backup as rb
from hermes_data.sessions.errors import StateDbMalformedError
from hermes_data.sessions.storage.filesafety import holder_scan, maintenance_flock
from hermes_data.tracked import live_connections, tracked_connect
from hermes_data.sessions.storage.quarantine import (check_read_only, is_zeroed_state_db,  # noqa: F401
                         quarantine_cross_process_lock, quarantine_zeroed_state_db, writable_open)
from hermes_data.sessions.storage.repair import sql as q

log = logging.getLogger("hermes_data.sessions.storage.repair.procedure")

__all__ = ["RepairReport", "repair_state_db_schema", "is_malformed_db_error",
           "is_malformed_schema_error", "is_zeroed_state_db", "quarantine_zeroed_state_db",
           "quarantine_cross_process_lock", "opens_cleanly", "diagnose"]

#: ``<db>.repair.lock`` patience (seconds) and poll.
REPAIR_LOCK_WAIT_S = 120.0
REPAIR_LOCK_POLL_S = 0.05
#: Snapshot: pages per backup step, minimum deadline, assumed copy rate.
SNAPSHOT_PAGES = 256
SNAPSHOT_MIN_DEADLINE_S = 120.0
SNAPSHOT_RATE = 10 * 1024 * 1024
#: Pages per promotion step (-1: all at once; the destination transaction spans the steps).
PROMOTE_PAGES = -1
#: ``opens_cleanly``'s busy timeout.
PROBE_TIMEOUT_S = 5.0
_CORRUPT_CODES = (11, 26)  # SQLITE_CORRUPT, SQLITE_NOTADB
_STRATEGIES = ("rebuild_fts", "reindex_btree", "dedup_schema", "drop_fts_rebuild")
#: Outcomes reported ``repaired=True`` (upstream's report) with nothing rewritten.
_NOTHING_REWRITTEN = ("already_healthy", "repaired_by_other_process")

#: Test seam: called with a phase name at each step (``copy``, ``snapshot``, ``strategy:<n>``,
#: ``promote``…); crash tests ``os._exit`` there.
checkpoint_hook: Callable[[str], None] | None = None
#: Holder scans and the clock, injectable.
monotonic: Callable[[], float] = time.monotonic


def _at(phase: str) -> None:
    if checkpoint_hook is not None:
        checkpoint_hook(phase)


# ---------------------------------------------------------------------------------------
# Classification
# ---------------------------------------------------------------------------------------


def _chain(exc: BaseException | None):
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        orig = getattr(exc, "orig", None)
        if isinstance(orig, BaseException):
            yield orig
        exc = exc.__cause__ or exc.__context__


def is_malformed_schema_error(e: BaseException | None) -> bool:
    """A :class:`sqlite3.DatabaseError` (``.orig`` and causes unwrapped) saying ``malformed
    database schema``: every statement on the file fails."""
    return any(isinstance(x, sqlite3.DatabaseError)
               and "malformed database schema" in str(x).lower() for x in _chain(e))


def is_malformed_db_error(e: BaseException | None) -> bool:
    """A malformed schema or ``database disk image is malformed`` (diagnostics and explicit
    repair only: a generic corrupt image never triggers repair)."""
    return is_malformed_schema_error(e) or any(
        isinstance(x, sqlite3.DatabaseError)
        and "database disk image is malformed" in str(x).lower() for x in _chain(e))


def _primary_code(exc: BaseException) -> int | None:
    code = getattr(getattr(exc, "orig", exc), "sqlite_errorcode", None)
    return None if code is None else code & 0xFF


def _counts(exc: BaseException) -> bool:
    """Failures with primary code SQLITE_CORRUPT/SQLITE_NOTADB count; lock, busy, disk, I/O,
    permission and timeouts never do."""
    return _primary_code(exc) in _CORRUPT_CODES


# ---------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------


@dataclass
class RepairReport:
    """What :func:`repair_state_db_schema` did. ``repaired`` is upstream's flag: the file opens
    cleanly after the call (also when it was found healthy). ``strategy`` names the winner, or
    ``already_healthy`` / ``repaired_by_other_process`` (nothing was rewritten); ``error``
    says why it refused."""

    repaired: bool = False
    strategy: str | None = None
    backup_path: str | None = None
    error: str | None = None
    journal_mode_before: str | None = None
    inventory: dict[str, list[int | None] | None] = field(default_factory=dict)
    counted: bool = False  # the failure was recorded in the ledger
    #: The file is not a session store repair may touch (not SQLite, or another
    #: application's database); ``error`` says which. Nothing was written.
    refused: bool = False

    @property
    def ok(self) -> bool:
        """The file opens cleanly now (repaired, or found healthy)."""
        return self.error is None and self.strategy is not None

    @property
    def rewritten(self) -> bool:
        """A strategy of this call rewrote the file (``repaired`` is also True for a file
        found healthy, as upstream reports it)."""
        return self.repaired and self.strategy not in _NOTHING_REWRITTEN

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        return asdict(self)


# ---------------------------------------------------------------------------------------
# Probes
# ---------------------------------------------------------------------------------------


def _connect(path: Path, timeout: float) -> sqlite3.Connection:
    con = tracked_connect(str(path), timeout=timeout, isolation_level=None,
                          check_same_thread=False)
    if sys.platform == "darwin":  # macOS: fsync is no barrier without F_FULLFSYNC
        con.execute(q.FULLFSYNC_ON)
    return con


def _health(path: Path, timeout: float = PROBE_TIMEOUT_S, *, storage_faults: str | None = None
            ) -> tuple[bool, str]:
    """``(healthy, why)`` of :func:`opens_cleanly`; ``why`` starts with ``lock:`` for a lock.
    ``storage_faults`` (the step's name): an I/O fault is raised as
    :class:`~hermes_data.errors.StoreIOError` instead of answering "unhealthy" — a failing
    disk says nothing about the file (the repair then stops instead of trying a heavier
    strategy)."""
    try:
        con = _connect(path, timeout)
    except sqlite3.Error as exc:
        return False, f"cannot connect: {exc}"
    try:
        con.execute(q.JOURNAL_MODE).fetchall()
        bad = [r[0] for r in con.execute(q.INTEGRITY_CHECK).fetchall() if r[0] != "ok"]
        if bad:
            return False, f"integrity_check: {'; '.join(map(str, bad[:3]))}"
        try:
            con.execute(q.COUNT_SESSIONS).fetchall()
        except sqlite3.OperationalError as exc:
            if "no such table" not in str(exc).lower():
                raise
        for (table,) in con.execute(q.FTS_TABLES).fetchall():
            try:
                con.execute(q.fts_match_probe(table)).fetchall()
            except sqlite3.OperationalError as exc:
                msg = str(exc).lower()
                if not any(m in msg for m in ("no such module", "no such tokenizer",
                                              "no such table")):
                    return False, f"{table}: {exc}"
        return _probe_write(con)
    except sqlite3.Error as exc:
        if _primary_code(exc) in (5, 6):
            return False, f"lock: {exc}"
        if storage_faults and (io := store_io_error(exc, str(path), storage_faults)):
            raise io from exc
        return False, str(exc)
    finally:
        con.close()


def _probe_write(con: sqlite3.Connection) -> tuple[bool, str]:
    sid = f"repair-probe-{uuid.uuid4().hex}"
    try:
        con.execute(q.BEGIN_IMMEDIATE)
    except sqlite3.OperationalError as exc:
        return False, f"lock: {exc}"
    try:
        con.execute(q.PROBE_SESSION, (sid,))
        con.execute(q.PROBE_MESSAGE, (sid,))
    except sqlite3.DatabaseError as exc:
        msg = str(exc).lower()
        if _primary_code(exc) in (5, 6):
            return False, f"lock: {exc}"
        if _primary_code(exc) in _CORRUPT_CODES or "malformed" in msg or (
                "no such tokenizer" in msg and "cjk_unicode61" not in msg):
            return False, f"probe write: {exc}"
        # A missing table, an upstream tokenizer, a constraint: the schema parsed and works.
    finally:
        if con.in_transaction:
            con.execute(q.ROLLBACK)
    return True, "ok"


def refusal(path: Path) -> str | None:
    """Why ``path`` is no file for the schema repair, or None when it may be one (issue 31).

    Refused: a file without SQLite's header (a text file given by mistake) and a SQLite
    database whose schema reads fine but holds none of the session store's tables (another
    application's). A schema that cannot be read is exactly what the repair is for, so it is
    not refused here; neither is a zeroed file (its own refusal, checked before)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(len(SQLITE_MAGIC))
    except OSError as exc:
        return f"{path}: cannot be read ({exc.strerror or exc}); refused, nothing was written"
    if head != SQLITE_MAGIC:
        return (f"{path}: not a SQLite database (its first bytes are not SQLite's header); "
                "refused, nothing was written")
    try:
        con = tracked_connect(f"{path.resolve().as_uri()}?mode=ro", uri=True,
                              timeout=PROBE_TIMEOUT_S)
        try:
            names = con.execute(q.STORE_TABLES).fetchall()
        finally:
            con.close()
    except sqlite3.Error:
        return None
    if not names:
        return (f"{path}: a SQLite database of another application (no sessions, messages or "
                "state_meta table); refused, nothing was written")
    return None


def opens_cleanly(path: str | os.PathLike[str]) -> bool:
    """A fresh tracked connection reads the journal mode, passes ``integrity_check``, counts
    ``sessions``, queries every FTS table it can load and runs a rolled-back probe write."""
    return _health(Path(path))[0]


def _inventory(path: Path) -> tuple[dict[str, list[int | None] | None], bool]:
    """``{table: [COUNT(*), MAX(rowid)] | None}`` with ``writable_schema=ON`` (readable despite a
    malformed schema); the flag says every table was readable."""
    con = _connect(path, PROBE_TIMEOUT_S)
    out: dict[str, list[int | None] | None] = {}
    try:
        con.execute(q.WRITABLE_SCHEMA_ON)
        for (name,) in con.execute(q.INVENTORY_TABLES).fetchall():
            try:
                row = con.execute(q.count_rows(name)).fetchone()
            except sqlite3.OperationalError as exc:
                if "rowid" not in str(exc).lower():
                    out[name] = None
                    continue
                row = con.execute(q.count_only(name)).fetchone()
            except sqlite3.DatabaseError:
                out[name] = None
                continue
            out[name] = [int(row[0]), None if row[1] is None else int(row[1])]
    finally:
        con.close()
    return out, all(v is not None for v in out.values())


def _same_inventory(before: dict[str, Any], after: dict[str, Any]) -> bool:
    return all(after.get(name) == counts for name, counts in before.items()
               if counts is not None) and all(name in after for name in before)


def _journal_mode(path: Path) -> str | None:
    try:
        con = _connect(path, PROBE_TIMEOUT_S)
        try:
            return str(con.execute(q.JOURNAL_MODE).fetchone()[0]).lower()
        finally:
            con.close()
    except sqlite3.Error:
        pass
    try:  # header bytes 18/19: 2 = WAL (the pragma fails on a malformed schema)
        with rb.offline_file_access(path, "read the header"), open(path, "rb") as f:
            head = f.read(20)
        return "wal" if len(head) == 20 and head[18] == 2 else q.JOURNAL_DELETE
    except (OSError, sqlite3.Error):
        return None


def _lock_held(path: Path) -> str | None:
    """A positive lock probe (``timeout=0``, ``EXCLUSIVE``, ``BEGIN IMMEDIATE``) names why."""
    try:
        con = _connect(path, 0)
    except sqlite3.Error as exc:
        return str(exc)
    try:
        con.execute(q.BUSY_TIMEOUT_ZERO)
        con.execute(q.LOCKING_EXCLUSIVE)
        con.execute(q.BEGIN_IMMEDIATE)
        con.execute(q.ROLLBACK)
        return None
    except sqlite3.Error as exc:
        return None if _primary_code(exc) not in (5, 6) else str(exc)
    finally:
        con.close()


# ---------------------------------------------------------------------------------------
# Strategies (each on the scratch, its own connection)
# ---------------------------------------------------------------------------------------


def _bump_schema_cookie(con: sqlite3.Connection) -> None:
    cookie = int(con.execute(q.SCHEMA_VERSION).fetchone()[0])
    con.execute(q.SET_SCHEMA_VERSION.format(value=(cookie + 1) & 0x7FFFFFFF))


def _rebuild_fts(con: sqlite3.Connection, _complete: bool) -> None:
    for (table,) in con.execute(q.FTS_TABLES).fetchall():
        try:
            con.execute(q.fts_match_probe(table)).fetchall()
        except sqlite3.OperationalError as exc:
            if any(m in str(exc).lower() for m in ("no such module", "no such tokenizer")):
                continue  # not queryable on this build
        con.execute(q.fts_rebuild(table))


def _reindex(con: sqlite3.Connection, _complete: bool) -> None:
    con.execute(q.REINDEX)


@contextmanager
def _schema_surgery(con: sqlite3.Connection) -> Iterator[None]:
    """One edit of ``sqlite_master`` on the scratch: ``writable_schema=ON``, ``BEGIN
    IMMEDIATE``, the block, then the schema cookie bumped and COMMIT; any failure rolls back.
    ``writable_schema`` is reset either way."""
    con.execute(q.WRITABLE_SCHEMA_ON)
    con.execute(q.BEGIN_IMMEDIATE)
    try:
        yield
        _bump_schema_cookie(con)
        con.execute(q.COMMIT)
    finally:
        if con.in_transaction:
            con.execute(q.ROLLBACK)
        con.execute(q.WRITABLE_SCHEMA_RESET)


def _dedup_schema(con: sqlite3.Connection, _complete: bool) -> None:
    with _schema_surgery(con):
        groups = con.execute(q.DUPLICATE_SCHEMA_ROWS).fetchall()
        if not groups:
            raise RuntimeError("no duplicated schema rows")
        for kind, name, _n in groups:
            distinct, rootpage = con.execute(q.DUPLICATE_DEFINITIONS, (kind, name)).fetchone()
            if rootpage and distinct > 1:
                raise RuntimeError(f"duplicates of the real table {name!r} differ; refused")
        con.execute(q.DEDUP_SCHEMA)


def _drop_fts_rebuild(con: sqlite3.Connection, complete: bool) -> None:
    if not complete:
        raise RuntimeError("inventory incomplete: dropping the FTS objects is refused")
    with _schema_surgery(con):
        con.execute(q.DROP_FTS_SCHEMA_ROWS)
    con.execute(q.WRITABLE_SCHEMA_OFF)
    con.execute(q.VACUUM)  # drops the orphaned shadow pages; the next open recreates FTS


_STRATEGY_FNS: dict[str, Callable[[sqlite3.Connection, bool], None]] = {
    "rebuild_fts": _rebuild_fts, "reindex_btree": _reindex, "dedup_schema": _dedup_schema,
    "drop_fts_rebuild": _drop_fts_rebuild}


def _run_repair_strategies(scratch: Path, inventory: dict[str, Any], complete: bool
                           ) -> tuple[str | None, list[str]]:
    """The first strategy after which the scratch opens cleanly with an equal inventory."""
    notes = []
    for name in _STRATEGIES:
        _at(f"strategy:{name}")
        try:
            con = _connect(scratch, PROBE_TIMEOUT_S)
            try:
                _STRATEGY_FNS[name](con, complete)
            finally:
                con.close()
        except (sqlite3.Error, RuntimeError) as exc:
            if (io := store_io_error(exc, str(scratch), f"the repair strategy {name}")):
                raise io from exc  # the storage failed: stop, never escalate (issue 31)
            notes.append(f"{name}: {exc}")
            continue
        healthy, why = _health(scratch, storage_faults=f"the check after {name}")
        if not healthy:
            notes.append(f"{name}: still unhealthy ({why})")
            continue
        after, _ = _inventory(scratch)
        if not _same_inventory(inventory, after):
            notes.append(f"{name}: row inventory changed; not promoted")
            continue
        return name, notes
    return None, notes


# ---------------------------------------------------------------------------------------
# The repair
# ---------------------------------------------------------------------------------------


def repair_state_db_schema(db_path: str | os.PathLike[str], *, backup: bool = True
                           ) -> RepairReport:
    """Repair a malformed schema of the SQLite session store at ``db_path`` (docs/sessions-storage.md §3.3); never
    raises bar the test guard's refusal. PostgreSQL URLs: :class:`ConfigurationError`."""
    text = os.fspath(db_path)
    if isinstance(text, str) and text.startswith(("postgresql", "postgres:")):
        raise ConfigurationError(f"{text}: schema repair is SQLite only (PostgreSQL has no "
                                 "file to repair)")
    if isinstance(text, str) and text.startswith("sqlite:///"):
        text = text[len("sqlite:///"):]
    path = Path(text)
    ensure_test_isolation(path)
    report = RepairReport()
    try:
        _repair(path, backup, report)
    except UnsafeLockFileError as exc:  # a planted link at <db>.repair.lock (issue 31)
        log.error("%s", exc)
        report.error = str(exc)
    except Exception as exc:  # noqa: BLE001 - the contract: a report, never a raise
        io = _io_failure(path, "repair", exc)
        if io is not None:  # the storage failed (issue 31): reported, not a bug of ours
            log.error("%s", io)
        else:
            log.exception("%s: repair failed unexpectedly", path)
        report.error = report.error or io or f"unexpected failure: {exc}"
    return report


def _repair(path: Path, backup: bool, report: RepairReport) -> None:
    if not path.is_file():
        report.error = f"{path}: no such database file"
        return
    if live_connections(path):
        report.error = f"{path}: this process has open connections to it; close every handle first"
        return
    if is_zeroed_state_db(path):
        report.error = (f"{path}: the file is zeroed (empty or NUL bytes): nothing to repair; a "
                        "writable open moves it aside (restore a snapshot)")
        return
    refused = refusal(path)
    if refused is not None:
        report.error, report.refused = refused, True
        return
    if _exhausted(path, report):
        return
    with maintenance_flock(f"{path}.repair.lock", REPAIR_LOCK_WAIT_S, REPAIR_LOCK_POLL_S) as got:
        if not got:
            if opens_cleanly(path):  # healthy now: repaired, as upstream reports it
                report.repaired, report.strategy = True, "repaired_by_other_process"
            else:
                report.error = f"{path}: another process holds {path}.repair.lock"
            return
        if _exhausted(path, report):
            return
        counted = _locked_repair(path, backup, report)
        if report.repaired:
            rb.clear_ledger(path)
        elif counted:
            ledger = rb.record_failure(path, report.error)
            report.counted = True
            log.error("%s: repair failed (%s); attempt %d of %d for this image", path,
                      report.error, ledger.failed_attempts, rb.MAX_FAILED_ATTEMPTS)


def _exhausted(path: Path, report: RepairReport) -> bool:
    ledger = rb.exhausted(path)
    if ledger is None:
        return False
    report.error = (f"{path}: {ledger.failed_attempts} repairs of this exact image failed; "
                    "repair exhausted — restore a backup or salvage offline (deleting "
                    f"{rb.ledger_path(path)} forces another attempt)")
    return True


def _locked_repair(path: Path, backup: bool, report: RepairReport) -> bool:
    """Steps 3–10 under the repair lock; returns whether a failure counts in the ledger."""
    holders = holder_scan(path)
    if holders:
        report.error = (f"{path}: held by other processes ({_holders_text(holders)}); stop "
                        "the gateway and every Hermes process, then retry")
        return False
    held = _lock_held(path)
    if held is not None:
        report.error = f"{path}: the database is locked ({held}); stop the gateway, then retry"
        return False
    report.journal_mode_before = _journal_mode(path)
    try:
        rb.remove_scratch(path)
    except OSError as exc:
        report.error = f"{rb.scratch_path(path)}: stale scratch cannot be removed ({exc})"
        return False
    if opens_cleanly(path):  # upstream's report: repaired=True, strategy "already_healthy"
        report.repaired, report.strategy = True, "already_healthy"
        return False
    if backup:
        _at("copy")
        try:
            bundle, _reused = rb.make_bundle(path)
        except (rb.BackupRefused, OSError) as exc:
            report.error = f"backup refused, nothing repaired: {exc}"
            return False
        report.backup_path = str(bundle)
    try:
        return _guarded(path, report)
    finally:
        try:
            rb.remove_scratch(path)
        except OSError as exc:
            log.warning("%s: scratch not removed (%s)", path, exc)


def _holders_text(holders: list[tuple[int, str]]) -> str:
    return ", ".join(f"pid {pid} {what}" if pid > 0 else what for pid, what in holders[:5])


def _open_guard(path: Path) -> sqlite3.Connection:
    con = _connect(path, 0)
    try:
        con.execute(q.BUSY_TIMEOUT_ZERO)
        con.execute(q.LOCKING_EXCLUSIVE)
        con.execute(q.BEGIN_EXCLUSIVE)
        con.execute(q.ROLLBACK)
    except BaseException:
        con.close()
        raise
    return con


def _release_guard(con: sqlite3.Connection) -> None:
    try:
        con.execute(q.LOCKING_NORMAL)
        con.execute(q.READ_ONE).fetchall()
    except sqlite3.Error as exc:
        log.debug("guard release read failed: %s", exc)
    finally:
        con.close()


def _guarded(path: Path, report: RepairReport) -> bool:
    where = f" (backup: {report.backup_path})" if report.backup_path else ""
    try:
        guard = _open_guard(path)
    except sqlite3.Error as exc:
        # An open the storage failed (a usable file in a writable directory: no permission
        # problem) is reported as such, not blamed on other processes (issue 31).
        if (io := store_io_error(exc, str(path), "taking the repair's exclusive guard",
                                 writing=False)):
            report.error = str(io)
            return False
        report.error = f"{path}: cannot take the exclusive guard ({exc}); stop every process using it"
        return _counts(exc)
    try:
        scratch = rb.scratch_path(path)
        size = rb.need_bytes(path)
        try:
            usage = rb.disk_usage(str(path.parent))
            headroom = max(rb.MIN_HEADROOM, int(usage.total * rb.HEADROOM_FRACTION))
            if usage.free < 3 * size + headroom:
                report.error = f"too little disk space for the repair scratch in {path.parent}"
                return False
        except OSError as exc:
            report.error = f"free space unknown ({exc}); repair refused"
            return False
        _at("snapshot")
        try:
            _copy_pages(guard, scratch, size)
        except (sqlite3.Error, TimeoutError) as exc:
            report.error = _io_failure(path, "the repair's snapshot", exc) or \
                f"snapshot failed: {exc}"
            return isinstance(exc, sqlite3.Error) and _counts(exc)
        inventory, complete = _inventory(scratch)
        report.inventory = inventory
        try:
            strategy, notes = _run_repair_strategies(scratch, inventory, complete)
        except StoreIOError as exc:
            report.error = str(exc) + where  # not the image's fault: not counted
            return False
        if strategy is None:
            report.error = f"every repair strategy failed: {'; '.join(notes)}{where}"
            return True
        _at("promote")
        try:
            _copy_pages_from(scratch, guard)
        except sqlite3.Error as exc:
            report.error = (_io_failure(path, "the repair's promotion", exc)
                            or f"promotion failed, the file was rolled back: {exc}") + where
            return _counts(exc)
        _at("verify")
        bad = [r[0] for r in guard.execute(q.QUICK_CHECK).fetchall() if r[0] != "ok"]
        after, _ = _inventory_on(guard)
        if bad or not _same_inventory(inventory, after):
            report.error = (f"verification after promotion failed "
                            f"({'; '.join(map(str, bad[:3])) or 'row inventory changed'})"
                            f"; restore {report.backup_path or 'a backup'}")
            return True
        mode = str(guard.execute(q.JOURNAL_MODE).fetchone()[0]).lower()
        if report.journal_mode_before and mode != report.journal_mode_before:
            log.warning("%s: journal mode %s after repair (was %s); the next open applies the "
                        "policy", path, mode, report.journal_mode_before)
        report.repaired, report.strategy = True, strategy
        log.warning("%s: malformed schema repaired (%s)%s", path, strategy, where)
        return False
    finally:
        _release_guard(guard)


def _io_failure(path: Path, operation: str, exc: BaseException) -> str | None:
    """The report line of a step the storage failed (issue 31): the typed
    :class:`~hermes_data.errors.StoreIOError`'s message naming the file, or None for any
    other failure."""
    io = store_io_error(exc, str(path), operation)
    return None if io is None else str(io)


def _copy_pages(src: sqlite3.Connection, scratch: Path, size: int) -> None:
    deadline = monotonic() + max(SNAPSHOT_MIN_DEADLINE_S, size / SNAPSHOT_RATE)

    def progress(_status: int, _remaining: int, _total: int) -> None:
        if monotonic() > deadline:
            raise TimeoutError("snapshot deadline passed")

    dst = _connect(scratch, PROBE_TIMEOUT_S)
    try:
        src.backup(dst, pages=SNAPSHOT_PAGES, progress=progress)
    finally:
        dst.close()


def _copy_pages_from(scratch: Path, guard: sqlite3.Connection) -> None:
    src = _connect(scratch, PROBE_TIMEOUT_S)
    try:
        # One destination transaction across the steps: an interruption rolls back.
        src.backup(guard, pages=PROMOTE_PAGES, progress=lambda *_: _at("promote:step"))
    finally:
        src.close()


def _inventory_on(con: sqlite3.Connection) -> tuple[dict[str, Any], bool]:
    out: dict[str, Any] = {}
    for (name,) in con.execute(q.INVENTORY_TABLES).fetchall():
        try:
            row = con.execute(q.count_rows(name)).fetchone()
        except sqlite3.OperationalError:
            row = con.execute(q.count_only(name)).fetchone()
        out[name] = [int(row[0]), None if row[1] is None else int(row[1])]
    return out, True


# ---------------------------------------------------------------------------------------
# Open-time hook and diagnosis
# ---------------------------------------------------------------------------------------

_one_shot: set[str] = set()
_one_shot_lock = threading.Lock()


def _claim(path: Path) -> bool:
    key = os.path.realpath(path)
    with _one_shot_lock:
        if key in _one_shot:
            return False
        _one_shot.add(key)
        return True


def open_with_schema_repair(path: Path, open_once: Callable[[], None],
                            dispose: Callable[[], None], repairs: list[str]) -> None:
    """A writable open: a malformed schema ⇒ close own connections, claim this process's one
    repair of the path, repair, and on success retry once; else
    :class:`StateDbMalformedError` with the report and cause."""
    try:
        open_once()
        return
    except Exception as exc:
        if not is_malformed_schema_error(exc):
            raise
        outer = exc
    # The driver's own error (its code and message), whatever wrapped it on the way up.
    cause = next(x for x in _chain(outer) if isinstance(x, sqlite3.DatabaseError)
                 and "malformed database schema" in str(x).lower())
    dispose()
    if not _claim(path):
        raise StateDbMalformedError(str(path), cause) from outer
    log.error("%s: malformed database schema at open (%s); repairing", path, cause)
    report = repair_state_db_schema(path)
    if not report.ok:
        raise StateDbMalformedError(str(path), cause, report) from outer
    repairs.append(f"malformed schema repaired ({report.strategy}"
                   + (f"; backup {report.backup_path})" if report.backup_path else ")"))
    open_once()


@dataclass
class Diagnosis:
    """What ``hermes-data repair`` (dry run) and ``doctor`` report about a file."""

    path: str
    exists: bool
    healthy: bool | None
    why: str | None
    ledger: dict[str, Any] | None
    bundles: list[str]
    would_write: str | None
    holders: list[tuple[int, str]]
    #: Why the file is no session store repair would touch (:func:`refusal`), or None.
    refused: str | None = None


def diagnose(db_path: str | os.PathLike[str], *, probe: bool = True) -> Diagnosis:
    """Read-only facts for a dry run: health (``probe``), ledger, bundles, the bundle name a
    repair would write now, holders."""
    path = Path(db_path)
    ensure_test_isolation(path)
    exists = path.is_file()
    healthy = why = None
    refused = refusal(path) if exists and not is_zeroed_state_db(path) else None
    if refused is not None:
        healthy, why = False, refused
    elif exists and probe and not is_zeroed_state_db(path):
        healthy, why = _health(path)
    elif exists and probe:
        healthy, why = False, "zeroed file (empty or NUL bytes)"
    ledger = rb.read_ledger(path)
    stamp = time.strftime("%Y%m%d_%H%M%S", time.localtime(rb.now()))
    return Diagnosis(str(path), exists, healthy, why,
                     None if ledger is None else asdict(ledger),
                     [str(b) for b in rb.bundles(path)],
                     f"{path}.malformed-backup-{stamp}" if exists and not refused else None,
                     holder_scan(path) if exists and probe and not refused else [], refused)


def open_hook(backend: Any, open_once: Callable[[], None]) -> Callable[[], None]:
    """``backend``'s open attempt wrapped with docs/sessions-storage.md §3.3–§3.4 (``path``, ``read_only``,
    ``open_repairs``, ``_dispose`` and an optional ``zero_probe`` are read from it):
    read-only ⇒ the zeroed refusal; writable ⇒ the startup quarantine lock, orphan sidecars,
    zeroed quarantine, and the malformed-schema repair with one retry."""
    path: Path = backend.path
    if backend.read_only:
        def read_only_open() -> None:
            check_read_only(path)
            open_once()
        return read_only_open

    repairs, zeroed = backend.open_repairs, getattr(backend, "zero_probe", None)

    def writable() -> None:
        writable_open(path, lambda: open_with_schema_repair(path, open_once, backend._dispose,
                                                            repairs), repairs, zeroed=zeroed)
    return writable
