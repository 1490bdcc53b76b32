"""The writer connection of a SQLite session-store handle, and the settled open (issue 14).

A handle's writer is one DB-API connection opened here, identified (the store's identity
rule) before the connection policy touches the file, then configured (busy timeout first,
the journal-mode policy, ``synchronous``, ``journal_size_limit``, configured pragmas,
foreign keys) and handed to the handle's engine as its first pool connection
(:func:`hermes_data.engine.create_handle_engine`: the process's dialect and compiled cache,
no per-engine set-up).

**Settled stamps.** The first open of a file in a process reads everything (the identity
rule's catalogue, the revision, the core shape, the FTS objects and probes, the gated heals).
When that shows a settled file — nothing to write — the process remembers, per file
(``st_dev``, ``st_ino``), what those reads depend on: the schema cookie (``PRAGMA
schema_version``), ``application_id`` (random per store, minted with the generation token),
the generation token and revision, the whole catalogue as text (``PRAGMA writable_schema``
edits change it without bumping the cookie), and the answers derived from it (FTS layout,
which FTS tables this build can load). A later open of the same file compares the cookie and
``application_id`` before the connection policy — the file's own header bytes, read through
the open's lease, in either journal mode; two header-reading statements when those differ
(:func:`.open_file.header_stamp` says why a WAL file's bytes may answer) — and, when they match,
skips the identity rule's and the other catalogue reads: one read transaction re-reads, in one
statement (:data:`~hermes_data.sessions.storage.opening_sql.SETTLED_PROBE`), the catalogue text and
the data the gates depend on (revision, generation token, ``fts_storage_version``,
``fts_stale``, NULL ``active``, the CJK-bigram index's stale flag), then the cookie and
``application_id`` (in rollback-journal mode the header bytes under the transaction's read
lock); the display triggers' stored SQL is part of the catalogue text.
Anything that differs — a schema change, another file at the path, a stale index, a row to
heal, forced FTS capabilities — falls back to the full reads (and they write only what they
prove is needed, docs/sessions.md §8.4).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from sqlalchemy.engine import Connection

from hermes_data.migrate import runner as migrate
from hermes_data.engine import JournalState, SqliteSettings, configure_sqlite_connection, sqlite_dialect_kit
from hermes_data.files import FileHeader
from hermes_data.locking import is_lock_conflict
from hermes_data.sessions.storage import display_schema
from hermes_data.sessions.storage import opening
from hermes_data.tracked import tracked_connect
from hermes_data.sessions.storage.fts.ddl import FTS_TRIGGERS
from hermes_data.sessions.backends import sql as q
from hermes_data.sessions.storage import opening_sql as open_sql
from hermes_data.sessions.backends.open_file import header_stamp, rollback_header_stamp
from hermes_data.sessions.backends.base import OpenOptions

log = logging.getLogger("hermes_data.sessions.backends.sqlite")

#: The open-check plan: (fts tables loadable, application_id, unusable FTS tables present,
#: need fail-open, need FTS checks, need NULL-active heal, need generation, need
#: fts_storage_version, display triggers to (re)create — docs/sessions-ui.md §2.3).
Plan = tuple


@dataclass(frozen=True)
class SettledStamp:
    """What a full open found on a settled file, and the reads it depends on."""

    cookie: int
    app_id: int
    generation: str
    revision: str
    #: The FTS layout is the current one: settled means ``fts_storage_version`` = '3'.
    layout_current: bool
    fts: tuple[tuple[str, bool], ...]
    #: The whole catalogue (:data:`~hermes_data.sessions.storage.opening_sql.SCHEMA_TEXT`).
    schema: str = ""
    #: The FTS capabilities tests forced when the stamp was taken (None: the build's own)
    #: and the ``sessions.cjk_index`` setting of that open (:func:`open_settings`).
    caps: tuple[opening.FtsCapabilities | None, bool] | None = None


_stamps: dict[tuple[int, int], SettledStamp] = {}
_stamps_lock = threading.Lock()


def forget_stamps() -> None:
    """Forget every settled stamp (tests; the next open of each file reads everything)."""
    with _stamps_lock:
        _stamps.clear()


def connect(path: Path, settings: SqliteSettings, header: FileHeader | None = None
            ) -> sqlite3.Connection:
    """A plain connection to ``path``: the busy timeout as the driver's timeout, driver
    transactions off, usable from any thread (the handle serializes it); counted under the
    header lease's resolved path when one is given."""
    return tracked_connect(str(path), timeout=settings.busy_timeout_ms / 1000,
                           check_same_thread=False, isolation_level=None,
                           resolved=None if header is None else header.key)


def configure(con: sqlite3.Connection, path: Path, settings: SqliteSettings,
              pragmas: list[str], state: JournalState) -> None:
    """The writer's connection set-up (docs/sessions.md §8.1 steps 4–5): the dialect's functions, the engine's
    policy (busy timeout first, journal mode read-then-switch, synchronous, journal size
    limit), the configured pragmas (docs/sessions.md §8.3), then foreign keys."""
    sqlite_dialect_kit()[1](con)
    # connect()'s driver timeout is the busy timeout (pysqlite sets int(timeout * 1000) ms)
    preset = int(settings.busy_timeout_ms / 1000 * 1000) == int(settings.busy_timeout_ms)
    configure_sqlite_connection(con, str(path), settings, state, busy_timeout_set=preset)
    opening.apply_pragmas(con, pragmas, str(path))
    con.execute(q.FOREIGN_KEYS_ON)


def configured_connector(path: Path, settings: SqliteSettings, pragmas: list[str],
                         state: JournalState) -> Callable[[], sqlite3.Connection]:
    """A creator of further connections of the handle's engine, each configured as the
    writer was (closed again when its set-up fails)."""
    def make() -> sqlite3.Connection:
        con = connect(path, settings)
        try:
            configure(con, path, settings, pragmas, state)
        except BaseException:
            con.close()
            raise
        return con

    return make


def open_settings(options: OpenOptions) -> tuple[opening.FtsCapabilities | None, bool]:
    """What a stamp is valid for besides the file: forced FTS capabilities (tests) and the
    ``sessions.cjk_index`` setting (``options``) of the open in progress."""
    return opening.forced_capabilities(), options.cjk_index


def file_key(header: FileHeader | None) -> tuple[int, int] | None:
    """``(st_dev, st_ino)`` of the file the header lease reads (the inode connected to)."""
    return None if header is None else header.ident


def matching_stamp(con: sqlite3.Connection, key: tuple[int, int] | None,
                   header: FileHeader | None = None,
                   options: OpenOptions = OpenOptions()) -> SettledStamp | None:
    """The stamp of the file at ``key`` when it has the same schema cookie and
    ``application_id``; else None. The file's own header bytes (``header``, the open's lease)
    answer when they match, in either journal mode (:func:`.open_file.header_stamp`: no
    statement, so the connection's first statement is the policy's journal-mode read);
    otherwise ``con`` reads the two (header reads: no schema parse, nothing written)."""
    if key is None:
        return None
    with _stamps_lock:
        stamp = _stamps.get(key)
    if stamp is None or stamp.caps != open_settings(options):
        return None
    if header_stamp(header) == (stamp.cookie, stamp.app_id):
        return stamp
    cookie = con.execute(open_sql.SCHEMA_COOKIE).fetchone()[0]
    app_id = con.execute(q.APPLICATION_ID).fetchone()[0]
    return stamp if (cookie, app_id) == (stamp.cookie, stamp.app_id) else None


class Identification:
    """The identity rule on the writer's connection, before the connection policy (README
    "What is refused, and how"): skipped when the file matches this process's settled stamp
    (:attr:`stamp`), whose file it then is."""

    def __init__(self, spec: Any, path: Path, header: FileHeader | None,
                 options: OpenOptions = OpenOptions()) -> None:
        self.spec, self.path, self.header, self.options = spec, path, header, options
        self.key = file_key(header)
        self.stamp: SettledStamp | None = None

    def __call__(self, con: sqlite3.Connection) -> None:
        self.stamp = matching_stamp(con, self.key, self.header, self.options)
        if self.stamp is None:
            migrate.identify_file(self.spec, self.path, con)

    def refuse(self, exc: sqlite3.DatabaseError) -> None:
        """Raise the refusal the identity rule would have raised for ``exc`` (a damaged or
        foreign file behind a matching stamp); return for lock conflicts and when the rule
        did run."""
        if self.stamp is None:
            return
        err = migrate.refusal_for(self.spec, self.path, exc)
        if err is not exc:
            raise err from exc


def settled_plan(con: sqlite3.Connection, stamp: SettledStamp, head: str | None,
                 header: FileHeader | None = None) -> Plan | None:
    """The plan of a file ``stamp`` describes, from one read transaction (the catalogue text
    and :data:`~hermes_data.sessions.storage.opening_sql.SETTLED_PROBE` in one statement, then the
    cookie and ``application_id``), when every gate reads as settled; None (the caller makes
    the full reads) otherwise. In rollback-journal mode the transaction's read lock keeps
    every writer out of the file, so the header bytes (``header``, the open's lease) are the
    snapshot's page 1: they answer the cookie and ``application_id`` without two
    statements."""
    con.execute(q.BEGIN)
    try:
        schema, *row = con.execute(open_sql.SETTLED_PROBE).fetchone()  # takes the read lock
        facts = rollback_header_stamp(header)
        if facts is None:  # WAL (page 1 may be newer in the WAL), or no lease
            facts = (con.execute(open_sql.SCHEMA_COOKIE).fetchone()[0],
                     con.execute(q.APPLICATION_ID).fetchone()[0])
        cookie, app_id = facts
    except BaseException as exc:
        if con.in_transaction:
            con.execute(q.ROLLBACK)
        if isinstance(exc, sqlite3.DatabaseError) and not is_lock_conflict(exc):
            return None  # not the file the stamp describes: the full reads say what it is
        raise  # busy (the open's patience) and interrupts
    con.execute(q.COMMIT)
    revision, heads, generation, storage, stale, null_active, cjk_stale = row
    if (cookie, app_id, revision, generation, schema) != (
            stamp.cookie, stamp.app_id, head, stamp.generation, stamp.schema) \
            or heads != 1 or stale or null_active or cjk_stale \
            or (stamp.layout_current and storage != "3"):
        return None
    return dict(stamp.fts), app_id, [], False, False, False, False, False, []


def plan_open_checks(conn: Connection, raw: sqlite3.Connection,
                     options: OpenOptions = OpenOptions()) -> tuple[Plan, tuple[Any, ...]]:
    """The full reads of the open checks, inside the caller's read transaction: the FTS
    tables this build can load, ``application_id`` and what needs writing; and the facts a
    :class:`SettledStamp` needs (cookie, generation token, FTS layout). ``options``: the
    handle's open options (``sessions.cjk_index``)."""
    cookie = raw.execute(open_sql.SCHEMA_COOKIE).fetchone()[0]  # first: the snapshot's
    schema = raw.execute(open_sql.SCHEMA_TEXT).fetchone()[0]
    fts = opening.probe_fts_tables(raw)
    state = opening.read_fts_state(conn, options)
    present = [t for t, ok in fts.items() if not ok and t in state.objects]
    generation = opening.read_generation(conn)
    plan = (fts, int(conn.exec_driver_sql(q.APPLICATION_ID).scalar() or 0), present,
            bool(present) and any(n in state.objects for n in FTS_TRIGGERS),
            state.needs_work() and not present, opening.needs_null_active_heal(conn),
            generation is None, opening.needs_fts_storage_version(conn, state),
            display_schema.stale_triggers(conn))
    return plan, (cookie, generation, state.layout == "current", schema)


def remember(key: tuple[int, int] | None, plan: Plan, facts: tuple[Any, ...],
             revision: str | None, options: OpenOptions = OpenOptions()) -> None:
    """Record a stamp for the file at ``key`` when ``plan`` (read with ``facts`` in one
    snapshot) has nothing to write."""
    fts, app_id, _present, *needs = plan
    cookie, generation, layout_current, schema = facts
    if key is None or any(needs) or not app_id or generation is None or revision is None:
        return
    stamp = SettledStamp(int(cookie), int(app_id), str(generation), revision,
                         bool(layout_current), tuple(sorted(fts.items())), str(schema),
                         open_settings(options))
    with _stamps_lock:
        _stamps[key] = stamp


def open_heals(path: Path, plan: Plan, repairs: list[str],
               options: OpenOptions = OpenOptions()) -> Callable[[Connection], None]:
    """The writes ``plan`` asks for (docs/sessions.md §8.4), as one function for the caller's write
    transaction; what it repairs is appended to ``repairs``.

    An FTS table this SQLite build cannot use (a store made where the trigram tokenizer or
    FTS5 existed, opened where it does not) with its triggers still present would fail every
    append: its triggers are dropped and the index marked stale (fail-open, as for FTS
    corruption); search answers through LIKE until a capable build rebuilds it."""
    _fts, app_id, present, need_fail_open, need_fts, need_heal, need_gen, need_ver, disp = plan

    def work(conn: Connection) -> None:
        if need_fail_open:
            opening.mark_stale(conn)
            dropped = opening.drop_fts_triggers(conn, opening.read_fts_state(conn))
            log.warning("%s: %s unusable on this SQLite build: FTS triggers dropped (%s), "
                        "fts_stale set; search uses LIKE until a build that has them rebuilds "
                        "the index", path, ", ".join(present), ", ".join(dropped))
            repairs.append(
                f"dropped FTS triggers: {', '.join(present)} unusable on this SQLite build")
        if need_fts:
            opening.apply_fts_checks(conn, repairs, options)
        if need_heal and opening.needs_null_active_heal(conn):
            n = opening.heal_null_active(conn)
            repairs.append(f"set active = 1 on {n} message(s)")
        if need_gen or not app_id:
            opening.mint_generation(conn)
        if need_ver and opening.needs_fts_storage_version(conn, opening.read_fts_state(conn)):
            opening.write_fts_storage_version(conn)
        if disp:
            display_schema.repair_triggers(conn, disp, repairs)  # docs/sessions-ui.md §2.3

    return work
