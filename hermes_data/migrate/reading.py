"""Reading a SQLite file without writing it: the one way the tools that only look
(``status``, ``check``, ``doctor``, ``stats``, ``copy``'s source, the identity probe of
``upgrade``, the command line's read-only session stores) connect to a file
(docs/cli.md "Reading a store without writing it").

:func:`connect` opens ``file:PATH?mode=ro`` and proves it readable with one catalogue read.
Two states of a healthy file defeat a plain read-only connection, and each is handled here:

* **A hot rollback journal** (a writer died mid-transaction in DELETE/TRUNCATE mode):
  SQLite must roll the journal back before anyone may read, and a read-only connection
  cannot (``SQLITE_READONLY_ROLLBACK``, "attempt to write a readonly database"). The file
  and its journal are copied into a private temporary directory (0700, ``$TMPDIR``; the
  database through this process's shared header descriptor, so no descriptor of the
  database is closed under a lock), the copies are checked unchanged against the originals'
  size and mtime (else copied again), and a writable connection on the *copy* lets SQLite
  roll the copy back. The caller reads what every writer will see once it has rolled the
  journal back; the original file and journal are never written. The copy is removed when
  the connection closes.
* **A WAL database without ``-wal``/``-shm``** (closed cleanly): any reader, read-only
  included, makes both, and a read-only one cannot remove them. When neither existed
  before the connection and both exist after it closed, a closing connection with
  ``query_only`` lets SQLite do what its last connection always does: with the file's
  exclusive lock, checkpoint (nothing: no frames were written) and delete them. When
  another process holds the file, SQLite keeps them, and they are that process's.

A crashed WAL database (``-wal``/``-shm`` left behind) is read in place: a reader may
rebuild the ``-shm`` index and take read marks there, as any SQLite reader does; the
database and the ``-wal`` are not written.
"""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3
import tempfile
from pathlib import Path
from typing import Any, Callable

from hermes_data.files import FileHeader
from hermes_data.locking import driver_error
from hermes_data.tracked import TrackedConnection, tracked_connect

__all__ = ["SNAPSHOT_PREFIX", "connect", "has_hot_journal_error"]

log = logging.getLogger("hermes_data.migrate.reading")

#: Name prefix of the private directories holding a snapshot (under ``$TMPDIR``).
SNAPSHOT_PREFIX = "hermes-data-snapshot-"
#: ``SQLITE_READONLY_ROLLBACK``: a hot journal a read-only connection cannot roll back.
_READONLY_ROLLBACK = 776
#: The statement that proves a connection can read (the catalogue, one page).
_PROBE = "SELECT count(*) FROM sqlite_master"
#: Copies of a file that changes while it is copied (another process rolling it back).
_SNAPSHOT_ATTEMPTS = 3
_CHUNK = 1 << 20


def has_hot_journal_error(exc: BaseException) -> bool:
    """Is ``exc`` SQLite refusing a read-only reader because of a hot rollback journal?"""
    return getattr(driver_error(exc), "sqlite_errorcode", None) == _READONLY_ROLLBACK


_classes: dict[type, type[sqlite3.Connection]] = {}


def _closing_class(factory: type[sqlite3.Connection]) -> type[sqlite3.Connection]:
    """``factory`` with a hook run after :meth:`close` (snapshot removal, sidecar cleanup);
    one subclass per factory."""
    made = _classes.get(factory)
    if made is not None:
        return made

    class Reading(factory):  # type: ignore[misc, valid-type]
        _after_close: Callable[[], None] | None = None

        def close(self) -> None:  # noqa: D401 - sqlite3 API
            try:
                super().close()
            finally:
                hook, self._after_close = self._after_close, None
                if hook is not None:
                    hook()

    Reading.__name__ = Reading.__qualname__ = f"Reading{factory.__name__}"
    return _classes.setdefault(factory, Reading)


def connect(path: Path | str, *, timeout: float = 30.0,
            factory: type[sqlite3.Connection] = TrackedConnection,
            **kwargs: Any) -> sqlite3.Connection:
    """A connection that reads the SQLite file at ``path`` and never writes it (see the
    module docstring): ``mode=ro`` in place, or a private rolled-back snapshot when a hot
    rollback journal blocks read-only readers. ``factory`` (a :class:`TrackedConnection`
    subclass) and ``kwargs`` go to :func:`sqlite3.connect`. Errors other than the hot
    journal (not a database, locked, damaged) are left to the caller's first statement, so
    its refusals stay its own."""
    path = Path(path)
    db = path.resolve()
    wal, shm = Path(f"{db}-wal"), Path(f"{db}-shm")
    sidecars_before = wal.exists() or shm.exists()
    cls = _closing_class(factory)
    con = tracked_connect(f"{db.as_uri()}?mode=ro", uri=True, timeout=timeout, factory=cls,
                          **kwargs)
    try:
        con.execute(_PROBE).fetchall()
    except sqlite3.DatabaseError as exc:
        if not has_hot_journal_error(exc):
            _arm_cleanup(con, db, sidecars_before)
            return con  # the caller's own statement meets (and names) the error
        con.close()
        log.info("%s: hot rollback journal (a writer stopped mid-transaction); reading a "
                 "private snapshot rolled back, the file and its journal are left as they are",
                 path)
        return _snapshot(db, cls, timeout, kwargs)
    _arm_cleanup(con, db, sidecars_before)
    return con


def _arm_cleanup(con: sqlite3.Connection, db: Path, sidecars_before: bool) -> None:
    if not sidecars_before:
        con._after_close = lambda: _remove_new_sidecars(db)  # type: ignore[attr-defined]


def _remove_new_sidecars(db: Path) -> None:
    """After a read-only connection made ``-wal``/``-shm`` beside a WAL file that had none:
    let SQLite's last-connection close remove them (never unlink them ourselves: a process
    that opened the file meanwhile shares them, and SQLite's exclusive lock decides)."""
    wal, shm, journal = (Path(f"{db}{s}") for s in ("-wal", "-shm", "-journal"))
    if not (wal.exists() or shm.exists()):
        return
    try:
        if journal.stat().st_size > 0:
            return  # a writer is (or was) in a rollback transaction: a writable open could roll back
    except FileNotFoundError:
        pass
    try:
        closer = tracked_connect(str(db), timeout=0.2, isolation_level=None)
    except sqlite3.Error as exc:
        log.debug("%s: left the -wal/-shm a reader made (%s)", db, exc)
        return
    try:
        closer.execute("PRAGMA query_only=1")
        closer.execute(_PROBE).fetchall()
    except sqlite3.Error as exc:
        log.debug("%s: left the -wal/-shm a reader made (%s)", db, exc)
    finally:
        closer.close()  # the last connection: checkpoints nothing, deletes both


def _snapshot(db: Path, cls: type[sqlite3.Connection], timeout: float,
              kwargs: dict[str, Any]) -> sqlite3.Connection:
    """A writable connection on a private copy of ``db`` and its hot journal, rolled back."""
    directory = Path(tempfile.mkdtemp(prefix=SNAPSHOT_PREFIX))  # 0700
    try:
        copy = directory / db.name
        for attempt in range(_SNAPSHOT_ATTEMPTS):
            if _copy_pair(db, copy):
                break
            log.info("%s changed while it was copied; copying again", db)
        else:
            raise sqlite3.OperationalError(
                f"{db}: the file kept changing while a snapshot was taken (another process "
                "is rolling it back or writing); retry")
        con = tracked_connect(str(copy), timeout=timeout, factory=cls, **kwargs)
        try:
            con.execute(_PROBE).fetchall()  # SQLite rolls the copy's hot journal back here
            con.execute("PRAGMA query_only=1")
        except BaseException:
            con.close()
            raise
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    con._after_close = lambda: shutil.rmtree(directory, ignore_errors=True)  # type: ignore[attr-defined]
    return con


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_size, st.st_mtime_ns


def _copy_pair(db: Path, copy: Path) -> bool:
    """Copy ``db`` and its ``-journal`` beside ``copy``; True when neither changed meanwhile.

    The database is read through this process's shared header descriptor
    (:class:`~hermes_data.files.FileHeader`): closing a descriptor of our own would drop
    every POSIX lock this process holds on the file. SQLite holds no lock on the journal.
    """
    journal = Path(f"{db}-journal")
    before = (_stamp(db), _stamp(journal))
    lease = FileHeader(db)
    try:
        with open(copy, "wb") as out:
            offset = 0
            while chunk := os.pread(lease.fd, _CHUNK, offset):
                out.write(chunk)
                offset += len(chunk)
    finally:
        lease.release()
    target = Path(f"{copy}-journal")
    try:
        shutil.copyfile(journal, target)
    except FileNotFoundError:  # rolled back by another process meanwhile
        target.unlink(missing_ok=True)
    return (_stamp(db), _stamp(journal)) == before
