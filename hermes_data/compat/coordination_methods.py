"""``SessionDB``'s upstream-shaped methods of the coordination area (the names are listed in
:data:`hermes_data.compat.names.SESSION_DB_METHODS`); each calls the typed store and adapts
only names, arguments and return shapes (docs/compat.md "Coordination")."""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from hermes_data.compat.base import CompatBase
from hermes_data.compat.shapes import as_dict, as_plain, pick, session_list_dict, without_none
from hermes_data.sessions.rows import NewMessage

#: The keys of upstream's rewind result (``replacement_message_id`` only when asked for).
_REWIND_KEYS = ("rewound_count", "target_message", "new_head_id")
#: The key upstream leaves out of its auto-archive report unless the run failed.
_AUTO_ARCHIVE_OPTIONAL = ("error",)


class CoordinationMethods(CompatBase):
    """The coordination methods of :class:`~hermes_data.compat.SessionDB`."""

    # -- compression locks and the lease-required publish ---------------------------------

    def try_acquire_compression_lock(self, session_id: str, holder: str,
                                     ttl_seconds: float = 300.0) -> bool:
        """Take the session's compression lock for ``holder`` (expired or dead-holder locks
        reclaimed); True when owned. Calls ``store.try_acquire_compression_lock``."""
        return self.store.try_acquire_compression_lock(session_id, holder, ttl_seconds)

    def refresh_compression_lock(self, session_id: str, holder: str,
                                 ttl_seconds: float = 300.0) -> bool:
        """Extend ``holder``'s compression lock; False when another holder owns it. Calls
        ``store.refresh_compression_lock``."""
        return self.store.refresh_compression_lock(session_id, holder, ttl_seconds)

    def release_compression_lock(self, session_id: str, holder: str) -> None:
        """Drop the compression lock if ``holder`` still owns it. Calls
        ``store.release_compression_lock``."""
        self.store.release_compression_lock(session_id, holder)

    def get_compression_lock_holder(self, session_id: str) -> Optional[str]:
        """The live compression lock's holder, or None. Calls
        ``store.get_compression_lock_holder``."""
        return self.store.get_compression_lock_holder(session_id)

    def publish_compression_child(
        self, *, parent_session_id: str, child_session_id: str, source: str,
        messages: Sequence[NewMessage], model: Optional[str] = None,
        model_config: Optional[Dict[str, Any]] = None, system_prompt: Optional[str] = None,
        cwd: Optional[str] = None, profile_name: Optional[str] = None,
        compression_lock_holder: Optional[str] = None, require_compression_lease: bool = True,
        require_lease_refresh: bool = False, lease_ttl_seconds: float = 300.0,
        watermark: Optional[int] = None, watermark_ceiling: Optional[int] = None,
    ) -> None:
        """End the parent with ``compression`` and publish its continuation with the handoff
        ``messages`` in one transaction; by default the holder's live lease is required
        (upstream's default, passed explicitly). Calls ``store.publish_compression_child``
        and drops its result (upstream returns None)."""
        self.store.publish_compression_child(
            parent_session_id, child_session_id, source, messages, model=model,
            model_config=model_config, system_prompt=system_prompt, cwd=cwd,
            profile_name=profile_name, compression_lock_holder=compression_lock_holder,
            require_compression_lease=require_compression_lease,
            require_lease_refresh=require_lease_refresh, lease_ttl_seconds=lease_ttl_seconds,
            watermark=watermark, watermark_ceiling=watermark_ceiling)

    # -- turn leases and fenced appends ---------------------------------------------------

    def try_acquire_session_turn_lease(self, session_id: str, holder: str, *,
                                       ttl_seconds: float = 300.0,
                                       patience_s: Optional[float] = None) -> bool:
        """One attempt at the conversation's turn lease (keyed by the lineage root). Calls
        ``store.try_acquire_session_turn_lease``."""
        return self.store.try_acquire_session_turn_lease(
            session_id, holder, ttl_seconds=ttl_seconds, patience_s=patience_s)

    def acquire_session_turn_lease(
        self, session_id: str, holder: str, *, ttl_seconds: float = 300.0,
        wait_seconds: float = 1800.0, poll_interval_seconds: float = 1.0,
        on_wait: Optional[Callable[[float], Any]] = None,
        wait_notice_interval_seconds: float = 15.0,
        should_abort: Optional[Callable[[], Any]] = None, acquire_patience_s: float = 0.5,
    ) -> bool:
        """Poll for the turn lease up to ``wait_seconds`` (``on_wait`` notices,
        ``should_abort`` stops early). Calls ``store.acquire_session_turn_lease``."""
        return self.store.acquire_session_turn_lease(
            session_id, holder, ttl_seconds=ttl_seconds, wait_seconds=wait_seconds,
            poll_interval_seconds=poll_interval_seconds, on_wait=on_wait,
            wait_notice_interval_seconds=wait_notice_interval_seconds,
            should_abort=should_abort, acquire_patience_s=acquire_patience_s)

    def refresh_session_turn_lease(self, session_id: str, holder: str, *,
                                   ttl_seconds: float = 300.0) -> bool:
        """Extend ``holder``'s turn lease; False when it does not own it. Calls
        ``store.refresh_session_turn_lease``."""
        return self.store.refresh_session_turn_lease(session_id, holder,
                                                     ttl_seconds=ttl_seconds)

    def release_session_turn_lease(self, session_id: str, holder: str) -> None:
        """Drop ``holder``'s turn lease. Calls ``store.release_session_turn_lease``."""
        self.store.release_session_turn_lease(session_id, holder)

    def append_message(
        self, session_id: str, role: str, content: Any = None, tool_name: Optional[str] = None,
        tool_calls: Any = None, tool_call_id: Optional[str] = None,
        token_count: Optional[int] = None, finish_reason: Optional[str] = None,
        reasoning: Optional[str] = None, reasoning_content: Optional[str] = None,
        reasoning_details: Any = None, codex_reasoning_items: Any = None,
        codex_message_items: Any = None, platform_message_id: Optional[str] = None,
        observed: bool = False, effect_disposition: Optional[str] = None,
        _compressed_summary: bool = False, timestamp: Any = None,
        api_content: Optional[str] = None, display_kind: Optional[str] = None,
        display_metadata: Optional[Dict[str, Any]] = None,
        compression_lock_holder: Optional[str] = None, turn_lease_holder: Optional[str] = None,
        turn_lease_ttl_seconds: float = 300.0,
    ) -> int:
        """Append one message (counters follow) and return its row id; upstream's positional
        field order. Calls ``store.append_message`` with the fields as keywords."""
        fields: Dict[str, Any] = {
            "tool_name": tool_name, "tool_calls": tool_calls, "tool_call_id": tool_call_id,
            "token_count": token_count, "finish_reason": finish_reason,
            "reasoning": reasoning, "reasoning_content": reasoning_content,
            "reasoning_details": reasoning_details,
            "codex_reasoning_items": codex_reasoning_items,
            "codex_message_items": codex_message_items,
            "platform_message_id": platform_message_id, "observed": observed,
            "effect_disposition": effect_disposition,
            "_compressed_summary": _compressed_summary, "timestamp": timestamp,
            "api_content": api_content, "display_kind": display_kind,
            "display_metadata": display_metadata,
        }
        return self.store.append_message(
            session_id, role, content, compression_lock_holder=compression_lock_holder,
            turn_lease_holder=turn_lease_holder, turn_lease_ttl_seconds=turn_lease_ttl_seconds,
            **fields)

    def append_messages_batch(self, session_id: str, messages: Sequence[NewMessage],
                              compression_lock_holder: Optional[str] = None,
                              turn_lease_holder: Optional[str] = None,
                              chunk_rows: Optional[int] = None,
                              turn_lease_ttl_seconds: float = 300.0) -> int:
        """Append ``messages`` in one transaction (or per ``chunk_rows``); the count inserted.
        Calls ``store.append_messages_batch`` (``chunk_rows`` is its third positional)."""
        return self.store.append_messages_batch(
            session_id, messages, chunk_rows, compression_lock_holder=compression_lock_holder,
            turn_lease_holder=turn_lease_holder, turn_lease_ttl_seconds=turn_lease_ttl_seconds)

    # -- transcript rewrites and rewind ---------------------------------------------------

    def replace_messages(self, session_id: str, messages: List[Dict[str, Any]],
                         active_only: bool = False, archive_dropped: bool = False,
                         reject_active_turn_lease: bool = False) -> None:
        """Replace the session's transcript with ``messages`` in one transaction. Calls
        ``store.replace_messages`` and drops its report (upstream returns None)."""
        self.store.replace_messages(session_id, messages, active_only, archive_dropped,
                                    reject_active_turn_lease)

    def clear_messages(self, session_id: str) -> None:
        """Delete the session's messages and zero its counters, a compression-ended parent's
        too. Calls ``store.clear_messages(allow_compression_parent=True)`` and drops its count
        (upstream returns None)."""
        self.store.clear_messages(session_id, allow_compression_parent=True)

    def archive_and_compact(self, session_id: str, compacted_messages: List[Dict[str, Any]],
                            model_config_patch: Optional[Dict[str, Any]] = None,
                            watermark: Optional[int] = None, lock_holder: Optional[str] = None,
                            tail_count: int = 0) -> int:
        """Soft-archive the live rows as compacted and insert ``compacted_messages``; the new
        active count. Calls ``store.archive_and_compact``."""
        return self.store.archive_and_compact(session_id, compacted_messages,
                                              model_config_patch, watermark, lock_holder,
                                              tail_count)

    def rewind_to_message(self, session_id: str, target_message_id: int, *,
                          preserve_compaction_handoff: bool = False,
                          expected_active_ids: Optional[List[int]] = None,
                          expected_target_content: Any = None) -> Dict[str, Any]:
        """Deactivate the user row ``target_message_id`` and every later row; upstream's dict
        ``{rewound_count, target_message, new_head_id}`` (plus ``replacement_message_id``
        with ``preserve_compaction_handoff``). Calls ``store.rewind_to_message``."""
        result = self.store.rewind_to_message(
            session_id, target_message_id,
            preserve_compaction_handoff=preserve_compaction_handoff,
            expected_active_ids=expected_active_ids,
            expected_target_content=expected_target_content)
        keys = _REWIND_KEYS + (("replacement_message_id",) if preserve_compaction_handoff
                               else ())
        return pick(result, keys)

    def restore_rewound(self, session_id: str, since_message_id: int) -> int:
        """Reactivate rewound rows from ``since_message_id`` on; the count. Calls
        ``store.restore_rewound``."""
        return self.store.restore_rewound(session_id, since_message_id)

    # -- lineage recovery -----------------------------------------------------------------

    def find_live_compression_child(self, parent_session_id: str) -> Optional[Dict[str, Any]]:
        """The one live continuation of a compression-ended parent as a session dict, or
        None. Calls ``store.find_live_compression_child``."""
        return session_list_dict(self.store.find_live_compression_child(parent_session_id))

    def reopen_orphaned_compression_session(self, session_id: str) -> bool:
        """Reopen a compression parent no continuation was published for. Calls
        ``store.reopen_orphaned_compression_session``."""
        return self.store.reopen_orphaned_compression_session(session_id)

    def finalize_orphaned_compression_sessions(self) -> int:
        """End never-finalized compression continuations ``orphaned_compression``; the count.
        Calls ``store.finalize_orphaned_compression_sessions``."""
        return self.store.finalize_orphaned_compression_sessions()

    # -- failure cooldowns, streaks and the recovery deadline -----------------------------

    def record_compression_failure_cooldown(self, session_id: str, cooldown_until: float,
                                            error: Optional[str] = None) -> None:
        """Persist a compression-failure cooldown. Calls
        ``store.record_compression_failure_cooldown``."""
        self.store.record_compression_failure_cooldown(session_id, cooldown_until, error)

    def get_compression_failure_cooldown(self, session_id: str) -> Optional[Dict[str, Any]]:
        """The cooldown still in force as ``{cooldown_until, remaining_seconds, error}``, or
        None. Calls ``store.get_compression_failure_cooldown``."""
        return as_dict(self.store.get_compression_failure_cooldown(session_id))

    def get_compression_failure_cooldown_row(self, session_id: str) -> Dict[str, Any]:
        """The stored cooldown columns unfiltered, ``{session_exists, cooldown_until,
        error}``. Calls ``store.get_compression_failure_cooldown_row``."""
        return as_plain(self.store.get_compression_failure_cooldown_row(session_id))

    def restore_compression_failure_cooldown_row(self, session_id: str,
                                                 snapshot: Dict[str, Any]) -> None:
        """Put back a snapshot from :meth:`get_compression_failure_cooldown_row` and verify it.
        A vanished session raises (``CooldownRestoreError``, a ``RuntimeError``) as upstream.
        Calls ``store.restore_compression_failure_cooldown_row(raise_if_vanished=True)``."""
        self.store.restore_compression_failure_cooldown_row(session_id, snapshot,
                                                            raise_if_vanished=True)

    def clear_compression_failure_cooldown(self, session_id: str) -> None:
        """Clear the session's cooldown. Calls ``store.clear_compression_failure_cooldown``."""
        self.store.clear_compression_failure_cooldown(session_id)

    def get_compression_fallback_streak(self, session_id: str) -> int:
        """The persisted deterministic-fallback streak (0 when unset). Calls
        ``store.get_compression_fallback_streak``."""
        return self.store.get_compression_fallback_streak(session_id)

    def set_compression_fallback_streak(self, session_id: str, streak: int) -> None:
        """Persist the fallback streak (upstream's ``streak=``). Calls
        ``store.set_compression_fallback_streak(value=…)``."""
        self.store.set_compression_fallback_streak(session_id, value=streak)

    def get_compression_ineffective_count(self, session_id: str) -> int:
        """The persisted ineffective-compaction strike count (0 when unset). Calls
        ``store.get_compression_ineffective_count``."""
        return self.store.get_compression_ineffective_count(session_id)

    def set_compression_ineffective_count(self, session_id: str, count: int) -> None:
        """Persist the strike count (upstream's ``count=``). Calls
        ``store.set_compression_ineffective_count(value=…)``."""
        self.store.set_compression_ineffective_count(session_id, value=count)

    def get_compression_recovery_deadline(self, session_id: str) -> float:
        """The anti-thrash recovery deadline (0.0: not armed). Calls
        ``store.get_compression_recovery_deadline``."""
        return self.store.get_compression_recovery_deadline(session_id)

    def set_compression_recovery_deadline(self, session_id: str, deadline: float) -> None:
        """Arm (epoch) or disarm (0/None) the recovery deadline. Calls
        ``store.set_compression_recovery_deadline``."""
        self.store.set_compression_recovery_deadline(session_id, deadline)

    # -- sweeps and archive ---------------------------------------------------------------

    def sweep_orphaned_sessions(
        self, *, max_idle_seconds: float,
        sources: Tuple[str, ...] = ("tui", "desktop", "subagent"),
        exclude_ids: Tuple[str, ...] = (), exclude_pinned: bool = False,
        heartbeat_staleness_seconds: Optional[float] = None,
        heartbeat_ownership_grace_seconds: Optional[float] = None,
        respect_gateway_heartbeats: bool = True,
    ) -> List[str]:
        """End idle rows of ``sources`` a dead gateway left open (``startup_orphan_reap``);
        the ids. Calls ``store.sweep_orphaned_sessions``."""
        return list(self.store.sweep_orphaned_sessions(
            max_idle_seconds=max_idle_seconds, sources=sources, exclude_ids=exclude_ids,
            exclude_pinned=exclude_pinned,
            heartbeat_staleness_seconds=heartbeat_staleness_seconds,
            heartbeat_ownership_grace_seconds=heartbeat_ownership_grace_seconds,
            respect_gateway_heartbeats=respect_gateway_heartbeats))

    def unarchive_recoverable_session(self, session_id: str) -> bool:
        """Un-archive a lineage archived by a recoverable accident (its tip's end reason).
        Calls ``store.unarchive_recoverable_session``."""
        return self.store.unarchive_recoverable_session(session_id)

    def archive_stale_sessions(self, idle_days: float, *, exclude_pinned: bool = True) -> int:
        """Archive every lineage untouched for ``idle_days``; the count. Calls
        ``store.archive_stale_sessions``."""
        return self.store.archive_stale_sessions(idle_days, exclude_pinned=exclude_pinned)

    def maybe_auto_archive(self, idle_days: float = 3, min_interval_hours: int = 24,
                           exclude_pinned: bool = True) -> Dict[str, Any]:
        """Archive stale lineages at most once per interval; ``{skipped, archived}`` plus
        ``error`` only on failure. Calls ``store.maybe_auto_archive``."""
        report = self.store.maybe_auto_archive(idle_days, min_interval_hours, exclude_pinned)
        return without_none(as_plain(report), _AUTO_ARCHIVE_OPTIONAL)

    # -- empty and ghost sessions ---------------------------------------------------------

    def count_empty_sessions(self) -> int:
        """How many ended, unarchived sessions hold no message (pinned, lineage and guarded
        ones included, as upstream). Calls ``store.count_empty_sessions(include_protected=True)``."""
        return self.store.count_empty_sessions(include_protected=True)

    def delete_empty_sessions(self, sessions_dir: str | os.PathLike[str] | None = None) -> int:
        """Delete the empty sessions (and their transcript files under ``sessions_dir``); the
        count; pinned, lineage and guarded ones too, as upstream. Calls
        ``store.delete_empty_sessions(include_protected=True)``."""
        return self.store.delete_empty_sessions(sessions_dir, include_protected=True)

    def delete_session_if_empty(self, session_id: str, sessions_dir: str | os.PathLike[str] | None = None) -> bool:
        """Delete ``session_id`` when it has no message, title or child. Calls
        ``store.delete_session_if_empty``."""
        return self.store.delete_session_if_empty(session_id, sessions_dir)

    def prune_empty_ghost_sessions(self, sessions_dir: str | os.PathLike[str] | None = None) -> int:
        """Delete ended, untitled, message-less ``tui`` sessions older than a day; the count.
        Calls ``store.prune_empty_ghost_sessions``."""
        return self.store.prune_empty_ghost_sessions(sessions_dir)
