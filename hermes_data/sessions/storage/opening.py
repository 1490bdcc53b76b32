"""Open-time checks of the session store, read-gated (docs/sessions.md §2.7, §4.7, §8.4).

Every step first *reads* whether it has work to do; only then does it write, inside the
caller's ``BEGIN IMMEDIATE`` transaction. A settled database therefore opens with zero
write statements (docs/sessions.md §8.4).

* FTS capability probes (FTS5 module, trigram tokenizer) with degradation.
* FTS layout detection (current external-content vs legacy inline) and the trigger-set
  check per half, narrowing of broad update triggers, missing-trigger repair with a
  rebuild/repopulation under the cross-process admission lock ``<db>.fts_rebuild.lock``.
* ``fts_stale`` honouring and recovery (only when no other process holds the file).
* NULL-``active`` heal, the ``db_file_generation`` token and ``application_id``.
* Configured pragmas of the ``database:`` section (docs/sessions.md §8.3), validated, best-effort.
* The writability preflight of a writable open (docs/sessions.md §8.1 step 2) is :mod:`.writability`'s
  (re-exported).
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import secrets
import sqlite3
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from hermes_data.migrate.integrity import corrupt_error, sqlite_check
from hermes_data.config import config_section
from hermes_data.files import open_lock_file
from hermes_data.locking import is_advisory_lock_contention
from hermes_data.sessions.storage.fts import ddl as fts_ddl
from hermes_data.sessions.storage.fts import cjk
from hermes_data.sessions.storage.fts import deferral as fts_deferral
from hermes_data.sessions.storage.fts import shadow as fts_shadow
from hermes_data.sessions.storage.fts import sql as fts_sql
from hermes_data.sessions.storage.fts import upstream_cjk
from hermes_data.sessions.storage.handle_guards import is_disk_io_error
from hermes_data.sessions.backends import sql as backend_sql
from hermes_data.sessions.backends.base import OpenOptions
from hermes_data.sessions.storage import opening_sql as open_sql
from hermes_data.sessions.sql.ddl import squash
from hermes_data.sessions.storage import writability

log = logging.getLogger("hermes_data.sessions.storage.opening")

#: The writability preflight (docs/sessions.md §8.1 step 2) lives in :mod:`.writability`; re-exported here.
PermissionStep, plan_writability = writability.PermissionStep, writability.plan_writability
preflight_paths, writability_preflight = (writability.preflight_paths,
                                          writability.writability_preflight)

#: Admission-lock patience for FTS rebuilds (two concurrent rebuilds corrupted databases).
REBUILD_LOCK_WAIT_S = 120.0
REBUILD_LOCK_POLL_S = 0.1


@dataclass(frozen=True)
class FtsCapabilities:
    """What this SQLite build can do for full-text search."""

    fts5: bool
    trigram: bool


_forced_capabilities: FtsCapabilities | None = None
_probed: FtsCapabilities | None = None


def force_capabilities(caps: FtsCapabilities | None) -> None:
    """Pretend the SQLite build has ``caps`` (tests exercise degraded hosts); ``None`` resets."""
    global _forced_capabilities
    _forced_capabilities = caps


def forced_capabilities() -> FtsCapabilities | None:
    """The override set by :func:`force_capabilities`, if any."""
    return _forced_capabilities


def capabilities(conn: Connection) -> FtsCapabilities:
    """Probe FTS5 and the trigram tokenizer with TEMP virtual tables (never touches main)."""
    global _probed
    if _forced_capabilities is not None:
        return _forced_capabilities
    if _probed is not None:
        return _probed
    fts5 = _probe(conn, open_sql.FTS5_PROBE_DDL, "hermes_fts5_probe")
    trigram = fts5 and _probe(conn, open_sql.TRIGRAM_PROBE_DDL, "hermes_trigram_probe")
    _probed = FtsCapabilities(fts5, trigram)
    return _probed


def _probe(conn: Connection, ddl: str, name: str) -> bool:
    try:
        with conn.begin_nested():
            conn.exec_driver_sql(ddl)
            conn.exec_driver_sql(open_sql.drop_probe_table(name))
        return True
    except sa.exc.OperationalError as exc:
        msg = str(exc).lower()
        if "no such module" in msg or "no such tokenizer" in msg or "parse error" in msg:
            return False
        raise


# ---------------------------------------------------------------------------------------
# Reading the FTS state
# ---------------------------------------------------------------------------------------


def is_broad_update_trigger(ddl: str | None) -> bool:
    """True for an ``AFTER UPDATE ON`` trigger lacking the ``AFTER UPDATE OF`` narrowing."""
    d = squash(ddl, lower=True)
    return "after update on" in d and "after update of" not in d


@dataclass
class FtsState:
    """What ``sqlite_master`` and ``state_meta`` say about the FTS objects (read-only)."""

    layout: str  # "current" | "legacy" | "absent"
    objects: dict[str, str] = field(default_factory=dict)  # name -> sql
    stale: bool = False
    messages_nonempty: bool = False
    caps: FtsCapabilities = FtsCapabilities(True, True)
    cjk_work: bool = False  # CJK-bigram objects missing or stale (sessions.cjk)

    @property
    def trigram_layout(self) -> str:
        ddl = self.objects.get("messages_fts_trigram")
        if ddl is None:
            return "absent"
        return "legacy" if "tool_name" not in squash(ddl, lower=True) else "current"

    def missing(self, names: tuple[str, ...]) -> list[str]:
        return [n for n in names if n not in self.objects]

    @property
    def base_missing(self) -> bool:
        return bool(self.missing(fts_ddl.BASE_TRIGGERS))

    @property
    def trigram_expected(self) -> bool:
        if not self.caps.trigram:
            return False
        # A legacy file without a trigram table never gets one (no new DDL on legacy).
        return not (self.layout == "legacy" and "messages_fts_trigram" not in self.objects)

    @property
    def trigram_missing(self) -> bool:
        return self.trigram_expected and bool(self.missing(fts_ddl.TRIGRAM_TRIGGERS)
                                              or "messages_fts_trigram" not in self.objects)

    @property
    def broad_updates(self) -> list[str]:
        return [n for n in ("messages_fts_update", "messages_fts_trigram_update")
                if n in self.objects and is_broad_update_trigger(self.objects[n])]

    def needs_work(self) -> bool:
        if any(n in self.objects for n in upstream_cjk.UPSTREAM_CJK_TRIGGERS):
            return True  # docs/sessions-storage.md §3.9.1: they fail every message write here
        if not self.caps.fts5:
            return any(t in self.objects for t in fts_ddl.FTS_TRIGGERS)
        if self.stale or self.cjk_work:
            return True  # recovery is attempted; it writes only when it can recover
        if self.layout == "absent":
            return True
        return self.base_missing or self.trigram_missing or bool(self.broad_updates)


def read_fts_state(conn: Connection, options: OpenOptions | None = None) -> FtsState:
    """Read-only snapshot of the FTS objects of the database behind ``conn``; ``options``
    (default: :class:`OpenOptions`'s) says whether the CJK-bigram index is wanted."""
    rows = conn.exec_driver_sql(open_sql.FTS_OBJECTS).fetchall()
    objects = {r[0]: r[1] or "" for r in rows}
    base = objects.get("messages_fts")
    layout = "absent" if base is None else \
        ("current" if "tool_name" in squash(base, lower=True) else "legacy")
    # Upstream files before its schema v7 have no state_meta: nothing can be marked stale there.
    stale = (conn.exec_driver_sql(open_sql.STATE_META_EXISTS).first() is not None
             and conn.exec_driver_sql(fts_sql.READ_FTS_STALE).first() is not None)
    nonempty = conn.exec_driver_sql(open_sql.MESSAGES_NONEMPTY_PROBE).first() is not None
    caps = capabilities(conn)
    cjk_index = (options or OpenOptions()).cjk_index
    return FtsState(layout, objects, stale, nonempty, caps,
                    caps.fts5 and cjk.needs_work(conn, cjk_index))


# ---------------------------------------------------------------------------------------
# Admission lock and holders
# ---------------------------------------------------------------------------------------


def database_path(conn: Connection) -> Path | None:
    """The file behind ``conn`` (None for non-file databases)."""
    db = conn.engine.url.database
    return Path(db) if db and db != ":memory:" and not db.startswith("file:") else None


@contextmanager
def rebuild_admission(db_path: Path | None, wait_s: float = REBUILD_LOCK_WAIT_S) -> Iterator[bool]:
    """Hold ``<db>.fts_rebuild.lock`` (flock on a sidecar, never on the database file).

    Yields True when admitted, False after ``wait_s`` without the lock (fail closed).
    """
    if db_path is None:
        yield True
        return
    lock_path = f"{db_path}.fts_rebuild.lock"
    fd = open_lock_file(lock_path)  # O_NOFOLLOW, 0600, never truncated (issue 31)
    deadline = time.monotonic() + wait_s
    admitted = False
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                admitted = True
                break
            except OSError as exc:
                if not is_advisory_lock_contention(exc):
                    raise
                if time.monotonic() >= deadline:
                    break
                time.sleep(REBUILD_LOCK_POLL_S)
        yield admitted
    finally:
        if admitted:
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


# ---------------------------------------------------------------------------------------
# Applying the FTS checks (inside the caller's write transaction)
# ---------------------------------------------------------------------------------------


def drop_fts_triggers(conn: Connection, state: FtsState) -> list[str]:
    """Drop the FTS triggers present in ``state``; returns their names."""
    dropped = []
    for name in fts_ddl.FTS_TRIGGERS:
        if name in state.objects:
            conn.exec_driver_sql(open_sql.drop_fts_trigger(name))
            dropped.append(name)
    return dropped


def mark_stale(conn: Connection) -> None:
    """Record ``fts_stale`` (search falls back to LIKE until a rebuild clears it)."""
    conn.exec_driver_sql(open_sql.MARK_FTS_STALE, (str(time.time()),))


def _clear_rebuild_markers(conn: Connection, *, stale_too: bool = False) -> None:
    conn.exec_driver_sql(open_sql.CLEAR_REBUILD_MARKERS_AND_STALE if stale_too
                         else fts_sql.CLEAR_REBUILD_MARKERS)


def create_current_layout(conn: Connection, *, trigram: bool) -> list[str]:
    """Add the current-layout FTS objects that are missing (IF NOT EXISTS fragments)."""
    created = []
    objs = fts_ddl.FTS_BASE_OBJECTS + (fts_ddl.FTS_TRIGRAM_OBJECTS if trigram else ())
    existing = fts_shadow.names_after_orphan_shadows(conn)  # docs/sessions-storage.md §3.6: no name collision
    for name, ddl in objs:
        if name not in existing:
            conn.exec_driver_sql(ddl)
            created.append(name)
    return created


def _rebuild_current(conn: Connection, trigram: bool) -> None:
    conn.execute(fts_ddl.FTS_REBUILD)
    if trigram:
        conn.execute(fts_ddl.FTS_TRIGRAM_REBUILD)
    _clear_rebuild_markers(conn)


def apply_fts_checks(conn: Connection, repairs: list[str] | None = None,
                     options: OpenOptions | None = None) -> list[str]:
    """Bring the FTS objects to the expected state for their layout, then the CJK-bigram
    index's (docs/sessions-storage.md §3.9.2, created after them as on a fresh store); returns what it did.

    Runs inside the caller's write transaction; writes nothing when :func:`read_fts_state`
    shows nothing to do. ``options``: the handle's open options (``sessions.cjk_index``,
    orphan reaping in a stale recovery's escalation); default :class:`OpenOptions`'s.
    """
    done: list[str] = [] if repairs is None else repairs
    options = options or OpenOptions()
    state = read_fts_state(conn, options)
    if state.needs_work():
        upstream_cjk.heal_at_open(conn, state.objects, done)  # docs/sessions-storage.md §3.9.1, first
        _apply_fts_checks(conn, state, done, options)
        if state.cjk_work and not state.stale:
            cjk.ensure_objects(conn, state.messages_nonempty, done, options.cjk_index)
    return done


def _apply_fts_checks(conn: Connection, state: FtsState, done: list[str],
                      options: OpenOptions) -> list[str]:
    db_path = database_path(conn)
    if not state.caps.fts5:
        dropped = drop_fts_triggers(conn, state)
        if dropped:
            done.append(f"FTS5 unavailable: dropped triggers {', '.join(dropped)}; search uses LIKE")
        return done
    if state.stale:
        return _handle_stale(conn, state, db_path, done, options)

    trigram_ok = state.caps.trigram
    if state.layout == "absent":
        created = create_current_layout(conn, trigram=trigram_ok)
        done.append(f"created FTS objects: {', '.join(created)}")
        if state.messages_nonempty:
            _guarded_rebuild(conn, state, db_path, done, lambda: _rebuild_current(conn, trigram_ok))
        return done

    for name in state.broad_updates:
        table = "messages_fts" if name == "messages_fts_update" else "messages_fts_trigram"
        layout = state.layout if table == "messages_fts" else state.trigram_layout
        conn.exec_driver_sql(open_sql.drop_fts_trigger(name))
        if layout == "legacy":
            conn.exec_driver_sql(open_sql.legacy_update_trigger(table))
        else:
            ddl = dict(fts_ddl.FTS_OBJECTS_V3)[name]
            conn.exec_driver_sql(ddl)
        state.objects[name] = "narrowed"
        done.append(f"narrowed broad update trigger {name} ({layout} layout)")

    if state.base_missing or state.trigram_missing:
        if state.layout == "legacy":
            _repair_legacy(conn, state, db_path, done)
        else:
            missing_base, missing_tri = state.base_missing, state.trigram_missing
            created = create_current_layout(conn, trigram=trigram_ok)
            done.append(f"recreated FTS objects: {', '.join(created)}")
            if state.messages_nonempty and (missing_base or missing_tri):
                _guarded_rebuild(conn, state, db_path, done,
                                 lambda: _rebuild_current(conn, trigram_ok))
    return done


def _repair_legacy(conn: Connection, state: FtsState, db_path: Path | None, done: list[str]) -> None:
    halves = []
    if state.base_missing:
        halves.append("messages_fts")
    if state.trigram_missing and "messages_fts_trigram" in state.objects:
        halves.append("messages_fts_trigram")

    def work() -> None:
        for table in halves:
            for ddl in open_sql.legacy_triggers(table):
                conn.exec_driver_sql(ddl)
            if state.messages_nonempty:
                for stmt in fts_ddl.legacy_repopulate(table):
                    conn.execute(stmt)
            done.append(f"recreated legacy triggers of {table} and repopulated it")

    if state.messages_nonempty:
        _guarded_rebuild(conn, state, db_path, done, work)
    else:
        work()


def _guarded_rebuild(conn, state: FtsState, db_path, done: list[str], work) -> None:
    with rebuild_admission(db_path) as admitted:
        if admitted:
            work()
            done.append("FTS index rebuilt under the admission lock")
            return
    # Fail closed: detach the indexes, search falls back to LIKE, retry at a later open.
    mark_stale(conn)
    drop_fts_triggers(conn, read_fts_state(conn))
    log.warning("FTS rebuild admission lock busy: marked fts_stale; search uses LIKE until a "
                "later open rebuilds")
    done.append("FTS rebuild deferred (admission lock busy): fts_stale set")


def _handle_stale(conn, state: FtsState, db_path, done: list[str],
                  options: OpenOptions) -> list[str]:
    # Holders (incl. deleted sidecars) defer it; the deferral record and its escalation (docs/sessions-storage.md §3.8).
    if fts_deferral.holders_cleared(conn, db_path, done, reap=options.reap_orphans):
        with rebuild_admission(db_path, wait_s=0.0) as admitted:
            if admitted:
                upstream_cjk.heal(conn)
                for name in fts_ddl.FTS_TRIGGERS:
                    conn.exec_driver_sql(open_sql.drop_fts_trigger(name))
                if state.layout == "legacy":
                    tables = [t for t in fts_ddl.FTS_VIRTUAL_TABLES if t in state.objects]
                    for table in tables:
                        for ddl in open_sql.legacy_triggers(table):
                            conn.exec_driver_sql(ddl)
                        for stmt in fts_ddl.legacy_repopulate(table):
                            conn.execute(stmt)
                else:
                    for name in ("messages_fts_trigram", "messages_fts"):
                        conn.exec_driver_sql(open_sql.drop_fts_table(name))
                    for name in fts_ddl.FTS_VIEWS:
                        conn.exec_driver_sql(open_sql.drop_fts_view(name))
                    create_current_layout(conn, trigram=state.caps.trigram)
                    conn.execute(fts_ddl.FTS_REBUILD)
                    if state.caps.trigram:
                        conn.execute(fts_ddl.FTS_TRIGRAM_REBUILD)
                _clear_rebuild_markers(conn, stale_too=True)
                done.append("recovered stale FTS indexes (rebuilt, fts_stale cleared)")
                return done
    dropped = drop_fts_triggers(conn, state)
    if dropped:
        done.append(f"fts_stale present: kept FTS triggers absent ({', '.join(dropped)})")
    log.info("fts_stale present and the database is shared: recovery deferred")
    return done


# ---------------------------------------------------------------------------------------
# Other gated heals (docs/sessions.md §8.4)
# ---------------------------------------------------------------------------------------


def needs_null_active_heal(conn: Connection) -> bool:
    """Read probe: any message with NULL ``active`` (served by idx_messages_active_null)."""
    return conn.exec_driver_sql(open_sql.NULL_ACTIVE_PROBE).first() is not None


def heal_null_active(conn: Connection) -> int:
    """Set NULL ``active`` to 1 (write; call only after :func:`needs_null_active_heal`)."""
    return conn.exec_driver_sql(open_sql.HEAL_NULL_ACTIVE).rowcount


def read_generation(conn: Connection) -> str | None:
    """The ``db_file_generation`` token, or None before the first writable open."""
    row = conn.exec_driver_sql(open_sql.READ_GENERATION).first()
    return row[0] if row else None


def mint_generation(conn: Connection) -> str:
    """Mint a generation token if absent and return the winner's token."""
    conn.exec_driver_sql(open_sql.MINT_GENERATION, (secrets.token_hex(16),))
    token = read_generation(conn)
    assert token is not None
    app_id = conn.exec_driver_sql(open_sql.READ_APPLICATION_ID).scalar()
    if not app_id:
        value = (int(token[:8], 16) & 0x7FFFFFFF) or 1
        conn.exec_driver_sql(open_sql.set_pragma("application_id", value))
    return token


def needs_fts_storage_version(conn: Connection, state: FtsState) -> bool:
    """Read: should ``fts_storage_version`` be written as '3' (docs/sessions.md §4.7)?"""
    if state.layout != "current" or state.stale:
        return False
    row = conn.exec_driver_sql(open_sql.READ_FTS_STORAGE_VERSION).first()
    if row is not None and row[0] == "3":
        return False
    if conn.exec_driver_sql(open_sql.FTS_STORAGE_VERSION_WITHHELD_PROBE).first():
        return False
    if state.messages_nonempty and not conn.exec_driver_sql(
            open_sql.FTS_DOCSIZE_NONEMPTY_PROBE).first():
        return False
    return True


def write_fts_storage_version(conn: Connection) -> None:
    """Record the current external-content layout as complete."""
    conn.exec_driver_sql(open_sql.WRITE_FTS_STORAGE_VERSION)


# ---------------------------------------------------------------------------------------
# Configured pragmas (docs/sessions.md §8.3)
# ---------------------------------------------------------------------------------------

#: Integer pragmas a ``database:`` configuration section may set (identifier allow-list,
#: kept with the SQL that formats them in sql/opening.py).
CONFIG_INT_PRAGMAS = open_sql.CONFIG_INT_PRAGMAS
_SYNC_LEVELS = {"OFF": 0, "NORMAL": 1, "FULL": 2, "EXTRA": 3}


def resolve_synchronous_level(raw_value: Any) -> int | None:
    """The ``PRAGMA synchronous`` level a configured ``database.synchronous`` value means, or
    None when it means none (the caller warns and leaves the level alone). Upstream's rule:
    ``OFF``/``NORMAL``/``FULL``/``EXTRA`` in any case (surrounding blanks ignored), the
    integers 0–3 (also as text, ``" 2 "``), ``False`` as OFF (YAML's bare ``off``); ``True``,
    other numbers, floats and anything else are None."""
    if isinstance(raw_value, bool):
        return 0 if raw_value is False else None
    if isinstance(raw_value, int):
        return raw_value if 0 <= raw_value <= 3 else None
    try:
        text = str(raw_value).strip()
    except Exception:  # noqa: BLE001 - a hostile __str__ is "no level"
        return None
    if text.upper() in _SYNC_LEVELS:
        return _SYNC_LEVELS[text.upper()]
    try:
        value = int(text)
    except ValueError:
        return None
    return value if 0 <= value <= 3 else None


def _database_section(config: Any) -> Mapping[str, Any]:
    try:
        return config_section(config, "database")
    except Exception as exc:  # noqa: BLE001 - a config failure never breaks an open
        log.warning("database configuration unreadable (%s); no configured pragmas", exc)
        return {}


def configured_pragmas(config: Any, *, platform: str | None = None) -> list[str]:
    """``PRAGMA`` statements from the ``database:`` section of ``config`` (docs/sessions.md §8.3).

    Integers ``cache_size``, ``mmap_size``, ``temp_store``, ``wal_autocheckpoint`` and
    ``journal_size_limit`` (anything else: warning, skipped); ``synchronous`` as
    ``OFF``/``NORMAL``/``FULL``/``EXTRA`` in any case or 0–3, ``False`` meaning OFF (any
    other value: warning, untouched); on macOS a level below FULL is refused with a warning.
    ``config`` is a mapping or a zero-argument callable returning one; reading it never raises.
    """
    section = _database_section(config)
    out: list[str] = []
    for name in CONFIG_INT_PRAGMAS:
        if name not in section or section[name] is None:
            continue
        value = section[name]
        if isinstance(value, bool) or not isinstance(value, int):
            log.warning("database.%s = %r is not an integer; skipped", name, value)
            continue
        out.append(open_sql.set_pragma(name, value))
    if "synchronous" in section and section["synchronous"] is not None:
        value = section["synchronous"]
        level = resolve_synchronous_level(value)
        if level is None:
            log.warning("database.synchronous = %r is not OFF/NORMAL/FULL/EXTRA or 0-3; "
                        "left untouched", value)
        elif (platform or sys.platform) == "darwin" and level < 2:
            log.warning("database.synchronous = %r refused on macOS (FULL is required there); "
                        "left untouched", value)
        else:
            out.append(open_sql.set_pragma("synchronous", level))
    return out


def apply_pragmas(con: Any, statements: list[str], label: str) -> None:
    """Run configured ``statements`` on a DBAPI connection, outside any transaction.

    Best-effort: a failing pragma is logged and skipped, never raised (docs/sessions.md §8.3).
    """
    for stmt in statements:
        try:
            con.execute(stmt).fetchall()
        except Exception as exc:  # noqa: BLE001 - config failures never break an open
            log.warning("%s: configured %s failed (%s); skipped", label, stmt, exc)


def probe_fts_tables(con: sqlite3.Connection) -> dict[str, bool]:
    """Which of the store's FTS tables this connection can load (a missing table, FTS5
    module or tokenizer answers False; any other error propagates)."""
    out = {}
    for table in fts_ddl.FTS_VIRTUAL_TABLES:
        try:
            con.execute(backend_sql.fts_probe(table)).fetchall()
            out[table] = True
        except sqlite3.OperationalError as exc:
            msg = str(exc).lower()
            if "no such table" not in msg and "no such module" not in msg \
                    and "no such tokenizer" not in msg:
                raise
            out[table] = False
    return out


def connect_read_only_retrying(connect: Callable[[], sqlite3.Connection], path: Path,
                               pragmas: list[str], *, retries: int,
                               pause_s: float) -> sqlite3.Connection:
    """A ``mode=ro`` connection with the configured pragmas and foreign keys, proven readable.

    A transient ``disk i/o error`` (a reader cannot run WAL recovery) is retried ``retries``
    times, ``pause_s`` apart; a persistent one (or any other error) propagates."""
    for attempt in range(retries + 1):
        con: sqlite3.Connection | None = None
        try:
            con = connect()
            apply_pragmas(con, pragmas, str(path))
            con.execute(open_sql.FOREIGN_KEYS_ON)
            con.execute(backend_sql.SCHEMA_PROBE).fetchall()
            return con
        except sqlite3.OperationalError as exc:
            if con is not None:
                con.close()
            if not is_disk_io_error(exc) or attempt == retries:
                raise
            log.info("%s: transient I/O error on a read-only open (%s); retrying", path, exc)
            time.sleep(pause_s)
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises


#: A profile directory name (``<root>/profiles/<name>/state.db``).
PROFILE_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


def owner_profile(path: Path, root: Path) -> str | None:
    """``<root>/state.db`` → ``default``; ``<root>/profiles/<name>/state.db`` → ``<name>``;
    anything else (or an unresolvable path) → None."""
    try:
        path = path.resolve()
        root = root.expanduser().resolve()
    except OSError:
        return None
    if path == root / "state.db":
        return "default"
    if path.name == "state.db" and path.parent.parent == root / "profiles":
        name = path.parent.name
        return name if PROFILE_NAME.match(name) else None
    return None


def refuse_if_corrupt(store: Any) -> None:
    """Before a whole-file rewrite (``vacuum``, ``optimize-storage``, ``prune --apply``; issue
    31): SQLite's ``PRAGMA quick_check`` on the handle's read route, and the one-line
    :class:`~hermes_data.errors.CorruptDatabaseError` when it reports damage, so a damaged
    file at head (which a settled open never checks, docs/sessions.md §8.4) is refused
    byte-for-byte unchanged instead of rewritten. The same check and refusal as the upgrade
    path's (:func:`hermes_data.migrate.integrity.sqlite_check`, ``corrupt_error``). Costs one read
    of every page (docs/cli.md "Corrupt files"). Nothing on PostgreSQL or without a file."""
    backend = store.backend
    path = getattr(backend, "path", None)
    if backend.dialect != "sqlite" or path is None:
        return
    backend.guard()  # a quarantined (or replaced) handle raises its own sticky error first
    problems = backend.read_driver(lambda con: sqlite_check(con, "quick_check"),
                                   single_statement=True)
    if problems:
        raise corrupt_error(Path(path), "quick_check", problems, "sessions")
