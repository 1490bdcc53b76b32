"""``hermes-data copy``: move a store between databases (e.g. SQLite → PostgreSQL).

A thin layer over :func:`hermes_data.copy.transfer.copy_store`. Without ``--store`` the store is read
from a SQLite source file (a ``state.db`` is the session store); progress goes to stderr on a
terminal.
"""

from __future__ import annotations

import sqlite3
import sys

from hermes_data.cli.options import COUNT_MAX, bounded
from hermes_data.cli.output import emit, emit_json, progress_enabled
from hermes_data.config import STORES, resolve_url, sqlite_path
from hermes_data.errors import ConfigurationError, store_io_error
from hermes_data.isolation import ensure_test_isolation
from hermes_data.migrate import reading

#: Tables that only one store has: how a source file says which store it holds.
_MARKERS = {"telemetry": {"runs", "llm_calls"}, "sessions": {"sessions", "messages"}}


def infer_store(source: str, *, creating: bool = False) -> str:
    """The store a SQLite file holds (read-only look at its table names): ``copy``'s source
    and ``upgrade --url FILE`` without ``--store``. ``creating``: the file may be missing
    (``upgrade`` creates stores), and then there is nothing to infer from."""
    path = sqlite_path(resolve_url("telemetry", source))
    if path is None:
        raise ConfigurationError(
            f"{source}: the store cannot be inferred from a server database; pass --store "
            f"{'|'.join(STORES)}")
    ensure_test_isolation(path)  # a test process reads no file of the real home (issue 31 item 5)
    if path.is_dir():
        raise ConfigurationError(f"{path}: is a directory, not a database file")
    if creating and not path.exists():
        raise ConfigurationError(
            f"{path}: no file there to tell which store it is; pass --store "
            f"{'|'.join(STORES)} to create one")
    if not creating and not path.is_file():
        raise ConfigurationError(f"{path}: the source store is not created yet; nothing was "
                                 "created (create it with: hermes-data upgrade --url …)")
    try:
        con = reading.connect(path)  # never writes: a hot journal is read through a snapshot
        try:
            names = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            con.close()
    except sqlite3.Error as exc:
        if (io := store_io_error(exc, str(path), "reading its tables", writing=False)):
            raise io from exc  # the storage failed the read: not a wrong file (issue 31)
        raise ConfigurationError(f"{path}: not a readable SQLite database ({exc})") from exc
    found = [store for store, marks in _MARKERS.items() if marks <= names]
    if len(found) != 1:
        raise ConfigurationError(
            f"{path}: cannot tell which store it holds ({'both' if found else 'neither'} "
            f"telemetry tables nor session tables); pass --store {'|'.join(STORES)}")
    return found[0]


def _progress(table: str, done: int, total: int) -> None:
    emit(f"\r  {table}: {done:,} / {total:,} rows", end="" if done < total else "\n",
         file=sys.stderr, flush=True)


def cmd_copy(args) -> int:
    """Run the copy and print its report (``--json`` for machines)."""
    from hermes_data.copy.transfer import CopyVerificationError, copy_store

    store = args.store or infer_store(args.source)
    try:
        report = copy_store(args.source, args.target, store=store, batch=args.batch,
                            force=args.force,
                            progress=_progress if progress_enabled(args.json) else None)
    except CopyVerificationError as exc:
        emit(f"hermes-data: copy NOT verified: {' '.join(str(exc).split())}", file=sys.stderr)
        return 1
    if args.json:
        emit_json({report.store: report.to_dict()})
        return 0
    emit(f"{report.store}: {report.source} -> {report.target}"
         f"{' (resumed)' if report.resumed else ''}{' (target emptied first: --force)' if report.forced else ''}")
    for t in report.tables:
        counter = f", id counter {t.id_counter}" if t.id_counter is not None else ""
        emit(f"  {t.table}: {t.target_rows:,} rows ({t.copied_rows:,} copied now{counter}) "
             f"checksum {'ok' if t.verified else 'MISMATCH'}")
    for item in report.carried:
        emit(f"  carried (created on the target, not in the head metadata): {item}")
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
    p.add_argument("--store", choices=STORES, default=None,
                   help="which store (default: read from a SQLite source file's tables; "
                        "required for a server source)")
    p.add_argument("--batch", type=bounded(int, 1, COUNT_MAX), default=5000, help="rows per batch (default: 5000)")
    p.add_argument("--force", action="store_true",
                   help="empty a non-empty target's store tables first")
    p.add_argument("--json", action="store_true",
                   help="machine-readable output: one object keyed by store")
    p.set_defaults(func=cmd_copy)
