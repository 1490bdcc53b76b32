"""``hermes-data`` command line: a thin layer over :mod:`hermes_data.migrate.runner`.

Human output by default, ``--json`` for machines (one object keyed by store, for every
command). A failure is one line on stderr naming the file or URL and the problem, exit 2;
``-v`` adds the traceback. The library itself never prints.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
import traceback
from typing import Any, Callable, Sequence, TypeVar

from hermes_data.migrate import runner as migrate
from hermes_data.cli.output import (StoreFailure, describe_error, emit, emit_json, progress_enabled,
                         target_of, upgrade_progress)
from hermes_data.config import STORES
from hermes_data.errors import ConfigurationError

log = logging.getLogger("hermes_data.cli.app")
T = TypeVar("T")


def _stores(choice: str) -> list[str]:
    return list(STORES) if choice == "all" else [choice]


def _each(args, fn: Callable[[str, Any], T]) -> dict[str, T]:
    """``fn(store, url)`` for every store the command names; a failure names its database."""
    out: dict[str, T] = {}
    for store in _stores(args.store):
        try:
            out[store] = fn(store, args.url)
        except Exception as exc:
            raise StoreFailure(target_of(store, args.url), exc) from exc
    return out


def _store_arg(parser: argparse.ArgumentParser, default: str, *, inferred: bool = False) -> None:
    """``inferred``: without ``--store``, a ``--url`` SQLite file names its store (like
    ``copy``'s source); ``args.store`` is ``None`` until :func:`main` reads it."""
    parser.add_argument("--store", choices=[*STORES, "all"], default=None if inferred else default,
                        help=f"which store (default: {default}"
                             + ("; with --url FILE, the store that FILE holds)" if inferred else ")"))
    parser.add_argument("--url", help="database URL (sqlite:///PATH, postgresql+psycopg://…) or "
                                      "SQLite path (only with a single --store)")
    parser.add_argument("--json", action="store_true",
                        help="machine-readable output: one object keyed by store")


def _fmt_seconds(s: float) -> str:
    return f"{s * 1000:.1f} ms" if s < 1 else f"{s:.2f} s"


def _upgrade_one(args):
    def run(store: str, url) -> migrate.UpgradeReport:
        with upgrade_progress(store, progress_enabled(args.json)):
            return migrate.upgrade(store, url)
    return run


def cmd_upgrade(args) -> int:
    reports = _each(args, _upgrade_one(args))
    if args.json:
        emit_json({store: r.to_dict() for store, r in reports.items()})
        return 0
    for r in reports.values():
        emit(f"{r.store}: {r.url}")
        if r.up_to_date:
            emit(f"  already at {r.after_revision}; nothing to do ({_fmt_seconds(r.seconds)})")
            for repair in r.repairs:
                emit(f"  repair: {repair}")
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
    states = _each(args, migrate.status)
    if args.json:
        emit_json({store: s.to_dict() for store, s in states.items()})
        return 0
    for s in states.values():
        emit(f"{s.store}: {s.url}")
        if s.link_target is not None:
            emit(f"  symbolic link to: {s.link_target} (the store operates on it)")
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


def _readable(diff) -> str:
    """A schema difference as text; an index key that is an expression reads ``<expression>``."""
    text = str(diff)
    if "index" in diff.kind:
        text = re.sub(r"(?<=[(, ])None(?=[,)])", "<expression>", text)
    return text


def cmd_check(args) -> int:
    results = {}
    for store, diffs in _each(args, migrate.check).items():
        results[store] = {"drift": [_readable(d) for d in diffs if not d.is_extra],
                          "extra": [_readable(d) for d in diffs if d.is_extra]}
    exit_code = 1 if any(res["drift"] for res in results.values()) else 0
    if args.json:
        emit_json(results)
        return exit_code
    for store, res in results.items():
        emit(f"{store}: {'schema matches the head' if not res['drift'] else 'SCHEMA DRIFT'}")
        for line in res["drift"]:
            emit(f"  - {line}")
        for line in res["extra"]:
            emit(f"  (extra, left alone) {line}")
    return exit_code


def _size(n) -> str:
    return f"{n:,} bytes" if isinstance(n, int) else "unknown"


def cmd_doctor(args) -> int:
    from hermes_data.cli.doctor import doctor

    if getattr(args, "repair", False):  # same as `hermes-data repair` (docs/sessions-storage.md §3.3)
        from hermes_data.cli.repair import cmd_repair
        return cmd_repair(args)
    reports = _each(args, doctor)
    failed = any(r.problems for r in reports.values())
    if args.json:
        emit_json({store: r.to_dict() for store, r in reports.items()})
        return 1 if failed else 0
    for r in reports.values():
        emit(f"{r.store}: {r.url}")
        sqlite = r.facts.get("sqlite", {})
        emit(f"  SQLite {sqlite.get('version', 'unknown')}"
             f"{' (has the WAL-reset bug)' if sqlite.get('wal_reset_vulnerable') else ''}; "
             f"FTS5 {'yes' if sqlite.get('fts5') else 'no'}, trigram {'yes' if sqlite.get('trigram') else 'no'}")
        if r.exists and "head" in r.facts:
            revision = r.facts.get("revision") or "none (unversioned)"
            emit(f"  revision {revision} (head {r.facts.get('head')})")
            if r.facts.get("journal_mode"):
                emit(f"  journal mode {r.facts['journal_mode']} ({r.facts.get('journal_reason')})")
        files = r.facts.get("files")
        if files:
            sizes = ", ".join(f"{name} {_size(n)}" for name, n in files.get("sizes", {}).items())
            emit(f"  permissions {files.get('mode')}; sizes: {sizes or 'none'}")
        if "holders" in r.facts:
            holders = r.facts["holders"]
            emit(f"  held open by {len(holders)} process(es)"
                 + (": " + ", ".join(f"{pid} {name}" for pid, name in holders) if holders else ""))
        if "quick_check" in r.facts:
            emit(f"  quick_check: {', '.join(r.facts['quick_check'])}")
        if "integrity_check" in r.facts:
            emit(f"  integrity_check: {', '.join(r.facts['integrity_check'])}")
        if r.facts.get("repair"):
            from hermes_data.cli.repair import facts_lines
            for line in facts_lines(r.facts["repair"]):
                emit(line)
        fds = r.facts.get("descriptors", {})
        if fds.get("open") is not None:
            limit = fds.get("soft_limit")
            emit(f"  descriptors: {fds['open']} open of {limit if limit is not None else 'no limit'}")
        for w in r.warnings:
            emit(f"  warning: {w}")
        for p in r.problems:
            emit(f"  PROBLEM: {p}")
        if not r.problems:
            emit("  no problems found")
    return 1 if failed else 0


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("hermes-data")
    except PackageNotFoundError:  # pragma: no cover - running from an uninstalled tree
        return "unknown"
    except OSError:  # the package's metadata unreadable (a failing disk): still run the command
        return "unknown (its metadata cannot be read)"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``hermes-data`` (also used to check the README documents it).

    Every subcommand is registered here. The modules that add their own (search, maintenance,
    copy, stats) each define ``register(subparsers)`` and set ``func`` on their parsers, keeping
    each concern's CLI beside its code; they write through :mod:`hermes_data.cli.output` and
    never import this module.
    """
    from hermes_data.cli import copy as cli_copy
    from hermes_data.cli import maintenance as cli_maintenance
    from hermes_data.cli import portability as cli_portability
    from hermes_data.cli import repair as cli_repair
    from hermes_data.cli import search as cli_search
    from hermes_data.cli import stats as cli_stats

    parser = argparse.ArgumentParser(
        prog="hermes-data",
        description="Create, upgrade, inspect and maintain the Hermes telemetry and session "
                    "stores (SQLite or PostgreSQL).",
        epilog="Exit codes: 0 success, 1 drift (check) or problems (doctor), 2 error. "
               "Stores: telemetry ($HERMES_HOME/telemetry/telemetry.db) and sessions "
               "($HERMES_HOME/state.db) unless --url or HERMES_DATA_*_URL say otherwise.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="log progress to stderr and show the traceback of a failure")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("upgrade", help="create or upgrade (adopting legacy files) the stores")
    _store_arg(p, "all", inferred=True)
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
    p.add_argument("--repair", action="store_true",
                   help="run `hermes-data repair` on the session store instead (dry run unless --apply)")
    cli_repair.add_repair_options(p, json_flag=False)
    p.set_defaults(func=cmd_doctor)
    for module in (cli_search, cli_maintenance, cli_portability, cli_copy, cli_repair, cli_stats):
        module.register(sub)
    for command in sub.choices.values():  # -v also after the subcommand
        command.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                             help="log progress to stderr and show the traceback of a failure")
    return parser


#: ``scheme:`` at the start of a location that is not ``scheme://…`` (e.g. ``sqlite:/x.db``).
_URL_LIKE = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:")
_BACKENDS = ("sqlite", "postgresql")


def check_location(text: str | None) -> None:
    """Refuse a ``--url``/``--from``/``--to`` that is a malformed or unsupported URL.

    A plain path is a SQLite file; ``sqlite:///…`` and ``postgresql+psycopg://…`` are URLs.
    ``sqlite:/relative.db`` would otherwise be taken as a path and create a directory named
    ``sqlite:``.
    """
    if not text:
        return
    if "://" not in text:
        if _URL_LIKE.match(text):
            raise ConfigurationError(
                f"{text}: not a database URL (a URL is scheme://…, e.g. sqlite:///relative.db or "
                f"sqlite:////absolute.db); a file whose name has a colon is written ./NAME")
        return
    from sqlalchemy.engine import make_url

    try:
        url = make_url(text)
    except Exception as exc:
        raise ConfigurationError(f"{text}: not a database URL ({exc})") from exc
    if url.get_backend_name() not in _BACKENDS:
        raise ConfigurationError(
            f"{url.render_as_string(hide_password=True)}: unsupported database "
            f"{url.get_backend_name()!r} (hermes-data runs on SQLite and PostgreSQL: "
            "sqlite:///PATH or postgresql+psycopg://HOST/DB)")


def _check_locations(args) -> None:
    for name in ("url", "source", "target") if args.command == "copy" else ("url",):
        check_location(getattr(args, name, None))
    for store in STORES:
        env = f"HERMES_DATA_{store.upper()}_URL"
        value = os.environ.get(env, "").strip()
        if value and getattr(args, "url", None) is None:
            try:
                check_location(value)
            except ConfigurationError as exc:
                raise ConfigurationError(f"{env}: {exc}") from exc


def _default_target(args) -> str | None:
    store = getattr(args, "store", None)
    if store in STORES and args.command != "copy":  # copy has two databases: its errors name them
        return target_of(store, getattr(args, "url", None))
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``hermes-data`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    if getattr(args, "url", None) and args.store == "all":
        parser.error("--url needs a single --store")
    try:
        _check_locations(args)
        if args.command == "upgrade" and args.store is None:  # `upgrade [--url FILE]`, no --store
            from hermes_data.cli.copy import infer_store  # the same reading as copy's source

            args.store = infer_store(args.url, creating=True) if args.url else "all"
        code = args.func(args)
        sys.stdout.flush()  # a closed pipe shows here, inside the handler, not at exit
        return code
    except BrokenPipeError:
        # The reader went away (``hermes-data … --json | head``): not an error of ours.
        # Point stdout at /dev/null so the interpreter's final flush does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        emit("hermes-data: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if args.verbose:
            traceback.print_exc(file=sys.stderr)
        emit(f"hermes-data: error: {describe_error(exc, _default_target(args))}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
