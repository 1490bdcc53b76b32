"""Transcript editing and coordination's public ``SessionStore`` methods, as one declarative
delegation table (docs/sessions-coordination.md §1.1) of
:class:`~hermes_data.sessions.handle.Op` / :func:`~hermes_data.sessions.handle.static`
entries.

Each method is an operation function in a module by concern (:mod:`.compression_locks`,
:mod:`.turn_leases`, …) taking the store first. The store's clocks and liveness probe are
class attributes here so tests (and callers) can inject them per handle (docs/sessions-coordination.md §3.1):
``store.wall`` (wall time, persisted values), ``store.mono`` (in-process budgets) and
``store.pid_exists`` (the ``DEAD`` probe of docs/sessions-coordination.md §3.2).
"""

from __future__ import annotations

import time

import psutil

from hermes_data.sessions.coordination import cleanup
from hermes_data.sessions.coordination import compression_locks
from hermes_data.sessions.coordination import cooldowns
from hermes_data.sessions.coordination import lock_rows as guard_rows
from hermes_data.sessions.core import persistence_errors
from hermes_data.sessions.coordination import recovery
from hermes_data.sessions.coordination import rewind
from hermes_data.sessions.coordination import rewrites
from hermes_data.sessions.coordination import sweeps
from hermes_data.sessions.coordination import turn_leases
from hermes_data.sessions.handle import Op, static


class CoordinationAPI:
    """The delegation table (see the module docstring)."""

    # -- clocks and liveness probe (docs/sessions-coordination.md §3.1, §3.2), injectable per handle
    wall = staticmethod(time.time)
    mono = staticmethod(time.monotonic)
    pid_exists = staticmethod(psutil.pid_exists)
    make_holder = static(guard_rows.make_holder)
    classify_persistence_error = static(persistence_errors.classify_persistence_error)

    # -- compression locks, lease-required publish (docs/sessions-coordination.md §3.10)
    try_acquire_compression_lock = Op(compression_locks.try_acquire_compression_lock)
    refresh_compression_lock = Op(compression_locks.refresh_compression_lock)
    release_compression_lock = Op(compression_locks.release_compression_lock)
    get_compression_lock_holder = Op(compression_locks.get_compression_lock_holder)
    publish_compression_child = Op(compression_locks.publish_compression_child)

    # -- turn leases and fenced appends (docs/sessions-coordination.md §3.14, amends docs/sessions.md §6.2/§6.3)
    try_acquire_session_turn_lease = Op(turn_leases.try_acquire_session_turn_lease)
    acquire_session_turn_lease = Op(turn_leases.acquire_session_turn_lease)
    refresh_session_turn_lease = Op(turn_leases.refresh_session_turn_lease)
    release_session_turn_lease = Op(turn_leases.release_session_turn_lease)
    append_message = Op(turn_leases.append_message)
    append_messages_batch = Op(turn_leases.append_messages_batch)

    # -- transcript rewrites (docs/sessions-coordination.md §3.15) and rewind (docs/sessions-coordination.md §3.16)
    replace_messages = Op(rewrites.replace_messages)
    clear_messages = Op(rewrites.clear_messages)
    archive_and_compact = Op(rewrites.archive_and_compact)
    rewind_to_message = Op(rewind.rewind_to_message)
    restore_rewound = Op(rewind.restore_rewound)

    # -- lineage recovery (docs/sessions-coordination.md §3.11)
    find_live_compression_child = Op(recovery.find_live_compression_child)
    reopen_orphaned_compression_session = Op(recovery.reopen_orphaned_compression_session)
    finalize_orphaned_compression_sessions = Op(recovery.finalize_orphaned_compression_sessions)

    # -- failure cooldowns (docs/sessions-coordination.md §3.12), streaks and the recovery deadline (docs/sessions-coordination.md §3.13)
    record_compression_failure_cooldown = Op(cooldowns.record_compression_failure_cooldown)
    get_compression_failure_cooldown = Op(cooldowns.get_compression_failure_cooldown)
    get_compression_failure_cooldown_row = Op(cooldowns.get_compression_failure_cooldown_row)
    restore_compression_failure_cooldown_row = Op(
        cooldowns.restore_compression_failure_cooldown_row)
    clear_compression_failure_cooldown = Op(cooldowns.clear_compression_failure_cooldown)
    get_compression_fallback_streak = Op(cooldowns.get_compression_fallback_streak)
    set_compression_fallback_streak = Op(cooldowns.set_compression_fallback_streak)
    get_compression_ineffective_count = Op(cooldowns.get_compression_ineffective_count)
    set_compression_ineffective_count = Op(cooldowns.set_compression_ineffective_count)
    get_compression_overload_streak = Op(cooldowns.get_compression_overload_streak)
    set_compression_overload_streak = Op(cooldowns.set_compression_overload_streak)
    get_compression_recovery_deadline = Op(cooldowns.get_compression_recovery_deadline)
    set_compression_recovery_deadline = Op(cooldowns.set_compression_recovery_deadline)

    # -- sweeps and archive (docs/sessions-coordination.md §3.18)
    sweep_orphaned_sessions = Op(sweeps.sweep_orphaned_sessions)
    unarchive_recoverable_session = Op(sweeps.unarchive_recoverable_session)
    archive_stale_sessions = Op(sweeps.archive_stale_sessions)
    maybe_auto_archive = Op(sweeps.maybe_auto_archive)

    # -- empty and ghost sessions (docs/sessions-coordination.md §3.19)
    count_empty_sessions = Op(cleanup.count_empty_sessions)
    delete_empty_sessions = Op(cleanup.delete_empty_sessions)
    delete_session_if_empty = Op(cleanup.delete_session_if_empty)
    prune_empty_ghost_sessions = Op(cleanup.prune_empty_ghost_sessions)
