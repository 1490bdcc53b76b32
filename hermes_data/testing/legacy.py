"""Private copies of a service's legacy database files for adoption tests.

A test of adoption must never open the original file: opening a SQLite file can create a
``-wal``/``-shm`` pair or roll back a hot journal, and the next run would test a different
file. :class:`LegacyCopies` copies a file with its sidecars into a fresh directory and
remembers a checksum of the original set; :meth:`LegacyCopies.changed` reports any original
whose bytes changed (or whose sidecars appeared or vanished) since it was copied.

No pytest here: the plugin's ``legacy_copy`` fixture turns a change into a test failure.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path
from typing import Callable

__all__ = ["SIDECAR_SUFFIXES", "LegacyCopies", "file_set_digest"]

#: The files SQLite keeps beside a database, copied with it when present.
SIDECAR_SUFFIXES = ("-wal", "-shm", "-journal")


def _sidecars(path: Path) -> list[Path]:
    return [side for suffix in SIDECAR_SUFFIXES if (side := Path(f"{path}{suffix}")).exists()]


def file_set_digest(path: Path) -> dict[str, str]:
    """SHA-256 of ``path`` and of each sidecar present, by file name (read as bytes; the
    database is never opened as one). A missing main file has the digest ``"missing"``."""
    digests: dict[str, str] = {}
    for file in (path, *_sidecars(path)):
        try:
            h = hashlib.sha256()
            with open(file, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
            digests[file.name] = h.hexdigest()
        except FileNotFoundError:
            digests[file.name] = "missing"
    return digests


class LegacyCopies:
    """Copies legacy database files into fresh directories made by ``new_dir`` (one per
    copy, so two originals with the same name never collide) and checks the originals.

    Call it: ``copies(path)`` returns the copy's path (``name`` renames the copy, its
    sidecars follow). The copy and its sidecars are owner-only (0600) and writable even when
    the original is read-only.
    """

    def __init__(self, new_dir: Callable[[], Path]) -> None:
        self._new_dir = new_dir
        #: original (resolved) → its digest when it was first copied.
        self.originals: dict[Path, dict[str, str]] = {}

    def __call__(self, path: str | os.PathLike[str], name: str | None = None) -> Path:
        """Copy ``path`` (and its ``-wal``/``-shm``/``-journal`` sidecars) into a fresh
        directory; returns the copy's path. ``name``: the copy's file name (default: the
        original's)."""
        src = Path(path)
        if not src.is_file():
            raise FileNotFoundError(f"{src}: no such legacy file to copy"
                                    + (" (it is a directory)" if src.is_dir() else ""))
        if name is not None and (not name or Path(name).name != name):
            raise ValueError(f"name {name!r}: a file name, without a directory")
        src = src.resolve()
        before = file_set_digest(src)
        self.originals.setdefault(src, before)
        dest = self._new_dir() / (name or src.name)
        for file in (src, *_sidecars(src)):
            target = Path(f"{dest}{file.name[len(src.name):]}")
            shutil.copyfile(file, target)
            os.chmod(target, 0o600)
        if file_set_digest(src) != before:
            raise RuntimeError(f"{src}: changed while it was being copied (a process is "
                               "writing it?); copy a file nothing else has open")
        return dest

    def changed(self) -> dict[Path, str]:
        """Each original whose files differ from when it was copied, with what changed."""
        found = {}
        for src, before in self.originals.items():
            after = file_set_digest(src)
            if after == before:
                continue
            what = []
            for file in sorted(set(before) | set(after)):
                old, new = before.get(file), after.get(file)
                if old == new:
                    continue
                if old is None:
                    what.append(f"{file} appeared")
                elif new is None:
                    what.append(f"{file} vanished")
                elif new == "missing":
                    what.append(f"{file} was deleted")
                else:
                    what.append(f"{file} changed")
            found[src] = ", ".join(what)
        return found
