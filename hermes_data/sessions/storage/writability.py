"""The writability preflight of a writable open (docs/sessions.md §8.1 step 2).

Owner read/write (directory: read/write/execute) on the directory and on ``state.db``,
``-wal`` and ``-shm`` that exist: a path lacking them inside the configured Hermes home tree is
repaired with ``chmod`` by path; anything else fails with an error naming the file and the
exact ``chmod`` command. Moved out of :mod:`.opening` (which re-exports it) in issue 14, with a
fast path for the usual case: every path already has its bits.
"""

from __future__ import annotations

import logging
import os
import shlex
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from hermes_data.sessions.errors import StateDbPermissionError

log = logging.getLogger("hermes_data.sessions.storage.opening")

#: Owner bits a writable open needs: rw on the database and its sidecars, rwx on the directory.
_FILE_BITS = stat.S_IRUSR | stat.S_IWUSR
_DIR_BITS = stat.S_IRWXU


@dataclass(frozen=True)
class PermissionStep:
    """One path of the preflight that lacks owner bits, and what to do about it."""

    path: Path
    mode: int  # current permission bits (S_IMODE)
    is_dir: bool
    repair: bool  # True: chmod by path; False: refuse with ``command``

    @property
    def wanted(self) -> int:
        return self.mode | (_DIR_BITS if self.is_dir else _FILE_BITS)

    @property
    def command(self) -> str:
        return f"chmod {'u+rwx' if self.is_dir else 'u+rw'} {shlex.quote(str(self.path))}"


def _has_owner_bits(st: os.stat_result) -> bool:
    """The owner bits a writable open needs of this path: rw (a directory: rwx)."""
    need = _DIR_BITS if stat.S_ISDIR(st.st_mode) else _FILE_BITS
    return st.st_mode & need == need


def preflight_paths(db_path: Path) -> list[Path]:
    """The directory, then ``state.db``, ``-wal`` and ``-shm`` (in that order)."""
    return [db_path.parent, db_path, Path(f"{db_path}-wal"), Path(f"{db_path}-shm")]


def _inside(path: Path, home: Path) -> bool:
    try:
        return path.resolve().is_relative_to(home.resolve())
    except (OSError, RuntimeError):  # unresolvable (symlink loop, vanished): not provably inside
        return False


def plan_writability(stats: Mapping[Path, os.stat_result | None], home: Path) -> list[PermissionStep]:
    """Decide the preflight from ``stat`` results (no I/O beyond resolving paths).

    ``stats`` maps each path of :func:`preflight_paths` to its ``os.stat`` result, ``None``
    when it does not exist (skipped). A path lacking owner read/write (directory: rwx) is
    repaired when it lies inside ``home`` (the configured Hermes home tree) and refused
    anywhere else. Permission *bits* decide, not ``access(2)``: root bypasses them for I/O
    but the next non-root process does not.
    """
    steps = []
    for path, st in stats.items():
        if st is None or _has_owner_bits(st):
            continue
        steps.append(PermissionStep(path, stat.S_IMODE(st.st_mode), stat.S_ISDIR(st.st_mode),
                                    repair=_inside(path, home)))
    return steps


def _refusal(step: PermissionStep, why: str) -> StateDbPermissionError:
    what = "directory" if step.is_dir else "file"
    return StateDbPermissionError(
        str(step.path), step.command,
        f"{step.path}: the {what} is mode {step.mode:o}, lacking owner "
        f"{'read/write/execute' if step.is_dir else 'read/write'} ({why}); the session store "
        f"cannot open it for writing. Run: {step.command}")


def settled_facts(base: str) -> tuple[bool, bool] | None:
    """The usual case in one ``stat`` per path: the directory exists and every path has its
    owner bits. Returns ``(exists, owner_only)`` then — whether ``base`` (the database)
    exists, and whether it is mode 0600 with each of ``-wal`` / ``-shm`` absent or 0600 —;
    None when anything else holds (a missing directory, a path lacking bits, a ``stat``
    error): the caller runs the full sequence (make the directory,
    :func:`writability_preflight`)."""
    try:
        st = os.stat(os.path.dirname(base) or ".")
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_mode & _DIR_BITS != _DIR_BITS:
        return None
    owner_only = True
    modes: list[int | None] = []
    for path in (base, f"{base}-wal", f"{base}-shm"):
        try:
            st = os.stat(path)
        except FileNotFoundError:
            modes.append(None)
            continue
        except OSError:
            return None
        if not _has_owner_bits(st):
            return None
        modes.append(stat.S_IMODE(st.st_mode))
        owner_only = owner_only and modes[-1] == 0o600
    return modes[0] is not None, owner_only and modes[0] is not None


def writability_preflight(db_path: Path, home: Path | Callable[[], Path]) -> list[str]:
    """Check and repair owner permissions before connecting (docs/sessions.md §8.1 step 2); returns repairs.

    Repairs run ``chmod`` **by path** (never open + ``fchmod`` + close: closing a descriptor
    drops this process's POSIX locks, seed 003) and only add the missing owner bits. Nothing
    is ever deleted or truncated: a ``-wal`` holds committed transactions. Raises
    :class:`StateDbPermissionError` — naming the file and the exact ``chmod`` command — for a
    path outside ``home`` (never changed) or a ``chmod`` that fails. ``home`` may be a
    zero-argument callable: it is asked only when a path lacks bits (the usual case — every
    path has its bits — is one ``stat`` per path and nothing else).
    """
    done: list[str] = []
    paths = preflight_paths(db_path)
    # The directory first: its repair is what makes the files reachable for a non-root user.
    for group in (paths[:1], paths[1:]):
        stats: dict[Path, os.stat_result | None] = {}
        for path in group:
            try:
                stats[path] = os.stat(path)
            except FileNotFoundError:
                stats[path] = None
        if all(st is None or _has_owner_bits(st) for st in stats.values()):
            continue
        if callable(home):
            home = home()
        steps = plan_writability(stats, home)
        refused = [s for s in steps if not s.repair]
        if refused:
            err = _refusal(refused[0], f"outside the Hermes home {home}, so it is not repaired "
                                       "automatically")
            if len(refused) > 1:
                err.args = (err.args[0] + "; also run: "
                            + "; ".join(s.command for s in refused[1:]),)
            raise err
        for step in steps:
            try:
                os.chmod(step.path, step.wanted)
            except OSError as exc:
                raise _refusal(step, f"chmod failed: {exc.strerror or exc}") from exc
            msg = f"{step.path}: mode {step.mode:o} lacked owner access; repaired ({step.command})"
            log.warning("%s", msg)
            done.append(msg)
    return done
