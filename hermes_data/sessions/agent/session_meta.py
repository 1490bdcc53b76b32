"""Session metadata of the agent turn API (docs/sessions-agent.md §3.3, §3.9, §3.10):
model_config merges (lineage markers never change), model / prompt / route / runtime-lock
writes, yolo and gateway-runtime readers, tool names, cwd claims and Git metadata,
repo-root and profile backfills, distinct cwds, the expiry flag.

Operations take the store first (the facade delegates); statements are in
:mod:`.sql.session_meta`. Writes that rewrite the model or billing route flush the token
queue first (a queued old-route first delta would otherwise resurrect the old route).
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterable, Mapping

from sqlalchemy.engine import Connection

from hermes_data.storable import check_text, check_texts
from hermes_data.sessions.core import encoding as enc
from hermes_data.sessions.core import lifecycle
from hermes_data.sessions.rows import CwdUsage
from hermes_data.sessions.handle import StoreHandle
from hermes_data.sessions.sql import Fragments
from hermes_data.sessions.sql.core import CHILD_MARKERS
from hermes_data.sessions.agent.session_meta_sql import BACKFILL_PAIRS, MetaStatements, for_dialect

#: Lineage markers (docs/sessions.md §2.6): nothing here adds, changes or removes them.
LINEAGE_MARKERS = frozenset(CHILD_MARKERS.values())
#: ``merge_model_config_json``'s "row missing" sentinel.
ROW_MISSING = object()
_PROFILE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


def _m(store: StoreHandle) -> MetaStatements:
    return for_dialect(store.backend.dialect)


def _refuse_markers(patch: Mapping[str, Any]) -> None:
    touched = LINEAGE_MARKERS.intersection(patch)
    if touched:
        raise ValueError(f"lineage marker(s) {', '.join(sorted(touched))} cannot be patched "
                         "(docs/sessions.md §2.6: they define the trigram boundary)")


def merge_model_config_json(conn: Connection, q: Fragments, session_id: str,
                            patch: Mapping[str, Any]) -> Any:
    """Merge ``patch`` into the stored model_config (read inside the transaction, locked on
    PostgreSQL) and write it: ``None`` deletes a key, other values set it, ``{}`` stores NULL;
    a non-JSON or non-object stored value merges as ``{}``. Returns the merged dict, or
    :data:`ROW_MISSING`. A patch naming a lineage marker raises ``ValueError``."""
    _refuse_markers(patch)
    m = for_dialect(q.dialect)
    row = conn.exec_driver_sql(m.CONFIG_FOR_UPDATE, (session_id,)).first()
    if row is None:
        return ROW_MISSING
    cfg = lifecycle.json_obj(row[0])
    for key, value in patch.items():
        if value is None:
            cfg.pop(key, None)
        else:
            cfg[key] = value
    conn.exec_driver_sql(m.SET_CONFIG, (_dump(cfg), session_id))
    return cfg


def _dump(cfg: Mapping[str, Any]) -> str | None:
    return json.dumps(cfg, ensure_ascii=False) if cfg else None


def _drop_prompt_if_unused(conn: Connection, m: MetaStatements, old_hash: str | None) -> None:
    if old_hash is not None:
        conn.exec_driver_sql(m.DROP_PROMPT_IF_UNUSED, (old_hash, old_hash))


def _old_hash(conn: Connection, m: MetaStatements, session_id: str) -> tuple[bool, str | None]:
    row = conn.exec_driver_sql(m.PROMPT_HASH, (session_id,)).first()
    return (row is not None, None if row is None else row[0])


def update_system_prompt(store: StoreHandle, session_id: str, system_prompt: str | None) -> None:
    """Store the session's system prompt (content-addressed, docs/sessions-agent.md §2.3) — None clears it — and
    remove the previous prompt if no session references it any more."""
    check_texts((("session_id", session_id), ("system_prompt", system_prompt)))
    if not session_id:
        return
    m = _m(store)

    def work(conn: Connection) -> None:
        exists, old = _old_hash(conn, m, session_id)
        if not exists:
            return
        new = lifecycle.store_prompt(conn, store.backend.sql, system_prompt)
        conn.exec_driver_sql(m.SET_PROMPT, (new, session_id))
        if old != new:
            _drop_prompt_if_unused(conn, m, old)

    store.backend.write(work)


def set_billing_route(conn: Connection, q: Fragments, session_id: str, provider: str | None,
                      base_url: str | None, billing_mode: str | None) -> None:
    """The billing-route write of ``update_session_billing_route`` (caller's transaction)."""
    m = for_dialect(q.dialect)
    exists, old = _old_hash(conn, m, session_id)
    if exists:
        conn.exec_driver_sql(m.SET_BILLING_ROUTE, (provider, base_url, billing_mode, session_id))
        _drop_prompt_if_unused(conn, m, old)


def update_session_model(store: StoreHandle, session_id: str, model: str,
                         provider: str | None = None) -> None:
    """Switch the session's model (and provider, when given): ``browser_model_lock`` is
    cleared, ``model``/``provider`` recorded in model_config, the prompt snapshot dropped.
    A missing row is a no-op; an empty model is a ``ValueError``."""
    if not model or not isinstance(model, str):
        raise ValueError(f"update_session_model needs a non-empty model, not {model!r}")
    check_texts((("session_id", session_id), ("model", model), ("provider", provider)))
    if not session_id:
        return
    store.token_writer.flush()
    patch: dict[str, Any] = {"browser_model_lock": None, "model": model}
    if provider is not None:
        patch["provider"] = provider
    m = _m(store)

    def work(conn: Connection) -> None:
        exists, old = _old_hash(conn, m, session_id)
        if not exists or merge_model_config_json(conn, store.backend.sql, session_id,
                                                  patch) is ROW_MISSING:
            return
        conn.exec_driver_sql(m.SET_MODEL, (model, session_id))
        _drop_prompt_if_unused(conn, m, old)

    store.backend.write(work)


def update_session_meta(store: StoreHandle, session_id: str, model_config_json: Any,
                        model: str | None = None) -> None:
    """Replace the session's model_config with ``model_config_json`` (a JSON object, as text
    or a mapping) keeping the stored lineage markers; ``model`` only when given."""
    if isinstance(model_config_json, Mapping):
        new = dict(model_config_json)
    else:
        try:
            new = json.loads(model_config_json)
        except (TypeError, ValueError):
            raise ValueError(f"model_config_json is not JSON: {model_config_json!r:.80}") \
                from None
        if not isinstance(new, dict):
            raise ValueError(f"model_config_json must be a JSON object, not {type(new).__name__}")
    check_texts((("session_id", session_id), ("model", model)))
    if not session_id:
        return
    store.token_writer.flush()
    m = _m(store)

    def work(conn: Connection) -> None:
        row = conn.exec_driver_sql(m.CONFIG_FOR_UPDATE, (session_id,)).first()
        if row is None:
            return
        stored = lifecycle.json_obj(row[0])
        cfg = {k: v for k, v in new.items() if k not in LINEAGE_MARKERS}
        cfg.update({k: v for k, v in stored.items() if k in LINEAGE_MARKERS})
        conn.exec_driver_sql(m.SET_META, (_dump(cfg), model, session_id))

    store.backend.write(work)


def patch_session_model_config(store: StoreHandle, session_id: str,
                               patch: Mapping[str, Any]) -> bool:
    """Merge ``patch`` into model_config (``None`` deletes a key). False for an empty patch or
    a missing row; ``ValueError`` for a patch naming a lineage marker."""
    check_text("session_id", session_id)
    if not session_id or not patch:
        return False
    _refuse_markers(patch)
    return store.backend.write(lambda c: merge_model_config_json(
        c, store.backend.sql, session_id, patch) is not ROW_MISSING)


def get_session_model_config_value(store: StoreHandle, session_id: str, key: str,
                                   default: Any = None) -> Any:
    """One model_config key (no token flush); missing row, bad JSON or absent key ⇒ default."""
    if not session_id:
        return default
    m = _m(store)
    row = store.backend.read(lambda c: c.exec_driver_sql(m.CONFIG, (session_id,)).first())
    if row is None:
        return default
    return lifecycle.json_obj(row[0]).get(key, default)


def update_session_runtime_lock(store: StoreHandle, session_id: str, *, model: str | None = None,
                                provider: str | None = None,
                                model_options: Mapping[str, Any] | None = None,
                                route_source: str | None = None, confirmed: bool = False) -> bool:
    """Record the runtime model lock (``browser_model_lock``) and the model when given; the
    prompt snapshot goes. False for a missing row; ``TypeError`` for options JSON cannot hold."""
    lock = {"provider": provider or "", "model": model or "", "model_options":
            dict(model_options or {}), "route_source": route_source or "",
            "confirmed": bool(confirmed), "updated_at": enc.now()}
    json.dumps(lock)  # non-serialisable options raise TypeError before anything is written
    check_texts((("session_id", session_id), ("model", model), ("provider", provider),
                 ("route_source", route_source)))
    if not session_id:
        return False
    store.token_writer.flush()
    m = _m(store)

    def work(conn: Connection) -> bool:
        exists, old = _old_hash(conn, m, session_id)
        if not exists or merge_model_config_json(
                conn, store.backend.sql, session_id, {"browser_model_lock": lock}) is ROW_MISSING:
            return False
        conn.exec_driver_sql(m.SET_MODEL_IF_GIVEN, (model, session_id))
        _drop_prompt_if_unused(conn, m, old)
        return True

    return store.backend.write(work)


def set_session_yolo(store: StoreHandle, session_id: str, enabled: bool) -> bool:
    """Set ``yolo_mode`` in model_config; False for a missing row."""
    check_text("session_id", session_id)
    if not session_id:
        return False
    return store.backend.write(lambda c: merge_model_config_json(
        c, store.backend.sql, session_id, {"yolo_mode": bool(enabled)}) is not ROW_MISSING)


def _row_config(row: Any) -> dict[str, Any]:
    if row is None:
        return {}
    value = row.get("model_config") if isinstance(row, Mapping) \
        else getattr(row, "model_config", None)
    return lifecycle.json_obj(value)


def _row_value(row: Any, key: str) -> Any:
    if row is None:
        return None
    return row.get(key) if isinstance(row, Mapping) else getattr(row, key, None)


def session_yolo_enabled(row: Any) -> bool:
    """Whether a session row (``SessionRow``, mapping or None) enables the approval bypass:
    True only for JSON ``true`` or the integer 1 (the string ``"false"`` never enables it)."""
    value = _row_config(row).get("yolo_mode")
    return value is True or (type(value) is int and value == 1)


def session_gateway_runtime(row: Any) -> dict[str, Any]:
    """The gateway runtime a session row names: a ``gateway_runtime`` object with a provider;
    else top-level ``provider``/``base_url``/``api_mode``; else a concrete
    ``billing_provider`` (not ``auto``/``custom``); else the object as it is (or ``{}``)."""
    cfg = _row_config(row)
    nested = cfg.get("gateway_runtime")
    nested = nested if isinstance(nested, dict) else None
    if nested is not None and nested.get("provider"):
        return {k: v for k, v in nested.items() if v is not None}
    top = {k: cfg[k] for k in ("provider", "base_url", "api_mode") if cfg.get(k)}
    if top:
        return top
    billing = _row_value(row, "billing_provider")
    if isinstance(billing, str) and billing.strip() \
            and billing.strip().lower() not in ("auto", "custom"):
        return {"provider": billing.strip()}
    return {k: v for k, v in nested.items() if v is not None} if nested is not None else {}


def update_session_tool_names(store: StoreHandle, session_id: str,
                              tool_names: Iterable[str] | None) -> None:
    """Pin the session's tool names (a JSON array, in order); None clears. A bare string or a
    non-string element is a ``TypeError``."""
    if isinstance(tool_names, (str, bytes)):
        raise TypeError(f"tool_names must be a sequence of strings, not a bare string "
                        f"{tool_names!r:.40}")
    names = None if tool_names is None else list(tool_names)
    if names is not None:
        bad = [n for n in names if not isinstance(n, str)]
        if bad:
            raise TypeError(f"tool_names elements must be strings, not {bad[0]!r}")
    check_text("session_id", session_id)
    if not session_id:
        return
    text = None if names is None else json.dumps([enc.scrub(n) for n in names],
                                                 ensure_ascii=False)
    store.backend.write(lambda c: c.exec_driver_sql(_m(store).SET_TOOL_NAMES,
                                                    (text, session_id)))


def set_expiry_finalized(store: StoreHandle, session_id: str, finalized: bool = True) -> bool:
    """Set the gateway expiry flag (0/1); whether a row changed."""
    check_text("session_id", session_id)
    if not session_id:
        return False
    v = int(bool(finalized))
    return store.backend.write(lambda c: c.exec_driver_sql(
        _m(store).SET_EXPIRY_FINALIZED, (v, session_id, v)).rowcount == 1)


def _blank(value: str | None) -> str | None:
    value = (value or "").strip()
    return value or None


def update_session_cwd(store: StoreHandle, session_id: str, cwd: str,
                       git_branch: str | None = None, git_repo_root: str | None = None,
                       replace_git_meta: bool = False) -> int | None:
    """Claim ``cwd`` for the session and return the new ``git_metadata_generation``. A move
    (or ``replace_git_meta``) replaces branch and root (NULL when not given: the old
    directory's metadata never survives a move); the same cwd only takes non-empty values.
    None for a blank id/cwd or a missing row."""
    check_texts((("session_id", session_id), ("cwd", cwd), ("git_branch", git_branch),
                 ("git_repo_root", git_repo_root)))
    if not session_id or not (cwd or "").strip():
        return None
    m = _m(store)
    branch, root = _blank(git_branch), _blank(git_repo_root)

    def work(conn: Connection) -> int | None:
        row = conn.exec_driver_sql(m.CWD_FOR_UPDATE, (session_id,)).first()
        if row is None:
            return None
        st = m.CLAIM_CWD_REPLACE if replace_git_meta or row[0] != cwd else m.CLAIM_CWD_KEEP
        conn.exec_driver_sql(st, (cwd, branch, root, session_id))
        return int(conn.exec_driver_sql(m.GIT_GENERATION, (session_id,)).scalar_one())

    return store.backend.write(work)


def publish_session_git_metadata(store: StoreHandle, session_id: str, cwd: str, generation: int,
                                 git_branch: str | None = None,
                                 git_repo_root: str | None = None) -> bool:
    """Publish asynchronously probed Git metadata onto the claim it was probed for: True iff
    the session still has ``cwd`` at ``generation`` (an old probe never overwrites a newer
    claim, even after A → B → A). Invalid input ⇒ False; NUL or a lone surrogate in a text
    ⇒ :class:`~hermes_data.errors.UnstorableValueError` (issue 31)."""
    check_texts((("session_id", session_id), ("cwd", cwd), ("git_branch", git_branch),
                 ("git_repo_root", git_repo_root)))
    branch, root = _blank(git_branch), _blank(git_repo_root)
    if not session_id or not (cwd or "").strip() or isinstance(generation, bool) \
            or not isinstance(generation, int) or generation < 1 or (branch is None and root is None):
        return False
    return store.backend.write(lambda c: c.exec_driver_sql(
        _m(store).PUBLISH_GIT, (branch, root, session_id, cwd, generation)).rowcount == 1)


def backfill_repo_roots(store: StoreHandle, cwd_to_root: Mapping[str, str]) -> int:
    """Fill the empty ``git_repo_root`` of sessions by cwd (non-empty pairs only), in one
    transaction of one statement per 450 pairs; returns the rows updated."""
    pairs = [(c, r) for c, r in cwd_to_root.items() if c and r]
    check_texts(("cwd_to_root", v) for p in pairs for v in p)
    if not pairs:
        return 0
    m = _m(store)

    def work(conn: Connection) -> int:
        total = 0
        for i in range(0, len(pairs), BACKFILL_PAIRS):
            chunk = pairs[i:i + BACKFILL_PAIRS]
            result = conn.exec_driver_sql(m.backfill_roots(len(chunk)),
                                          tuple(v for p in chunk for v in p))
            total += store.backend.changes(conn, result)
        return total

    return store.backend.write(work)


def distinct_session_cwds(store: StoreHandle, include_archived: bool = False) -> list[CwdUsage]:
    """Every non-blank cwd with its session count and last activity, newest first."""
    m = _m(store)
    st = m.DISTINCT_CWDS_ALL if include_archived else m.DISTINCT_CWDS
    rows = store.backend.read(lambda c: c.exec_driver_sql(st).fetchall())
    return [CwdUsage(r[0], int(r[1]), float(r[2] or 0.0)) for r in rows]


def backfill_null_session_profiles(store: StoreHandle, profile_name: str) -> int:
    """Stamp ``profile_name`` on rows without an owner (never overwrites one); returns the
    count. Empty ⇒ 0; a name outside ``^[a-z0-9][a-z0-9_-]{0,63}$`` ⇒ ``ValueError``."""
    name = (profile_name or "").strip()
    if not name:
        return 0
    if not _PROFILE.match(name):
        raise ValueError(f"not a profile name: {profile_name!r}")
    return store.backend.write(lambda c: c.exec_driver_sql(
        _m(store).BACKFILL_PROFILES, (name,)).rowcount)
