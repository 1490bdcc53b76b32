"""``hermes-data prune | vacuum | optimize-storage | export``: session-store maintenance from
the command line.

Human output on stdout, progress of long operations on stderr. ``prune`` is a dry run unless
``--apply`` is given.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from typing import Callable, TextIO

from hermes_data.migrate import runner as migrate
from hermes_data.cli.options import COUNT_MAX, DAYS_MAX, PAUSE_MAX, bounded
from hermes_data.cli.stores import looking_session_store
from hermes_data.cli.output import (elapsed, emit, emit_json, output_file, progress,
                                    progress_enabled, refuse_output_path)
from hermes_data.sessions.storage.fts import layout as fts_storage
from hermes_data.sessions.core import maintenance as mt
from hermes_data.sessions.storage import opening
from hermes_data.sessions.store import SessionStore


def cmd_prune(args) -> int:
    filters = {k: v for k, v in (("source", args.source), ("cwd_prefix", args.cwd_prefix),
                                 ("title_like", args.title_like)) if v is not None}
    if args.include_pinned:
        filters["include_pinned"] = True
    if not args.apply:  # the dry run only looks: read-only, the file unchanged
        with looking_session_store(args.url) as store:
            rows = mt.list_prune_candidates(store, args.older_than_days, **filters)
            spared = mt.count_open_prune_matches(store, args.older_than_days, **filters)
        if args.json:
            emit_json({"sessions": {"would_delete": [asdict(r) for r in rows],
                                    "open_spared": spared}})
            return 0
        for r in rows:
            emit(f"{r.id}  {r.source:<10} {r.message_count:>6} msgs  {r.title or ''}")
        emit(f"{len(rows)} session(s) would be deleted (dry run; add --apply); "
             f"{spared} open session(s) matching the filters are spared")
        return 0
    # --apply never creates a store either: a mistyped path is refused.
    migrate.require_created("sessions", args.url)
    with SessionStore(args.url) as store:
        # A damaged file is refused before the delete writes into it (issue 31); the
        # library's prune_sessions runs no check (the agent prunes at every start).
        opening.refuse_if_corrupt(store)
        n = mt.prune_sessions(store, args.older_than_days,
                              progress=progress("pruning", progress_enabled(args.json)),
                              exclude_active_write_guards=True, **filters)
    if args.json:
        emit_json({"sessions": {"deleted": n}})
    else:
        emit(f"deleted {n} session(s)")
    return 0


def cmd_vacuum(args) -> int:
    migrate.require_created("sessions", args.url)  # maintains a store; never creates one
    with SessionStore(args.url) as store:
        # VACUUM is one statement that reports nothing: show the time it has taken so far.
        with elapsed("optimizing FTS indexes and vacuuming", progress_enabled(args.json)):
            res = mt.vacuum(store)
    if args.json:
        emit_json({"sessions": res})
        return 0
    change = res["before_bytes"] - res["after_bytes"]
    if change > 0:
        outcome = f"reclaimed {change:,} bytes"
    elif change == 0:
        outcome = "nothing to reclaim"
    else:  # the rebuilt FTS indexes and the file's own layout may take a few pages more
        outcome = f"nothing to reclaim (the rebuilt file is {-change:,} bytes larger)"
    emit(f"{res['before_bytes']:,} -> {res['after_bytes']:,} bytes: {outcome}")
    return 0


def _storage_progress(enabled: bool) -> Callable[[fts_storage.OptimizeProgress], None] | None:
    """optimize-storage's phases on stderr: a counter line for the backfill (messages
    indexed) and the teardown (old index rows drained), one line for the VACUUM."""
    if not enabled:
        return None
    bars: dict[str, Callable[[int, int], None] | None] = {}
    labels = {"backfill": "indexing messages", "teardown": "draining the old index"}

    def report(p: fts_storage.OptimizeProgress) -> None:
        if p.phase in labels:
            if p.phase not in bars:
                bars[p.phase] = progress(labels[p.phase], True)
            bar = bars[p.phase]
            if bar is not None and p.total:
                bar(p.indexed, p.total)
        elif p.phase == "vacuum":
            emit("vacuuming…", file=sys.stderr, flush=True)

    return report


def cmd_optimize_storage(args) -> int:
    if args.min_pause is not None:  # a one-shot process: the module default is this run's
        fts_storage.PAUSE_MIN_S = args.min_pause
    migrate.require_created("sessions", args.url)  # maintains a store; never creates one
    with SessionStore(args.url) as store:
        res = store.optimize_fts_storage(progress_cb=_storage_progress(progress_enabled(args.json)),
                                         vacuum=not args.no_vacuum, force=args.force)
    if args.json:
        emit_json({"sessions": asdict(res)})
    elif res.ok:
        emit("FTS storage is current (storage version 3)"
             + ("; vacuumed" if res.vacuumed else "; not vacuumed"))
    else:
        hint = {"busy": " (another process holds the FTS rebuild lock; retry later)",
                "insufficient_disk": " (free space first, or --force)",
                "fts_stale": " (the FTS index is stale and another process holds the file)",
                "backfill_incomplete": " (run it again to resume)",
                "teardown_incomplete": " (run it again to resume)"}.get(res.reason or "", "")
        emit(f"not settled: {res.reason}{hint}", file=sys.stderr)
    return 0 if res.ok else 1


def cmd_export(args) -> int:
    if args.output:  # a directory or a link is refused before the store is opened
        refuse_output_path(args.output)
    if args.format or args.lineage or args.all:  # documents (docs/sessions-ui.md §4.11, §4.13)
        from hermes_data.cli.portability import cmd_export_documents

        return cmd_export_documents(args)
    if not args.session:
        emit("hermes-data: error: export needs SESSION (or --all)", file=sys.stderr)
        return 2
    with looking_session_store(args.url) as store:
        if store.get_session(args.session) is None:
            emit(f"hermes-data: error: session {args.session!r} does not exist", file=sys.stderr)
            return 2
        store.assert_export_safe(args.session, args.max_messages)
        show = progress("exported", progress_enabled(False))
        total = store.message_count(args.session) if show else 0
        # A temporary file beside -o FILE, renamed over it when complete (owner-only: a
        # transcript is as private as the database); a failure leaves FILE as it was.
        with output_file(args.output) as out:
            n = write_jsonl(store, args.session, out, page_size=args.page_size,
                            progress=(lambda done: show(done, total)) if show else None)
    # The result, not progress: on stderr so that stdout stays pure JSON Lines.
    emit(f"exported {n:,} message(s) of {args.session}" + (f" to {args.output}" if args.output else ""),
         file=sys.stderr)
    return 0


#: One encoder for every exported line (``json.dumps`` with options builds one per call).
_ENCODE_LINE = json.JSONEncoder(ensure_ascii=False, default=str).encode


def write_jsonl(store: SessionStore, session_id: str, out: TextIO, *, page_size: int = 500,
                progress: Callable[[int], None] | None = None) -> int:
    """Stream one session's active messages to ``out`` as JSON Lines (one object per message,
    the :class:`~hermes_data.sessions.rows.MessageRow` fields in order), keyset-paged
    ``page_size`` rows at a time so memory stays flat; returns the number written. The size
    guard is the caller's (``assert_export_safe``)."""
    after, n = 0, 0
    while True:  # keyset paging: each page is an index seek
        page = store.get_messages(session_id, limit=page_size, after_id=after)
        if not page:
            return n
        out.write("".join([_ENCODE_LINE(m.to_dict()) + "\n" for m in page]))
        n += len(page)
        after = page[-1].id
        if progress is not None:
            progress(n)


def register(subparsers) -> None:
    """Add ``prune``, ``vacuum``, ``optimize-storage`` and ``export`` to the ``hermes-data``
    parser."""
    def url(p: argparse.ArgumentParser) -> None:
        p.add_argument("--url", help="session store URL or SQLite path (default: $HERMES_HOME/state.db)")
        p.set_defaults(store="sessions")

    def as_json(p: argparse.ArgumentParser) -> None:
        p.add_argument("--json", action="store_true",
                       help="machine-readable output: {\"sessions\": {…}}")

    p = subparsers.add_parser("prune", help="delete ended sessions past retention (dry run unless --apply)")
    url(p)
    as_json(p)
    p.add_argument("--older-than-days", type=bounded(float, 0, DAYS_MAX, unit="days"), default=mt.DEFAULT_RETENTION_DAYS, metavar="N",
                   help=f"only sessions inactive for N days (default: {mt.DEFAULT_RETENTION_DAYS:g})")
    p.add_argument("--source", help="only sessions of this source (e.g. cli, cron, telegram)")
    p.add_argument("--cwd-prefix", metavar="DIR",
                   help="only sessions whose working directory is DIR or below it")
    p.add_argument("--title-like", metavar="TEXT",
                   help="only sessions whose title contains TEXT (case-insensitive, literal)")
    p.add_argument("--include-pinned", action="store_true",
                   help="also pinned sessions (open and mid-turn sessions are never deleted)")
    p.add_argument("--apply", action="store_true", help="really delete (default: list only)")
    p.set_defaults(func=cmd_prune)
    p = subparsers.add_parser("vacuum", help="optimize FTS, return free pages (paced steps; VACUUM converts an older file)")
    url(p)
    as_json(p)
    p.set_defaults(func=cmd_vacuum)
    p = subparsers.add_parser(
        "optimize-storage", help="move a legacy FTS layout to the current one: backfill, drain "
                                 "the old index, VACUUM (resumable; exit 1 when not settled)")
    url(p)
    as_json(p)
    p.add_argument("--no-vacuum", action="store_true", help="skip the final VACUUM")
    p.add_argument("--force", action="store_true",
                   help="run even when free disk space looks too small")
    p.add_argument("--min-pause", type=bounded(float, 0, PAUSE_MAX, unit="seconds"), metavar="SECONDS",
                   help=f"shortest pause between steps (default: {fts_storage.PAUSE_MIN_S:g}; "
                        "each pause is at least 4x the step it follows)")
    p.set_defaults(func=cmd_optimize_storage)
    p = subparsers.add_parser("export", help="stream one session's messages as JSONL, or export "
                                             "documents (--format, --lineage, --all)")
    url(p)
    p.add_argument("session", nargs="?", help="id of the session to export")
    p.add_argument("--format", choices=("json", "md", "html"),
                   help="one rendered document (the /save formats) instead of message lines")
    p.add_argument("--lineage", action="store_true",
                   help="the whole compression lineage root to tip as one document")
    p.add_argument("--all", action="store_true",
                   help="every session, one JSON document a line (what import reads)")
    p.add_argument("-o", "--output", metavar="FILE", help="file to write (default: stdout)")
    p.add_argument("--page-size", type=bounded(int, 1, COUNT_MAX), default=500, metavar="N",
                   help="messages read per query (default: 500)")
    p.add_argument("--max-messages", type=bounded(int, 0, COUNT_MAX), metavar="N",
                   help="refuse a session with more than N messages; 0 = no limit (default: "
                        "sessions.max_export_messages, 20000; --all: no limit)")
    p.set_defaults(func=cmd_export)
