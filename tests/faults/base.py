"""What a write path of the fault matrix is: :class:`Scenario` (issue 31).

A scenario builds its pristine files once (no fault), then, in the armed child, runs its
operation on a fresh copy of them. What the checker needs from it:

* ``observe(dir)`` → ``(prior, units)``: a digest of everything acknowledged *before* the
  operation (must never change) and how many whole units of the operation are visible
  (an append: the rows carrying its marker, divided by the rows one call writes). After a
  failed call ``units`` is what it was (all or nothing: a part-visible call is not a whole
  unit and is reported as such); after a rerun without the fault one more unit is visible,
  or — for ``idempotent`` operations such as an upgrade — exactly one.
* ``db``: the SQLite file(s) whose ``PRAGMA integrity_check`` must say ``ok`` and which the
  typed error must name.

Operations run with the store opened before arming (``open``) unless the opening is the
operation itself (``open`` is None and ``run`` opens and closes).

A command scenario runs a whole ``hermes-data`` command in-process (:func:`run_cli`): a
non-zero exit raises :class:`CommandFailed`, which the child judges by what the user saw —
one ``hermes-data: error:`` line naming the file, no traceback, no raw driver message.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import shutil
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

#: Marks the rows the operation under test writes.
MARK = "fault-matrix-op"


@dataclass(frozen=True)
class Scenario:
    """One write path of the matrix (see the module docstring)."""

    name: str
    db: str
    prepare: Callable[[Path], None]
    run: Callable[[Any, Path], None]
    observe: Callable[[Path], tuple[str, int]]
    open: Callable[[Path], Any] | None = None
    close: Callable[[Any], None] = field(default=lambda handle: handle.close())
    idempotent: bool = False
    #: Replaces ``PRAGMA integrity_check`` and the opening test where the pristine file is not
    #: a sound store (a file ``repair`` is to fix): ``check(dir)`` → ``"ok"`` or what is wrong.
    check: Callable[[Path], str] | None = None


class CommandFailed(Exception):
    """A ``hermes-data`` command run by :func:`run_cli` exited non-zero."""

    def __init__(self, argv: list[str], rc: int, stdout: str, stderr: str) -> None:
        super().__init__(f"hermes-data {' '.join(argv)} exited {rc}: {stderr.strip()[-500:]}")
        self.argv, self.rc, self.stdout, self.stderr = argv, rc, stdout, stderr


def run_cli(*argv: str) -> str:
    """Run ``hermes-data ARGV`` in this process (its entry function, stdout and stderr
    captured); its stdout, or :class:`CommandFailed` when it exits non-zero."""
    from hermes_data.cli.app import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(list(argv))
        except SystemExit as exc:  # argparse, or a command that exits itself
            rc = exc.code if isinstance(exc.code, int) else 1
    if rc:
        raise CommandFailed(list(argv), rc, out.getvalue(), err.getvalue())
    return out.getvalue()


def rows_digest(db: Path, query: str, params: tuple = ()) -> str:
    """A digest of ``query``'s rows in ``db`` (read with plain ``sqlite3``, read-only)."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        digest = hashlib.sha256()
        for row in con.execute(query, params):
            digest.update(repr(row).encode())
        return digest.hexdigest()
    finally:
        con.close()


def count(db: Path, query: str, params: tuple = ()) -> int:
    """The single integer ``query`` returns in ``db`` (read-only)."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return int(con.execute(query, params).fetchone()[0])
    finally:
        con.close()


def legacy_copy(member: str, dest: Path) -> Path:
    """Copy the legacy database ``member`` of the repository's fixtures (tests/fixtures/
    README.md; with any ``-wal``/``-shm`` beside it) to ``dest``, owner-writable."""
    from tests.conftest import FIXTURES  # unpacked and checksummed once per process

    src = FIXTURES / member
    assert src.exists(), member
    for suffix in ("", "-wal", "-shm"):
        if Path(f"{src}{suffix}").exists():
            shutil.copyfile(f"{src}{suffix}", f"{dest}{suffix}")
            Path(f"{dest}{suffix}").chmod(0o600)
    return dest
