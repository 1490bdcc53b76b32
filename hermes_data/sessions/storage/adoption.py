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
import re
import sqlite3
from dataclasses import replace
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.sql import operators
from sqlalchemy.sql.elements import BinaryExpression

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
from hermes_data.sessions.storage.fts.cjk_sql import CJK_FTS, CJK_FTS_SHADOWS, CJK_TABLES
from hermes_data.sessions.schema import TELEGRAM_TABLES, head_metadata, metadata, pg_metadata

log = logging.getLogger("hermes_data.sessions.storage.adoption")

#: Session-store busy timeout: contention is handled by jittered retries (docs/sessions.md §8.5).
BUSY_TIMEOUT_MS = 1000


def is_fts_table(name: str) -> bool:
    """FTS5 virtual tables of the store and their shadow tables (not part of the metadata)."""
    if name in fts_ddl.FTS_VIRTUAL_TABLES or name in CJK_TABLES:  # CJK-bigram fragments too
        return True
    return any(name == base + sfx for base in fts_ddl.FTS_VIRTUAL_TABLES
               for sfx in fts_ddl.FTS_SHADOW_SUFFIXES)


def is_virtual_table(name: str) -> bool:
    """The store's FTS5 virtual tables (``messages_fts``, ``messages_fts_trigram``,
    ``messages_cjk_fts``) and their shadow tables: not ordinary tables, so never in the Core
    metadata and never compared by Alembic. (The CJK-bigram documents and queue are ordinary
    tables of the head: ``schema.head_metadata``.)"""
    if name in fts_ddl.FTS_VIRTUAL_TABLES or name == CJK_FTS or name in CJK_FTS_SHADOWS:
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


def _reflected_key(expression: Any) -> str | None:
    # What reflection reports for one key of an index: a column's name (a collated column,
    # ``id COLLATE "C"``, reflects as its column), None for an expression.
    if isinstance(expression, sa.Column):
        return str(expression.name)
    if isinstance(expression, BinaryExpression) and expression.operator is operators.collate \
            and isinstance(expression.left, sa.Column):
        return str(expression.left.name)
    return None


def expected_shape_on(conn: Connection) -> Shape:
    """Head shape on PostgreSQL: what ``create_all`` of :data:`~hermes_data.sessions.schema.pg_metadata`
    makes (the metadata and the Telegram DM-topic tables), plus what only PostgreSQL has, as
    ``schema.head_metadata("postgresql")`` declares it: the stored generated
    ``messages.fts_document`` column (s02; appended last, as the ALTER of that revision puts
    it) and the full-text, gram and cron indexes of s01–s10 (the trigram ones only where the
    ``pg_trgm`` extension is installed, as the revisions create them)."""
    base = metadata_shape_on(conn, pg_metadata)  # + the Telegram tables (docs/sessions-gateway.md §2.4 step 5)
    head = head_metadata("postgresql")
    tables = dict(base.tables)
    indexes = dict(base.indexes)
    trigram = extension_installed(conn, "pg_trgm")
    for table in head.sorted_tables:
        created = pg_metadata.tables[table.name]
        extra = tuple(ColumnShape(c.name, str(c.type.compile(conn.dialect)).upper(),
                                  not c.nullable, None, 0)
                      for c in table.columns if c.name not in created.c)
        if extra:
            tables[table.name] = tables[table.name] + extra
        for ix in table.indexes:
            if ix.name in base.indexes or (ix.info.get("requires_extension") == "pg_trgm"
                                           and not trigram):
                continue
            indexes[str(ix.name)] = IndexShape(
                str(ix.name), table.name, tuple(_reflected_key(e) for e in ix.expressions),
                bool(ix.unique))
    return replace(base, tables=tables, indexes=indexes)


_PG_CAST = re.compile(r"::[a-z_]+")
_PG_TABLE_SCHEMA = re.compile(r'^(create (?:unique )?index \S+ on )[\w"]+\.')


def _loose_index_ddl(ddl: str) -> str:
    # An index definition with what PostgreSQL adds when it prints one removed: the schema,
    # the default ``USING btree``, casts, whitespace, line breaks and parentheses.
    ddl = _PG_TABLE_SCHEMA.sub(r"\1", ddl.lower(), count=1).replace(" using btree", "")
    return re.sub(r"[\s()]", "", _PG_CAST.sub("", ddl))


def same_pg_index(conn: Connection, index: sa.Index) -> bool:
    """Does the live PostgreSQL index named like ``index`` have the definition the metadata
    declares? Compared on PostgreSQL's own text (``pg_get_indexdef``) against the metadata's
    ``CREATE INDEX``, both without what the server adds in printing (:func:`_loose_index_ddl`):
    for the indexes whose reflection Alembic cannot compare (an expression the server
    re-renders; a key whose ``COLLATE`` reflection drops). False when there is none."""
    live = conn.exec_driver_sql(mq.PG_INDEX_DEFINITION, (str(index.name),)).scalar()
    if live is None:
        return False
    declared = str(sa.schema.CreateIndex(index).compile(dialect=conn.dialect))
    return _loose_index_ddl(str(live)) == _loose_index_ddl(declared)


def same_sqlite_foreign_key(conn: Connection, fk: sa.ForeignKeyConstraint) -> bool:
    """Does SQLite enforce the foreign key ``fk`` (a reflected or a declared one) exactly as
    the SQLite head declares it — columns, referred table and columns, ``ON DELETE`` — by
    ``PRAGMA foreign_key_list``? For frozen DDL that declares the key inline
    (``REFERENCES … ON DELETE CASCADE``), whose ``ON DELETE`` SQLAlchemy's reflection does not
    read (it parses only a table-level ``FOREIGN KEY`` clause)."""
    table = str(fk.table.name)
    declared = head_metadata("sqlite").tables.get(table)
    if declared is None:
        return False
    key = (tuple(fk.column_keys), str(fk.referred_table.name),
           tuple(str(e.column.name) for e in fk.elements))
    match = [c for c in declared.foreign_key_constraints
             if (tuple(c.column_keys), str(c.referred_table.name),
                 tuple(str(e.column.name) for e in c.elements)) == key]
    if len(match) != 1:
        return False
    want = (match[0].ondelete or "NO ACTION").upper()
    rows = conn.exec_driver_sql(mq.foreign_key_list(table)).fetchall()
    # (id, seq, table, from, to, on_update, on_delete, match); one row per column of a key.
    live = {(str(r[3]), str(r[2]), str(r[4]), str(r[6]).upper()) for r in rows}
    return all((col, key[1], ref, want) in live for col, ref in zip(key[0], key[2]))


def extension_installed(conn: Connection, name: str) -> bool:
    """Is the PostgreSQL extension ``name`` installed (only ``pg_trgm`` is ever asked)?"""
    if name != "pg_trgm":
        raise ValueError(f"unknown extension {name!r}: only pg_trgm is probed")
    return conn.exec_driver_sql(mq.PG_TRGM_INSTALLED).first() is not None


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
    not_ordinary_table=is_virtual_table,
    head_metadata=head_metadata,
    expected_shape=expected_shape,
    pg_version_table=PG_VERSION_TABLE,
    expected_shape_on=expected_shape_on,
    head="s10_tool_trigrams",
    server_only_tables=TELEGRAM_TABLES,
)
