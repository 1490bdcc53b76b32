"""Migration hooks of the session store (``store_spec("sessions")``).

The baseline revision ``s01_baseline`` is idempotent on an upstream ``state.db``; these hooks
inspect the file before it runs (adoption is never a blind stamp), and afterwards reconcile
add-only towards the head metadata, run the FTS checks of docs/sessions.md §4.7 and report
foreign objects, all inside the upgrade's one ``BEGIN IMMEDIATE`` transaction.

Later revisions (``s02_pg_stored_tsvector``) change PostgreSQL only: on SQLite they are
no-ops, adoption still happens in the baseline, and ``after_upgrade`` runs once the head is
reached — after the last revision applied — exactly as with a single-revision history. A
file stamped at an earlier revision is "behind" and is simply upgraded (no re-adoption).
"""

from __future__ import annotations

import logging
import sqlite3
from dataclasses import replace
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from hermes_data.errors import AdoptionError, NotAHermesDatabaseError
from hermes_data.locking import SQLITE_LOCK_KINDS, is_lock_conflict
from hermes_data.migrate.spec import StoreSpec, UpgradeReport, current_revision
from hermes_data.migrate.shape import INTERNAL_TABLES, ColumnShape, IndexShape, Shape, metadata_shape, metadata_shape_on
from hermes_data.sessions.storage.fts import ddl as fts_ddl
from hermes_data.sessions.backends.base import OpenOptions
from hermes_data.sessions.storage import opening
from hermes_data.sessions.storage import display_sql
from hermes_data.sessions.storage import adoption_sql as mq
from hermes_data.sessions.storage import sessions_json
from hermes_data.sessions.storage.fts.cjk_sql import CJK_TABLES
from hermes_data.sessions.storage.fts.fold_sql import PG_FOLD_INDEX  # s09_accent_fold's GIN index on the folded document
from hermes_data.sessions.schema import TELEGRAM_TABLES, metadata, pg_metadata

log = logging.getLogger("hermes_data.sessions.storage.adoption")

#: Session-store busy timeout: contention is handled by jittered retries (docs/sessions.md §8.5).
BUSY_TIMEOUT_MS = 1000


def is_fts_table(name: str) -> bool:
    """FTS5 virtual tables of the store and their shadow tables (not part of the metadata)."""
    if name in fts_ddl.FTS_VIRTUAL_TABLES or name in CJK_TABLES:  # CJK-bigram fragments too
        return True
    return any(name == base + sfx for base in fts_ddl.FTS_VIRTUAL_TABLES
               for sfx in fts_ddl.FTS_SHADOW_SUFFIXES)


#: PostgreSQL: the session store's own Alembic version table (both stores may share a database).
PG_VERSION_TABLE = "alembic_version_sessions"


#: Either an SQLAlchemy connection or a plain ``sqlite3`` one (the read-only identity probe
#: runs before the engine's connection policy touches a file).
AnyConn = Connection | sqlite3.Connection


def _rows(conn: AnyConn, statement: str) -> list:
    if isinstance(conn, sqlite3.Connection):
        return conn.execute(statement).fetchall()
    return list(conn.exec_driver_sql(statement).fetchall())


def _tables(conn: AnyConn) -> set[str]:
    if isinstance(conn, Connection) and conn.dialect.name != "sqlite":
        return set(sa.inspect(conn).get_table_names())
    return {str(r[0]) for r in _rows(conn, mq.SQLITE_TABLES)}


def _columns(conn: AnyConn, table: str) -> list[str]:
    if isinstance(conn, Connection) and conn.dialect.name != "sqlite":
        return [c["name"] for c in sa.inspect(conn).get_columns(table)]
    return [str(r[1]) for r in _rows(conn, mq.table_info(table))]


def _index_names(conn: AnyConn) -> set[str]:
    if isinstance(conn, Connection) and conn.dialect.name != "sqlite":
        insp = sa.inspect(conn)
        return {str(ix["name"]) for t in insp.get_table_names() for ix in insp.get_indexes(t)}
    return {str(r[0]) for r in _rows(conn, mq.SQLITE_INDEXES)}


#: The columns that make a table a session store's (ours or an upstream ``state.db`` of any
#: historical shape: schema v1 already had them).
IDENTITY_COLUMNS = {"sessions": ("id", "source", "started_at"),
                    "messages": ("id", "session_id", "role", "timestamp")}


def identify(conn: AnyConn) -> str:
    """The session store's identity rule (read-only; README "Which files are adopted").

    * ``"empty"``: no user table at all (a missing or zero-byte file is created, not opened);
    * ``"ours"``: a session store with our ``alembic_version``;
    * ``"upstream"``: an upstream ``state.db`` (a ``sessions`` table, and ``messages`` if
      present, with the columns every historical upstream schema had) — adopted in place;
    * anything else — another application's file, a ``telemetry.db`` — is foreign:
      :class:`NotAHermesDatabaseError`, and the caller leaves the file untouched.
    """
    tables = {t for t in _tables(conn) if not t.startswith("sqlite_")}
    if not tables:
        return "empty"
    if "sessions" not in tables:
        shown = ", ".join(sorted(tables)[:8]) + (" …" if len(tables) > 8 else "")
        hint = (" (this looks like a telemetry.db)" if {"runs", "llm_calls"} <= tables else "")
        raise NotAHermesDatabaseError(
            f"not a session store: it has no sessions table (found {shown}){hint}; "
            "refused, the file was left unchanged")
    if "alembic_version" in tables:
        # Ours (its columns are the upgrade's business, which names what is missing): one
        # catalog read is all a settled open pays. A foreign history is refused by the
        # upgrade before anything is locked (migrate._check_own_history).
        return "ours"
    for table, cols in IDENTITY_COLUMNS.items():
        if table not in tables:
            continue
        lacking = [c for c in cols if c not in _columns(conn, table)]
        if lacking:
            raise NotAHermesDatabaseError(
                f"not a session store: table {table} lacks {', '.join(lacking)}; "
                "refused, the file was left unchanged")
    return "upstream"


_CORE_TABLES = tuple(t.name for t in metadata.sorted_tables)
_CORE_CATALOG = mq.core_catalog(len(_CORE_TABLES))


def missing_core(conn: AnyConn) -> list[str]:
    """Core tables/columns/indexes absent from the live database (read-only; on SQLite one
    catalogue statement — every open pays it)."""
    columns: dict[str, set[str]] = {}
    if isinstance(conn, sqlite3.Connection) or conn.dialect.name == "sqlite":
        rows = (conn.execute(_CORE_CATALOG, _CORE_TABLES).fetchall()
                if isinstance(conn, sqlite3.Connection)
                else conn.exec_driver_sql(_CORE_CATALOG, _CORE_TABLES).fetchall())
        for kind, name, column in rows:
            columns.setdefault(str(name) if kind == "column" else "", set()).add(
                str(column) if kind == "column" else str(name))
        indexes = columns.pop("", set())
    else:
        tables = _tables(conn)
        indexes = _index_names(conn)
        columns = {t: set(_columns(conn, t)) for t in _CORE_TABLES if t in tables}
    out: list[str] = []
    for table in metadata.sorted_tables:
        if table.name not in columns:
            out.append(table.name)
            continue
        have = columns[table.name]
        out.extend(f"{table.name}.{c.name}" for c in table.columns if c.name not in have)
        out.extend(str(ix.name) for ix in table.indexes if ix.name not in indexes)
    return out


def needs_adoption(conn: Connection) -> bool:
    """Read-only: a versioned file that still lacks core objects is upgraded again."""
    return bool(missing_core(conn))


def before_upgrade(conn: Connection, report: UpgradeReport) -> None:
    """Inspect an unversioned upstream ``state.db`` before the baseline adopts it."""
    if conn.dialect.name != "sqlite":
        return  # no upstream PostgreSQL layout exists: nothing to adopt
    if current_revision(conn) is not None:
        return
    tables = _tables(conn)
    if "sessions" not in tables:
        return  # fresh file: the baseline creates everything
    for table, cols in IDENTITY_COLUMNS.items():
        if table not in tables:
            continue
        lacking = [c for c in cols if c not in _columns(conn, table)]
        if lacking:
            raise AdoptionError(f"{table} lacks {', '.join(lacking)}: not an adoptable state.db; "
                                "it was left unchanged")
    version = None
    if "schema_version" in tables:
        row = conn.exec_driver_sql(mq.UPSTREAM_SCHEMA_VERSION).first()
        version = row[0] if row else None
    layout = opening.read_fts_state(conn).layout if "messages" in tables else "absent"
    report.adopted_from = (f"upstream state.db (schema_version {version}, {layout} FTS layout)")
    log.info("adopting %s in place", report.adopted_from)


def _canonical_column_ddl(conn: Connection, col: sa.Column) -> str:
    ddl = str(sa.schema.CreateColumn(col).compile(dialect=conn.dialect)).strip()
    for fk in col.foreign_keys:
        ddl += f" REFERENCES {fk.column.table.name}({fk.column.name})"
    return ddl


def reconcile(conn: Connection, report: UpgradeReport) -> None:
    """Add-only reconciliation towards the head metadata (missing tables, columns, indexes)."""
    tables = _tables(conn)
    for table in metadata.sorted_tables:
        if table.name not in tables:
            table.create(conn)
            report.repairs.append(f"created table {table.name}")
            continue
        have = set(_columns(conn, table.name))
        for col in table.columns:
            if col.name in have:
                continue
            try:
                with conn.begin_nested():
                    conn.exec_driver_sql(
                        mq.add_column(table.name, _canonical_column_ddl(conn, col)))
                report.repairs.append(f"added column {table.name}.{col.name}")
            except sa.exc.OperationalError as exc:
                msg = str(exc).lower()
                if "duplicate column" in msg:
                    log.debug("column %s.%s added by a sibling", table.name, col.name)
                elif is_lock_conflict(exc, kinds=SQLITE_LOCK_KINDS):
                    raise  # SQLite kinds: into the upgrade's patience, which waits out only those
                else:
                    log.warning("could not add column %s.%s: %s", table.name, col.name, exc)
    indexes = _index_names(conn)
    for table in metadata.sorted_tables:
        for ix in table.indexes:
            if ix.name not in indexes:
                ix.create(conn, checkfirst=True)
                report.repairs.append(f"created index {ix.name}")


def after_upgrade(conn: Connection, report: UpgradeReport,
                  options: OpenOptions | None = None) -> None:
    """Reconcile, heal NULL ``active``, run the FTS checks and report foreign objects.
    ``options``: the opening handle's :class:`OpenOptions` (the runner's ``hook_options``;
    None: the defaults), which the FTS checks follow.

    PostgreSQL: the baseline created every object (there is no legacy layout to reconcile,
    and full-text search is index-maintained): nothing to do.
    """
    if conn.dialect.name != "sqlite":
        return
    reconcile(conn, report)
    if report.adopted_from is not None:  # this upgrade adopted an upstream file
        _backfill_from_sessions_json(conn, report)
    if opening.needs_null_active_heal(conn):
        n = opening.heal_null_active(conn)
        report.repairs.append(f"set active = 1 on {n} message(s) with NULL active")
    opening.apply_fts_checks(conn, report.repairs, options)
    core = {t.name for t in metadata.sorted_tables}
    for name in sorted(_tables(conn)):
        if name in core or name in INTERNAL_TABLES or name.startswith("sqlite_") \
                or is_fts_table(name) or name in TELEGRAM_TABLES:  # the user's opt-in (docs/sessions-gateway.md §2.5)
            continue
        report.extra_objects.append(f"table {name} (not part of the core; left untouched)")
    for table in metadata.sorted_tables:
        declared = {c.name for c in table.columns}
        extra = [c for c in _columns(conn, table.name) if c not in declared]
        if extra:
            report.extra_objects.append(
                f"{table.name}: {len(extra)} upstream column(s) kept: {', '.join(extra)}")
    settle(conn)


def _backfill_from_sessions_json(conn: Connection, report: UpgradeReport) -> None:
    """Upstream's v18 step on an adopted file below schema version 18: the gateway metadata
    of its sessions from the ``sessions.json`` beside it (docs/sessions-storage.md §3.12)."""
    if "schema_version" not in _tables(conn):
        return  # upstream wrote no version yet: a fresh file there, no backfill either
    raw: Any = conn.exec_driver_sql(mq.UPSTREAM_SCHEMA_VERSION).scalar()
    try:
        version = int(raw)
    except (TypeError, ValueError):
        return  # no row, or not a number: nothing says the file predates v18
    db = conn.engine.url.database
    if version >= sessions_json.BACKFILL_BELOW_VERSION or not db or db == ":memory:":
        return
    path = sessions_json.sessions_json_for(db)
    matched = sessions_json.backfill_gateway_metadata(conn, path)
    if matched:
        report.repairs.append(f"backfilled gateway metadata of {matched} session(s) from {path} "
                              f"(upstream's v18 step; schema_version {version})")


def settle(conn: Connection) -> None:
    """Leave the store settled (issue 13): the generation token, the ``application_id`` and
    the FTS storage version that a writable open would otherwise write on first use, so the
    first open after ``hermes-data upgrade`` needs no write lock."""
    if opening.read_generation(conn) is None \
            or not conn.exec_driver_sql(mq.APPLICATION_ID).scalar():
        opening.mint_generation(conn)
    if opening.needs_fts_storage_version(conn, opening.read_fts_state(conn)):
        opening.write_fts_storage_version(conn)


def ignore_table(name: str) -> bool:
    """FTS5 virtual and shadow tables are created by fragments, not by the metadata; the
    PostgreSQL version table is Alembic's."""
    return is_fts_table(name) or name == PG_VERSION_TABLE


#: s03_agent_turn's PostgreSQL-only expression index (``(id COLLATE "C") WHERE source =
#: 'cron'``): no SQLite form, so it is not in the metadata. (name, table, reflected columns)
PG_ONLY_INDEX = ("idx_sessions_cron_id_c", "sessions", ("id",))
#: s07_storage's PostgreSQL GIN index over ``hermes_cjk_grams(…)`` (docs/sessions-storage.md §2.5).
PG_CJK_GRAMS_INDEX = "messages_cjk_grams"
#: s08_symbol_grams' PostgreSQL GIN index over ``hermes_symbol_grams(…)`` (issue 16).
PG_SYMBOL_GRAMS_INDEX = "messages_symbol_grams"
#: s10_tool_trigrams' PostgreSQL GIN index over the tool columns (``pg_trgm``; issue 16).
PG_TOOL_TRGM_INDEX = ("messages_tool_trgm", "messages", ("tool_name", "tool_calls"))


def expected_shape_on(conn: Connection) -> Shape:
    """Head shape on PostgreSQL: the reflected metadata plus what only PostgreSQL has — the
    stored generated ``messages.fts_document`` column (s02; appended last, as the ALTER of
    that revision puts it) and the full-text GIN indexes (``messages_fts_trgm`` only where
    the ``pg_trgm`` extension is installed), s07's CJK gram index, s08's symbol-gram index,
    s09's accent-folded document index, s10's tool-column trigram index (with ``pg_trgm``).
    The column stays out of the Core metadata: that metadata is the SQLite authority, and no
    insert may name a generated column. The two Telegram DM-topic tables are part of the
    PostgreSQL head only (``pg_metadata``)."""
    base = metadata_shape_on(conn, pg_metadata)  # + the Telegram tables (docs/sessions-gateway.md §2.4 step 5)
    tables = dict(base.tables)
    tables["messages"] = tables["messages"] + (
        ColumnShape(fts_ddl.PG_FTS_COLUMN, "TSVECTOR", False, None, 0),)
    indexes = dict(base.indexes)
    names = ["messages_fts_document"]
    trigram = conn.exec_driver_sql(mq.PG_TRGM_INSTALLED).first() is not None
    if trigram:
        names.append("messages_fts_trgm")
    for name in names:
        cols = fts_ddl.PG_FTS_INDEX_COLUMNS[name]
        indexes[name] = IndexShape(name, "messages", cols, False)
    for name, table, cols in (PG_ONLY_INDEX,) + ((PG_TOOL_TRGM_INDEX,) if trigram else ()):
        indexes[name] = IndexShape(name, table, cols, False)
    # Expression indexes (no reflected column): s07_storage's CJK grams, s08's symbol grams,
    # s09's accent-folded document.
    for name in (PG_CJK_GRAMS_INDEX, PG_SYMBOL_GRAMS_INDEX, PG_FOLD_INDEX):
        indexes[name] = IndexShape(name, "messages", (None,), False)
    return replace(base, tables=tables, indexes=indexes)


def expected_shape() -> Shape:
    """Head shape: the metadata plus the FTS views and triggers of the current layout and the
    four display triggers (s05_ui_display)."""
    base = metadata_shape(metadata)
    others = dict(base.other_objects)
    others.update({name: "view" for name in fts_ddl.FTS_VIEWS})
    others.update({name: "trigger" for name in fts_ddl.FTS_TRIGGERS})
    others.update({name: "trigger" for name in display_sql.TRIGGER_NAMES})
    return replace(base, other_objects=others)


SPEC = StoreSpec(
    name="sessions",
    metadata=metadata,
    busy_timeout_ms=BUSY_TIMEOUT_MS,
    before_upgrade=before_upgrade,
    after_upgrade=after_upgrade,
    needs_adoption=needs_adoption,
    identify=identify,
    ignore_table=ignore_table,
    expected_shape=expected_shape,
    pg_version_table=PG_VERSION_TABLE,
    expected_shape_on=expected_shape_on,
    head="s10_tool_trigrams",
    server_only_tables=TELEGRAM_TABLES,
)
