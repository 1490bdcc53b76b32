"""``hermes-data copy``: move a store between databases (e.g. SQLite → PostgreSQL).

A thin layer over :func:`hermes_data.copy.copy_store`; progress goes to stderr.
"""

from __future__ import annotations

import json
import sys

from .cli_output import emit
from .config import STORES


def _progress(table: str, done: int, total: int) -> None:
    emit(f"\r  {table}: {done:,} / {total:,} rows", end="" if done < total else "\n",
          file=sys.stderr, flush=True)


def cmd_copy(args) -> int:
    """Run the copy and print its report (``--json`` for machines)."""
    from .copy import CopyVerificationError, copy_store

    try:
        report = copy_store(args.source, args.target, store=args.store, batch=args.batch,
                            force=args.force, progress=None if args.json else _progress)
    except CopyVerificationError as exc:
        emit(f"hermes-data: copy NOT verified: {exc}", file=sys.stderr)
        return 1
    if args.json:
        emit(json.dumps(report.to_dict(), indent=2))
        return 0
    emit(f"{report.store}: {report.source} -> {report.target}"
          f"{' (resumed)' if report.resumed else ''}{' (target emptied first: --force)' if report.forced else ''}")
    for t in report.tables:
        counter = f", id counter {t.id_counter}" if t.id_counter is not None else ""
        emit(f"  {t.table}: {t.target_rows:,} rows ({t.copied_rows:,} copied now{counter}) "
              f"checksum {'ok' if t.verified else 'MISMATCH'}")
    for name in report.skipped:
        emit(f"  skipped (not in the store's metadata): {name}")
    emit(f"  verified: {report.copied_rows:,} rows copied in {report.seconds:.2f} s")
    return 0


def register(subparsers) -> None:
    """Add ``copy`` to the ``hermes-data`` subcommands."""
    p = subparsers.add_parser(
        "copy", help="copy a store to another database (batched, resumable, verified)")
    p.add_argument("--from", dest="source", required=True, help="source URL or SQLite path")
    p.add_argument("--to", dest="target", required=True, help="target URL or SQLite path")
    p.add_argument("--store", choices=STORES, default="telemetry",
                   help="which store (default: telemetry)")
    p.add_argument("--batch", type=int, default=5000, help="rows per batch (default: 5000)")
    p.add_argument("--force", action="store_true",
                   help="empty a non-empty target's store tables first")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_copy)
