"""Copy a store from one database to another (``hermes-data copy``), losslessly and resumably.

Typical use: moving a SQLite install to PostgreSQL when one machine is no longer enough::

    hermes-data copy --from ~/.hermes/telemetry/telemetry.db --to postgresql+psycopg://host/db

What :func:`copy_store` does, in order:

1. **Checks the source is at head** (a legacy or older file: run ``hermes-data upgrade`` on
   it first — the copy never writes to its source) and **upgrades the target to head**
   with :func:`hermes_data.migrate.runner.upgrade` (creating it). Both then have the same
   metadata, so every column copies one to one.
2. **Checks the target.** Empty (ignoring the revision ledger) → full copy. A key-ordered
   prefix of the source (what an interrupted copy leaves) → **resume** from each table's
   high-water mark. Anything else is refused with :class:`CopyTargetNotEmptyError`, unless
   ``force=True``, which first empties the target's store tables.
3. **Copies table by table** (parents before children), in batches of ``batch`` rows read
   in primary-key order (keyset paging: ``WHERE pk > :last ORDER BY pk LIMIT :batch``); each
   batch is inserted and committed in one target transaction, so the target always holds a
   key-ordered prefix of each table and a rerun continues where it stopped, never
   duplicating. Ids are copied as they are.
4. **Sets the id counters** past the copied ids: ``sqlite_sequence`` on SQLite, the serial
   sequence (``setval``) on PostgreSQL — to the source's counter when it is higher than its
   largest id (AUTOINCREMENT never reuses the ids of deleted rows).
5. **Verifies** every table: row count and a SHA-256 over a canonical, backend-independent
   dump of its rows in key order (integers as integers — SQLite INTEGER / PostgreSQL BIGINT —
   floats through ``repr(float(v))`` — REAL / DOUBLE PRECISION — text as UTF-8).
   A mismatch raises :class:`CopyVerificationError` after the report is filled in.

The revision ledger (``schema_version``) is replaced by the source's rows, so the target
keeps the install's real history.

**Everything the source holds is carried** (issue 12). Columns and tables the head metadata
does not declare — an adopted upstream ``state.db`` keeps ``sessions.api_call_count``,
``rewind_count``, … and tables such as ``session_model_usage`` — are planned on the source
before anything is written (:func:`plan_extras`), created add-only on the target in a type
both backends declare (INTEGER → BIGINT, REAL → DOUBLE PRECISION, TEXT → TEXT, BLOB → BYTEA;
an undeclared column takes the one storage class its values use), listed in
:attr:`CopyReport.carried` and logged, and copied and checksummed like every other column.
What cannot be carried faithfully — a value whose SQLite storage class contradicts the
declared type (text in an INTEGER column), an undeclared column holding mixed classes, a table
without a primary key — makes the copy refuse with :class:`CopyUncarriableError`, naming
it, before the target is touched. Upstream's session-store ``schema_version`` ledger (a table
without a key) is carried whole, replaced and checksummed like our own ledger; on PostgreSQL it
is named ``upstream_schema_version`` (both stores may share one server database, and the
telemetry store's ledger is ``schema_version`` there) and it gets its name back in a SQLite
file, where upstream reads it. Not carried, by design: ``sqlite_sequence`` and
``alembic_version`` (bookkeeping; id counters are carried separately), FTS5 virtual tables and
their shadow tables (the target maintains its own full-text index as the rows arrive).

**Foreign keys on PostgreSQL.** The metadata's foreign keys are enforced there (SQLite
files never enforced them), so before copying into PostgreSQL every foreign key is checked on
the source: a value with no referenced row (e.g. a legacy ``sessions.parent_session_id``
naming a deleted session) makes the copy **refuse** with :class:`CopyDanglingReferenceError`
naming the table, column, rows and missing keys — the target cannot hold them, and the copy
never drops or rewrites data; repair the source (e.g. set the column to NULL) and rerun.
A table referencing itself (``sessions.parent_session_id``) is copied **parents first**
(level by level from the roots, key order within a level) in one target transaction, so it
is either absent or complete when a copy is interrupted; a reference cycle is refused.

**Value translation.** Where a store encodes a value per dialect (the session store's
multimodal ``messages.content`` marker: ``\x00json:`` on SQLite, ``\ufdd0json:`` on
PostgreSQL — see ``hermes_data.sessions.core.encoding``), rows are translated as they are
copied and the source side of every checksum is taken over the translated values.

The source should be quiet for the final pass: rows changed after a table was copied are
not copied again (the verification step then reports the table).
"""

from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable, Sequence, cast

import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection, Engine

from hermes_data.migrate import runner as migrate
from hermes_data.config import resolve_url, sqlite_path
from hermes_data.copy.extras import CopyUncarriableError  # noqa: F401  (re-exported: part of copy's API)
from hermes_data.copy.extras import apply_extras, carried_metadata, describe, plan_extras, side_table, stored_name
from hermes_data.copy.extras import value_kind as _kind
from hermes_data.engine import create_engine_for, write_transaction
from hermes_data.errors import HermesDataError, store_io_error
from hermes_data.isolation import ensure_test_isolation

log = logging.getLogger("hermes_data.copy.transfer")

#: Tables whose rows are bookkeeping of the migration history: replaced by the source's rows
#: instead of being copied incrementally, and ignored when deciding whether a target is empty.
#: ``state_meta`` is the session store's bookkeeping: the target's upgrade settles it (a
#: generation token of its own), and a copy takes the source's values instead.
LEDGER_TABLES = ("schema_version", "state_meta")

#: ``progress(table, rows_done, rows_total)`` — called after every committed batch.
Progress = Callable[[str, int, int], None]


class CopyTargetNotEmptyError(HermesDataError):
    """The target holds rows that are not an interrupted copy of the source."""


class CopyDanglingReferenceError(HermesDataError):
    """The source holds foreign-key values without a referenced row; the target enforces them."""


class CopyVerificationError(HermesDataError):
    """After the copy a table's row count or content checksum differs between the two sides."""


@dataclass
class TableCopy:
    """What happened to one table."""

    table: str
    source_rows: int = 0
    copied_rows: int = 0
    resumed_from: int = 0
    target_rows: int = 0
    source_checksum: str = ""
    target_checksum: str = ""
    id_counter: int | None = None
    seconds: float = 0.0

    @property
    def verified(self) -> bool:
        """Row count and checksum agree."""
        return (self.source_rows == self.target_rows
                and self.source_checksum == self.target_checksum)


@dataclass
class CopyReport:
    """The outcome of :func:`copy_store` (``--json`` prints :meth:`to_dict`)."""

    store: str
    source: str
    target: str
    resumed: bool = False
    forced: bool = False
    tables: list[TableCopy] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    #: Columns and tables of the source the head metadata does not declare, carried add-only
    #: (``table.column TYPE`` / ``table``), each with the target type it got.
    carried: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def verified(self) -> bool:
        """Every table verified."""
        return all(t.verified for t in self.tables)

    @property
    def copied_rows(self) -> int:
        """Rows inserted into the target by this run."""
        return sum(t.copied_rows for t in self.tables)

    def to_dict(self) -> dict:
        """Plain data, including each table's ``verified`` flag."""
        out = asdict(self)
        for t, d in zip(self.tables, out["tables"]):
            d["verified"] = t.verified
        out["verified"] = self.verified
        return out


# --------------------------------------------------------------------------- canonical values
def _canonical(kind: str, value: Any) -> bytes:
    """One value in a form equal on both backends (``N`` for NULL)."""
    if value is None:
        return b"N"
    if kind == "i" and not isinstance(value, (str, bytes)):
        return b"i%d" % int(value)
    if kind == "f" and not isinstance(value, (str, bytes)):
        return b"f" + repr(float(value)).encode()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return b"b" + bytes(value).hex().encode()
    if isinstance(value, bool):
        return b"i%d" % int(value)
    if isinstance(value, int):
        return b"i%d" % value
    if isinstance(value, float):
        return b"f" + repr(value).encode()
    return b"t" + str(value).encode("utf-8", "surrogatepass")


Translator = Callable[[Any], Any]


def value_translators(store: str, table: sa.Table, source: str, target: str
                      ) -> dict[int, Translator]:
    """Per-column converters (by column position) of ``table`` from dialect ``source`` to
    ``target``; empty when the two store values alike."""
    if source == target or store != "sessions" or table.name != "messages":
        return {}
    from hermes_data.sessions.core.encoding import translate_content

    pos = [c.name for c in table.c].index("content")
    return {pos: lambda v: translate_content(v, source, target)}


def _translate(row: Sequence[Any], translators: dict[int, Translator]) -> Sequence[Any]:
    if not translators:
        return row
    out = list(row)
    for i, fn in translators.items():
        out[i] = fn(out[i])
    return out


def _ordered(table: sa.Table) -> sa.Select:
    """Every column in key order (a keyless table: ordered by all its columns)."""
    return sa.select(*table.c).order_by(*(table.primary_key.columns or table.c))


def table_checksum(conn: Connection, table: sa.Table, batch: int = 5000,
                   upto: tuple | None = None,
                   translators: dict[int, Translator] | None = None) -> tuple[int, str]:
    """``(rows, sha256)`` of ``table`` on ``conn`` over the canonical dump in key order
    (only the rows with key ``<= upto`` when given; values passed through ``translators``
    first, see :func:`value_translators`)."""
    kinds = [_kind(c) for c in table.c]
    digest = hashlib.sha256()
    rows = 0
    stmt = _ordered(table)
    if upto is not None:
        stmt = stmt.where(_upto(table, upto))
    result = conn.execute(stmt.execution_options(yield_per=batch))
    for raw in result:
        row = _translate(raw, translators or {})
        digest.update(b"\x1e".join(_canonical(k, v) for k, v in zip(kinds, row)))
        digest.update(b"\x1d")
        rows += 1
    return rows, digest.hexdigest()


# --------------------------------------------------------------------------- id counters
def _id_counter(conn: Connection, table: sa.Table) -> int:
    """The table's AUTOINCREMENT / sequence position (0 when nothing was ever handed out)."""
    col = cast("sa.Column[int]", table.autoincrement_column)  # only tables with an id counter
    top = conn.execute(sa.select(sa.func.max(col))).scalar() or 0
    if conn.dialect.name == "sqlite":
        if sa.inspect(conn).has_table("sqlite_sequence"):
            seq = conn.exec_driver_sql("SELECT seq FROM sqlite_sequence WHERE name = ?",
                                       (table.name,)).scalar()
            top = max(top, seq or 0)
    elif conn.dialect.name == "postgresql":
        seq = conn.execute(sa.text("SELECT pg_get_serial_sequence(:t, :c)"),
                           {"t": table.name, "c": col.name}).scalar()
        if seq:
            # Sequence names come from the catalog, never from input; read via pg_sequences.
            last = conn.execute(sa.text(
                "SELECT last_value FROM pg_sequences WHERE schemaname || '.' || sequencename = :s "
                "OR sequencename = :s"), {"s": seq.replace('"', "")}).scalar()
            top = max(top, last or 0)
    return int(top)


def _set_id_counter(conn: Connection, table: sa.Table, value: int) -> None:
    col = cast("sa.Column[int]", table.autoincrement_column)  # only tables with an id counter
    if conn.dialect.name == "sqlite":
        updated = conn.exec_driver_sql("UPDATE sqlite_sequence SET seq = ? WHERE name = ?",
                                       (value, table.name)).rowcount
        if not updated and value:
            conn.exec_driver_sql("INSERT INTO sqlite_sequence (name, seq) VALUES (?, ?)",
                                 (table.name, value))
    elif conn.dialect.name == "postgresql":
        seq = conn.execute(sa.text("SELECT pg_get_serial_sequence(:t, :c)"),
                           {"t": table.name, "c": col.name}).scalar()
        if seq:
            # setval(seq, v, true): the next id is v + 1; an empty table starts again at 1.
            conn.execute(sa.text("SELECT setval(CAST(:s AS regclass), :v, :called)"),
                         {"s": seq, "v": max(value, 1), "called": value > 0})


# --------------------------------------------------------------------------- the copy
def _store_tables(metadata: sa.MetaData) -> list[sa.Table]:
    return [t for t in metadata.sorted_tables if t.name not in LEDGER_TABLES]


def _key_of(table: sa.Table, row: Sequence[Any]) -> tuple:
    idx = [list(table.c).index(c) for c in table.primary_key.columns]
    return tuple(row[i] for i in idx)


def _after(table: sa.Table, key: tuple | None) -> sa.ColumnElement | None:
    if key is None:
        return None
    pk = list(table.primary_key.columns)
    if len(pk) == 1:
        return pk[0] > key[0]
    return sa.tuple_(*pk) > sa.tuple_(*key)


def _high_water(conn: Connection, table: sa.Table) -> tuple | None:
    pk = list(table.primary_key.columns)
    row = conn.execute(sa.select(*pk).order_by(*(c.desc() for c in pk)).limit(1)).first()
    return tuple(row) if row is not None else None


def _upto(table: sa.Table, key: tuple) -> sa.ColumnElement:
    pk = list(table.primary_key.columns)
    return pk[0] <= key[0] if len(pk) == 1 else sa.tuple_(*pk) <= sa.tuple_(*key)


def _count(conn: Connection, table: sa.Table, upto: tuple | None = None) -> int:
    stmt = sa.select(sa.func.count()).select_from(table)
    if upto is not None:
        stmt = stmt.where(_upto(table, upto))
    return int(conn.execute(stmt).scalar_one())  # COUNT(*) yields exactly one row


def copy_store(source: str | os.PathLike | URL, target: str | os.PathLike | URL, *,
               store: str = "telemetry", batch: int = 5000, force: bool = False,
               progress: Progress | None = None) -> CopyReport:
    """Copy ``store`` from ``source`` to ``target`` (URLs or SQLite paths); see the module
    docstring for the steps and guarantees. Returns a :class:`CopyReport`; raises
    :class:`CopyTargetNotEmptyError` or :class:`CopyVerificationError`."""
    if batch < 1:
        raise HermesDataError(f"batch must be at least 1, got {batch}")
    started = time.perf_counter()
    spec = migrate.store_spec(store)
    src_url, dst_url = resolve_url(store, source), resolve_url(store, target)
    if src_url == dst_url:
        raise HermesDataError(f"source and target are the same database: {migrate.display_url(src_url)}")
    # A test process never touches the real home's stores (issue 31 item 5): the target is
    # created or rewritten; the source is only read, but it is the real home's data.
    for url in (dst_url, src_url):
        path = sqlite_path(url)
        if path is not None:
            ensure_test_isolation(path)
    report = CopyReport(store=store, source=migrate.display_url(src_url),
                        target=migrate.display_url(dst_url), forced=force)
    try:
        return _copy(store, src_url, dst_url, report, batch, force, progress, started)
    except (sa.exc.DBAPIError, sqlite3.Error, OSError) as exc:
        # An I/O fault on either file (issue 31): one typed error naming the target and the
        # source. Every batch is one transaction; a rerun resumes (docs/cli.md "copy").
        path = sqlite_path(dst_url) or sqlite_path(src_url)
        io = None if path is None else store_io_error(exc, str(path),
                                                        f"copy from {report.source}")
        if io is None or io is exc:
            raise
        raise io from exc


def _copy(store: str, src_url: URL, dst_url: URL, report: CopyReport, batch: int,
          force: bool, progress: Progress | None, started: float) -> CopyReport:
    migrate.require_created(store, src_url)  # a missing source is not created by looking at it
    _require_head(store, src_url, report)
    # Read-only: the source is never written, not even by a hot journal's rollback or the
    # journal policy (docs/cli.md "Reading a store without writing it").
    src = migrate.reading_engine(store, src_url)
    try:
        with src.connect() as s:  # decided on the source, before the target is touched
            extras = plan_extras(s, store)
    except BaseException:
        src.dispose()
        raise
    migrate.upgrade(store, dst_url)
    carried = carried_metadata(store, extras)
    tables = _store_tables(carried)
    dst = create_engine_for(store, dst_url)
    try:
        with write_transaction(dst) as d:
            apply_extras(d, extras)
            report.carried = describe(extras, d.dialect)
        if report.carried:  # shown by the CLI (WARNING): the target gains objects
            log.warning("%s: carrying %d column(s)/table(s) the head metadata does not declare, "
                        "added on the target: %s", report.target, len(report.carried),
                        "; ".join(report.carried))
        with src.connect() as s, dst.connect() as d:
            known = set(sa.inspect(s).get_table_names())
            ledgers = {stored_name(store, t.name, s.dialect.name) for t in extras.ledgers}
            report.skipped = sorted(known - set(carried.tables) - ledgers
                                    - {"alembic_version", migrate.store_spec(store).pg_version_table})
            if d.dialect.name == "postgresql":
                _check_references(s, tables, report)
            marks = _check_target(s, d, tables, report, force, store)
        if force and any(marks.values()):
            with write_transaction(dst) as d:
                for table in reversed(tables):
                    d.execute(sa.delete(table))
            marks = {name: None for name in marks}
        for table in tables:
            tr = value_translators(store, table, src.dialect.name, dst.dialect.name)
            if _self_reference(table) is not None and marks[table.name] is None:
                report.tables.append(_copy_parents_first(src, dst, table, batch, progress, tr))
            else:
                report.tables.append(_copy_table(src, dst, table, marks[table.name], batch,
                                                 progress, tr))
        _copy_ledger(src, dst, carried, report)
        _verify(src, dst, tables, carried, report, store)
        for ledger in extras.ledgers:
            report.tables.append(_copy_whole(src, dst, side_table(ledger, store, src.dialect.name),
                                             side_table(ledger, store, dst.dialect.name)))
        if dst.dialect.name == "postgresql":
            # A bulk load leaves the planner without statistics until autovacuum gets to it.
            with dst.begin() as d:
                for table in tables:
                    d.exec_driver_sql(f'ANALYZE "{table.name}"')
    finally:
        src.dispose()
        dst.dispose()
    report.seconds = time.perf_counter() - started
    bad = [t.table for t in report.tables if not t.verified]
    if bad:
        raise CopyVerificationError(
            f"{report.target}: after the copy these tables differ from the source: "
            f"{', '.join(bad)} (was the source written to during the copy? rerun to resume)")
    return report


def _require_head(store: str, url: URL, report: CopyReport) -> None:
    engine = migrate.reading_engine(store, url)
    try:
        with engine.connect() as conn:
            revision = migrate.current_revision(
                conn, migrate.store_spec(store).version_table_for(conn))
    finally:
        engine.dispose()
    head = migrate.head_revision(store)
    if revision != head:
        raise HermesDataError(
            f"{report.source}: the source is at revision {revision or '(unversioned/legacy)'}, not "
            f"{head}; run `hermes-data upgrade --store {store} --url …` on it first")


def _check_target(s: Connection, d: Connection, tables: Iterable[sa.Table], report: CopyReport,
                  force: bool, store: str = "telemetry") -> dict[str, tuple | None]:
    """Each table's high-water mark in the target; refuses a target that is not a prefix."""
    marks: dict[str, tuple | None] = {}
    foreign = []
    for table in tables:
        mark = _high_water(d, table)
        marks[table.name] = mark
        # A prefix: same rows, value for value, as the source's up to the target's last key.
        tr = value_translators(store, table, s.dialect.name, d.dialect.name)
        if mark is not None and (_count(d, table) != _count(s, table, mark)
                                 or table_checksum(d, table)
                                 != table_checksum(s, table, upto=mark, translators=tr)):
            foreign.append(table.name)
    if foreign and not force:
        raise CopyTargetNotEmptyError(
            f"{report.target}: tables {', '.join(foreign)} hold rows that are not an interrupted "
            "copy of the source; pass --force to empty the target's store tables first")
    report.resumed = not foreign and any(m is not None for m in marks.values())
    return marks


def _finish_table(s: Connection, dst: Engine, table: sa.Table, out: TableCopy, total: int,
                  progress: Progress | None, t0: float) -> None:
    """Carry the source's id counter over (AUTOINCREMENT / sequence), report an empty table's
    progress once, and time the table."""
    if table.autoincrement_column is not None:
        out.id_counter = _id_counter(s, table)
    if out.id_counter is not None:
        with write_transaction(dst) as d:
            _set_id_counter(d, table, out.id_counter)
    if progress and total == 0:
        progress(table.name, 0, 0)
    out.seconds = time.perf_counter() - t0


def _keep_pending_display_order(d: Connection, table: sa.Table, names: list[str],
                                rows: Sequence[Any]) -> None:
    """The session store's display insert trigger (docs/sessions-ui.md §2.3) fills a NULL ``display_order``;
    a copy keeps the source's pending rows pending (the target keys them like the source)."""
    if table.name != "messages" or "display_order" not in names or "id" not in names:
        return
    at, rid = names.index("display_order"), names.index("id")
    pending = [r[rid] for r in rows if r[at] is None]
    for lo in range(0, len(pending), 500):
        d.execute(sa.update(table).where(table.c.id.in_(pending[lo:lo + 500]))
                  .values(display_order=None))


def _copy_table(src: Engine, dst: Engine, table: sa.Table, mark: tuple | None, batch: int,
                progress: Progress | None,
                translators: dict[int, Translator] | None = None) -> TableCopy:
    t0 = time.perf_counter()
    out = TableCopy(table.name)
    names = [c.name for c in table.c]
    insert = sa.insert(table)
    with src.connect() as s:
        total = _count(s, table)
        out.resumed_from = _count(s, table, mark) if mark is not None else 0
        done = out.resumed_from
        while True:
            stmt = _ordered(table).limit(batch)
            cond = _after(table, mark)
            if cond is not None:
                stmt = stmt.where(cond)
            rows = s.execute(stmt).fetchall()
            if not rows:
                break
            with write_transaction(dst) as d:
                d.execute(insert, [dict(zip(names, _translate(r, translators or {})))
                                   for r in rows])
                _keep_pending_display_order(d, table, names, rows)
            mark = _key_of(table, rows[-1])
            out.copied_rows += len(rows)
            done += len(rows)
            log.info("%s: %d / %d rows", table.name, done, total)
            if progress:
                progress(table.name, done, total)
        _finish_table(s, dst, table, out, total, progress, t0)
    return out


def _copy_ledger(src: Engine, dst: Engine, metadata: sa.MetaData, report: CopyReport) -> None:
    for name in LEDGER_TABLES:
        if name not in metadata.tables:
            continue
        table = metadata.tables[name]
        with src.connect() as s:
            rows = s.execute(_ordered(table)).fetchall()
        names = [c.name for c in table.c]
        with write_transaction(dst) as d:
            d.execute(sa.delete(table))
            if rows:
                d.execute(sa.insert(table), [dict(zip(names, r)) for r in rows])


def _copy_whole(src: Engine, dst: Engine, source: sa.Table, target: sa.Table) -> TableCopy:
    """Replace ``target``'s rows by ``source``'s in one transaction and checksum both sides
    (a keyless foreign ledger, a handful of rows: nothing to resume)."""
    t0 = time.perf_counter()
    out = TableCopy(source.name if source.name == target.name else f"{source.name} -> {target.name}")
    names = [c.name for c in source.c]
    with src.connect() as s:
        rows = s.execute(_ordered(source)).fetchall()
    with write_transaction(dst) as d:
        d.execute(sa.delete(target))
        if rows:
            d.execute(sa.insert(target), [dict(zip(names, r)) for r in rows])
    out.copied_rows = len(rows)
    with src.connect() as s, dst.connect() as d:
        out.source_rows, out.source_checksum = table_checksum(s, source)
        out.target_rows, out.target_checksum = table_checksum(d, target)
    out.seconds = time.perf_counter() - t0
    return out


def _verify(src: Engine, dst: Engine, tables: list[sa.Table], metadata: sa.MetaData,
            report: CopyReport, store: str = "telemetry") -> None:
    with src.connect() as s, dst.connect() as d:
        for out in report.tables:
            table = metadata.tables[out.table]
            tr = value_translators(store, table, s.dialect.name, d.dialect.name)
            out.source_rows, out.source_checksum = table_checksum(s, table, translators=tr)
            out.target_rows, out.target_checksum = table_checksum(d, table)
        for name in LEDGER_TABLES:
            if name in metadata.tables:
                table = metadata.tables[name]
                ledger = TableCopy(name)
                ledger.source_rows, ledger.source_checksum = table_checksum(s, table)
                ledger.target_rows, ledger.target_checksum = table_checksum(d, table)
                ledger.copied_rows = ledger.source_rows
                report.tables.append(ledger)


# --------------------------------------------------------------------------- foreign keys
#: Rows named in a dangling-reference error (the count is always complete).
_NAMED_ROWS = 20


def _self_reference(table: sa.Table) -> sa.ForeignKey | None:
    """The foreign key of ``table`` that references ``table`` itself (single column)."""
    for fk in table.foreign_keys:
        if fk.column.table is table:
            return fk
    return None


def _check_references(s: Connection, tables: Iterable[sa.Table], report: CopyReport) -> None:
    """Refuse a source whose foreign-key values name missing rows (the target enforces them)."""
    problems = []
    for table in tables:
        pk = list(table.primary_key.columns)
        for fk in sorted(table.foreign_keys, key=lambda f: f.parent.name):
            col, ref = fk.parent, fk.column
            target = ref.table.alias("ref")
            missing = (sa.select(*pk, col).where(col.is_not(None)).where(~sa.exists().where(
                target.c[ref.name] == col)).order_by(*pk))
            count = s.execute(sa.select(sa.func.count()).select_from(missing.subquery())).scalar()
            if count:
                rows = s.execute(missing.limit(_NAMED_ROWS)).fetchall()
                named = ", ".join(f"{'/'.join(map(str, r[:-1]))} -> {r[-1]!r}" for r in rows)
                more = f" (and {count - len(rows)} more)" if count > len(rows) else ""
                problems.append(f"{table.name}.{col.name}: {count} row(s) reference a missing "
                                f"{ref.table.name}.{ref.name}: {named}{more}")
    if problems:
        raise CopyDanglingReferenceError(
            f"{report.source}: the target enforces foreign keys and the source holds references "
            "to rows that do not exist; nothing was copied. " + "; ".join(problems)
            + ". Repair the source (e.g. set those columns to NULL) and rerun the copy.")


def _parents_first(s: Connection, table: sa.Table, fk: sa.ForeignKey, report_name: str
                   ) -> list[tuple]:
    """Primary keys of ``table`` ordered so that every row follows the row it references."""
    pk = list(table.primary_key.columns)
    rows = s.execute(sa.select(*pk, fk.parent).order_by(*pk)).fetchall()
    children: dict[Any, list[tuple]] = {}
    level: list[tuple] = []
    keys = {tuple(r[:-1]) for r in rows}
    for r in rows:
        key, parent = tuple(r[:-1]), r[-1]
        if parent is None or (parent,) == key or (parent,) not in keys:
            level.append(key)  # roots (a dangling parent was refused before: never here)
        else:
            children.setdefault((parent,), []).append(key)
    order: list[tuple] = []
    while level:
        order.extend(level)
        level = sorted(k for p in level for k in children.pop(p, []))
    if len(order) != len(rows):
        stuck = sorted(keys - set(order))[:_NAMED_ROWS]
        raise CopyDanglingReferenceError(
            f"{report_name}.{fk.parent.name}: {len(rows) - len(order)} row(s) form a reference "
            f"cycle that cannot be inserted under an enforced foreign key: "
            f"{', '.join('/'.join(map(str, k)) for k in stuck)}")
    return order


def _copy_parents_first(src: Engine, dst: Engine, table: sa.Table, batch: int,
                        progress: Progress | None, translators: dict[int, Translator]
                        ) -> TableCopy:
    """Copy a self-referencing table parents first, in one target transaction."""
    t0 = time.perf_counter()
    out = TableCopy(table.name)
    fk = _self_reference(table)
    assert fk is not None
    names = [c.name for c in table.c]
    pk = list(table.primary_key.columns)
    with src.connect() as s:
        order = _parents_first(s, table, fk, table.name)
        total = len(order)
        with write_transaction(dst) as d:
            for start in range(0, total, batch):
                keys = order[start:start + batch]
                fetched: dict[tuple, Sequence[Any]] = {}
                for i in range(0, len(keys), 900):  # IN-list chunks
                    part = keys[i:i + 900]
                    cond = (pk[0].in_([k[0] for k in part]) if len(pk) == 1
                            else sa.tuple_(*pk).in_(part))
                    for r in s.execute(sa.select(*table.c).where(cond)):
                        fetched[_key_of(table, r)] = r
                d.execute(sa.insert(table), [dict(zip(names, _translate(fetched[k], translators)))
                                             for k in keys])
                out.copied_rows += len(keys)
                log.info("%s: %d / %d rows (parents first)", table.name, out.copied_rows, total)
                if progress:
                    progress(table.name, out.copied_rows, total)
        _finish_table(s, dst, table, out, total, progress, t0)
    return out
