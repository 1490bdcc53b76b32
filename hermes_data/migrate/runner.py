"""Upgrade, adopt and check the stores.

One path serves the CLI (``hermes-data upgrade``), ``alembic upgrade head`` (each store's
``env.py`` calls :func:`run_env`) and the tests:

1. **Fast path, read-only.** When the database is already at the requested revision (and
   is not a legacy file awaiting adoption) nothing is locked and nothing is written.
2. **Lock before Alembic reads its version table.** On SQLite one ``BEGIN IMMEDIATE``
   transaction wraps everything (a concurrent upgrader waits in ``busy_timeout`` and then
   finds the head); on PostgreSQL a session-level ``pg_advisory_lock`` on the very
   connection handed to Alembic; in-process a ``threading.Lock`` (Alembic's context is
   module-global).
3. **Adopt** (store hook): a legacy file is inspected and stamped at the revision its real
   shape proves.
4. **Run the revisions** inside that one transaction (``transactional_ddl=True``,
   ``transaction_per_migration=False``): a failing step rolls back everything, including
   the ledger rows and the Alembic version.
5. **Reconcile** (store hook): add-only repair towards the head metadata, then verify.
"""

from __future__ import annotations

import importlib
import logging
import logging.config
import os
import random
import sqlite3
import sys
import threading
import time
import warnings
import zlib
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, cast

import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection, Engine

from hermes_data.migrate.collation import server_collation_warning
from hermes_data.config import check_store, resolve_url, sqlite_path
from hermes_data.engine import (SqliteSettings, create_engine_for, journal_state, keeping_journal_mode,
                                planned_journal_state)
from hermes_data.errors import (ConfigurationError, NotAHermesDatabaseError, ProductionStateDbError,
                     StoreBehindError, StoreNotCreatedError, StoreNotWritableError,
                     store_io_error)
from hermes_data.files import link_target, make_owner_only, refuse_dangling_link
from hermes_data.isolation import ensure_test_isolation
from hermes_data.locking import driver_error
from hermes_data.migrate import reading
from hermes_data.migrate.fresh import create_fresh, is_new_file, owner_only_journal
# SQLite lock kinds only: the upgrade's patience waits out a lock on the *file* (a sibling
# creating or upgrading it); a PostgreSQL deadlock or lock timeout in an upgrade has always
# been raised at once, and still is.
from hermes_data.migrate.integrity import (cannot_open_or_write, corrupt_error,
                                          is_sqlite_lock_conflict, sqlite_check)
from hermes_data.migrate.spec import StoreSpec, UpgradeReport, current_revision
from hermes_data.migrate.shape import Difference, diff_shapes, live_shape

if TYPE_CHECKING:  # Alembic is imported lazily: a settled database never needs it
    from alembic.config import Config
    from alembic.script import ScriptDirectory

log = logging.getLogger("hermes_data.migrate.runner")


def _migrations_dir(package: Path | None = None) -> Path:
    """The Alembic environments: the package hermes_data.migrations inside an installed wheel
    (setup.py copies the top-level migrations/ there), else <repo>/migrations beside the
    hermes_data package of a checkout or an editable install.

    Located by path, not imported: in a checkout hermes_data.migrations does not exist (any
    other hermes-data install's import hook could otherwise answer for it)."""
    if package is None:
        package = Path(__file__).resolve().parent.parent  # hermes_data/
    shipped = package / "migrations"
    if shipped.is_dir():
        if not (shipped / "telemetry" / "env.py").is_file():
            # E.g. a hermes_data/migrations/ holding only __pycache__, left in a checkout from
            # before the scripts moved to the top level.
            raise ConfigurationError(
                f"{shipped} holds no telemetry/env.py (a stale hermes_data/migrations/ "
                "directory shadows the top-level migrations/? delete it)")
        return shipped
    checkout = package.parent / "migrations"
    if not (checkout / "telemetry" / "env.py").is_file():
        raise ConfigurationError(
            f"no Alembic scripts: neither {shipped} (installed wheel) nor {checkout} (checkout) "
            "holds telemetry/env.py")
    return checkout


MIGRATIONS_DIR = _migrations_dir()

#: Alembic's migration context is module-global: one Alembic command per process at a time.
#: Held around the whole command (loading env.py included) and again, re-entrantly, where
#: env.py runs the migration (the ``alembic`` CLI enters there).
_process_lock = threading.RLock()


def script_location(spec: StoreSpec) -> Path:
    """The Alembic scripts of ``spec``'s store."""
    return MIGRATIONS_DIR / spec.name


#: Store migration modules define ``SPEC`` and import :mod:`.migration_spec`, never this module.
_SPEC_MODULES = {
    "telemetry": "hermes_data.telemetry.migration",
    "sessions": "hermes_data.sessions.storage.adoption",
}


def store_spec(store: str) -> StoreSpec:
    """The :class:`StoreSpec` of ``store`` (each store module defines ``SPEC``)."""
    check_store(store)
    module = sys.modules.get(_SPEC_MODULES[store])  # every open asks: import when needed
    if module is None or getattr(module.__spec__, "_initializing", False):  # (or importing)
        module = importlib.import_module(_SPEC_MODULES[store])
    return module.SPEC


def alembic_config(store: str, url: str | os.PathLike | URL | None = None) -> Config:
    """An Alembic :class:`Config` for ``store`` that works from an installed wheel."""
    from alembic.config import Config

    spec = store_spec(store)
    cfg = Config()
    cfg.set_main_option("script_location", str(script_location(spec)))
    cfg.attributes["hermes_store"] = store
    if url is not None:
        cfg.attributes["hermes_url"] = url
    return cfg


def head_revision(store: str) -> str:
    """The head revision id of ``store``'s history."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory(str(script_location(store_spec(store))))
    head = script.get_current_head()
    if head is None:
        raise ConfigurationError(f"the {store} store's migration history has no head revision")
    return head


def _settings_for(spec: StoreSpec) -> SqliteSettings:
    return SqliteSettings(busy_timeout_ms=spec.busy_timeout_ms)


#: How long :func:`upgrade` waits out a lock another connection holds (then its error).
UPGRADE_PATIENCE_S = 30.0


def upgrade(store: str, url: str | os.PathLike | URL | None = None,
            revision: str = "head", *, probed: bool = False,
            settings: SqliteSettings | None = None, fast_create: bool = True,
            patience_s: float = UPGRADE_PATIENCE_S, hook_options: Any = None) -> UpgradeReport:
    """Create or upgrade ``store`` at ``url`` (default location when ``None``) to ``revision``.

    Adopts legacy files in place. Returns an :class:`UpgradeReport`; raises on failure,
    leaving the database as it was. A foreign file raises :class:`NotAHermesDatabaseError`,
    a damaged one :class:`CorruptDatabaseError`, both before anything touches it.
    ``probed=True``: the caller has just run :func:`probe_file` (with its check) on this file.
    ``settings``: the SQLite engine settings of the caller's store handle (journal mode,
    busy timeout …), so the file is created the way the handle will use it; default: the
    store's own.
    ``fast_create``: a missing or zero-byte SQLite file is created at the head in one
    transaction without Alembic (:mod:`hermes_data.migrate.fresh`, proven identical to the revision
    path); ``False`` runs every revision (the tests that compare the two paths).
    ``patience_s``: a lock held elsewhere past the busy timeout (a sibling creating or
    upgrading the file under load) is waited out this long — every attempt is one
    transaction, rolled back whole — then raised; 0 leaves retrying to the caller.
    ``hook_options``: opaque to the runner — the opening handle's options, handed to the
    store's ``create_head`` and ``after_upgrade`` hooks (None: the store's defaults).
    A SQLite file of the real Hermes home is refused from a test process
    (:class:`~hermes_data.errors.ProductionStateDbError`) before anything is read or created.
    """
    path = sqlite_path(resolve_url(store, url))
    if path is not None:  # first: before any mkdir, probe or connection (issue 31 item 5)
        ensure_test_isolation(path)
    deadline = time.monotonic() + patience_s
    while True:
        try:
            try:
                return _upgrade_once(store, url, revision, probed, settings, fast_create,
                                     hook_options)
            except (sa.exc.DBAPIError, sqlite3.Error, OSError) as exc:
                # An I/O fault (issue 31): one typed error naming the file; a lock conflict
                # is not one and is retried below.
                if path is None or is_sqlite_lock_conflict(exc) or \
                        (io := store_io_error(exc, str(path), "upgrade")) in (None, exc):
                    raise
                raise io from exc  # each step is one transaction: the failed one rolled back
        except (sa.exc.OperationalError, sqlite3.OperationalError) as exc:
            if not is_sqlite_lock_conflict(exc) or time.monotonic() >= deadline:
                raise
            log.info("upgrade of %s waits for a lock held elsewhere: %s", store, exc)
            time.sleep(random.uniform(0.05, 0.2))


def _upgrade_once(store: str, url: str | os.PathLike | URL | None, revision: str,
                  probed: bool, settings: SqliteSettings | None,
                  fast_create: bool, hook_options: Any = None) -> UpgradeReport:
    resolved = resolve_url(store, url)
    refuse_dangling_link(sqlite_path(resolved))
    if revision == "head" and fast_create and is_new_file(resolved):
        report = UpgradeReport(store=store, url=display_url(resolved))
        with _process_lock:
            if create_fresh(store_spec(store), resolved, settings, report, hook_options):
                return report
        # A sibling created the file meanwhile: the ordinary path finds it (at the head).
    if revision == "head" and not probed:
        settled = _settled_report(store, url, settings)
        if settled is not None:
            return settled
    from alembic import command

    cfg = alembic_config(store, url)
    report = UpgradeReport(store=store, url=display_url(resolve_url(store, url)))
    cfg.attributes["hermes_report"] = report
    cfg.attributes["hermes_probed"] = probed
    cfg.attributes["hermes_settings"] = settings
    cfg.attributes["hermes_hook_options"] = hook_options
    with _process_lock:
        command.upgrade(cfg, revision)
    return report


def _settled_report(store: str, url, settings: SqliteSettings | None = None
                    ) -> UpgradeReport | None:
    """Read-only check, without Alembic, that the store is already at its head with nothing
    to adopt; returns the up-to-date report, or ``None`` when the full path must run."""
    spec = store_spec(store)
    resolved = resolve_url(store, url)
    path = sqlite_path(resolved)
    if spec.head is None or (path is not None and (not path.exists() or path.stat().st_size == 0)):
        return None
    started = time.perf_counter()
    # A foreign file is refused before any policy touches it; a file that is not at the
    # head goes to the full path, whose preflight runs the corruption check.
    if path is not None and spec.identify is not None:
        if probe_file(spec, path, checked=False).revision != spec.head:
            return None
    engine = create_engine_for(store, resolved, settings or _settings_for(spec))
    try:
        with engine.connect() as conn, conn.begin():
            if current_revision(conn, spec.version_table_for(conn)) != spec.head:
                return None
            if spec.needs_adoption and spec.needs_adoption(conn):
                return None
        mode = journal_state(engine).mode if engine.dialect.name == "sqlite" else "n/a"
    finally:
        engine.dispose()
    report = UpgradeReport(store=store, url=display_url(resolved), before_revision=spec.head,
                           after_revision=spec.head, up_to_date=True, journal_mode=mode)
    if path is not None:
        changed = make_owner_only(path)
        if changed:
            report.repairs.append(f"permissions set to 0600: {', '.join(changed)}")
    report.seconds = time.perf_counter() - started
    log.info("%s store already at %s; nothing to do", store, spec.head)
    return report


def display_url(url: URL) -> str:
    """``url`` as text with any password hidden."""
    return url.render_as_string(hide_password=True)


def _pg_lock_key(store: str) -> int:
    # A stable signed 63-bit key per store for pg_advisory_lock.
    return zlib.crc32(f"hermes-data:{store}".encode()) & 0x7FFFFFFF


def _guard_env_target(store: str, url: Any) -> None:
    # The test isolation guard of upgrade(), for a bare `alembic` run (issue 31 item 5): a
    # production SQLite file refused as one `FAILED:` line (docs/alembic.md, Running Alembic).
    path = sqlite_path(resolve_url(store, url))
    if path is None:
        return
    try:
        ensure_test_isolation(path)
    except ProductionStateDbError as exc:
        from hermes_data.errors import ProductionStateDbCommandError

        raise ProductionStateDbCommandError(exc.path, exc.root) from None


def run_env(store: str, include_object: Callable[..., bool] | None = None) -> None:
    """Body of each store's Alembic ``env.py``.

    The URL comes from the caller (``Config.attributes``), ``-x url=…`` or the store's
    environment variable / default location (see :mod:`hermes_data.config`).
    ``include_object``: the store's Alembic ``include_object`` hook (its ``env.py`` says which
    differences Alembic's comparison must not report, object by object, and why).
    """
    from alembic import context

    spec = store_spec(store)
    cfg = context.config
    if context.is_offline_mode():
        from hermes_data.errors import OfflineModeError  # a CommandError: one FAILED: line

        raise OfflineModeError(
            f"offline (--sql) mode is not supported for the {store} store: migrations inspect "
            "the live database (adoption, every revision); run `alembic upgrade head` or "
            "`hermes-data upgrade` against it instead"
        )
    external = cfg.attributes.get("connection")
    url = cfg.attributes.get("hermes_url") or context.get_x_argument(as_dictionary=True).get("url")
    if not isinstance(external, (Connection, sa.engine.Engine)):
        _guard_env_target(store, url)  # first: before any mkdir, probe or connection
    if cfg.config_file_name and not cfg.attributes.get("hermes_report") and not logging.getLogger().handlers:
        # Invoked by the alembic command line: use alembic.ini's logging section.
        logging.config.fileConfig(cfg.config_file_name, disable_existing_loggers=False)
    if isinstance(external, Connection):
        # A caller owns the connection, its transaction and its locking.
        _run_on(external, spec, context, on_apply=None, include_object=include_object)
        return
    if not _is_migration_command(context):
        # Not an upgrade/downgrade (e.g. autogenerate or `alembic check`): compare only,
        # no adoption, no reconciliation, no write lock.
        engine = external if isinstance(external, sa.engine.Engine) else create_engine_for(
            store, url, _settings_for(spec))
        with engine.connect() as conn, conn.begin(), warnings.catch_warnings():
            # SQLAlchemy cannot reflect expression indexes (idx_sessions_effective_activity)
            # on SQLite, so autogenerate skips them and warns twice; the store's own shape
            # comparison (`hermes-data check`, PRAGMA index_info) checks them instead.
            warnings.filterwarnings("ignore", category=sa.exc.SAWarning,
                                    message="Skipped unsupported reflection of expression-based index")
            warnings.filterwarnings("ignore", message="autogenerate skipping metadata-specified "
                                                      "expression-based index")
            _run_on(conn, spec, context, on_apply=None, include_object=include_object)
        return
    if isinstance(external, sa.engine.Engine):
        # A caller (e.g. pytest-alembic) hands an Engine: same locked path as ours.
        report = UpgradeReport(store=store, url=display_url(external.url))
        with external.connect() as conn:
            _run_locked(conn, spec, context, context.script, context.get_revision_argument(), report)
        return
    resolved = resolve_url(store, url)
    report = cfg.attributes.get("hermes_report") or UpgradeReport(
        store=store, url=display_url(resolved)
    )
    started = time.perf_counter()
    if not cfg.attributes.get("hermes_probed"):
        _preflight(spec, resolved)
    new_file = sqlite_path(resolved)
    created = new_file is not None and (not new_file.exists() or new_file.stat().st_size == 0)
    settings = cfg.attributes.get("hermes_settings") or _settings_for(spec)
    kept = None if created or new_file is None else keeping_journal_mode(new_file, settings)
    engine = create_engine_for(store, resolved, kept or settings)
    script = context.script
    destination = context.get_revision_argument()
    try:
        with engine.connect() as conn:
            _run_locked(conn, spec, context, script, destination, report,
                        cfg.attributes.get("hermes_hook_options"))
        if kept is not None:  # the journal policy once committed (keeping_journal_mode)
            engine.dispose()
            engine = create_engine_for(store, resolved, settings)
            engine.connect().close()
        if new_file is not None and new_file.exists():
            # Owner-only, by path: never open+fchmod+close (closing any descriptor of the
            # file drops every POSIX lock this process holds on it).
            changed = make_owner_only(new_file) + owner_only_journal(new_file)
            if changed and not created:  # a file created just now is not a repair
                report.repairs.append(f"permissions set to 0600: {', '.join(changed)}")
        report.journal_mode = journal_state(engine).mode if engine.dialect.name == "sqlite" else "n/a"
    finally:
        engine.dispose()
        report.seconds = time.perf_counter() - started


def _is_migration_command(context) -> bool:
    """True for upgrade/downgrade/stamp; False for autogenerate and ``alembic check``."""
    try:
        context.get_revision_argument()
    except KeyError:
        return False
    return True


#: Which SQLite check guards which path (README "Corrupt files", measured there):
#: adopting an unversioned legacy file runs the full ``integrity_check`` (it also compares
#: every index with its table, which ``quick_check`` skips — a legacy file is about to be
#: rewritten, and a missing index entry would be carried into the adopted store); upgrading
#: one of our own versioned files that is behind runs ``quick_check`` (pages, records,
#: freelist); a settled open runs neither (it reads the version and nothing else — damage
#: found later quarantines the handle); ``doctor`` runs ``integrity_check``.
CHECK_FOR_KIND = {"legacy": "integrity_check", "upstream": "integrity_check",
                  "alembic": "quick_check", "ours": "quick_check"}
#: Read-only probe: is there an Alembic version table, and what does it hold?
_SQL_HAS_ALEMBIC = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'alembic_version'"
_SQL_ALEMBIC_REVISION = "SELECT version_num FROM alembic_version"


def not_writable(path: Path, exc: BaseException) -> StoreNotWritableError | None:
    """The refusal for an SQLite error that only means ``path`` cannot be written here (issue
    31): a ``SQLITE_CANTOPEN`` / ``SQLITE_READONLY`` error (``unable to open database file``,
    ``attempt to write a readonly database``) while the directory holding the file (its link
    target's), or an existing ``-wal``/``-shm`` there, is not writable by this process — a WAL
    database in a read-only directory, where SQLite cannot create its ``-shm``/``-wal``. Names
    that directory (or sidecar); None when the error is something else or everything is
    writable (the caller's own refusal stands)."""
    if not cannot_open_or_write(exc):
        return None
    orig = driver_error(exc)
    target = link_target(path) or Path(path)
    directory = target.parent
    if not os.access(directory, os.W_OK | os.X_OK):
        return StoreNotWritableError(
            str(directory), f"chmod u+w {directory}",
            f"{path}: not writable: its directory {directory} is not writable by this "
            f"process, so SQLite cannot create {target.name}-shm / {target.name}-wal beside "
            f"the WAL database ({orig}); the file itself is not damaged and was left "
            f"unchanged. Make the directory writable (chmod u+w {directory}) or open a copy "
            "in a writable directory")
    for suffix in ("-wal", "-shm"):
        side = Path(f"{target}{suffix}")
        if side.exists() and not os.access(side, os.R_OK | os.W_OK):
            return StoreNotWritableError(
                str(side), f"chmod u+rw {side}",
                f"{path}: not writable: {side} is not readable and writable by this process "
                f"({orig}); the file itself is not damaged and was left unchanged. Run: "
                f"chmod u+rw {side}")
    return None


def read_only_connect(path: Path, timeout: float = 30.0) -> sqlite3.Connection:
    """A connection to an existing file for probes that must not write: ``mode=ro``, or a
    private rolled-back snapshot when a hot rollback journal blocks read-only readers
    (:func:`hermes_data.migrate.reading.connect`, docs/cli.md "Reading a store without writing it")."""
    if path.is_dir():
        raise NotAHermesDatabaseError(f"{path}: is a directory, not a database file; "
                                      "nothing was changed")
    try:
        return reading.connect(path, timeout=timeout)
    except sqlite3.Error as exc:
        if (io := store_io_error(exc, str(path), "opening it read-only", writing=False)):
            raise io from exc  # the storage failed the open: not a refusal (issue 31)
        raise NotAHermesDatabaseError(f"{path}: cannot be opened as SQLite ({exc}); "
                                      "the file was left unchanged") from exc


@dataclass
class Probe:
    """What the read-only preflight found in an existing SQLite file."""

    kind: str
    revision: str | None = None


def probe_file(spec: StoreSpec, path: Path, *, checked: bool = True,
               con: sqlite3.Connection | None = None) -> Probe:
    """Identify an existing, non-empty SQLite file of ``spec``'s store read-only, before any
    connection policy touches it, so a foreign or corrupt file is refused byte-for-byte
    unchanged. With ``checked``, files that are about to be written (anything but a settled
    store at its head) get the check :data:`CHECK_FOR_KIND` names."""
    own = con is None
    # (identify_file below is the same identification on an existing connection.)
    # The store's own busy timeout (1 s for the session store, whose open retries with
    # jitter within its patience budget; 30 s for telemetry).
    con = read_only_connect(path, spec.busy_timeout_ms / 1000) if con is None else con
    try:
        try:
            try:
                kind = str(spec.identify(con)) if spec.identify is not None else "unknown"
            except NotAHermesDatabaseError as exc:
                if str(path) in str(exc):
                    raise
                raise type(exc)(f"{path}: {exc}") from exc
            revision = None
            if con.execute(_SQL_HAS_ALEMBIC).fetchone():
                rows = con.execute(_SQL_ALEMBIC_REVISION).fetchall()
                revision = str(rows[0][0]) if len(rows) == 1 else None
        except sqlite3.DatabaseError as exc:
            message = str(exc)
            if is_sqlite_lock_conflict(exc):
                raise  # contention, not damage (the session store's open retries it)
            if "not a database" in message:
                raise NotAHermesDatabaseError(
                    f"{path}: not an SQLite database ({message}); refused, the file was left "
                    "unchanged") from exc
            if (unwritable := not_writable(path, exc)) is not None:
                raise unwritable from exc  # a read-only directory, not damage (issue 31)
            raise refusal_for(spec, path, exc) from exc  # an I/O error is not damage (issue 31)
        pragma = CHECK_FOR_KIND.get(kind)
        if checked and pragma is not None and revision != spec.head:
            try:
                problems = sqlite_check(con, pragma)
            except sqlite3.DatabaseError as exc:
                if is_sqlite_lock_conflict(exc):
                    raise
                raise refusal_for(spec, path, exc) from exc
            if problems:
                raise corrupt_error(path, pragma, problems, spec.name)
        return Probe(kind, revision)
    finally:
        if own:
            con.close()


def identify_file(spec: StoreSpec, path: Path, conn: Connection | sqlite3.Connection) -> str:
    """:attr:`StoreSpec.identify` on a connection the caller already holds (the session
    store's writer, when its connection policy provably wrote nothing): the same refusals as
    :func:`probe_file`, naming ``path``; no corruption check."""
    try:
        # Both stores' identify() take a plain sqlite3 or an SQLAlchemy connection.
        return str(spec.identify(cast(Any, conn))) if spec.identify is not None else "unknown"
    except NotAHermesDatabaseError as exc:
        if str(path) in str(exc):
            raise
        raise type(exc)(f"{path}: {exc}") from exc
    except (sa.exc.DatabaseError, sqlite3.DatabaseError) as exc:
        raise refusal_for(spec, path, exc) from exc


def refusal_for(spec: StoreSpec, path: Path, exc: BaseException) -> BaseException:
    """The refusal an SQLite error on an unidentified file means; a lock conflict is
    returned as it is (contention, not damage)."""
    message = str(getattr(exc, "orig", None) or exc)
    if is_sqlite_lock_conflict(exc):
        return exc
    if "not a database" in message:
        return NotAHermesDatabaseError(
            f"{path}: not an SQLite database ({message}); refused, the file was left unchanged")
    return (not_writable(path, exc)
            or store_io_error(exc, str(path), "reading the schema", writing=False)
            or corrupt_error(path, "schema read", [message], spec.name))


def _preflight(spec: StoreSpec, url: URL, *, checked: bool = True) -> None:
    """:func:`probe_file` on an existing, non-empty SQLite file (else nothing)."""
    path = sqlite_path(url)
    if path is None or spec.identify is None or not path.exists() or path.stat().st_size == 0:
        return
    probe_file(spec, path, checked=checked)


def _resolve_destination(script: ScriptDirectory, destination) -> str | None:
    if isinstance(destination, (tuple, list)):
        destination = destination[0] if len(destination) == 1 else None
    if destination in (None, "base"):
        return None
    if destination == "heads":
        destination = "head"
    try:
        rev = script.get_revision(destination)
    except Exception:
        return None
    return rev.revision if rev is not None else None


def _check_own_history(conn: Connection, spec: StoreSpec, script: ScriptDirectory) -> None:
    """Refuse a database whose Alembic version belongs to another history (the other store,
    or another application sharing the database) before anything is locked or written."""
    with conn.begin():
        rev = current_revision(conn, spec.version_table_for(conn))
    if rev is None:
        return
    try:
        known = script.get_revision(rev) is not None
    except Exception:
        known = False
    if not known:
        raise NotAHermesDatabaseError(
            f"this database's alembic_version is {rev!r}, which is not a revision of the "
            f"{spec.name} store (is the URL pointing at the other store or another application's "
            "database?); nothing was changed"
        )


def _is_current(conn: Connection, spec: StoreSpec, target: str | None) -> bool:
    """Read-only: is the database already at ``target`` with nothing to adopt?"""
    with conn.begin():
        if target is None:
            return False
        rev = current_revision(conn, spec.version_table_for(conn))
        if rev is None:
            return False
        return rev == target and not (spec.needs_adoption and spec.needs_adoption(conn))


def _run_locked(conn: Connection, spec: StoreSpec, context, script: ScriptDirectory,
                destination, report: UpgradeReport, hook_options: Any = None) -> None:
    target = _resolve_destination(script, destination)
    _check_own_history(conn, spec, script)
    if _is_current(conn, spec, target):
        report.before_revision = report.after_revision = target
        report.up_to_date = True
        log.info("%s store already at %s; nothing to do", spec.name, target)
        return
    pg = conn.dialect.name == "postgresql"
    if pg:
        with conn.begin():
            warning = server_collation_warning(conn)
        if warning:
            log.warning("%s", warning)
            report.warnings.append(warning)
    with _process_lock:
        if pg:
            conn.exec_driver_sql(f"SELECT pg_advisory_lock({_pg_lock_key(spec.name)})")
            conn.commit()
        try:
            conn.execution_options(hermes_begin="IMMEDIATE")
            with conn.begin():
                version_table = spec.version_table_for(conn)
                report.before_revision = current_revision(conn, version_table)
                if (target is not None and report.before_revision == target
                        and not (spec.needs_adoption and spec.needs_adoption(conn))):
                    # Another process finished the upgrade while we waited for the lock.
                    report.after_revision, report.up_to_date = target, True
                    return
                if spec.before_upgrade:
                    t0 = time.perf_counter()
                    spec.before_upgrade(conn, report)
                    report.step_seconds["adopt"] = time.perf_counter() - t0
                marks = [time.perf_counter()]

                def _on_apply(*, ctx, step, heads, run_args) -> None:
                    now = time.perf_counter()
                    rev = step.up_revision_id if step.is_upgrade else step.down_revision_ids
                    report.applied.append(str(rev))
                    report.step_seconds[str(rev)] = now - marks[-1]
                    marks.append(now)

                _run_on(conn, spec, context, on_apply=_on_apply)
                # Reconcile towards the head metadata only when the head was the target.
                if (spec.after_upgrade
                        and current_revision(conn, version_table) == script.get_current_head()):
                    t0 = time.perf_counter()
                    spec.after_upgrade(conn, report, hook_options)
                    report.step_seconds["reconcile"] = time.perf_counter() - t0
                report.after_revision = current_revision(conn, version_table)
        finally:
            conn.execution_options(hermes_begin="DEFERRED")
            if pg:
                if conn.in_transaction():
                    conn.rollback()
                conn.exec_driver_sql(f"SELECT pg_advisory_unlock({_pg_lock_key(spec.name)})")
                conn.commit()
    log.info("%s store upgraded %s -> %s (%s)", spec.name, report.before_revision,
             report.after_revision, ", ".join(report.applied) or "no revisions")


def compared_names(conn: Connection, spec: StoreSpec) -> Callable[[Any, str, Any], bool]:
    """Alembic's ``include_name`` for ``spec``'s store on ``conn``: every live table but
    SQLite's and Alembic's own, the store's non-ordinary tables
    (:meth:`StoreSpec.compared_table`) and, on a server database the two stores may share,
    the other store's tables and version table (not foreign objects of this one)."""
    others: set[str] = set()
    if conn.dialect.name != "sqlite":
        for other in (store_spec(n) for n in _SPEC_MODULES if n != spec.name):
            others.update(other.server_tables(), {other.version_table_for(conn)})

    def include_name(name: Any, type_: str, parent_names: Any) -> bool:
        if type_ == "table":
            return spec.compared_table(str(name)) and name not in others
        return True

    return include_name


def _run_on(conn: Connection, spec: StoreSpec, context, on_apply,
            include_object: Callable[..., bool] | None = None) -> None:
    context.configure(
        connection=conn,
        # What autogenerate and `alembic check` compare with (the revisions never read it).
        target_metadata=spec.metadata_on(conn.dialect.name),
        transactional_ddl=True,
        transaction_per_migration=False,
        include_name=compared_names(conn, spec),
        include_object=include_object,
        on_version_apply=on_apply,
        compare_type=True,
        compare_server_default=False,
        version_table=spec.version_table_for(conn),
    )
    with context.begin_transaction():
        context.run_migrations()


def not_created(store: str, url: str | os.PathLike | URL | None = None) -> Path | None:
    """The SQLite file of ``store`` when it does not exist yet (missing or zero bytes), else
    ``None``. Looks at the path only: creates nothing."""
    path = sqlite_path(resolve_url(store, url))
    if path is None:
        return None
    try:
        return path if path.stat().st_size == 0 else None
    except FileNotFoundError:
        return path


def require_created(store: str, url: str | os.PathLike | URL | None = None) -> None:
    """For commands that only look: raise :class:`StoreNotCreatedError` (naming the command
    that creates the store) instead of letting a connection create an empty file."""
    path = not_created(store, url)
    if path is not None:
        where = "" if url is None else f" --url {path}"
        raise StoreNotCreatedError(
            f"{path}: the {store.rstrip('s')} store is not created yet; nothing was created "
            f"(run: hermes-data upgrade --store {store}{where})")


def require_settled(store: str, url: str | os.PathLike | URL | None = None) -> None:
    """For commands that only look (``search``, ``prune`` without ``--apply``, ``export``,
    ``stats``): refuse an existing SQLite file that is not ``store``'s at its head, before
    anything opens it with a policy — a foreign file (:class:`NotAHermesDatabaseError`), an
    SQLite file without tables, a legacy file not yet adopted or an older revision
    (:class:`~hermes_data.errors.StoreBehindError`, naming the file and ``hermes-data
    upgrade``). Read-only (:func:`probe_file`): the file stays byte-identical. A missing
    file is :func:`require_created`'s; a server database is left to the store's own open."""
    require_created(store, url)
    path = sqlite_path(resolve_url(store, url))
    spec = store_spec(store)
    if path is None or spec.identify is None:
        return
    probe = probe_file(spec, path, checked=False)
    if probe.revision == spec.head and probe.kind not in ("legacy", "upstream"):
        return
    upgrade = f"hermes-data upgrade --store {store} --url {path}"
    if probe.kind == "empty":
        raise StoreBehindError(
            f"{path}: holds no {store.rstrip('s')} store (an SQLite file without tables); "
            f"refused, nothing was changed (to make it one: {upgrade})")
    state = ("a legacy file not yet adopted" if probe.kind in ("legacy", "upstream")
             else f"at revision {probe.revision or '(none)'}, behind the head {spec.head}")
    raise StoreBehindError(
        f"{path}: the {store.rstrip('s')} store is {state}; this command only reads and "
        f"left it unchanged (run: {upgrade})")


def check(store: str, url: str | os.PathLike | URL | None = None) -> list[Difference]:
    """Compare the live schema of ``store`` with its head; read-only.

    Returns every :class:`~hermes_data.migrate.shape.Difference`; ``extra_*`` entries are
    informational (foreign objects are left alone), the others are drift. A store that does
    not exist yet raises :class:`StoreNotCreatedError` (nothing is created).
    """
    spec = store_spec(store)
    require_created(store, url)
    with looking(store, url) as conn:
        return store_differences(conn, spec)


def reading_engine(store: str, url: str | os.PathLike | URL | None = None) -> Engine:
    """An engine that only reads ``store`` at ``url``: on a SQLite file one connection from
    :func:`read_only_connect` — no journal-mode switch, no pragma, nothing created, adopted
    or written, a hot journal read through a rolled-back snapshot (docs/cli.md "Reading a
    store without writing it"); on PostgreSQL the store's engine. The caller disposes it."""
    spec = store_spec(store)
    resolved = resolve_url(store, url)
    path = sqlite_path(resolved)
    if path is None:
        return create_engine_for(store, resolved, _settings_for(spec))
    timeout = spec.busy_timeout_ms / 1000
    # One DB-API connection per pool, no policy: the engine only lends it to SQLAlchemy
    # (one snapshot, when a hot journal needs one, for every statement of the command).
    return sa.create_engine(resolved, creator=lambda: read_only_connect(path, timeout),
                            poolclass=sa.pool.StaticPool)


@contextmanager
def looking(store: str, url: str | os.PathLike | URL | None = None) -> Iterator[Connection]:
    """A connection of :func:`reading_engine` for a command that only looks at ``store``
    (``status``, ``check``, ``doctor``, ``stats``). The caller refuses a missing file first
    (:func:`require_created`)."""
    engine = reading_engine(store, url)
    try:
        with engine.connect() as conn:
            yield conn
    finally:
        engine.dispose()


def store_differences(conn: Connection, spec: StoreSpec) -> list[Difference]:
    """Differences between the live database behind ``conn`` and ``spec``'s head shape."""
    actual = live_shape(conn)
    # On PostgreSQL both stores may share one database: the other store's tables are not
    # foreign objects of this one.
    others: set[str] = set()
    if conn.dialect.name != "sqlite":
        for other in (store_spec(n) for n in _SPEC_MODULES if n != spec.name):
            others.update(other.server_tables(), {other.version_table_for(conn)})
    for name in [t for t in actual.tables if spec.ignore_table(t) or t in others]:
        del actual.tables[name]
    for name in [i for i, ix in actual.indexes.items() if ix.table not in actual.tables]:
        del actual.indexes[name]
    return diff_shapes(spec.head_shape_for(conn), actual)


@dataclass
class StoreStatus:
    """Where a store lives and what state it is in (``hermes-data status``)."""

    store: str
    url: str
    exists: bool
    revision: str | None = None
    head: str | None = None
    journal_mode: str | None = None
    journal_reason: str | None = None
    size_bytes: int | None = None
    legacy: bool = False
    #: The resolved target when the store's path is a symbolic link (we operate on it).
    link_target: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def status(store: str, url: str | os.PathLike | URL | None = None) -> StoreStatus:
    """Read-only status of ``store``; never creates the database."""
    spec = store_spec(store)
    resolved = resolve_url(store, url)
    path = sqlite_path(resolved)
    # The written-down head (a test keeps it equal to the scripts): status loads no Alembic.
    st = StoreStatus(store=store, url=display_url(resolved), exists=True,
                     head=spec.head or head_revision(store))
    if path is not None:
        st.exists = path.exists() and path.stat().st_size > 0
        target = link_target(path)
        st.link_target = None if target is None else str(target)
        if not st.exists:
            return st
        st.size_bytes = sum(
            p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists()
        )
        # A foreign file is named, never opened with the store's connection policy.
        probe_file(spec, path, checked=False)
    with looking(store, resolved) as conn:  # read-only: the policy switches nothing here
        with conn.begin():
            st.revision = current_revision(conn, spec.version_table_for(conn))
            st.legacy = bool(spec.needs_adoption and spec.needs_adoption(conn))
        if path is not None:
            dbapi = cast(sqlite3.Connection, conn.connection.driver_connection)
            current = str(dbapi.execute("PRAGMA journal_mode").fetchone()[0]).lower()
            pages = int(dbapi.execute("PRAGMA page_count").fetchone()[0])
            js = planned_journal_state(str(path), current, has_pages=pages > 0,
                                       settings=_settings_for(spec))
            st.journal_mode, st.journal_reason = js.mode, js.reason
    return st
