"""``hermes-data`` command line: a thin layer over :mod:`hermes_data.migrate`.

Human output by default, ``--json`` for machines. The library itself never prints.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Sequence

from . import migrate
from .cli_output import emit
from .config import STORES
from .errors import HermesDataError

log = logging.getLogger("hermes_data.cli")


def _stores(choice: str) -> list[str]:
    return list(STORES) if choice == "all" else [choice]


def _store_arg(parser: argparse.ArgumentParser, default: str) -> None:
    parser.add_argument("--store", choices=[*STORES, "all"], default=default,
                        help=f"which store (default: {default})")
    parser.add_argument("--url", help="database URL or SQLite path (only with a single --store)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _fmt_seconds(s: float) -> str:
    return f"{s * 1000:.1f} ms" if s < 1 else f"{s:.2f} s"


def cmd_upgrade(args) -> int:
    reports = [migrate.upgrade(store, args.url) for store in _stores(args.store)]
    if args.json:
        emit(json.dumps([r.to_dict() for r in reports], indent=2))
        return 0
    for r in reports:
        emit(f"{r.store}: {r.url}")
        if r.up_to_date:
            emit(f"  already at {r.after_revision}; nothing to do ({_fmt_seconds(r.seconds)})")
            continue
        if r.adopted_from:
            emit(f"  adopted legacy database: {r.adopted_from}")
        emit(f"  revision {r.before_revision or '(none)'} -> {r.after_revision}")
        if r.applied:
            emit(f"  applied: {', '.join(r.applied)}")
        for repair in r.repairs:
            emit(f"  repair: {repair}")
        for extra in r.extra_objects:
            emit(f"  left alone: {extra}")
        for warning in r.warnings:
            emit(f"  warning: {warning}")
        slow = sorted(r.step_seconds.items(), key=lambda kv: -kv[1])[:5]
        if slow:
            emit("  slowest steps: " + ", ".join(f"{k} {_fmt_seconds(v)}" for k, v in slow))
        emit(f"  journal mode: {r.journal_mode}; done in {_fmt_seconds(r.seconds)}")
    return 0


def cmd_status(args) -> int:
    states = [migrate.status(store, args.url) for store in _stores(args.store)]
    if args.json:
        emit(json.dumps([s.to_dict() for s in states], indent=2))
        return 0
    for s in states:
        emit(f"{s.store}: {s.url}")
        if not s.exists:
            emit("  not created yet (run: hermes-data upgrade)")
            continue
        state = "legacy (not yet adopted)" if s.legacy else (s.revision or "unversioned")
        behind = "" if s.revision == s.head else f" (head is {s.head})"
        emit(f"  revision: {state}{behind}")
        if s.journal_mode:
            emit(f"  journal mode: {s.journal_mode} ({s.journal_reason})")
        if s.size_bytes is not None:
            emit(f"  size: {s.size_bytes:,} bytes")
    return 0


def cmd_check(args) -> int:
    exit_code = 0
    results = {}
    for store in _stores(args.store):
        diffs = migrate.check(store, args.url)
        drift = [d for d in diffs if not d.is_extra]
        results[store] = {"drift": [str(d) for d in drift],
                          "extra": [str(d) for d in diffs if d.is_extra]}
        if drift:
            exit_code = 1
    if args.json:
        emit(json.dumps(results, indent=2))
        return exit_code
    for store, res in results.items():
        emit(f"{store}: {'schema matches the head' if not res['drift'] else 'SCHEMA DRIFT'}")
        for line in res["drift"]:
            emit(f"  - {line}")
        for line in res["extra"]:
            emit(f"  (extra, left alone) {line}")
    return exit_code


def cmd_doctor(args) -> int:
    from .diagnostics import doctor

    reports = [doctor(store, args.url) for store in _stores(args.store)]
    failed = any(r.problems for r in reports)
    if args.json:
        emit(json.dumps([r.to_dict() for r in reports], indent=2, default=str))
        return 1 if failed else 0
    for r in reports:
        emit(f"{r.store}: {r.url}")
        sqlite = r.facts.get("sqlite", {})
        emit(f"  SQLite {sqlite.get('version')}"
             f"{' (WAL-reset bug)' if sqlite.get('wal_reset_vulnerable') else ''}; "
             f"FTS5 {'yes' if sqlite.get('fts5') else 'no'}, trigram {'yes' if sqlite.get('trigram') else 'no'}")
        if r.exists:
            emit(f"  revision {r.facts.get('revision')} (head {r.facts.get('head')}); "
                 f"journal mode {r.facts.get('journal_mode')} ({r.facts.get('journal_reason')})")
            files = r.facts.get("files")
            if files:
                emit(f"  permissions {files['mode']}; sizes {files['sizes']}")
            if "holders" in r.facts:
                holders = r.facts["holders"]
                emit(f"  held open by {len(holders)} process(es)"
                     + (": " + ", ".join(f"{pid} {name}" for pid, name in holders) if holders else ""))
            if "integrity_check" in r.facts:
                emit(f"  integrity_check: {', '.join(r.facts['integrity_check'])}")
        fds = r.facts.get("descriptors", {})
        emit(f"  descriptors: {fds.get('open')} open of {fds.get('soft_limit')}")
        for w in r.warnings:
            emit(f"  warning: {w}")
        for p in r.problems:
            emit(f"  PROBLEM: {p}")
        if not r.problems:
            emit("  no problems found")
    return 1 if failed else 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``hermes-data`` (also used to check the README documents it).

    Every subcommand is registered here. The modules that add their own (search, maintenance,
    copy) each define ``register(subparsers)`` and set ``func`` on their parsers, keeping each
    concern's CLI beside its code; they write through :mod:`hermes_data.cli_output` and never
    import this module.
    """
    from . import cli_copy, cli_maintenance, cli_search

    parser = argparse.ArgumentParser(prog="hermes-data", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("upgrade", help="create or upgrade (adopting legacy files) the stores")
    _store_arg(p, "all")
    p.set_defaults(func=cmd_upgrade)
    p = sub.add_parser("status", help="where each store lives, its revision, journal mode, size")
    _store_arg(p, "all")
    p.set_defaults(func=cmd_status)
    p = sub.add_parser("check", help="exit 1 when the live schema differs from the metadata")
    _store_arg(p, "all")
    p.set_defaults(func=cmd_check)
    p = sub.add_parser("doctor", help="examine both stores: SQLite build, journal mode, permissions, "
                                      "holders, descriptors, integrity_check, drift (exit 1 on problems)")
    _store_arg(p, "all")
    p.set_defaults(func=cmd_doctor)
    for module in (cli_search, cli_maintenance, cli_copy):
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``hermes-data`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    if getattr(args, "url", None) and args.store == "all":
        parser.error("--url needs a single --store")
    try:
        return args.func(args)
    except HermesDataError as exc:
        emit(f"hermes-data: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
