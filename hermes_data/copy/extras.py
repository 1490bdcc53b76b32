"""Carrying what the head metadata does not declare, for :mod:`hermes_data.copy.transfer` (issue 12).

An adopted upstream ``state.db`` keeps columns (``sessions.api_call_count`` …) and tables
(``session_model_usage`` …) the head metadata does not declare. :func:`plan_extras` finds them
on the source and types them for both backends before anything is written, refusing with
:class:`CopyUncarriableError` what cannot be carried faithfully; :func:`apply_extras` creates
them add-only on the target; :func:`carried_metadata` is the metadata the copy then reads,
writes and checksums. See the docstring of :mod:`hermes_data.copy.transfer`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from hermes_data.migrate import runner as migrate
from hermes_data.errors import HermesDataError


class CopyUncarriableError(HermesDataError):
    """The source holds a column or table the copy cannot carry faithfully; nothing was copied."""



def value_kind(col: sa.Column) -> str:
    """The canonical kind of a column's values (checksums and carried-type checks): i/f/b/t."""
    if isinstance(col.type, sa.Integer):
        return "i"
    if isinstance(col.type, sa.Float):
        return "f"
    if isinstance(col.type, sa.LargeBinary):
        return "b"
    return "t"


#: Keyless bookkeeping of another history, carried whole (replaced and checksummed like the
#: ledger) under a name per backend: upstream's session-store ``schema_version`` keeps its name
#: in a SQLite file (upstream reads it there) and is ``upstream_schema_version`` on PostgreSQL,
#: where both stores may share one database and the telemetry ledger owns ``schema_version``.
FOREIGN_LEDGERS: dict[str, dict[str, str]] = {
    "telemetry": {}, "sessions": {"schema_version": "upstream_schema_version"}}


def stored_name(store: str, name: str, dialect_name: str) -> str:
    """The name a carried foreign ledger ``name`` (its SQLite name) has on ``dialect_name``."""
    if dialect_name == "sqlite":
        return name
    return FOREIGN_LEDGERS[store].get(name, name)


def _foreign_ledger(store: str, stored: str, dialect_name: str) -> str | None:
    """The SQLite name of the foreign ledger stored as ``stored`` on this backend, if it is one."""
    for name in FOREIGN_LEDGERS[store]:
        if stored_name(store, name, dialect_name) == stored:
            return name
    return None


def side_table(table: sa.Table, store: str, dialect_name: str) -> sa.Table:
    """``table`` (a carried foreign ledger, by its SQLite name) as it is named on a backend."""
    name = stored_name(store, table.name, dialect_name)
    if name == table.name:
        return table
    return sa.Table(name, sa.MetaData(), *(sa.Column(c.name, c.type, nullable=True) for c in table.c))

#: The SQLite storage classes each portable type accepts (checked on the source before
#: anything is written: PostgreSQL would reject, or a checksum would catch, anything else).
_STORAGE = {"i": {"integer"}, "f": {"integer", "real"}, "t": {"text"}, "b": {"blob"}}
_BY_STORAGE = {"integer": sa.BigInteger, "real": sa.Float, "text": sa.Text, "blob": sa.LargeBinary}


def _portable(type_: Any) -> Any:
    """A type both backends declare (BIGINT / DOUBLE PRECISION / TEXT / BYTEA on PostgreSQL;
    the same affinities on SQLite) for a reflected column type; ``None`` when undeclared."""
    if isinstance(type_, (sa.Integer, sa.Boolean)):
        return sa.BigInteger()
    if isinstance(type_, (sa.Float, sa.Numeric)):
        return sa.Float(precision=53)
    if isinstance(type_, (sa.String, sa.Text, sa.Date, sa.DateTime, sa.Time, sa.JSON)):
        return sa.Text()
    if isinstance(type_, sa.LargeBinary):
        return sa.LargeBinary()
    return None


@dataclass
class _Extras:
    """What the source holds beyond the head metadata, and how it is carried."""

    store: str = "telemetry"
    columns: dict[str, list[sa.Column]] = field(default_factory=dict)
    tables: list[sa.Table] = field(default_factory=list)
    #: Keyless foreign ledgers (by their SQLite name), copied whole: see FOREIGN_LEDGERS.
    ledgers: list[sa.Table] = field(default_factory=list)
    #: Carried table → its foreign keys into head tables (columns, referred table, referred
    #: columns): they order the copy (parents first), e.g. the Telegram topic bindings.
    references: dict[str, list[tuple[list[str], str, list[str]]]] = field(default_factory=dict)
    metadata: sa.MetaData = field(default_factory=sa.MetaData)


def _ignored(store: str, name: str, spec: Any, conn: Connection) -> bool:
    if name.startswith("sqlite_") or name.startswith("alembic_version"):
        return True
    if spec.ignore_table(name):
        return True
    if conn.dialect.name != "sqlite":  # both stores may share a server database
        other = "sessions" if store == "telemetry" else "telemetry"
        return name in migrate.store_spec(other).server_tables()
    return False


def _source_storage(s: Connection, table: str, column: str) -> set[str]:
    """SQLite storage classes present in a source column (a fixed query over catalog names)."""
    q = s.dialect.identifier_preparer.quote
    rows = s.exec_driver_sql(f"SELECT DISTINCT typeof({q(column)}) FROM {q(table)} "
                             f"WHERE {q(column)} IS NOT NULL").fetchall()
    return {str(r[0]) for r in rows}


def _carry_column(s: Connection, table: str, info: Any, problems: list[str]) -> sa.Column | None:
    """``info`` is one of the inspector's reflected columns."""
    if info.get("computed") is not None:
        return None  # generated by the target itself (e.g. PostgreSQL's fts_document)
    type_ = _portable(info["type"])
    if s.dialect.name == "sqlite":
        found = _source_storage(s, table, info["name"])
        if type_ is None:  # no declared type: take the one storage class the values use
            if len(found) > 1:
                problems.append(f"{table}.{info['name']}: undeclared type holding mixed values "
                                f"({', '.join(sorted(found))})")
                return None
            type_ = _BY_STORAGE[next(iter(found))]() if found else sa.Text()
        bad = found - _STORAGE[value_kind(sa.Column("x", type_))]
        if bad:
            problems.append(f"{table}.{info['name']}: declared {info['type']} but holds "
                            f"{', '.join(sorted(bad))} values")
            return None
    elif type_ is None:
        problems.append(f"{table}.{info['name']}: type {info['type']} has no portable equivalent")
        return None
    return sa.Column(info["name"], type_, nullable=True)


def plan_extras(s: Connection, store: str) -> _Extras:
    """Columns and tables of the source that the head metadata does not declare, typed for
    both backends; raises :class:`CopyUncarriableError` (before anything is written) for what
    cannot be carried faithfully."""
    spec = migrate.store_spec(store)
    insp = sa.inspect(s)
    extras = _Extras(store=store)
    problems: list[str] = []
    for table in spec.metadata.sorted_tables:
        if not insp.has_table(table.name):
            continue
        for info in insp.get_columns(table.name):
            if info["name"] in table.c:
                continue
            col = _carry_column(s, table.name, info, problems)
            if col is not None:
                extras.columns.setdefault(table.name, []).append(col)
    for name in sorted(insp.get_table_names()):
        if name in spec.metadata.tables or _ignored(store, name, spec, s):
            continue
        ledger = _foreign_ledger(store, name, s.dialect.name)
        if ledger is not None:  # whole-table copy: no key needed
            cols = [c for c in (_carry_column(s, name, info, problems)
                                for info in insp.get_columns(name)) if c is not None]
            extras.ledgers.append(sa.Table(ledger, sa.MetaData(), *cols))
            continue
        pk = insp.get_pk_constraint(name).get("constrained_columns") or []
        if not pk:
            problems.append(f"table {name}: no primary key (cannot be copied in resumable, "
                            "verifiable key order)")
            continue
        cols = [c for c in (_carry_column(s, name, info, problems)
                            for info in insp.get_columns(name)) if c is not None]
        for c in cols:
            c.nullable = c.name not in pk
        extras.tables.append(sa.Table(name, extras.metadata, *cols, sa.PrimaryKeyConstraint(*pk)))
        refs = [(list(fk["constrained_columns"]), str(fk["referred_table"]),
                 list(fk["referred_columns"])) for fk in insp.get_foreign_keys(name)
                if fk.get("referred_table") in spec.metadata.tables]
        if refs:
            extras.references[name] = refs
    if problems:
        raise CopyUncarriableError(
            "the source holds data the copy cannot carry faithfully; nothing was copied: "
            + "; ".join(problems))
    return extras


def carried_metadata(store: str, extras: _Extras) -> sa.MetaData:
    """The head metadata plus the carried columns and tables (what the copy reads, writes and
    checksums)."""
    md = sa.MetaData()
    for table in migrate.store_spec(store).metadata.sorted_tables:
        copy = table.to_metadata(md)
        for col in extras.columns.get(table.name, []):
            copy.append_column(sa.Column(col.name, col.type, nullable=True))
    for table in extras.tables:
        copy = table.to_metadata(md)
        for cols, referred, referred_cols in extras.references.get(table.name, []):
            copy.append_constraint(sa.ForeignKeyConstraint(
                cols, [f"{referred}.{c}" for c in referred_cols]))
    return md


def describe(extras: _Extras, dialect: Any) -> list[str]:
    out = [f"{t}.{c.name} {c.type.compile(dialect=dialect)}"
           for t, cols in extras.columns.items() for c in cols]
    out += [f"table {t.name} ({len(t.c)} columns)" for t in extras.tables]
    for t in extras.ledgers:
        there = stored_name(extras.store, t.name, dialect.name)
        out.append(f"table {t.name} ({len(t.c)} columns, upstream's ledger, copied whole"
                   + (f", as {there})" if there != t.name else ")"))
    return out


def apply_extras(d: Connection, extras: _Extras) -> None:
    """Add the carried columns and tables to the target, add-only (inside the caller's
    transaction); a same-named target object of another shape is refused."""
    insp = sa.inspect(d)
    q = d.dialect.identifier_preparer.quote
    problems = []
    for name, cols in extras.columns.items():
        types = {c["name"]: c["type"] for c in insp.get_columns(name)}
        for col in cols:
            if col.name in types:
                there = _portable(types[col.name]) or sa.Text()
                if value_kind(sa.Column("x", there)) != value_kind(col):
                    problems.append(f"{name}.{col.name} exists on the target as {types[col.name]}")
                continue
            d.exec_driver_sql(f"ALTER TABLE {q(name)} ADD COLUMN {q(col.name)} "
                              f"{col.type.compile(dialect=d.dialect)}")
    ledgers = [side_table(t, extras.store, d.dialect.name) for t in extras.ledgers]
    for table in extras.tables + ledgers:
        if insp.has_table(table.name):
            names = {c["name"] for c in insp.get_columns(table.name)}
            if names != {c.name for c in table.c}:
                problems.append(f"table {table.name} exists on the target with other columns")
            continue
        table.create(d)
    if problems:
        raise CopyUncarriableError("the target holds objects the source's cannot go into: "
                                   + "; ".join(problems))
