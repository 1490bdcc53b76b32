"""Schema shapes: what a live database looks like, what the metadata says it should, and the
difference between the two.

A shape is compared at the level ``PRAGMA table_info`` / ``index_list`` / ``index_info``
report on SQLite (and the reflection equivalent elsewhere): ordered columns with declared
type, NOT NULL, default and primary-key position; named indexes with their columns and
uniqueness. Column names alone are not enough — they let a non-canonical shape live forever.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Connection

#: Objects SQLite or Alembic own; never part of a store's shape.
INTERNAL_TABLES = frozenset({"sqlite_sequence", "alembic_version", "sqlite_stat1", "sqlite_stat4"})


@dataclass(frozen=True)
class ColumnShape:
    name: str
    type: str
    notnull: bool
    default: str | None
    pk: int


@dataclass(frozen=True)
class IndexShape:
    name: str
    table: str
    #: Column names; ``None`` stands for an expression (SQLite's index_info, SQLAlchemy reflection).
    columns: tuple[str | None, ...]
    unique: bool


@dataclass
class Shape:
    """Tables (name → ordered columns) and named indexes of one database."""

    tables: dict[str, tuple[ColumnShape, ...]] = field(default_factory=dict)
    indexes: dict[str, IndexShape] = field(default_factory=dict)
    other_objects: dict[str, str] = field(default_factory=dict)  # name -> type (views, triggers)


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def sqlite_shape(conn: Connection, *, include_autoindexes: bool = False) -> Shape:
    """Read the shape of a SQLite database through PRAGMAs (read-only)."""
    shape = Shape()
    objects = conn.exec_driver_sql(
        "SELECT type, name, tbl_name FROM sqlite_master ORDER BY type, name"
    ).fetchall()
    for type_, name, _tbl in objects:
        if type_ == "table" and name not in INTERNAL_TABLES and not name.startswith("sqlite_"):
            cols = conn.exec_driver_sql(f"PRAGMA table_info({_q(name)})").fetchall()
            shape.tables[name] = tuple(
                ColumnShape(c[1], (c[2] or "").upper(), bool(c[3]), c[4], int(c[5])) for c in cols
            )
        elif type_ in ("view", "trigger"):
            shape.other_objects[name] = type_
    for table in shape.tables:
        for row in conn.exec_driver_sql(f"PRAGMA index_list({_q(table)})").fetchall():
            name, unique, origin = row[1], bool(row[2]), row[3]
            if origin == "pk":
                continue
            if name.startswith("sqlite_autoindex") and not include_autoindexes:
                continue
            ix_cols = tuple(
                r[2] for r in conn.exec_driver_sql(f"PRAGMA index_info({_q(name)})").fetchall()
            )
            shape.indexes[name] = IndexShape(name, table, ix_cols, unique)
    return shape


def reflected_shape(conn: Connection, schema: str | None = None) -> Shape:
    """Shape of a non-SQLite database through SQLAlchemy reflection."""
    insp = sa.inspect(conn)
    shape = Shape()
    for table in insp.get_table_names(schema=schema):
        if table in INTERNAL_TABLES:
            continue
        pk_cols = insp.get_pk_constraint(table, schema=schema).get("constrained_columns") or []
        cols = []
        for c in insp.get_columns(table, schema=schema):
            default = c.get("default")
            cols.append(ColumnShape(
                c["name"], str(c["type"]).upper(), not c["nullable"],
                None if default is None else str(default),
                pk_cols.index(c["name"]) + 1 if c["name"] in pk_cols else 0,
            ))
        shape.tables[table] = tuple(cols)
        for ix in insp.get_indexes(table, schema=schema):
            ix_name = ix.get("name")
            if ix_name:
                shape.indexes[ix_name] = IndexShape(
                    ix_name, table, tuple(ix["column_names"]), bool(ix["unique"])
                )
    return shape


def live_shape(conn: Connection) -> Shape:
    """Shape of the database behind ``conn``."""
    return sqlite_shape(conn) if conn.dialect.name == "sqlite" else reflected_shape(conn)


@lru_cache(maxsize=None)
def _metadata_shape_cached(metadata_id: int, metadata: sa.MetaData) -> Shape:
    with tempfile.TemporaryDirectory(prefix="hermes-data-shape-") as tmp:
        engine = sa.create_engine(f"sqlite:///{Path(tmp) / 'head.db'}")

        @sa.event.listens_for(engine, "connect")
        def _scratch(dbapi_conn, _record):  # a throw-away file: no durability needed
            dbapi_conn.execute("PRAGMA journal_mode=OFF")
            dbapi_conn.execute("PRAGMA synchronous=OFF")

        try:
            metadata.create_all(engine)
            with engine.connect() as conn:
                return sqlite_shape(conn)
        finally:
            engine.dispose()


def metadata_shape(metadata: sa.MetaData) -> Shape:
    """The SQLite shape ``metadata.create_all()`` produces (computed once per metadata)."""
    return _metadata_shape_cached(id(metadata), metadata)


def metadata_shape_on(conn: Connection, metadata: sa.MetaData) -> Shape:
    """The shape ``metadata.create_all()`` produces on ``conn``'s backend.

    SQLite: from a scratch file. Other backends: created in a scratch schema inside a
    savepoint that is rolled back, then reflected — so types compare as the server reports
    them (PostgreSQL has transactional DDL; nothing is left behind).
    """
    if conn.dialect.name == "sqlite":
        return metadata_shape(metadata)
    scratch = "hermes_data_head_probe"
    savepoint = conn.begin_nested()
    try:
        conn.exec_driver_sql(f'CREATE SCHEMA "{scratch}"')
        probe = conn.execution_options(schema_translate_map={None: scratch})
        metadata.create_all(probe)
        return reflected_shape(conn, schema=scratch)
    finally:
        savepoint.rollback()


@dataclass(frozen=True)
class Difference:
    """One way a live database differs from the head: ``kind`` is
    ``missing_table|extra_table|missing_column|extra_column|column_differs|missing_index|extra_index|index_differs``."""

    kind: str
    object: str
    detail: str = ""

    @property
    def is_extra(self) -> bool:
        """Extra objects are reported but are not drift (foreign tables are left alone)."""
        return self.kind.startswith("extra_")

    def __str__(self) -> str:
        return f"{self.kind.replace('_', ' ')}: {self.object}" + (f" ({self.detail})" if self.detail else "")


_SEQUENCE_SCHEMA = re.compile(r"nextval\('(?:[^'.]+\.)([^']+)'")


def _normalise_default(value: str | None) -> str | None:
    if value is None:
        return None
    # PostgreSQL qualifies a serial's sequence with its schema only outside search_path.
    value = _SEQUENCE_SCHEMA.sub(r"nextval('\1'", value.strip())
    while value.startswith("(") and value.endswith(")"):
        value = value[1:-1].strip()
    return value


def columns_equivalent(expected: ColumnShape, actual: ColumnShape) -> bool:
    """Column equality with the two documented normalisations (docs/telemetry.md §8.7c): an
    INTEGER primary key (rowid alias) may read ``notnull`` 1 or 0; defaults compare after
    stripping redundant parentheses."""
    if expected.type != actual.type or expected.pk != actual.pk:
        return False
    if _normalise_default(expected.default) != _normalise_default(actual.default):
        return False
    if expected.notnull != actual.notnull:
        rowid_alias = expected.pk == 1 and expected.type == "INTEGER"
        return rowid_alias
    return True


def diff_shapes(expected: Shape, actual: Shape, *, ordered: bool = False) -> list[Difference]:
    """Differences between ``expected`` (head) and ``actual`` (live).

    ``ordered=True`` also requires the same column order (the fresh-upgrade contract);
    adopted files may have re-appended columns, so order is ignored by default.
    """
    out: list[Difference] = []
    for table, exp_cols in expected.tables.items():
        act_cols = actual.tables.get(table)
        if act_cols is None:
            out.append(Difference("missing_table", table))
            continue
        act_by_name = {c.name: c for c in act_cols}
        for col in exp_cols:
            got = act_by_name.get(col.name)
            if got is None:
                out.append(Difference("missing_column", f"{table}.{col.name}", col.type))
            elif not columns_equivalent(col, got):
                out.append(Difference(
                    "column_differs", f"{table}.{col.name}",
                    f"expected {col.type} notnull={int(col.notnull)} default={col.default} pk={col.pk}; "
                    f"found {got.type} notnull={int(got.notnull)} default={got.default} pk={got.pk}",
                ))
        exp_names = {c.name for c in exp_cols}
        for col in act_cols:
            if col.name not in exp_names:
                out.append(Difference("extra_column", f"{table}.{col.name}", col.type))
        if ordered and not out:
            if [c.name for c in exp_cols] != [c.name for c in act_cols]:
                out.append(Difference("column_differs", table, "column order differs"))
    for table in actual.tables:
        if table not in expected.tables:
            out.append(Difference("extra_table", table))
    for name, ix in expected.indexes.items():
        got_ix = actual.indexes.get(name)
        if got_ix is None:
            out.append(Difference("missing_index", name, f"{ix.table}({', '.join(map(str, ix.columns))})"))
        elif (got_ix.table, got_ix.columns, got_ix.unique) != (ix.table, ix.columns, ix.unique):
            out.append(Difference(
                "index_differs", name,
                f"expected {ix.table}({', '.join(map(str, ix.columns))}) unique={ix.unique}; "
                f"found {got_ix.table}({', '.join(map(str, got_ix.columns))}) unique={got_ix.unique}",
            ))
    for name, ix in actual.indexes.items():
        if name not in expected.indexes:
            out.append(Difference("extra_index", name, f"{ix.table}({', '.join(map(str, ix.columns))})"))
    return out
