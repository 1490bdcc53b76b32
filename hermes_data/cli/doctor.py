"""``hermes-data doctor``: examine a store without changing it.

The file facts (holders, permissions, descriptor headroom) come from :mod:`hermes_data.files`,
which never opens the database or its sidecars; the database itself is examined through SQLite.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import asdict, dataclass, field

from hermes_data.engine import is_wal_reset_vulnerable, linked_sqlite_version
from hermes_data.locking import driver_error
from hermes_data.files import MIN_FD_HEADROOM, descriptor_budget, file_facts, file_holders


@dataclass
class SqliteBuild:
    """Facts about the linked SQLite library."""

    version: str
    wal_reset_vulnerable: bool
    fts5: bool
    trigram: bool


def sqlite_build() -> SqliteBuild:
    """Version, WAL-reset exposure and full-text capabilities of the linked SQLite."""
    con = sqlite3.connect(":memory:")
    try:
        def works(ddl: str) -> bool:
            try:
                con.execute(ddl)
                return True
            except sqlite3.OperationalError:
                return False

        fts5 = works("CREATE VIRTUAL TABLE f USING fts5(x)")
        trigram = fts5 and works("CREATE VIRTUAL TABLE g USING fts5(x, tokenize='trigram')")
    finally:
        con.close()
    return SqliteBuild(sqlite3.sqlite_version, is_wal_reset_vulnerable(linked_sqlite_version()),
                       fts5, trigram)


@dataclass
class DoctorReport:
    """Everything ``hermes-data doctor`` says about one store."""

    store: str
    url: str
    exists: bool
    facts: dict = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def _one_line(exc: BaseException) -> str:
    """A driver error as one line: the driver's own message, without SQL or links."""
    orig = driver_error(exc)
    return " ".join(str(orig).split()) or type(orig).__name__


def doctor(store: str, url=None) -> DoctorReport:
    """Examine one store without changing it: SQLite build, journal mode, permissions,
    holders (and holders of deleted sidecars), descriptor headroom, ``integrity_check``,
    schema drift and revision. Problems make the CLI exit 1; warnings do not.

    A database whose ``-wal``/``-shm`` is held deleted by some process (a split WAL
    generation) is not opened at all: a new connection would mint a second WAL.
    """
    from hermes_data.migrate import runner as migrate
    from hermes_data.config import resolve_url, sqlite_path

    resolved = resolve_url(store, url)
    path = sqlite_path(resolved)
    report = DoctorReport(store, migrate.display_url(resolved),
                          exists=path.exists() if path is not None else True)
    build = sqlite_build()
    report.facts["sqlite"] = asdict(build)
    budget = descriptor_budget()
    report.facts["descriptors"] = {"open": budget.open, "soft_limit": budget.soft_limit,
                                   "headroom": budget.headroom}
    if budget.headroom is not None and budget.headroom < MIN_FD_HEADROOM:
        report.problems.append(f"only {budget.headroom} file descriptors left before the soft limit")
    if not report.exists:
        if path is not None and path.is_symlink():
            report.problems.append(f"{path} is a dangling symbolic link (to {os.readlink(path)}); "
                                   "the stores refuse it: remove the link or create its target")
            return report
        report.warnings.append(f"the store is not created yet (run: hermes-data upgrade --store {store})")
        return report
    if path is not None:
        facts = file_facts(path)
        report.facts["files"] = facts.to_dict()
        if store == "sessions":  # repair ledger, bundles, last error (docs/sessions-storage.md §3.3)
            from hermes_data.sessions.storage.repair.backup import repair_facts
            report.facts["repair"] = repair_facts(path)
        if facts.link_target is not None:
            report.warnings.append(f"{path} is a symbolic link to {facts.link_target}; "
                                   "hermes-data operates on that target")
        if facts.owner_only is False:
            report.problems.append(f"{path} or a sidecar is readable by group/others ({facts.mode}); "
                                   f"run: chmod 600 {path}*")
        holders = file_holders(path)
        if holders is None:
            report.warnings.append("the process table could not be read; holders unknown")
        else:
            report.facts["holders"] = sorted({(h.pid, h.name) for h in holders if not h.deleted})
            split = [h for h in holders if h.deleted]
            if split:
                report.problems.append(
                    "processes hold a deleted -wal/-shm (a split WAL generation; writes may be lost "
                    "— stop them before anything reopens the file): "
                    + ", ".join(f"pid {h.pid} ({h.name}) {h.path}" for h in split)
                )
                return report
    if path is not None:
        # integrity_check, not quick_check: it also compares every index with its table
        # (a missing index entry passes quick_check). Read-only connection, no policy.
        try:
            con = migrate.read_only_connect(path)
            try:
                damage = migrate.sqlite_check(con, "integrity_check")
                if store == "sessions":  # a deferred stale-FTS rebuild (docs/sessions-storage.md §3.8)
                    from hermes_data.sessions.storage.fts.deferral import doctor_facts

                    deferral, futile = doctor_facts(con)
                    if deferral is not None:
                        report.facts["fts_rebuild_deferral"] = deferral
                    if futile:
                        report.warnings.append(futile)
            finally:
                con.close()
        except Exception as exc:
            unwritable = migrate.not_writable(path, exc)  # a read-only directory (issue 31)
            report.problems.append(str(unwritable) if unwritable is not None
                                   else f"{path}: PRAGMA integrity_check failed: {exc}")
            return report
        report.facts["integrity_check"] = damage[:10] or ["ok"]
        if damage:
            report.problems.append(f"{path}: corrupt (PRAGMA integrity_check: "
                                   f"{'; '.join(damage[:3])}{' …' if len(damage) > 3 else ''})")
            return report
        if report.facts["files"]["sizes"].get("db"):
            try:
                migrate.probe_file(migrate.store_spec(store), path, checked=False)
            except Exception as exc:  # foreign: name it, never open it with the store policy
                report.problems.append(str(exc))
                return report
    try:
        st = migrate.status(store, resolved)
    except Exception as exc:  # report, never crash: doctor exists for broken databases
        report.problems.append(f"cannot open the database: {_one_line(exc)}")
        return report
    if path is None:
        from hermes_data.engine import create_engine_for as _engine_for

        server = _engine_for(store, resolved)
        try:
            with server.connect() as conn:
                warning = migrate.server_collation_warning(conn)
        finally:
            server.dispose()
        if warning:
            report.warnings.append(warning)
    report.facts.update(revision=st.revision, head=st.head, journal_mode=st.journal_mode,
                        journal_reason=st.journal_reason, size_bytes=st.size_bytes)
    if st.legacy:
        report.problems.append("legacy database not yet adopted (run: hermes-data upgrade)")
    elif st.revision != st.head:
        report.problems.append(f"schema revision {st.revision} is behind the head {st.head} "
                               "(run: hermes-data upgrade)")
    if path is not None:
        if build.wal_reset_vulnerable and st.journal_mode == "wal":
            report.warnings.append(
                f"SQLite {build.version} has the WAL-reset bug and this file is in WAL mode; "
                "upgrade SQLite to 3.51.3+ (or 3.50.7 / 3.44.6)"
            )
    drift = [d for d in migrate.check(store, resolved) if not d.is_extra]
    report.facts["drift"] = [str(d) for d in drift]
    if drift:
        report.problems.append(f"schema drift: {'; '.join(map(str, drift))}")
    return report
