"""What a store's migration is made of, apart from the machinery that runs it.

:class:`StoreSpec` (metadata, hooks, head), the :class:`UpgradeReport` the hooks fill in and
:func:`current_revision`. Each store's ``migration`` module builds its ``SPEC`` from these and
:mod:`hermes_data.migrate.runner` imports those modules by name: the store modules import this one,
never ``migrate``, so the dependency points one way.
"""

from __future__ import annotations

import sqlite3
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from hermes_data.errors import HermesDataError
from hermes_data.migrate.shape import INTERNAL_TABLES, Shape, metadata_shape, metadata_shape_on


@dataclass
class UpgradeReport:
    """What an upgrade found and did; printed by the CLI (``--json`` gives :meth:`to_dict`)."""

    store: str
    url: str
    before_revision: str | None = None
    after_revision: str | None = None
    adopted_from: str | None = None
    applied: list[str] = field(default_factory=list)
    repairs: list[str] = field(default_factory=list)
    extra_objects: list[str] = field(default_factory=list)
    step_seconds: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    journal_mode: str = "unknown"
    up_to_date: bool = False
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class StoreSpec:
    """How one store migrates: its metadata, its Alembic scripts and its hooks."""

    name: str
    metadata: sa.MetaData
    busy_timeout_ms: int
    #: Runs under the upgrade lock before Alembic reads its version (adoption).
    before_upgrade: Callable[[Connection, UpgradeReport], None] | None = None
    #: Runs under the same lock after the revisions (add-only reconciliation); the third
    #: argument is the runner's opaque ``hook_options`` (None without an opening handle).
    after_upgrade: Callable[[Connection, UpgradeReport, Any], None] | None = None
    #: Read-only: True when a file without ``alembic_version`` still needs adoption.
    needs_adoption: Callable[[Connection], bool] | None = None
    #: Names of live tables that belong to the store but not to the metadata (e.g. FTS shadows).
    ignore_table: Callable[[str], bool] = lambda name: False
    #: The head shape (defaults to what ``metadata.create_all()`` produces).
    expected_shape: Callable[[], Shape] | None = None
    #: Read-only identification on a plain ``mode=ro`` sqlite3 connection, run before the
    #: engine touches an existing file; raises for a file that is not this store's.
    identify: Callable[[sqlite3.Connection], object] | None = None
    #: Alembic's version table on PostgreSQL, where both stores may share one database
    #: (SQLite files keep ``alembic_version``).
    pg_version_table: str = "alembic_version"
    #: The head revision id, written down so a settled database is recognised without
    #: loading Alembic and the revision scripts (a test keeps it equal to the scripts' head).
    head: str | None = None
    #: The head shape on a non-SQLite backend (defaults to the reflected metadata).
    expected_shape_on: Callable[[Connection], Shape] | None = None
    #: Tables the store's head has on a server backend only (not in ``metadata``, which is
    #: the SQLite authority): the session store's PostgreSQL Telegram tables (docs/sessions-gateway.md §2.4).
    server_only_tables: tuple[str, ...] = ()
    #: The head metadata Alembic's comparison (``alembic check``, autogenerate) uses on a
    #: dialect (``"sqlite"``, ``"postgresql"``): every ordinary table, column and index the
    #: head has there. Default: ``metadata`` on SQLite, :func:`server_metadata` of it elsewhere.
    head_metadata: Callable[[str], sa.MetaData] | None = None
    #: Live tables Alembic's comparison skips because they are not ordinary tables (FTS5
    #: virtual tables and their shadow tables: created by fragments, never declarable in Core).
    #: Default: ``ignore_table``.
    not_ordinary_table: Callable[[str], bool] | None = None

    def server_tables(self) -> set[str]:
        """Every table of this store's head on a server backend (shared-database filters)."""
        return set(self.metadata.tables) | set(self.server_only_tables)

    def version_table_for(self, conn: Connection) -> str:
        """Name of this store's Alembic version table on ``conn``'s backend."""
        return "alembic_version" if conn.dialect.name == "sqlite" else self.pg_version_table

    def head_shape(self) -> Shape:
        """The head shape on SQLite."""
        return self.expected_shape() if self.expected_shape else metadata_shape(self.metadata)

    def head_shape_for(self, conn: Connection) -> Shape:
        """The head shape on ``conn``'s backend (see :func:`~hermes_data.migrate.shape.metadata_shape_on`)."""
        if conn.dialect.name == "sqlite":
            return self.head_shape()
        if self.expected_shape_on is not None:
            return self.expected_shape_on(conn)
        return metadata_shape_on(conn, self.metadata)

    def metadata_on(self, dialect: str) -> sa.MetaData:
        """The head metadata Alembic compares with on ``dialect`` (see :attr:`head_metadata`)."""
        if self.head_metadata is not None:
            return self.head_metadata(dialect)
        return self.metadata if dialect == "sqlite" else server_metadata(self.metadata)

    def compared_table(self, name: str) -> bool:
        """Alembic autogenerate: is the live table ``name`` compared at all? Not SQLite's and
        Alembic's own tables, nor the store's non-ordinary tables."""
        skip = self.not_ordinary_table or self.ignore_table
        return name not in INTERNAL_TABLES and name != self.pg_version_table and not skip(name)


_server_copies: dict[int, tuple[sa.MetaData, sa.MetaData]] = {}


def server_metadata(metadata: sa.MetaData) -> sa.MetaData:
    """``metadata`` as a server backend has it (built once per metadata): every primary-key
    column NOT NULL, which PostgreSQL makes it whatever the declaration — the stores declare
    upstream's ``TEXT PRIMARY KEY`` columns nullable because SQLite reports them so
    (``PRAGMA table_info`` notnull=0) on every file the revisions create."""
    found = _server_copies.get(id(metadata))
    if found is None or found[0] is not metadata:
        copy = sa.MetaData()
        for table in metadata.sorted_tables:
            table.to_metadata(copy)
        for table in copy.tables.values():
            for column in table.primary_key.columns:
                column.nullable = False
        found = _server_copies[id(metadata)] = (metadata, copy)
    return found[1]


def current_revision(conn: Connection, version_table: str = "alembic_version") -> str | None:
    """The Alembic revision recorded in ``version_table`` (``None`` when unversioned).

    ``version_table`` comes from :meth:`StoreSpec.version_table_for` (a fixed name, never input).
    """
    if not sa.inspect(conn).has_table(version_table):
        return None
    rows = conn.exec_driver_sql(f"SELECT version_num FROM {version_table}").fetchall()
    if len(rows) > 1:
        raise HermesDataError(f"{version_table} holds several heads: {[r[0] for r in rows]}")
    return rows[0][0] if rows else None
