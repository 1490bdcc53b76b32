"""Test isolation guard: a test run never opens a production store
(docs/sessions-storage.md §3.1).

:func:`ensure_test_isolation` is called by every entry taking a SQLite path (the session
store's open, :func:`hermes_data.sessions.storage.registry.acquire`, the telemetry store,
:func:`hermes_data.migrate.runner.upgrade`, both ends of
:func:`hermes_data.copy.transfer.copy_store`) before any directory, lock file, connection or
byte read. It refuses, with
:class:`~hermes_data.errors.ProductionStateDbError`, a file of the real Hermes home while a
test is running:

1. **Bypass**: :data:`STATE_DB_GUARD_BYPASS` true, or ``HERMES_STATE_DB_GUARD_BYPASS``
   non-empty in the environment (a child process inherits it) ⇒ allowed.
2. **Test context**: ``PYTEST_CURRENT_TEST``, ``PYTEST_VERSION`` or ``HERMES_TEST_ISOLATION``
   set, else an ancestor process whose argv has a token named ``pytest`` / ``py.test`` (a
   child with a rebuilt environment loses ``PYTEST_*`` and ``HERMES_HOME`` together; its
   ancestry still shows the test run). The ancestry walk is memoised per process and fails
   open (no answer ⇒ not a test). Not a test ⇒ allowed. Linux reads the ancestry from
   ``/proc`` directly; other systems ask psutil.
3. **Production roots**: ``os.path.expanduser("~")/.hermes`` (Windows also
   ``%LOCALAPPDATA%\\hermes``) — never ``Path.home()`` or ``HERMES_HOME``, which tests
   patch — plus :data:`STATE_DB_GUARD_EXTRA_DENY_ROOTS`.
4. The resolved path is production when its parent is a root, or it is
   ``<root>/profiles/<name>/<file>`` exactly, or (``[D]``, the telemetry store's default)
   ``<root>/telemetry/<file>``; deeper paths (worktrees under the home) are not.

PostgreSQL URLs are never guarded. :func:`default_db_path` resolves ``$HERMES_HOME/state.db``
at call time.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Callable, Iterable, Iterator

from hermes_data.config import default_db_path
from hermes_data.errors import ProductionStateDbError

__all__ = ["BYPASS_ENV", "STATE_DB_GUARD_BYPASS", "STATE_DB_GUARD_EXTRA_DENY_ROOTS",
           "TEST_ISOLATION_ENV", "default_db_path", "ensure_test_isolation", "in_test_context",
           "production_roots"]

log = logging.getLogger("hermes_data.isolation")

#: Set true (tests marked ``live_system_guard_bypass``) to let this process open anything.
STATE_DB_GUARD_BYPASS: bool = False
#: More directories treated like the real Hermes home (the test suite adds the home it was
#: started with). Mutate in place; read at every call.
STATE_DB_GUARD_EXTRA_DENY_ROOTS: list[str | os.PathLike[str]] = []
#: Non-empty ⇒ the guard is off in this process and its children.
BYPASS_ENV = "HERMES_STATE_DB_GUARD_BYPASS"
#: Set by a test harness (the hermes-data suite's conftest) to mark a test context.
TEST_ISOLATION_ENV = "HERMES_TEST_ISOLATION"

_TEST_ENV = ("PYTEST_CURRENT_TEST", "PYTEST_VERSION", TEST_ISOLATION_ENV)
_PYTEST_NAMES = frozenset({"pytest", "py.test", "pytest.exe", "py.test.exe"})

_memo_lock = threading.Lock()
#: pid → whether an ancestor runs pytest (a forked child has another pid: walked again).
_ANCESTRY: dict[int, bool] = {}


def _proc_stat(pid: int) -> tuple[int, int]:
    """``(ppid, starttime)`` of ``pid`` from ``/proc/<pid>/stat`` (Linux; ``OSError`` when
    unreadable). The command name may hold spaces and parentheses: fields follow the last
    ``)``."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rpartition(b")")[2].split()
    return int(fields[1]), int(fields[19])


def _proc_ancestor_argvs() -> Iterator[list[str]]:
    """The ancestors' argv read straight from ``/proc`` — what psutil's ``parents()`` and
    ``cmdline()`` read there, without importing psutil (~6 ms of a new process's start-up,
    issue 14). A parent that started after its child is a reused pid: the walk ends there,
    as psutil's ``parent()`` ends it."""
    pid = os.getpid()
    ppid, started = _proc_stat(pid)
    seen = {pid}
    while ppid > 0 and ppid not in seen:
        pid = ppid
        seen.add(pid)
        try:
            ppid, parent_started = _proc_stat(pid)
        except OSError as exc:  # gone or unreadable: nothing further up is reachable
            log.debug("ancestor %s not inspectable: %s", pid, exc)
            return
        if parent_started > started:
            return
        started = parent_started
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                raw = f.read()
        except OSError as exc:  # one uninspectable ancestor: look further up
            log.debug("ancestor %s not inspectable: %s", pid, exc)
            continue
        args = raw[:-1] if raw.endswith(b"\0") else raw
        yield [a.decode("utf-8", "surrogateescape") for a in args.split(b"\0")] if raw else []


def _ancestor_argvs() -> Iterable[list[str]]:
    """The argv of every ancestor of this process (nearest first): from ``/proc`` where it is
    readable (Linux), else by psutil. A seam: tests substitute the process inspection."""
    if os.path.exists(f"/proc/{os.getpid()}/stat"):
        yield from _proc_ancestor_argvs()
        return
    import psutil

    for proc in psutil.Process().parents():
        try:
            yield proc.cmdline()
        except (psutil.Error, OSError) as exc:  # one uninspectable ancestor: look further up
            log.debug("ancestor %s not inspectable: %s", proc.pid, exc)


#: The process inspection :func:`in_test_context` uses (injectable).
ancestor_argvs: Callable[[], Iterable[list[str]]] = _ancestor_argvs


def names_pytest(argv: Iterable[str]) -> bool:
    """Whether an argv has a token whose basename (quotes stripped, ``\\`` read as ``/``) is
    ``pytest``, ``py.test``, ``pytest.exe`` or ``py.test.exe`` (an argument holding a whole
    command line, as ``sh -c`` gets, is split on white space)."""
    for arg in argv:
        for token in str(arg).split():
            name = token.strip("'\"").replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
            if name.lower() in _PYTEST_NAMES:
                return True
    return False


def _under_pytest() -> bool:
    pid = os.getpid()
    with _memo_lock:
        known = _ANCESTRY.get(pid)
    if known is not None:
        return known
    try:
        found = any(names_pytest(argv) for argv in ancestor_argvs())
    except Exception as exc:  # noqa: BLE001 - fails open: no answer is "not a test"
        log.debug("process ancestry not inspectable (%s): treated as no test run", exc)
        found = False
    with _memo_lock:
        _ANCESTRY[pid] = found
    return found


def in_test_context() -> bool:
    """Whether this process runs under a test harness (see the module docstring, step 2)."""
    environ = os.environ
    for name in _TEST_ENV:  # every store open asks: no generator
        if environ.get(name):
            return True
    return _under_pytest()


def _bypassed() -> bool:
    return bool(STATE_DB_GUARD_BYPASS) or bool(os.environ.get(BYPASS_ENV, "").strip())


def _resolve(path: str | os.PathLike[str]) -> Path | None:
    try:
        return Path(os.path.normcase(Path(path).expanduser().resolve()))
    except (OSError, RuntimeError, ValueError, TypeError):
        return None


def production_roots() -> list[Path]:
    """The resolved production roots (step 3 of the module docstring), read at call time."""
    candidates: list[str | os.PathLike[str]] = []
    home = os.path.expanduser("~")
    if home != "~":  # no home directory known: no default root
        candidates.append(Path(home) / ".hermes")
    if os.name == "nt" and os.environ.get("LOCALAPPDATA"):  # pragma: no cover - Windows
        candidates.append(Path(os.environ["LOCALAPPDATA"]) / "hermes")
    candidates.extend(STATE_DB_GUARD_EXTRA_DENY_ROOTS)
    roots: list[Path] = []
    for candidate in candidates:
        root = _resolve(candidate)
        if root is not None and root not in roots:
            roots.append(root)
    return roots


def production_root_of(resolved: Path, roots: Iterable[Path]) -> Path | None:
    """The root ``resolved`` (a resolved path) is a production file of, or None (step 4)."""
    parent = resolved.parent
    for root in roots:
        if parent == root or parent == root / "telemetry":
            return root
        if parent.parent.name == "profiles" and parent.parent.parent == root:
            return root
    return None


def ensure_test_isolation(path: str | os.PathLike[str]) -> None:
    """Refuse a production SQLite file while a test runs (see the module docstring).

    Raises :class:`~hermes_data.errors.ProductionStateDbError` naming the path, the root and
    both bypasses; returns silently outside tests, when bypassed, or when the path cannot be
    resolved. Touches nothing on disk besides ``stat``-like path resolution.
    """
    if _bypassed() or not in_test_context():
        return
    resolved = _resolve(path)
    if resolved is None:
        return
    root = production_root_of(resolved, production_roots())
    if root is not None:
        raise ProductionStateDbError(str(resolved), str(root))
