"""Opt-in buffered writer: group commit of recorded calls for high-rate producers.

Producers on any thread hand their call to :meth:`BufferedWriter.record_llm_call` /
:meth:`BufferedWriter.record_tool_call`, which only builds the row tuples and appends them
to an in-memory queue. One writer thread drains the queue and writes everything it found in
**one** ``BEGIN IMMEDIATE … COMMIT`` with ``executemany`` — per call it runs exactly the
statements of the synchronous path (so the final rows are identical, float sums included),
but it pays one transaction per batch instead of one per call.

Guarantees and limits

* **Order**: calls are written in the order they were queued (per producer thread, and
  globally in queue order); consecutive calls of one kind share an ``executemany``.
* **Back-pressure**: at most ``max_pending`` calls are uncommitted at any time — queued
  *or* in the batch being written (a batch leaves the queue only after its ``COMMIT``). A
  producer that finds the buffer full waits for the writer; after ``put_timeout`` seconds it
  gets :class:`BufferFullError`. (Exact for fewer than :data:`LOCK_FREE_MARGIN` concurrent
  producer threads: below that margin a put is lock-free, at the margin it is serialized.)
* **Durability**: a call is durable once :meth:`flush` returns (or :meth:`close`). Pending
  calls are flushed at interpreter exit (``atexit``) and on :meth:`close`; with
  ``flush_on_signals`` also on SIGTERM / SIGINT (opt-in: a library installs no signal
  handler uninvited; the previous handler runs afterwards, so the process still ends).
* **Latency bound**: the writer commits continuously while calls are queued — one batch of
  at most ``max_batch`` calls after another, never waiting for the queue to drain — and
  sleeps at most ``max_delay`` when it is empty. So the oldest uncommitted call is at most
  ``max_delay`` + ``ceil(max_pending / max_batch)`` batch commits old (plus any time
  another process holds the database's write lock). :attr:`max_commit_age` records the
  largest age seen at commit; ``benchmarks/telemetry_writes.py`` prints it.
* **Loss window**: on SIGKILL, power loss or ``os._exit`` the uncommitted calls — at most
  ``max_pending``, counting the batch in flight — are lost; committed batches are not. Use
  the synchronous API where a single call must never be lost.
* **Storage failures** (an I/O error, a full disk: :class:`~hermes_data.errors.StoreIOError`
  / ``StoreFullError`` naming the file): the batch is rolled back as a whole and its calls
  **stay queued, in order** — nothing is dropped and nothing is half-written. Every
  :meth:`flush` waiting at that moment raises that error (its calls are not committed yet);
  the writer retries after a short pause, or at once on the next :meth:`flush`, and a retry
  that commits writes each call exactly once. :meth:`close` gives the storage one last try;
  if that fails too, the calls still queued are dropped, counted in
  :attr:`BufferedWriter.failed`, logged, and ``close`` raises the error.
* **Bad calls** (anything else failing a batch, e.g. a constraint): the batch is rolled back
  and retried call by call so one bad call cannot sink its neighbours; calls that still fail
  are logged, dropped and counted in :attr:`BufferedWriter.failed`.
* **PostgreSQL**: the same on a :class:`~hermes_data.telemetry.store.PgTelemetryStore` —
  ``BEGIN … COMMIT`` with psycopg's ``executemany`` (pipelined) instead of ``BEGIN IMMEDIATE``.
  A server that goes away or cancels the batch (``DatabaseUnavailableError`` /
  ``StatementTimeoutError``) is a storage failure as above: the batch stays queued and the
  next try reconnects. Only when it went away *during* ``COMMIT`` (``outcome_unknown``) is
  the batch dropped — counted in :attr:`BufferedWriter.failed`, logged, raised to the waiting
  flushes — since writing it again could count its calls twice (docs/postgresql.md, "When the
  server goes away").
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import threading
import time
import weakref
from collections import deque
from contextlib import contextmanager
from datetime import datetime
from itertools import groupby, islice
from operator import itemgetter
from typing import Any, Iterable

from hermes_data.errors import (DatabaseUnavailableError, HermesDataError, StatementTimeoutError,
                                StoreIOError)
from hermes_data.statements import Compiled, pg_dialect
from hermes_data.telemetry.store import TelemetryStore
from hermes_data.telemetry.writes import (
    BUMP_RUN_TOOL_CALLS, INSERT_LLM_CALL, INSERT_TOOL_CALL, UPSERT_RUN_FOR_CALL,
    UPSERT_RUN_FOR_CALL_ATTRIBUTED, llm_call_rows, to_iso,
)
from hermes_data.telemetry.values import TOOL_CALL_TEXT, check_texts

log = logging.getLogger("hermes_data.telemetry.buffered")

_LLM, _LLM_ATTRIBUTED, _TOOL, _FLUSH = 0, 1, 2, 3
#: Below ``max_pending - LOCK_FREE_MARGIN`` queued calls a put appends without a lock; from
#: there on puts are serialized, so the ``max_pending`` bound is exact for fewer concurrent
#: producer threads than this.
LOCK_FREE_MARGIN = 1024
_SQL = {
    _LLM: (INSERT_LLM_CALL.sql, UPSERT_RUN_FOR_CALL.sql),
    _LLM_ATTRIBUTED: (INSERT_LLM_CALL.sql, UPSERT_RUN_FOR_CALL_ATTRIBUTED.sql),
    _TOOL: (INSERT_TOOL_CALL.sql, BUMP_RUN_TOOL_CALLS.sql),
}
_pg_sql: dict[int, tuple[str, str]] = {}


def _pg_statements() -> dict[int, tuple[str, str]]:
    """PostgreSQL: the plain inserts without RETURNING (executemany needs no ids); compiled
    on first use, so a SQLite process never imports the PostgreSQL dialect."""
    if not _pg_sql:
        dialect = pg_dialect()
        _pg_sql.update({
            _LLM: (Compiled(INSERT_LLM_CALL.stmt, dialect).sql, UPSERT_RUN_FOR_CALL.pg.sql),
            _LLM_ATTRIBUTED: (Compiled(INSERT_LLM_CALL.stmt, dialect).sql,
                              UPSERT_RUN_FOR_CALL_ATTRIBUTED.pg.sql),
            _TOOL: (Compiled(INSERT_TOOL_CALL.stmt, dialect).sql, BUMP_RUN_TOOL_CALLS.pg.sql),
        })
    return _pg_sql


#: Seconds the writer waits before retrying a batch the storage failed (a flush retries at once).
RETRY_PAUSE = 0.5
#: What fails a whole batch without being the calls' fault — the storage (an I/O error, a
#: full disk) or a PostgreSQL server that went away or canceled it: the batch stays queued.
STORE_FAILURES = (StoreIOError, DatabaseUnavailableError, StatementTimeoutError)


@contextmanager
def _sqlite_tx(store: TelemetryStore):
    # The store's own write transaction: its rollback and I/O-error translation.
    with store.write("a buffered telemetry flush") as tx:
        yield tx.conn


@contextmanager
def _pg_tx(store: TelemetryStore):
    # The store's own write transaction too: a server that goes away is raised as the typed
    # error of the phase it went away in (before COMMIT the server rolled the batch back;
    # during it the outcome is unknown), and a connection it closed is dropped.
    with store.write("a buffered telemetry flush") as tx:
        conn: Any = tx.conn  # a psycopg connection: its cursor is a context manager
        with conn.cursor() as cur:
            yield cur


class BufferFullError(HermesDataError):
    """The buffered writer's queue stayed full for longer than ``put_timeout``."""


class BufferedWriter:
    """Group-commit writer bound to a :class:`TelemetryStore` (see the module docstring).

    Use as a context manager or call :meth:`close`; :meth:`flush` waits until everything
    queued so far is committed.
    """

    def __init__(self, store: TelemetryStore, *, max_pending: int = 50_000,
                 max_batch: int = 5_000, max_delay: float = 0.05,
                 put_timeout: float | None = 30.0,
                 flush_on_signals: Iterable[int] | bool = False) -> None:
        # A store behind the head is refused here, in the caller's thread (StoreBehindError
        # naming `hermes-data upgrade`): on the writer thread the refusal would only reach a
        # flush, after every queued call had been dropped as a bad one.
        store.require_head()
        self.store = store
        self.max_pending = max_pending
        self.max_batch = max_batch
        self.max_delay = max_delay
        self.put_timeout = put_timeout
        self.written = 0
        self.failed = 0
        self.batches = 0
        #: Largest age (seconds) of a batch's oldest call when that batch committed.
        self.max_commit_age = 0.0
        self._locked_above = max(0, max_pending - LOCK_FREE_MARGIN)
        self._queue: deque = deque()
        self._wake = threading.Event()
        self._room = threading.Condition(threading.Lock())
        self._closed = False
        #: The storage failure that made close() drop calls (raised by close()).
        self._dropped_by: HermesDataError | None = None
        self._previous_handlers: dict[int, Any] = {}
        if store.dialect == "sqlite":
            self._sql, self._tx = _SQL, _sqlite_tx
        else:
            self._sql, self._tx = _pg_statements(), _pg_tx
        self._thread = threading.Thread(target=self._run, name="hermes-telemetry-writer",
                                        daemon=True)
        self._thread.start()
        ref = weakref.ref(self)

        def _close_at_exit() -> None:
            writer = ref()
            if writer is not None:
                try:
                    writer.close()
                except STORE_FAILURES:
                    log.exception("%s: telemetry writes dropped at exit", writer.store.path)

        self._atexit = _close_at_exit
        atexit.register(self._atexit)
        if flush_on_signals:
            signals = ((signal.SIGTERM, signal.SIGINT) if flush_on_signals is True
                       else tuple(flush_on_signals))
            self._install_signal_flush(signals)

    # -- opt-in signal flush -----------------------------------------------------------
    def _install_signal_flush(self, signals: tuple) -> None:
        """Flush on each of ``signals``, then hand the signal to the handler that was there
        before (the default action ends the process as it would have). Main thread only
        (Python's rule for signal handlers)."""
        if threading.current_thread() is not threading.main_thread():
            raise HermesDataError("flush_on_signals needs the main thread (Python installs "
                                  "signal handlers only there)")
        ref = weakref.ref(self)

        def _handler(signum: int, frame: Any) -> None:
            writer = ref()
            previous = signal.SIG_DFL
            if writer is not None:
                previous = writer._previous_handlers.get(signum, signal.SIG_DFL)
                try:
                    writer.close()
                except Exception:  # never block the shutdown the signal asked for
                    log.exception("%s: flush on signal %d failed", writer.store.path, signum)
            if callable(previous):
                previous(signum, frame)
            elif previous == signal.SIG_DFL:
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)

        for signum in signals:
            self._previous_handlers[signum] = signal.signal(signum, _handler)

    def _restore_signal_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for signum, previous in self._previous_handlers.items():
            try:
                signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
            except (ValueError, OSError):
                pass
        self._previous_handlers = {}

    # -- producers ---------------------------------------------------------------------
    def _put(self, item: tuple) -> None:
        if self._closed:
            raise HermesDataError("the buffered telemetry writer is closed")
        queue = self._queue
        if len(queue) < self._locked_above:  # common case: far from full, no lock
            queue.append(item)
        else:
            deadline = None if self.put_timeout is None else time.monotonic() + self.put_timeout
            with self._room:  # check and append together: the bound stays exact
                while len(queue) >= self.max_pending:
                    self._wake.set()
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        raise BufferFullError(
                            f"{self.store.path}: {len(queue)} telemetry writes pending for "
                            f"more than {self.put_timeout}s; the writer cannot keep up")
                    self._room.wait(0.1 if left is None else min(left, 0.1))
                queue.append(item)
        if not self._wake.is_set():
            self._wake.set()

    def record_llm_call(self, session_id: str, ts: str | datetime | None, model: str | None,
                        provider: str | None, tokens_in: int = 0, tokens_out: int = 0,
                        cost_usd: float = 0.0, latency_ms: int | None = None,
                        cache_read_tokens: int = 0, cache_write_tokens: int = 0,
                        reasoning_tokens: int = 0, estimated: bool = False,
                        provider_assumed: bool = False, moa_preset: str | None = None, *,
                        turn_id: str | None = None, task_id: str | None = None,
                        api_request_id: str | None = None, sender_id: str | None = None,
                        profile: str | None = None) -> None:
        """Queue a call; same arguments and final effect as
        :func:`hermes_data.telemetry.writes.record_llm_call`."""
        call, run = llm_call_rows(session_id, ts, model, provider, tokens_in, tokens_out,
                                  cost_usd, latency_ms, cache_read_tokens, cache_write_tokens,
                                  reasoning_tokens, estimated, provider_assumed, moa_preset,
                                  turn_id, task_id, api_request_id, sender_id, profile)
        self._put((_LLM_ATTRIBUTED if (sender_id or profile) else _LLM, call, run,
                   time.monotonic()))

    def record_tool_call(self, session_id: str, ts: str | datetime | None, tool_name: str,
                         ok: bool = True, latency_ms: int | None = None, *,
                         turn_id: str | None = None, tool_call_id: str | None = None) -> None:
        """Queue a tool call; same effect as :func:`hermes_data.telemetry.writes.record_tool_call`."""
        ts = ts if type(ts) is str else to_iso(ts)
        check_texts(TOOL_CALL_TEXT, (session_id, ts, tool_name, turn_id, tool_call_id))
        self._put((_TOOL, (session_id, ts, tool_name, 1 if ok else 0, latency_ms,
                           turn_id or None, tool_call_id or None), (session_id,),
                   time.monotonic()))

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every call queued before this one is committed; False on timeout.

        Raises :class:`~hermes_data.errors.StoreIOError` / ``StoreFullError`` (naming the
        file) when the storage failed the batch: those calls are not committed, they stay
        queued, and a later flush (or :meth:`close`) writes them — once."""
        if not self._thread.is_alive():
            return not self._queue
        done = threading.Event()
        failure: list[HermesDataError] = []
        self._queue.append((_FLUSH, done, failure, time.monotonic()))
        self._wake.set()
        if not done.wait(timeout):
            return False
        if failure:
            raise failure[0]
        return True

    @property
    def pending(self) -> int:
        """Calls not yet committed, the batch being written included (approximate)."""
        return len(self._queue)

    def oldest_age(self) -> float:
        """Seconds since the oldest uncommitted call was queued (0 when none is)."""
        try:
            return time.monotonic() - self._queue[0][3]
        except IndexError:
            return 0.0

    def close(self) -> None:
        """Flush, stop the writer thread and release its connection (idempotent).

        When the storage fails (see the module docstring) the writer tries once more; calls
        it still cannot commit are dropped, counted in :attr:`failed`, and ``close`` raises
        the :class:`~hermes_data.errors.StoreIOError` after stopping the thread."""
        if self._closed:
            return
        try:
            self.flush()
        except STORE_FAILURES:
            pass  # one more try below, then drop what is left
        self._closed = True
        self._wake.set()
        self._thread.join()
        atexit.unregister(self._atexit)
        self._restore_signal_handlers()
        if self._dropped_by is not None:
            raise self._dropped_by

    def __enter__(self) -> "BufferedWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writer thread -----------------------------------------------------------------
    def _run(self) -> None:
        queue, wake = self._queue, self._wake
        pause = self.max_delay
        try:
            while True:
                wake.wait(pause)
                wake.clear()
                pause = self.max_delay
                while queue:
                    # Peek, write, commit, and only then take the batch off the queue: the
                    # batch in flight still counts against max_pending (the loss bound).
                    # (list(islice(deque)) runs in C under the GIL: producers cannot append
                    # in the middle of it.)
                    batch = list(islice(queue, self.max_batch))
                    done, failure = self._write(batch)
                    pop = queue.popleft
                    for _ in range(done):
                        pop()
                    if self._room.acquire(timeout=0.05):  # never block on a signal handler
                        try:
                            self._room.notify_all()
                        finally:
                            self._room.release()
                    if failure is not None:
                        self._storage_failed(failure)
                        pause = RETRY_PAUSE
                        break
                if self._closed and not queue:  # a failure at close emptied it
                    return
        finally:
            self.store.release_thread_connection()

    def _storage_failed(self, failure: HermesDataError) -> None:
        """The storage failed a batch: its calls stay queued. Every flush waiting now learns
        it; on close, what is still queued is dropped and reported."""
        queue = self._queue
        for item in list(queue):
            if item[0] == _FLUSH and not item[1].is_set():
                item[2].append(failure)
                item[1].set()
        if self._closed:
            dropped = sum(1 for item in queue if item[0] != _FLUSH)
            queue.clear()
            self.failed += dropped
            self._dropped_by = failure
            log.error("%s: %d telemetry writes dropped at close: %s", self.store.path, dropped,
                      failure)

    def _write(self, batch: list) -> tuple[int, HermesDataError | None]:
        """Write ``batch``; how many of its leading entries are done (committed, dropped as
        bad calls, or flush markers passed), and the storage failure that stopped it, if any."""
        items = [item for item in batch if item[0] != _FLUSH]
        if items:
            try:
                # store.write asks for the thread's connection per batch: on PostgreSQL one
                # the server closed (a restart) is replaced, so a restart dooms no batch.
                with self.store.writer_queue, self._tx(self.store) as cur:
                    for kind, grouped in groupby(items, key=itemgetter(0)):
                        group = list(grouped)
                        first, second = self._sql[kind]
                        cur.executemany(first, [g[1] for g in group])
                        cur.executemany(second, [g[2] for g in group])
                self.written += len(items)
                self.batches += 1
                age = time.monotonic() - items[0][3]
                if age > self.max_commit_age:
                    self.max_commit_age = age
            except STORE_FAILURES as failure:
                if getattr(failure, "outcome_unknown", False):
                    return self._commit_lost(batch, len(items), failure)
                return 0, failure
            except Exception:
                log.exception("%s: group commit of %d telemetry writes failed; retrying one by one",
                              self.store.path, len(items))
                return self._write_one_by_one(batch)
        for item in batch:
            if item[0] == _FLUSH:
                item[1].set()  # after the commit
        return len(batch), None

    def _commit_lost(self, batch: list, calls: int, failure: HermesDataError
                     ) -> tuple[int, HermesDataError]:
        """The server went away while the batch was committing: it may or may not have been
        applied. Writing it again could count every call twice, so the batch is dropped —
        counted in :attr:`failed`, logged, and raised to the flushes waiting on it."""
        self.failed += calls
        log.error("%s: %d telemetry writes may be lost: %s", self.store.path, calls, failure)
        for item in batch:
            if item[0] == _FLUSH:
                item[2].append(failure)
                item[1].set()
        return len(batch), failure

    def _write_one_by_one(self, batch: list) -> tuple[int, HermesDataError | None]:
        for done, (kind, first_args, second_args, _queued) in enumerate(batch):
            if kind == _FLUSH:
                first_args.set()
                continue
            first, second = self._sql[kind]
            try:
                with self.store.writer_queue, self._tx(self.store) as cur:
                    cur.execute(first, first_args)
                    cur.execute(second, second_args)
                self.written += 1
            except STORE_FAILURES as failure:
                if getattr(failure, "outcome_unknown", False):
                    return done + self._commit_lost(batch[done:done + 1], 1, failure)[0], failure
                return done, failure  # this call and the rest stay queued
            except Exception:
                self.failed += 1
                log.exception("%s: telemetry write for session %r dropped", self.store.path,
                              first_args[0])
        return len(batch), None
