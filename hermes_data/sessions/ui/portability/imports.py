"""Import of exported sessions (docs/sessions-ui.md §4.12): restores history, never the
ownership of a live channel or process.

Validation needs no database: a payload that is not a list or has more than 500 entries ⇒
:class:`ValueError`; any per-entry issue ⇒ ``ok=False`` with index-addressed issues and
nothing written (no transaction begun). The write is one ``BEGIN IMMEDIATE`` (PostgreSQL: one
transaction): an existing id is skipped untouched; each new session row is inserted with the
allowed columns (routing, activity labels, handoff/rewind/compression state, ``pinned``,
``hidden``, ``last_read_at`` and ``title_source`` are never imported; ``profile_name`` is the
store's owner); its messages go through the shared batch insert (encodings, display
identities, strictly increasing default timestamps) and, on SQLite with the current FTS
layout, are indexed in bulk once at the end, as a large batch append is (the rebuild gate is
closed and restored inside the same transaction); titles are set per session in a
SAVEPOINT (a title held elsewhere ⇒ imported untitled, a warning); lineage links are made
last, only to a parent that exists and never closing a cycle. Any failure rolls everything
back.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any, Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from hermes_data import storable
from hermes_data.sessions.core import encoding as enc
from hermes_data.sessions.core import messages as msg
from hermes_data.sessions.core.display_order import store_split
from hermes_data.sessions.core.lifecycle import store_prompt
from hermes_data.sessions.schema import sessions as sessions_table
from hermes_data.sessions.sql import EPOCH_MAX, EPOCH_MIN
from hermes_data.sessions.sql.core import SESSION_EXISTS
from hermes_data.sessions.ui.portability import sql as q

log = logging.getLogger("hermes_data.sessions.ui.portability.imports")

MAX_SESSIONS = 500
MAX_MESSAGES_EACH = 10_000
MAX_MESSAGES_TOTAL = 50_000
MAX_BYTES_EACH = 5 * 1024 * 1024
MAX_BYTES_TOTAL = 25 * 1024 * 1024


@dataclass(frozen=True)
class ImportLimits:
    """The caps :func:`validate` applies (0 disables one). The defaults are the one-transaction
    caps of docs/sessions-ui.md §4.12; ``hermes-data import`` lifts the per-entry ones (a file
    ``export --all`` wrote holds sessions of any size) and packs its transactions within the
    totals itself (:func:`transaction_chunks`)."""

    messages_each: int = MAX_MESSAGES_EACH
    bytes_each: int = MAX_BYTES_EACH
    messages_total: int = MAX_MESSAGES_TOTAL
    bytes_total: int = MAX_BYTES_TOTAL


DEFAULT_LIMITS = ImportLimits()

_TEXT = ("source", "user_id", "model", "system_prompt", "end_reason", "cwd", "git_branch",
         "git_repo_root", "billing_provider", "billing_base_url", "billing_mode", "cost_status",
         "cost_source", "pricing_version", "title")
#: Integer counters imported (default 0).
_INTS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
         "reasoning_tokens", "api_call_count")
_FLOATS = ("estimated_cost_usd", "actual_cost_usd")
#: Head columns never imported (routing, activity, flags, coordination and handoff state).
_NEVER = frozenset({"session_key", "chat_id", "chat_type", "thread_id", "display_name",
                    "origin_json", "last_activity_at", "last_activity_description",
                    "last_activity_provenance", "pinned", "hidden", "last_read_at",
                    "title_source", "rewind_count", "message_count", "tool_call_count",
                    "system_prompt_hash", "profile_name", "git_metadata_generation",
                    "tool_names", "expiry_finalized"})
_HEAD = frozenset(c.name for c in sessions_table.columns)
_MSG_TEXT = ("tool_call_id", "tool_name", "finish_reason", "reasoning", "reasoning_content")


@dataclass(frozen=True)
class ImportIssue:
    """One validation issue: the entry's index (and message index in ``error``)."""

    index: int
    error: str
    session_id: str | None = None


@dataclass(frozen=True)
class ImportResult:
    """What an import did (all counters zero when ``ok`` is False)."""

    ok: bool
    imported: int = 0
    skipped: int = 0
    detached: int = 0
    imported_ids: list[str] = field(default_factory=list)
    skipped_ids: list[str] = field(default_factory=list)
    errors: list[ImportIssue] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def load_import_payload(text: str) -> list[Any]:
    """A JSON array ⇒ its list; an object ⇒ ``[object]``; else JSON Lines (blank lines
    ignored). Malformed ⇒ :class:`ValueError` naming the line."""
    stripped = text.strip()
    if stripped.startswith(("[", "{")):
        try:
            doc = json.loads(stripped)
        except ValueError:
            doc = None
        if isinstance(doc, list):
            return doc
        if isinstance(doc, dict):
            return [doc]
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except ValueError as exc:
            raise ValueError(f"import payload line {n} is not valid JSON: {exc}") from None
    return out


def _size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":"),
                          default=str).encode("utf-8", "surrogatepass"))


def _model_config(value: Any) -> tuple[Any, str | None]:
    if value is None or isinstance(value, dict):
        return value, None
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            return parsed, None
    return None, "model_config must be null, an object or a JSON object string"


def _check_message(m: Any, j: int) -> str | None:
    # Upstream's phrases lead each message (callers show or match them), ours follow.
    if not isinstance(m, dict):
        return f"messages must contain only objects (message {j} is a {type(m).__name__})"
    if not isinstance(m.get("role"), str) or not m["role"]:
        return f"messages[{j}].role must be a non-empty string"
    for k in _MSG_TEXT:
        if m.get(k) is not None and not isinstance(m[k], str):
            return f"messages[{j}]: {k} must be a string or null"
    tc = m.get("token_count")
    if tc is not None:
        try:
            int(tc)
        except (TypeError, ValueError):
            return f"messages[{j}]: token_count must be an integer, got {tc!r}"
    return None


def validate(sessions: Any, limits: ImportLimits = DEFAULT_LIMITS) -> list[ImportIssue]:
    """Index-addressed issues of a payload (no database access); ValueError for a non-list or
    more than 500 entries. ``limits`` sets the size caps (0 disables one). A total cap is
    reported, as upstream's import did, on each entry whose running total exceeds it (its
    index and id), from the entry that crossed it on."""
    if not isinstance(sessions, list):
        raise ValueError(f"sessions must be a list (import_sessions got "
                         f"{type(sessions).__name__})")
    if len(sessions) > MAX_SESSIONS:
        raise ValueError(f"sessions must contain at most {MAX_SESSIONS} entries "
                         f"(import_sessions got {len(sessions)})")
    issues: list[ImportIssue] = []
    seen: set[str] = set()
    total_msgs = total_bytes = 0
    for i, e in enumerate(sessions):
        if not isinstance(e, dict):
            issues.append(ImportIssue(i, f"session must be an object (entry is a "
                                         f"{type(e).__name__})"))
            continue
        sid = str(e.get("id") or "").strip()
        bad = lambda err: issues.append(ImportIssue(i, err, sid or None))  # noqa: E731
        if not sid:
            bad("session id is required (the entry has no id)")
        elif sid in seen:
            bad(f"duplicate session id {sid!r}")
        seen.add(sid)
        size = _size(e)
        total_bytes += size
        if limits.bytes_each and size > limits.bytes_each:
            bad(f"session exceeds the import size limit: entry is {size} bytes; the limit is "
                f"{limits.bytes_each}")
        if limits.bytes_total and total_bytes > limits.bytes_total:
            bad(f"import exceeds the total size limit: {total_bytes} bytes in total up to this "
                f"entry; the limit is {limits.bytes_total}")
        msgs = e.get("messages", [])
        if msgs is None:
            msgs = []
        if not isinstance(msgs, list):
            bad("messages must be a list")
            msgs = []
        total_msgs += len(msgs)
        if limits.messages_total and total_msgs > limits.messages_total:
            bad(f"messages exceeds the total import limit: {total_msgs} messages in total up to "
                f"this entry; the limit is {limits.messages_total}")
        if limits.messages_each and len(msgs) > limits.messages_each:
            bad(f"messages exceeds the per-session import limit: {len(msgs)} messages; the "
                f"limit is {limits.messages_each} per session")
        else:
            for j, m in enumerate(msgs):
                err = _check_message(m, j)
                if err:
                    bad(err)
                    break
        if _model_config(e.get("model_config"))[1]:
            bad("model_config must be a JSON object (null, an object or a JSON object string)")
        for k in ("parent_session_id", *_TEXT):
            if e.get(k) is not None and not isinstance(e[k], str):
                bad(f"{k} must be a string or null")
            elif k != "title" and isinstance(e.get(k), str) and not storable.is_storable(e[k]):
                bad(f"{k} {storable.problem(e[k])}")  # both backends alike (issue 31)
        if not storable.is_storable(sid):
            bad(f"id {storable.problem(sid)}")
        if isinstance(e.get("title"), str):
            try:
                enc.sanitize_title(e["title"])
            except ValueError as exc:
                bad(f"title: {exc}")
    return issues


def transaction_chunks(sessions: list[Any]) -> list[list[Any]]:
    """Consecutive runs of ``sessions``, each within the default per-transaction caps (500
    sessions, 50,000 messages, 25 MiB); an entry above a total cap alone is a run of its own."""
    chunks: list[list[Any]] = []
    cur: list[Any] = []
    msgs = size = 0
    for e in sessions:
        n = len(e.get("messages") or []) if isinstance(e, dict) and isinstance(
            e.get("messages"), list) else 0
        b = _size(e)
        if cur and (len(cur) >= MAX_SESSIONS or msgs + n > MAX_MESSAGES_TOTAL
                    or size + b > MAX_BYTES_TOTAL):
            chunks.append(cur)
            cur, msgs, size = [], 0, 0
        cur.append(e)
        msgs, size = msgs + n, size + b
    if cur:
        chunks.append(cur)
    return chunks


def _num(value: Any, kind: type, default: Any) -> Any:
    if value is None or isinstance(value, bool):
        return default
    try:
        return kind(value)
    except (TypeError, ValueError):
        return default


def _row(e: dict[str, Any], sid: str, owner: str | None, columns: set[str], now: float,
         dropped: set[str]) -> dict[str, Any]:
    started = _num(e.get("started_at"), float, None)
    if started is None or not EPOCH_MIN <= started < EPOCH_MAX:
        started = now
    mc, _ = _model_config(e.get("model_config"))
    row: dict[str, Any] = {"id": sid, "source": e.get("source") or "import",
                           "started_at": started, "profile_name": owner,
                           "model_config": None if mc is None else json.dumps(mc, ensure_ascii=False),
                           "ended_at": _num(e.get("ended_at"), float, None),
                           "archived": int(bool(e.get("archived")))}
    for k in _TEXT:
        if k not in ("source", "system_prompt", "title") and isinstance(e.get(k), str):
            row[k] = e[k]
    for k in _INTS:
        row[k] = _num(e.get(k), int, 0)
    for k in _FLOATS:
        row[k] = _num(e.get(k), float, None)
    handled = {"id", "messages", "system_prompt", "title", "parent_session_id", "model_config",
               "started_at", "ended_at", "archived", "lineage_session_ids", "segments", *_TEXT,
               *_INTS, *_FLOATS}
    for k, v in e.items():
        if k in handled or k in _NEVER or k in _HEAD:
            continue
        if k in columns:  # an upstream extra this store has
            row[k] = v if v is None or isinstance(v, (str, int, float)) else json.dumps(v)
        else:
            dropped.add(k)
    return row


def import_sessions(store: Any, sessions: Any,
                    limits: ImportLimits = DEFAULT_LIMITS) -> ImportResult:
    """Import exported sessions all-or-nothing (see the module docstring); ``limits`` sets the
    size caps of :func:`validate` (0 disables one)."""
    issues = validate(sessions, limits)
    if issues:
        return ImportResult(False, errors=issues)
    from hermes_data.sessions.ui.portability.export import session_columns

    d = store.backend.dialect
    frag = store.backend.sql
    owner = store.owner_profile()
    split = store_split(store)
    now = enc.now()
    entries = [(str(e.get("id")).strip(), e) for e in sessions]

    def work(conn: Connection) -> ImportResult:
        columns = set(session_columns(store, conn))
        imported: list[str] = []
        skipped: list[str] = []
        warnings: list[str] = []
        dropped: set[str] = set()
        # One bulk FTS fill for every imported row (as a large batch append does) instead of
        # the per-row insert triggers; the gate is restored in this same transaction.
        tx = msg.ConnectionDriver(conn)
        gate = msg.open_bulk_fts(tx, d, sum(len(e.get("messages") or []) for _, e in entries))
        for sid, e in entries:
            if SESSION_EXISTS.run(conn, {"id": sid}).first() is not None:
                skipped.append(sid)
                continue
            row = _row(e, sid, owner, columns, now, dropped)
            row["system_prompt_hash"] = store_prompt(conn, frag, e.get("system_prompt"))
            names = list(row)
            q.insert_session(names).run(conn, {f"c{i}": row[n] for i, n in enumerate(names)})
            msgs = e.get("messages") or []
            encoded = [msg.encode_row(m, j, d, split=split) for j, m in enumerate(msgs)]
            tools = msg.insert_rows(conn, frag, sid, encoded) if encoded else 0
            q.SET_COUNTERS.run(conn, {"m": len(encoded), "t": tools, "id": sid})
            title = enc.sanitize_title(e.get("title")) if isinstance(e.get("title"), str) else None
            if title:
                try:
                    with conn.begin_nested():
                        q.SET_TITLE.run(conn, {"t": title, "id": sid})
                except sa.exc.IntegrityError:
                    warnings.append(f"{sid}: title {title!r} is held by another session; "
                                    "imported untitled")
            imported.append(sid)
        if gate is not None:
            gate.reopen_and_fill(tx)
        detached = _link(conn, entries, set(imported))
        if dropped:
            warnings.append("columns this store lacks were dropped: " + ", ".join(sorted(dropped)))
        return ImportResult(True, len(imported), len(skipped), detached, imported, skipped,
                            [], warnings)

    result: ImportResult = store.backend.write(work)
    for w in result.warnings:
        log.warning("import: %s", w)
    return result


def _link(conn: Connection, entries: Sequence[tuple[str, dict[str, Any]]],
          imported: set[str]) -> int:
    """Link imported children to existing parents without cycles; returns the detached."""
    parents = {sid: e.get("parent_session_id") for sid, e in entries
               if sid in imported and isinstance(e.get("parent_session_id"), str)
               and e.get("parent_session_id")}
    detached = 0

    def parent_of(sid: str) -> str | None:
        if sid in imported:
            return parents.get(sid)
        row = q.STORED_PARENT.run(conn, {"id": sid}).first()
        return None if row is None else row[0]

    for child, parent in list(parents.items()):
        ok = parent in imported \
            or SESSION_EXISTS.run(conn, {"id": parent}).first() is not None
        cur: str | None = parent
        hops = 0
        while ok and cur is not None and hops < 10_000:
            if cur == child:
                ok = False
                break
            cur = parent_of(cur)
            hops += 1
        if not ok:
            parents.pop(child)
            detached += 1
    for child, parent in parents.items():
        q.SET_PARENT.run(conn, {"p": parent, "id": child})
    return detached
