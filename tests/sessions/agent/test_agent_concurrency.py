"""Issue 17 acceptance 3: 8 threads × 2 processes calling ``queue_token_counts`` /
``update_token_counts`` on shared sessions while another process reads ``usage_totals``:
the totals equal the sum of what was written, no error surfaced (real processes, real
threads, SQLite file and PostgreSQL)."""

from __future__ import annotations

import multiprocessing
import threading

from hermes_data.sessions.store import SessionStore

SESSIONS = ("w0", "w1", "w2", "w3")
THREADS = 8
CALLS = 40


def _writer(target, go, out):
    errors: list[str] = []
    with SessionStore(target) as s:
        go.wait(30)

        def run(t):
            for i in range(CALLS):
                sid = SESSIONS[(t + i) % len(SESSIONS)]
                try:
                    if i % 2:
                        s.queue_token_counts(sid, input_tokens=1, output_tokens=1,
                                             api_call_count=1, model="m", billing_provider="p")
                    else:
                        s.update_token_counts(sid, input_tokens=1, output_tokens=1,
                                              api_call_count=1, model="m", billing_provider="p")
                except Exception as exc:  # noqa: BLE001 - reported to the parent
                    errors.append(repr(exc))

        threads = [threading.Thread(target=run, args=(t,)) for t in range(THREADS)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        if not s.flush_token_counts(timeout=120):
            errors.append("flush timed out")
    out.put(("writer", errors))


def _reader(target, ready, stop, out):
    errors: list[str] = []
    reads = 0
    with SessionStore(target) as s:
        ready.set()  # the writers start once the reader is open (a spawned child may be slow)
        while not stop.is_set():
            try:
                s.usage_totals()
                reads += 1
            except Exception as exc:  # noqa: BLE001 - reported to the parent
                errors.append(repr(exc))
    out.put(("reader", errors, reads))


def test_parallel_accounting_loses_and_doubles_nothing(store, backend):
    target = str(store.path) if backend == "sqlite" else \
        store.url.render_as_string(hide_password=False)
    for sid in SESSIONS:
        store.create_session(sid, "cli")
        store.append_message(sid, "user", "hi")
    ctx = multiprocessing.get_context("spawn")
    go, ready, stop, out = ctx.Event(), ctx.Event(), ctx.Event(), ctx.Queue()
    writers = [ctx.Process(target=_writer, args=(target, go, out)) for _ in range(2)]
    reader = ctx.Process(target=_reader, args=(target, ready, stop, out))
    for p in (*writers, reader):
        p.start()
    assert ready.wait(120), "the reader process did not open the store"
    go.set()
    results = [out.get(timeout=300) for _ in writers]
    stop.set()
    reader_result = out.get(timeout=60)
    for p in (*writers, reader):
        p.join(60)
    assert [r[1] for r in results] == [[], []]
    assert reader_result[1] == [] and reader_result[2] > 0
    n = 2 * THREADS * CALLS
    totals = store.usage_totals()
    assert totals.tokens == 2 * n
    with store.engine.connect() as conn:
        usage = conn.exec_driver_sql("SELECT SUM(input_tokens), SUM(api_call_count) "
                                     "FROM session_model_usage").one()
        calls = conn.exec_driver_sql("SELECT SUM(api_call_count) FROM sessions").scalar()
    assert tuple(usage) == (n, n) and calls == n
