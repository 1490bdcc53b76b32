"""The one way the command line writes to the terminal, and how it words a failure.

:mod:`hermes_data.cli.app` and the ``cli_*`` modules whose subcommands it registers print only
through :func:`emit` (results), :func:`emit_json` (``--json``: always one object keyed by
store) and :func:`progress` (long operations, on stderr, only on a terminal); the library itself
never prints. A module of its own so that the ``cli_*`` modules need not import
:mod:`hermes_data.cli.app`, which imports them.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from hermes_data.files import replacing_file


def emit(*args: Any, sep: str = " ", end: str = "\n", file: Any = None,
         flush: bool = False) -> None:
    """Write ``args`` to the terminal (standard output unless ``file``), joined by ``sep``
    and ended by ``end``: the command line's only output call; the library itself logs and
    never writes to the terminal. Progress lines go through it too."""
    stream = sys.stdout if file is None else file
    stream.write(sep.join(map(str, args)) + end)
    if flush:
        stream.flush()


def emit_json(by_store: dict[str, Any]) -> None:
    """Write ``--json`` output: one object keyed by store name, for every command."""
    emit(json.dumps(by_store, indent=2, ensure_ascii=False, default=str))


class StoreFailure(Exception):
    """An operation on one database failed; ``target`` is the file or URL it was about."""

    def __init__(self, target: str, cause: BaseException) -> None:
        super().__init__(f"{target}: {cause}")
        self.target, self.cause = target, cause


def target_of(store: str, url) -> str:
    """The file (or password-less URL) a command works on, as the user should read it."""
    from hermes_data.config import resolve_url, sqlite_path
    from hermes_data.migrate.runner import display_url

    try:
        resolved = resolve_url(store, url)
    except Exception:
        return str(url)
    path = sqlite_path(resolved)
    return str(path) if path is not None else display_url(resolved)


def _sqlite_problem(text: str, target: str | None) -> str:
    path = Path(target) if target and "://" not in target else None
    low = text.lower()
    if "unable to open database file" in low and path is not None:
        if path.is_dir():
            return "is a directory, not a database file"
        if not path.parent.is_dir():
            return f"cannot be created: the directory {path.parent} does not exist"
        if not os.access(path if path.exists() else path.parent, os.W_OK):
            return "cannot be opened for writing (permission denied)"
        return "cannot be opened (unable to open database file)"
    if "database or disk is full" in low:
        return ("database or disk is full: free space on its filesystem and retry "
                "(the failed transaction was rolled back)")
    if "disk i/o error" in low:
        return ("disk I/O error while writing (is the disk full, a file-size limit reached, or "
                "the device failing?); the failed transaction was rolled back")
    if "file is not a database" in low:
        return "not a SQLite database (or its header is corrupt)"
    if "malformed" in low:
        return f"the database is corrupt ({text})"
    return text


def describe_error(exc: BaseException, target: str | None = None) -> str:
    """One line naming the file/URL and the problem (no traceback, no SQL)."""
    from sqlalchemy.exc import DBAPIError, NoSuchModuleError

    from hermes_data.errors import HermesDataError

    if isinstance(exc, StoreFailure):
        target, exc = exc.target, exc.cause
    if isinstance(exc, OutputFileError):  # names the output file; the store is not at fault
        return " ".join(str(exc).split())
    if isinstance(exc, HermesDataError):
        text = str(exc)
    elif isinstance(exc, DBAPIError):
        orig = exc.orig
        text = str(orig).strip().splitlines()[0] if str(orig).strip() else type(orig).__name__
        text = re.sub(r"^connection failed:\s*", "", text)
        if type(orig).__module__.startswith("sqlite3"):
            text = _sqlite_problem(text, target)
    elif isinstance(exc, NoSuchModuleError):
        text = f"unsupported database URL ({exc})"
    elif isinstance(exc, OSError):
        text = f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else "")
    else:
        text = f"{type(exc).__name__}: {exc}"
    text = " ".join(text.split())
    if target and target not in text and not (
            "://" not in target and Path(target).name and f"{Path(target).name}:" in text):
        text = f"{target}: {text}"
    return text


Progress = Callable[[int, int], None]


def progress_enabled(json_output: bool) -> bool:
    """Progress is drawn only on a terminal (stderr) and never with ``--json``."""
    return not json_output and sys.stderr.isatty()


def progress(label: str, enabled: bool) -> Progress | None:
    """A ``progress(done, total)`` callback drawing one updating line on stderr, or ``None``.

    Redraws at most ten times a second (and always at the end), so a tight loop of small
    batches costs nothing noticeable."""
    if not enabled:
        return None
    last = [0.0]

    def report(done: int, total: int) -> None:
        now = time.monotonic()
        final = done >= total
        if not final and now - last[0] < 0.1:
            return
        last[0] = now
        pct = f" {100 * done // total:3d}%" if total else ""
        emit(f"\r{label}: {done:,}/{total:,}{pct}", end="\n" if final else "",
             file=sys.stderr, flush=True)
    return report


class _Ticker:
    """Redraws ``label… N s`` on stderr twice a second while one long statement runs."""

    def __init__(self, label: str) -> None:
        import threading

        self.label, self.started = label, time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            emit(f"\r{self.label}… {time.monotonic() - self.started:.0f} s", end="",
                 file=sys.stderr, flush=True)

    def __enter__(self) -> "_Ticker":
        emit(f"{self.label}…", end="", file=sys.stderr, flush=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        emit(f"\r{self.label}: done in {time.monotonic() - self.started:.1f} s", file=sys.stderr,
             flush=True)


def elapsed(label: str, enabled: bool):
    """A context manager showing elapsed time on stderr (for one long statement such as
    ``VACUUM``, which reports no progress of its own); does nothing when not enabled."""
    from contextlib import nullcontext

    return _Ticker(label) if enabled else nullcontext()


#: The loggers whose INFO records mark the steps of an upgrade (adoption, each revision).
_STEP_LOGGERS = ("alembic.runtime.migration", "hermes_data.telemetry.migration",
                 "hermes_data.sessions.storage.adoption")
_RUNNING = re.compile(r"Running upgrade (\S*) -> ([^,\s]+)")


class _StepProgress:
    """Draws the step an upgrade is at (``telemetry: v14 (14/18)``) from its log records."""

    def __init__(self, store: str) -> None:
        import logging

        from hermes_data.migrate import runner as migrate

        script = migrate.alembic_config(store)
        from alembic.script import ScriptDirectory

        history = [r.revision for r in ScriptDirectory.from_config(script).walk_revisions()]
        self.order = list(reversed(history))
        self.store = store
        self.loggers = [logging.getLogger(name) for name in _STEP_LOGGERS]
        self.saved: list[tuple[int, bool]] = []
        outer = self

        class Handler(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                outer.step(record.getMessage())

        self.handler = Handler(level=logging.INFO)
        self.drawn = False

    def step(self, message: str) -> None:
        m = _RUNNING.match(message)
        if m:
            rev = m.group(2)
            pos = self.order.index(rev) + 1 if rev in self.order else 0
            text = f"{self.store}: {rev} ({pos}/{len(self.order)})" if pos else f"{self.store}: {rev}"
        elif message.startswith("adopting"):
            text = f"{self.store}: adopting the legacy file"
        elif message.startswith("reconciled"):
            text = f"{self.store}: reconciled with the head"
        else:
            return
        emit(f"\r\033[K{text}", end="", file=sys.stderr, flush=True)
        self.drawn = True

    def __enter__(self) -> "_StepProgress":
        import logging

        for lg in self.loggers:
            self.saved.append((lg.level, lg.propagate))
            if lg.getEffectiveLevel() > logging.INFO:
                lg.setLevel(logging.INFO)
                lg.propagate = False  # INFO for the drawing only, not for the log output
            lg.addHandler(self.handler)
        return self

    def __exit__(self, *exc) -> None:
        for lg, (level, propagate) in zip(self.loggers, self.saved):
            lg.removeHandler(self.handler)
            lg.setLevel(level)
            lg.propagate = propagate
        if self.drawn:
            emit("\r\033[K", end="", file=sys.stderr, flush=True)


def upgrade_progress(store: str, enabled: bool):
    """A context manager drawing the steps of an upgrade of ``store`` on stderr (adoption,
    each revision, reconciliation), or nothing when not enabled."""
    from contextlib import nullcontext

    return _StepProgress(store) if enabled else nullcontext()


class OutputFileError(Exception):
    """Writing a command's ``-o FILE`` failed, or FILE may not be written (a symbolic link, a
    directory): the message names FILE and the problem — never the store, which was only
    read. Nothing is left at FILE's place: a previous FILE is untouched."""


class _OutputFile:
    """The text stream of :func:`output_file`: a failed write names the output file."""

    def __init__(self, stream: Any, path: str) -> None:
        self._stream, self._path = stream, path

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as exc:
            raise _output_error(exc, self._path) from exc


def _output_error(exc: OSError, path: str) -> OutputFileError:
    reason = (exc.strerror or str(exc)).lower() if exc.errno is not None else str(exc)
    return OutputFileError(f"{reason} writing {path}; nothing was written there"
                           + (" (the previous file is unchanged)" if os.path.lexists(path) else ""))


def refuse_output_path(path: str) -> None:
    """Refuse an ``-o`` path that is a directory or a symbolic link (before anything is
    opened): :class:`OutputFileError`. A link is never followed nor replaced — a root-run
    export could otherwise be pointed at any file (docs/cli.md, ``export``)."""
    if os.path.islink(path):
        raise OutputFileError(f"{path}: the output path is a symbolic link (to "
                              f"{os.readlink(path)}); refused, nothing was written (remove the "
                              "link or name another file)")
    if os.path.isdir(path):
        raise OutputFileError(f"{path}: the output path is a directory; -o takes the file to "
                              "write (a file name inside it, for example)")


@contextmanager
def output_file(path: str | None) -> Iterator[Any]:
    """A text stream for a command's output: stdout without ``path``; else
    :func:`hermes_data.files.replacing_file` — a new temporary file beside ``path`` (mode
    0600: an export is as private as the store), renamed over ``path`` when the block
    succeeds. A failure — of the block, or a full disk or I/O error writing it — removes the
    temporary file and leaves any previous ``path`` untouched; a failure of the output file
    itself is raised as :class:`OutputFileError` naming ``path``, while one of the block
    (reading the store) propagates as it is."""
    if not path:
        yield sys.stdout
        return
    refuse_output_path(path)
    in_block = False
    try:
        with replacing_file(path) as stream:
            in_block = True
            yield _OutputFile(stream, path)
            in_block = False
    except OSError as exc:  # open, flush, fsync, close, rename: the output's, not the store's
        if in_block:
            raise  # the block's own failure (e.g. StoreIOError reading the store)
        raise _output_error(exc, path) from exc
