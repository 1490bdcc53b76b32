"""A writable SQLite open's file steps before the first connection, and its header lease
(issue 14: the settled open).

:func:`prepare_file` — docs/sessions.md §8.1 steps 1–2: the directory (made when missing), the
writability preflight (:mod:`..writability`), a dangling symbolic link refused, the first
creation (owner-only, exclusive, before any connection), the header lease
(:class:`hermes_data.files.FileHeader`: one read-only descriptor per path, never closed under a
lock, docs/sessions.md §8.9) — by ``os`` calls on the path string, one ``stat`` per fact; and whether the
open's step 8 (owner-only permissions) has anything to change (``backend._owner_only``).

Two checks that ran before the connection read the header bytes another way; they now read
them through the lease — same answers, fewer system calls, no descriptor opened and closed on
the database:

* :func:`zero_probe` — the zero probe of a writable open (docs/sessions-storage.md §3.4), the
  answers of :func:`~hermes_data.sessions.storage.quarantine.is_zeroed_state_db`: a regular file of
  size 0 or whose first 100 bytes are all NUL is zeroed; anything else or a non-regular file
  is not; while this process has a connection to the file or another thread examines it
  offline, that function answers itself. A zeroed verdict gives the lease back first: the
  quarantine path then runs exactly as before (it may move the file aside).
* :func:`header_stamp` — the schema cookie and ``application_id`` a settled stamp is matched
  with before the connection policy (whether the identity rule may be skipped), from the
  header bytes in either journal mode. The stamp is keyed by the inode the lease reads and
  its ``application_id`` is random per store, so a match says the file is that store at some
  point of its history: a copy of another file over the inode, or a torn write, cannot match
  unless it is that file. In WAL mode page 1 may be newer in the WAL than on disk; a newer
  page 1 is still this store's (only SQLite writes the WAL), and the settled open re-reads
  the cookie and ``application_id`` inside its read transaction, falling back to the full
  reads (which run the identity rule again through the upgrade path's probe when the
  revision or core shape is off) on any difference. A header that does not match is not a
  verdict: the connection reads the two values (page 1 may be newer in the WAL and match).
* :func:`rollback_header_stamp` — the same two values for the settled open's read
  transaction, only when the header says rollback-journal mode (bytes 18–19 = 1): the file
  itself is then the only copy of page 1, so under the transaction's read lock the bytes are
  what ``PRAGMA schema_version`` / ``application_id`` read. A WAL-mode header (2) answers
  None there: the snapshot's page 1 may be in the WAL, so the connection reads them.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Any

from hermes_data.config import hermes_home
from hermes_data.errors import StoreLinkError
from hermes_data.files import HEADER_BYTES, SQLITE_MAGIC, FileHeader, application_id, make_private_dirs
from hermes_data.tracked import unclaimed
from hermes_data.sessions.storage.quarantine import is_zeroed_state_db, zeroed_head
from hermes_data.sessions.storage.writability import settled_facts, writability_preflight

#: Header offsets (https://www.sqlite.org/fileformat.html#the_database_header).
_WRITE_VERSION, _READ_VERSION = 18, 19
_SCHEMA_COOKIE = 40


#: ``Path.exists()``'s "no such file" errors (any other ``stat`` failure raises, as there).
_MISSING = (errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP)


def _exists(path: str) -> bool:
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno in _MISSING:
            return False
        raise
    return True


def prepare_file(backend: Any) -> bool:
    """Steps 1–2 of ``backend``'s writable open (see the module docstring); appends the
    preflight's repairs to ``backend.open_repairs``, leaves the lease in ``backend._header``
    and returns whether the file existed before this call."""
    path: Path = backend.path
    name = os.fspath(path)
    facts = settled_facts(name)  # the usual case: one stat per path, nothing to do
    backend._owner_only = False
    if facts is not None:
        existing, owner_only = facts
    else:
        if not os.path.isdir(os.path.dirname(name) or "."):
            make_private_dirs(path.parent)  # new directories 0700 whatever the umask (issue 31)
        # Ahead of the first creation, so that a repaired directory can take the new file:
        # owner bits by path inside the home tree, else refuse.
        backend.open_repairs.extend(writability_preflight(path, hermes_home))
        existing = _exists(name)
    if not existing:
        if os.path.islink(name):
            raise StoreLinkError(f"{path}: a dangling symbolic link (to {os.readlink(name)}); "
                                 "refused, nothing was created")
        try:  # first creation: owner-only, before any connection (no locks can exist)
            os.close(os.open(name, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        except FileExistsError:
            existing = True
    if backend._header is None:  # before any connection (see SqliteBackend._connect_writer)
        backend._header = FileHeader(path)
    # Nothing for docs/sessions.md §8.1 step 8 to change: the file and its sidecars are 0600 and no link is on
    # the path (the sidecars of a link sit beside its target). SQLite creates a missing -wal
    # / -shm with the database file's mode, so a WAL connection's new sidecars are 0600 too.
    key = backend._header.key  # resolved (absolute, normal): equal to name, name is absolute
    backend._owner_only = facts is not None and owner_only \
        and (key == name or key == os.path.abspath(name))
    return existing


def zero_probe(backend: Any, path: Path) -> bool:
    """Is ``path`` zeroed? (:func:`~hermes_data.sessions.storage.quarantine.is_zeroed_state_db`'s
    answer, read through a header lease that ``backend`` keeps as its ``_header`` for the
    open that follows; the caller has already checked test isolation for ``path``.)"""
    try:
        st = os.stat(path)
    except OSError:
        return False
    if not stat.S_ISREG(st.st_mode):
        return False  # never opens a FIFO or a device
    if st.st_size == 0:
        return True
    header: FileHeader | None = backend._header
    if header is None:
        try:
            header = FileHeader(path)
        except OSError:  # unreadable (the preflight repairs or refuses it): the plain probe
            return is_zeroed_state_db(path)
        backend._header = header
    if unclaimed(header.key):
        zeroed = zeroed_head(os.pread(header.fd, HEADER_BYTES, 0))
    else:  # a connection of this process, or another thread's offline access: the plain
        zeroed = is_zeroed_state_db(path)  # probe's answer
    if zeroed:
        backend._header = None  # the quarantine may move the file: no lease on the old inode
        header.release()
    return zeroed


def header_stamp(header: FileHeader | None, *, rollback_only: bool = False
                 ) -> tuple[int, int] | None:
    """``(schema cookie, application_id)`` from the file's header bytes (None without a lease
    or an SQLite header; with ``rollback_only``, also None unless the header says
    rollback-journal mode) — see the module docstring for what each answer may be used for."""
    if header is None:
        return None
    data = header.read()
    if len(data) < HEADER_BYTES or not data.startswith(SQLITE_MAGIC):
        return None
    if rollback_only and (data[_WRITE_VERSION] != 1 or data[_READ_VERSION] != 1):
        return None
    return (int.from_bytes(data[_SCHEMA_COOKIE:_SCHEMA_COOKIE + 4], "big"),
            application_id(data) or 0)


def rollback_header_stamp(header: FileHeader | None) -> tuple[int, int] | None:
    """:func:`header_stamp` of a rollback-journal file only (the read transaction's
    snapshot, see the module docstring)."""
    return header_stamp(header, rollback_only=True)
