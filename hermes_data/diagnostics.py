"""Process and file facts for ``hermes-data doctor``, from psutil (one portable implementation
instead of hand-parsed ``/proc``).

Nothing here opens the database file or its sidecars with ``open()``: closing any descriptor
of a file drops every POSIX lock this process holds on it, including those of live SQLite
connections. Files are examined by path (``stat``) and through SQLite itself.
"""

from __future__ import annotations

import os
import sqlite3
import stat
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

from .engine import SqliteSettings, is_wal_reset_vulnerable, linked_sqlite_version

SIDECARS = ("-wal", "-shm")


@dataclass(frozen=True)
class Holder:
    """A process with a descriptor on a file."""

    pid: int
    name: str
    path: str
    deleted: bool = False


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


def _targets(path: Path) -> dict[str, str]:
    resolved = str(path.resolve())
    return {resolved: "db", **{resolved + s: s for s in SIDECARS}}


def file_holders(path: Path) -> list[Holder] | None:
    """Processes holding ``path`` or its ``-wal``/``-shm`` open, including holders of
    *deleted* sidecar inodes (a split WAL generation). ``None`` when the process table
    cannot be read at all. Unreadable processes are skipped (the list is a lower bound)."""
    targets = _targets(path)
    holders: list[Holder] = []
    try:
        procs = list(psutil.process_iter(["pid", "name"]))
    except psutil.Error:
        return None
    for proc in procs:
        pid, name = proc.info["pid"], proc.info.get("name") or "?"
        try:
            files = proc.open_files()
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
        holders += [Holder(pid, name, f.path) for f in files if f.path in targets]
        holders += [Holder(pid, name, p, deleted=True) for p in _deleted_descriptors(pid)
                    if p in targets]
    return holders


def _deleted_descriptors(pid: int) -> list[str]:
    """Paths of *deleted* files ``pid`` still holds. psutil's ``open_files`` drops deleted
    files, so on Linux the descriptor links are read directly (readlink only — nothing is
    opened); elsewhere the answer is empty (unknown)."""
    fd_dir = f"/proc/{pid}/fd"
    out: list[str] = []
    try:
        entries = os.listdir(fd_dir)
    except OSError:
        return out
    for entry in entries:
        try:
            target = os.readlink(f"{fd_dir}/{entry}")
        except OSError:
            continue
        if target.endswith(" (deleted)"):
            out.append(target[: -len(" (deleted)")])
    return out


@dataclass
class DescriptorBudget:
    """Open descriptors of this process against its soft limit."""

    open: int | None
    soft_limit: int | None

    @property
    def headroom(self) -> int | None:
        if self.open is None or self.soft_limit in (None, -1):
            return None
        return self.soft_limit - self.open


def descriptor_budget() -> DescriptorBudget:
    """This process's open descriptors and soft ``RLIMIT_NOFILE``."""
    proc = psutil.Process()
    try:
        used = proc.num_fds()
    except (AttributeError, psutil.Error):
        used = None
    try:
        soft = proc.rlimit(psutil.RLIMIT_NOFILE)[0]
    except (AttributeError, psutil.Error):
        soft = None
    return DescriptorBudget(used, soft)


@dataclass
class FileFacts:
    """Permissions and sizes of a database and its sidecars, read by ``stat``."""

    path: str
    exists: bool
    mode: str | None = None
    owner_only: bool | None = None
    sizes: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def file_facts(path: Path) -> FileFacts:
    """Mode bits and sizes of ``path`` and its sidecars (never opens them)."""
    facts = FileFacts(str(path), path.exists())
    if not facts.exists:
        return facts
    mode = path.stat().st_mode
    facts.mode = stat.filemode(mode)
    owner_only = not (mode & (stat.S_IRWXG | stat.S_IRWXO))
    for suffix in ("", *SIDECARS):
        p = Path(f"{path}{suffix}")
        if p.exists():
            st = p.stat()
            facts.sizes[suffix or "db"] = st.st_size
            owner_only = owner_only and not (st.st_mode & (stat.S_IRWXG | stat.S_IRWXO))
    facts.owner_only = owner_only
    return facts


def make_owner_only(path: Path) -> list[str]:
    """``chmod 0600`` the database and existing sidecars **by path** (never by descriptor).
    Returns the files changed."""
    changed = []
    for suffix in ("", *SIDECARS):
        p = Path(f"{path}{suffix}")
        if p.exists() and (p.stat().st_mode & 0o777) != 0o600:
            os.chmod(p, 0o600)
            changed.append(str(p))
    return changed


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


#: Minimum descriptor headroom before new read connections are refused (spec sessions §8.7).
MIN_FD_HEADROOM = 64


def doctor(store: str, url=None) -> DoctorReport:
    """Examine one store without changing it: SQLite build, journal mode, permissions,
    holders (and holders of deleted sidecars), descriptor headroom, ``quick_check``,
    schema drift and revision. Problems make the CLI exit 1; warnings do not.

    A database whose ``-wal``/``-shm`` is held deleted by some process (a split WAL
    generation) is not opened at all: a new connection would mint a second WAL.
    """
    from . import migrate
    from .config import resolve_url, sqlite_path
    from .engine import create_engine_for

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
        report.warnings.append("the store does not exist yet (run: hermes-data upgrade)")
        return report
    if path is not None:
        facts = file_facts(path)
        report.facts["files"] = facts.to_dict()
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
    try:
        st = migrate.status(store, resolved)
    except Exception as exc:  # report, never crash: doctor exists for broken databases
        report.problems.append(f"cannot open the database: {exc}")
        return report
    if path is None:
        from .engine import create_engine_for as _engine_for

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
        spec = migrate.store_spec(store)
        engine = create_engine_for(store, resolved, SqliteSettings(busy_timeout_ms=spec.busy_timeout_ms))
        try:
            with engine.connect() as conn:
                rows = [r[0] for r in conn.exec_driver_sql("PRAGMA quick_check").fetchall()]
            report.facts["quick_check"] = rows[:10]
            if rows != ["ok"]:
                report.problems.append(f"PRAGMA quick_check reports corruption: {rows[:3]}")
        except Exception as exc:
            report.problems.append(f"PRAGMA quick_check failed: {exc}")
            return report
        finally:
            engine.dispose()
    drift = [d for d in migrate.check(store, resolved) if not d.is_extra]
    report.facts["drift"] = [str(d) for d in drift]
    if drift:
        report.problems.append(f"schema drift: {'; '.join(map(str, drift))}")
    return report
