"""The fault injector: libfiu's POSIX preload, driven from inside the process through ctypes.

``fiu-run -x`` can fail a function at random; the matrix needs "fail the k-th write of this
operation and no other". libfiu's *external* failure points give that: every wrapped call
asks a callback whether to fail, and ours counts the calls made while armed and fails the
k-th with the errno it was given (libfiu's POSIX wrappers set ``errno`` from ``failinfo``).

Only a process started with the two preload libraries (:data:`PRELOAD`, in ``LD_PRELOAD``)
has the wrappers; :func:`available` says whether this machine has libfiu at all (Debian's
``libfiu0`` and ``fiu-utils``, installed by ``.ci/run``).
"""

from __future__ import annotations

import ctypes
import errno as errno_codes
import os
from pathlib import Path

LIBDIR = Path("/usr/lib/fiu")
LIBFIU = Path("/usr/lib/libfiu.so.1.1")
#: ``LD_PRELOAD`` for a child process: libfiu's initialiser and its POSIX wrappers.
PRELOAD = f"{LIBDIR / 'fiu_run_preload.so'} {LIBDIR / 'fiu_posix_preload.so'}"
#: The wrapped calls that change a file or make it durable: what "a write position" counts.
POINTS = ("posix/io/rw/write", "posix/io/rw/pwrite", "posix/io/rw/writev",
          "posix/io/rw/pwritev", "posix/io/rw/ftruncate", "posix/io/sync/fsync",
          "posix/io/sync/fdatasync", "posix/io/oc/open")
#: The faults the matrix injects, by name: an I/O error and a full disk.
ERRNOS = {"EIO": errno_codes.EIO, "ENOSPC": errno_codes.ENOSPC}

_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int),
                             ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_uint))


def available() -> bool:
    """True when libfiu and its preload libraries are installed."""
    return LIBFIU.exists() and all((LIBDIR / name).exists()
                                   for name in ("fiu_run_preload.so", "fiu_posix_preload.so"))


def child_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a child process that can be armed (``base`` or ours, plus the
    preload libraries)."""
    env = dict(os.environ if base is None else base)
    env["LD_PRELOAD"] = PRELOAD
    return env


class Injector:
    """Counts the write positions of the calls made while armed, and fails one of them.

    ``arm(k, err)`` starts counting (k = 0: fail nothing, only count); ``disarm()`` stops
    and returns how many positions were counted. Every thread of the process is counted:
    arm only around the operation under test, after a warm-up run has done its imports.
    """

    def __init__(self) -> None:
        if "fiu_posix_preload" not in os.environ.get("LD_PRELOAD", ""):
            raise RuntimeError("the fault injector needs a process started with "
                               f"LD_PRELOAD={PRELOAD!r} (tests/faults/fiu.child_env)")
        self._lib = ctypes.CDLL(str(LIBFIU), mode=ctypes.RTLD_GLOBAL)
        self._armed = False
        self._target = 0
        self._errno = 0
        self.calls = 0
        self.fired: str | None = None
        self._callback = _CALLBACK(self._decide)  # kept alive: libfiu holds the pointer
        for point in POINTS:
            if self._lib.fiu_enable_external(point.encode(), 1, None, 0, self._callback) != 0:
                raise RuntimeError(f"libfiu refused to enable {point}")

    def _decide(self, name: bytes, failnum: object, failinfo: object, flags: object) -> int:
        if not self._armed:
            return 0
        self.calls += 1
        if self.calls != self._target:
            return 0
        self.fired = name.decode()
        failinfo[0] = self._errno  # type: ignore[index]
        return 1

    def arm(self, k: int, err: int = errno_codes.EIO) -> None:
        """Count from now on and fail the ``k``-th position with ``err`` (0: fail none)."""
        self.calls, self._target, self._errno, self.fired = 0, k, err, None
        self._armed = True

    def disarm(self) -> int:
        """Stop counting; the number of positions counted since :meth:`arm`."""
        self._armed = False
        return self.calls
