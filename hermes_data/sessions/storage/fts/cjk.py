"""The CJK-bigram index (docs/sessions-storage.md §3.9.2–§3.9.3; issue 16 item 4).

A 1–2-letter CJK query has no trigram, so before this index it was answered by a LIKE scan
(p95 ~200 ms at 200,000 messages). Upstream loads a native bigram tokenizer; here the letter
pairs are computed in Python and indexed by SQLite's built-in ``ascii`` tokenizer (the
objects: :mod:`hermes_data.sessions.storage.fts.cjk_sql`):

* :func:`cjk_document` — a message's document: for every maximal run of CJK letters
  (:data:`CJK_LETTER`) in ``content``, ``tool_name`` and ``tool_calls``, a one-letter run
  gives itself, a longer run every adjacent pair and its last letter; distinct, in
  code-point order, space-joined.
* :func:`cjk_index_tokens` — a query term's tokens (a one-letter run ⇒ the prefix
  ``"c"*``, a longer one ⇒ its pairs). Every occurrence of a letter starts a pair or is a
  run's last letter, and every occurrence of a longer run contains all its pairs, so the
  candidates of a term's tokens are a superset of the rows holding the text.
* :func:`index_step` — one write transaction: a backfill chunk (window markers) or a queue
  drain. Documents are written only here, after the transcript write committed (an index
  failure never fails a canonical write): :func:`after_append` runs one bounded drain
  after an append that may have queued ids (known in Python, no query), while earlier work
  remains, and every :data:`DRAIN_EVERY` writes (a foreign writer's queued rows).

The search over the index (the FTS5 expression of a query, the windowed pre-scan, the
candidates verified by the core ``LIKE`` predicate) is
:mod:`hermes_data.sessions.search.cjk`.

PostgreSQL (revision ``s07_storage``): ``hermes_cjk_grams(role, content, tool_name,
tool_calls)`` returns a row's distinct letters and adjacent letter pairs, indexed by the partial
GIN index ``messages_cjk_grams`` (searched by
:func:`hermes_data.sessions.search.cjk.pg_bigram_search`).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from hermes_data.config import config_section
from hermes_data.sessions.storage import handle_guards as guards
from hermes_data.sessions.rows import FtsRebuildStatus
from hermes_data.sessions.storage.fts import cjk_sql as q

log = logging.getLogger("hermes_data.sessions.storage.fts.cjk")

#: The CJK letters of upstream's bigram tokenizer (Hangul Jamo, kana, CJK ideographs and
#: their extensions, Hangul syllables, compatibility ideographs).
CJK_LETTER = ("\u1100-\u11ff\u3040-\u309f\u30a0-\u30ff\u3130-\u318f\u31f0-\u31ff"
              "\u3400-\u4dbf\u4e00-\u9fff\ua960-\ua97f\uac00-\ud7a3\ud7b0-\ud7ff"
              "\uf900-\ufaff\U00020000-\U0002fa1f")
_RUN_RE = re.compile(f"[{CJK_LETTER}]+")

#: Ids a post-commit drain indexes at most; its patience (it never raises).
DRAIN_ROWS = 200
DRAIN_PATIENCE_S = 0.5
#: A drain every this many appends even without a known reason (foreign writers).
DRAIN_EVERY = 50


def cjk_runs(text: str) -> list[str]:
    """The maximal runs of :data:`CJK_LETTER` letters in ``text``."""
    return _RUN_RE.findall(text)


def _text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):  # LIKE reads a BLOB as UTF-8 text
        return value.decode("utf-8", "replace")
    return None


def cjk_document(content: Any, tool_name: Any, tool_calls: Any) -> str:
    """The index document of a message (see the module docstring); ``""`` without CJK."""
    tokens: set[str] = set()
    for value in (content, tool_name, tool_calls):
        text = _text(value)
        if not text or text.isascii():
            continue
        for run in _RUN_RE.findall(text):
            if len(run) > 1:
                tokens.update(run[i:i + 2] for i in range(len(run) - 1))
            tokens.add(run[-1])
    return " ".join(sorted(tokens))


def cjk_index_tokens(term: str) -> list[tuple[str, bool]]:
    """``(token, prefix)`` of a query term: per CJK run, one letter ⇒ ``(c, True)``, a longer
    run ⇒ its pairs ``(pq, False)``; de-duplicated in order."""
    out: list[tuple[str, bool]] = []
    for run in _RUN_RE.findall(term):
        toks = [(run, True)] if len(run) == 1 else [(run[i:i + 2], False)
                                                    for i in range(len(run) - 1)]
        out += [t for t in toks if t not in out]
    return out


# ---------------------------------------------------------------------------------------
# Objects (the writable open, a fresh store)
# ---------------------------------------------------------------------------------------


def present_objects(conn: Connection) -> set[str]:
    """The names of the index's objects that exist."""
    return {r[0] for r in conn.exec_driver_sql(q.PRESENT_OBJECTS)}


def configured_index(config: Any) -> bool:
    """``sessions.cjk_index`` of a store's config (mapping or callable; default true). A
    value other than a bool is logged and read as the default; reading never raises."""
    try:
        value = config_section(config, "sessions").get("cjk_index", True)
    except Exception as exc:  # noqa: BLE001 - a broken config callable never fails the open
        log.warning("reading sessions.cjk_index failed (%s); the CJK index stays on", exc)
        return True
    if not isinstance(value, bool):
        log.warning("sessions.cjk_index = %r is not a boolean; the CJK index stays on", value)
        return True
    return value


def needs_work(conn: Connection, enabled: bool = True) -> bool:
    """Read probe of the writable open: with the index on, an object is missing or the
    index is marked stale; with ``sessions.cjk_index`` off (``enabled`` False, the handle's
    :class:`~hermes_data.sessions.backends.base.OpenOptions`), an object or a key is left."""
    if not enabled:
        return (bool(present_objects(conn))
                or conn.exec_driver_sql(q.READ_META).first() is not None)
    if len(present_objects(conn)) < len(q.CJK_OBJECTS):
        return True
    return any(k == q.STALE_KEY for k, _v in conn.exec_driver_sql(q.READ_META))


def drop_objects(conn: Connection, done: list[str]) -> None:
    """``sessions.cjk_index`` off: drop every object and ``cjk_bigram_*`` key, inside the
    open's write transaction (triggers first, so no write can queue in between)."""
    present = present_objects(conn)
    dropped = [name for name, _ddl in reversed(q.CJK_OBJECTS) if name in present]
    for name in dropped:
        conn.exec_driver_sql(q.drop_object(name))
    conn.exec_driver_sql(q.CLEAR_ALL_META)
    done.append("sessions.cjk_index is off: dropped the CJK-bigram objects"
                + (f" ({', '.join(dropped)})" if dropped else "") + " and their markers")


def ensure_objects(conn: Connection, nonempty: bool, done: list[str],
                   enabled: bool = True) -> None:
    """Create the missing objects inside the open's write transaction (docs/sessions-storage.md §2.5 rules):
    over existing rows a new document table or a missing queue trigger seeds the backfill
    window ``(0, MAX(id)]`` (the queue covers the ids above it); a new FTS table or document
    trigger beside existing documents, or a ``cjk_bigram_stale`` flag, rebuilds the index
    from the documents (then the flag is cleared). ``sessions.cjk_index`` off (``enabled``
    False): drops them."""
    if not enabled:
        drop_objects(conn, done)
        return
    present = present_objects(conn)
    created = []
    for name, ddl in q.CJK_OBJECTS:
        if name not in present:
            conn.exec_driver_sql(ddl)
            created.append(name)
    meta: dict[str, str] = dict(conn.exec_driver_sql(q.READ_META).fetchall())
    if created:
        done.append(f"created CJK-bigram objects: {', '.join(created)}")
    if nonempty and any(n == q.CJK_DOC or n.startswith("messages_cjk_enqueue") for n in created):
        high = conn.exec_driver_sql(q.MAX_MESSAGE_ID).scalar()
        if high is not None and q.HIGH_WATER_KEY not in meta:
            conn.exec_driver_sql(q.SET_META, (q.HIGH_WATER_KEY, str(high)))
            conn.exec_driver_sql(q.SET_META, (q.PROGRESS_KEY, "0"))
            done.append(f"CJK-bigram backfill of messages up to id {high} pending")
    rebuild = q.CJK_DOC not in created and any(
        n == q.CJK_FTS or n.startswith("messages_cjk_doc_") for n in created)
    if rebuild or q.STALE_KEY in meta:
        _rebuild(conn, reset=q.STALE_KEY in meta, done=done)


def _rebuild(conn: Connection, *, reset: bool, done: list[str]) -> None:
    """Rebuild the index from the documents (authoritative: unchanged while draining was
    paused), verified by ``'integrity-check'``, in a savepoint of the open's transaction; a
    failure leaves ``cjk_bigram_stale`` (search stays exact through LIKE) and never fails
    the open."""
    try:
        with conn.begin_nested():
            for stmt in q.FTS_RESET if reset else ():
                conn.exec_driver_sql(stmt)
            conn.exec_driver_sql(q.FTS_REBUILD)
            conn.exec_driver_sql(q.FTS_INTEGRITY_CHECK)
            conn.exec_driver_sql(q.CLEAR_STALE)
    except sa.exc.DatabaseError as exc:
        if not (guards.is_fts_corruption(exc) or guards.is_fts_unavailable(exc)):
            raise
        log.error("CJK-bigram index rebuild failed (%s); it stays stale, short CJK search "
                  "answers through LIKE", exc.orig)
        return
    done.append("CJK-bigram index rebuilt from its documents")


def create_fresh(cursor: Any, enabled: bool = True) -> None:
    """Every object on a fresh, empty store (``fresh.create_head``; FTS5 present), unless
    ``sessions.cjk_index`` is off for the open creating it (``enabled`` False)."""
    if not enabled:
        return
    for _name, ddl in q.CJK_OBJECTS:
        cursor.execute(ddl)


# ---------------------------------------------------------------------------------------
# Indexing (one write transaction per step)
# ---------------------------------------------------------------------------------------


class _IndexCorrupt(Exception):
    """An FTS-scoped error on ``messages_cjk_fts``, kept out of the backend's FTS fail-open
    (which concerns the message indexes). ``corrupt`` False: the index cannot be loaded."""

    def __init__(self, message: str, corrupt: bool) -> None:
        super().__init__(message)
        self.corrupt = corrupt


def _index_rows(tx: Connection, rows: Sequence[Sequence[Any]]) -> None:
    """Each row's document written (a row without CJK loses its document), in two
    ``executemany`` calls: a step's rows cost one driver call, not one each."""
    upserts: list[tuple[Any, str]] = []
    deletes: list[tuple[Any]] = []
    for mid, content, tool_name, tool_calls in rows:
        doc = cjk_document(content, tool_name, tool_calls)
        if doc:
            upserts.append((mid, doc))
        else:
            deletes.append((mid,))
    try:
        if upserts:
            tx.exec_driver_sql(q.UPSERT_DOC, upserts)
        if deletes:
            tx.exec_driver_sql(q.DELETE_DOC, deletes)
    except sa.exc.DBAPIError as exc:
        if guards.is_fts_corruption(exc) or guards.is_fts_unavailable(exc):
            raise _IndexCorrupt(str(exc.orig), guards.is_fts_corruption(exc)) from exc
        raise


def index_step(tx: Connection, max_rows: int) -> bool:
    """One step inside ``BEGIN IMMEDIATE``: with backfill markers, the next chunk
    ``(progress, min(progress + max_rows, high_water)]`` (markers re-read under the lock,
    advanced or deleted); else up to ``max_rows`` queued ids, ascending (a message gone or
    out of scope, or without CJK, loses its document). Returns True when work remains."""
    x = tx.exec_driver_sql
    meta: dict[str, str] = dict(x(q.READ_META).fetchall())
    if q.STALE_KEY in meta:
        return False  # draining stops; the queue and the LIKE check keep search exact
    if q.HIGH_WATER_KEY in meta:
        try:
            high, progress = int(meta[q.HIGH_WATER_KEY]), int(meta.get(q.PROGRESS_KEY) or 0)
        except ValueError:
            high, progress = 0, 0
        end = min(progress + max_rows, high)
        if end > progress:
            _index_rows(tx, x(q.BACKFILL_ROWS, (progress, end)).fetchall())
        if end >= high:
            x(q.CLEAR_MARKERS)
        else:
            x(q.SET_META, (q.PROGRESS_KEY, str(end)))
        return True
    rows = x(q.QUEUED_ROWS, (max_rows,)).fetchall()
    if rows:  # a row gone or out of scope loses its document
        _index_rows(tx, [r[:4] if r[4] else (r[0], None, None, None) for r in rows])
        x(q.DEQUEUE, [(r[0],) for r in rows])
    return x(q.QUEUE_NONEMPTY).first() is not None


def _usable(backend: Any) -> bool:
    return (backend.dialect == "sqlite" and not backend.read_only
            and not getattr(backend, "quarantined", False))


def _run_step(backend: Any, max_rows: int, patience: float) -> bool:
    """One :func:`index_step` through the backend; corruption sets ``cjk_bigram_stale``."""
    try:
        return bool(backend.write(lambda tx: index_step(tx, max_rows), patience=patience))
    except _IndexCorrupt as exc:
        _mark_stale(backend, exc, patience)
        return False


def _mark_stale(backend: Any, exc: _IndexCorrupt, patience: float) -> None:
    """Corruption ⇒ ``cjk_bigram_stale`` (draining stops; the next writable open rebuilds
    the index from the documents); an unloadable index is only logged."""
    if not exc.corrupt:
        log.info("CJK-bigram index not loadable here (%s); not drained", exc)
        return
    log.error("CJK-bigram index unusable (%s): cjk_bigram_stale set, draining stops; "
              "short CJK search stays exact through LIKE", exc)
    backend.write(lambda tx: tx.exec_driver_sql(q.SET_META, (q.STALE_KEY, "1")),
                  patience=patience)


def _maybe_cjk(m: Any) -> bool:
    """Could this new message have queued an id (a non-tool row with a non-ASCII field)? A
    hint only: queued ids are search candidates whether or not a drain ran. Parts lists and
    tool calls are judged by their ``repr`` (printable non-ASCII text appears in it as is)."""
    if (type(m) is not dict and not isinstance(m, Mapping)) or m.get("role") == "tool":
        return False
    return any(v is not None and not (v if isinstance(v, str) else str(v)).isascii()
               for v in (m.get("content"), m.get("tool_name"), m.get("tool_calls")))


def after_append(backend: Any, messages: Sequence[Any]) -> None:
    """The post-commit drain of an append (never raises): when the new rows may have queued
    ids, while earlier work remains, or every :data:`DRAIN_EVERY` writes (foreign writers, a
    backfill), one read of the queue and markers, then — only with work — one bounded step."""
    if not _usable(backend):
        return
    st = backend.state.cjk_drain  # the handle's CjkDrainState
    st.writes += 1
    periodic = st.writes % DRAIN_EVERY == 0
    maybe = not isinstance(messages, Sequence) or any(map(_maybe_cjk, messages))
    if not (periodic or (st.available and (st.pending or maybe))):
        return
    try:
        with backend.reading_on_writer() as conn:  # read first: a write only with work
            st.available = _loadable(conn)
            work = st.available and _has_work(conn)
        st.pending = work and _run_step(backend, DRAIN_ROWS, DRAIN_PATIENCE_S)
    except _IndexCorrupt as exc:
        st.pending = False
        _mark_stale(backend, exc, DRAIN_PATIENCE_S)
    except Exception as exc:  # noqa: BLE001 - the transcript write already committed
        st.pending = True
        log.info("CJK-bigram drain deferred: %s", exc)


def _loadable(conn: Connection) -> bool:
    """Every object exists and this SQLite build can load the index (FTS5); a damaged index
    raises :class:`_IndexCorrupt`."""
    if len(present_objects(conn)) < len(q.CJK_OBJECTS):
        return False
    try:
        conn.exec_driver_sql(q.FTS_PROBE).fetchall()
        return True
    except sa.exc.DBAPIError as exc:
        if guards.is_fts_unavailable(exc):
            return False
        if guards.is_fts_corruption(exc):
            raise _IndexCorrupt(str(exc.orig), True) from exc
        raise


def _has_work(conn: Connection) -> bool:
    """Queued ids or a backfill window, and not stale."""
    meta = {k for k, _v in conn.exec_driver_sql(q.READ_META)}
    return q.STALE_KEY not in meta and (
        q.HIGH_WATER_KEY in meta or conn.exec_driver_sql(q.QUEUE_NONEMPTY).first() is not None)


def backend_has_index(backend: Any) -> bool:
    """The objects exist and this SQLite build can use them: a read with the read patience
    (a sibling holding the file past the busy timeout is waited out, then
    ``DatabaseBusyError`` — never a raw driver error; issue 31)."""
    return bool(backend.read(_loadable))


@dataclass(frozen=True)
class CjkIndexStatus:
    """:func:`cjk_index_status`: objects present, stale flag, backfill window, queued ids."""

    available: bool
    stale: bool
    backfill: FtsRebuildStatus | None  # the backfill window while one is pending
    queued: int


def cjk_index_status(store: Any) -> CjkIndexStatus:
    """The CJK-bigram index's state (PostgreSQL: not available)."""
    backend = store.backend
    if backend.dialect != "sqlite":
        return CjkIndexStatus(False, False, None, 0)

    def read(conn: Connection) -> CjkIndexStatus:
        present = len(present_objects(conn)) == len(q.CJK_OBJECTS)
        if not present:
            return CjkIndexStatus(False, False, None, 0)
        meta: dict[str, str] = dict(conn.exec_driver_sql(q.READ_META).fetchall())
        window = None
        high = int(meta.get(q.HIGH_WATER_KEY) or 0)
        if high > 0:
            window = FtsRebuildStatus.window(int(meta.get(q.PROGRESS_KEY) or 0), high)
        try:
            available, stale = _loadable(conn), q.STALE_KEY in meta
        except _IndexCorrupt:
            available, stale = True, True  # damaged; the flag follows at the next drain
        return CjkIndexStatus(available, stale, window,
                              int(conn.exec_driver_sql(q.QUEUE_COUNT).scalar() or 0))

    return backend.read(read)


def cjk_index_step(store: Any, max_rows: int = 500) -> bool:
    """Index one chunk: the next backfill window or up to ``max_rows`` queued ids (one
    transaction). Returns True when work remains; False when done, unavailable (no
    objects, no FTS5, read-only, PostgreSQL) or stale; a quarantined or replaced handle
    raises its sticky error. ``max_rows`` must be a positive int."""
    if isinstance(max_rows, bool) or not isinstance(max_rows, int):
        raise TypeError(f"max_rows must be an int, not {max_rows!r}")
    if max_rows <= 0:
        raise ValueError(f"max_rows must be positive, not {max_rows}")
    backend = store.backend
    if backend.dialect == "sqlite" and not backend.read_only:
        backend.guard()  # quarantined / replaced / split WAL: the sticky error (docs/sessions-storage.md §3.5)
    if not _usable(backend):
        return False
    try:
        if not backend_has_index(backend):
            return False
    except _IndexCorrupt as exc:
        _mark_stale(backend, exc, 20.0)
        return False
    return _run_step(backend, max_rows, 20.0)
