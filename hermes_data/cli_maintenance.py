"""``hermes-data prune | vacuum | export``: session-store maintenance from the command line.

Human output on stdout, progress of long operations on stderr. ``prune`` is a dry run unless
``--apply`` is given.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict

from . import migrate
from .cli_output import emit
from .sessions import maintenance as mt
from .sessions.store import SessionStore


def _progress(label: str):
    def report(done: int, total: int) -> None:
        emit(f"\r{label}: {done:,}/{total:,}", end="" if done < total else "\n",
              file=sys.stderr, flush=True)
    return report


def cmd_prune(args) -> int:
    filters = {k: v for k, v in (("source", args.source), ("cwd_prefix", args.cwd_prefix),
                                 ("title_like", args.title_like)) if v is not None}
    if args.include_pinned:
        filters["include_pinned"] = True
    if not args.apply:
        migrate.require_created("sessions", args.url)  # a dry run creates nothing
    with SessionStore(args.url) as store:
        if not args.apply:
            rows = mt.list_prune_candidates(store, args.older_than_days, **filters)
            spared = mt.count_open_prune_matches(store, args.older_than_days, **filters)
            if args.json:
                emit(json.dumps({"would_delete": [asdict(r) for r in rows],
                                  "open_spared": spared}, indent=2))
                return 0
            for r in rows:
                emit(f"{r.id}  {r.source:<10} {r.message_count:>6} msgs  {r.title or ''}")
            emit(f"{len(rows)} session(s) would be deleted (dry run; add --apply); "
                  f"{spared} open session(s) matching the filters are spared")
            return 0
        n = mt.prune_sessions(store, args.older_than_days, progress=_progress("pruning"),
                              exclude_active_write_guards=True, **filters)
    emit(json.dumps({"deleted": n}) if args.json else f"deleted {n} session(s)")
    return 0


def cmd_vacuum(args) -> int:
    with SessionStore(args.url) as store:
        emit("optimizing FTS indexes and vacuuming…", file=sys.stderr, flush=True)
        res = mt.vacuum(store)
    if args.json:
        emit(json.dumps(res))
    else:
        emit(f"{res['before_bytes']:,} -> {res['after_bytes']:,} bytes "
              f"(reclaimed {res['reclaimed_bytes']:,})")
    return 0


def cmd_export(args) -> int:
    with SessionStore(args.url, read_only=True) as store:
        if store.get_session(args.session) is None:
            emit(f"hermes-data: error: session {args.session!r} does not exist", file=sys.stderr)
            return 2
        store.assert_export_safe(args.session)
        # Owner-only, like the stores: a transcript is as private as the database.
        out = (os.fdopen(os.open(args.output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600),
                         "w", encoding="utf-8") if args.output else sys.stdout)
        if args.output:
            os.chmod(args.output, 0o600)  # an existing file keeps its mode through O_TRUNC
        try:
            after, n = 0, 0
            while True:  # keyset paging: each page is an index seek
                page = store.get_messages(args.session, limit=args.page_size, after_id=after)
                if not page:
                    break
                for m in page:
                    out.write(json.dumps(asdict(m), ensure_ascii=False, default=str) + "\n")
                n += len(page)
                after = page[-1].id
                emit(f"\rexported {n:,} message(s)", end="", file=sys.stderr, flush=True)
            emit(file=sys.stderr)
        finally:
            if out is not sys.stdout:
                out.close()
    return 0


def register(subparsers) -> None:
    """Add ``prune``, ``vacuum`` and ``export`` to the ``hermes-data`` parser."""
    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--url", help="session store URL or SQLite path (default: $HERMES_HOME/state.db)")
        p.add_argument("--json", action="store_true", help="machine-readable output")
        p.set_defaults(store="sessions")

    p = subparsers.add_parser("prune", help="delete ended sessions past retention (dry run unless --apply)")
    common(p)
    p.add_argument("--older-than-days", type=float, default=mt.DEFAULT_RETENTION_DAYS)
    p.add_argument("--source")
    p.add_argument("--cwd-prefix")
    p.add_argument("--title-like")
    p.add_argument("--include-pinned", action="store_true")
    p.add_argument("--apply", action="store_true", help="really delete")
    p.set_defaults(func=cmd_prune)
    p = subparsers.add_parser("vacuum", help="optimize FTS, VACUUM between PASSIVE checkpoints")
    common(p)
    p.set_defaults(func=cmd_vacuum)
    p = subparsers.add_parser("export", help="stream one session's messages as JSONL")
    common(p)
    p.add_argument("session")
    p.add_argument("-o", "--output", help="file to write (default: stdout)")
    p.add_argument("--page-size", type=int, default=500)
    p.set_defaults(func=cmd_export)
