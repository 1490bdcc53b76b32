"""Session lifecycle (docs/sessions.md §4.1–§4.3): create (with the enrich rule), children
with lineage markers, end, reopen, and the atomic publication of a compression
continuation. Query functions run inside the caller's write transaction.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from hermes_data.sessions.core import encoding as enc
from hermes_data.sessions.core import messages
from hermes_data.sessions.errors import (CompressionPublishError, CompressionSessionBusyError,
                     SessionNotFoundError)
from hermes_data.sessions.rows import PublishResult
from hermes_data.sessions.sql import AUTOMATIC_END_REASONS, RESET_END_REASONS, Fragments
from hermes_data.sessions.coordination import sql as coordination_sql
from hermes_data.sessions.agent import identity_sql
from hermes_data.sessions.agent import accounting_sql
from hermes_data.sessions.sql.core import CHILD_MARKERS, FILLABLE, PUBLISH_PARENT_COLS, ROUTING

log = logging.getLogger("hermes_data.sessions.core.lifecycle")


def is_automatic_end_reason(reason: object) -> bool:
    """Whether ``reason`` is an end the store wrote automatically (``agent_close``,
    ``ws_orphan_reap``, an idle or LRU eviction …, the reasons of
    :data:`~hermes_data.sessions.sql.AUTOMATIC_END_REASONS`) rather than a deliberate boundary
    (compression, a reset, an explicit close): a compression publish clears such an end on its
    parent instead of refusing. Upstream's name."""
    return isinstance(reason, str) and reason in AUTOMATIC_END_REASONS


def profile_namespace(key: str) -> str:
    """The ``agent:<ns>:`` prefix of a session key (or its first six characters)."""
    idx = key.find(":", 6)
    return key[: idx + 1] if idx != -1 else key[:6]


def namespaces_agree(a: str | None, b: str | None) -> bool:
    """Profile-namespace rule of docs/sessions.md §4.1: either key empty, or both share the ``agent:<ns>:`` prefix."""
    if not a or not b:
        return True
    return profile_namespace(a) == profile_namespace(b)


def json_obj(value: Any) -> dict[str, Any]:
    """A model_config as a dict: malformed or non-object JSON reads as empty."""
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            return {}
        return parsed if isinstance(parsed, dict) else {}
    return {}


def config_dump(value: Any) -> str | None:
    """A model_config value as stored text (strings are kept as given)."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def child_config(kind: str, parent_id: str, model_config: Any) -> dict[str, Any]:
    """The model_config of a ``branch`` / ``delegate`` / ``reset`` child: its marker set."""
    marker = CHILD_MARKERS.get(kind)
    if marker is None:
        raise ValueError(f"child kind {kind!r} is not one of {', '.join(CHILD_MARKERS)}")
    cfg = json_obj(model_config)
    cfg[marker] = parent_id
    return cfg


def store_prompt(conn: Connection, q: Fragments, prompt: str | None) -> str | None:
    """Keep a system prompt once (content-addressed); returns its hash."""
    if prompt is None:
        return None
    digest = hashlib.sha256(prompt.encode("utf-8", "surrogatepass")).hexdigest()
    conn.exec_driver_sql(q.INSERT_PROMPT, (digest, enc.scrub(prompt)))
    return digest


@dataclass(frozen=True)
class NewSession:
    """What ``create_session`` writes (``fields``: the optional core columns)."""

    session_id: str
    source: str
    fields: dict[str, Any]
    system_prompt: str | None
    owner: str | None
    hidden: bool
    profile_given: bool


def create_session(conn: Connection, q: Fragments, new: NewSession) -> str:
    """Insert a session, or enrich an existing one (fill only NULL columns)."""
    fields = dict(new.fields)
    fields["system_prompt_hash"] = store_prompt(conn, q, new.system_prompt)
    existing = conn.exec_driver_sql(q.SESSION_MODEL_CONFIG, (new.session_id,)).first()
    if existing is None:
        cols = ("id", "source", "started_at", "hidden", *fields)
        vals = (new.session_id, new.source, enc.now(), int(bool(new.hidden)), *fields.values())
        conn.exec_driver_sql(q.insert_session(cols), vals)
    else:
        params: list[Any] = [fields.get(c) for c in (*FILLABLE, "git_branch")]
        old_cfg = json_obj(existing[0])
        new_cfg = fields.get("model_config")
        config: str | None = None
        if existing[0] is not None and set(old_cfg) == {"_reset_from"} and new_cfg is not None:
            merged = json_obj(new_cfg)
            merged["_reset_from"] = old_cfg["_reset_from"]
            config = json.dumps(merged, ensure_ascii=False)
        elif existing[0] is None and new_cfg is not None:
            config = new_cfg
        if config is None:
            conn.exec_driver_sql(q.ENRICH_SESSION, (*params, new.session_id))
        else:
            conn.exec_driver_sql(q.ENRICH_SESSION_CONFIG, (*params, config, new.session_id))
        if new.source != "unknown":
            # docs/sessions-agent.md §3.4 (amends docs/sessions.md §4.1): a row an accounting write created as
            # 'unknown' takes the real source while it has no message rows (the trigram
            # boundary depends on source only once messages exist).
            conn.exec_driver_sql(accounting_sql.for_dialect(q.dialect).UPGRADE_UNKNOWN_SOURCE,
                                 (new.source, new.session_id, new.session_id))
    _backfill_from_parent(conn, q, new.session_id)
    if not new.profile_given and new.owner is not None:
        conn.exec_driver_sql(q.FILL_PROFILE, (new.owner, new.session_id))
    return new.session_id


def _backfill_from_parent(conn: Connection, q: Fragments, session_id: str) -> None:
    # A child inherits workspace columns (and, under compression, routing) from its parent,
    # and the parent's profile when their key namespaces agree.
    row = conn.exec_driver_sql(q.PARENT_KEYS, (session_id,)).first()
    if row is None:
        return
    child_key, parent_key, parent_reason, parent_profile = row
    if parent_reason == "compression":
        conn.exec_driver_sql(q.INHERIT_WORKSPACE_AND_ROUTING, (session_id,))
        child_key = child_key or parent_key
    else:
        conn.exec_driver_sql(q.INHERIT_WORKSPACE, (session_id,))
    if parent_profile is not None and namespaces_agree(child_key, parent_key):
        conn.exec_driver_sql(q.FILL_PROFILE, (parent_profile, session_id))


def end_session(conn: Connection, q: Fragments, session_id: str, end_reason: str) -> bool:
    """End an open session; the first reason wins. Returns whether the row changed. A reset
    reason that lands bumps the peer's conversation generation (docs/sessions-agent.md §3.8)."""
    changed = conn.exec_driver_sql(q.END_SESSION,
                                   (enc.now(), end_reason, session_id)).rowcount == 1
    if changed and end_reason in RESET_END_REASONS:
        conn.exec_driver_sql(identity_sql.for_dialect(q.dialect).BUMP_GENERATION, (session_id,))
    return changed


def reopen_session(conn: Connection, q: Fragments, session_id: str,
                   allow_continued_parent: bool = False) -> bool:
    """Clear the end fields, first stamping ``_reset_from`` on legacy reset children. A
    compression parent with a continuation child stays ended (``False``, unchanged:
    docs/sessions-coordination.md §3.22 A8 — two live heads would re-key the turn lease)
    unless ``allow_continued_parent`` (upstream reopened it)."""
    if not allow_continued_parent and conn.exec_driver_sql(
            coordination_sql.for_dialect(q.dialect).ANY_CONTINUATION,
            (session_id,)).first() is not None:
        return False
    conn.exec_driver_sql(q.STAMP_LEGACY_RESET_CHILDREN, (session_id, session_id))
    return conn.exec_driver_sql(q.REOPEN_SESSION, (session_id,)).rowcount == 1


@dataclass(frozen=True)
class Continuation:
    """A compression continuation to publish (see :func:`publish_compression_child`)."""

    parent_id: str
    child_id: str
    source: str
    rows: list[messages.EncodedRow]
    model: str | None
    model_config: Any
    system_prompt: str | None
    cwd: str | None
    profile_name: str | None
    owner: str | None
    watermark: int | None
    watermark_ceiling: int | None
    carry_title: bool
    lease_holder: str | None


def publish_compression_child(conn: Connection, q: Fragments, c: Continuation) -> PublishResult:
    """End the parent with ``compression`` and publish its continuation, in the caller's
    transaction (docs/sessions.md §4.3): lease check, automatic end reasons cleared, the child inheriting
    routing and flags, the handoff rows (and optionally the parent's rows above a
    watermark), counters, the title moved, the parent ended — or nothing at all."""
    now = enc.now()
    if c.lease_holder is not None:
        lease = conn.exec_driver_sql(q.COMPRESSION_LEASE, (c.parent_id,)).first()
        if lease is None or lease[0] != c.lease_holder or lease[1] <= now:
            raise CompressionSessionBusyError(
                f"{c.lease_holder!r} holds no live compression lease on {c.parent_id!r}")
    row = conn.exec_driver_sql(q.PUBLISH_PARENT, (c.parent_id,)).first()
    if row is None:
        raise SessionNotFoundError(c.parent_id)
    parent = dict(zip(PUBLISH_PARENT_COLS, row))
    if parent["ended_at"] is not None or parent["end_reason"] is not None:
        if is_automatic_end_reason(parent["end_reason"]):
            conn.exec_driver_sql(q.CLEAR_END, (c.parent_id,))
            log.info("publish: cleared automatic end reason %r of %s", parent["end_reason"],
                     c.parent_id)
        else:
            raise CompressionPublishError(
                f"parent {c.parent_id!r} already ended ({parent['end_reason']!r})")
    prompt_hash = store_prompt(conn, q, c.system_prompt)
    vals = (c.child_id, c.source, now, c.parent_id, c.model, config_dump(c.model_config),
            prompt_hash, c.cwd or parent["cwd"], parent["git_branch"], parent["git_repo_root"],
            c.profile_name or parent["profile_name"] or c.owner,
            *(parent[k] for k in ROUTING), parent["archived"], parent["pinned"],
            parent["hidden"], parent["last_read_at"])
    try:
        conn.exec_driver_sql(q.INSERT_CONTINUATION, vals)
    except sa.exc.IntegrityError as exc:
        raise CompressionPublishError(
            f"child {c.child_id!r} cannot be inserted: {exc.orig}") from exc
    tool_calls = messages.insert_rows(conn, q, c.child_id, c.rows)
    cloned = 0
    if c.watermark is not None:
        cloned, cloned_tools = messages.clone_rows(conn, q, c.parent_id, c.child_id,
                                                   c.watermark, c.watermark_ceiling)
        tool_calls += cloned_tools
    conn.exec_driver_sql(q.SET_COUNTS, (len(c.rows) + cloned, tool_calls, c.child_id))
    moved = False
    if c.carry_title and parent["title"] is not None:
        conn.exec_driver_sql(q.CLEAR_TITLE, (c.parent_id,))
        conn.exec_driver_sql(q.SET_TITLE, (parent["title"], parent["title_source"], c.child_id))
        moved = True
    ended = conn.exec_driver_sql(q.END_COMPRESSION, (enc.now(), c.parent_id)).rowcount
    if ended != 1:
        raise CompressionPublishError(
            f"parent {c.parent_id!r} changed during publication; nothing was published")
    return PublishResult(c.child_id, len(c.rows), cloned, moved)
