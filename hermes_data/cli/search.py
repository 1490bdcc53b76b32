"""``hermes-data search QUERY``: search session transcripts (docs/sessions.md §7.2).

Human output by default — one block per hit with its session, role, time and the snippet,
matches highlighted (bold on a terminal, ``>>>…<<<`` otherwise) — or ``--json``.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone

from hermes_data.cli.options import COUNT_MAX, bounded
from hermes_data.cli.output import emit, emit_json
from hermes_data.sessions.search.messages import HIGHLIGHT_END, HIGHLIGHT_START, RESULT_FIELDS
from hermes_data.cli.stores import looking_session_store

_BOLD, _RESET = "\033[1m", "\033[0m"


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``search`` subcommand to ``hermes-data``."""
    p = subparsers.add_parser("search", help="search session messages (FTS5, trigram for CJK, "
                                             "LIKE fallback); highlighted snippets")
    p.add_argument("query", help="what to look for (any text: it is sanitized, never rejected)")
    p.add_argument("--store-url", "--url", dest="url",
                   help="session store path or sqlite:/// URL (default: $HERMES_HOME/state.db)")
    p.add_argument("--json", action="store_true",
                   help="machine-readable output: {\"sessions\": [hit, …]} with every field")
    p.add_argument("--source", action="append", dest="sources", metavar="SOURCE",
                   help="only sessions of this source (repeatable)")
    p.add_argument("--exclude-source", action="append", dest="excluded", metavar="SOURCE",
                   help="skip sessions of this source (repeatable)")
    p.add_argument("--role", action="append", dest="roles", metavar="ROLE",
                   help="only messages of this role (repeatable; 'tool' searches full tool output)")
    p.add_argument("--sort", choices=["rank", "newest", "oldest"], default=None,
                   help="rank (relevance, the default), newest or oldest first")
    p.add_argument("--limit", type=bounded(int, 1, COUNT_MAX), default=20, help="results per page (default 20)")
    p.add_argument("--offset", type=bounded(int, 0, COUNT_MAX), default=0, help="skip this many results")
    p.add_argument("--include-inactive", action="store_true",
                   help="also rewound (inactive) messages")
    p.add_argument("--context", action="store_true",
                   help="show the previous and next message of each hit")
    p.set_defaults(func=cmd_search, store="sessions")


def _highlight(snippet: str, color: bool) -> str:
    text = " ".join(snippet.split())
    if not color:
        return text
    return text.replace(HIGHLIGHT_START, _BOLD).replace(HIGHLIGHT_END, _RESET)


def _when(ts: float | None) -> str:
    if ts is None:
        return "?"
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%d %H:%M")


def cmd_search(args: argparse.Namespace) -> int:
    """Run one search and print it."""
    want_context = args.context or args.json
    fields = None if want_context else [f for f in RESULT_FIELDS if f != "context"]
    with looking_session_store(args.url) as store:  # looking changes nothing
        hits = store.search_messages(
            args.query, source_filter=args.sources, exclude_sources=args.excluded,
            role_filter=args.roles, limit=args.limit, offset=args.offset, sort=args.sort,
            include_inactive=args.include_inactive, fields=fields)
    if args.json:
        emit_json({"sessions": [h.to_json(fields) for h in hits]})
        return 0
    if not hits:
        emit("no results")
        return 0
    color = sys.stdout.isatty()
    for h in hits:
        tool = f" [{h.tool_name}]" if h.tool_name else ""
        emit(f"{h.session_id} #{h.id} {h.role}{tool} · {h.source} · {_when(h.timestamp)}")
        emit(f"    {_highlight(h.snippet or '', color)}")
        for c in h.context or ():
            emit(f"      {c.role}: {' '.join(c.content.split())[:100]}")
    emit(f"{len(hits)} result{'s' if len(hits) != 1 else ''}"
          + (f" (from {args.offset + 1})" if args.offset else ""))
    return 0
