"""Performance at ten times the data (issue 34 item 1): the session store at two sizes.

    python benchmarks/scale.py [--sizes 200000,2000000] [--dir DIR] [--url postgresql+psycopg://…/DB]
                               [--build-only] [--max-seconds S] [--reuse-results] [--drop-pg]
                               [--only OP,…]

Builds, per size N, a session store of N messages with the public batch API
(``SessionStore.append_messages_batch``): N/100 sessions (20,000 at 2,000,000), a realistic mix
(user chat, short replies, assistant prose and code blocks, assistant rows with ``tool_calls``
JSON and their tool rows carrying JSON — 0.2 % of them hundreds of KB —, ~4 % of rows with
Chinese / Japanese / Korean text, emoji and accented words), compression chains of 2–5
segments (parent ended ``compression``, child's ``parent_session_id`` the parent), one session
in ten a ``cron`` run, 2 % of sessions left open, and one long ``telegram`` session holding
N/20 messages (100,000 at 2,000,000) written in chunks of 1,000 interleaved with the other
sessions (so its rows are spread over the file as a real long-lived chat's are). The text
sources and the tool rows are :mod:`search_corpus`'s ``Corpus``.

**Resumable**: every row is a deterministic function of ``--seed``, N and its step number;
a step is one ``append_messages_batch`` call (one transaction). A rerun with the same
``--dir`` counts the messages present, finds that step boundary and continues from it;
``--max-seconds`` stops the build at a step boundary (exit status 3: "rerun to continue"), so
a 2,000,000 build can run in pieces on a 2-core machine. Each piece is logged to
``DIR/build-log.txt``. Stores: ``DIR/scale-N.db``; on PostgreSQL the databases ``DB_N`` next
to the scratch database ``DB`` of ``--url`` (created there; ``--drop-pg`` drops them at the end).

**Measured** per size, on a copy of the built store (``DIR/work-N.db`` after a TRUNCATE
checkpoint; PostgreSQL: ``CREATE DATABASE DB_N_work TEMPLATE DB_N``), so the built store stays
untouched and resumable; every operation runs in a **fresh child process** that opens the copy,
resets the kernel's peak-RSS mark (``/proc/self/clear_refs`` ← 5: VmHWM := VmRSS), runs the
operation and reports its time, the process's peak RSS during it (VmHWM) and the growth
(VmHWM − VmRSS before):

  open         settled open: ``SessionStore(target)`` + ``close()``, 1 warm-up + 15, median
  get_session  500 random sessions, median / p95
  search       ``search_messages`` p50 / p95 per query class: words, phrases, punctuation
               literals, emoji, short CJK (1–2 characters), accents (after a warm-up pass)
  paging       ``get_messages(limit=100, after_id=…)`` through the long session (N/20 rows)
  export       ``hermes-data export``'s writer (``cli.maintenance.write_jsonl``) of it, and
  export_api   ``export_session(max_messages=0)`` (the whole session in memory)
  append       ``append_message`` of 300 realistic rows into a new session, msg/s
  batch        ``append_messages_batch``, 20 × 500 realistic rows into new sessions, msg/s
  prune        ``prune_sessions(older_than_days=None, source="cron")``: the cron 10 %
  optimize_fts ``optimize_fts()``
  vacuum       ``vacuum()`` (SQLite: optimize, checkpoint, VACUUM; PostgreSQL: VACUUM ANALYZE)
  file size    SQLite: the file (+ WAL) and ``logical_size_bytes``; PostgreSQL: the latter

During prune / optimize_fts / vacuum a **probe** process appends to its own session of the
same store every 10 ms with ``append_message``; its slowest append is the longest time a
writer was held off (the write lock's longest hold, as a writer sees it; on a busy machine
it includes scheduling delay). ``prune_sessions`` and ``optimize_fts`` run in paced steps
(docs/sessions.md §7.5, docs/sessions-storage.md §3.7); SQLite's ``VACUUM`` is one statement,
one hold.

Printed: each figure at both sizes and the growth ratio (large / small), then the issue's
item-2 targets as lines of target and result. Results are kept in
``DIR/results-<backend>-N.json`` (``--reuse-results`` prints from them without measuring).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from search_corpus import (ACCENTS, JA, KO, LITERAL_SHAPES, ZH, Corpus,  # noqa: E402
                           rand_path)

from hermes_data.sessions.search.messages import has_cjk  # noqa: E402
from hermes_data.sessions.store import SessionStore  # noqa: E402

SOURCES = ["cli"] * 6 + ["telegram"] * 3 + ["discord"] * 2 + ["subagent"]
EMOJI = ["🚀", "🎉", "✅", "🔥", "👍", "🐛", "💡", "⚠️"]
SHORT = ["ok", "thanks!", "yes, do it", "go on", "why?", "stop", "looks good", "no", "retry",
         "continue please"]
BIG = "big"
CHUNK = 1000
CLASSES = ("words", "phrases", "literals", "emoji", "short_cjk", "accents")
OPS = ("open", "get_session", "search", "paging", "export", "export_api", "append", "batch",
       "prune", "optimize_fts", "vacuum")
STALL_OPS = ("prune", "optimize_fts", "vacuum")


# -------------------------------------------------------------------------------------
# Corpus and plan (deterministic: rows of step j depend on seed, N and j only)
# -------------------------------------------------------------------------------------


class Mix(Corpus):
    """``search_corpus.Corpus`` with this benchmark's mix: ~4 % CJK rows, short replies,
    emoji, accented words, long answers."""

    def user(self) -> str:
        r = self.rng.random()
        if r < 0.06:
            return self.cjk()
        if r < 0.16:
            return self.rng.choice(SHORT)
        if r < 0.19:
            return f"{self.sentence()} {self.rng.choice(EMOJI)}"
        if r < 0.22:
            return f"{self.sentence()} the {self.rng.choice(ACCENTS)[1]} again"
        if r < 0.37:
            return f"{self.sentence()} See {rand_path(self.rng)} line {self.rng.randint(1, 900)}."
        return self.sentence(self.rng.randint(1, 2))

    def assistant(self) -> dict:
        r = self.rng.random()
        if r < 0.035:
            return {"role": "assistant", "content": self.cjk() + " " + self.sentence()}
        if r < 0.385:
            call = super().assistant()
            while not call.get("tool_calls"):  # the parent's tool-call shape, drawn again
                call = super().assistant()
            return call
        if r < 0.585:
            body = "\n".join(self.rng.choice(self.code) for _ in range(self.rng.randint(3, 12)))
            return {"role": "assistant", "content": f"{self.sentence()}\n```python\n{body}\n```"}
        if r < 0.595:
            return {"role": "assistant", "content": self.sentence(self.rng.randint(20, 40))}
        return {"role": "assistant", "content": self.sentence(self.rng.randint(2, 5))}

    def rows(self, key: str, n: int, t0: float) -> list[dict]:
        """``n`` rows of one conversation, drawn from the generator seeded with ``key``."""
        self.rng = random.Random(key)
        out: list[dict] = []
        while len(out) < n:
            out.append({"role": "user", "content": self.user()})
            a = self.assistant()
            out.append(a)
            if a.get("tool_calls"):
                out.append(self.tool())
        out = out[:n]
        for i, m in enumerate(out):
            m["timestamp"] = t0 + i * 0.5
        return out


def plan(size: int, seed: int) -> dict:
    """Sessions (length, source, parent, end reason) and the step order for ``size``."""
    rng = random.Random(f"plan:{seed}:{size}")
    n_sessions = max(4, size // 100)
    big_rows = size // 20
    rest = size - big_rows
    n_normal = n_sessions - 1
    raw = []
    for _ in range(n_normal):
        u = rng.random()
        raw.append(rng.randint(2, 20) if u < 0.4 else rng.randint(20, 150) if u < 0.85
                   else rng.randint(150, 600))
    k = rest / sum(raw)
    lens = [max(2, round(x * k)) for x in raw]
    i = 0
    while sum(lens) != rest:  # exact total: adjust the longest sessions one row at a time
        order = sorted(range(n_normal), key=lambda j: -lens[j])
        d = 1 if sum(lens) < rest else -1
        lens[order[i % 50]] += d
        i += 1
    sessions = []
    chain_left, parent = 0, None
    for idx in range(n_normal):
        if idx % 10 == 5:
            sessions.append({"id": f"s{idx:06d}", "n": lens[idx], "source": "cron",
                             "parent": None, "end": "cron_complete"})
            continue
        if chain_left == 0 and rng.random() < 0.08:
            chain_left, parent = rng.randint(2, 5), None
        if chain_left:
            chain_left -= 1
            end = "compression" if chain_left else "user_exit"
            sessions.append({"id": f"s{idx:06d}", "n": lens[idx], "source": "cli",
                             "parent": parent, "end": end})
            parent = f"s{idx:06d}" if chain_left else None
            continue
        sessions.append({"id": f"s{idx:06d}", "n": lens[idx], "source": rng.choice(SOURCES),
                         "parent": None, "end": None if rng.random() < 0.03 else "user_exit"})
    n_chunks = max(1, math.ceil(big_rows / CHUNK))
    chunks = [min(CHUNK, big_rows - c * CHUNK) for c in range(n_chunks)]
    after = {(c + 1) * n_normal // (n_chunks + 1): c for c in range(n_chunks)}
    steps: list[tuple[str, int]] = []
    for idx in range(n_normal):
        steps.append(("s", idx))
        if idx in after:
            steps.append(("b", after[idx]))
    return {"sessions": sessions, "chunks": chunks, "steps": steps, "big_rows": big_rows}


def step_rows(p: dict, step: tuple[str, int]) -> int:
    kind, i = step
    return p["sessions"][i]["n"] if kind == "s" else p["chunks"][i]


# -------------------------------------------------------------------------------------
# Build (resumable)
# -------------------------------------------------------------------------------------


def open_target(target: str, **kw) -> SessionStore:
    return SessionStore(target, **kw)


def build(target: str, size: int, seed: int, mix: Mix, max_seconds: float | None,
          log_path: Path, label: str) -> bool:
    """Bring ``target`` to ``size`` messages; True when complete."""
    p = plan(size, seed)
    steps = p["steps"]
    cum = [0]
    for st in steps:
        cum.append(cum[-1] + step_rows(p, st))
    assert cum[-1] == size, (cum[-1], size)
    t_start = time.perf_counter()
    with open_target(target) as store:
        present = store.message_count(include_inactive=True)
        if present == size:
            print(f"  {label}: complete ({size:,} messages)")
            return True
        try:
            j = cum.index(present)
        except ValueError:
            raise SystemExit(f"{label}: {present:,} messages is no step boundary of this plan "
                             "(another writer, or another --seed?): rebuild in a new --dir")
        if j:
            print(f"  {label}: resuming at step {j:,} of {len(steps):,} ({present:,} messages)")
            post(store, p, steps[j - 1])  # its idempotent end/lineage calls, in case they were cut
        last_print = time.perf_counter()
        pg = store.engine.dialect.name == "postgresql"
        analyzed = present
        for k in range(j, len(steps)):
            if pg and cum[k] >= max(1000, analyzed * 1.1):
                analyze(store)  # as autovacuum would (its default analyze_scale_factor 0.1)
                analyzed = cum[k]
            kind, i = steps[k]
            t0 = 1_700_000_000.0 + k * 900.0
            if kind == "s":
                s = p["sessions"][i]
                store.create_session(s["id"], s["source"], model="model-x",
                                     parent_session_id=s["parent"],
                                     cwd=f"/home/user/project{i % 7}")
                store.append_messages_batch(s["id"], mix.rows(f"{seed}:{size}:s:{i}", s["n"], t0))
            else:
                store.create_session(BIG, "telegram", model="model-x", chat_id="chat-big")
                store.append_messages_batch(BIG, mix.rows(f"{seed}:{size}:b:{i}", p["chunks"][i], t0))
            post(store, p, steps[k])
            now = time.perf_counter()
            if now - last_print > 30:
                rate = (cum[k + 1] - present) / (now - t_start)
                print(f"  {label}: {cum[k + 1]:,} / {size:,} messages ({rate:,.0f} msg/s)",
                      flush=True)
                last_print = now
            if max_seconds is not None and now - t_start > max_seconds and k + 1 < len(steps):
                done = cum[k + 1]
                break
        else:
            done = size
        while store.cjk_index_status().available and store.cjk_index_step(5000):
            pass  # settle the CJK-bigram queue (normally drained by the batch itself)
    took = time.perf_counter() - t_start
    line = (f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC {label}: {present:,} -> "
            f"{done:,} messages in {took:,.0f} s ({(done - present) / max(took, 1e-9):,.0f} msg/s); "
            f"load {os.getloadavg()[0]:.1f}")
    print("  " + line)
    with open(log_path, "a", encoding="utf-8") as fh:
        fh.write(line + "\n")
    return done == size


def analyze(store: SessionStore) -> None:
    """PostgreSQL: refresh the planner's statistics of the store's tables. Without any (a
    server with autovacuum off, or before its first pass) the display-order trigger's
    per-row lookup is planned on the wrong index and scans the whole session per row."""
    with store.engine.connect() as conn:
        conn = conn.execution_options(isolation_level="AUTOCOMMIT")
        conn.exec_driver_sql("ANALYZE messages")
        conn.exec_driver_sql("ANALYZE sessions")


def post(store: SessionStore, p: dict, step: tuple[str, int]) -> None:
    kind, i = step
    if kind == "s" and p["sessions"][i]["end"]:
        store.end_session(p["sessions"][i]["id"], p["sessions"][i]["end"])


# -------------------------------------------------------------------------------------
# Queries per class
# -------------------------------------------------------------------------------------


def class_queries(mix: Mix, per_class: int, seed: int) -> dict[str, list[str]]:
    rng = random.Random(f"queries:{seed}")
    counts: dict[str, int] = {}
    for w in re.findall(r"[a-z]{4,}", " ".join(mix.prose[:20000]).lower()):
        counts[w] = counts.get(w, 0) + 1
    common = [w for w, _n in sorted(counts.items(), key=lambda kv: -kv[1])[:300]]
    out: dict[str, list[str]] = {c: [] for c in CLASSES}
    for i in range(per_class):
        out["words"].append(rng.choice(common) if i % 2 else
                            f"{rng.choice(common)} {rng.choice(common)}")
        words = rng.choice(mix.prose).split()
        k = rng.randint(0, max(0, len(words) - 3))
        out["phrases"].append('"' + " ".join(words[k:k + rng.randint(2, 4)]) + '"')
        a, b = rng.sample(common[:60], 2)
        out["literals"].append(LITERAL_SHAPES[i % len(LITERAL_SHAPES)].format(a=a, b=b)
                               if i % 3 else rng.choice(["C++", "50%", "e=mc2", "~/.bashrc",
                                                         "x->y", "[1,2,3]", "what's wrong?",
                                                         rand_path(rng)]))
        e = EMOJI[i % len(EMOJI)]
        out["emoji"].append(e if i % 2 else f"{e} {rng.choice(common)}")
        s = rng.choice(ZH + JA + KO)
        k = rng.randint(0, len(s) - 2)
        out["short_cjk"].append(s[k:k + 1 + i % 2])
        bare, acc = ACCENTS[i % len(ACCENTS)]
        out["accents"].append(bare if i % 2 else acc)
    return out


# -------------------------------------------------------------------------------------
# Child processes: one operation each
# -------------------------------------------------------------------------------------


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(field)


def _pct(xs: list[float], q: int) -> float:
    if len(xs) < 2:
        return xs[0] if xs else float("nan")
    return statistics.quantiles(xs, n=100, method="inclusive")[q - 1]


def child(op: str, target: str, size: int, seed: int, per_class: int, scratch: Path) -> dict:
    """Run one operation on ``target``; its figures plus the RSS high-water mark."""
    p = plan(size, seed)
    mix = Mix(seed) if op in ("search", "append", "batch") else None
    queries = class_queries(mix, per_class, seed) if op == "search" else None
    cfg = {"sessions": {"max_export_messages": 0, "max_resume_messages": 0}}
    store = None if op == "open" else open_target(target, config=cfg)
    probe = start_probe(target, scratch) if op in STALL_OPS else None
    try:
        out = run_op(op, store, target, p, seed, mix, queries, scratch)
        if probe is not None:
            out["stall_ms"] = stop_probe(*probe)
            probe = None
    finally:
        if probe is not None:  # the operation failed: end the probe too
            probe[2].touch()
            probe[0].wait(timeout=60)
        if store is not None:
            store.close()
    return out


def run_op(op: str, store, target: str, p: dict, seed: int, mix, queries, scratch: Path) -> dict:
    """The measured part of :func:`child` (time and RSS high-water mark)."""
    if op in ("paging", "export", "export_api"):
        store.get_messages(BIG, limit=100)  # warm-up: the first statement of the process
    before = _status_kb("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS (Linux >= 4.0)
    out: dict = {}
    t0 = time.perf_counter()
    if op == "open":
        open_target(target).close()  # warm-up (first open in the process)
        lat = []
        for _ in range(15):
            t = time.perf_counter()
            open_target(target).close()
            lat.append((time.perf_counter() - t) * 1000)
        out.update(ms_p50=statistics.median(lat), ms_p95=_pct(lat, 95))
    elif op == "get_session":
        rng = random.Random(f"get:{seed}")
        ids = [rng.choice(p["sessions"])["id"] for _ in range(500)]
        for sid in ids[:20]:
            store.get_session(sid)
        lat = []
        for sid in ids:
            t = time.perf_counter()
            assert store.get_session(sid) is not None
            lat.append((time.perf_counter() - t) * 1e6)
        out.update(us_p50=statistics.median(lat), us_p95=_pct(lat, 95))
    elif op == "search":
        for qs in queries.values():
            for q in qs[:5]:
                store.search_messages(q)
        classes = {}
        for cls, qs in queries.items():
            lat, raised, hits = [], 0, 0
            for q in qs:
                t = time.perf_counter()
                try:
                    hits += bool(store.search_messages(q))
                except Exception:  # counted, never stops the run
                    raised += 1
                    continue
                lat.append((time.perf_counter() - t) * 1000)
            classes[cls] = {"n": len(qs), "p50": _pct(lat, 50), "p95": _pct(lat, 95),
                            "max": max(lat) if lat else float("nan"), "raised": raised,
                            "with_hits": hits}
        out["classes"] = classes
    elif op == "paging":
        after, rows = 0, 0
        while True:
            page = store.get_messages(BIG, limit=100, after_id=after)
            if not page:
                break
            rows += len(page)
            after = page[-1].id
        out.update(rows=rows)
    elif op == "export":
        from hermes_data.cli.maintenance import write_jsonl

        dest = scratch / f"export-{os.getpid()}.jsonl"
        with open(dest, "w", encoding="utf-8") as fh:
            out["rows"] = write_jsonl(store, BIG, fh)
        out["bytes"] = dest.stat().st_size
        dest.unlink()
    elif op == "export_api":
        exp = store.export_session(BIG, max_messages=0)
        out["rows"] = len(exp.messages)
    elif op == "append":
        rows = mix.rows(f"{seed}:append", 300, time.time())
        store.create_session("bench-append", "cli")
        t0 = time.perf_counter()
        for r in rows:
            store.append_message("bench-append", r["role"], r.get("content"),
                                 **{k: v for k, v in r.items() if k not in ("role", "content", "timestamp")})
        out["msg_s"] = len(rows) / (time.perf_counter() - t0)
    elif op == "batch":
        batches = [mix.rows(f"{seed}:batch:{b}", 500, time.time()) for b in range(20)]
        for b in range(20):
            store.create_session(f"bench-batch-{b}", "cli")
        t0 = time.perf_counter()
        for b, rows in enumerate(batches):
            store.append_messages_batch(f"bench-batch-{b}", rows)
        out["msg_s"] = 10_000 / (time.perf_counter() - t0)
    elif op == "prune":
        out["deleted"] = store.prune_sessions(older_than_days=None, source="cron")
    elif op == "optimize_fts":
        out["optimized"] = store.optimize_fts()
    elif op == "vacuum":
        res = store.vacuum()
        out.update(before_bytes=res["before_bytes"], after_bytes=res["after_bytes"])
    out["s"] = time.perf_counter() - t0
    out["rss_peak_mb"] = _status_kb("VmHWM") / 1024
    out["rss_growth_mb"] = (_status_kb("VmHWM") - before) / 1024
    return out


def start_probe(target: str, scratch: Path) -> tuple:
    ready = scratch / f"probe-{os.getpid()}.ready"
    stop = scratch / f"probe-{os.getpid()}.stop"
    for f in (ready, stop):
        f.unlink(missing_ok=True)
    with open(scratch / "probe-stderr.log", "a", encoding="utf-8") as err:
        proc = subprocess.Popen([sys.executable, __file__, "--probe", target, str(ready), str(stop)],
                                stdout=subprocess.PIPE, stderr=err, text=True)
    deadline = time.time() + 120
    while not ready.exists():
        if proc.poll() is not None or time.time() > deadline:
            raise RuntimeError("the write probe did not start")
        time.sleep(0.05)
    return proc, ready, stop


def stop_probe(proc: subprocess.Popen, ready: Path, stop: Path) -> dict:
    stop.touch()
    outp, _ = proc.communicate(timeout=600)
    for f in (ready, stop):
        f.unlink(missing_ok=True)
    return json.loads(outp.strip().splitlines()[-1])


def probe(target: str, ready: Path, stop: Path) -> None:
    """Until ``stop`` exists: ``append_message`` every 10 ms (the slowest is the longest a
    writer was held off) and, on SQLite, a raw ``BEGIN IMMEDIATE`` with no patience every
    2 ms on its own connection (the longest run of refusals is the write lock's longest
    hold, to ~2 ms plus scheduling). Prints both (ms) as JSON."""
    import threading

    lat: list[float] = []
    holds: list[float] = []
    errors = 0
    done = threading.Event()

    def poll(path: str) -> None:
        con = sqlite3.connect(path, timeout=0, isolation_level=None)
        busy_since = None
        while not done.is_set():
            try:
                con.execute("BEGIN IMMEDIATE")  # the write lock, taken and given back at once
                if busy_since is not None:
                    holds.append((time.perf_counter() - busy_since) * 1000)
                    busy_since = None
            except sqlite3.OperationalError:
                if busy_since is None:
                    busy_since = time.perf_counter()
            finally:
                if con.in_transaction:
                    con.execute("ROLLBACK")  # nothing written: never busy
            time.sleep(0.002)
        if busy_since is not None:
            holds.append((time.perf_counter() - busy_since) * 1000)
        con.close()

    with open_target(target) as store:
        store.create_session("probe", "cli")
        store.append_message("probe", "user", "probe warm-up")
        poller = None
        if store.engine.dialect.name == "sqlite":
            poller = threading.Thread(target=poll, args=(str(store.path),), daemon=True)
            poller.start()
        ready.touch()
        parent = os.getppid()
        while not stop.exists() and os.getppid() == parent:  # never outlive the operation
            t = time.perf_counter()
            try:
                store.append_message("probe", "user", "probe")
            except Exception:  # a refusal after the store's patience: counted
                errors += 1
            lat.append((time.perf_counter() - t) * 1000)
            time.sleep(0.01)
        done.set()
        if poller is not None:
            poller.join()
    print(json.dumps({"max": max(lat) if lat else 0.0, "p50": _pct(lat, 50) if lat else 0.0,
                      "n": len(lat), "errors": errors,
                      "hold_max": max(holds) if holds else (0.0 if poller else None),
                      "holds": len(holds)}))


def run_child(op: str, target: str, size: int, args: argparse.Namespace, scratch: Path) -> dict:
    cmd = [sys.executable, __file__, "--child", op, target, "--seed", str(args.seed),
           "--per-class", str(args.per_class), "--sizes", str(size), "--dir", str(scratch)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        print(f"    {op}: FAILED\n{res.stderr[-3000:]}")
        return {"failed": res.stderr.strip().splitlines()[-1] if res.stderr.strip() else "?"}
    return json.loads(res.stdout.strip().splitlines()[-1])


# -------------------------------------------------------------------------------------
# Per backend: targets, working copies, sizes
# -------------------------------------------------------------------------------------


class Sqlite:
    name = "sqlite"

    def __init__(self, d: Path) -> None:
        self.d = d

    def target(self, size: int) -> str:
        return str(self.d / f"scale-{size}.db")

    def work(self, size: int) -> str:
        src, dst = Path(self.target(size)), self.d / f"work-{size}.db"
        con = sqlite3.connect(src)
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        con.close()
        self.drop_work(size)
        shutil.copyfile(src, dst)
        # On disk before anything is timed: else the first fsync of an operation (a WAL
        # checkpoint during the appends) writes back the whole copy — 0.8 s at 2 GB.
        fd = os.open(dst, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        return str(dst)

    def drop_work(self, size: int) -> None:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{self.d / f'work-{size}.db'}{suffix}").unlink(missing_ok=True)

    def sizes(self, work: str) -> dict:
        files = sum(os.path.getsize(work + s) for s in ("", "-wal") if os.path.exists(work + s))
        with open_target(work) as store:
            logical = store.logical_size_bytes()
            jm = store.journal_mode
            with store.engine.connect() as conn:
                sync = conn.exec_driver_sql("PRAGMA synchronous").scalar()
        return {"file_bytes": files, "logical_bytes": logical,
                "settings": f"SQLite {sqlite3.sqlite_version}, journal_mode={jm}, synchronous={sync}"}


class Postgres:
    name = "postgresql"

    def __init__(self, url: str) -> None:
        from sqlalchemy.engine import make_url

        self.url = make_url(url)
        self.base = self.url.database

    def _admin(self):
        import sqlalchemy as sa

        return sa.create_engine(self.url, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)

    def _db(self, name: str) -> str:
        return self.url.set(database=name).render_as_string(hide_password=False)

    def target(self, size: int) -> str:
        name = f"{self.base}_{size}"
        eng = self._admin()
        with eng.connect() as c:
            if not c.exec_driver_sql("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).scalar():
                c.exec_driver_sql(f'CREATE DATABASE "{name}"')
        eng.dispose()
        return self._db(name)

    def work(self, size: int) -> str:
        self.drop_work(size)
        eng = self._admin()
        with eng.connect() as c:
            for attempt in range(20):  # the template must have no other connection
                try:
                    c.exec_driver_sql(f'CREATE DATABASE "{self.base}_{size}_work" '
                                      f'TEMPLATE "{self.base}_{size}"')
                    break
                except Exception:
                    if attempt == 19:
                        raise
                    time.sleep(0.5)
        eng.dispose()
        work = self._db(f"{self.base}_{size}_work")
        with open_target(work) as store:
            analyze(store)
        return work

    def drop_work(self, size: int) -> None:
        self.drop(f"{self.base}_{size}_work")

    def drop(self, name: str) -> None:
        eng = self._admin()
        with eng.connect() as c:
            c.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        eng.dispose()

    def sizes(self, work: str) -> dict:
        with open_target(work) as store:
            logical = store.logical_size_bytes()
            with store.engine.connect() as conn:
                version = conn.exec_driver_sql("SHOW server_version").scalar()
                commit = conn.exec_driver_sql("SHOW synchronous_commit").scalar()
                autovacuum = conn.exec_driver_sql("SHOW autovacuum").scalar()
                dbsize = conn.exec_driver_sql("SELECT pg_database_size(current_database())").scalar()
        return {"file_bytes": dbsize, "logical_bytes": logical,
                "settings": f"PostgreSQL {version}, synchronous_commit={commit}, autovacuum={autovacuum}"}


def measure(backend, size: int, args: argparse.Namespace, scratch: Path,
            kept: dict | None = None) -> dict:
    """Measure every operation (``args.only``: those, merged into ``kept``, the size's
    earlier results) on a fresh copy of the built store."""
    print(f"  {backend.name} {size:,}: copying the store for the measurements", flush=True)
    work = backend.work(size)
    res: dict = {"size": size, "backend": backend.name, **backend.sizes(work),
                 "load": os.getloadavg()[0], "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    ops = OPS
    if args.only:
        ops = tuple(op for op in OPS if op in args.only)
        res = {**(kept or {}), **{k: res[k] for k in ("load", "when")},
               "remeasured": {**(kept or {}).get("remeasured", {}),
                              **{op: res["when"] for op in ops}}}
    print(f"    {res.get('settings', '')}; file {res.get('file_bytes', 0) / 1e6:,.0f} MB", flush=True)
    for op in ops:
        t = time.perf_counter()
        res[op] = run_child(op, work, size, args, scratch)
        print(f"    {op:<12} done in {time.perf_counter() - t:6.1f} s: "
              f"{json.dumps(res[op], ensure_ascii=False)[:160]}", flush=True)
    res["load_after"] = os.getloadavg()[0]
    backend.drop_work(size)
    return res


# -------------------------------------------------------------------------------------
# Report
# -------------------------------------------------------------------------------------


def figures(r: dict) -> dict[str, tuple[float, str]]:
    """name -> (value, unit) of one result; times per row for paging and export."""
    f: dict[str, tuple[float, str]] = {}
    g = lambda op, k: r.get(op, {}).get(k, float("nan"))  # noqa: E731
    f["append_message"] = (g("append", "msg_s"), "msg/s")
    f["append_messages_batch"] = (g("batch", "msg_s"), "msg/s")
    f["settled open p50"] = (g("open", "ms_p50"), "ms")
    f["get_session p50"] = (g("get_session", "us_p50"), "µs")
    f["get_session p95"] = (g("get_session", "us_p95"), "µs")
    for cls in CLASSES:
        c = r.get("search", {}).get("classes", {}).get(cls, {})
        f[f"search {cls} p50"] = (c.get("p50", float("nan")), "ms")
        f[f"search {cls} p95"] = (c.get("p95", float("nan")), "ms")
    for op in ("paging", "export", "export_api"):
        rows = g(op, "rows")
        f[f"{op} rows"] = (rows, "rows")
        f[op] = (g(op, "s"), "s")
        f[f"{op} per row"] = (g(op, "s") / rows * 1e6 if rows else float("nan"), "µs")
    for op in STALL_OPS:
        f[f"{op}"] = (g(op, "s"), "s")
        st = r.get(op, {}).get("stall_ms", {})
        f[f"{op} longest append stall"] = (st.get("max", float("nan")), "ms")
        hold = st.get("hold_max")
        f[f"{op} longest write-lock hold"] = (float("nan") if hold is None else hold, "ms")
    f["prune deleted sessions"] = (g("prune", "deleted"), "")
    f["file size"] = (r.get("file_bytes", float("nan")) / 1e6, "MB")
    f["logical size"] = (r.get("logical_bytes", float("nan")) / 1e6, "MB")
    for op in OPS:
        f[f"peak RSS {op}"] = (g(op, "rss_peak_mb"), "MB")
    return f


def report(results: dict[str, dict[int, dict]], sizes: list[int]) -> None:
    small, large = sizes[0], sizes[-1]
    for name, per in results.items():
        if small not in per or large not in per:
            continue
        a, b = per[small], per[large]
        print(f"\n== {name}: {a['settings']}")
        print(f"   {small:,} messages: measured {a['when']}, load {a['load']:.1f} -> {a['load_after']:.1f}; "
              f"{large:,}: {b['when']}, load {b['load']:.1f} -> {b['load_after']:.1f}")
        fa, fb = figures(a), figures(b)
        print(f"   {'figure':<34} {small:>12,} {large:>12,}  growth (large/small)")
        for k, (va, unit) in fa.items():
            vb = fb[k][0]
            ratio = vb / va if va else float("nan")
            print(f"   {k:<34} {va:>12,.2f} {vb:>12,.2f}  {ratio:6.2f}  {unit}")
    print("\n== Issue 34 item-2 targets (large size against the small one, same run / same --dir)")
    for name, per in results.items():
        if small not in per or large not in per:
            continue
        a, b = figures(per[small]), figures(per[large])

        def line(what: str, target: str, result: str, ok: bool) -> None:
            print(f"   [{name}] {what:<44} target {target:<22} result {result:<28} {'met' if ok else 'NOT MET'}")

        for cls in CLASSES:
            v = b[f"search {cls} p95"][0]
            if name == "sqlite":
                line(f"search {cls} p95 at {large:,}", "<= 50 ms", f"{v:.1f} ms", v <= 50)
            else:
                sq = results.get("sqlite", {}).get(large)
                ref = figures(sq)[f"search {cls} p95"][0] if sq else float("nan")
                line(f"search {cls} p95 at {large:,}", "<= 1.5x SQLite", f"{v:.1f} ms = {v / ref:.2f}x", v <= 1.5 * ref)
        for k, inverse in (("append_message", True), ("append_messages_batch", True),
                           ("settled open p50", False), ("get_session p50", False)):
            r = a[k][0] / b[k][0] if inverse else b[k][0] / a[k][0]
            per = "per message" if inverse else "per call"
            line(f"{k}: time {per}, large/small", "<= 1.2x", f"{r:.2f}x", r <= 1.2)
        for op in ("paging", "export", "export_api"):
            r = b[f"{op} per row"][0] / a[f"{op} per row"][0]
            line(f"{op}: time per row returned, large/small", "<= 1.2x (linear)", f"{r:.2f}x", r <= 1.2)
        for op in OPS:
            r = b[f"peak RSS {op}"][0] / a[f"peak RSS {op}"][0]
            line(f"peak RSS {op}, large/small", "<= 1.2x", f"{b[f'peak RSS {op}'][0]:.0f} MB = {r:.2f}x", r <= 1.2)
        for op in STALL_OPS:
            t = b[op][0]
            st = b[f"{op} longest append stall"][0]
            hold = b[f"{op} longest write-lock hold"][0]
            if hold != hold:  # PostgreSQL: no file lock; what a writer waited
                hold = st
            line(f"{op} at {large:,}: longest write-lock hold", "<= 250 ms",
                 f"{hold:,.0f} ms (op {t:.2f} s, append {st:,.0f} ms)", hold <= 250)


# -------------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="200000,2000000", help="message counts, small,large")
    ap.add_argument("--dir", help="keep the stores and results here (resumable); default: a temp dir")
    ap.add_argument("--url", help="also on PostgreSQL: a scratch database (DB_N databases are made beside it)")
    ap.add_argument("--skip-sqlite", action="store_true")
    ap.add_argument("--seed", type=int, default=34)
    ap.add_argument("--per-class", type=int, default=40, help="queries per search class")
    ap.add_argument("--build-only", action="store_true")
    ap.add_argument("--max-seconds", type=float, help="stop each build after this long (resume later)")
    ap.add_argument("--reuse-results", action="store_true", help="print from DIR's results, measure only what is missing")
    ap.add_argument("--drop-pg", action="store_true", help="drop the DB_N databases at the end")
    ap.add_argument("--only", type=lambda v: tuple(v.split(",")), default=(),
                    help="re-measure only these operations (comma-separated, e.g. search,vacuum) "
                         "and merge them into DIR's kept results")
    ap.add_argument("--child", nargs=2, metavar=("OP", "TARGET"), help=argparse.SUPPRESS)
    ap.add_argument("--probe", nargs=3, metavar=("TARGET", "READY", "STOP"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    if args.probe:
        probe(args.probe[0], Path(args.probe[1]), Path(args.probe[2]))
        return 0
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1], sizes[0], args.seed, args.per_class,
                               Path(args.dir))))
        return 0
    tmp = None
    if args.dir:
        d = Path(args.dir)
        d.mkdir(parents=True, exist_ok=True)
    else:
        tmp = tempfile.mkdtemp(prefix="hermes-scale-")
        d = Path(tmp)
    backends = ([] if args.skip_sqlite else [Sqlite(d)]) + ([Postgres(args.url)] if args.url else [])
    mix = Mix(args.seed)
    sample = [r for i in range(40) for r in mix.rows(f"sample:{i}", 500, 0.0)]
    cjk = sum(1 for r in sample if has_cjk(str(r.get("content") or ""))) / len(sample)
    tools = sum(1 for r in sample if r["role"] == "tool") / len(sample)
    print(f"mix (sample of {len(sample):,} generated rows): {cjk * 100:.1f} % with CJK, "
          f"{tools * 100:.1f} % tool rows; {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    complete = True
    for be in backends:
        for size in sizes:
            p = plan(size, args.seed)
            print(f"== build {be.name} {size:,}: {len(p['sessions']) + 1:,} sessions, long session "
                  f"{p['big_rows']:,} rows, {len(p['steps']):,} steps", flush=True)
            complete = build(be.target(size), size, args.seed, mix, args.max_seconds,
                             d / "build-log.txt", f"{be.name} {size:,}") and complete
    if not complete:
        print("build incomplete: rerun with the same --dir to continue")
        return 3
    if args.build_only:
        return 0
    results: dict[str, dict[int, dict]] = {}
    for be in backends:
        results[be.name] = {}
        for size in sizes:
            path = d / f"results-{be.name}-{size}.json"
            kept = json.loads(path.read_text()) if path.exists() else None
            if args.reuse_results and kept is not None and not args.only:
                results[be.name][size] = kept
                continue
            print(f"== measure {be.name} {size:,}", flush=True)
            results[be.name][size] = measure(be, size, args, d, kept)
            path.write_text(json.dumps(results[be.name][size], indent=1))
    report(results, sizes)
    if args.drop_pg and args.url:
        for size in sizes:
            backends[-1].drop(f"{backends[-1].base}_{size}")
    if tmp is not None:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
