"""The repair's file-level helpers (docs/sessions-storage.md §2.3, §3.3): the attempt
ledger and its fingerprint, forensic backup bundles, free-space checks and the scratch copy.

Every raw read of the database or a sidecar runs inside
:func:`~hermes_data.sessions.storage.filesafety.offline_file_access` (this process holds no
connection to it meanwhile). Clocks and ``disk_usage`` are module-level and patchable
(:data:`now`, :data:`disk_usage`), as upstream's repair helpers are.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from hermes_data.files import replacing_file
from hermes_data.sessions.errors import LiveConnectionError
from hermes_data.sessions.storage.filesafety import offline_file_access

log = logging.getLogger("hermes_data.sessions.storage.repair.procedure")

#: Failed repairs of one image before the repair refuses (#86747: 105 attempts, 89 GB).
MAX_FAILED_ATTEMPTS = 3
#: Bundles kept per database (newest first).
KEEP_BUNDLES = 3
#: Free space left after a copy: max(256 MiB, 2 % of the volume).
MIN_HEADROOM = 256 * 1024 * 1024
HEADROOM_FRACTION = 0.02
FINGERPRINT_CHUNK = 64 * 1024
#: Database sidecars, in the order a bundle lists them.
SIDECAR_SUFFIXES = ("-wal", "-shm", "-journal")
_COPY_CHUNK = 1024 * 1024

#: Injectable wall clock (ledger stamps and bundle names) and free-space probe.
now: Callable[[], float] = time.time
disk_usage: Callable[[str], "shutil._ntuple_diskusage"] = shutil.disk_usage


#: Test seam: called with ``copy:staged`` once every part is staged (crash tests exit there).
checkpoint_hook: Callable[[str], None] | None = None


class BackupRefused(Exception):
    """The backup could not be made (a hard stop for the repair, #69603); not counted."""


# ---------------------------------------------------------------------------------------
# Fingerprint and ledger
# ---------------------------------------------------------------------------------------


def _masked_head(head: bytes) -> bytes:
    b = bytearray(head)
    for lo, hi in ((24, 28), (92, 96)):  # change counter, version-valid-for: DELETE commits move them
        if len(b) > lo:
            b[lo:min(hi, len(b))] = bytes(min(hi, len(b)) - lo)
    return bytes(b)


def fingerprint(path: Path) -> str | None:
    """``"<size>:" + sha256(head ‖ tail)[:32]`` (head = first 64 KiB with header bytes 24–27
    and 92–95 zeroed, tail = last 64 KiB, no mtime); None when unreadable."""
    try:
        with offline_file_access(path, "fingerprint the database"), open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(FINGERPRINT_CHUNK)
            f.seek(max(0, size - FINGERPRINT_CHUNK))
            tail = f.read(FINGERPRINT_CHUNK)
    except (OSError, LiveConnectionError):
        return None
    digest = hashlib.sha256(_masked_head(head) + tail).hexdigest()[:32]
    return f"{size}:{digest}"


def ledger_path(db: Path) -> Path:
    """``<db>.repair-attempts.json``."""
    return Path(f"{db}.repair-attempts.json")


@dataclass(frozen=True)
class Ledger:
    """The attempt ledger: failures of the image ``fingerprint``."""

    fingerprint: str | None
    failed_attempts: int
    last_attempt: float | None
    #: The last failure's message (hermes-data's addition; upstream ignores it).
    last_error: str | None = None


def read_ledger(db: Path) -> Ledger | None:
    """The ledger, or None (absent or unreadable: nothing recorded)."""
    try:
        data = json.loads(ledger_path(db).read_text())
        return Ledger(data.get("fingerprint"), int(data.get("failed_attempts", 0)),
                      data.get("last_attempt"), data.get("last_error"))
    except (OSError, ValueError, TypeError, AttributeError):
        return None


def exhausted(db: Path, current: str | None = None) -> Ledger | None:
    """The ledger when it holds :data:`MAX_FAILED_ATTEMPTS` failures of the current image."""
    ledger = read_ledger(db)
    if ledger is None or ledger.failed_attempts < MAX_FAILED_ATTEMPTS:
        return None
    current = current if current is not None else fingerprint(db)
    if current is None or current == ledger.fingerprint:  # unreadable: keep the recorded key
        return ledger
    return None


def record_failure(db: Path, error: str | None = None) -> Ledger:
    """Count one failed repair of the current image (a new image restarts at 1)."""
    current = fingerprint(db)
    old = read_ledger(db)
    if current is None:  # unreadable: keep the recorded key and still count
        key = old.fingerprint if old is not None else None
        count = (old.failed_attempts if old is not None else 0) + 1
    else:
        key = current
        count = (old.failed_attempts + 1) if old is not None and old.fingerprint == current else 1
    ledger = Ledger(key, count, now(), error)
    _write_json(ledger_path(db), {"fingerprint": key, "failed_attempts": count,
                                  "last_attempt": ledger.last_attempt, "last_error": error})
    return ledger


def repair_facts(db: Path) -> dict:
    """What ``doctor`` shows: the ledger (with the last error), the bundles, whether the
    repair is exhausted for the current image."""
    ledger = read_ledger(db)
    return {"ledger": None if ledger is None else ledger.__dict__,
            "exhausted": exhausted(db) is not None if ledger is not None else False,
            "bundles": [str(b) for b in bundles(db)]}


def clear_ledger(db: Path) -> None:
    """Delete the ledger (a successful repair)."""
    try:
        ledger_path(db).unlink()
    except FileNotFoundError:
        pass


def _write_json(path: Path, data: dict) -> None:
    # A new file renamed over the ledger: never a followed link or a truncated file (issue 31).
    with replacing_file(path) as f:
        json.dump(data, f)


# ---------------------------------------------------------------------------------------
# Backup bundles
# ---------------------------------------------------------------------------------------

_BUNDLE = re.compile(r"\.malformed-backup-(\d{8}_\d{6})(?:_(\d+))?$")


def _parts(db: Path) -> list[Path]:
    return [db, *(Path(f"{db}{s}") for s in SIDECAR_SUFFIXES)]


def bundles(db: Path) -> list[Path]:
    """Published bundles (their main file), newest first; staging files never count."""
    prefix = f"{db.name}.malformed-backup-"
    found = []
    try:
        names = os.listdir(db.parent)
    except OSError:
        return []
    for name in names:
        if not name.startswith(prefix):
            continue
        m = _BUNDLE.search(name)
        if m is None:
            continue  # a sidecar of a bundle, or debris
        found.append(((m.group(1), int(m.group(2) or 0)), db.parent / name))
    return [p for _k, p in sorted(found, reverse=True)]


def content_identity(files: list[Path]) -> str | None:
    """SHA-256 of the length-delimited main file, then each existing sidecar (by suffix)."""
    h = hashlib.sha256()
    try:
        for i, p in enumerate(files):
            if i and not p.exists():
                continue
            h.update(f"{SIDECAR_SUFFIXES[i - 1] if i else 'main'}:{p.stat().st_size}:".encode())
            with open(p, "rb") as f:
                while chunk := f.read(_COPY_CHUNK):
                    h.update(chunk)
    except OSError:
        return None
    return h.hexdigest()


def _bundle_files(bundle: Path) -> list[Path]:
    return [bundle, *(Path(f"{bundle}{s}") for s in SIDECAR_SUFFIXES)]


def need_bytes(db: Path) -> int:
    """Bytes of the database and its sidecars."""
    total = 0
    for p in _parts(db):
        try:
            total += p.stat().st_size
        except OSError:
            pass
    return total


def space_ok(directory: Path, need: int) -> tuple[bool, str]:
    """free − need ≥ max(256 MiB, 2 % of the volume); a failed stat refuses."""
    try:
        usage = disk_usage(str(directory))
    except OSError as exc:
        return False, f"free space unknown ({exc})"
    headroom = max(MIN_HEADROOM, int(usage.total * HEADROOM_FRACTION))
    if usage.free - need < headroom:
        return False, (f"too little disk space in {directory}: {usage.free} bytes free, "
                       f"{need} needed plus {headroom} headroom")
    return True, ""


def _copy_hashing(src: Path, dst: Path) -> str:
    h = hashlib.sha256()
    fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with open(src, "rb") as fin, os.fdopen(fd, "wb") as fout:
        while chunk := fin.read(_COPY_CHUNK):
            h.update(chunk)
            fout.write(chunk)
        fout.flush()
        os.fsync(fout.fileno())
    return h.hexdigest()


def _hash(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_COPY_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _unlink_quiet(p: Path) -> None:
    try:
        p.unlink()
    except FileNotFoundError:
        pass


def sweep_staging(db: Path) -> None:
    """Remove staging debris of interrupted backups (``<db>.backup-staging-*``)."""
    prefix = f"{db.name}.backup-staging-"
    try:
        names = os.listdir(db.parent)
    except OSError:
        return
    for name in names:
        if name.startswith(prefix):
            _unlink_quiet(db.parent / name)


def _stamp() -> str:
    return time.strftime("%Y%m%d_%H%M%S", time.localtime(now()))


def make_bundle(db: Path) -> tuple[Path, bool]:
    """Copy the database and its sidecars into a forensic bundle (docs/sessions-storage.md §3.3 step 5); returns the
    bundle's main file and whether an identical existing bundle was reused. Raises
    :class:`BackupRefused` (every staged and published part removed) on any failure."""
    sweep_staging(db)
    parts = [p for p in _parts(db) if p == db or p.exists()]
    with offline_file_access(db, "back up the database"):
        identity = content_identity(_parts(db))
        if identity is None:
            raise BackupRefused(f"{db}: unreadable, no backup could be made")
        existing = bundles(db)
        if existing and content_identity(_bundle_files(existing[0])) == identity:
            log.info("%s: reusing the identical backup %s", db, existing[0])
            return existing[0], True
        ok, why = space_ok(db.parent, need_bytes(db))
        if not ok:
            raise BackupRefused(why)
        stamp = _stamp()
        base = Path(f"{db}.malformed-backup-{stamp}")
        n = 0
        while any(p.exists() for p in _bundle_files(base)):
            n += 1
            base = Path(f"{db}.malformed-backup-{stamp}_{n}")
        staged: list[tuple[Path, Path]] = []
        published: list[Path] = []
        try:
            for p in parts:
                suffix = p.name[len(db.name):]
                stage = Path(f"{db}.backup-staging-{stamp}{suffix}")
                _unlink_quiet(stage)
                digest = _copy_hashing(p, stage)
                staged.append((stage, Path(f"{base}{suffix}")))
                if _hash(stage) != digest:
                    raise BackupRefused(f"{stage}: the copy does not match the original")
            if checkpoint_hook is not None:
                checkpoint_hook("copy:staged")
            # Sidecars first, the main file last: its name commits the bundle.
            for stage, final in sorted(staged, key=lambda sf: sf[1] == base):
                if final.exists():
                    raise BackupRefused(f"{final} exists; never overwritten")
                os.rename(stage, final)
                published.append(final)
            _fsync_dir(db.parent)
        except BaseException as exc:
            for stage, _final in staged:
                _unlink_quiet(stage)
            for final in published:
                _unlink_quiet(final)
            if isinstance(exc, BackupRefused):
                raise
            if isinstance(exc, OSError):
                raise BackupRefused(f"backup of {db} failed: {exc}") from exc
            raise
    prune_bundles(db)
    log.warning("%s: forensic backup written to %s", db, base)
    return base, False


def prune_bundles(db: Path, keep: int = KEEP_BUNDLES) -> list[Path]:
    """Delete all but the newest ``keep`` bundles; returns the deleted main files."""
    old = bundles(db)[keep:]
    for b in old:
        for p in reversed(_bundle_files(b)):  # the main file last: a half-deleted bundle is debris
            _unlink_quiet(p)
    return old


# ---------------------------------------------------------------------------------------
# Scratch
# ---------------------------------------------------------------------------------------


def scratch_path(db: Path) -> Path:
    """``<db>.repair-scratch``."""
    return Path(f"{db}.repair-scratch")


def remove_scratch(db: Path) -> None:
    """Remove the scratch copy and its sidecars (raises OSError when one cannot go)."""
    s = scratch_path(db)
    for p in (s, *(Path(f"{s}{x}") for x in SIDECAR_SUFFIXES)):
        _unlink_quiet(p)
