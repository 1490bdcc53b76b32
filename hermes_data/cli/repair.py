"""``hermes-data repair`` (and ``doctor --repair``): the malformed-schema repair of the
session store from the command line (docs/sessions-storage.md §3.3).

A dry run unless ``--apply``: it reports whether the file opens cleanly, the attempt ledger,
the existing forensic bundles, other processes holding the file, and the backup path a repair
would write. ``--apply`` runs :func:`~hermes_data.sessions.storage.repair.procedure.repair_state_db_schema` and
prints the backup path it wrote. Exit 0 when the file is (or was made) healthy, 1 when a repair
is needed (dry run) or failed, 2 when the file is no session store to repair (not SQLite, or
another application's database: refused, nothing written).
"""

from __future__ import annotations

import argparse
from dataclasses import asdict
from typing import Any

from hermes_data.cli.output import emit, emit_json
from hermes_data.config import resolve_url, sqlite_path
from hermes_data.errors import ConfigurationError


def _path(url: str | None):
    resolved = resolve_url("sessions", url)
    path = sqlite_path(resolved)
    if path is None:
        raise ConfigurationError(f"{resolved.render_as_string(hide_password=True)}: repair is "
                                 "for SQLite files only (PostgreSQL has no file to repair)")
    return path


def cmd_repair(args) -> int:
    """Dry run, or (``--apply``) the repair; see the module docstring."""
    from hermes_data.sessions.storage.repair import procedure as repair

    path = _path(getattr(args, "url", None))
    diag = repair.diagnose(path)
    if not args.apply:
        if args.json:
            emit_json({"sessions": {"dry_run": True, **asdict(diag)}})
        else:
            _show_diagnosis(diag)
            if diag.exists and not diag.healthy and not diag.refused:
                emit(f"  would write the backup {diag.would_write} and repair "
                     "(dry run; add --apply)")
        if diag.refused:
            return 2
        return 0 if not diag.exists or diag.healthy else 1
    report = repair.repair_state_db_schema(path, backup=not args.no_backup)
    if args.json:
        emit_json({"sessions": {"dry_run": False, **report.to_dict()}})
    else:
        emit(f"sessions: {path}")
        if report.backup_path:
            emit(f"  backup written: {report.backup_path}")
        if report.ok:
            emit(f"  {'repaired' if report.rewritten else 'nothing to repair'}: "
                 f"{report.strategy}")
        else:
            emit(f"  PROBLEM: {report.error}")
    if report.refused:
        return 2
    return 0 if report.ok else 1


def _show_diagnosis(diag: Any) -> None:
    emit(f"sessions: {diag.path}")
    if not diag.exists:
        emit("  no such file: nothing to repair")
        return
    if diag.refused:
        emit(f"  REFUSED: {diag.refused}")
        return
    emit(f"  opens cleanly: {'yes' if diag.healthy else 'no (' + str(diag.why) + ')'}")
    for line in facts_lines({"ledger": diag.ledger, "bundles": diag.bundles}):
        emit(line)
    if diag.holders:
        emit("  held by: " + ", ".join(f"pid {p} {w}" if p > 0 else w for p, w in diag.holders))


def facts_lines(facts: dict[str, Any]) -> list[str]:
    """``doctor``'s lines for the repair facts: ledger, bundles, last error."""
    out = []
    ledger = facts.get("ledger")
    if ledger:
        out.append(f"  repair ledger: {ledger.get('failed_attempts')} failed attempt(s) of image "
                   f"{ledger.get('fingerprint')}"
                   + (" (exhausted)" if facts.get("exhausted") else ""))
        if ledger.get("last_error"):
            out.append(f"  last repair error: {ledger['last_error']}")
    bundles = facts.get("bundles") or []
    out.append(f"  repair backups: {', '.join(bundles) if bundles else 'none'}")
    return out


def register(subparsers) -> None:
    """Add ``repair`` to the ``hermes-data`` parser."""
    p = subparsers.add_parser(
        "repair", help="repair a malformed session-store schema (dry run unless --apply); "
                       "prints the backup path it would write / wrote")
    p.add_argument("--url", help="session store SQLite path (default: $HERMES_HOME/state.db)")
    add_repair_options(p)
    p.set_defaults(func=cmd_repair, store="sessions")


def add_repair_options(p: argparse.ArgumentParser, *, json_flag: bool = True) -> None:
    """``--apply``, ``--no-backup`` (and ``--json``) of ``repair`` and ``doctor --repair``."""
    p.add_argument("--apply", action="store_true", help="really repair (default: report only)")
    p.add_argument("--no-backup", action="store_true",
                   help="skip the forensic backup bundle (not recommended)")
    if json_flag:
        p.add_argument("--json", action="store_true",
                       help="machine-readable output: {\"sessions\": {…}}")
