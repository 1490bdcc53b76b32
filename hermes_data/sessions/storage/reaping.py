"""Orphan desktop-backend reaping and the holder scan of stale-FTS recovery
(docs/sessions-storage.md §3.0 "Holder scans", docs/sessions-storage.md §3.8 "Reaping").

Stale-FTS recovery waits until no other process holds the database. An orphaned Hermes
Desktop backend (``serve``/``dashboard --port 0``, #78821) can hold it forever; only the
stale escalation of :mod:`.fts_deferral` may end one, and only after every proof:

* the pid is > 0, not this process or one of its ancestors, and proven *by descriptor* to
  hold ``<db>``, ``-wal`` or ``-shm`` (``" (deleted)"`` stripped, paths canonical);
* its parent is 0 or 1 (an orphan); it is at least ``min_age_seconds`` old;
* its argv has ``serve`` or ``dashboard`` and ``--port 0`` / ``--port=0`` (gateways, CLIs,
  TUIs, cron, agents and fixed-port dashboards never qualify);
* it has no ``ESTABLISHED`` inet connection (no client is using it); it runs as this user;
* no inspection step raised.

Then ``terminate()`` all, ``wait_procs(1.5 s)``, ``kill()`` the survivors, ``wait_procs(1.5 s)``
— through the same ``psutil.Process`` objects (psutil refuses a recycled pid). Linux only;
the ``sessions.reap_orphan_desktop_backends`` setting (default true) turns it off.

Everything is injectable (:class:`Inspection`): tests give fake process objects and never
signal a process they did not spawn.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import psutil

from hermes_data.config import config_section
from hermes_data.files import SIDECARS, deleted_descriptors
from hermes_data.sessions.storage import filesafety

log = logging.getLogger("hermes_data.sessions.storage.reaping")

#: A holder must be at least this old to be reaped (seconds).
MIN_AGE_SECONDS = 60.0
#: ``wait_procs`` timeout after SIGTERM, and again after SIGKILL.
WAIT_SECONDS = 1.5
#: The setting (``sessions:`` section) and its default.
SETTING = "reap_orphan_desktop_backends"
DEFAULT_ENABLED = True

Holder = tuple[int, str]
_DELETED = " (deleted)"


def scan_holders(db_path: Path | None) -> list[Holder]:
    """The shared holder scan of docs/sessions-storage.md §3.0 (:func:`hermes_data.sessions.storage.filesafety.holder_scan`):
    ``(pid, path)`` of every *other* process holding ``<db>``, ``-wal`` or ``-shm`` (deleted
    inodes too), ``(pid, "uninspectable")`` for an unreadable process whose argv names Hermes
    and no other home, ``[(-1, reason)]`` for a failed scan. Any entry means "held"."""
    if db_path is None:
        return [(-1, "no database path")]
    return filesafety.holder_scan(db_path)


def enabled(config: Any) -> bool:
    """``sessions.reap_orphan_desktop_backends`` of a store config (mapping or callable);
    missing or unreadable ⇒ the default (true); only a real ``False``/"false"/0 turns it off."""
    try:
        value = config_section(config, "sessions").get(SETTING, DEFAULT_ENABLED)
    except Exception:  # noqa: BLE001 - a config failure keeps the default
        return DEFAULT_ENABLED
    if isinstance(value, str):
        return value.strip().lower() not in ("false", "0", "no", "off")
    return bool(value) if value is not None else DEFAULT_ENABLED


@dataclass
class Inspection:
    """What the reaper asks the system (every part injectable)."""

    #: ``psutil.Process``-like factory: ``ppid()``, ``create_time()``, ``cmdline()``,
    #: ``open_files()``, ``net_connections(kind=)`` or ``connections(kind=)``, ``uids()``,
    #: ``terminate()``, ``kill()``.
    process: Callable[[int], Any] = psutil.Process
    #: ``psutil.wait_procs``-like: ``(procs, timeout) -> (gone, alive)``.
    wait_procs: Callable[..., tuple[Sequence[Any], Sequence[Any]]] = psutil.wait_procs
    clock: Callable[[], float] = time.time
    platform: str = field(default_factory=lambda: sys.platform)
    uid: Callable[[], int] = os.getuid
    #: This process and its ancestors (never reaped).
    protected: Callable[[], set[int]] = field(default_factory=lambda: _self_and_ancestors)
    #: The paths a process holds open (the descriptor proof; deleted files included).
    descriptors: Callable[[Any], list[str]] = field(default_factory=lambda: _descriptors)


def _descriptors(proc: Any) -> list[str]:
    """``open_files()`` paths, plus on Linux the process's links to *deleted* files (psutil
    omits them; a backend holding a deleted ``-wal`` is exactly the stuck holder)."""
    paths = [str(getattr(f, "path", f)) for f in proc.open_files()]
    if isinstance(proc, psutil.Process):
        paths += deleted_descriptors(proc.pid)
    return paths


def _self_and_ancestors() -> set[int]:
    me = os.getpid()
    out = {me}
    try:
        out.update(p.pid for p in psutil.Process(me).parents())
    except psutil.Error:
        pass
    return out


def _canonical(path: str) -> str:
    if path.endswith(_DELETED):
        path = path[: -len(_DELETED)]
    return os.path.realpath(path)


def _targets(db_path: Path) -> set[str]:
    base = os.path.realpath(db_path)
    return {base, *(base + s for s in SIDECARS)}


def _desktop_argv(argv: Iterable[str]) -> bool:
    """``serve`` or ``dashboard`` and an ephemeral port (``--port 0`` / ``--port=0``)."""
    args = [str(a) for a in argv]
    if not ({"serve", "dashboard"} & set(args)):  # the subcommand itself, never a path
        return False
    if "--port=0" in args:
        return True
    return any(a == "--port" and i + 1 < len(args) and args[i + 1] == "0"
               for i, a in enumerate(args))


def _established(proc: Any) -> bool:
    conns = getattr(proc, "net_connections", None) or getattr(proc, "connections")
    return any(getattr(c, "status", None) == psutil.CONN_ESTABLISHED for c in conns(kind="inet"))


def _qualifies(proc: Any, targets: set[str], insp: Inspection, min_age: float) -> str | None:
    """None when every proof holds, else why not (inspection errors propagate to the caller)."""
    if not any(_canonical(p) in targets for p in insp.descriptors(proc)):
        return "not proven by descriptor to hold the database"
    if proc.ppid() not in (0, 1):
        return "has a parent"
    if insp.clock() - float(proc.create_time()) < min_age:
        return f"younger than {min_age:.0f} s"
    if not _desktop_argv(proc.cmdline()):
        return "not a serve/dashboard --port 0 backend"
    if _established(proc):
        return "has an established connection"
    if proc.uids().real != insp.uid():
        return "runs as another user"
    return None


def reap_orphan_desktop_backends(db_path: Path, holders: Iterable[Holder], *,
                                 min_age_seconds: float = MIN_AGE_SECONDS,
                                 inspection: Inspection | None = None) -> list[int]:
    """Signal the qualifying orphan desktop backends among ``holders`` (see the module
    docstring for the proofs); returns the pids signalled. Never raises: a process whose
    inspection raised is left alone."""
    insp = inspection or Inspection()
    if not insp.platform.startswith("linux"):
        return []
    try:
        protected = insp.protected()
        targets = _targets(db_path)
    except Exception as exc:  # noqa: BLE001 - no proof, no signal
        log.info("orphan reaping skipped: %s", exc)
        return []
    procs = []
    for pid in sorted({int(p) for p, _path in holders if isinstance(p, int) and p > 0}):
        if pid in protected:
            continue
        try:
            proc = insp.process(pid)
            why = _qualifies(proc, targets, insp, min_age_seconds)
        except Exception as exc:  # noqa: BLE001 - an inspection error is never a proof
            log.info("pid %s not reaped: inspection failed (%s)", pid, exc)
            continue
        if why is not None:
            log.info("pid %s holds %s but is not reaped: %s", pid, db_path, why)
            continue
        procs.append(proc)
    if not procs:
        return []
    signalled: list[int] = []
    for proc in procs:
        try:
            proc.terminate()
            signalled.append(int(proc.pid))
        except Exception as exc:  # noqa: BLE001 - gone or refused (recycled pid)
            log.info("SIGTERM to pid %s failed: %s", getattr(proc, "pid", "?"), exc)
    try:
        _gone, alive = insp.wait_procs(procs, timeout=WAIT_SECONDS)
        for proc in alive:
            try:
                proc.kill()
            except Exception as exc:  # noqa: BLE001
                log.info("SIGKILL to pid %s failed: %s", getattr(proc, "pid", "?"), exc)
        if alive:
            insp.wait_procs(list(alive), timeout=WAIT_SECONDS)
    except Exception as exc:  # noqa: BLE001 - the signals were sent; waiting is best-effort
        log.info("waiting for reaped backends failed: %s", exc)
    log.warning("%s: reaped orphan desktop backend(s) holding the database: pids %s",
                db_path, ", ".join(map(str, signalled)))
    return signalled


__all__ = ["DEFAULT_ENABLED", "Inspection", "MIN_AGE_SECONDS", "SETTING", "WAIT_SECONDS",
           "enabled", "reap_orphan_desktop_backends",
           "scan_holders"]
