"""Chaos soak of both stores (issue 31): every operation family at once, in worker
processes, while a chaos thread SIGKILLs a random worker every 2–5 s and restarts it.

    python benchmarks/soak.py                                  # 10 min, SQLite, DELETE journal
    python benchmarks/soak.py --minutes 0.2 --backend sqlite   # smoke, the journal-mode policy
    python benchmarks/soak.py --minutes 2 --backend sqlite-wal
    python benchmarks/soak.py --backend postgresql [--url postgresql+psycopg://…/test]
    python benchmarks/soak.py --backend all --minutes 2 --json soak.json

Design
------
*Workers.* One process per family instance (``subprocess``, this script with ``--worker``).
A family is a small function looping over one kind of work until the parent's stop file
appears; every store call goes through :meth:`Ctx.call`, which times it and sorts what it
raised: a :class:`hermes_data.errors.HermesDataError` is a *typed* error (counted per type,
not a failure: a busy lock, a lost lease), anything else is a *raw* error (a failure).
A restarted worker gets a new identity (``<family>-<slot>-<incarnation>``) and new session
ids, so it never has to resume anything a killed incarnation left half done.

*Ack logs: what "acknowledged" means.* Each incarnation appends JSON lines to its own
``acks/<identity>.log``, ``fsync``-ed after every entry. A write counts only once its entry
is there, and the entry is written *after* the call returned. The checker at the end reads
only these logs, so a worker killed between the call and the entry simply did not
acknowledge that write (the write may or may not be there; both are fine).

*Deleting operations are made decidable.*

* Only the ``prune`` family's sessions (source ``soakprune``) are ever deleted; prune runs
  with ``source='soakprune'``. Every other acknowledged row must be present.
* Prune deletes only ended sessions: the family logs an *intent* before ``end_session``, so a
  prunable session acknowledged as created with no end intent must still exist.
* ``archive_and_compact``, ``publish_compression_child``, ``rewind_to_message`` and
  ``restore_rewound`` delete nothing (rows go inactive), and run only on sessions owned by one
  worker. Before each call the worker logs an ``intent`` holding the session's active
  transcript *if the call commits*; after it, a ``state`` entry with the same list. The final
  active transcript (contents in id order) must equal the last ``state`` or, when an
  ``intent`` follows it (killed mid-call), that intent: exact, two candidates at most.
* Routing entries and handoff states use the same intent/state pair.

*Checks at the end* (after every worker stopped or was killed): ``PRAGMA integrity_check``
of both SQLite files and the FTS5 ``integrity-check`` of the message indexes; every
acknowledged message, batch row, session, telemetry call present (rows lost must be 0),
batches all-or-nothing, no tagged row duplicated; owned transcripts, routing entries and
handoff states as above; ``search_messages`` equal to a LIKE scan of the rows it covers
(docs/sessions.md §7.2) for sampled words, 3-letter CJK (trigram) and 1–2-letter CJK
(bigram index) tokens; lineage (parents exist, parent chains acyclic, every session ended by
``compression`` has its child, each acknowledged publish chain ends at its last child);
counters (``message_count``/``tool_call_count`` vs active rows, telemetry ``runs`` vs
``llm_calls``/``tool_calls``); no guard left held (every compression lock and turn lease row
can be taken by a fresh holder; no handoff stays ``running`` after the stale reclaim).

*Write-lock wait.* On SQLite a prober thread in the parent times ``BEGIN IMMEDIATE`` on the
state file every 0.25 s (the longest wait a writer saw); every backend also reports the
longest write call of any worker (an upper bound that includes the work).

Exit status 1 when rows were lost, a worker met a raw error or an invariant failed.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hermes_data.errors import HermesDataError  # noqa: E402

MODES = ("sqlite-delete", "sqlite-wal", "postgresql")
DEFAULT_PG = os.environ.get("HERMES_DATA_PG_ADMIN_URL",
                            "postgresql+psycopg://postgres@127.0.0.1:5432/test")
#: family -> number of worker processes
FAMILIES = {"append": 2, "batch": 1, "search": 1, "gateway": 1, "compact": 1, "rewind": 1,
            "export": 1, "telemetry_buffered": 1, "telemetry_direct": 1, "prune": 1,
            "maintenance": 1}
SHARED_SESSIONS = [f"soak-shared-{i}" for i in range(4)]
LEASE_TTL = 20.0
FAILED = object()

# Words no stemmer or tokenizer changes and none a substring of another (all 8 letters,
# consonants only), and 3-letter CJK tokens (each a whole space-separated token).
_vocab_rng = random.Random(31)
WORDS = sorted({"kw" + "".join(_vocab_rng.choice("bcdfghjmpqvxz") for _ in range(6))
                for _ in range(200)})
CJK = sorted({"".join(chr(_vocab_rng.randrange(0x4E00, 0x9FA5)) for _ in range(3))
              for _ in range(30)})


def text(rng: random.Random, tag: str) -> str:
    """A message body: its unique tag, two vocabulary words and sometimes a CJK token."""
    parts = [tag, rng.choice(WORDS), "lorem", rng.choice(WORDS)]
    if rng.random() < 0.3:
        parts.append(rng.choice(CJK))
    return " ".join(parts)


# ----------------------------------------------------------------------------------------
# The worker side
# ----------------------------------------------------------------------------------------

class Ctx:
    """One worker incarnation: its stores, its ack log, its counters."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.ident: str = spec["ident"]
        self.family: str = spec["family"]
        self.rng = random.Random(f"{self.ident}:{spec['seed']}")
        self.stop_file = Path(spec["run_dir"]) / "stop"
        self.fd = os.open(Path(spec["run_dir"]) / "acks" / f"{self.ident}.log",
                          os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self.ops: Counter[str] = Counter()
        self.typed: Counter[str] = Counter()
        self.raw_count = 0
        self.max_write_ms = 0.0
        self.last_progress = time.monotonic()
        self.parent = os.getppid()
        self.seq = 0
        self._stores: list[Any] = []

    # -- the log
    def log(self, k: str, /, **entry: Any) -> None:
        """Append one entry and fsync it: what is in the log was acknowledged."""
        entry["k"] = k
        os.write(self.fd, (json.dumps(entry, ensure_ascii=False) + "\n").encode())
        os.fsync(self.fd)

    def progress(self, force: bool = False) -> None:
        if force or time.monotonic() - self.last_progress >= 1.0:
            self.last_progress = time.monotonic()
            self.log("progress", ops=dict(self.ops), typed=dict(self.typed),
                     max_write_ms=round(self.max_write_ms, 1))

    def running(self) -> bool:
        self.progress()
        return not self.stop_file.exists() and os.getppid() == self.parent

    def tag(self, what: str) -> str:
        self.seq += 1
        return f"tag-{self.ident}-{what}{self.seq}"

    # -- calls
    def call(self, op: str, fn: Callable[[], Any], *, write: bool = True) -> Any:
        """Run one store call; typed errors are counted, raw ones logged; FAILED if it raised."""
        t0 = time.perf_counter()
        try:
            result = fn()
        except HermesDataError as exc:
            self.typed[type(exc).__name__] += 1
            return FAILED
        except Exception as exc:  # a raw error: what this soak exists to find
            self.raw_count += 1
            self.log("raw", op=op, type=f"{type(exc).__module__}.{type(exc).__qualname__}",
                     msg=str(exc)[:500], tb=traceback.format_exc()[-3000:])
            time.sleep(0.05)
            return FAILED
        if write:
            self.max_write_ms = max(self.max_write_ms, (time.perf_counter() - t0) * 1000)
        self.ops[op] += 1
        return result

    # -- stores
    def session_store(self) -> Any:
        from hermes_data.sessions.store import SessionStore

        while True:
            store = self.call("open", lambda: SessionStore(self.spec["sessions_url"]), write=False)
            if store is not FAILED:
                self._stores.append(store)
                return store
            if not self.running():
                raise SystemExit(0)
            time.sleep(0.2)

    def telemetry_store(self) -> Any:
        from hermes_data.telemetry import TelemetryStore

        while True:
            store = self.call("open", lambda: TelemetryStore(self.spec["telemetry_url"]),
                              write=False)
            if store is not FAILED:
                self._stores.append(store)
                return store
            if not self.running():
                raise SystemExit(0)
            time.sleep(0.2)

    def close(self) -> None:
        for store in reversed(self._stores):
            self.call("close", store.close, write=False)
        self.progress(force=True)


def create(ctx: Ctx, store: Any, sid: str, kind: str, source: str = "soak") -> bool:
    """Create a session; acknowledged as ``session`` (``kind``: owned, prunable, …)."""
    if ctx.call("create_session", lambda: store.create_session(sid, source)) is FAILED:
        return False
    ctx.log("session", sid=sid, kind=kind)
    return True


def family_append(ctx: Ctx) -> None:
    """Appenders: take a shared session's turn lease, append 1–3 fenced messages, release."""
    store = ctx.session_store()
    holder = store.make_holder("turn")
    while ctx.running():
        sid = ctx.rng.choice(SHARED_SESSIONS)
        got = ctx.call("try_acquire_session_turn_lease", lambda: store.try_acquire_session_turn_lease(
            sid, holder, ttl_seconds=LEASE_TTL, patience_s=2.0))
        if got is FAILED or not got:
            continue
        for _ in range(ctx.rng.randint(1, 3)):
            role = ctx.rng.choice(("user", "assistant"))
            body = text(ctx.rng, ctx.tag("a"))
            calls = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}] \
                if role == "assistant" and ctx.rng.random() < 0.3 else None
            mid = ctx.call("append_message", lambda: store.append_message(
                sid, role, body, turn_lease_holder=holder, turn_lease_ttl_seconds=LEASE_TTL,
                tool_calls=calls))
            if mid is not FAILED:
                ctx.log("msg", sid=sid, id=mid, content=body)
        ctx.call("release_session_turn_lease", lambda: store.release_session_turn_lease(sid, holder))


def family_batch(ctx: Ctx) -> None:
    """Batch writers: ``append_messages_batch`` of 2–20 rows into the worker's own session."""
    store = ctx.session_store()
    sid = f"batch-{ctx.ident}"
    while ctx.running() and not create(ctx, store, sid, "batch"):
        pass
    while ctx.running():
        n = ctx.rng.randint(2, 20)
        tag = ctx.tag("b")
        rows = [{"role": ctx.rng.choice(("user", "assistant")),
                 "content": text(ctx.rng, f"{tag}.{j}/{n}")} for j in range(n)]
        if ctx.call("append_messages_batch", lambda: store.append_messages_batch(sid, rows)) \
                is not FAILED:
            ctx.log("batch", sid=sid, contents=[r["content"] for r in rows])


def family_search(ctx: Ctx) -> None:
    """Searchers: words, CJK tokens (1–3 letters), junk queries; transcript reads."""
    store = ctx.session_store()
    junk = ['"unbalanced', "NOT", "a AND OR b", "*", "foo-bar.baz", "%_%", "日", "(x", "\x00z"]
    while ctx.running():
        r = ctx.rng.random()
        if r < 0.5:
            q = ctx.rng.choice(WORDS)
        elif r < 0.8:
            token = ctx.rng.choice(CJK)
            q = token[: ctx.rng.randint(1, 3)]
        else:
            q = ctx.rng.choice(junk)
        ctx.call("search_messages", lambda: store.search_messages(q, limit=20), write=False)
        sid = ctx.rng.choice(SHARED_SESSIONS)
        ctx.call("get_messages", lambda: store.get_messages(sid, limit=50, latest=True),
                 write=False)


def family_gateway(ctx: Ctx) -> None:
    """Gateway: compare-and-set routing saves, heartbeats, and handoffs through their states."""
    store = ctx.session_store()
    sid = f"gw-{ctx.ident}"
    while ctx.running() and not create(ctx, store, sid, "gateway"):
        pass
    backend_id = f"soak@{ctx.ident}:{os.getpid()}"
    # The claimant names this process (pid=…:host=…), so a claim a SIGKILL left behind is
    # provably dead and the end check's reclaim can take it (docs/sessions-gateway.md §3.6 (b)).
    claimant = store.make_holder("handoff")
    current: dict[str, str | None] = {}
    while ctx.running():
        key = f"agent:soak:{ctx.ident}:{ctx.rng.randrange(5)}"
        value = json.dumps({"session_id": sid, "n": ctx.tag("r")})
        ctx.log("route_intent", key=key, value=value)
        ok = ctx.call("save_gateway_routing_entry", lambda: store.save_gateway_routing_entry(
            key, value, scope="soak", if_current=current.get(key)))
        if ok is True:
            current[key] = value
            ctx.log("route", key=key, value=value)
        ctx.call("register_backend_heartbeat", lambda: store.register_backend_heartbeat(
            backend_id=backend_id, pid=os.getpid(), started_at=time.time()))
        for state, fn in (("pending", lambda: store.request_handoff(sid, "discord")),
                          ("running", lambda: store.claim_handoff(sid, claimant=claimant)),
                          ("completed" if ctx.rng.random() < 0.7 else "failed",
                           None)):
            if fn is None:
                fn = (lambda: store.complete_handoff(sid, claimant=claimant)) \
                    if state == "completed" else \
                    (lambda: store.fail_handoff(sid, "soak", claimant=claimant))
            ctx.log("handoff_intent", sid=sid, state=state)
            ok = ctx.call(f"handoff_{state}", fn)
            if ok is FAILED or not ok:  # log what is there now: later replays start from it
                seen = ctx.call("get_handoff_state", lambda: store.get_handoff_state(sid),
                                write=False)
                if seen is not FAILED:
                    ctx.log("handoff", sid=sid, state=seen.state if seen else None)
                break
            ctx.log("handoff", sid=sid, state=state)


class Transcript:
    """An owned session's active transcript as the worker expects it (contents in id order,
    ids where known); every change is logged as intent (before) and state (after)."""

    def __init__(self, ctx: Ctx, sid: str) -> None:
        self.ctx, self.sid = ctx, sid
        self.rows: list[tuple[int | None, str, str]] = []  # (id, role, content)
        self.rewound: list[tuple[int, str, str]] = []  # rows made inactive by rewinds

    def change(self, op: str, after: list[tuple[int | None, str, str]],
               fn: Callable[[], Any], **extra: Any) -> Any:
        self.ctx.log("intent", sid=self.sid, op=op, after=[c for _, _, c in after], **extra)
        result = self.ctx.call(op, fn)
        if result is not FAILED:
            self.ctx.log("state", sid=self.sid, op=op, after=[c for _, _, c in after], **extra)
        return result

    def append(self, store: Any, role: str) -> None:
        body = text(self.ctx.rng, self.ctx.tag("t"))
        mid = self.change("append_message", self.rows + [(None, role, body)],
                          lambda: store.append_message(self.sid, role, body))
        if mid is not FAILED:
            self.rows.append((mid, role, body))
            self.ctx.log("msg", sid=self.sid, id=mid, content=body)


def new_owned(ctx: Ctx, store: Any, prefix: str) -> Transcript | None:
    sid = f"{prefix}-{ctx.ident}-{ctx.seq}"
    ctx.seq += 1
    t = Transcript(ctx, sid)
    ctx.log("intent", sid=sid, op="create_session", after=[])
    if not create(ctx, store, sid, "owned"):
        return None
    ctx.log("state", sid=sid, op="create_session", after=[])
    return t


def family_compact(ctx: Ctx) -> None:
    """Compression: under a compression lock, ``archive_and_compact`` in place or
    ``publish_compression_child`` (the conversation moves to the child)."""
    store = ctx.session_store()
    t = None
    depth = 0
    while ctx.running():
        if t is None or depth >= 15:
            t, depth = new_owned(ctx, store, "cmp"), 0
            continue
        for _ in range(ctx.rng.randint(2, 5)):
            t.append(store, ctx.rng.choice(("user", "assistant")))
        holder, locked = store.make_holder("compress"), t.sid
        got = ctx.call("try_acquire_compression_lock", lambda: store.try_acquire_compression_lock(
            locked, holder, ttl_seconds=LEASE_TTL))
        if got is FAILED or not got:
            continue
        wm = ctx.call("get_active_message_watermark",
                      lambda: store.get_active_message_watermark(t.sid), write=False)
        if wm is not FAILED and ctx.rng.random() < 0.6:
            summary = [(None, "user", text(ctx.rng, ctx.tag("s")))]
            msgs = [{"role": "user", "content": summary[0][2]}]
            if t.change("archive_and_compact", summary, lambda: store.archive_and_compact(
                    t.sid, msgs, watermark=wm, lock_holder=holder)) is not FAILED:
                t.rows = summary
        elif wm is not FAILED:
            child = f"cmp-{ctx.ident}-{ctx.seq}"
            ctx.seq += 1
            handoff = [(None, "user", text(ctx.rng, ctx.tag("h")))]
            msgs = [{"role": "user", "content": handoff[0][2]}]
            nt = Transcript(ctx, child)
            if nt.change("publish_compression_child", handoff,
                         lambda: store.publish_compression_child(
                             locked, child, "soak", msgs, watermark=wm,
                             compression_lock_holder=holder), parent=locked) is not FAILED:
                ctx.log("session", sid=child, kind="owned")
                nt.rows = handoff
                t, depth = nt, depth + 1
        ctx.call("release_compression_lock",
                 lambda: store.release_compression_lock(locked, holder))


def family_rewind(ctx: Ctx) -> None:
    """Rewind: append turns, ``rewind_to_message`` a user row, sometimes ``restore_rewound``."""
    store = ctx.session_store()
    t = None
    while ctx.running():
        if t is None or len(t.rows) + len(t.rewound) > 40:
            t = new_owned(ctx, store, "rw")
            continue
        for role in ("user", "assistant") * ctx.rng.randint(1, 3):
            t.append(store, role)
        users = [i for i, (mid, role, _) in enumerate(t.rows) if role == "user" and mid is not None]
        if not users or any(mid is None for mid, _, _ in t.rows):
            continue
        i = ctx.rng.choice(users)
        target = t.rows[i][0]
        before, after = t.rows, t.rows[:i]
        if t.change("rewind_to_message", after,
                    lambda: store.rewind_to_message(t.sid, target)) is FAILED:
            continue
        t.rows = after
        t.rewound = sorted(set(t.rewound) | {row for row in before[i:]})
        head = max((mid for mid, _, _ in t.rows), default=0)
        holes = [row for row in t.rewound if head < row[0] < target]
        if not holes and ctx.rng.random() < 0.4:
            # every inactive row from ``since`` on comes back, earlier rewinds' too
            # (docs/sessions-coordination.md §3.16)
            back = [row for row in t.rewound if row[0] >= target]
            restored = sorted(t.rows + back)
            if t.change("restore_rewound", restored,
                        lambda: store.restore_rewound(t.sid, target)) is not FAILED:
                t.rows = restored
                t.rewound = [row for row in t.rewound if row[0] < target]


def family_export(ctx: Ctx) -> None:
    """Exports: one session, a lineage, and the first few of ``iter_export_all``."""
    store = ctx.session_store()
    while ctx.running():
        rows = ctx.call("list_sessions", lambda: store.list_sessions(source="soak", limit=50),
                        write=False)
        if rows is FAILED or not rows:
            time.sleep(0.2)
            continue
        sid = ctx.rng.choice(rows).id
        ctx.call("export_session", lambda: store.export_session(sid, max_messages=0), write=False)
        ctx.call("export_session_lineage", lambda: store.export_session_lineage(sid, max_messages=0),
                 write=False)

        def first_few() -> int:
            n = 0
            for _ in store.iter_export_all(source="soakprune", max_messages=0):
                n += 1
                if n >= 10:
                    break
            return n
        ctx.call("iter_export_all", first_few, write=False)


def family_telemetry_buffered(ctx: Ctx) -> None:
    """Telemetry through ``BufferedWriter``: calls are acknowledged once ``flush()`` returned."""
    from hermes_data.telemetry import BufferedWriter, start_run

    store = ctx.telemetry_store()
    sid = f"tel-{ctx.ident}"
    while ctx.running() and ctx.call("start_run", lambda: start_run(store, sid, "m", "cli", None)) \
            is FAILED:
        pass
    ctx.log("run", sid=sid)
    writer = BufferedWriter(store, max_delay=0.02)
    try:
        while ctx.running():
            llm, tools = [], []
            for _ in range(ctx.rng.randint(5, 50)):
                key = ctx.tag("l")
                if ctx.rng.random() < 0.7:
                    ctx.call("buffer_llm_call", lambda: writer.record_llm_call(
                        sid, None, "m", "p", tokens_in=3, tokens_out=2, turn_id=key), write=False)
                    llm.append(key)
                else:
                    ctx.call("buffer_tool_call", lambda: writer.record_tool_call(
                        sid, None, "bash", tool_call_id=key), write=False)
                    tools.append(key)
            if ctx.call("flush", writer.flush) is not FAILED:
                ctx.log("telemetry", sid=sid, llm=llm, tools=tools)
    finally:
        ctx.call("writer_close", writer.close)


def family_telemetry_direct(ctx: Ctx) -> None:
    """Telemetry, one transaction per call: ``record_llm_call`` / ``record_tool_call``."""
    from hermes_data.telemetry import record_llm_call, record_tool_call, start_run

    store = ctx.telemetry_store()
    sid = f"tel-{ctx.ident}"
    while ctx.running() and ctx.call("start_run", lambda: start_run(store, sid, "m", "cli", None)) \
            is FAILED:
        pass
    ctx.log("run", sid=sid)
    while ctx.running():
        key = ctx.tag("d")
        if ctx.rng.random() < 0.6:
            if ctx.call("record_llm_call", lambda: record_llm_call(
                    store, sid, None, "m", "p", tokens_in=3, tokens_out=2, turn_id=key)) is not FAILED:
                ctx.log("telemetry", sid=sid, llm=[key], tools=[])
        elif ctx.call("record_tool_call", lambda: record_tool_call(
                store, sid, None, "bash", tool_call_id=key)) is not FAILED:
            ctx.log("telemetry", sid=sid, llm=[], tools=[key])


def family_prune(ctx: Ctx) -> None:
    """The only deleting family: its own ``soakprune`` sessions, created, filled, mostly ended,
    then ``prune_sessions(source='soakprune')``."""
    from hermes_data.sessions.core import maintenance

    store = ctx.session_store()
    while ctx.running():
        for _ in range(3):
            sid = f"prn-{ctx.ident}-{ctx.seq}"
            ctx.seq += 1
            if ctx.call("create_session", lambda: store.create_session(sid, "soakprune")) is FAILED:
                continue
            ctx.log("prunable", sid=sid)
            ctx.call("append_message", lambda: store.append_message(sid, "user", text(ctx.rng, sid)))
            if ctx.rng.random() < 0.8:
                ctx.log("end_intent", sid=sid)
                ctx.call("end_session", lambda: store.end_session(sid, "user_exit"))
        ctx.call("prune_sessions", lambda: maintenance.prune_sessions(
            store, older_than_days=0, source="soakprune", exclude_active_write_guards=True))
        time.sleep(0.2)


def family_maintenance(ctx: Ctx) -> None:
    """VACUUM, FTS optimize / merge, optimize-storage and CJK index steps, in turn."""
    from hermes_data.sessions.core import maintenance

    store = ctx.session_store()
    steps: list[tuple[str, Callable[[], Any]]] = [
        ("cjk_index_step", lambda: store.cjk_index_step(max_rows=500)),
        ("cjk_index_status", lambda: store.cjk_index_status()),
        ("merge_fts", lambda: store.merge_fts(max_pages=250, max_commands=2)),
        ("cjk_index_step", lambda: store.cjk_index_step(max_rows=500)),
        ("optimize_fts", lambda: store.optimize_fts()),
        ("optimize_fts_storage", lambda: store.optimize_fts_storage(vacuum=False)),
        ("vacuum", lambda: maintenance.vacuum(store)),
    ]
    while ctx.running():
        for op, fn in steps:
            if not ctx.running():
                return
            ctx.call(op, fn)
            time.sleep(0.5)


FAMILY_FUNCS: dict[str, Callable[[Ctx], None]] = {
    name: globals()[f"family_{name}"] for name in FAMILIES}


def worker_main(spec: dict[str, Any]) -> int:
    faulthandler.register(signal.SIGUSR1)  # `kill -USR1 <pid>`: where is a stuck worker?
    ctx = Ctx(spec)
    ctx.log("start", pid=os.getpid(), family=ctx.family)
    try:
        FAMILY_FUNCS[ctx.family](ctx)
    except SystemExit:
        pass
    except BaseException as exc:  # outside any store call: still a raw error
        ctx.raw_count += 1
        ctx.log("raw", op="worker", type=f"{type(exc).__module__}.{type(exc).__qualname__}",
                msg=str(exc)[:500], tb=traceback.format_exc()[-3000:])
    finally:
        ctx.close()
        ctx.log("exit")
    return 0


# ----------------------------------------------------------------------------------------
# The parent: set-up, workers, chaos, lock prober
# ----------------------------------------------------------------------------------------

class Target:
    """Where one mode's two stores live, created fresh and removed at the end."""

    def __init__(self, mode: str, args: argparse.Namespace) -> None:
        self.mode = mode
        self.keep = args.keep
        base = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="hermes-soak-"))
        self.run_dir = base / f"{mode}-{uuid.uuid4().hex[:6]}"
        self.own_base = not args.dir
        self.base = base
        (self.run_dir / "acks").mkdir(parents=True)
        (self.run_dir / "logs").mkdir()
        self.env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get(
            "PYTHONPATH", "")}
        self.pg_names: list[str] = []
        self.admin_url = args.url
        self.saved_mode = os.environ.get("HERMES_DATA_JOURNAL_MODE")
        if mode.startswith("sqlite"):
            if mode != "sqlite":  # plain "sqlite": the journal-mode policy (or the environment)
                self.env["HERMES_DATA_JOURNAL_MODE"] = mode.split("-")[1]
                os.environ["HERMES_DATA_JOURNAL_MODE"] = mode.split("-")[1]
            self.state_path: Path | None = self.run_dir / "state.db"
            self.sessions_url = str(self.run_dir / "state.db")
            self.telemetry_url = str(self.run_dir / "telemetry.db")
        else:
            import sqlalchemy as sa

            self.state_path = None
            admin = sa.create_engine(args.url, isolation_level="AUTOCOMMIT")
            with admin.connect() as conn:
                for _ in ("sessions", "telemetry"):
                    name = f"hd_soak_{uuid.uuid4().hex[:10]}"
                    conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
                    self.pg_names.append(name)
            admin.dispose()
            url = sa.engine.make_url(args.url)
            self.sessions_url, self.telemetry_url = (
                url.set(database=n).render_as_string(hide_password=False) for n in self.pg_names)
        from hermes_data.migrate import runner as migrate

        migrate.upgrade("sessions", self.sessions_url)
        migrate.upgrade("telemetry", self.telemetry_url)
        from hermes_data.sessions.store import SessionStore

        with SessionStore(self.sessions_url) as store, \
                open(self.run_dir / "acks" / "parent.log", "w") as log:
            for sid in SHARED_SESSIONS:  # the appenders' sessions, acknowledged by the parent
                store.create_session(sid, "soak")
                log.write(json.dumps({"k": "session", "sid": sid, "kind": "shared"}) + "\n")

    def cleanup(self) -> None:
        if self.saved_mode is None:
            os.environ.pop("HERMES_DATA_JOURNAL_MODE", None)
        else:
            os.environ["HERMES_DATA_JOURNAL_MODE"] = self.saved_mode
        if self.pg_names and not self.keep:
            import sqlalchemy as sa

            admin = sa.create_engine(self.admin_url, isolation_level="AUTOCOMMIT")
            with admin.connect() as conn:
                for name in self.pg_names:
                    conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            admin.dispose()
        if not self.keep:
            shutil.rmtree(self.base if self.own_base else self.run_dir, ignore_errors=True)
        else:
            print(f"kept: {self.run_dir}" + (f" and databases {self.pg_names}" if self.pg_names else ""))


class Fleet:
    """The worker processes: start, SIGKILL and restart (new identity), stop."""

    def __init__(self, target: Target, seed: int) -> None:
        self.target, self.seed = target, seed
        self.lock = threading.Lock()
        self.procs: dict[tuple[str, int], subprocess.Popen] = {}
        self.incarnation: Counter[tuple[str, int]] = Counter()
        self.kills = 0
        self.worker_exits: list[tuple[str, int]] = []

    def start(self, slot: tuple[str, int]) -> None:
        family, index = slot
        self.incarnation[slot] += 1
        ident = f"{family}-{index}-{self.incarnation[slot]}"
        spec = {"ident": ident, "family": family, "run_dir": str(self.target.run_dir),
                "sessions_url": self.target.sessions_url, "seed": self.seed,
                "telemetry_url": self.target.telemetry_url}
        err = open(self.target.run_dir / "logs" / f"{ident}.err", "wb")
        self.procs[slot] = subprocess.Popen(
            [sys.executable, __file__, "--worker", json.dumps(spec)], env=self.target.env,
            cwd=ROOT, stdout=err, stderr=subprocess.STDOUT)
        err.close()

    def start_all(self) -> None:
        with self.lock:
            for family, n in FAMILIES.items():
                for index in range(n):
                    self.start((family, index))

    def chaos(self, stop: threading.Event, rng: random.Random) -> None:
        """Every 2–5 s: SIGKILL a random worker and start its successor."""
        while not stop.wait(rng.uniform(2.0, 5.0)):
            with self.lock:
                slot = rng.choice(sorted(self.procs))
                proc = self.procs[slot]
                if proc.poll() is None:
                    proc.send_signal(signal.SIGKILL)
                    proc.wait()
                    self.kills += 1
                elif proc.returncode != 0:
                    self.worker_exits.append((slot[0], proc.returncode))
                self.start(slot)

    def stop(self, grace: float) -> int:
        """Ask every worker to stop; SIGKILL what is still running after ``grace`` s."""
        (self.target.run_dir / "stop").touch()
        deadline = time.monotonic() + grace
        late = 0
        with self.lock:
            for slot, proc in self.procs.items():
                try:
                    proc.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    proc.send_signal(signal.SIGKILL)
                    proc.wait()
                    late += 1
                if proc.returncode not in (0, -signal.SIGKILL):
                    self.worker_exits.append((slot[0], proc.returncode))
        return late


def lock_prober(path: Path, stop: threading.Event, out: dict[str, float]) -> None:
    """Time ``BEGIN IMMEDIATE`` on the state file every 0.25 s: the write-lock wait a writer
    sees. It writes nothing (``ROLLBACK`` at once)."""
    con = sqlite3.connect(path, timeout=300, isolation_level=None)
    try:
        while not stop.wait(0.25):
            t0 = time.perf_counter()
            try:
                con.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                out["probe_errors"] = out.get("probe_errors", 0) + 1
                out["probe_last_error"] = str(exc)  # type: ignore[assignment]
                continue
            waited = (time.perf_counter() - t0) * 1000
            con.execute("ROLLBACK")
            out["max_ms"] = max(out.get("max_ms", 0.0), waited)
            out["probes"] = out.get("probes", 0) + 1
    finally:
        con.close()


# ----------------------------------------------------------------------------------------
# The checker
# ----------------------------------------------------------------------------------------

ABSENT = "<absent>"


class Acks:
    """Everything the ack logs say, merged (each log is one worker's, in its own order)."""

    def __init__(self, acks_dir: Path) -> None:
        self.msgs: list[dict] = []
        self.batches: list[dict] = []
        self.sessions: dict[str, str] = {}
        self.prunable: set[str] = set()
        self.end_intents: set[str] = set()
        self.transcripts: dict[str, list[dict]] = defaultdict(list)
        self.routes: dict[str, list[dict]] = defaultdict(list)
        self.handoffs: dict[str, list[dict]] = defaultdict(list)
        self.llm: set[str] = set()
        self.tools: set[str] = set()
        self.raw: list[dict] = []
        self.progress: dict[str, dict] = {}
        self.families: dict[str, str] = {}
        self.torn = 0
        for path in sorted(acks_dir.glob("*.log")):
            ident = path.stem
            for line in path.read_bytes().splitlines():
                try:
                    e = json.loads(line)
                except ValueError:
                    self.torn += 1
                    continue
                self.add(ident, e)

    def add(self, ident: str, e: dict) -> None:
        k = e["k"]
        if k == "start":
            self.families[ident] = e["family"]
        elif k == "msg":
            self.msgs.append(e)
        elif k == "batch":
            self.batches.append(e)
        elif k == "session":
            self.sessions[e["sid"]] = e["kind"]
        elif k == "prunable":
            self.prunable.add(e["sid"])
        elif k == "end_intent":
            self.end_intents.add(e["sid"])
        elif k in ("intent", "state"):
            self.transcripts[e["sid"]].append(e)
        elif k in ("route_intent", "route"):
            self.routes[e["key"]].append(e)
        elif k in ("handoff_intent", "handoff"):
            self.handoffs[e["sid"]].append(e)
        elif k == "telemetry":
            self.llm.update(e["llm"])
            self.tools.update(e["tools"])
        elif k == "raw":
            self.raw.append({"worker": ident, **e})
        elif k == "progress":
            self.progress[ident] = e

    @staticmethod
    def candidates(entries: list[dict], value: Callable[[dict], Any], acked: str,
                   initial: Any) -> list[Any]:
        """The acceptable final values: the last acknowledged one (``initial`` if none) and
        those of the intents logged after it (a call that was in flight when killed)."""
        last = max((i for i, e in enumerate(entries) if e["k"] == acked), default=-1)
        out = [value(entries[last]) if last >= 0 else initial]
        out += [value(e) for e in entries[last + 1:] if e["k"] != acked]
        return out


class Db:
    """Plain SQL reads for the checks (SQLAlchemy Core text, both dialects)."""

    def __init__(self, url: str) -> None:
        import sqlalchemy as sa

        self.sa = sa
        self.engine = sa.create_engine(url if "://" in url else f"sqlite:///{url}")

    def rows(self, sql: str, **params: Any) -> list[tuple]:
        with self.engine.connect() as conn:
            return [tuple(r) for r in conn.execute(self.sa.text(sql), params)]

    def close(self) -> None:
        self.engine.dispose()


def check(target: Target, acks: Acks, rng: random.Random) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """Run every end-of-run check; returns (figures, failures by invariant)."""
    from hermes_data.sessions.store import SessionStore
    from hermes_data.telemetry import TelemetryStore  # noqa: F401  (import check only)

    fail: dict[str, list[str]] = defaultdict(list)
    figures: dict[str, Any] = {}
    sqlite = target.state_path is not None

    # Recovery first: the first writable open rolls back what a killed writer left.
    store = SessionStore(target.sessions_url)
    sdb, tdb = Db(target.sessions_url), Db(target.telemetry_url)
    try:
        if sqlite:
            for label, db, tables in (("state.db", sdb, ("messages_fts", "messages_fts_trigram",
                                                         "messages_cjk_fts")),
                                      ("telemetry.db", tdb, ())):
                with db.engine.begin() as conn:
                    figures.setdefault("journal_mode",
                                       conn.exec_driver_sql("PRAGMA journal_mode").scalar())
                    ok = conn.exec_driver_sql("PRAGMA integrity_check").fetchall()
                    if [r[0] for r in ok] != ["ok"]:
                        fail["integrity_check"].append(f"{label}: {ok[:5]}")
                    for t in tables:
                        try:
                            conn.exec_driver_sql(f"INSERT INTO {t}({t}) VALUES ('integrity-check')")
                        except Exception as exc:
                            fail["fts_integrity_check"].append(f"{t}: {exc}")
            figures["integrity_check"] = "ok" if not fail["integrity_check"] else "FAILED"
        else:
            figures["integrity_check"] = "n/a (PostgreSQL)"
            figures["journal_mode"] = "n/a"

        messages = {r[0]: r[1:] for r in sdb.rows(
            "SELECT id, session_id, content, active, compacted, tool_calls, display_kind "
            "FROM messages")}
        sessions = {r[0]: r[1:] for r in sdb.rows(
            "SELECT id, parent_session_id, end_reason, message_count, tool_call_count, source "
            "FROM sessions")}

        # -- rows acknowledged / lost
        lost: list[str] = []
        for m in acks.msgs:
            row = messages.get(m["id"])
            if row is None or row[0] != m["sid"] or row[1] != m["content"]:
                lost.append(f"message {m['id']} of {m['sid']}: {'missing' if row is None else row[:2]}")
        contents = Counter(r[1] for r in messages.values() if isinstance(r[1], str))
        for b in acks.batches:
            lost += [f"batch row {c.split()[0]}" for c in b["contents"] if contents[c] == 0]
        lost += [f"session {sid}" for sid in acks.sessions if sid not in sessions]
        lost += [f"open prunable session {sid}" for sid in acks.prunable - acks.end_intents
                 if sid not in sessions]
        llm_rows = Counter(r[0] for r in tdb.rows("SELECT turn_id FROM llm_calls"))
        tool_rows = Counter(r[0] for r in tdb.rows("SELECT tool_call_id FROM tool_calls"))
        lost += [f"llm_call {k}" for k in acks.llm if llm_rows[k] == 0]
        lost += [f"tool_call {k}" for k in acks.tools if tool_rows[k] == 0]
        figures["rows_acknowledged"] = (len(acks.msgs) + sum(len(b["contents"]) for b in acks.batches)
                                        + len(acks.sessions) + len(acks.prunable)
                                        + len(acks.llm) + len(acks.tools))
        figures["rows_lost"] = len(lost)
        fail["rows_lost"] += lost[:20]

        # -- all-or-nothing batches, nothing written twice
        parts: dict[str, set[int]] = defaultdict(set)
        sizes: dict[str, int] = {}
        for content, n in contents.items():
            tag = content.split(" ", 1)[0]
            if n > 1 and tag.startswith("tag-"):
                fail["no_duplicates"].append(f"{tag} stored {n} times")
            if tag.startswith("tag-batch-") and "/" in tag:
                head, _, size = tag.rpartition("/")
                name, _, j = head.rpartition(".")
                parts[name].add(int(j))
                sizes[name] = int(size)
        fail["batches_atomic"] += [f"{name}: {len(js)} of {sizes[name]} rows"
                                   for name, js in parts.items() if len(js) != sizes[name]]
        fail["no_duplicates"] += [f"llm_call {k} x{n}" for k, n in llm_rows.items() if k and n > 1]
        fail["no_duplicates"] += [f"tool_call {k} x{n}" for k, n in tool_rows.items() if k and n > 1]

        # -- owned transcripts: the last acknowledged state or the one in flight
        by_session: dict[str, list[tuple[int, str]]] = defaultdict(list)
        for mid, (sid, content, active, *_rest) in messages.items():
            if active:
                by_session[sid].append((mid, content))
        for sid, entries in acks.transcripts.items():
            actual = ABSENT if sid not in sessions else [c for _, c in sorted(by_session[sid])]
            ok = Acks.candidates(entries, lambda e: e["after"], "state", ABSENT)
            if actual not in ok:
                fail["owned_transcripts"].append(
                    f"{sid}: active {actual} not in {ok} (last op {entries[-1]['op']})")
        figures["owned_transcripts"] = len(acks.transcripts)

        # -- routing entries and handoff states
        stored = dict(sdb.rows("SELECT session_key, entry_json FROM gateway_routing "
                               "WHERE scope = 'soak'"))
        for key, entries in acks.routes.items():
            ok = Acks.candidates(entries, lambda e: e["value"], "route", None)
            if stored.get(key) not in ok:
                fail["routing_entries"].append(f"{key}: {stored.get(key)} not in {ok}")
        for sid, entries in acks.handoffs.items():
            state = store.get_handoff_state(sid)
            ok = Acks.candidates(entries, lambda e: e["state"], "handoff", None)
            if (state.state if state else ABSENT) not in ok:
                fail["handoff_states"].append(f"{sid}: {state and state.state} not in {ok}")

        # -- search equals a LIKE scan of the rows it covers (docs/sessions.md §7.2)
        def like_ids(token: str) -> set[int]:
            return {mid for mid, (_s, content, active, compacted, _t, kind) in messages.items()
                    if (active or compacted) and (kind or "") != "hidden"
                    and isinstance(content, str) and token in content}

        def compare(tokens: list[str], when: str) -> None:
            for tok in tokens:
                got = {r.id for r in store.search_messages(tok, limit=10**6, fields=["id"])}
                want = like_ids(tok)
                if got != want:
                    fail["search_equals_like"].append(
                        f"{when} {tok!r}: {len(got)} found, LIKE {len(want)}; missing "
                        f"{sorted(want - got)[:5]}, extra {sorted(got - want)[:5]}")

        cjk = rng.sample(CJK, 6)
        tokens = rng.sample(WORDS, 15) + cjk + [t[:2] for t in cjk[:4]] + [t[0] for t in cjk[:3]]
        compare(tokens, "before draining the CJK queue:")
        if sqlite:
            while store.cjk_index_step(max_rows=5000):
                pass
            queued = store.cjk_index_status().queued
            if queued:
                fail["cjk_queue_drained"].append(f"{queued} ids still queued")
            compare([t for t in tokens if t not in WORDS], "after draining:")
        figures["search_tokens_compared"] = len(tokens)

        # -- lineage
        for sid, (parent, reason, *_rest) in sessions.items():
            if parent is not None and parent not in sessions:
                fail["lineage_parents_exist"].append(f"{sid} -> missing {parent}")
            seen, cur = {sid}, parent
            while cur is not None and cur in sessions:
                if cur in seen:
                    fail["lineage_acyclic"].append(f"cycle through {sid}")
                    break
                seen.add(cur)
                cur = sessions[cur][0]
        children: dict[str, list[str]] = defaultdict(list)
        for sid, (parent, *_rest) in sessions.items():
            if parent is not None:
                children[parent].append(sid)
        for sid, (_p, reason, *_rest) in sessions.items():
            if reason == "compression" and not children[sid]:
                fail["compression_lineage"].append(f"{sid} ended by compression without a child")
        published = {}
        for sid, entries in acks.transcripts.items():
            for e in entries:
                if e["op"] == "publish_compression_child" and sid in sessions:
                    published[e["parent"]] = sid
        for parent, child in published.items():
            if sessions[child][0] != parent or sessions.get(parent, (None, None))[1] != "compression":
                fail["compression_lineage"].append(f"{parent} -> {child}: edge or end reason wrong")
        for root in set(published) - set(published.values()):
            tip = root
            while tip in published:
                tip = published[tip]
            got = store.get_compression_tip(root)
            if got != tip:
                fail["compression_lineage"].append(f"tip of {root}: {got}, expected {tip}")
        figures["compression_publishes"] = len(published)

        # -- counters equal rows
        tool_counts: Counter[str] = Counter()
        for sid, _c, active, _cp, calls, _k in messages.values():
            if active and calls:
                parsed = json.loads(calls)
                tool_counts[sid] += len(parsed) if isinstance(parsed, list) else 1
        for sid, (_p, _r, count, tools, _src) in sessions.items():
            if (count or 0) != len(by_session[sid]) or (tools or 0) != tool_counts[sid]:
                fail["counters"].append(f"{sid}: message_count {count} vs {len(by_session[sid])} "
                                        f"active, tool_call_count {tools} vs {tool_counts[sid]}")
        for sid, api_calls, tool_calls, tokens_in, n_llm, n_tool, sum_in in tdb.rows(
                "SELECT r.session_id, r.api_calls, r.tool_calls, r.tokens_in, "
                "(SELECT COUNT(*) FROM llm_calls l WHERE l.session_id = r.session_id), "
                "(SELECT COUNT(*) FROM tool_calls t WHERE t.session_id = r.session_id), "
                "(SELECT COALESCE(SUM(l.tokens_in), 0) FROM llm_calls l "
                " WHERE l.session_id = r.session_id) FROM runs r"):
            if (api_calls, tool_calls, tokens_in) != (n_llm, n_tool, sum_in):
                fail["counters"].append(f"run {sid}: api_calls/tool_calls/tokens_in "
                                        f"{api_calls}/{tool_calls}/{tokens_in} vs rows "
                                        f"{n_llm}/{n_tool}/{sum_in}")

        # -- no guard left held: a fresh holder takes every lock and lease; no handoff running
        holder = store.make_holder("soak-check")
        guards = 0
        for (sid, old, expires) in sdb.rows("SELECT session_id, holder, expires_at "
                                            "FROM compression_locks"):
            guards += 1
            if not store.try_acquire_compression_lock(sid, holder, ttl_seconds=1):
                fail["no_lock_held"].append(f"compression lock {sid} still held by {old}")
            store.release_compression_lock(sid, holder)
        for (key, old, expires) in sdb.rows("SELECT conversation_id, holder, expires_at "
                                            "FROM session_turn_leases"):
            guards += 1
            if not store.try_acquire_session_turn_lease(key, holder, ttl_seconds=1):
                fail["no_lock_held"].append(f"turn lease {key} still held by {old}")
            store.release_session_turn_lease(key, holder)
        reclaimed = store.reclaim_stale_running_handoffs("soak check", claimant=holder)
        running = sdb.rows("SELECT id, handoff_claimed_by FROM sessions "
                           "WHERE handoff_state = 'running'")
        fail["no_lock_held"] += [f"handoff {sid} still running for {who}" for sid, who in running]
        figures["guards_left_by_killed_workers"] = guards + len(reclaimed)
    finally:
        store.close()
        sdb.close()
        tdb.close()
    return figures, {k: v for k, v in fail.items() if v}


# ----------------------------------------------------------------------------------------
# One run, the report, the command line
# ----------------------------------------------------------------------------------------

def run_mode(mode: str, args: argparse.Namespace) -> dict[str, Any]:
    """Soak one backend for ``args.minutes``; returns its figures (``ok`` says if it passed)."""
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    target = Target(mode, args)
    try:
        fleet = Fleet(target, seed)
        stop = threading.Event()
        probe: dict[str, float] = {}
        threads = [threading.Thread(target=fleet.chaos, args=(stop, rng), daemon=True)]
        if target.state_path is not None:
            threads.append(threading.Thread(target=lock_prober, args=(target.state_path, stop, probe),
                                            daemon=True))
        t0 = time.monotonic()
        fleet.start_all()
        for t in threads:
            t.start()
        time.sleep(args.minutes * 60)
        stop.set()
        for t in threads:
            t.join()
        late = fleet.stop(grace=60)
        elapsed = time.monotonic() - t0

        acks = Acks(target.run_dir / "acks")
        figures, failures = check(target, acks, rng)
        ops: Counter[str] = Counter()
        by_family: Counter[str] = Counter()
        typed: Counter[str] = Counter()
        for ident, p in acks.progress.items():
            for op, n in p["ops"].items():
                if op in ("open", "close"):
                    continue
                ops[op] += n
                by_family[acks.families.get(ident, ident.rsplit("-", 2)[0])] += n
            typed.update(p["typed"])
        if fleet.worker_exits:
            failures["workers_exited_cleanly"] = [f"{f} exited with {rc}" for f, rc in fleet.worker_exits]
        raw = Counter(f"{r['type']} in {r['op']}" for r in acks.raw)
        result = {
            "mode": mode, "seed": seed, "minutes": args.minutes, "elapsed_s": round(elapsed, 1),
            "workers": sum(FAMILIES.values()), "incarnations": sum(fleet.incarnation.values()),
            "kills": fleet.kills, "killed_at_stop": late,
            "ops_per_s_by_family": {f: round(n / elapsed, 1) for f, n in sorted(by_family.items())},
            "ops_by_call": dict(sorted(ops.items())),
            "typed_errors": dict(sorted(typed.items())),
            "raw_errors": len(acks.raw), "raw_errors_by_type": dict(raw),
            "raw_error_samples": [{k: r[k] for k in ("worker", "op", "type", "msg", "tb")}
                                  for r in acks.raw[:5]],
            "longest_write_lock_wait_ms": round(probe["max_ms"], 1) if "max_ms" in probe else None,
            "lock_probes": int(probe.get("probes", 0)),
            "longest_write_call_ms": max((p.get("max_write_ms", 0) for p in acks.progress.values()),
                                         default=0),
            "torn_log_lines": acks.torn,
            **figures,
            "invariants_failed": failures,
        }
        result["ok"] = (result["rows_lost"] == 0 and result["raw_errors"] == 0 and not failures)
        if not result["ok"] and not args.keep:
            print(f"failed: keeping {target.run_dir} for inspection")
            target.keep = True
        return result
    finally:
        target.cleanup()


def report(r: dict[str, Any]) -> None:
    print(f"\n== chaos soak: {r['mode']} (journal {r['journal_mode']}; {r['minutes']} min, seed {r['seed']}, "
          f"{r['workers']} workers, {r['incarnations']} incarnations)")
    print(f"kills                     {r['kills']} (+{r['killed_at_stop']} at stop)")
    print("operations/s per family:  " + ", ".join(
        f"{f} {v:g}" for f, v in r["ops_per_s_by_family"].items()))
    print(f"rows acknowledged         {r['rows_acknowledged']}")
    print(f"rows lost                 {r['rows_lost']}")
    print(f"raw errors                {r['raw_errors']}" + (
        f"  {r['raw_errors_by_type']}" if r["raw_errors"] else ""))
    print(f"typed errors              {r['typed_errors'] or 0}")
    wait = r["longest_write_lock_wait_ms"]
    print("longest write-lock wait   " + (f"{wait} ms (BEGIN IMMEDIATE probe, {r['lock_probes']} probes)"
                                          if wait is not None else "n/a (no single write lock)")
          + f"; longest write call {r['longest_write_call_ms']} ms")
    print(f"integrity_check           {r['integrity_check']}")
    print(f"owned transcripts {r['owned_transcripts']}, compression publishes "
          f"{r['compression_publishes']}, search tokens compared {r['search_tokens_compared']}, "
          f"guards left by killed workers {r['guards_left_by_killed_workers']}")
    for name, items in r["invariants_failed"].items():
        print(f"INVARIANT FAILED {name}: {len(items)}")
        for item in items[:5]:
            print(f"    {item}")
    for sample in r["raw_error_samples"][:3]:
        print(f"RAW ERROR in {sample['worker']} {sample['op']}: {sample['type']}: {sample['msg']}")
        print("    " + sample["tb"].strip().replace("\n", "\n    ")[-1500:])
    print("RESULT: " + ("ok" if r["ok"] else "FAILED"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=10.0, help="duration of each run (default 10)")
    ap.add_argument("--backend", "--mode", dest="backend", default="sqlite-delete",
                    choices=(*MODES, "sqlite", "all"),
                    help="'sqlite': the journal-mode policy's choice (or HERMES_DATA_JOURNAL_MODE); "
                    "'all' runs the three named modes in sequence")
    ap.add_argument("--url", default=DEFAULT_PG,
                    help="PostgreSQL server (a private database is created and dropped)")
    ap.add_argument("--dir", help="where the SQLite files and ack logs go (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the files / databases afterwards")
    ap.add_argument("--seed", type=int)
    ap.add_argument("--json", help="write the figures to this file")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker_main(json.loads(args.worker))
    modes = MODES if args.backend == "all" else (args.backend,)
    results = []
    for mode in modes:
        results.append(run_mode(mode, args))
        report(results[-1])
    if args.json:
        Path(args.json).write_text(json.dumps(results if len(results) > 1 else results[0], indent=2))
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
