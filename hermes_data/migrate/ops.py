"""Helpers for hand-written revisions: idempotent, add-only, loud on real errors.

The legacy migrator wrapped ``ALTER TABLE`` in ``except OperationalError: pass`` and then
marked the version applied, which wedged databases for good (the v7 incident). These
helpers look before they act and let every error propagate, so a failing revision rolls
back with its ledger row.
"""

from __future__ import annotations

import logging
import sqlalchemy as sa
from alembic import op

from hermes_data.clock import utcnow_iso  # noqa: F401  (re-exported for revisions)
from hermes_data.locking import SQLITE_LOCK_KINDS, is_lock_conflict

log = logging.getLogger("hermes_data.migrate.ops")


def column_names(table: str) -> list[str]:
    """Column names of ``table`` on the migration connection (empty if the table is missing)."""
    insp = sa.inspect(op.get_bind())
    if not insp.has_table(table):
        return []
    return [c["name"] for c in insp.get_columns(table)]


def has_table(table: str) -> bool:
    """True when ``table`` exists on the migration connection."""
    return sa.inspect(op.get_bind()).has_table(table)


def add_column_if_missing(table: str, column: sa.Column) -> bool:
    """``ALTER TABLE table ADD COLUMN column`` unless it is already there.

    Returns True when the column was added. Errors (locks, I/O) propagate.
    """
    if column.name in column_names(table):
        return False
    op.add_column(table, column)
    log.info("added column %s.%s", table, column.name)
    return True


def add_missing_columns(bind, table: str, columns, logger: logging.Logger = log) -> None:
    """Append the absent ``columns`` to ``table`` with their declared expression; present
    columns are never touched (docs/sessions.md §2.8 reconcile rule, seed 003 #79531/#80037).

    Each ``ALTER`` runs in a savepoint. ``duplicate column`` (a sibling added it first) is
    logged at DEBUG; ``locked``/``busy`` propagates into the caller's lock patience; any other
    error is a WARNING naming ``table.column`` and the store stays behind on that column. A
    key column without a default cannot be added by ``ALTER``: WARNING, skipped.
    """
    have = {c["name"] for c in sa.inspect(bind).get_columns(table)}
    pg = bind.dialect.name == "postgresql"
    for col in columns:
        if col.name in have:
            continue
        if col.primary_key and col.server_default is None:
            logger.warning("%s lacks key column %s; no ALTER can add it", table, col.name)
            continue
        ddl = str(sa.schema.CreateColumn(col).compile(dialect=bind.dialect)).strip()
        try:
            with bind.begin_nested():
                bind.exec_driver_sql(
                    f'ALTER TABLE "{table}" ADD COLUMN {"IF NOT EXISTS " if pg else ""}{ddl}')
            logger.info("added column %s.%s", table, col.name)
        except sa.exc.OperationalError as exc:
            msg = str(exc).lower()
            if "duplicate column" in msg:
                logger.debug("column %s.%s added by a sibling", table, col.name)
            elif is_lock_conflict(exc, kinds=SQLITE_LOCK_KINDS):
                raise  # SQLite kinds: into the upgrade's patience, which waits out only those
            else:
                logger.warning("could not add column %s.%s (%s); the store stays behind",
                               table, col.name, exc)


def record_ledger_version(version: int) -> None:
    """Write the upstream ``schema_version`` row for ``version`` (no-op when present).

    Runs in the revision's transaction, so the row and the change commit together and an
    upstream plugin build opening the same file never re-runs the step.
    """
    bind = op.get_bind()
    ledger = sa.table("schema_version", sa.column("version"), sa.column("applied_at"))
    exists = bind.execute(
        sa.select(sa.literal(1)).select_from(ledger).where(ledger.c.version == version)
    ).first()
    if exists is None:
        bind.execute(ledger.insert().values(version=version, applied_at=utcnow_iso()))
