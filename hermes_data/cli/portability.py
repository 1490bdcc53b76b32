"""``hermes-data export --format/--lineage/--all`` and ``hermes-data import``: session
portability from the command line (docs/sessions-ui.md §4.11–§4.13).

Documents go to stdout or ``-o FILE`` (owner-only, written to a temporary file beside it and
renamed on success: a failed export leaves no file); progress and results to stderr.
``export --all`` is a backup: no per-session size guard unless ``--max-messages N`` asks for
one. ``import`` validates the whole file first (any issue ⇒ nothing imported), then writes
it in transactions packed within the store's per-call caps (500 sessions, 50,000 messages,
25 MiB; a bigger session alone); per-session caps only when ``--max-messages`` /
``--max-entry-bytes`` set them. ``--dry-run`` validates without opening a write transaction.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from hermes_data.migrate import runner as migrate
from hermes_data.cli.output import emit, emit_json, output_file, progress, progress_enabled
from hermes_data.cli.options import COUNT_MAX, bounded
from hermes_data.cli.stores import looking_session_store
from hermes_data.sessions.ui.portability.imports import (ImportLimits, load_import_payload,
                                                         transaction_chunks, validate)
from hermes_data.sessions.ui.portability.render import render_session_for_save
from hermes_data.sessions.store import SessionStore


def cmd_export_documents(args) -> int:
    """``export --all`` (JSON Lines, one session document a line), ``--lineage`` and/or
    ``--format json|md|html`` (one rendered document)."""
    fmt = args.format or "json"
    with looking_session_store(args.url) as store:
        if args.all:
            if fmt != "json":
                emit("hermes-data: error: --all writes JSON Lines; --format md/html renders one "
                     "session", file=sys.stderr)
                return 2
            show = progress("exported", progress_enabled(False))
            n = 0
            with output_file(args.output) as out:
                # A backup is complete: no per-session guard unless --max-messages sets one.
                limit = 0 if args.max_messages is None else args.max_messages
                for doc in store.iter_export_all(max_messages=limit):
                    out.write(json.dumps(doc.to_json(), ensure_ascii=False, default=str) + "\n")
                    n += 1
                    if show:
                        show(n, 0)
            emit(f"exported {n:,} session(s)" + (f" to {args.output}" if args.output else ""),
                 file=sys.stderr)
            return 0
        if not args.session:
            emit("hermes-data: error: export needs SESSION (or --all)", file=sys.stderr)
            return 2
        one: Any = (store.export_session_lineage(args.session, max_messages=args.max_messages)
                    if args.lineage
                    else store.export_session(args.session, max_messages=args.max_messages))
        if one is None:
            emit(f"hermes-data: error: session {args.session!r} does not exist", file=sys.stderr)
            return 2
        with output_file(args.output) as out:
            out.write(render_session_for_save(one, fmt))
            if fmt == "json":
                out.write("\n")
    emit(f"exported {args.session} as {fmt}" + (f" to {args.output}" if args.output else ""),
         file=sys.stderr)
    return 0


def cmd_import(args) -> int:
    if not args.dry_run:  # imports into an existing store only: a mistyped --url creates nothing
        migrate.require_created("sessions", args.url)
    with open(args.file, encoding="utf-8") as fh:
        try:
            payload = load_import_payload(fh.read())
        except ValueError as exc:
            emit(f"hermes-data: error: {args.file}: {exc}", file=sys.stderr)
            return 2
    # Per-session caps only when asked for; the totals hold per transaction by the packing.
    limits = ImportLimits(messages_each=args.max_messages, bytes_each=args.max_entry_bytes,
                          messages_total=0, bytes_total=0)
    chunks = transaction_chunks(payload)
    starts = [0]
    for c in chunks:
        starts.append(starts[-1] + len(c))
    issues = [(starts[n] + i.index, i.error) for n, c in enumerate(chunks)
              for i in validate(c, limits)]
    if args.dry_run or issues:
        if args.json:
            emit_json({"sessions": {"entries": len(payload), "ok": not issues,
                                    "issues": [{"index": i, "error": e} for i, e in issues]}})
        else:
            for index, error in issues:
                emit(f"entry {index}: {error}")
            emit(f"{len(payload)} session(s) checked: "
                 + ("valid (dry run; nothing written)" if not issues else
                    f"{len(issues)} issue(s), nothing imported"))
        return 0 if not issues else 1
    show = progress("imported", progress_enabled(args.json))
    imported = skipped = detached = 0
    warnings: list[str] = []
    with SessionStore(args.url) as store:
        for n, chunk in enumerate(chunks):
            r = store.import_sessions(chunk, limits)
            imported, skipped, detached = (imported + r.imported, skipped + r.skipped,
                                           detached + r.detached)
            warnings += r.warnings
            if show:
                show(starts[n + 1], len(payload))
    if args.json:
        emit_json({"sessions": {"imported": imported, "skipped": skipped,
                                "detached": detached, "warnings": warnings}})
    else:
        for w in warnings:
            emit(f"warning: {w}", file=sys.stderr)
        emit(f"imported {imported} session(s), skipped {skipped} existing, "
             f"{detached} lineage link(s) detached")
    return 0


def register(subparsers) -> None:
    """Add ``import`` to the ``hermes-data`` parser (``export``'s document options are added
    by :mod:`hermes_data.cli.maintenance`, which owns that command)."""
    p = subparsers.add_parser("import", help="import sessions exported as JSON or JSON Lines")
    p.add_argument("file", help="JSON array, object or JSON Lines of exported sessions")
    p.add_argument("--url", help="session store URL or SQLite path (default: $HERMES_HOME/state.db)")
    p.add_argument("--dry-run", action="store_true", help="validate only; write nothing")
    p.add_argument("--max-messages", type=bounded(int, 0, COUNT_MAX), default=0, metavar="N",
                   help="refuse the file if a session has more than N messages "
                        "(default: 0, no limit)")
    p.add_argument("--max-entry-bytes", type=bounded(int, 0, COUNT_MAX), default=0, metavar="N",
                   help="refuse the file if a session's JSON is over N bytes (default: 0, no limit)")
    p.add_argument("--json", action="store_true",
                   help="machine-readable output: {\"sessions\": {…}}")
    p.set_defaults(func=cmd_import, store="sessions")
