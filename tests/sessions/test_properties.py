"""Property test (issue 33, acceptance 3): random operation sequences on ``SessionStore``,
checked against a small Python model after every step, on a real SQLite file and on
PostgreSQL.

The machine (:class:`SessionMachine`) drives the public API the way the agent does —
sessions with and without parents, branch / delegate / reset children, single and batch
appends (texts from a small alphabet of Latin and CJK words glued by FTS-special characters
``"`` ``*`` ``-`` ``:``), ends and reopens, user and automatic titles, compression the two
ways it happens (an explicit ``end_session(…, 'compression')`` followed by a child, and the
atomic ``publish_compression_child``), in-place ``archive_and_compact``, rewind and
``restore_rewound``, delete, prune with a retention, the lineage-wide flags, compression locks
and turn leases — and keeps what each documented rule says should follow in a model. The
invariants (the rules are cited where they are implemented below):

* lineage — ``get_compression_chain`` / ``get_compression_tip`` / ``get_compression_root`` /
  ``get_lineage_ids`` equal the model's walk over ``EDGE``
  (docs/sessions.md §3.2, §3.3, §4.4); the tip is reachable from every member of its chain,
  is the chain's last element and has no continuation of its own;
* counters — each session's ``message_count`` / ``tool_call_count`` columns, the store's
  ``message_count`` (per session and store-wide, active and all) and ``session_count`` equal
  the rows they count (docs/sessions.md §5.5, §6.2, §6.3;
  docs/sessions-coordination.md §3.5 I2);
* transcripts — ``get_messages`` returns exactly the model's active rows in id order,
  ``include_inactive`` every row with its ``active`` / ``compacted`` state
  (docs/sessions.md §6.4; docs/sessions-coordination.md §3.15, §3.16);
* search — for a word of the alphabet (bare or wrapped in FTS syntax) ``search_messages``
  returns each matching row once, only rows holding the word that are live or compacted (not
  rewound, superseded or deleted), and every such row (docs/sessions.md §7.1, §7.2;
  docs/sessions-storage.md §3.9.3 for the CJK scope);
* titles — no two sessions share a non-empty title; renames, automatic titles, transfers from
  compression ancestors and the hidden 'Bot Chat' guard follow docs/sessions.md §4.5, and
  ``get_next_title_in_lineage`` / ``get_session_by_title`` agree with the model;
* retention — ``prune_sessions`` deletes exactly the ended, unpinned, old-enough sessions
  (without the guarded ones when asked) and never an open, pinned or guarded one
  (docs/sessions.md §7.5; docs/sessions-coordination.md §3.20); its dry runs agree with it.

Budget and reproducibility: the default run is derandomized (``derandomize=True``, no example
database), so CI replays the same sequences: ``EXAMPLES`` examples of up to ``STEPS`` steps per
backend. ``HERMES_DATA_PROPERTY_EXAMPLES=<n>`` runs ``n`` examples per backend with a random
seed instead (a failure prints the ``@reproduce_failure`` blob); ``HERMES_DATA_PROPERTY_STEPS``
changes the step count. See docs/development.md.
"""

from __future__ import annotations

import collections
import itertools
import logging
import os
import sys
import time
from dataclasses import dataclass, field

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (RuleBasedStateMachine, initialize, invariant, precondition,
                                 rule, run_state_machine_as_test)

from hermes_data.sessions.errors import (CompressionPublishError, CompressionSessionBusyError,
                                         CompressionSessionClosedError,
                                         SessionCompressionInProgressError,
                                         SessionTurnLeaseLostError)
from hermes_data.sessions.core import maintenance
from hermes_data.sessions.store import SessionStore

from tests.sessions.conftest import delete_store_rows

# -- budget -------------------------------------------------------------------------------

_LONG = os.environ.get("HERMES_DATA_PROPERTY_EXAMPLES")
#: Examples per backend by default: PostgreSQL answers each call in about 1.5 ms, SQLite in
#: about 0.1 ms; each backend takes 30–40 s on the development machine (two cores, load 3).
EXAMPLES = {"sqlite": 200, "postgresql": 50}
STEPS = int(os.environ.get("HERMES_DATA_PROPERTY_STEPS") or 30)


def profile(backend: str) -> settings:
    """The run's settings: derandomized unless ``HERMES_DATA_PROPERTY_EXAMPLES`` is set."""
    return settings(max_examples=int(_LONG) if _LONG else EXAMPLES[backend],
                    stateful_step_count=STEPS, deadline=None, derandomize=not _LONG,
                    database=None, print_blob=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                           HealthCheck.data_too_large])

# -- the alphabet -------------------------------------------------------------------------

#: Words no one of which is a substring of another, so "the row holds the word" is one
#: notion for the word index, the trigram index and LIKE alike.
LATIN = ("alpha", "bravo", "kilo", "zulu", "near")
CJK = ("服务端", "日本語", "検索", "한국어")
WORDS = LATIN + CJK
#: Glue between words: every one is a word boundary for unicode61 and for PostgreSQL's split.
SEPARATORS = (" ", "-", ":", '"', "*", ", ", " * ", '" "', "\n", " - ")
EDGES = ("", '"', "*", "-", ":")
#: Queries: a word bare, or wrapped in FTS syntax the sanitizer must neutralise.
DECORATIONS = ("{}", "{}*", '"{}"', "-{}", "{}:", "*{}", '{}"')
#: Queries of syntax only (never raise; every hit holds the typed text).
SYNTAX_ONLY = ('"', "*", "-", ":", '"*"', "- :")

SOURCES = ("cli", "telegram", "cron", "tool")
END_REASONS = ("user_exit", "compression", "agent_close", "session_reset",
               "startup_orphan_reap")
#: The members of docs/sessions.md §3.1's AUTOMATIC_END_REASONS used here.
AUTOMATIC = frozenset({"agent_close", "startup_orphan_reap", "ws_orphan_reap"})
#: Title inputs and what sanitize_title makes of them (docs/sessions.md §4.5).
TITLES = {"Plan": "Plan", "Plan #2": "Plan #2", "Plan #7": "Plan #7", "Bot Chat": "Bot Chat",
          "日本語 notes": "日本語 notes", " Plan\u200b ": "Plan", "  ": None, "x": "x"}
TITLE_RANK = {"derived": 0, "llm": 1, "user": 2}
#: Guard holders without ``pid=``: never provably dead (docs/sessions-coordination.md §3.2).
HOLDERS = ("holder-a", "holder-b")
#: Who presents a guard: nobody (most calls), its owner (nobody when there is none), or
#: another holder.
PRESENTER = st.sampled_from((None, None, None, "owner", "stranger"))
TOOL_CALL = {"id": "c1", "type": "function", "function": {"name": "zzfn", "arguments": "{}"}}
OLD_TS = 1_600_000_000.0  # 2020: in the LAST_ACTIVE window, older than any retention used
MARKERS = {"branch": "_branched_from", "delegate": "_delegate_from", "reset": "_reset_from"}


@st.composite
def texts(draw) -> str:
    """A message text: 0–4 words of the alphabet, glued and edged by FTS-special characters."""
    words = draw(st.lists(st.sampled_from(WORDS), max_size=4))
    out = draw(st.sampled_from(EDGES))
    for i, w in enumerate(words):
        if i:
            out += draw(st.sampled_from(SEPARATORS))
        out += w
    return out + draw(st.sampled_from(EDGES))


MESSAGE = st.fixed_dictionaries({
    "role": st.sampled_from(("user", "assistant", "tool")),
    "content": texts(),
    "tools": st.integers(0, 2),
    "old": st.booleans(),
})
#: A handoff row for the publications other rules make on the way.
HANDOFF = {"role": "user", "content": "[summary] alpha", "tools": 0, "old": False}
PICK = st.integers(0, 10_000)  # an index into the current candidates (shrinks to the first)
WATERMARK = st.sampled_from(("none", "zero", "last", "middle"))

log = logging.getLogger(__name__)
#: How often each rule ended each way over the run (logged at INFO after each backend's run).
OUTCOMES: collections.Counter[str] = collections.Counter()


# -- the model ----------------------------------------------------------------------------

@dataclass
class MMsg:
    """One message row as the model expects it."""

    id: int
    role: str
    content: str
    tools: int
    ts: float
    active: bool = True
    compacted: bool = False
    superseded: bool = False  # made inactive by a compaction (R ∪ T), not by a rewind


@dataclass
class MSession:
    """One session row as the model expects it."""

    id: str
    source: str
    parent: str | None
    marker: tuple[str, str] | None  # (marker key, the parent id it names)
    started_at: float
    end_reason: str | None = None
    title: str | None = None
    title_source: str | None = None
    pinned: bool = False
    archived: bool = False
    hidden: bool = False
    msgs: list[MMsg] = field(default_factory=list)
    rewind_count: int = 0

    def active(self) -> list[MMsg]:
        return [m for m in self.msgs if m.active]


@dataclass
class Spec:
    """A row about to be inserted: what the model expects back (``ts`` None = now)."""

    role: str
    content: str
    tools: int
    ts: float | None


def as_new(spec: Spec) -> dict:
    """The ``NewMessage`` mapping of a spec."""
    row: dict = {"role": spec.role, "content": spec.content}
    if spec.tools:
        row["tool_calls"] = [TOOL_CALL] * spec.tools
    if spec.ts is not None:
        row["timestamp"] = spec.ts
    return row


def expect(outcome, fn):
    """Run ``fn``; ``outcome`` is an exception class it must raise, or the value it must
    return (``...`` = any value). Returns the value (None after an expected exception).
    Each outcome is counted in :data:`OUTCOMES` under the calling rule's name."""
    rule_name = sys._getframe(1).f_code.co_name
    if isinstance(outcome, type) and issubclass(outcome, BaseException):
        OUTCOMES[f"{rule_name}: {outcome.__name__}"] += 1
        with pytest.raises(outcome):
            fn()
        return None
    OUTCOMES[f"{rule_name}: returns"] += 1
    got = fn()
    if outcome is not ...:
        assert got == outcome, f"expected {outcome!r}, got {got!r}"
    return got


class SessionMachine(RuleBasedStateMachine):
    """Random operation sequences against one empty store (see the module docstring)."""

    #: Opens the empty store of one example (set by the test per backend).
    open_store = None

    def __init__(self) -> None:
        super().__init__()
        self.store: SessionStore = type(self).open_store()
        # W1 (docs/sessions-coordination.md §3.6) retries a rewind that meets a live lock for
        # 5 s of the store's monotonic clock: a clock that leaps makes it give up at once.
        leaps = itertools.count(0, 1000.0)
        self.store.mono = lambda: float(next(leaps))  # type: ignore[method-assign]
        self.sessions: dict[str, MSession] = {}
        self.locks: dict[str, str] = {}   # session id -> holder (compression_locks)
        self.leases: dict[str, str] = {}  # conversation key -> holder (session_turn_leases)
        self.ids = itertools.count()
        self.old = itertools.count()
        self.max_id = 0
        self.turn = 0

    def teardown(self) -> None:
        self.store.close()

    # -- model helpers: the predicates and walks of docs/sessions.md §3.2, §3.3 ---------------

    def _new_id(self, prefix: str = "s") -> str:
        return f"{prefix}{next(self.ids):03d}"

    def _pick(self, i: int, pool) -> MSession:
        pool = sorted(pool, key=lambda s: s.id)
        return pool[i % len(pool)]

    def _spec(self, m: dict) -> Spec:
        ts = OLD_TS + next(self.old) if m["old"] else None
        return Spec(m["role"], m["content"], m["tools"], ts)

    @staticmethod
    def _fork(c: MSession, p: MSession) -> bool:
        # FORK(c, p): a tool run, or a marker naming its own parent.
        return c.source == "tool" or (c.marker is not None and c.marker[1] == p.id)

    def _edge(self, p: MSession, c: MSession) -> bool:
        # EDGE(p, c): c's parent is p, p ended with 'compression', and c is no fork of p.
        return c.parent == p.id and p.end_reason == "compression" and not self._fork(c, p)

    def _edge_children(self, p: MSession) -> list[MSession]:
        return [c for c in self.sessions.values() if self._edge(p, c)]

    @staticmethod
    def _last_active(s: MSession) -> float:
        # LAST_ACTIVE (docs/sessions.md §5.6): last_activity_at is never written here.
        window = [m.ts for m in s.msgs if 946684800 <= m.ts < 4102444800]
        return max(window) if window else s.started_at

    def _next(self, p: MSession) -> MSession | None:
        # The continuation of p: a child that itself continued, then a live one, then the
        # freshest by LAST_ACTIVE, started_at, id (docs/sessions.md §3.3).
        cands = self._edge_children(p)
        if len(cands) <= 1:
            return cands[0] if cands else None
        cands.sort(key=lambda c: c.id, reverse=True)
        cands.sort(key=lambda c: (0 if c.end_reason == "compression"
                                  else 1 if c.end_reason is None else 2,
                                  -self._last_active(c), -c.started_at))
        return cands[0]

    def _chain(self, s: MSession) -> list[str]:
        out, cur = [s.id], s
        while len(out) <= 100:
            nxt = self._next(cur)
            if nxt is None or nxt.id == s.id:
                break
            out.append(nxt.id)
            cur = nxt
        return out

    def _parent(self, s: MSession) -> MSession | None:
        return self.sessions.get(s.parent) if s.parent is not None else None

    def _root(self, s: MSession) -> MSession:
        cur = s
        while (p := self._parent(cur)) is not None and self._edge(p, cur):
            cur = p
        return cur

    def _ancestors(self, s: MSession) -> set[str]:
        out, cur = set(), s
        while (p := self._parent(cur)) is not None and self._edge(p, cur):
            out.add(p.id)
            cur = p
        return out

    def _lineage_set(self, s: MSession) -> list[MSession]:
        # docs/sessions.md §3.3 lineage set: ancestors and descendants over EDGE.
        seen = {s.id} | self._ancestors(s)
        frontier = [s]
        while frontier:
            nxt = []
            for p in frontier:
                for c in self._edge_children(p):
                    if c.id not in seen:
                        seen.add(c.id)
                        nxt.append(c)
            frontier = nxt
        return [self.sessions[i] for i in sorted(seen)]

    def _listable(self, s: MSession) -> bool:
        # LISTABLE (docs/sessions.md §3.2) without the legacy heuristics (no session keys
        # and no 'branched' parents here).
        if s.marker is not None and s.marker[0] == "_delegate_from":
            return False
        if s.parent is None:
            return True
        return s.marker is not None and s.marker[0] in ("_branched_from", "_reset_from") \
            and s.marker[1] == s.parent

    def _trigram_scope(self, s: MSession, m: MMsg) -> bool:
        # TRI_ROW (docs/sessions.md §2.6): what the trigram / CJK-bigram indexes hold.
        delegate = s.marker is not None and s.marker[0] == "_delegate_from"
        return m.role != "tool" and s.source not in ("cron", "subagent") and not delegate

    def _sync(self, s: MSession, specs: list[Spec]) -> list[MMsg]:
        """Read back the rows an operation inserted into ``s`` (new ids, in order) and check
        them against ``specs``; returns the new model rows, appended to ``s``."""
        known = {m.id for m in s.msgs}
        rows = self.store.get_messages(s.id, include_inactive=True)
        new = [r for r in rows if r.id not in known]
        assert len(new) == len(specs), (s.id, [r.id for r in new], specs)
        out = []
        for r, spec in zip(new, specs):
            assert r.id > self.max_id, f"message id {r.id} not above {self.max_id} (I3)"
            self.max_id = r.id
            assert (r.role, r.content) == (spec.role, spec.content), (r, spec)
            assert len(r.tool_calls or []) == spec.tools, (r, spec)
            assert r.active and not r.compacted, r
            if spec.ts is not None:
                assert r.timestamp == spec.ts, (r.timestamp, spec.ts)
            out.append(MMsg(r.id, r.role, r.content, spec.tools, r.timestamp))
        s.msgs.extend(out)
        return out

    @staticmethod
    def _presenter(who: str | None, owner: str | None) -> str | None:
        if who is None:
            return None
        if who == "owner":
            return owner
        return HOLDERS[1] if owner == HOLDERS[0] else HOLDERS[0]

    def _index(self, s: MSession) -> int:
        # The PICK value that selects ``s`` among all sessions.
        return sorted(self.sessions).index(s.id)

    def _choose(self, i: int, live: bool, pool=None, publishable: bool = False) -> MSession:
        # A session for a write: with ``live``, preferably one that can take it (not ended
        # with 'compression'; for a publication, open or automatically ended).
        pool = list(self.sessions.values()) if pool is None else pool
        if live:
            if publishable:
                ok = [s for s in pool if s.end_reason is None or s.end_reason in AUTOMATIC]
            else:
                ok = [s for s in pool if not self._write_closed(s)]
            pool = ok or pool
        return self._pick(i, pool)

    def _write_closed(self, s: MSession) -> bool:
        # Admission (docs/sessions.md §6.2): a compression-ended session takes no new rows.
        return s.end_reason == "compression"

    def _create(self, sid: str, source: str, parent: MSession | None,
                marker: tuple[str, str] | None, hidden: bool) -> MSession:
        row = self.store.get_session(sid)
        assert row is not None and row.source == source
        assert row.parent_session_id == (parent.id if parent else None)
        s = MSession(sid, source, parent.id if parent else None, marker, row.started_at,
                     hidden=hidden)
        self.sessions[sid] = s
        return s

    # -- rules: lifecycle (docs/sessions.md §4.1, §4.2) --------------------------------------

    @initialize(source=st.sampled_from(SOURCES), ms=st.lists(MESSAGE, min_size=1, max_size=5))
    def first_session(self, source, ms):
        """Every example starts from one session holding a few rows."""
        sid = self._new_id()
        expect(sid, lambda: self.store.create_session(sid, source))
        s = self._create(sid, source, None, None, False)
        specs = [self._spec(m) for m in ms]
        expect(len(specs), lambda: self.store.append_messages_batch(
            sid, [as_new(x) for x in specs]))
        self._sync(s, specs)

    @rule(how=st.sampled_from(("root", "child", "stale", "branch", "delegate", "reset",
                               "again", "bot")),
          source=st.sampled_from(SOURCES), i=PICK, hidden=st.booleans(),
          under_split=st.booleans(), claim=st.booleans())
    def create(self, how, source, i, hidden, under_split, claim):
        """docs/sessions.md §4.1: a root; a plain child (a continuation once its parent ends
        with 'compression', docs/sessions.md §3.2 — with ``under_split`` the parent already
        did: upstream's non-atomic split, and the duplicate continuations the chain walk
        chooses among, docs/sessions.md §3.3); a ``stale`` one, such a child beside an
        existing continuation (published first if there is none) at once closed by
        'ws_orphan_reap'; a ``create_child_session`` fork (its marker names the parent: never
        a continuation); a repeated create (fills NULLs only, keeps ``source`` and the
        parent); or a bot's canonical chat, a hidden root titled 'Bot Chat', which something
        then tries to rename (the guard of docs/sessions.md §4.5). ``claim``: a new
        continuation then takes its parent's title over."""
        if not self.sessions:
            how = "root"
        if how == "again":
            s = self._pick(i, self.sessions.values())
            expect(s.id, lambda: self.store.create_session(s.id, source))
            row = self.store.get_session(s.id)
            assert (row.source, row.started_at, row.parent_session_id) == \
                (s.source, s.started_at, s.parent), (s, row)
            return
        parent = None
        bot = how == "bot"
        if bot:
            how, hidden, source = "root", True, "telegram"
        if how != "root":
            split = [s for s in self.sessions.values() if s.end_reason == "compression"]
            if how == "stale":  # a duplicate beside a continuation: publish one if need be
                split = [s for s in split if self._edge_children(s)]
                if not split:
                    self.publish_compression_child(i, True, "cli", [HANDOFF], "none", None,
                                                   None)
                    split = [s for s in self.sessions.values()
                             if s.end_reason == "compression" and self._edge_children(s)]
            parent = self._pick(i, split if (under_split or how == "stale") and split
                                else self.sessions.values())
        sid = self._new_id()
        if how in MARKERS:
            expect(sid, lambda: self.store.create_child_session(parent.id, sid, how))
            self._create(sid, parent.source, parent, (MARKERS[how], parent.id), False)
            return
        expect(sid, lambda: self.store.create_session(
            sid, source, parent_session_id=parent.id if parent else None, hidden=hidden))
        child = self._create(sid, source, parent, None, hidden)
        if claim and parent is not None and self._edge(parent, child):
            # upstream's non-atomic split left the title on the parent: the continuation
            # takes it over (a title held by a compression ancestor moves: docs/sessions.md §4.5)
            if parent.title is None:
                self.title(self._index(parent), "Plan #7", "user")
            self.title(self._index(child), parent.title or "Plan #7", "user")
        if bot:
            self.title(self._index(child), "Bot Chat", "user")
            self.title(self._index(child), "x", "llm")
            self.title(self._index(child), "x", "user")
        if how == "stale":
            expect(True, lambda: self.store.end_session(sid, "ws_orphan_reap"))
            child.end_reason = "ws_orphan_reap"

    @precondition(lambda self: self.sessions)
    @rule(i=PICK, reason=st.sampled_from((*END_REASONS, "reopen")))
    def end_or_reopen(self, i, reason):
        """End: the first reason wins (docs/sessions.md §4.2). Reopen: clears the end fields,
        except a compression parent with a continuation — any non-fork child — stays ended
        (docs/sessions-coordination.md §3.22 A8). Ends go to open sessions, reopens to ended
        ones, when there are any."""
        want_open = reason != "reopen"
        s = self._pick(i, [x for x in self.sessions.values()
                           if (x.end_reason is None) == want_open] or self.sessions.values())
        if reason != "reopen":
            expect(s.end_reason is None, lambda: self.store.end_session(s.id, reason))
            if s.end_reason is None:
                s.end_reason = reason
            return
        continued = s.end_reason == "compression" and any(
            c.parent == s.id and not self._fork(c, s) for c in self.sessions.values())
        ok = s.end_reason is not None and not continued
        expect(ok, lambda: self.store.reopen_session(s.id))
        if ok:
            s.end_reason = None

    # -- rules: messages (docs/sessions.md §6.2, §6.3; docs/sessions-coordination.md §3.14) --

    @precondition(lambda self: self.sessions)
    @rule(i=PICK, live=st.booleans(), ms=st.lists(MESSAGE, max_size=4), single=st.booleans(),
          who=PRESENTER)
    def append(self, i, live, ms, single, who):
        """``append_message`` (one row) or ``append_messages_batch`` (all or nothing, empty ⇒
        0 and no transaction). With ``turn_lease_holder`` the conversation's lease must be that
        holder's (docs/sessions-coordination.md §3.14); then admission refuses a
        compression-ended session (docs/sessions.md §6.2)."""
        s = self._choose(i, live)
        fenced = self._presenter(who, self.leases.get(self._root(s).id))
        kw = {"turn_lease_holder": fenced} if fenced else {}
        specs = [self._spec(m) for m in ms]
        if single and specs:
            specs = specs[:1]
            row = as_new(specs[0])
            call = lambda: self.store.append_message(s.id, **row, **kw)  # noqa: E731
        else:
            rows = [as_new(x) for x in specs]
            call = lambda: self.store.append_messages_batch(s.id, rows, **kw)  # noqa: E731
        if not specs:
            expect(0, call)
        elif fenced and self.leases.get(self._root(s).id) != fenced:
            expect(SessionTurnLeaseLostError, call)
        elif self._write_closed(s):
            expect(CompressionSessionClosedError, call)
        else:
            got = expect(..., call)
            new = self._sync(s, specs)
            assert got == (new[0].id if single else len(specs)), (got, new)
            return
        self._sync(s, [])

    # -- rules: compression (docs/sessions.md §4.3; docs/sessions-coordination.md §3.10, §3.15)

    def _watermark(self, s: MSession, wm: str) -> int | None:
        active = s.active()
        return {"none": None, "zero": 0, "last": active[-1].id if active else 0,
                "middle": active[len(active) // 2].id if active else 0}[wm]

    @precondition(lambda self: self.sessions)
    @rule(i=PICK, live=st.booleans(), source=st.sampled_from(SOURCES),
          handoff=st.lists(MESSAGE, min_size=1, max_size=2), wm=WATERMARK, who=PRESENTER,
          flag=st.sampled_from((None, None, "pinned", "archived", "hidden")))
    def publish_compression_child(self, i, live, source, handoff, wm, who, flag):
        """The atomic split: the lease check when a holder is presented, automatic end stamps
        cleared and other ends refused; the child gets the handoff and the parent's active rows
        above the watermark, the parent's flags and its title; the parent ends with
        'compression' (a child with source 'tool' is a fork, so the chain stops there).
        ``flag`` first sets a lineage flag on the parent."""
        p = self._choose(i, live, publishable=True)
        if flag:  # the parent's lineage flag first: the child must carry it
            self.set_flag(self._index(p), flag, True)
        holder = self._presenter(who, self.locks.get(p.id))
        specs = [self._spec(m) for m in handoff]
        watermark = self._watermark(p, wm)
        cid = self._new_id("c")
        call = lambda: self.store.publish_compression_child(  # noqa: E731
            p.id, cid, source, [as_new(x) for x in specs], watermark=watermark,
            compression_lock_holder=holder)
        if holder is not None and self.locks.get(p.id) != holder:
            expect(CompressionSessionBusyError, call)
            return
        if p.end_reason is not None and p.end_reason not in AUTOMATIC:
            expect(CompressionPublishError, call)
            return
        res = expect(..., call)
        clones = [m for m in p.active() if watermark is not None and m.id > watermark]
        assert (res.child_session_id, res.handoff_rows, res.cloned_rows, res.title_moved) == \
            (cid, len(specs), len(clones), p.title is not None), res
        child = self._create(cid, source, p, None, p.hidden)
        child.pinned, child.archived = p.pinned, p.archived
        child.title, child.title_source = p.title, p.title_source
        p.title = p.title_source = None
        p.end_reason = "compression"
        self._sync(child, specs + [Spec(m.role, m.content, m.tools, m.ts) for m in clones])

    @precondition(lambda self: self.sessions)
    @rule(i=PICK, live=st.booleans(), compacted=st.lists(MESSAGE, min_size=1, max_size=3),
          wm=WATERMARK, tail=st.integers(0, 3), who=PRESENTER)
    def archive_and_compact(self, i, live, compacted, wm, tail, who):
        """In-place compaction (docs/sessions-coordination.md §3.15): with a holder its lock
        must be live; rows above the watermark (T) and the verbatim tail's originals (R)
        are superseded, the other active rows compacted (still searchable); the summary is
        inserted, then T cloned; the counters follow the active rows (I2)."""
        s = self._choose(i, live)
        holder = self._presenter(who, self.locks.get(s.id))
        specs = [self._spec(m) for m in compacted]
        tail = min(tail, len(specs))
        watermark = self._watermark(s, wm)
        call = lambda: self.store.archive_and_compact(  # noqa: E731
            s.id, [as_new(x) for x in specs], watermark=watermark, lock_holder=holder,
            tail_count=tail)
        if holder is not None and self.locks.get(s.id) != holder:
            expect(CompressionSessionBusyError, call)
            return
        if self._write_closed(s):
            expect(CompressionSessionClosedError, call)
            return
        active = s.active()
        above = [m for m in active if watermark is not None and m.id > watermark]
        below = [m for m in active if watermark is None or m.id <= watermark]
        superseded = {m.id for m in above + (below[max(0, len(below) - tail):] if tail else [])}
        for m in active:
            m.active = False
            m.compacted = m.id not in superseded
            m.superseded = m.id in superseded
        expect(len(specs) + len(above), call)
        self._sync(s, specs + [Spec(m.role, m.content, m.tools, m.ts) for m in above])

    # -- rules: rewind (docs/sessions-coordination.md §3.16) ---------------------------------

    def _fence_error(self, s: MSession):
        # F(s) — a live lock on s, then a live lease on KEY(s) — then P(s): a
        # compression-ended session is closed (docs/sessions-coordination.md §3.15).
        if s.id in self.locks:
            return SessionCompressionInProgressError
        if self._root(s).id in self.leases:
            return SessionTurnLeaseLostError
        if self._write_closed(s):
            return CompressionSessionClosedError
        return None

    @precondition(lambda self: any(s.msgs for s in self.sessions.values()))
    @rule(i=PICK, live=st.booleans(), j=PICK, undo=st.booleans(),
          any_row=st.sampled_from((False, False, False, True)))
    def rewind(self, i, live, j, undo, any_row):
        """``rewind_to_message``: a user row and every later active row become inactive,
        ``rewind_count`` counts the operation, a row of another role is refused.
        ``restore_rewound``: undoes the latest rewind only — refused when the transcript
        moved on, when a compacted row lies at or above ``since`` or a rewound row would stay
        a hole. Both are fenced by live guards (F) and refuse a closed session (P)."""
        pool = [x for x in self.sessions.values() if x.msgs]
        s = self._choose(i, live, pool=pool)
        err = self._fence_error(s)
        active = s.active()
        head = active[-1].id if active else 0
        tail = [m for m in s.msgs if m.id > head and not m.active and not m.compacted]
        if not undo or not (tail or any_row):
            users = [m for m in s.msgs if m.role == "user"]
            rows = s.msgs if any_row or not users else users
            target = rows[j % len(rows)]
            call = lambda: self.store.rewind_to_message(s.id, target.id)  # noqa: E731
            err = err or (ValueError if target.role != "user" else None)
            if err is not None:
                expect(err, call)
                return
            rewound = [m for m in active if m.id >= target.id]
            res = expect(..., call)
            assert res.rewound_ids == tuple(m.id for m in rewound), res
            for m in rewound:
                m.active = False
            s.rewind_count += 1
            left = s.active()
            assert res.new_head_id == (left[-1].id if left else None), res
            return
        # The latest rewind starts at the first rewound row above the head; a later one
        # would leave a hole (refused), and any row tests the other refusals.
        if tail and not any_row:
            since = (tail[-1] if j % 2 else tail[0]).id
        else:
            since = s.msgs[j % len(s.msgs)].id
        call = lambda: self.store.restore_rewound(s.id, since)  # noqa: E731
        if err is None and (since <= head or any(
                (m.id >= since and m.compacted)
                or (not m.active and not m.compacted and head < m.id < since)
                for m in s.msgs)):
            err = ValueError
        if err is not None:
            expect(err, call)
            return
        back = [m for m in s.msgs if m.id >= since]
        if any(m.superseded for m in back):
            # Superseded originals look like rewound rows (both active = 0, compacted = 0):
            # restoring them is the open gap of test_coord_rewind.py's
            # test_c36_restore_never_reactivates_superseded_originals. A refusal (the
            # intended behaviour) or today's restore are both accepted, and followed.
            OUTCOMES["rewind: restore over superseded originals"] += 1
            try:
                got = self.store.restore_rewound(s.id, since)
            except ValueError:
                return
            assert got == len(back)
        else:
            expect(len(back), call)
        for m in back:
            m.active = True

    # -- rules: titles (docs/sessions.md §4.5) -----------------------------------------------

    @precondition(lambda self: self.sessions)
    @rule(i=PICK, raw=st.sampled_from(sorted(TITLES)),
          source=st.sampled_from(("user", "derived", "llm")),
          taken=st.sampled_from((None, None, "ancestor", "other")), retitle=st.booleans())
    def title(self, i, raw, source, taken=None, retitle=False):
        """User rename (``set_session_title``): lands subject to the hidden 'Bot Chat' guard
        and uniqueness; a title held by a compression ancestor moves to the caller; blank
        clears. Automatic title (``set_auto_title``): only over an untitled row or a strictly
        lower rank, never over the guard (False), blank is a no-op; uniqueness as for users.
        ``taken``: on a continuation, the title a compression ancestor holds (the parent is
        titled first if no ancestor is), or one another session holds. Then
        ``get_next_title_in_lineage`` numbers after the model's titles. ``retitle`` picks a
        titled session when there is one (where the ranks decide)."""
        pool = [x for x in self.sessions.values() if x.title or not retitle]
        if taken == "ancestor":  # a continuation, when there is one
            pool = [x for x in pool if self._ancestors(x)] or pool
        s = self._pick(i, pool or self.sessions.values())
        if taken:
            up = self._ancestors(s)
            parent = self._parent(s)
            if taken == "ancestor" and up and parent is not None \
                    and not any(self.sessions[a].title for a in up):
                self.title(self._index(parent), "Plan #7", "user")
            held = sorted((x.id, x.title) for x in self.sessions.values()
                          if x.title and x.id != s.id and (x.id in up) == (taken == "ancestor"))
            raw = held[0][1] if held else raw
        title = TITLES.get(raw, raw)
        user = source == "user"
        if user:
            call = lambda: self.store.set_session_title(s.id, raw)  # noqa: E731
        else:
            call = lambda: self.store.set_auto_title(s.id, raw, source)  # noqa: E731
        holder = next((x for x in self.sessions.values()
                       if title is not None and x.title == title and x.id != s.id), None)
        if not user and title is None:
            outcome = False
        elif s.hidden and s.title == "Bot Chat" and title != "Bot Chat":
            outcome = ValueError if user else False
        elif not user and s.title is not None \
                and TITLE_RANK.get(s.title_source or "user", 2) >= TITLE_RANK[source]:
            outcome = False
        elif holder is not None and holder.id not in self._ancestors(s):
            outcome = ValueError
        else:
            outcome = True
        expect(outcome, call)
        if outcome is True:
            if holder is not None:
                holder.title = holder.title_source = None
            s.title, s.title_source = title, (source if title is not None else None)
        self._check_next_titles()

    def _check_next_titles(self) -> None:
        # get_next_title_in_lineage: the base when no title is the base or ``base #N``, else
        # ``base #(max(N, 1) + 1)``; a trailing ``#N`` of the argument is stripped first.
        for base in ("Plan", "Plan #5", "Bot Chat", "x"):
            stem = base.split(" #")[0]
            numbers = []
            for x in self.sessions.values():
                if x.title == stem:
                    numbers.append(1)
                elif x.title and x.title.startswith(stem + " #") \
                        and x.title[len(stem) + 2:].isdigit():
                    numbers.append(int(x.title[len(stem) + 2:]))
            want = f"{stem} #{max(max(numbers), 1) + 1}" if numbers else stem
            assert self.store.get_next_title_in_lineage(base) == want, (base, want)

    # -- rules: flags (docs/sessions.md §4.6) ------------------------------------------------

    @precondition(lambda self: self.sessions)
    @rule(i=PICK, flag=st.sampled_from(("pinned", "archived", "hidden")), value=st.booleans())
    def set_flag(self, i, flag, value):
        """Lineage-wide (the lineage set of docs/sessions.md §3.3); pinning also un-hides the
        lineage unless it holds a hidden 'Bot Chat'. A call that changes a row returns True
        (what an unchanged repeat returns is issue 33's fidelity question: not asserted)."""
        s = self._pick(i, self.sessions.values())
        lineage = self._lineage_set(s)
        changed = any(getattr(x, flag) != value for x in lineage)
        for x in lineage:
            setattr(x, flag, value)
        if flag == "pinned" and value and not any(x.hidden and x.title == "Bot Chat"
                                                  for x in lineage):
            changed |= any(x.hidden for x in lineage)
            for x in lineage:
                x.hidden = False
        fn = {"pinned": self.store.set_session_pinned, "archived": self.store.set_session_archived,
              "hidden": self.store.set_session_hidden}[flag]
        got = expect(..., lambda: fn(s.id, value))
        if changed:
            assert got is True, (flag, value, s.id)

    # -- rules: guards (docs/sessions-coordination.md §3.3, §3.10, §3.14) --------------------

    @precondition(lambda self: self.sessions)
    @rule(i=PICK, lease=st.booleans(), holder=st.sampled_from(HOLDERS), release=st.booleans())
    def guard(self, i, lease, holder, release):
        """A compression lock (keyed by the session) or a turn lease (keyed by the
        conversation: the compression root): acquiring answers True unless another holder's
        row is live; releasing is holder-matched and idempotent."""
        s = self._pick(i, self.sessions.values())
        rows, key = (self.leases, self._root(s).id) if lease else (self.locks, s.id)
        if release:
            fn = self.store.release_session_turn_lease if lease \
                else self.store.release_compression_lock
            expect(None, lambda: fn(s.id, holder))
            if rows.get(key) == holder:
                del rows[key]
            return
        fn = self.store.try_acquire_session_turn_lease if lease \
            else self.store.try_acquire_compression_lock
        ok = rows.get(key, holder) == holder
        expect(ok, lambda: fn(s.id, holder))
        if ok:
            rows[key] = holder
        if not lease:
            assert self.store.get_compression_lock_holder(s.id) == self.locks.get(s.id)

    # -- rules: deletion and retention (docs/sessions.md §7.4, §7.5) -------------------------

    def _forget(self, doomed: set[str]) -> None:
        for sid in doomed:
            del self.sessions[sid]
            assert self.store.get_session(sid) is None and self.store.get_messages(sid) == [], sid
        for s in self.sessions.values():  # children outside the set are orphaned
            if s.parent in doomed:
                s.parent = None

    @precondition(lambda self: len(self.sessions) > 1)
    @rule(i=PICK)
    def delete_session(self, i):
        """The session and its delegate descendants (the marker naming one in the frontier,
        or a delegate marker under a parent in it); other children are orphaned."""
        s = self._pick(i, self.sessions.values())
        doomed, frontier = {s.id}, {s.id}
        while frontier:
            nxt = {c.id for c in self.sessions.values() if c.id not in doomed
                   and c.marker is not None and c.marker[0] == "_delegate_from"
                   and (c.marker[1] in frontier or c.parent in frontier)}
            doomed |= nxt
            frontier = nxt
        expect(True, lambda: maintenance.delete_session(self.store, s.id))
        self._forget(doomed)

    def _prune_matches(self, everything: bool) -> tuple[set[str], set[str]]:
        # What the prune filter matches (docs/sessions.md §7.5), and the open sessions its
        # ended guard spares. ``everything``: a cutoff in the future; else one day, which only
        # sessions whose every row carries an old timestamp are past (their start is now).
        def old(s: MSession) -> bool:
            return everything or (bool(s.msgs) and all(m.ts < OLD_TS + 1e6 for m in s.msgs))

        unpinned = [s for s in self.sessions.values() if not s.pinned and old(s)]
        matches = {s.id for s in unpinned if s.end_reason is not None and (
            everything or s.end_reason != "startup_orphan_reap")}
        return matches, {s.id for s in unpinned if s.end_reason is None}

    @precondition(lambda self: self.sessions)
    @rule(everything=st.sampled_from((True, True, False)), guards=st.booleans(), i=PICK,
          protect=st.sampled_from((None, "pinned", "lock", "lease")))
    def prune_sessions(self, everything, guards, i, protect):
        """Retention: ended, unpinned sessions whose last activity is before the cutoff (a
        swept 'startup_orphan_reap' row ages from its close); with
        ``exclude_active_write_guards`` none under a live lock nor in a conversation whose
        root holds a live lease. Never an open, pinned or (so asked) guarded one
        (docs/sessions-coordination.md §3.20). The dry runs name the same sessions; the open
        twin counts what the ended guard spared. ``protect`` first pins, locks or leases a
        candidate (ending a session when there is none), through the rules above, so that
        the kinds prune must keep meet it often."""
        if everything:  # a cutoff in the future: every ended, unpinned session is old
            kw: dict = {"older_than_days": None, "last_active_before": time.time() + 3600}
        else:  # one day: only sessions whose every row carries an old timestamp
            kw = {"older_than_days": 1}
        matches, spared_open = self._prune_matches(everything)
        if protect and everything and not matches:  # make a candidate: end an open session
            s = self._pick(i, self.sessions.values())
            self.end_or_reopen(self._index(s), "user_exit")
            matches, spared_open = self._prune_matches(everything)
        if protect and matches:
            s = self._pick(i, [self.sessions[sid] for sid in matches])
            if protect == "pinned":
                self.set_flag(self._index(s), "pinned", True)
            else:
                self.guard(self._index(s), protect == "lease", HOLDERS[0], False)
            matches, spared_open = self._prune_matches(everything)
        guarded = {sid for sid in matches
                   if sid in self.locks or self._root(self.sessions[sid]).id in self.leases}
        assert {c.id for c in maintenance.list_prune_candidates(self.store, **kw)} == matches
        assert maintenance.count_prune_matches(self.store, **kw) == len(matches)
        assert maintenance.count_open_prune_matches(self.store, **kw) == len(spared_open)
        doomed = matches - guarded if guards else matches
        kept = {s.id for s in self.sessions.values()
                if s.end_reason is None or s.pinned or (guards and s.id in guarded)}
        expect(len(doomed), lambda: maintenance.prune_sessions(
            self.store, exclude_active_write_guards=guards, **kw))
        for sid in kept:
            assert self.store.get_session(sid) is not None, f"prune deleted the kept {sid}"
        self._forget(doomed)

    # -- rules: search (docs/sessions.md §7.1, §7.2) -----------------------------------------

    def _expected_hits(self, word: str) -> set[int]:
        out = set()
        for s in self.sessions.values():
            for m in s.msgs:
                if not (m.active or m.compacted) or word not in m.content:
                    continue
                if word in CJK and not self._trigram_scope(s, m):
                    # CJK queries go to the trigram / bigram scope
                    continue  # (docs/sessions-storage.md §3.9.3)
                out.add(m.id)
        return out

    @rule(word=st.sampled_from(WORDS + SYNTAX_ONLY), deco=st.sampled_from(DECORATIONS))
    def search(self, word, deco):
        """Each hit once, of a live session, live or compacted (never rewound, superseded
        or deleted). A word of the alphabet, bare or wrapped in FTS syntax: exactly the rows
        holding it (for a CJK word, those in the trigram scope). Syntax alone: never raises,
        every hit holds the typed text."""
        self._check_search(word if word in SYNTAX_ONLY else deco.format(word), word)

    def _check_search(self, query: str, word: str) -> None:
        hits = expect(..., lambda: self.store.search_messages(
            query, limit=1000, fields=["id", "session_id"]))
        ids = [h.id for h in hits]
        assert len(ids) == len(set(ids)), f"{query!r}: a row returned twice: {ids}"
        rows = {m.id: (s, m) for s in self.sessions.values() for m in s.msgs}
        for h in hits:
            assert h.id in rows, f"{query!r}: hit {h.id} is not a row of a live session"
            s, m = rows[h.id]
            assert h.session_id == s.id
            assert m.active or m.compacted, f"{query!r}: hit {h.id} was rewound or superseded"
            if word in SYNTAX_ONLY:
                assert query.strip() in m.content, (query, m.content)
        if word not in SYNTAX_ONLY:
            want = self._expected_hits(word)
            assert set(ids) == want, (query, sorted(set(ids) - want), sorted(want - set(ids)))

    # -- invariants -------------------------------------------------------------------------

    @invariant()
    def sessions_match(self):
        """Rows, counters, flags, titles and transcripts equal the model; deleted sessions are
        gone (docs/sessions.md §5.1, §6.4; I2 of docs/sessions-coordination.md §3.5)."""
        OUTCOMES["(states checked)"] += 1
        titles = {}
        for s in self.sessions.values():
            row = self.store.get_session(s.id)
            assert row is not None, f"{s.id} vanished"
            act = s.active()
            assert (row.parent_session_id, row.end_reason, row.source) == \
                (s.parent, s.end_reason, s.source), (s.id, row)
            assert (row.ended_at is None) == (s.end_reason is None)
            assert (row.title, row.title_source) == (s.title, s.title_source), (s.id, row)
            assert (row.pinned, row.archived, row.hidden) == (s.pinned, s.archived, s.hidden), \
                (s.id, row)
            assert row.message_count == len(act), (s.id, row.message_count, len(act))
            assert row.tool_call_count == sum(m.tools for m in act), s.id
            if getattr(row, "rewind_count", None) is not None:  # once rows carry it (issue 33)
                assert row.rewind_count == s.rewind_count, s.id
            assert self.store.message_count(s.id) == len(act)
            got = [(m.id, m.role, m.content) for m in self.store.get_messages(s.id)]
            assert got == [(m.id, m.role, m.content) for m in act], s.id
            every = [(m.id, m.active, m.compacted)
                     for m in self.store.get_messages(s.id, include_inactive=True)]
            assert every == [(m.id, m.active, m.compacted) for m in s.msgs], s.id
            if row.title:
                assert row.title not in titles, f"title {row.title!r}: {titles[row.title]}, {s.id}"
                titles[row.title] = s.id
        for title, sid in titles.items():
            assert self.store.get_session_by_title(title).id == sid
        n_active = sum(len(s.active()) for s in self.sessions.values())
        assert self.store.message_count() == n_active
        assert self.store.message_count(include_inactive=True) == \
            sum(len(s.msgs) for s in self.sessions.values())
        listed = [s for s in self.sessions.values()
                  if self._listable(s) and not s.archived and not s.hidden]
        assert self.store.session_count() == len(listed)

    @invariant()
    def search_matches(self):
        """The search rule's check for one word of the alphabet per state, in turn (each
        state searches, whichever rules the example enables)."""
        self.turn += 1
        word = WORDS[self.turn % len(WORDS)]
        self._check_search(DECORATIONS[self.turn % len(DECORATIONS)].format(word), word)

    @invariant()
    def lineage_matches(self):
        """docs/sessions.md §4.4: chain, tip, root and lineage ids follow EDGE; the tip is
        reached from every member of its chain and continues nowhere."""
        tips = {sid: self.store.get_compression_tip(sid) for sid in self.sessions}
        for s in self.sessions.values():
            chain = self._chain(s)
            assert self.store.get_compression_chain(s.id) == chain, s.id
            tip = tips[s.id]
            assert tip == chain[-1], (s.id, tip, chain)
            assert self._edge_children(self.sessions[tip]) == [], tip
            for member in chain:
                assert tips[member] == tip, (member, tips[member], tip)
            root = self._root(s)
            assert self.store.get_compression_root(s.id) == root.id, s.id
            assert self.store.get_lineage_ids(s.id) == self._chain(root), s.id


def run_machine(open_store, backend: str) -> None:
    """Run :class:`SessionMachine` with :func:`profile` on stores from ``open_store``."""
    machine = type("Machine", (SessionMachine,), {"open_store": staticmethod(open_store)})
    run_state_machine_as_test(machine, settings=profile(backend))


def test_session_store_properties(backend, tmp_path, request):
    """The machine on a fresh SQLite file per example, or on the session's PostgreSQL
    database emptied per example (``DELETE`` of every store table)."""
    counter = itertools.count()
    if backend == "sqlite":
        def open_store() -> SessionStore:
            # Results and atomicity are checked, not durability: no fsync per commit (as
            # the PostgreSQL scratch database's synchronous_commit = off).
            return SessionStore(tmp_path / f"ex{next(counter)}" / "state.db",
                                config={"database": {"synchronous": "OFF"}})
    else:
        url = request.getfixturevalue("pg_session_url")
        engine = sa.create_engine(url)
        request.addfinalizer(engine.dispose)

        def open_store() -> SessionStore:
            delete_store_rows(engine)
            return SessionStore(url)
    OUTCOMES.clear()
    run_machine(open_store, backend)
    log.info("%s outcomes: %s", backend,
             ", ".join(f"{k} ×{v}" for k, v in sorted(OUTCOMES.items())))
