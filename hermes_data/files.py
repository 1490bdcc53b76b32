"""By-path facts about a database file and its ``-wal``/``-shm`` sidecars, once for both stores:
who holds them (psutil, plus descriptors of *deleted* sidecars), owner-only permissions, the
on-disk file header, and this process's descriptor headroom.

Closing any descriptor of a file drops every POSIX lock this process holds on it (locks are
per process and inode), including those of live SQLite connections. So files are examined by
``stat``, changed by ``chmod`` on the path, and other processes' descriptors are read with
``readlink``. The one descriptor this module opens on a database is the header reader's
(docs/sessions.md §8.9): read-only, one per path, shared by every handle of the process, read
with ``pread``; it is closed only once a lock query (``F_OFD_GETLK``) shows no lock on the
file at all (nothing to drop), otherwise retired and kept.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import resource
import stat
import struct
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Callable, Iterator

from hermes_data.errors import StoreLinkError, UnsafeLockFileError

if TYPE_CHECKING:
    from hermes_data.file_records import DescriptorBudget, FileFacts, Holder

log = logging.getLogger("hermes_data.files")

SIDECARS = ("-wal", "-shm")
_DELETED = " (deleted)"

#: Minimum free descriptors before a read connection may be opened (docs/sessions.md §8.7);
#: doctor reports less than this as a problem.
MIN_FD_HEADROOM = 64
_FD_CACHE_S = 0.25


def _with_sidecars(path: Path | str) -> list[str]:
    return [f"{path}{suffix}" for suffix in ("", *SIDECARS)]


# ---------------------------------------------------------------------------------------
# Holders
# ---------------------------------------------------------------------------------------


def file_holders(path: Path, *, live: bool = True, deleted: bool = True) -> list[Holder] | None:
    """Processes holding ``path`` or its ``-wal``/``-shm`` open: ``live`` descriptors (psutil)
    and ``deleted`` ones — holders of a *deleted* inode of those names (a split WAL
    generation). ``None`` when the process table cannot be read at all. Unreadable processes
    are skipped (the list is a lower bound)."""
    from hermes_data.file_records import Holder

    targets = set(_with_sidecars(path.resolve()))
    deleted = deleted and os.path.isdir("/proc")
    if not (live or deleted):
        return []
    import psutil  # on first use: ~6 ms of import a telemetry process never needs (issue 14)

    try:
        procs = ([(p.info["pid"], p) for p in psutil.process_iter(["pid", "name"])] if live
                 else [(pid, None) for pid in psutil.pids()])
    except (psutil.Error, OSError):
        return None
    holders: list[Holder] = []
    for pid, proc in procs:
        name = None
        if proc is not None:
            name = proc.info.get("name") or "?"
            try:
                files = proc.open_files()
            except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
                continue
            holders += [Holder(pid, name, f.path) for f in files if f.path in targets]
        if deleted:
            holders += [Holder(pid, name or _process_name(pid), p, deleted=True)
                        for p in deleted_descriptors(pid) if p in targets]
    return holders


def _process_name(pid: int) -> str:
    import psutil

    try:
        return psutil.Process(pid).name() or "?"
    except psutil.Error:
        return "?"


def deleted_descriptors(pid: int) -> list[str]:
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
        if target.endswith(_DELETED):
            out.append(target[: -len(_DELETED)])
    return out


#: ``struct flock`` on 64-bit Linux (short, short, off_t, off_t, pid_t); elsewhere the lock
#: probes answer "unknown".
_FLOCK = "hhqqi"
_LOCK_PROBES = sys.platform.startswith("linux") and sys.maxsize > 2**32
#: The query: a write lock over the whole file (packed once; the kernel answers in a copy).
_WRITE_LOCK_QUERY = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)


def _lock_probe(fd: int, cmd_name: str) -> int | None:
    """A write-lock query over the whole file open at ``fd``: 0 when nothing conflicts, else
    the conflicting owner's pid (-1 for an open-file-description lock); None when it cannot
    be asked. Queries take no lock and cost one system call."""
    cmd = getattr(fcntl, cmd_name, None)
    if not _LOCK_PROBES or cmd is None:
        return None
    try:
        out = fcntl.fcntl(fd, cmd, _WRITE_LOCK_QUERY)
    except OSError:
        return None
    l_type, _whence, _start, _len, pid = struct.unpack(_FLOCK, out)
    return 0 if l_type == fcntl.F_UNLCK else (pid or -1)


def other_process_locks(fd: int) -> bool | None:
    """Does another process hold a lock on the file open at ``fd``? (``F_GETLK``: this
    process's own locks never conflict with its query.) None when it cannot be told."""
    pid = _lock_probe(fd, "F_GETLK")
    return None if pid is None else pid != 0


def any_locks(fd: int) -> bool | None:
    """Does any process, this one included, hold a lock on the file open at ``fd``?
    (``F_OFD_GETLK``: an open-file-description query conflicts with every POSIX lock, this
    process's too.) None when it cannot be told."""
    pid = _lock_probe(fd, "F_OFD_GETLK")
    return None if pid is None else pid != 0


def lock_holders(ident: tuple[int, int]) -> set[int] | None:
    """PIDs holding a lock on the inode ``ident`` (``st_dev``, ``st_ino``), from
    ``/proc/locks``; None when it cannot be read or an entry names no process (an
    open-file-description lock, or a waiter whose owner is unknown)."""
    dev, ino = ident
    want = f"{os.major(dev):02x}:{os.minor(dev):02x}:{ino}"
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    pids: set[int] = set()
    for line in text.splitlines():
        # "7: POSIX  ADVISORY  READ 4242 08:01:1234 1073741826 1073741826", or a blocked
        # waiter "7: -> POSIX  ADVISORY  WRITE 4243 08:01:1234 0 EOF"
        parts = [p for p in line.split() if p != "->"]
        if len(parts) < 6 or parts[5] != want:
            continue
        try:
            pid = int(parts[4])
        except ValueError:
            return None
        if pid <= 0:
            return None
        pids.add(pid)
    return pids


_HAVE_PROC = os.path.isdir("/proc")


def deleted_sidecar_holders(path: Path, fd: int | None = None) -> list[tuple[int, str]]:
    """``(pid, path)`` of every process (this one included) holding a deleted ``-wal``/``-shm``
    of ``path``: a second opener would mint a second WAL generation. A lower bound; empty
    where ``/proc`` does not exist.

    The processes that matter are SQLite connections still writing into that generation,
    and a connection in WAL mode holds a shared lock on the database file for its whole
    life. So with ``fd`` (a descriptor on the database, e.g. the header's) lock queries
    narrow the scan: ``F_GETLK`` asks whether another process holds a lock on the file,
    ``F_OFD_GETLK`` whether any process does, this one included. No lock at all: nobody can
    be writing a WAL generation of this file (two system calls, no descriptor read). Only
    this process: its own descriptors are read. Another process: ``/proc/locks`` names the
    processes holding locks on this inode and only their descriptors are read (reading it
    takes the kernel's lock table briefly, so it is asked only then); when that list cannot
    be had, or lacks the process ``F_GETLK`` named (a filesystem whose device numbers
    ``/proc/locks`` shows differently), every process is examined, as without ``fd``.
    """
    if not _HAVE_PROC:
        return []
    pids: set[int] | None = None
    me = os.getpid()
    if fd is not None:
        other = _lock_probe(fd, "F_GETLK")
        if other == 0:
            if any_locks(fd) is False:
                return []
            pids = {me}
        elif other is not None:
            st = os.fstat(fd)
            held = lock_holders((st.st_dev, st.st_ino))
            if held is not None and (other < 0 or other in held):
                pids = held | {me}
    base = os.path.realpath(path)
    if pids is None:
        return [(h.pid, h.path) for h in file_holders(path, live=False) or () if h.path != base]
    targets = {f"{base}{suffix}" for suffix in SIDECARS}
    return [(pid, p) for pid in sorted(pids) for p in deleted_descriptors(pid) if p in targets]


# ---------------------------------------------------------------------------------------
# Sidecar lock files and the directories a store creates (issue 31)
# ---------------------------------------------------------------------------------------

#: Mode of a directory a store creates, regardless of the umask.
PRIVATE_DIR_MODE = 0o700
#: Mode of a sidecar lock file a store creates.
LOCK_FILE_MODE = 0o600


def open_lock_file(path: str | os.PathLike[str]) -> int:
    """A descriptor (read/write, close-on-exec) on the sidecar lock file ``path``, created
    0600 when absent; for ``flock``, never for its content's sake.

    Opened with ``O_NOFOLLOW`` and never ``O_TRUNC``: a symbolic link there (planted by
    whoever can write the directory) is refused, never followed, and an existing file is
    never truncated by the open. The descriptor must name a regular file with one link (a
    hard link to another file would let a holder record overwrite it): anything else is
    closed again and refused. Raises :class:`UnsafeLockFileError` naming ``path`` for those;
    any other :class:`OSError` (a missing directory, no permission) propagates."""
    name = os.fspath(path)
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0) \
        | getattr(os, "O_NONBLOCK", 0)  # a planted FIFO must not block the open
    try:
        fd = os.open(name, flags, LOCK_FILE_MODE)
    except OSError as exc:
        if exc.errno == errno.ELOOP or os.path.islink(name):
            try:
                target = os.readlink(name)
            except OSError:
                target = "?"
            raise UnsafeLockFileError(name, f"a symbolic link (to {target})") from exc
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeLockFileError(name, f"not a regular file ({stat.filemode(st.st_mode)})")
        if st.st_nlink != 1:
            raise UnsafeLockFileError(name, f"a file with {st.st_nlink} hard links")
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextmanager
def replacing_file(path: str | os.PathLike[str], *, mode: int = 0o600) -> Iterator[IO[str]]:
    """A text stream (UTF-8) that becomes ``path`` only whole.

    It writes a new temporary file beside ``path`` — ``O_CREAT | O_EXCL | O_NOFOLLOW``,
    ``mode``, a random name, so a name already taken (or planted as a link) is never
    opened — and, when the block succeeds, flushes, fsyncs and renames it over ``path``,
    then fsyncs the directory (best effort). On any failure the temporary file is removed
    and ``path`` is as it was. ``OSError``s propagate unchanged: callers name the file in
    their own words."""
    directory, base = os.path.split(os.path.abspath(os.fspath(path)))
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    while True:
        tmp = os.path.join(directory, f".{base}.{os.urandom(6).hex()}.tmp")
        try:
            fd = os.open(tmp, flags, mode)
            break
        except FileExistsError:
            continue  # a name taken (or planted) already: never opened, another one
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as stream:
            yield stream
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    try:  # the rename itself survives a crash
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError:
        pass


def make_private_dirs(directory: str | os.PathLike[str]) -> list[Path]:
    """``mkdir -p directory``, each directory this call creates mode 0700 whatever the
    umask (``os.makedirs``' mode is masked by it: each new one is ``chmod``-ed by path right
    after its ``mkdir``). Existing directories are never changed. Returns the created ones."""
    target = Path(directory)
    missing: list[Path] = []
    p = target
    while not p.is_dir():
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    created: list[Path] = []
    for d in reversed(missing):
        try:
            os.mkdir(d, PRIVATE_DIR_MODE)
        except FileExistsError:
            if d.is_dir():
                continue  # another process made it: not ours to change
            raise
        os.chmod(d, PRIVATE_DIR_MODE)
        created.append(d)
    return created


# ---------------------------------------------------------------------------------------
# Permissions and sizes, by path
# ---------------------------------------------------------------------------------------


def link_target(path: Path | str) -> Path | None:
    """The fully resolved target when ``path`` is a symbolic link (possibly dangling), else
    ``None``. The stores operate on that target: SQLite resolves the link and keeps its
    ``-wal``/``-shm`` beside the target, and permissions are set on the target."""
    p = Path(path)
    return p.resolve() if p.is_symlink() else None


def refuse_dangling_link(path: Path | None) -> None:
    """Symbolic-link policy (README "Symbolic links"): a link is followed — the stores operate
    on its resolved target, and ``status``/``doctor`` name it — but a *dangling* link is
    refused: following it would create a store wherever it happens to point."""
    if path is not None and path.is_symlink() and not path.exists():
        raise StoreLinkError(f"{path}: a dangling symbolic link (to {os.readlink(path)}); "
                             "refused, nothing was created (remove the link or create its target)")


def file_facts(path: Path) -> FileFacts:
    """Mode bits and sizes of ``path`` (its link target, for a link) and its sidecars (never
    opens them)."""
    from hermes_data.file_records import FileFacts

    target = link_target(path)
    facts = FileFacts(str(path), path.exists(), link_target=None if target is None else str(target))
    if not facts.exists:
        return facts
    path = target or path
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


def make_owner_only(path: Path | str,
                    on_error: Callable[[str, OSError], None] | None = None) -> list[str]:
    """``chmod 0600`` the database and existing sidecars **by path** (never by descriptor:
    open + ``fchmod`` + close would drop this process's POSIX locks on the file). Returns the
    files changed. A failure raises, or with ``on_error`` is handed to it and the next file
    is tried; a file that vanishes meanwhile is skipped."""
    changed = []
    # A link's sidecars sit beside its target (SQLite resolves the link); chmod follows it.
    # (link_target's answer, by string: every writable open hardens its file.)
    for p in _with_sidecars(os.path.realpath(path) if os.path.islink(path) else path):
        try:
            if (os.stat(p).st_mode & 0o777) != 0o600:
                os.chmod(p, 0o600)
                changed.append(p)
        except FileNotFoundError:
            continue
        except OSError as exc:
            if on_error is None:
                raise
            on_error(p, exc)
    return changed


# ---------------------------------------------------------------------------------------
# Descriptor headroom
# ---------------------------------------------------------------------------------------


def descriptor_budget() -> DescriptorBudget:
    """This process's open descriptors and soft ``RLIMIT_NOFILE``. The probe itself failing
    with ``EMFILE``/``ENFILE`` raises that ``OSError``."""
    import psutil

    from hermes_data.file_records import DescriptorBudget

    proc = psutil.Process()
    try:
        used = proc.num_fds()
    except (AttributeError, psutil.Error):
        used = None
    try:
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (OSError, ValueError):
        soft = None
    return DescriptorBudget(used, soft)


_fd_cache: tuple[float, bool] | None = None
_fd_lock = threading.Lock()


def reset_descriptor_cache() -> None:
    """Forget the cached headroom measurement (it is otherwise reused for 0.25 s)."""
    global _fd_cache
    with _fd_lock:
        _fd_cache = None


def descriptor_headroom_ok() -> bool:
    """Soft ``RLIMIT_NOFILE`` minus open descriptors exceeds :data:`MIN_FD_HEADROOM`
    (unmeasurable ⇒ allowed; the probe itself failing with EMFILE/ENFILE ⇒ denied).
    Cached for 0.25 s."""
    global _fd_cache
    now = time.monotonic()
    with _fd_lock:
        if _fd_cache is not None and now - _fd_cache[0] < _FD_CACHE_S:
            return _fd_cache[1]
    try:
        headroom = descriptor_budget().headroom
        ok = headroom is None or headroom > MIN_FD_HEADROOM
    except OSError as exc:
        ok = exc.errno not in (24, 23)  # EMFILE, ENFILE
    with _fd_lock:
        _fd_cache = (now, ok)
    return ok


# ---------------------------------------------------------------------------------------
# The on-disk header (docs/sessions.md §8.9)
# ---------------------------------------------------------------------------------------

#: SQLite's database header: the first 100 bytes of the main file.
HEADER_BYTES = 100
SQLITE_MAGIC = b"SQLite format 3\x00"
APPLICATION_ID_OFFSET = 68


@dataclass
class _HeaderDescriptor:
    fd: int
    ident: tuple[int, int]
    users: int = 0


_headers: dict[str, _HeaderDescriptor] = {}
_retired: list[_HeaderDescriptor] = []
_headers_lock = threading.Lock()


def resolved_path(path: Path | str) -> str:
    """``os.path.realpath(path)``. An absolute, normal path (no ``//``, ``.``, ``..`` or
    trailing ``/``) none of whose components is a symbolic link is its own resolved path:
    that case is answered by one ``lstat`` per component — what ``realpath`` asks too —
    without its string work (every store open asks); anything else is ``realpath``'s."""
    name = os.fspath(path)
    if name[:1] == "/" and name[-1:] != "/" and "//" not in name and "/./" not in name \
            and "/../" not in name and not name.endswith(("/.", "/..")):
        end = name.find("/", 1)
        try:
            while not stat.S_ISLNK(os.lstat(name if end < 0 else name[:end]).st_mode):
                if end < 0:
                    return name
                end = name.find("/", end + 1)
        except OSError:  # a missing component: realpath's own rules
            pass
    return os.path.realpath(name)


class FileHeader:
    """A lease on this process's read-only descriptor for one database path, to read the
    file's header with ``pread`` — the bytes on disk, not SQLite's view of page 1 (which in
    WAL mode is served from the WAL and misses a copy over the same inode).

    One descriptor per resolved path for the whole process, shared by every lease. Take the
    lease *before* connecting to the file and release it *after* the connections are
    closed: the descriptor is closed only when its last lease goes and a lock query shows no
    lock on the file, this process's included (so closing drops nothing; a lease taken
    meanwhile by another handle waits for that decision). Otherwise it is retired and kept
    — never closed under a lock — and looked at again at the next release. A path that now
    names another inode gets a new descriptor; the old one is retired the same way.
    """

    def __init__(self, path: Path | str) -> None:
        self.key = resolved_path(path)
        self.fd = -1
        self.ident: tuple[int, int] | None = None
        with _headers_lock:
            entry = _headers.get(self.key)
            if entry is not None:  # the path may name another inode now (no entry: fstat tells)
                st = os.stat(self.key)
                if entry.ident != (st.st_dev, st.st_ino):
                    del _headers[self.key]
                    _retired.append(entry)
                    entry = None
            if entry is None:
                fd = os.open(self.key, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
                fst = os.fstat(fd)
                entry = _HeaderDescriptor(fd, (fst.st_dev, fst.st_ino))
                _headers[self.key] = entry
            entry.users += 1
            _sweep_locked()
        self.fd = entry.fd  # for lock queries (fcntl F_GETLK); never close it
        #: ``(st_dev, st_ino)`` of the file the descriptor reads.
        self.ident = entry.ident
        self._entry: _HeaderDescriptor | None = entry

    def read(self) -> bytes:
        """The first :data:`HEADER_BYTES` bytes of the file (fewer when it is shorter)."""
        entry = self._entry
        if entry is None:
            raise ValueError(f"{self.key}: the header lease was released")
        return os.pread(entry.fd, HEADER_BYTES, 0)

    def release(self) -> None:
        """Give the lease back (idempotent); see the class docstring for when the
        descriptor is closed."""
        with _headers_lock:
            entry, self._entry = self._entry, None
            if entry is None:
                return
            entry.users -= 1
            _sweep_locked()


def _sweep_locked() -> None:
    """Close the header descriptors nobody leases whose file no process holds a lock on
    (``F_OFD_GETLK`` sees this process's POSIX locks too, so closing drops nothing); the
    others stay, cached or retired (call with ``_headers_lock`` held)."""
    if not _retired:  # the usual case: every cached descriptor leased, nothing to look at
        for entry in _headers.values():
            if not entry.users:
                break
        else:
            return
    for key, entry in [*_headers.items(), *((None, e) for e in _retired)]:
        if entry.users or any_locks(entry.fd) is not False:
            continue  # a connection (maybe of this process) holds the file: keep it
        if key is None:
            _retired.remove(entry)
        else:
            del _headers[key]
        try:
            os.close(entry.fd)
        except OSError as exc:  # already gone: nothing to release
            log.debug("closing a header descriptor failed: %s", exc)


def release_idle_headers() -> None:
    """Close the header descriptors that no lease uses and whose inode this process no longer
    holds a lock on (done at every lease and release anyway; e.g. after a connection outside
    the stores let go of a file)."""
    with _headers_lock:
        _sweep_locked()


def header_descriptors() -> tuple[int, int]:
    """``(leased, retired)`` header descriptors of this process (doctor and tests)."""
    with _headers_lock:
        return len(_headers), len(_retired)


def application_id(header: bytes) -> int | None:
    """``application_id`` from a header read by :meth:`FileHeader.read`; ``None`` when the
    file is shorter than a header (a fresh WAL database before its first checkpoint)."""
    if len(header) < HEADER_BYTES:
        return None
    return int.from_bytes(header[APPLICATION_ID_OFFSET:APPLICATION_ID_OFFSET + 4], "big")


_RECORDS = ("DescriptorBudget", "FileFacts", "Holder")


def __getattr__(name: str) -> Any:
    # The diagnostics' records live in .file_records, imported on first use (issue 14).
    if name in _RECORDS:
        from hermes_data import file_records

        return getattr(file_records, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
