"""The asynchronous token writer of one store handle (docs/sessions-agent.md §3.1).

A synchronous accounting write costs the agent's turn thread a transaction per API call;
``queue_token_counts`` instead appends the (validated) delta to this handle's deque and a
daemon thread applies it. Per handle: one deque, one condition variable, at most one
writer thread, a ``stop`` flag, a ``busy`` flag (a batch is being applied — by the writer,
or by a flushing caller when no writer is alive) and one weakly-bound atexit hook.

Guarantees: per handle, enqueue order and exactly-once on orderly shutdown (``close()`` or
interpreter exit drain the queue); a crash loses queued deltas (at-most-once); no ordering
across handles or processes. After ``os.fork()`` the child starts with an empty queue and no
thread (the parent's deltas are the parent's to write).
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import weakref
from collections import deque
from typing import Any, Callable, Mapping

from hermes_data.errors import ConfigurationError

log = logging.getLogger("hermes_data.sessions.agent.token_writer")

#: A writer with an empty queue retires after this many idle seconds.
IDLE_RETIRE_S = 30.0
#: How long ``close()`` waits for the writer, then for a draining caller.
CLOSE_JOIN_S = 10.0
#: Delta fields that must be equal for two adjacent deltas to merge (with the session id).
MERGE_KEY = ("model", "cost_status", "cost_source", "pricing_version", "billing_provider",
             "billing_base_url", "billing_mode")
_SUMMED = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
           "reasoning_tokens", "api_call_count")
_COSTS = ("estimated_cost_usd", "actual_cost_usd")

Delta = dict[str, Any]
Item = tuple[str, Delta]


def coalesce(batch: list[Item]) -> list[Item]:
    """Merge adjacent non-``absolute`` deltas of one session and route: counters summed,
    costs summed None-preserving (all None stays None). The result, applied in order, has
    the effect of applying ``batch`` in order."""
    out: list[Item] = []
    for sid, d in batch:
        if out and not d["absolute"]:
            psid, prev = out[-1]
            if psid == sid and not prev["absolute"] \
                    and all(prev[k] == d[k] for k in MERGE_KEY):
                merged = dict(prev)
                for k in _SUMMED:
                    merged[k] = prev[k] + d[k]
                for k in _COSTS:
                    a, b = prev[k], d[k]
                    merged[k] = None if a is None and b is None else (a or 0.0) + (b or 0.0)
                out[-1] = (sid, merged)
                continue
        out.append((sid, dict(d)))
    return out


class TokenWriter:
    """The queue and writer thread of one handle; ``apply_one(session_id, delta)`` writes one
    (merged) delta synchronously."""

    def __init__(self, apply_one: Callable[[str, Mapping[str, Any]], None], label: str) -> None:
        self._apply_one = apply_one
        self._label = label
        self._reset()
        self._atexit: Callable[[], None] | None = None
        self._closed = False
        _WRITERS.add(self)  # one process-wide at-fork hook resets every live writer

    def _reset(self) -> None:
        # Also the after-fork hook: a fresh condition (the parent's may be held), nothing queued.
        self._cond = threading.Condition()
        self._queue: deque[Item] = deque()
        self._thread: threading.Thread | None = None
        self._stop = False
        self._busy = False

    @property
    def pending(self) -> int:
        """Deltas queued and not yet taken by a writer."""
        return len(self._queue)

    def _alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def enqueue(self, session_id: str, delta: Delta) -> None:
        """Queue one validated delta (see :func:`~hermes_data.sessions.agent.accounting.queue_token_counts`)."""
        if self._closed:
            raise ConfigurationError(f"{self._label}: the session store is closed")
        with self._cond:
            if self._stop and not self._alive():
                sync = True
            else:
                sync = False
                self._queue.append((session_id, delta))
                if not self._alive():
                    self._thread = threading.Thread(
                        target=self._run, name=f"hermes-token-writer:{self._label}", daemon=True)
                    self._thread.start()
                if self._atexit is None:
                    ref = weakref.ref(self)

                    def hook() -> None:
                        w = ref()
                        if w is not None:
                            try:
                                w.close()
                            except BaseException:  # noqa: BLE001 — exit must not fail here
                                pass

                    self._atexit = hook
                    atexit.register(hook)
                self._cond.notify_all()
        if sync:  # stopped for good: a closed handle raises ConfigurationError here
            self._apply_one(session_id, delta)

    def _run(self) -> None:
        me = threading.current_thread()
        while True:
            with self._cond:
                if not self._queue and not self._stop:
                    self._cond.wait_for(lambda: bool(self._queue) or self._stop, IDLE_RETIRE_S)
                if not self._queue:  # idle past the retirement delay, or stopped and empty
                    if self._thread is me:
                        self._thread = None
                    self._cond.notify_all()
                    return
                self._busy = True  # before taking: flush reads queue, then busy, lock-free
                batch = list(self._queue)
                self._queue.clear()
            self._apply_claimed(batch)

    def _apply_claimed(self, batch: list[Item]) -> None:
        """Apply a batch this thread claimed (``_busy`` set), then release the claim."""
        try:
            self._apply(batch)
        finally:
            with self._cond:
                self._busy = False
                self._cond.notify_all()

    def _apply(self, batch: list[Item]) -> None:
        try:
            items = coalesce(batch)
        except Exception as exc:  # noqa: BLE001 — fall back to the raw batch
            log.warning("token delta coalescing failed (%s); applying %d raw deltas", exc,
                        len(batch))
            items = batch
        for sid, delta in items:
            try:
                self._apply_one(sid, delta)
            except Exception as exc:  # noqa: BLE001 — the next delta proceeds
                log.warning("token delta for session %s not written: %s", sid, exc)

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until the queue is empty and nothing is being applied; with no live writer the
        caller applies the batch itself. False on timeout; never raises."""
        if threading.current_thread() is self._thread:
            return True
        if not self._queue and not self._busy:
            return True
        deadline = _monotonic() + max(0.0, float(timeout))
        while True:
            with self._cond:
                while True:
                    if not self._queue and not self._busy:
                        return True
                    if not self._alive() and not self._busy:
                        self._busy = True
                        batch = list(self._queue)
                        self._queue.clear()
                        break
                    remaining = deadline - _monotonic()
                    if remaining <= 0:
                        return False
                    self._cond.wait(remaining)
            self._apply_claimed(batch)

    def close(self) -> None:
        """Stop the writer, drain what is left synchronously, unregister the atexit hook. A
        writer still alive after the join leaves its deltas (WARNING with their count)."""
        with self._cond:
            self._stop = True
            if self._thread is None and not self._queue and not self._busy \
                    and self._atexit is None:  # never used (a settled open + close): done
                self._closed = True
                # Nothing can apply a delta any more (no thread, nothing queued, enqueue
                # refuses): drop the handle's bound method, the reference cycle that left
                # every closed store to the garbage collector.
                self._apply_one = _refuse_closed(self._label)
                return
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(CLOSE_JOIN_S)
            if thread.is_alive():
                log.warning("%s: token writer still busy after %.0f s; %d queued delta(s) "
                            "not persisted", self._label, CLOSE_JOIN_S, len(self._queue))
                return
        deadline = _monotonic() + CLOSE_JOIN_S
        with self._cond:
            while self._busy and _monotonic() < deadline:
                self._cond.wait(max(0.0, deadline - _monotonic()))
            if self._busy:
                log.warning("%s: a draining caller is still busy; %d delta(s) left queued",
                            self._label, len(self._queue))
                return
            self._busy = True
            batch = list(self._queue)
            self._queue.clear()
        try:
            if batch:
                self._apply(batch)
        finally:
            with self._cond:
                self._busy = False
                self._cond.notify_all()
            if self._atexit is not None:
                atexit.unregister(self._atexit)
                self._atexit = None
            self._closed = True


def _refuse_closed(label: str) -> Callable[[str, Mapping[str, Any]], None]:
    def refuse(session_id: str, delta: Mapping[str, Any]) -> None:
        raise ConfigurationError(f"{label}: the session store is closed")
    return refuse


#: Every live writer of this process (weakly): the one at-fork hook below resets them all,
#: instead of one hook per handle that outlives it.
_WRITERS: "weakref.WeakSet[TokenWriter]" = weakref.WeakSet()


def _reset_writers_after_fork() -> None:
    for writer in list(_WRITERS):
        writer._reset()


os.register_at_fork(after_in_child=_reset_writers_after_fork)


def _monotonic() -> float:
    import time

    return time.monotonic()
