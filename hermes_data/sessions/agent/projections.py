"""Conversation projections of the agent turn API (docs/sessions-agent.md §3.5): the
transcript as the OpenAI-shaped messages an agent replays, the resume pair (model and
display histories), the ancestor display prefix, the resume count and the usage-tagging
root.

Agent-owned transforms are injected through :class:`ConversationHooks` (constructor
argument ``conversation_hooks=`` of the store), never copied: a copied compaction-carrier
parser would drift silently from the agent's. Rows are always ordered by ``id`` (clocks
regress, and a tool result replayed before its call is an HTTP 400).
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Iterable, Sequence

from sqlalchemy.engine import Connection

from hermes_data.sessions.core import encoding as enc
from hermes_data.sessions.core import lineage
from hermes_data.sessions.backends.base import driver_connection
from hermes_data.sessions.handle import StoreHandle
from hermes_data.sessions.agent.projections_sql import IN_CHUNK, PROJECTION_COLS, ProjectionStatements, for_dialect

log = logging.getLogger("hermes_data.sessions.agent.projections")

ConversationMessage = dict[str, Any]

_MEMORY_BLOCK = re.compile(r"<memory-context>.*?</memory-context>", re.I | re.S)
_MEMORY_NOTE = re.compile(r"\[System note: The following is recalled memory context, NOT new "
                          r"user input\. Treat as[^\]]*\]", re.I)
_MEMORY_FENCE = re.compile(r"</?memory-context>", re.I)
_MARKER = re.compile(r"\[[A-Za-z_][A-Za-z0-9_.-]*\]")
_HARNESS = ("Review the conversation above and update the skill library",
            "Review the conversation above and consider saving to memory")
#: What every harness turn contains (the cheap test of whether the harness pass can apply).
_HARNESS_TEXT = "Review the conversation above"
#: The least string above every string starting with ``_HARNESS_TEXT``: a string ``s``
#: starts with it exactly when ``_HARNESS_TEXT <= s < _HARNESS_TEXT_END``.
_HARNESS_TEXT_END = _HARNESS_TEXT[:-1] + chr(ord(_HARNESS_TEXT[-1]) + 1)
_TOOL_CALLS, _TOOL_CALL_ID, _TOOL_NAME = (PROJECTION_COLS.index(c) for c in (
    "tool_calls", "tool_call_id", "tool_name"))
#: The JSON scanner ``json.loads`` runs: one value from an index, and where it ended
#: (an attribute of every ``JSONDecoder`` since Python 2.6; typeshed does not declare it).
_scan_json: Callable[[str, int], tuple[Any, int]] = \
    json.JSONDecoder().scan_once  # type: ignore[attr-defined]
#: Rows per fetch of a streamed transcript: small enough that a batch is still in the CPU
#: caches when it is projected, large enough to amortize the fetch call (measured on
#: SQLite, 20,000 rows: 16–128 alike, about 8 % of the call faster than row-at-a-time
#: iteration; 256 and more slower again).
STREAM_BATCH = 64
#: Hop limit of the conversation-root walk.
ROOT_MAX_HOPS = 100


def sanitize_memory_context(text: str) -> str:
    """The agent's memory-context sanitizer: ``<memory-context>`` blocks (any case, across
    lines), the recalled-memory system note and stray fence tags removed."""
    return _MEMORY_FENCE.sub("", _MEMORY_NOTE.sub("", _MEMORY_BLOCK.sub("", text)))


def _no_split(msg: ConversationMessage) -> tuple[Any, Any]:
    return None, msg


def _no_repair(messages: list[ConversationMessage]) -> int:
    return 0


def _strip(value: Any) -> Any:
    return value.strip() if isinstance(value, str) else value


@dataclass(frozen=True)
class ConversationHooks:
    """The agent's transforms the projections apply (defaults: memory-context sanitizer; not
    a carrier; no sequence repair; ``str.strip``)."""

    sanitize_text: Callable[[str], str] = sanitize_memory_context
    split_user_turn: Callable[[ConversationMessage], tuple[Any, Any]] = _no_split
    repair_sequence: Callable[[list[ConversationMessage]], int] = _no_repair
    normalize_user_text: Callable[[Any], Any] = _strip


def _hooks(store: StoreHandle) -> ConversationHooks:
    return getattr(store, "conversation_hooks", None) or ConversationHooks()


def _parse(raw: Any, what: str, row_id: int, fallback: Any) -> Any:
    """``json.loads(raw)``; not JSON ⇒ ``fallback`` with a warning. A string that is exactly
    one JSON value (no surrounding whitespace) is scanned directly — what ``json.loads`` ends
    up doing, without its per-call wrapper and whitespace matching; anything else (padding,
    trailing data, invalid text, non-strings) goes through ``json.loads`` itself."""
    try:
        value, end = _scan_json(raw, 0)
        if end == len(raw):
            return value
    except (StopIteration, TypeError, ValueError):
        pass
    try:
        return json.loads(raw)
    except (TypeError, ValueError):
        log.warning("message %s: %s is not JSON; replayed as %r", row_id, what, fallback)
        return fallback


@dataclass
class _Row:
    id: int
    session_id: str
    active: bool
    msg: ConversationMessage
    key: tuple


def _runner(conn: Connection, s: ProjectionStatements) -> Callable[[str, tuple], Any]:
    """How a projection statement runs. SQLite: straight on the DB-API connection inside the
    caller's read transaction (plain tuples; no result metadata or ``Row`` per row), as the
    transcript read path does."""
    if s.dialect == "sqlite":
        return driver_connection(conn).execute
    return conn.exec_driver_sql


def _fetch(conn: Connection, s: ProjectionStatements, ids: Sequence[str], which: str) -> list:
    """The ``PROJECTION_COLS`` rows of ``ids`` under filter ``which``, in id order."""
    run = _runner(conn, s)
    rows: list = []
    for i in range(0, len(ids), IN_CHUNK):
        chunk = tuple(ids[i:i + IN_CHUNK])
        rows.extend(run(s.rows(len(chunk), which), chunk).fetchall())
    if len(ids) > IN_CHUNK:
        rows.sort(key=lambda r: r[0])
    return rows


def _stream(conn: Connection, s: ProjectionStatements, session_id: str, which: str) -> Any:
    """The open cursor of one session's rows, in id order (the caller closes it; read it in
    :data:`STREAM_BATCH` batches): each batch is freed once projected, so the fetched rows
    are never all held alongside the messages."""
    return _runner(conn, s)(s.rows(1, which), (session_id,))


def _messages(batches: Iterable[Sequence[Any]], d: str, hooks: ConversationHooks, *,
              summary: bool, row_ids: bool) -> tuple[list[ConversationMessage], bool]:
    """The replayed message of every row (``PROJECTION_COLS``) of ``batches`` (row
    sequences), in row order, and whether the harness / stale-marker pass can change
    anything (:func:`_post_passes`).

    The per-row hot path of every projection (a 20,000-row transcript goes through here;
    each row should cost little beyond what the driver spends fetching it). Rows of the
    common shapes are handled inline — a user or assistant turn whose content is text
    without the multimodal marker gets the content checks the default sanitizer needs and
    the strip; then a plain turn (an answer may also carry its finish reason) or a tool
    result with just its call id and tool name becomes one dict literal with the keys
    :func:`_full_message` would give it, in the same order. Any other content goes through
    :func:`_text` and any other row through :func:`_full_message` (the general path the
    equivalence tests hold the inline shapes to)."""
    out: list[ConversationMessage] = []
    append = out.append
    prefix = enc.content_prefix(d)
    marker = prefix[0]
    sanitize = hooks.sanitize_text
    custom = sanitize is not sanitize_memory_context
    harness, harness_end = _HARNESS_TEXT, _HARNESS_TEXT_END
    post = False
    for rows in batches:
        for r in rows:
            role = r[2]
            content = r[3]
            if content.__class__ is not str or marker in content:
                content = _text(content, role, prefix, d, hooks)
                if not post and _may_be_harness(role, content):
                    post = True
            elif role == "user":
                # The default sanitizer only ever removes text around '<' or '['.
                if custom or "<" in content or "[" in content:
                    content = sanitize(content)
                content = content.strip()
                # Starts with the harness text: a range test (no scan of the text).
                if harness <= content < harness_end:
                    post = True
                ts = r[4]
                # Plain: a truthy timestamp, the NONE_TESTED columns None, the other optional
                # columns falsy (inlined: a call per row would cost more than the test).
                if ts and not (r[6] is not None or r[7] or r[8] or r[9] or r[10] or r[11]
                               or r[12] or r[13] or r[14] or r[15] or r[16] is not None
                               or r[17] is not None or r[18] is not None or r[19] is not None
                               or r[20] or r[21]):
                    if row_ids:
                        append({"role": "user", "content": content, "_db_persisted": True,
                                "_row_id": r[0], "timestamp": ts})
                    else:
                        append({"role": "user", "content": content, "_db_persisted": True,
                                "timestamp": ts})
                    continue
            elif role == "assistant":  # as a user turn, without the harness test
                if custom or "<" in content or "[" in content:
                    content = sanitize(content)
                content = content.strip()
                ts = r[4]
                # Plain but for a finish reason (most answers): that key comes last.
                if ts and not (r[6] is not None or r[7] or r[8] or r[9] or r[10] or r[11]
                               or r[12] or r[13] or r[14] or r[15] or r[16] is not None
                               or r[17] is not None or r[18] is not None or r[19] is not None
                               or r[21]):
                    if row_ids:
                        m = {"role": "assistant", "content": content, "_db_persisted": True,
                             "_row_id": r[0], "timestamp": ts}
                    else:
                        m = {"role": "assistant", "content": content, "_db_persisted": True,
                             "timestamp": ts}
                    if r[20]:
                        m["finish_reason"] = r[20]
                    append(m)
                    continue
            elif role == "tool":
                # Content replayed as stored; a result with its call id and tool name and no
                # other optional column (assistant-only ones never apply to a tool row).
                ts = r[4]
                if ts and r[10] and r[11] and not (r[6] is not None or r[7] or r[8] or r[9]
                                                   or r[12] or r[13] or r[14] or r[15]):
                    if row_ids:
                        append({"role": "tool", "content": content, "_db_persisted": True,
                                "_row_id": r[0], "timestamp": ts, "tool_call_id": r[10],
                                "tool_name": r[11]})
                    else:
                        append({"role": "tool", "content": content, "_db_persisted": True,
                                "timestamp": ts, "tool_call_id": r[10], "tool_name": r[11]})
                    continue
            elif not post and role == "system" and harness in content:
                post = True
            m = _full_message(r, content, summary, row_ids)
            if not post and role == "assistant" and "tool_calls" in m \
                    and isinstance(content, str) and "[" in content:
                post = True
            append(m)
    return out, post


def _may_be_harness(role: Any, content: Any) -> bool:
    """Whether a message could be a harness turn (:func:`_post_passes` decides)."""
    return (role == "user" or role == "system") and isinstance(content, str) \
        and _HARNESS_TEXT in content


def _text(content: Any, role: Any, prefix: str, d: str, hooks: ConversationHooks) -> Any:
    """The replayed ``content`` of any stored value (the general form of the hot path's
    checks in :func:`_messages`): the multimodal marker decoded, user and assistant text
    sanitized and stripped."""
    if not isinstance(content, str):
        return content
    value: Any = content
    if value.startswith(prefix):
        value = enc.decode_content(value, d)
    if (role == "user" or role == "assistant") and isinstance(value, str):
        sanitize = hooks.sanitize_text
        if sanitize is not sanitize_memory_context or "<" in value or "[" in value:
            value = sanitize(value)
        value = value.strip()
    return value


def _full_message(r: Sequence[Any], content: Any, summary: bool, row_ids: bool
                  ) -> ConversationMessage:
    """The replayed message of a row with optional columns set (``content`` already
    decoded, sanitized and stripped): the keys in one fixed order, each optional one only
    when its column is set (not NULL for the ``NONE_TESTED`` columns, truthy for the others)."""
    (rid, _sid, role, _stored, ts, _active, tool_calls, meta, api_content, kind, tool_call_id,
     tool_name, effect, pmid, observed, compressed, reasoning_content, details, codex_items,
     codex_msgs, finish, reasoning) = r
    if row_ids:
        m: ConversationMessage = {"role": role, "content": content, "_db_persisted": True,
                                  "_row_id": rid}
    else:
        m = {"role": role, "content": content, "_db_persisted": True}
    if api_content:
        m["api_content"] = api_content
    if kind:
        m["display_kind"] = kind
    if meta:
        decoded_meta = enc.decode_display_metadata(meta)
        if isinstance(decoded_meta, dict):
            m["display_metadata"] = decoded_meta
    if summary and compressed:
        m["_compressed_summary"] = True
    if ts:
        m["timestamp"] = ts
    if tool_call_id:
        m["tool_call_id"] = tool_call_id
    if tool_name:
        m["tool_name"] = tool_name
    if effect:
        m["effect_disposition"] = effect
    if tool_calls is not None:
        m["tool_calls"] = _parse(tool_calls, "tool_calls", rid, [])
    if pmid:
        m["message_id"] = pmid
    if observed:
        m["observed"] = True
    if role == "assistant":
        if finish:
            m["finish_reason"] = finish
        if reasoning:
            m["reasoning"] = reasoning
        if reasoning_content is not None:
            m["reasoning_content"] = reasoning_content
        if details is not None:
            m["reasoning_details"] = _parse(details, "reasoning_details", rid, None)
        if codex_items is not None:
            m["codex_reasoning_items"] = _parse(codex_items, "codex_reasoning_items", rid, None)
        if codex_msgs is not None:
            m["codex_message_items"] = _parse(codex_msgs, "codex_message_items", rid, None)
    return m


def _project(rows: Sequence[Any], d: str, hooks: ConversationHooks, *, summary: bool,
             keyed: bool = False, row_ids: bool = True) -> list[_Row]:
    """:func:`_messages` wrapped with what the de-duplication passes need (row id, session,
    active flag and, when ``keyed``, the display-generation key)."""
    msgs, _ = _messages((rows,), d, hooks, summary=summary, row_ids=row_ids)
    out = []
    for r, m in zip(rows, msgs):
        role = r[2]
        key = (role, display_content(m, hooks, r[3]) if role == "user" else r[3], r[4],
               r[_TOOL_CALL_ID], r[_TOOL_CALLS], r[_TOOL_NAME]) if keyed else ()
        out.append(_Row(r[0], r[1], bool(r[5]), m, key))
    return out


def display_content(m: ConversationMessage, hooks: ConversationHooks, stored: Any) -> Any:
    """The content a user row's display key uses: ``stored``, or for a composite row
    (handoff + live ask, split by ``hooks.split_user_turn``) the canonical JSON of its live
    content. Shared by the projections' de-duplication and the display order's keys."""
    handoff, live = hooks.split_user_turn(m)
    if handoff is None or live is None:
        return stored
    content = live.get("content") if isinstance(live, dict) else live
    return json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _dedupe_display_generations(rows: list[_Row]) -> list[_Row]:
    """One row per display key: the greatest ``(active, id)``, output in id order."""
    best: dict[tuple, _Row] = {}
    for row in rows:
        cur = best.get(row.key)
        if cur is None or (row.active, row.id) > (cur.active, cur.id):
            best[row.key] = row
    return sorted(best.values(), key=lambda r: r.id)


def _canonical(m: ConversationMessage, hooks: ConversationHooks) -> tuple[Any, bool]:
    handoff, live = hooks.split_user_turn(m)
    if handoff is not None and live is not None:
        return (live.get("content") if isinstance(live, dict) else live), True
    return m.get("content"), False


def _dedupe_replayed_users(rows: list[_Row], hooks: ConversationHooks) -> list[_Row]:
    """A rotation persists the live ask in parent and child: keep one copy (docs/sessions-agent.md §3.5)."""
    out: list[_Row | None] = []
    info: list[tuple[Any, bool]] = []
    seen: dict[tuple, int] = {}
    for row in rows:
        m = row.msg
        if m["role"] != "user":
            out.append(row)
            info.append((None, False))
            continue
        canon, composite = _canonical(m, hooks)
        ts = m.get("timestamp")
        if ts is not None and canon not in (None, "", [], {}):
            key = (ts, json.dumps(canon, sort_keys=True, separators=(",", ":"),
                                  ensure_ascii=False, default=str))
            if key in seen and out[seen[key]] is not None:
                out[seen[key]] = row  # the later copy (the child) owns the durable row id
                continue
            seen[key] = len(out)
        duplicate = False
        for j in range(len(out) - 1, -1, -1):
            prev = out[j]
            if prev is None:
                continue
            pm = prev.msg
            if pm["role"] == "assistant" and (pm.get("content") or pm.get("tool_calls")):
                break
            if pm["role"] != "user":
                continue
            pcanon, pcomposite = info[j]
            if pcanon == canon and (composite or pcomposite or isinstance(canon, str)):
                if composite:
                    out[j] = None
                else:
                    duplicate = True
                break
        if not duplicate:
            out.append(row)
            info.append((canon, composite))
    return [r for r in out if r is not None]


def _post_passes(msgs: list[ConversationMessage], needed: bool | None = None
                 ) -> list[ConversationMessage]:
    """Harness turns (and the reply after each) dropped, stale tool markers blanked;
    ``needed=False`` (from :func:`_messages`) skips the scan."""
    if needed is None:
        needed = any(_needs_post_pass(m) for m in msgs)
    if not needed:
        return msgs
    out: list[ConversationMessage] = []
    skip_reply = False
    for m in msgs:
        role, content = m["role"], m.get("content")
        if skip_reply:
            skip_reply = False
            if role == "assistant":
                continue
        if role in ("user", "system") and isinstance(content, str) \
                and content.lstrip().startswith(_HARNESS):
            skip_reply = True
            continue
        if role == "assistant" and m.get("tool_calls") and isinstance(content, str) \
                and _MARKER.fullmatch(content.strip()):
            m["content"] = ""
        out.append(m)
    return out


def _needs_post_pass(m: ConversationMessage) -> bool:
    c = m["content"]
    if not isinstance(c, str):
        return False
    if m["role"] == "assistant":
        return "tool_calls" in m and "[" in c
    return m["role"] in ("user", "system") and "Review the conversation above" in c


def _finish(rows: list[_Row], hooks: ConversationHooks, *, repair: bool
            ) -> list[ConversationMessage]:
    msgs = _post_passes([r.msg for r in rows])
    if repair:
        hooks.repair_sequence(msgs)
    return msgs


def _conversation(conn: Connection, store: StoreHandle, session_id: str, *, ancestors: bool,
                  which: str, generations: bool, row_ids: bool, repair: bool,
                  summary: bool) -> list[ConversationMessage]:
    q = store.backend.sql
    ids = lineage.resume_lineage_ids(conn, q, session_id) if ancestors else [session_id]
    hooks = _hooks(store)
    s = for_dialect(q.dialect)
    if not generations and not ancestors:
        cursor = _stream(conn, s, session_id, which)
        try:
            msgs, needed = _messages(iter(partial(cursor.fetchmany, STREAM_BATCH), []),
                                     q.dialect, hooks, summary=summary, row_ids=row_ids)
        finally:  # a raising hook leaves no statement pending on the connection
            cursor.close()
        msgs = _post_passes(msgs, needed)
        if repair:
            hooks.repair_sequence(msgs)
        return msgs
    rows = _project(_fetch(conn, s, ids, which), q.dialect, hooks, summary=summary,
                    keyed=generations, row_ids=row_ids)
    if generations:
        rows = _dedupe_display_generations(rows)
    if ancestors:
        rows = _dedupe_replayed_users(rows, hooks)
    return _finish(rows, hooks, repair=repair)


def get_messages_as_conversation(store: StoreHandle, session_id: str,
                                 include_ancestors: bool = False, include_inactive: bool = False,
                                 repair_alternation: bool = False, include_row_ids: bool = False,
                                 include_compacted: bool = False) -> list[ConversationMessage]:
    """The transcript as the messages an agent replays, in id order: every row marked
    ``_db_persisted``; ``include_ancestors`` walks the compression path root → session (a
    delegate or branch child keeps its own rows), de-duplicating replayed user turns;
    ``include_compacted`` adds compacted rows, one per display generation (never for a
    model-fed restore); harness turns dropped, pre-#78148 tool markers blanked."""
    if not session_id:
        return []
    which = "all" if include_inactive else "compacted" if include_compacted else "active"
    return store.backend.read(lambda c: _conversation(
        c, store, session_id, ancestors=include_ancestors, which=which,
        generations=include_compacted and not include_inactive, row_ids=include_row_ids,
        repair=repair_alternation, summary=False))


def _resume_pair(conn: Connection, store: StoreHandle, session_id: str
                 ) -> tuple[list[ConversationMessage], list[ConversationMessage], list[_Row]]:
    q = store.backend.sql
    ids = lineage.resume_lineage_ids(conn, q, session_id)
    hooks = _hooks(store)
    raw = _fetch(conn, for_dialect(q.dialect), ids, "compacted")
    own = [r for r in raw if r[1] == session_id and r[5]]
    model = _finish(_project(own, q.dialect, hooks, summary=True), hooks, repair=True)
    display_rows = _dedupe_replayed_users(
        _dedupe_display_generations(_project(raw, q.dialect, hooks, summary=False, keyed=True)),
        hooks)
    kept = list(display_rows)
    display = _finish(display_rows, hooks, repair=False)
    return model, display, kept


def get_resume_conversations(store: StoreHandle, session_id: str
                             ) -> tuple[list[ConversationMessage], list[ConversationMessage]]:
    """``(model_history, display_history)`` of a resume from one read: the model gets the
    session's own active rows (alternation repaired, row ids, summary markers), the display
    every active or compacted row of the resume lineage, one per display generation."""
    if not session_id:
        return [], []
    model, display, _ = store.backend.read(lambda c: _resume_pair(c, store, session_id))
    return model, display


def get_ancestor_display_prefix(store: StoreHandle, session_id: str) -> list[ConversationMessage]:
    """The display rows a resume shows above ``session_id``'s own: the ancestors' part of the
    display history, selected by row (never by length arithmetic, #65919); ``[]`` for a root
    or a branch."""
    if not session_id:
        return []

    def work(conn: Connection) -> list[ConversationMessage]:
        if len(lineage.resume_lineage_ids(conn, store.backend.sql, session_id)) <= 1:
            return []
        _, display, kept = _resume_pair(conn, store, session_id)
        theirs = {r.id for r in kept if r.session_id != session_id}
        out = [m for m in display if m.get("_row_id") in theirs]
        for m in out:
            m.pop("_row_id", None)
        return out

    return store.backend.read(work)


def get_resume_message_count(store: StoreHandle, session_id: str, *, tip_only: bool = False) -> int:
    """Rows a resume loads: the session's active rows (``tip_only``), else the active and
    compacted rows of its resume lineage (unbounded; the bounded guard is
    ``assert_resume_safe``)."""
    if not session_id:
        return 0

    def work(conn: Connection) -> int:
        q = store.backend.sql
        s = for_dialect(q.dialect)
        ids = [session_id] if tip_only else lineage.resume_lineage_ids(conn, q, session_id)
        which = "active" if tip_only else "compacted"
        total = 0
        for i in range(0, len(ids), IN_CHUNK):
            chunk = tuple(ids[i:i + IN_CHUNK])
            total += int(conn.exec_driver_sql(s.count(len(chunk), which), chunk).scalar() or 0)
        return total

    return store.backend.read(work)


def get_conversation_root(store: StoreHandle, session_id: str) -> str:
    """The provider usage-tagging id: the topmost existing session up every parent link
    (delegations included), at most 100 hops, cycle-safe; unknown or empty ⇒ the input."""
    if not session_id:
        return session_id

    def work(conn: Connection) -> str:
        s = for_dialect(store.backend.dialect)
        current, seen = session_id, {session_id}
        row = conn.exec_driver_sql(s.PARENT, (current,)).first()
        if row is None:
            return session_id
        for _ in range(ROOT_MAX_HOPS):
            parent = row[0]
            if not parent or parent in seen:
                break
            nxt = conn.exec_driver_sql(s.PARENT, (parent,)).first()
            if nxt is None:  # a dangling link: the topmost existing row is the root
                break
            seen.add(parent)
            current, row = parent, nxt
        return current

    return store.backend.read(work)
