"""The session store (``state.db``): a typed handle over one SQLite file.

``SessionStore(path_or_url)`` opens (and, only when a read shows it is behind, upgrades or
adopts) the file, then offers the core operations of spec sessions.md §3–§6: lifecycle,
lineage, titles, lineage-wide flags, listings and the transcript.

Transactions follow §8.5: one writer connection per handle, every write inside
``BEGIN IMMEDIATE`` (emitted by the engine's ``begin`` hook), SQLite's busy handler capped
at 1 s, and an application-level jittered retry up to a patience budget (20 s routine,
60 s for transcript writes). The hot transcript paths (``append_message``,
``append_messages_batch``) send their statements through ``exec_driver_sql`` with
positional parameters: same SQL, no per-call compilation.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import re
import sqlite3
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence, TypeVar

import sqlalchemy as sa
from sqlalchemy import event, text
from sqlalchemy.engine import Connection, Engine

from .. import migrate
from ..config import hermes_home, resolve_url, sqlite_path
from ..engine import SqliteSettings, create_sqlite_engine, journal_state
from ..errors import ConfigurationError, DatabaseBusyError
from . import encoding as enc
from . import guards, opening, sql
from .errors import (CompressionPublishError, CompressionSessionBusyError,
                     CompressionSessionClosedError, DeletedWalGenerationError,
                     SchemaBehindError, SessionExportTooLargeError, SessionNotFoundError,
                     SessionResumeTooLargeError, StateDbCorruptError, StateDbReplacedError)
from .migration import BUSY_TIMEOUT_MS, missing_core
from .rows import (MessageRow, NewMessage, PublishResult, RecentSessionRow, SessionListRow,
                   SessionRow)

log = logging.getLogger("hermes_data.sessions.store")

T = TypeVar("T")

#: Patience budgets (spec §8.5), seconds.
ROUTINE_PATIENCE_S = 20.0
TRANSCRIPT_PATIENCE_S = 60.0
OPEN_PATIENCE_S = 20.0
#: Best-effort PASSIVE checkpoint cadence (successful writes).
CHECKPOINT_EVERY = 50
#: Read-only opens: transient I/O errors retried this many times, this far apart (§8.6).
READ_ONLY_OPEN_RETRIES = 3
READ_ONLY_RETRY_PAUSE_S = 0.05
#: Size-guard defaults (spec §6.5).
DEFAULT_MAX_RESUME_MESSAGES = 20000
DEFAULT_MAX_EXPORT_MESSAGES = 20000

TITLE_RANKS = {"derived": 0, "llm": 1, "user": 2}
_PROFILE_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
_CHILD_MARKERS = {"branch": "_branched_from", "delegate": "_delegate_from", "reset": "_reset_from"}

_SESSION_COLS = (
    "id", "source", "user_id", "session_key", "chat_id", "chat_type", "thread_id",
    "display_name", "origin_json", "model", "model_config", "system_prompt_hash",
    "parent_session_id", "started_at", "ended_at", "end_reason", "message_count",
    "tool_call_count", "input_tokens", "output_tokens", "cwd", "git_branch", "git_repo_root",
    "billing_provider", "estimated_cost_usd", "actual_cost_usd", "title", "title_source",
    "last_activity_at", "profile_name", "archived", "pinned", "hidden", "last_read_at",
)
_MESSAGE_COLS = (
    "id", "session_id", "role", "content", "tool_call_id", "tool_calls", "tool_name",
    "timestamp", "token_count", "finish_reason", "reasoning", "reasoning_content",
    "reasoning_details", "codex_reasoning_items", "codex_message_items", "platform_message_id",
    "observed", "_compressed_summary", "effect_disposition", "active", "compacted",
    "api_content", "display_kind", "display_metadata",
)
_INSERT_COLS = _MESSAGE_COLS[1:20] + _MESSAGE_COLS[21:]  # everything but id and compacted
_INSERT_MESSAGE = (f"INSERT INTO messages ({', '.join(_INSERT_COLS)}) "
                   f"VALUES ({', '.join('?' * len(_INSERT_COLS))})")
# Admission + counters in one statement: the RETURNING row tells missing / compression-closed.
_ADMIT_AND_COUNT = ("UPDATE sessions SET message_count = COALESCE(message_count, 0) + ?, "
                    "tool_call_count = COALESCE(tool_call_count, 0) + ? WHERE id = ? "
                    "RETURNING ended_at, end_reason")
# The same, also returning the file's application_id: the transcript hot path reads the
# replaced-file header inside the statement it already runs instead of a separate PRAGMA.
_ADMIT_AND_COUNT_CHECKED = (_ADMIT_AND_COUNT
                            + ", (SELECT application_id FROM pragma_application_id())")
_FILLABLE = ("model", "system_prompt_hash", "session_key", "chat_id", "chat_type", "thread_id",
             "parent_session_id", "cwd", "profile_name", "git_repo_root", "origin_json",
             "display_name")
_ROUTING = ("user_id", "session_key", "chat_id", "chat_type", "thread_id", "display_name",
            "origin_json")


_init_error_lock = threading.Lock()
_last_init_error: tuple[str, BaseException] | None = None


def _record_init_error(path: Path, exc: BaseException) -> None:
    global _last_init_error
    with _init_error_lock:
        _last_init_error = (str(path), exc)


def last_init_error() -> tuple[str, BaseException] | None:
    """``(path, exception)`` of the most recent failed :class:`SessionStore` construction in
    this process (never cleared by a later success: another thread's cause must survive)."""
    with _init_error_lock:
        return _last_init_error


is_transient_sqlite_error = guards.is_transient_sqlite_error


def _is_busy(exc: BaseException) -> bool:
    msg = str(getattr(exc, "orig", exc)).lower()
    return "locked" in msg or "busy" in msg or "no more rows available" in msg


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _profile_namespace(key: str) -> str:
    idx = key.find(":", 6)
    return key[: idx + 1] if idx != -1 else key[:6]


def namespaces_agree(a: str | None, b: str | None) -> bool:
    """Profile-namespace rule of §4.1: either key empty, or both share the ``agent:<ns>:`` prefix."""
    if not a or not b:
        return True
    return _profile_namespace(a) == _profile_namespace(b)


def _json_obj(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            return {}
        return parsed if isinstance(parsed, dict) else {}
    return {}


def _config_dump(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def _sqlite_changes(conn: Connection, _result: Any) -> int:
    # SQLite: the statement's own rowcount is -1 for WITH … UPDATE; ask changes().
    return _changes(conn)


class SessionStore:
    """Typed handle on one session store file.

    ``path_or_url``: a filesystem path or ``sqlite:///`` URL (default: ``$HERMES_HOME/state.db``).
    ``config``: mapping (or zero-argument callable returning one) with a ``sessions`` section
    holding ``max_resume_messages`` / ``max_export_messages`` (read at call time) and a
    ``database`` section of configured pragmas (§8.3: ``cache_size``, ``mmap_size``,
    ``temp_store``, ``wal_autocheckpoint``, ``journal_size_limit``, ``synchronous``), read at
    open and applied to the writer and every read connection.
    ``hermes_root``: root used to derive the owner profile (default ``$HERMES_HOME``).
    Use as a context manager or call :meth:`close`.
    """

    #: Dialect twins of the text() fragments (sessions/sql.py).
    _sql = sql.for_dialect("sqlite")
    #: Rows changed by a WITH … UPDATE (SQLite: changes(); PostgreSQL: the rowcount).
    _changes = staticmethod(_sqlite_changes)

    def __new__(cls, path_or_url: str | os.PathLike | None = None, *args: Any, **kwargs: Any):
        # A postgresql+psycopg:// URL gives the PostgreSQL store (sessions/pg_store.py).
        if cls is SessionStore and path_or_url is not None \
                and str(path_or_url).startswith("postgresql"):
            from .pg_store import PgSessionStore
            return super().__new__(PgSessionStore)
        return super().__new__(cls)

    def __init__(self, path_or_url: str | os.PathLike | None = None, *,
                 settings: SqliteSettings | None = None,
                 config: Mapping[str, Any] | Callable[[], Mapping[str, Any]] | None = None,
                 hermes_root: str | os.PathLike | None = None,
                 open_patience_s: float = OPEN_PATIENCE_S, read_only: bool = False) -> None:
        url = resolve_url("sessions", path_or_url)
        path = sqlite_path(url)
        if path is None:
            raise ConfigurationError(f"{url!s}: the session store needs a SQLite file path")
        self.path = Path(path)
        self.url = url
        self.read_only = read_only
        self._settings = settings or SqliteSettings(busy_timeout_ms=BUSY_TIMEOUT_MS)
        self._config = config
        self._root = Path(hermes_root) if hermes_root is not None else hermes_home()
        self._lock = threading.RLock()
        self._writes = 0
        self._closed = False
        self._engine: Engine | None = None
        self._writer: Connection | None = None
        self._raw: sqlite3.Connection | None = None
        self._read_pool: guards.ReadPool | None = None
        self._read_engine: Engine | None = None
        self._identity: guards.FileIdentity | None = None
        self._app_id = 0
        self._sticky: BaseException | None = None  # replaced / split WAL / corrupt
        self.quarantined = False
        self.fts_available = {"messages_fts": False, "messages_fts_trigram": False}
        self.open_repairs: list[str] = []
        #: Configured pragmas of the ``database:`` section (§8.3), validated once per handle.
        self._pragmas = opening.configured_pragmas(config)
        initialized = False
        try:
            if read_only:
                self._open_read_only()
            else:
                self._open_with_patience(open_patience_s)
            initialized = True
        except BaseException as exc:
            _record_init_error(self.path, exc)
            raise
        finally:
            if not initialized:  # every exception path closes what it opened (§8.12)
                self._dispose()

    # -- open / close ------------------------------------------------------------------

    def _open_with_patience(self, open_patience_s: float) -> None:
        deadline = time.monotonic() + open_patience_s
        while True:
            try:
                self._open()
                return
            except BaseException as exc:
                self._dispose()
                if isinstance(exc, (sa.exc.OperationalError, sqlite3.OperationalError)) \
                        and _is_busy(exc):
                    remaining = deadline - time.monotonic()
                    if remaining > 0:
                        time.sleep(min(random.uniform(0.25, 1.0), remaining))
                        continue
                    raise DatabaseBusyError(
                        f"{self.path}: another process held the write lock for over "
                        f"{open_patience_s:.0f} s while opening; the database is healthy, retry"
                    ) from exc
                raise

    def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Writability preflight (§8.1 step 2), ahead of the first creation so that a repaired
        # directory can take the new file: owner bits by path inside the home tree, else refuse.
        self.open_repairs.extend(opening.writability_preflight(self.path, hermes_home()))
        if not self.path.exists():
            try:  # first creation: owner-only, before any connection (no locks can exist)
                os.close(os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
            except FileExistsError:
                pass
        holders = guards.deleted_sidecar_holders(self.path)
        if holders:  # a second opener would mint a second WAL generation (§8.10)
            pids = ", ".join(f"pid {pid} holds {p}" for pid, p in holders)
            raise DeletedWalGenerationError(str(self.path), f"refusing to open: {pids} (deleted)")
        engine = self._connect_writer()
        with self._reading_on_writer() as conn:
            behind = migrate.current_revision(conn) != migrate.store_spec("sessions").head \
                or bool(missing_core(conn))
        if behind:
            report = migrate.upgrade("sessions", self.url)
            self.open_repairs.extend(report.repairs)
        self._open_checks()
        wal = journal_state(engine).mode == "wal"
        self._app_id = int(self._raw.execute("PRAGMA application_id").fetchone()[0] or 0)
        self._identity = guards.FileIdentity.record(self.path, wal=wal)
        self._harden_permissions()
        self.fts_available = self._probe_fts(self._raw)
        if wal:
            self._read_pool = guards.ReadPool(self.path, pragmas=tuple(self._pragmas))
            self._read_engine = guards.make_read_engine(self._read_pool)

    def _connect_read_only(self) -> sqlite3.Connection:
        """One ``mode=ro`` connection attempt (a seam: tests inject transient I/O errors)."""
        return guards.connect_read_only(self.path)

    def _open_read_only(self) -> None:
        """``mode=ro``, 1 s timeout, no DDL, no write lock ever (§8.6).

        A transient ``disk i/o error`` (a reader cannot run WAL recovery) is retried up to 3
        times, 50 ms apart; a persistent one propagates.
        """
        con: sqlite3.Connection | None = None
        for attempt in range(READ_ONLY_OPEN_RETRIES + 1):
            try:
                con = self._connect_read_only()
                opening.apply_pragmas(con, self._pragmas, str(self.path))
                con.execute("PRAGMA foreign_keys=ON")
                con.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
                break
            except sqlite3.OperationalError as exc:
                if con is not None:
                    con.close()
                    con = None
                if not guards.is_disk_io_error(exc) or attempt == READ_ONLY_OPEN_RETRIES:
                    raise
                log.info("%s: transient I/O error on a read-only open (%s); retrying", self.path, exc)
                time.sleep(READ_ONLY_RETRY_PAUSE_S)
        assert con is not None
        self._raw = con
        self._engine = sa.create_engine("sqlite://", creator=lambda: con,
                                        poolclass=sa.pool.StaticPool)

        @event.listens_for(self._engine, "begin")
        def _begin(conn) -> None:
            conn.exec_driver_sql("BEGIN")

        self._writer = self._engine.connect()
        with self._reading_on_writer() as conn:
            missing = missing_core(conn)
        if missing:
            raise SchemaBehindError(", ".join(missing))
        self.fts_available = self._probe_fts(con)

    @staticmethod
    def _probe_fts(con: sqlite3.Connection) -> dict[str, bool]:
        out = {}
        for table in sql.FTS_VIRTUAL_TABLES:
            try:
                con.execute(f"SELECT * FROM {table} LIMIT 0").fetchall()
                out[table] = True
            except sqlite3.OperationalError as exc:
                msg = str(exc).lower()
                if "no such table" not in msg and "no such module" not in msg \
                        and "no such tokenizer" not in msg:
                    raise
                out[table] = False
        return out

    def _open_checks(self) -> None:
        """Read-gated open-time heals (§8.4): zero writes on a settled database."""
        with self._reading_on_writer() as conn:
            state = opening.read_fts_state(conn)
            need_fts = state.needs_work()
            need_heal = opening.needs_null_active_heal(conn)
            need_gen = opening.read_generation(conn) is None
            need_app_id = not conn.exec_driver_sql("PRAGMA application_id").scalar()
            need_ver = opening.needs_fts_storage_version(conn, state)
        if not (need_fts or need_heal or need_gen or need_app_id or need_ver):
            return

        def work(conn: Connection) -> None:
            if need_fts:
                opening.apply_fts_checks(conn, self.open_repairs)
            if need_heal and opening.needs_null_active_heal(conn):
                n = opening.heal_null_active(conn)
                self.open_repairs.append(f"set active = 1 on {n} message(s)")
            if need_gen or need_app_id:
                opening.mint_generation(conn)
            if need_ver and opening.needs_fts_storage_version(conn, opening.read_fts_state(conn)):
                opening.write_fts_storage_version(conn)

        # Inside the open's patience loop: busy propagates to it (no nested retry budget).
        self._attempt(work, raw=False, guarded=False)

    def _harden_permissions(self) -> None:
        # chmod by path only: opening+closing the file would drop this process's POSIX locks.
        from ..files import make_owner_only

        make_owner_only(self.path, on_error=lambda p, exc: log.debug("could not chmod %s: %s", p, exc))

    def _dispose(self) -> None:
        if self._read_pool is not None:
            self._read_pool.dispose()
            self._read_pool = None
            self._read_engine = None
        if self._writer is not None:
            try:
                self._writer.close()
            except Exception as exc:  # noqa: BLE001 - closing must go on
                log.debug("closing the writer failed: %s", exc)
            finally:
                self._writer = None
        if self.read_only and self._raw is not None:
            self._raw.close()
        self._raw = None
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None

    def close(self) -> None:
        """PASSIVE checkpoint (not on read-only or quarantined handles), close every
        connection, forget the sidecar identity. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if (self._writer is not None and not self.read_only and not self.quarantined
                    and journal_state(self._engine).mode == "wal"):
                self._checkpoint()
            if self._identity is not None:
                self._identity.forget_sidecars()  # a clean last close may unlink them
            self._dispose()

    def _checkpoint(self) -> None:
        """Best-effort ``PRAGMA wal_checkpoint(PASSIVE)`` outside any transaction (never raises).

        Sent on the writer's DBAPI connection (driver transactions are off), so no BEGIN
        wraps it; PASSIVE is the only mode this library issues (spec §8.8).
        """
        if self.quarantined or self._raw is None:
            return
        try:
            self._raw.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except sqlite3.Error as exc:
            log.debug("PASSIVE checkpoint skipped: %s", exc)

    def __enter__(self) -> "SessionStore":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine of the writer's file (maintenance and tests)."""
        if self._engine is None:
            raise ConfigurationError(f"{self.path}: the session store is closed")
        return self._engine

    @property
    def journal_mode(self) -> str:
        """Journal mode the engine policy settled on (``wal`` / ``delete``)."""
        if self.read_only:
            return str(self._raw.execute("PRAGMA journal_mode").fetchone()[0]).lower()
        return journal_state(self.engine).mode

    @property
    def read_pool(self) -> guards.ReadPool | None:
        """The handle's read pool (WAL writable handles only)."""
        return self._read_pool

    # -- transactions ------------------------------------------------------------------

    #: Test seam: called right before every ``BEGIN IMMEDIATE`` (fault injection).
    _before_begin: Callable[[], None] | None = None

    def _guard(self) -> None:
        """Live-handle guards before a write (§8.11): sticky failures, replaced file, split WAL."""
        if self._sticky is not None:
            raise self._sticky
        if self._identity is None:
            return
        found = self._identity.check(self.path)
        if found is not None:
            kind, why = found
            self._sticky = (StateDbReplacedError if kind == "replaced"
                            else DeletedWalGenerationError)(str(self.path), why)
            raise self._sticky

    def _check_app_id(self, raw: sqlite3.Connection) -> None:
        # Inside the write transaction the header is re-read from the file: a `cp` over the
        # same inode shows up as a different application_id.
        self._app_id_matches(raw.execute("PRAGMA application_id").fetchone()[0])

    def _app_id_matches(self, now: int | None) -> None:
        if now and self._app_id and now != self._app_id:
            self._sticky = StateDbReplacedError(
                str(self.path), f"the file's application_id changed ({self._app_id} -> {now}): "
                "it was replaced under a live handle")
            raise self._sticky

    def _attempt(self, fn: Callable[[Any], T], *, raw: bool, guarded: bool = True,
                 header_in_fn: bool = False) -> T:
        """One write transaction: ``BEGIN IMMEDIATE`` → ``fn`` → ``COMMIT`` (§8.5).

        ``header_in_fn``: ``fn`` itself compares the file's ``application_id`` (through
        :meth:`_admit_checked`) before the transaction can commit, so the separate header
        read is skipped. An I/O error raised by ``BEGIN IMMEDIATE`` itself (``fn`` not started, nothing
        mutated) is retried once on the same connection; once ``fn`` has started, every error
        rolls back and propagates. Never closes the connection to heal anything.
        """
        if self._writer is None or self._raw is None:
            raise ConfigurationError(f"{self.path}: the session store is closed")
        if self.read_only:
            raise ConfigurationError(f"{self.path}: this session store handle is read-only")
        if guarded:
            self._guard()
        con = self._raw
        tx = None
        for attempt in (0, 1):
            try:
                if self._before_begin is not None:
                    self._before_begin()
                if raw:
                    con.execute("BEGIN IMMEDIATE")
                else:
                    tx = self._writer.begin()
                break
            except (sqlite3.OperationalError, sa.exc.OperationalError) as exc:
                if attempt == 0 and guards.is_disk_io_error(exc):
                    log.warning("%s: I/O error at BEGIN IMMEDIATE (%s); retrying once on the "
                                "same connection", self.path, exc)
                    continue
                raise
        try:
            if guarded and self._app_id and not header_in_fn:
                self._check_app_id(con)
            result = fn(con if raw else self._writer)
            if raw:
                con.execute("COMMIT")
            else:
                tx.commit()
        except BaseException:
            try:
                if raw:
                    if con.in_transaction:
                        con.execute("ROLLBACK")
                elif tx is not None and tx.is_active:
                    tx.rollback()
            except (sqlite3.Error, sa.exc.DBAPIError) as exc:
                log.debug("rollback failed: %s", exc)
            raise
        return result

    def _connect_writer(self) -> Engine:
        """§8.1 steps 4–5: the engine (busy timeout, manual transactions, journal-mode policy),
        configured pragmas and foreign keys on every connection, and the writer connection.
        No schema work: the open runs that next; the close-race reopen never does."""
        engine = create_sqlite_engine(self.path, self._settings)
        pragmas = self._pragmas

        @event.listens_for(engine, "connect")
        def _fk_on(dbapi_conn, _record) -> None:
            # After the engine's journal-mode policy: configured pragmas (§8.3), then
            # foreign keys on every connection (spec §2, §8.1 step 5).
            opening.apply_pragmas(dbapi_conn, pragmas, str(self.path))
            dbapi_conn.execute("PRAGMA foreign_keys=ON")

        self._engine = engine
        self._writer = engine.connect().execution_options(hermes_begin="IMMEDIATE")
        self._raw = self._writer.connection.driver_connection
        return engine

    #: The handle's one reopen after a ``close()`` race has been used (§8.5).
    _race_reopened = False

    def _reopen_after_close_race(self) -> bool:
        """``close()`` raced a write still running on another thread: the writer is gone.

        Reopen once per handle with the same connection setup and no schema work (§8.5), so
        the in-flight write lands instead of vanishing; the caller closes the connection again
        when that write is done (the handle stays closed). Refused — with the handle's sticky
        error or a "closed" error, never a silent loss — for read-only, replaced, corrupt or
        WAL-split handles, a handle that was never opened, and a second race. Call under
        ``self._lock``.
        """
        closed = f"{self.path}: the session store is closed"
        if self._sticky is not None:  # replaced / split WAL / quarantined (corrupt)
            raise self._sticky
        if self.read_only:
            raise ConfigurationError(f"{closed}; a read-only handle is never reopened")
        if not self._closed or self._identity is None:
            raise ConfigurationError(closed)
        if self._race_reopened:
            raise ConfigurationError(
                f"{closed}; close() ran while writes were still in flight and the one reopen "
                "it allows was already used: stop writing before closing the store")
        self._guard()  # a file replaced since the close must not be written
        holders = guards.deleted_sidecar_holders(self.path)
        if holders:  # same refusal as the open (§8.10): no second WAL generation
            pids = ", ".join(f"pid {pid} holds {p}" for pid, p in holders)
            self._sticky = DeletedWalGenerationError(str(self.path),
                                                     f"refusing to reopen: {pids} (deleted)")
            raise self._sticky
        self._race_reopened = True
        log.warning("%s: close() raced a still-running writer (a write was in flight when the "
                    "handle closed); reopening the writer connection once, without schema work, "
                    "to finish it", self.path)
        try:
            self._connect_writer()
        except BaseException:
            self._dispose()
            raise
        return True

    def _end_close_race(self) -> None:
        """Close the connection a close-race reopen made (PASSIVE checkpoint first, as close())."""
        with self._lock:
            if self._writer is not None and not self.quarantined \
                    and journal_state(self._engine).mode == "wal":
                self._checkpoint()
            self._dispose()

    def _write(self, fn: Callable[[Connection], T], *, patience: float = ROUTINE_PATIENCE_S,
               raw: bool = False, header_in_fn: bool = False) -> T:
        """Run ``fn`` inside ``BEGIN IMMEDIATE`` on the writer; retry busy with jitter.

        ``raw=True`` hands ``fn`` the writer's DBAPI connection (hot paths: statements
        prepared once by sqlite3's cache, no SQLAlchemy execution per call). A writer closed
        under this call by a racing ``close()`` is reopened once (§8.5).
        """
        start = time.monotonic()
        deadline = start + patience
        fts_healed = False
        reopened = False
        try:
            while True:
                with self._lock:
                    if self._writer is None and not reopened:
                        reopened = self._reopen_after_close_race()
                    try:
                        result = self._attempt(fn, raw=raw, header_in_fn=header_in_fn)
                        self._writes += 1
                        if self._writes % CHECKPOINT_EVERY == 0 and self.journal_mode == "wal":
                            self._checkpoint()
                        return result
                    except (sa.exc.DBAPIError, sqlite3.Error) as exc:
                        if guards.is_fts_corruption(exc) and not fts_healed:
                            self._fail_open_fts(exc)
                            fts_healed = True
                            continue
                        if guards.is_structural_corruption(exc):
                            self._quarantine(exc)
                        if not _is_busy(exc):
                            raise
                        err = exc
                now = time.monotonic()
                if now >= deadline:
                    raise DatabaseBusyError(
                        f"{self.path}: another process held the write lock for over "
                        f"{patience:.1f} s; the database is healthy, retry later") from err
                pause = (random.uniform(0.02, 0.15) if now - start < 2.0
                         else random.uniform(0.25, 1.0))
                time.sleep(min(pause, deadline - now))
        finally:
            if reopened:
                self._end_close_race()

    def _fail_open_fts(self, exc: BaseException) -> None:
        """FTS-scoped corruption during a write: mark ``fts_stale`` and drop the FTS triggers
        in one transaction (search falls back to LIKE); the caller retries its write once.
        Never rebuilds from the live write path (§8.11)."""
        log.error("%s: FTS index corrupt (%s): FTS triggers dropped, fts_stale set; search uses "
                  "LIKE until an exclusive open rebuilds the index", self.path, exc)

        def work(conn: Connection) -> None:
            opening._mark_stale(conn)
            opening._drop_fts_triggers(conn, opening.read_fts_state(conn))

        self._attempt(work, raw=False)
        self.fts_available = {t: False for t in self.fts_available}

    def _quarantine(self, exc: BaseException) -> None:
        if self._sticky is None:
            log.error("%s: structural corruption (%s): handle quarantined", self.path, exc)
            self.quarantined = True
            self._sticky = StateDbCorruptError(str(self.path), str(getattr(exc, "orig", exc)))
        raise self._sticky from exc

    @contextmanager
    def _reading_on_writer(self) -> Iterator[Connection]:
        # The handle's own connection, in a deferred transaction, under the handle's lock.
        with self._lock:
            if self._writer is None:
                raise ConfigurationError(f"{self.path}: the session store is closed")
            w = self._writer
            if not self.read_only:
                w.execution_options(hermes_begin="DEFERRED")
            try:
                with w.begin():
                    yield w
            finally:
                if not self.read_only:
                    w.execution_options(hermes_begin="IMMEDIATE")

    @contextmanager
    def _reading(self) -> Iterator[Connection]:
        """A connection for a read: a pooled ``mode=ro`` reader (WAL), else the writer.

        A budget miss first closes one idle reader of a peer handle and retries once; still
        nothing ⇒ the writer serves the read (slower, never an error, never a blocking wait).
        """
        engine = self._read_engine
        conn = None
        if engine is not None and self._read_pool is not None:
            for attempt in (0, 1):
                try:
                    conn = engine.connect()
                    break
                except guards.NoReadPermit as miss:
                    if attempt or miss.scope not in ("path", "process") \
                            or not guards.evict_peer(self._read_pool, miss.scope):
                        break
        if conn is None:
            with self._reading_on_writer() as w:
                yield w
            return
        try:
            with conn.begin():
                yield conn
        finally:
            conn.close()

    def _read(self, fn: Callable[[Connection], T]) -> T:
        with self._reading() as conn:
            return fn(conn)

    def _scalar_ids(self, stmt: sa.TextClause, **params: Any) -> list[str]:
        return self._read(lambda c: [r[0] for r in c.execute(stmt, params)])

    # -- state_meta (§7.7) -------------------------------------------------------------

    def get_meta(self, key: str) -> str | None:
        """A ``state_meta`` value, read on the writer (sees this handle's own commits)."""
        with self._reading_on_writer() as conn:
            row = conn.exec_driver_sql("SELECT value FROM state_meta WHERE key = ?", (key,)).first()
        return None if row is None else row[0]

    def set_meta(self, key: str, value: str | None) -> None:
        """Upsert a ``state_meta`` value."""
        self._write(lambda c: c.execute(
            "INSERT INTO state_meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET "
            "value = excluded.value", (key, value)), raw=True)

    def list_meta_prefix(self, prefix: str) -> dict[str, str | None]:
        """Every ``state_meta`` key starting with ``prefix`` (escaped LIKE)."""
        with self._reading_on_writer() as conn:
            rows = conn.exec_driver_sql(
                "SELECT key, value FROM state_meta WHERE key LIKE ? ESCAPE '\\' ORDER BY key",
                (enc.escape_like(prefix) + "%",)).fetchall()
        return {k: v for k, v in rows}


    # -- configuration -----------------------------------------------------------------

    def _limit(self, key: str, default: int) -> int:
        cfg = self._config() if callable(self._config) else (self._config or {})
        section = cfg.get("sessions", {}) if isinstance(cfg, Mapping) else {}
        raw = section.get(key, default) if isinstance(section, Mapping) else default
        try:
            value = int(raw)
        except (TypeError, ValueError):
            return default
        return default if value < 0 else value

    def owner_profile(self) -> str | None:
        """Profile owning this file: ``<root>/state.db`` → ``default``,
        ``<root>/profiles/<name>/state.db`` → ``<name>``; anything else → None."""
        try:
            path = self.path.resolve()
            root = self._root.expanduser().resolve()
        except OSError:
            return None
        if path == root / "state.db":
            return "default"
        if path.name == "state.db" and path.parent.parent == root / "profiles":
            name = path.parent.name
            return name if _PROFILE_NAME.match(name) else None
        return None

    # -- lifecycle (§4.1–§4.3) ---------------------------------------------------------

    def create_session(self, session_id: str, source: str, *, user_id: str | None = None,
                       session_key: str | None = None, chat_id: str | None = None,
                       chat_type: str | None = None, thread_id: str | None = None,
                       display_name: str | None = None, origin_json: str | None = None,
                       model: str | None = None, model_config: Any = None,
                       system_prompt: str | None = None, parent_session_id: str | None = None,
                       cwd: str | None = None, git_branch: str | None = None,
                       git_repo_root: str | None = None, profile_name: str | None = None,
                       hidden: bool = False) -> str:
        """Insert a session, or enrich an existing one (fill only NULL columns). Returns its id.

        ``source``, ``user_id`` and ``started_at`` of an existing row never change.
        """
        if not session_id or not source:
            raise ValueError("create_session needs a session_id and a source")
        fields = dict(user_id=user_id, session_key=session_key, chat_id=chat_id,
                      chat_type=chat_type, thread_id=thread_id, display_name=display_name,
                      origin_json=origin_json, model=model, model_config=_config_dump(model_config),
                      parent_session_id=parent_session_id, cwd=cwd, git_branch=git_branch,
                      git_repo_root=git_repo_root, profile_name=profile_name)
        owner = self.owner_profile()

        def work(conn: Connection) -> str:
            self._create_in(conn, session_id, source, fields, system_prompt, owner,
                            hidden=hidden, profile_given=profile_name is not None)
            return session_id

        return self._write(work, patience=TRANSCRIPT_PATIENCE_S)

    def _store_prompt(self, conn: Connection, prompt: str | None) -> str | None:
        if prompt is None:
            return None
        digest = hashlib.sha256(prompt.encode("utf-8", "surrogatepass")).hexdigest()
        conn.exec_driver_sql(self._sql.INSERT_PROMPT, (digest, enc.scrub(prompt)))
        return digest

    def _create_in(self, conn: Connection, session_id: str, source: str, fields: dict[str, Any],
                   system_prompt: str | None, owner: str | None, *, hidden: bool,
                   profile_given: bool) -> None:
        fields = dict(fields)
        fields["system_prompt_hash"] = self._store_prompt(conn, system_prompt)
        existing = conn.exec_driver_sql(
            "SELECT model_config FROM sessions WHERE id = ?", (session_id,)).first()
        if existing is None:
            cols = ["id", "source", "started_at", "hidden", *fields]
            vals = [session_id, source, enc.now(), int(bool(hidden)), *fields.values()]
            conn.exec_driver_sql(
                f"INSERT INTO sessions ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                tuple(vals))
        else:
            sets = [f"{c} = COALESCE({c}, ?)" for c in _FILLABLE]
            params: list[Any] = [fields.get(c) for c in _FILLABLE]
            sets.append("git_branch = COALESCE(git_branch, ?)")
            params.append(fields.get("git_branch"))
            old_cfg = _json_obj(existing[0])
            new_cfg = fields.get("model_config")
            if (existing[0] is not None and set(old_cfg) == {"_reset_from"}
                    and new_cfg is not None):
                merged = _json_obj(new_cfg)
                merged["_reset_from"] = old_cfg["_reset_from"]
                sets.append("model_config = ?")
                params.append(json.dumps(merged, ensure_ascii=False))
            elif existing[0] is None and new_cfg is not None:
                sets.append("model_config = ?")
                params.append(new_cfg)
            conn.exec_driver_sql(f"UPDATE sessions SET {', '.join(sets)} WHERE id = ?",
                                 (*params, session_id))
        self._backfill_from_parent(conn, session_id)
        if not profile_given and owner is not None:
            conn.exec_driver_sql("UPDATE sessions SET profile_name = ? WHERE id = ? "
                                 "AND profile_name IS NULL", (owner, session_id))

    def _backfill_from_parent(self, conn: Connection, session_id: str) -> None:
        row = conn.exec_driver_sql(
            "SELECT c.session_key, p.session_key, p.end_reason, p.profile_name FROM sessions c "
            "JOIN sessions p ON p.id = c.parent_session_id WHERE c.id = ?", (session_id,)).first()
        if row is None:
            return
        child_key, parent_key, parent_reason, parent_profile = row
        sets = [f"{c} = COALESCE({c}, (SELECT p.{c} FROM sessions p WHERE p.id = "
                "sessions.parent_session_id))" for c in ("cwd", "git_repo_root", "git_branch")]
        if parent_reason == "compression":
            sets += [f"{c} = COALESCE({c}, (SELECT p.{c} FROM sessions p WHERE p.id = "
                     "sessions.parent_session_id))" for c in _ROUTING]
            child_key = child_key or parent_key
        conn.exec_driver_sql(f"UPDATE sessions SET {', '.join(sets)} WHERE id = ?", (session_id,))
        if parent_profile is not None and namespaces_agree(child_key, parent_key):
            conn.exec_driver_sql("UPDATE sessions SET profile_name = ? WHERE id = ? "
                                 "AND profile_name IS NULL", (parent_profile, session_id))

    def create_child_session(self, parent_id: str, child_id: str, kind: str, *,
                             source: str | None = None, model_config: Any = None,
                             **fields: Any) -> str:
        """Create a ``branch`` / ``delegate`` / ``reset`` child carrying its lineage marker."""
        marker = _CHILD_MARKERS.get(kind)
        if marker is None:
            raise ValueError(f"child kind {kind!r} is not one of {', '.join(_CHILD_MARKERS)}")
        parent = self.get_session(parent_id)
        if parent is None:
            raise SessionNotFoundError(parent_id)
        cfg = _json_obj(model_config)
        cfg[marker] = parent_id
        return self.create_session(child_id, source or parent.source, parent_session_id=parent_id,
                                   model_config=cfg, **fields)

    def end_session(self, session_id: str, end_reason: str) -> bool:
        """End an open session; the first reason wins. Returns whether the row changed."""
        return self._write(lambda c: c.exec_driver_sql(
            "UPDATE sessions SET ended_at = ?, end_reason = ? WHERE id = ? AND ended_at IS NULL",
            (enc.now(), end_reason, session_id)).rowcount == 1)

    def reopen_session(self, session_id: str) -> bool:
        """Clear the end fields, first stamping ``_reset_from`` on legacy reset children."""
        markers = " AND ".join(f"{self._sql.J('model_config', m)} IS NULL" for m in _CHILD_MARKERS.values())

        def work(conn: Connection) -> bool:
            conn.execute(text(
                f"UPDATE sessions SET model_config = {self._sql.SET_RESET_FROM} "
                f"WHERE parent_session_id = :p AND {markers} "
                f"AND {self._sql.legacy_reset_child('sessions')}"), {"p": session_id})
            return conn.exec_driver_sql(
                "UPDATE sessions SET ended_at = NULL, end_reason = NULL WHERE id = ? "
                "AND (ended_at IS NOT NULL OR end_reason IS NOT NULL)", (session_id,)).rowcount == 1

        return self._write(work)

    def publish_compression_child(self, parent_session_id: str, child_session_id: str,
                                  source: str, messages: Sequence[NewMessage], *,
                                  model: str | None = None, model_config: Any = None,
                                  system_prompt: str | None = None, cwd: str | None = None,
                                  profile_name: str | None = None, watermark: int | None = None,
                                  watermark_ceiling: int | None = None, carry_title: bool = True,
                                  lease_holder: str | None = None) -> PublishResult:
        """Atomically end ``parent`` with ``compression`` and publish its continuation (§4.3)."""
        if not messages:
            raise CompressionPublishError("publish_compression_child needs a non-empty handoff")
        encoded = [self._encode_row(m, i) for i, m in enumerate(messages)]
        owner = self.owner_profile()

        def work(conn: Connection) -> PublishResult:
            now = enc.now()
            if lease_holder is not None:
                lease = conn.exec_driver_sql(
                    "SELECT holder, expires_at FROM compression_locks WHERE session_id = ?",
                    (parent_session_id,)).first()
                if lease is None or lease[0] != lease_holder or lease[1] <= now:
                    raise CompressionSessionBusyError(
                        f"{lease_holder!r} holds no live compression lease on {parent_session_id!r}")
            parent = conn.exec_driver_sql(
                "SELECT ended_at, end_reason, title, title_source, cwd, git_branch, git_repo_root, "
                "profile_name, user_id, session_key, chat_id, chat_type, thread_id, display_name, "
                "origin_json, archived, pinned, hidden, last_read_at FROM sessions WHERE id = ?",
                (parent_session_id,)).first()
            if parent is None:
                raise SessionNotFoundError(parent_session_id)
            if parent.ended_at is not None or parent.end_reason is not None:
                if parent.end_reason in sql.AUTOMATIC_END_REASONS:
                    conn.exec_driver_sql("UPDATE sessions SET ended_at = NULL, end_reason = NULL "
                                         "WHERE id = ?", (parent_session_id,))
                    log.info("publish: cleared automatic end reason %r of %s", parent.end_reason,
                             parent_session_id)
                else:
                    raise CompressionPublishError(
                        f"parent {parent_session_id!r} already ended ({parent.end_reason!r})")
            prompt_hash = self._store_prompt(conn, system_prompt)
            cols = ("id", "source", "started_at", "parent_session_id", "model", "model_config",
                    "system_prompt_hash", "cwd", "git_branch", "git_repo_root", "profile_name",
                    *_ROUTING, "archived", "pinned", "hidden", "last_read_at")
            vals = (child_session_id, source, now, parent_session_id, model,
                    _config_dump(model_config), prompt_hash, cwd or parent.cwd, parent.git_branch,
                    parent.git_repo_root, profile_name or parent.profile_name or owner,
                    *(getattr(parent, c) for c in _ROUTING), parent.archived, parent.pinned,
                    parent.hidden, parent.last_read_at)
            try:
                conn.exec_driver_sql(
                    f"INSERT INTO sessions ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                    vals)
            except sa.exc.IntegrityError as exc:
                raise CompressionPublishError(
                    f"child {child_session_id!r} cannot be inserted: {exc.orig}") from exc
            tool_calls = self._insert_rows(conn, child_session_id, encoded)
            cloned = 0
            if watermark is not None:
                cloned, cloned_tools = self._clone_rows(conn, parent_session_id, child_session_id,
                                                        watermark, watermark_ceiling)
                tool_calls += cloned_tools
            conn.exec_driver_sql("UPDATE sessions SET message_count = ?, tool_call_count = ? "
                                 "WHERE id = ?", (len(encoded) + cloned, tool_calls,
                                                  child_session_id))
            moved = False
            if carry_title and parent.title is not None:
                conn.exec_driver_sql("UPDATE sessions SET title = NULL, title_source = NULL "
                                     "WHERE id = ?", (parent_session_id,))
                conn.exec_driver_sql("UPDATE sessions SET title = ?, title_source = ? WHERE id = ?",
                                     (parent.title, parent.title_source, child_session_id))
                moved = True
            ended = conn.exec_driver_sql(
                "UPDATE sessions SET ended_at = ?, end_reason = 'compression' WHERE id = ? "
                "AND ended_at IS NULL", (enc.now(), parent_session_id)).rowcount
            if ended != 1:
                raise CompressionPublishError(
                    f"parent {parent_session_id!r} changed during publication; nothing was published")
            return PublishResult(child_session_id, len(encoded), cloned, moved)

        return self._write(work, patience=TRANSCRIPT_PATIENCE_S)

    def _clone_rows(self, conn: Connection, parent: str, child: str, watermark: int,
                    ceiling: int | None) -> tuple[int, int]:
        # Column-exact copy (upstream extra columns included) except id/session_id/active/compacted.
        cols = [r[1] for r in conn.exec_driver_sql('PRAGMA table_info("messages")')
                if r[1] not in ("id", "session_id", "active", "compacted")]
        col_sql = ", ".join(_q(c) for c in cols)
        cond = "session_id = ? AND active = 1 AND id > ?" + (" AND id <= ?" if ceiling is not None else "")
        params: tuple[Any, ...] = (parent, watermark) + ((ceiling,) if ceiling is not None else ())
        tools = sum(enc.count_tool_calls(r[0]) for r in conn.exec_driver_sql(
            f"SELECT tool_calls FROM messages WHERE {cond}", params))
        n = conn.exec_driver_sql(
            f"INSERT INTO messages (session_id, active, compacted, {col_sql}) "
            f"SELECT ?, 1, 0, {col_sql} FROM messages WHERE {cond} ORDER BY id",
            (child, *params)).rowcount
        return n, tools

    # -- messages (§6) -----------------------------------------------------------------

    def _encode_row(self, m: Mapping[str, Any], index: int, *, batch: bool = True,
                    default_ts: float | None = None) -> tuple[Any, ...]:
        if type(m) is not dict and not isinstance(m, Mapping):
            raise ValueError(f"message #{index} is not a mapping: {type(m).__name__}")
        role = m.get("role")
        if not isinstance(role, str) or not role:
            raise ValueError(f"message #{index} has no role")
        assistant = role == "assistant" or not batch
        platform_id = m.get("platform_message_id", m.get("message_id"))
        ts = enc.coerce_timestamp(m.get("timestamp"))
        return (
            role, enc.encode_content(m.get("content"), self._sql.dialect), m.get("tool_call_id"),
            enc.encode_tool_calls(m.get("tool_calls")), enc.scrub(m.get("tool_name")),
            ts if ts is not None else default_ts, m.get("token_count"), m.get("finish_reason"),
            enc.scrub(m.get("reasoning")) if assistant else None,
            enc.scrub(m.get("reasoning_content")) if assistant else None,
            enc.encode_json_text(m.get("reasoning_details")) if assistant else None,
            enc.encode_json_text(m.get("codex_reasoning_items")) if assistant else None,
            enc.encode_json_text(m.get("codex_message_items")) if assistant else None,
            None if platform_id is None else str(platform_id), int(m.get("observed") or 0),
            1 if m.get("_compressed_summary") else 0, m.get("effect_disposition"), 1,
            enc.scrub(m.get("api_content")), enc.scrub(m.get("display_kind")),
            enc.encode_display_metadata(m.get("display_metadata")),
        )

    @staticmethod
    def _with_timestamps(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        # Rows without a timestamp get strictly increasing defaults (≥ 1 µs apart).
        out = []
        prev: float | None = None
        now = enc.now()
        for r in rows:
            ts = r[5]
            if ts is None:
                ts = now if prev is None else max(now, prev + 1e-6)
                r = r[:5] + (ts,) + r[6:]
            prev = ts
            out.append(r)
        return out

    def _admit(self, conn: Connection, session_id: str, count: int, tools: int) -> None:
        row = conn.exec_driver_sql(_ADMIT_AND_COUNT, (count, tools, session_id)).first()
        if row is None:
            raise SessionNotFoundError(session_id)
        if row[0] is not None and row[1] == "compression":
            raise CompressionSessionClosedError(session_id)

    def _admit_checked(self, con: sqlite3.Connection, session_id: str, count: int,
                       tools: int) -> None:
        # Admission + counters + the replaced-file header check in one statement (hot path;
        # the caller's transaction rolls back if the header no longer matches).
        rows = con.execute(_ADMIT_AND_COUNT_CHECKED, (count, tools, session_id)).fetchall()
        if not rows:
            self._app_id_matches(con.execute("PRAGMA application_id").fetchone()[0])
            raise SessionNotFoundError(session_id)
        ended_at, end_reason, app_id = rows[0]
        self._app_id_matches(app_id)
        if ended_at is not None and end_reason == "compression":
            raise CompressionSessionClosedError(session_id)

    def _insert_rows(self, conn: Connection, session_id: str, rows: list[tuple[Any, ...]]) -> int:
        rows = self._with_timestamps(rows)
        conn.exec_driver_sql(_INSERT_MESSAGE, [(session_id, *r) for r in rows])
        return sum(enc.count_tool_calls(r[3]) for r in rows)

    def append_message(self, session_id: str, role: str, content: Any = None, **fields: Any) -> int:
        """Append one message in its own transaction; returns the new row id.

        Raises :class:`SessionNotFoundError` for an unknown session and
        :class:`CompressionSessionClosedError` when the session continued in a child.
        Keyword fields are those of :class:`~hermes_data.sessions.rows.NewMessage`.
        """
        row = self._encode_row({**fields, "role": role, "content": content}, 0, batch=False,
                               default_ts=enc.now())
        tools = enc.count_tool_calls(row[3])

        params = (session_id, *row)

        def work(con: sqlite3.Connection) -> int:
            self._admit_checked(con, session_id, 1, tools)
            return con.execute(_INSERT_MESSAGE, params).lastrowid

        return self._write(work, patience=TRANSCRIPT_PATIENCE_S, raw=True, header_in_fn=True)

    def append_messages_batch(self, session_id: str, messages: Sequence[NewMessage],
                              chunk_rows: int | None = None) -> int:
        """Append ``messages`` all-or-nothing (or per chunk of ``chunk_rows``); returns rows inserted."""
        if not messages:
            return 0
        encoded = self._with_timestamps([self._encode_row(m, i) for i, m in enumerate(messages)])
        size = len(encoded) if not chunk_rows or chunk_rows <= 0 else chunk_rows
        inserted = 0
        for start in range(0, len(encoded), size):
            chunk = encoded[start:start + size]
            tools = sum(enc.count_tool_calls(r[3]) for r in chunk)

            def work(con: sqlite3.Connection, chunk=chunk, tools=tools) -> int:
                self._admit_checked(con, session_id, len(chunk), tools)
                con.executemany(_INSERT_MESSAGE, [(session_id, *r) for r in chunk])
                return len(chunk)

            inserted += self._write(work, patience=TRANSCRIPT_PATIENCE_S, raw=True,
                                    header_in_fn=True)
        return inserted

    def _message(self, r: Sequence[Any]) -> MessageRow:
        return MessageRow(
            id=r[0], session_id=r[1], role=r[2], content=enc.decode_content(r[3], self._sql.dialect),
            tool_call_id=r[4], tool_calls=enc.decode_tool_calls(r[5]), tool_name=r[6],
            timestamp=r[7], token_count=r[8], finish_reason=r[9], reasoning=r[10],
            reasoning_content=r[11], reasoning_details=r[12], codex_reasoning_items=r[13],
            codex_message_items=r[14], platform_message_id=r[15], observed=r[16] or 0,
            compressed_summary=bool(r[17]), effect_disposition=r[18], active=bool(r[19]),
            compacted=bool(r[20]), api_content=r[21], display_kind=r[22],
            display_metadata=enc.decode_display_metadata(r[23]))

    def get_messages(self, session_id: str, include_inactive: bool = False,
                     limit: int | None = None, offset: int = 0, latest: bool = False,
                     after_id: int | None = None) -> list[MessageRow]:
        """Transcript rows in insertion (id) order; ``after_id`` is keyset paging (§6.4)."""
        if after_id is not None and (latest or offset):
            raise ValueError("after_id cannot be combined with latest=True or a non-zero offset")
        where = "session_id = ?"
        params: list[Any] = [session_id]
        if not include_inactive:
            where += " AND +active = 1"  # '+': keep the (session_id, id) index for the seek
        if after_id is not None:
            where += " AND id > ?"
            params.append(int(after_id))
        order = "DESC" if latest else "ASC"
        q = f"SELECT {', '.join(_MESSAGE_COLS)} FROM messages WHERE {where} ORDER BY id {order}"
        if limit is not None or offset:
            q += " LIMIT ? OFFSET ?"
            params += [self._sql.NO_LIMIT if limit is None else int(limit), int(offset or 0)]
        rows = self._read(lambda c: c.exec_driver_sql(q, tuple(params)).fetchall())
        if latest:
            rows.reverse()
        return [self._message(r) for r in rows]

    def message_count(self, session_id: str, include_inactive: bool = False) -> int:
        """Number of (active) message rows of one session."""
        cond = "" if include_inactive else " AND active = 1"
        return self._read(lambda c: c.exec_driver_sql(
            f"SELECT COUNT(*) FROM messages WHERE session_id = ?{cond}", (session_id,)).scalar())

    # -- size guards (§6.5) ------------------------------------------------------------

    def assert_resume_safe(self, session_id: str, max_messages: int | None = None,
                           tip_only: bool = False) -> int:
        """Refuse a resume that would materialise too many rows; returns the bounded count."""
        if max_messages is not None and max_messages < 0:
            raise ValueError(f"max_messages must be >= 0, got {max_messages}")
        limit = self._limit("max_resume_messages", DEFAULT_MAX_RESUME_MESSAGES) \
            if max_messages is None else max_messages
        if limit == 0:
            return 0
        if tip_only:
            q = text("SELECT COUNT(*) FROM (SELECT 1 FROM messages WHERE session_id = :id "
                     "AND active = 1 LIMIT :cap) AS capped")
            scope = "in its tip segment"
        else:
            q = self._sql.RESUME_LINEAGE_COUNT
            scope = "across its lineage"
        count = self._read(lambda c: c.execute(q, {"id": session_id, "cap": limit + 1}).scalar())
        if count > limit:
            raise SessionResumeTooLargeError(count, limit, scope)
        return count

    def assert_export_safe(self, session_id: str, max_messages: int | None = None) -> int:
        """Refuse exporting one session with more active rows than the limit; returns the count."""
        if max_messages is not None and max_messages < 0:
            raise ValueError(f"max_messages must be >= 0, got {max_messages}")
        limit = self._limit("max_export_messages", DEFAULT_MAX_EXPORT_MESSAGES) \
            if max_messages is None else max_messages
        if limit == 0:
            return 0
        count = self._read(lambda c: c.exec_driver_sql(
            "SELECT COUNT(*) FROM (SELECT 1 FROM messages WHERE session_id = ? AND active = 1 "
            "LIMIT ?) AS capped", (session_id, limit + 1)).scalar())
        if count > limit:
            raise SessionExportTooLargeError(session_id, count, limit)
        return count

    # -- lineage (§4.4) ----------------------------------------------------------------

    def get_compression_chain(self, session_id: str) -> list[str]:
        """Ids from ``session_id`` forward to its compression tip (one statement)."""
        return self._scalar_ids(self._sql.CHAIN_FROM, start=session_id)

    def get_compression_tip(self, session_id: str) -> str:
        """The live end of the compression chain through ``session_id`` (one statement)."""
        return self._read(lambda c: c.execute(self._sql.TIP_OF, {"start": session_id}).scalar())

    def get_compression_root(self, session_id: str) -> str:
        """The first segment of the compression chain holding ``session_id`` (one statement)."""
        return self._read(lambda c: c.execute(self._sql.ROOT_OF, {"id": session_id}).scalar())

    def get_lineage_ids(self, session_id: str) -> list[str]:
        """Every segment of the compression lineage of ``session_id``, root first."""
        return self._scalar_ids(self._sql.LINEAGE_OF, id=session_id)

    def get_resume_lineage_ids(self, session_id: str) -> list[str]:
        """The compression path root … ``session_id`` (what a full resume materialises)."""
        return self._scalar_ids(self._sql.RESUME_LINEAGE_OF, id=session_id)

    def resolve_resume_session_id(self, session_id: str) -> str:
        """Where resuming ``session_id`` lands: the tip, or a newer non-fork continuation."""
        return self._read(lambda c: c.execute(self._sql.RESUME_TARGET_OF, {"start": session_id}).scalar())

    # -- titles (§4.5) -----------------------------------------------------------------

    def set_session_title(self, session_id: str, title: str | None) -> bool:
        """User title write (rank ``user``); None/blank clears. Returns whether a row changed."""
        return self._set_title(session_id, enc.sanitize_title(title), "user")

    def set_auto_title(self, session_id: str, title: str | None, source: str) -> bool:
        """Automatic title (``derived``/``llm``): lands only on untitled or lower-ranked rows."""
        if source not in ("derived", "llm"):
            raise ValueError(f"automatic title source must be 'derived' or 'llm', not {source!r}")
        cleaned = enc.sanitize_title(title)
        if cleaned is None:
            return False
        return self._set_title(session_id, cleaned, source)

    def _set_title(self, session_id: str, title: str | None, source: str) -> bool:
        user = source == "user"

        def work(conn: Connection) -> bool:
            cur = conn.exec_driver_sql("SELECT title, title_source, hidden FROM sessions WHERE id = ?",
                                       (session_id,)).first()
            if cur is None:
                if user:
                    raise SessionNotFoundError(session_id)
                return False
            old_title, old_source, hidden = cur
            if hidden and old_title == "Bot Chat" and title != "Bot Chat":
                if user:
                    raise ValueError(
                        f"session {session_id!r} is the canonical hidden 'Bot Chat'; its title "
                        "identifies it to the bot and cannot be changed")
                return False
            if not user and old_title is not None:
                old_rank = TITLE_RANKS.get(old_source or "user", 2)
                if old_rank >= TITLE_RANKS[source]:
                    return False
            if title is not None:
                holder = conn.exec_driver_sql("SELECT id FROM sessions WHERE title = ? AND id <> ?",
                                              (title, session_id)).first()
                if holder is not None:
                    ancestors = {r[0] for r in conn.execute(self._sql.ANCESTORS_OF, {"id": session_id})}
                    if holder[0] not in ancestors:
                        raise ValueError(f"title {title!r} is already used by session {holder[0]!r}")
                    conn.exec_driver_sql("UPDATE sessions SET title = NULL, title_source = NULL "
                                         "WHERE id = ?", (holder[0],))
            return conn.exec_driver_sql(
                f"UPDATE sessions SET title = ?, title_source = ? WHERE id = ? "
                f"AND title {self._sql.IS} ? AND title_source {self._sql.IS} ?",
                (title, None if title is None else source, session_id, old_title, old_source)
            ).rowcount == 1

        return self._write(work)

    def get_next_title_in_lineage(self, base: str) -> str:
        """Next numbered title: ``base`` when unused, else ``base #(max(N, 1) + 1)``."""
        base = re.sub(r" #\d+$", "", base)
        rows = self._read(lambda c: c.exec_driver_sql(
            "SELECT title FROM sessions WHERE title = ? OR title LIKE ? ESCAPE '\\'",
            (base, enc.escape_like(base) + " #%")).fetchall())
        numbers = []
        for (t,) in rows:
            if t == base:
                numbers.append(1)
            else:
                suffix = t[len(base) + 2:]
                if suffix.isdigit():
                    numbers.append(int(suffix))
        if not numbers:
            return base
        return f"{base} #{max(max(numbers), 1) + 1}"

    def get_session_by_title(self, title: str) -> SessionRow | None:
        """The session holding exactly ``title``."""
        sid = self._read(lambda c: c.exec_driver_sql(
            "SELECT id FROM sessions WHERE title = ?", (title,)).scalar())
        return None if sid is None else self.get_session(sid)

    def resolve_session_by_title(self, title: str) -> str | None:
        """Newest numbered variant ``title #N``, else the exact title's session id."""
        rows = self._read(lambda c: c.exec_driver_sql(
            "SELECT id, title FROM sessions WHERE title LIKE ? ESCAPE '\\' "
            "ORDER BY started_at DESC", (enc.escape_like(title) + " #%",)).fetchall())
        for sid, t in rows:
            if t[len(title) + 2:].isdigit():
                return sid
        return self._read(lambda c: c.exec_driver_sql(
            "SELECT id FROM sessions WHERE title = ?", (title,)).scalar())

    # -- flags (§4.6) ------------------------------------------------------------------

    def _set_flag(self, session_id: str, flag: str, value: Any) -> bool:
        stmt = self._sql.LINEAGE_FLAG_UPDATE[flag]

        def work(conn: Connection) -> bool:
            return self._changes(conn, conn.execute(stmt, {"id": session_id, "value": value})) > 0

        return self._write(work)

    def set_session_archived(self, session_id: str, archived: bool = True) -> bool:
        """Archive/unarchive the whole compression lineage."""
        return self._set_flag(session_id, "archived", int(bool(archived)))

    def set_session_hidden(self, session_id: str, hidden: bool = True) -> bool:
        """Hide/unhide the whole compression lineage."""
        return self._set_flag(session_id, "hidden", int(bool(hidden)))

    def set_session_read(self, session_id: str, read: bool = True) -> bool:
        """Mark the lineage read (``last_read_at = now``) or explicitly unread (0)."""
        return self._set_flag(session_id, "last_read_at", enc.now() if read else 0)

    def set_session_pinned(self, session_id: str, pinned: bool = True) -> bool:
        """Pin/unpin the lineage; pinning also un-hides it unless it holds a hidden 'Bot Chat'."""
        value = int(bool(pinned))

        def work(conn: Connection) -> bool:
            changed = self._changes(conn, conn.execute(
                self._sql.LINEAGE_FLAG_UPDATE["pinned"], {"id": session_id, "value": value}))
            if value and not conn.execute(self._sql.LINEAGE_HAS_HIDDEN_BOT_CHAT, {"id": session_id}).scalar():
                changed += self._changes(conn, conn.execute(self._sql.LINEAGE_UNHIDE,
                                                            {"id": session_id}))
            return changed > 0

        return self._write(work)

    # -- reads (§5) --------------------------------------------------------------------

    def get_session(self, session_id: str) -> SessionRow | None:
        """Core columns plus the resolved system prompt, or None."""
        cols = ", ".join(f"s.{c}" for c in _SESSION_COLS)
        r = self._read(lambda c: c.exec_driver_sql(
            f"SELECT {cols}, COALESCE(sp.prompt, s.system_prompt) FROM sessions s "
            "LEFT JOIN system_prompts sp ON sp.hash = s.system_prompt_hash WHERE s.id = ?",
            (session_id,)).first())
        if r is None:
            return None
        d = dict(zip(_SESSION_COLS, r[:-1]))
        d["system_prompt"] = r[-1]
        for k in ("message_count", "tool_call_count", "input_tokens", "output_tokens"):
            d[k] = d[k] or 0
        for k in ("archived", "pinned", "hidden"):
            d[k] = bool(d[k])
        return SessionRow(**d)

    def _where(self, *, source: str | None, sources: Iterable[str] | None,
               exclude_sources: Iterable[str] | None, cwd_prefix: str | None,
               session_key: str | None, min_message_count: int, include_children: bool,
               exclude_delegates: bool, include_archived: bool, archived_only: bool,
               include_hidden: bool) -> tuple[str, dict[str, Any]]:
        conds: list[str] = []
        params: dict[str, Any] = {}
        if not include_children:
            conds.append(self._sql.listable("s"))
        elif exclude_delegates:
            conds.append(f"{self._sql.J('s.model_config', '_delegate_from')} IS NULL")
        wanted = list(sources or []) + ([source] if source else [])
        if wanted:
            names = [f"src{i}" for i in range(len(wanted))]
            conds.append(f"s.source IN ({', '.join(':' + n for n in names)})")
            params.update(zip(names, wanted))
        excluded = list(exclude_sources or [])
        if excluded:
            names = [f"xsrc{i}" for i in range(len(excluded))]
            conds.append(f"s.source NOT IN ({', '.join(':' + n for n in names)})")
            params.update(zip(names, excluded))
        if session_key is not None:
            conds.append("s.session_key = :session_key")
            params["session_key"] = session_key
        if cwd_prefix:
            prefix = cwd_prefix.rstrip("/\\") or cwd_prefix
            conds.append("(s.cwd = :cwd OR s.cwd LIKE :cwd_slash ESCAPE '\\' "
                         "OR s.cwd LIKE :cwd_bslash ESCAPE '\\')")
            params.update(cwd=prefix, cwd_slash=enc.escape_like(prefix + "/") + "%",
                          cwd_bslash=enc.escape_like(prefix + "\\") + "%")
        if min_message_count:
            conds.append("COALESCE(s.message_count, 0) >= :min_count")
            params["min_count"] = int(min_message_count)
        if archived_only:
            conds.append("s.archived = 1")
        elif not include_archived:
            conds.append("s.archived = 0")
        if not include_hidden:
            conds.append("s.hidden = 0")
        return (" AND ".join(conds) or "1 = 1"), params

    _LIST_COLS = ("id", "source", "model", "title", "started_at", "ended_at", "end_reason",
                  "message_count", "tool_call_count", "cwd", "git_branch", "git_repo_root",
                  "session_key", "parent_session_id", "profile_name", "archived", "pinned",
                  "hidden", "last_read_at")

    def _fetch_list_rows(self, conn: Connection, ids: list[str]) -> dict[str, dict[str, Any]]:
        if not ids:
            return {}
        names = [f"i{n}" for n in range(len(ids))]
        cols = ", ".join(f"s.{c}" for c in self._LIST_COLS)
        rows = conn.execute(text(
            f"SELECT {cols}, {self._sql.last_active('s')} AS last_active, {self._sql.preview_sql('s')} AS preview "
            f"FROM sessions s WHERE s.id IN ({', '.join(':' + n for n in names)})"),
            dict(zip(names, ids))).fetchall()
        out = {}
        for r in rows:
            d = dict(zip((*self._LIST_COLS, "last_active", "preview"), r))
            d["preview"] = _preview(d["preview"])
            out[d["id"]] = d
        return out

    def list_sessions(self, *, source: str | None = None, sources: Iterable[str] | None = None,
                      exclude_sources: Iterable[str] | None = None, cwd_prefix: str | None = None,
                      session_key: str | None = None, min_message_count: int = 0,
                      include_children: bool = False, include_archived: bool = False,
                      archived_only: bool = False, include_hidden: bool = False,
                      include_pinned: bool = False, project_compression_tips: bool = True,
                      order_by_last_active: bool = False, search_query: str | None = None,
                      id_query: str | None = None, limit: int = 20,
                      offset: int = 0) -> list[SessionListRow]:
        """Conversations for a sidebar: one row per lineage, projected onto its tip (§5.2)."""
        where, params = self._where(
            source=source, sources=sources, exclude_sources=exclude_sources, cwd_prefix=cwd_prefix,
            session_key=session_key, min_message_count=min_message_count,
            include_children=include_children, exclude_delegates=False,
            include_archived=include_archived, archived_only=archived_only,
            include_hidden=include_hidden)
        params.update(limit=int(limit), offset=int(offset))
        if order_by_last_active:
            match = ""
            if search_query:
                needle = search_query.lower()
                stripped = re.sub(r"[\W_]", "", needle)
                params["needle"] = "%" + enc.escape_like(needle) + "%"
                params["needle_stripped"] = "%" + enc.escape_like(stripped) + "%" if stripped else None
                match += (" AND EXISTS (SELECT 1 FROM ch m JOIN sessions ms ON ms.id = m.id "
                          "WHERE m.root = adm.id AND (lower(COALESCE(ms.title, '')) LIKE :needle "
                          "ESCAPE '\\' OR lower(ms.id) LIKE :needle ESCAPE '\\' OR (CAST(:needle_stripped AS TEXT) "
                          "IS NOT NULL AND replace(replace(replace(replace(lower(COALESCE(ms.title, "
                          "'')), '-', ''), '_', ''), '.', ''), ' ', '') LIKE :needle_stripped "
                          "ESCAPE '\\')))")
            if id_query:
                params["idq"] = "%" + enc.escape_like(id_query) + "%"
                match += (" AND EXISTS (SELECT 1 FROM ch m WHERE m.root = adm.id "
                          "AND m.id LIKE :idq ESCAPE '\\')")
            q = text(
                f"WITH RECURSIVE adm AS (SELECT s.id, s.started_at FROM sessions s WHERE {where}), "
                "ch(root, id) AS (SELECT id, id FROM adm UNION SELECT ch.root, c.id FROM ch "
                "JOIN sessions p ON p.id = ch.id JOIN sessions c ON c.parent_session_id = p.id "
                f"WHERE {self._sql.edge('p', 'c')}), "
                f"eff AS (SELECT ch.root, MAX({self._sql.last_active('x')}) AS e FROM ch "
                "JOIN sessions x ON x.id = ch.id GROUP BY ch.root) "
                f"SELECT adm.id FROM adm JOIN eff ON eff.root = adm.id WHERE 1 = 1{match} "
                "ORDER BY eff.e DESC, adm.started_at DESC, adm.id DESC LIMIT :limit OFFSET :offset")
        else:
            q = text(f"SELECT s.id FROM sessions s WHERE {where} "
                     "ORDER BY s.started_at DESC LIMIT :limit OFFSET :offset")

        def read(conn: Connection) -> list[SessionListRow]:
            ids = [r[0] for r in conn.execute(q, params)]
            if include_pinned:
                pins = [r[0] for r in conn.execute(text(
                    f"SELECT s.id FROM sessions s WHERE {where} AND s.pinned = 1 "
                    "ORDER BY s.started_at DESC"), params)]
                ids += [p for p in pins if p not in set(ids)]
            rows = self._fetch_list_rows(conn, ids)
            project = project_compression_tips and not include_children
            chains: dict[str, list[str]] = {}
            if project:
                for sid in ids:
                    if rows[sid]["end_reason"] == "compression":
                        chain = [r[0] for r in conn.execute(self._sql.CHAIN_FROM, {"start": sid})]
                        if len(chain) > 1:
                            chains[sid] = chain
            tips = self._fetch_list_rows(conn, [c[-1] for c in chains.values()])
            out = []
            for sid in ids:
                d = dict(rows[sid])
                lineage: tuple[str, ...] = (sid,)
                root_id = None
                if sid in chains:
                    tip = tips[chains[sid][-1]]
                    for k in ("id", "ended_at", "end_reason", "message_count", "tool_call_count",
                              "last_active", "preview", "model", "cwd", "git_branch",
                              "git_repo_root"):
                        d[k] = tip[k]
                    d["title"] = tip["title"] if tip["title"] is not None else d["title"]
                    lineage, root_id = tuple(chains[sid]), sid
                out.append(_list_row(d, root_id, lineage))
            return out

        return self._read(read)

    def session_count(self, *, source: str | None = None, sources: Iterable[str] | None = None,
                      exclude_sources: Iterable[str] | None = None, cwd_prefix: str | None = None,
                      session_key: str | None = None, min_message_count: int = 0,
                      exclude_children: bool = True, include_archived: bool = False,
                      archived_only: bool = False, include_hidden: bool = False) -> int:
        """Count with the ``list_sessions`` WHERE so "load more" totals match the pages."""
        where, params = self._where(
            source=source, sources=sources, exclude_sources=exclude_sources, cwd_prefix=cwd_prefix,
            session_key=session_key, min_message_count=min_message_count,
            include_children=not exclude_children, exclude_delegates=True,
            include_archived=include_archived, archived_only=archived_only,
            include_hidden=include_hidden)
        return self._read(lambda c: c.execute(
            text(f"SELECT COUNT(*) FROM sessions s WHERE {where}"), params).scalar())

    def session_count_ge(self, n: int) -> bool:
        """True when the store holds at least ``n`` sessions (bounded: reads at most n rows)."""
        if n <= 0:
            return True
        return self._read(lambda c: c.exec_driver_sql(
            "SELECT COUNT(*) FROM (SELECT 1 FROM sessions LIMIT ?) AS capped",
            (int(n),)).scalar()) >= n

    def list_recent_sessions_bounded(self, limit: int = 20,
                                     exclude_sources: Iterable[str] | None = None,
                                     timeout_seconds: float = 3.0,
                                     candidate_limit: int | None = None,
                                     lineage_limit: int | None = None) -> list[RecentSessionRow]:
        """Latency-bounded recent browse (§5.3): one statement, interrupted past the deadline
        with :class:`TimeoutError` (never a partial list)."""
        limit = max(1, int(limit))
        cand = candidate_limit if candidate_limit is not None else max(128, 8 * limit)
        cand = min(max(cand, limit), 2048)
        lin = lineage_limit if lineage_limit is not None else min(8192, 8 * cand)
        lin = min(max(lin, cand), 8192)
        params: dict[str, Any] = {"cand": cand, "lin": lin, "limit": limit}
        excl = ""
        excluded = list(exclude_sources or [])
        if excluded:
            names = [f"x{i}" for i in range(len(excluded))]
            excl = f" AND s.source NOT IN ({', '.join(':' + n for n in names)})"
            params.update(zip(names, excluded))
        q = text(
            "WITH RECURSIVE "
            "cand(id) AS (SELECT s.id FROM sessions s WHERE s.archived = 0 AND s.hidden = 0 "
            f"AND {self._sql.J('s.model_config', '_delegate_from')} IS NULL{excl} "
            "ORDER BY COALESCE(s.last_activity_at, s.started_at) DESC, s.started_at DESC, s.id DESC "
            "LIMIT :cand), "
            "anc(id) AS (SELECT id FROM cand UNION SELECT p.id FROM anc JOIN sessions c ON c.id = anc.id "
            f"JOIN sessions p ON p.id = c.parent_session_id WHERE {self._sql.edge('p', 'c')} LIMIT :lin), "
            "roots(id) AS (SELECT a.id FROM anc a JOIN sessions r ON r.id = a.id WHERE NOT EXISTS "
            f"(SELECT 1 FROM sessions p WHERE p.id = r.parent_session_id AND {self._sql.edge('p', 'r')})), "
            "chains(root, id) AS (SELECT id, id FROM roots UNION SELECT chains.root, c.id FROM chains "
            "JOIN sessions p ON p.id = chains.id JOIN sessions c ON c.parent_session_id = p.id "
            f"WHERE {self._sql.edge('p', 'c')} LIMIT :lin), "
            f"act AS (SELECT chains.root, chains.id, {self._sql.last_active('t')} AS la, t.started_at AS st "
            "FROM chains JOIN sessions t ON t.id = chains.id), "
            "ranked AS (SELECT root, id, la, ROW_NUMBER() OVER (PARTITION BY root ORDER BY "
            "la DESC, st DESC, id DESC) AS rn FROM act) "
            "SELECT t.id, t.source, t.model, COALESCE(t.title, r.title), r.started_at, t.ended_at, "
            f"t.end_reason, t.message_count, t.tool_call_count, ranked.la, {self._sql.preview_sql('t')}, "
            "r.id, t.last_read_at FROM ranked JOIN sessions t ON t.id = ranked.id "
            "JOIN sessions r ON r.id = ranked.root WHERE ranked.rn = 1 AND r.archived = 0 "
            f"AND r.hidden = 0 AND {self._sql.listable('r')} ORDER BY ranked.la DESC, r.started_at DESC "
            "LIMIT :limit")
        deadline = time.monotonic() + timeout_seconds
        with self._reading() as conn:
            raw = conn.connection.driver_connection
            raw.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, 1000)
            try:
                rows = conn.execute(q, params).fetchall()
            except sa.exc.OperationalError as exc:
                if "interrupted" in str(exc.orig).lower():
                    raise TimeoutError(
                        f"recent-session browse exceeded {timeout_seconds} s") from exc
                raise
            finally:
                raw.set_progress_handler(None, 0)
        out = []
        for r in rows:
            la, read_at = r[9], r[12]
            out.append(RecentSessionRow(
                id=r[0], source=r[1], model=r[2], title=r[3], started_at=r[4], ended_at=r[5],
                end_reason=r[6], message_count=r[7] or 0, tool_call_count=r[8] or 0,
                last_active=la, preview=_preview(r[10]),
                lineage_root_id=r[11] if r[11] != r[0] else None,
                unread=_unread(la, read_at)))
        return out

    # -- search (§7.1–§7.3; implemented in search.py) ------------------------------------

    def search_messages(self, query: str | None, source_filter: Iterable[str] | None = None,
                        exclude_sources: Iterable[str] | None = None,
                        role_filter: Iterable[str] | None = None, limit: int = 20,
                        offset: int = 0, sort: str | None = None,
                        include_inactive: bool = False,
                        fields: Sequence[str] | None = None) -> list["SearchResult"]:
        """Full-text search over messages; never raises for any query text (see
        :func:`hermes_data.sessions.search.search_messages`)."""
        from .search import search_messages

        return self._read(lambda c: search_messages(
            c, query, source_filter=source_filter, exclude_sources=exclude_sources,
            role_filter=role_filter, limit=limit, offset=offset, sort=sort,
            include_inactive=include_inactive, fields=fields))


def _changes(conn: Connection) -> int:
    # pysqlite reports rowcount -1 for a DML statement that starts with WITH.
    return int(conn.exec_driver_sql("SELECT changes()").scalar() or 0)



def _preview(raw: str | None) -> str | None:
    if raw is None:
        return None
    p = raw.strip()
    return p[:60] + "..." if len(p) > 60 else p


def _unread(last_active: float | None, last_read_at: float | None) -> bool:
    if last_read_at is None:
        return False
    if last_active is None:
        return False
    return last_active > last_read_at


def _list_row(d: dict[str, Any], root_id: str | None, lineage: tuple[str, ...]) -> SessionListRow:
    return SessionListRow(
        id=d["id"], source=d["source"], model=d["model"], title=d["title"],
        started_at=d["started_at"], ended_at=d["ended_at"], end_reason=d["end_reason"],
        message_count=d["message_count"] or 0, tool_call_count=d["tool_call_count"] or 0,
        last_active=d["last_active"], preview=d["preview"], cwd=d["cwd"],
        git_branch=d["git_branch"], git_repo_root=d["git_repo_root"],
        session_key=d["session_key"], parent_session_id=d["parent_session_id"],
        profile_name=d["profile_name"], archived=bool(d["archived"]), pinned=bool(d["pinned"]),
        hidden=bool(d["hidden"]), last_read_at=d["last_read_at"],
        unread=_unread(d["last_active"], d["last_read_at"]),
        lineage_root_id=root_id, lineage_ids=lineage)
