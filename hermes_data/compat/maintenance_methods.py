"""``SessionDB``'s upstream-shaped methods of the maintenance area (the names are listed in
:data:`hermes_data.compat.names.SESSION_DB_METHODS`); each calls the typed store's
maintenance operations (:mod:`hermes_data.sessions.core.maintenance`, which take the store
first) and adapts only names, arguments and return shapes (docs/compat.md "Maintenance").

Upstream's prune filters pass through as keywords; ``older_than_days`` is always passed
explicitly, so upstream's default (no age filter, except ``prune_sessions``' 90 days) holds.
"""

from __future__ import annotations

import os
from typing import Any

from hermes_data.compat.base import CompatBase
from hermes_data.compat.shapes import as_dicts, plain_dict
from hermes_data.sessions.core import maintenance

#: Upstream's module-level default of ``maybe_auto_prune_and_vacuum``'s freelist gate.
AUTO_VACUUM_MIN_FREELIST_RATIO = maintenance.DEFAULT_MIN_VACUUM_FREELIST_RATIO


class MaintenanceMethods(CompatBase):
    """The maintenance methods of :class:`~hermes_data.compat.SessionDB`."""

    # -- prune filters -----------------------------------------------------------------

    def list_prune_candidates(self, older_than_days: float | None = None,
                              source: str | None = None,
                              **filters: Any) -> list[dict[str, Any]]:
        """Upstream lists what a prune/archive with these filters would touch, least recently
        active first, as dicts; calls :func:`~hermes_data.sessions.core.maintenance.list_prune_candidates`."""
        return as_dicts(maintenance.list_prune_candidates(
            self.store, older_than_days, source=source, **filters))

    def count_prune_matches(self, older_than_days: float | None = None,
                            source: str | None = None, **filters: Any) -> int:
        """Upstream counts the ended sessions the filters match; calls
        :func:`~hermes_data.sessions.core.maintenance.count_prune_matches`."""
        return maintenance.count_prune_matches(self.store, older_than_days, source=source,
                                               **filters)

    def count_open_prune_matches(self, older_than_days: float | None = None,
                                 source: str | None = None, **filters: Any) -> int:
        """Upstream counts the open sessions the same filters would match (spared by a
        prune); calls :func:`~hermes_data.sessions.core.maintenance.count_open_prune_matches`."""
        return maintenance.count_open_prune_matches(self.store, older_than_days,
                                                    source=source, **filters)

    def prune_sessions(self, older_than_days: float | None = 90, source: str | None = None,
                       sessions_dir: str | os.PathLike[str] | None = None,
                       exclude_active_write_guards: bool = False, **filters: Any) -> int:
        """Upstream deletes the ended sessions matching the filters and returns how many;
        calls :func:`~hermes_data.sessions.core.maintenance.prune_sessions`."""
        return maintenance.prune_sessions(
            self.store, older_than_days, source=source, sessions_dir=sessions_dir,
            exclude_active_write_guards=exclude_active_write_guards, **filters)

    def archive_sessions(self, older_than_days: float | None = None, source: str | None = None,
                         **filters: Any) -> int:
        """Upstream archives each match's whole lineage (only unarchived rows by default) and
        returns how many matched; calls :func:`~hermes_data.sessions.core.maintenance.archive_sessions`."""
        return maintenance.archive_sessions(self.store, older_than_days, source=source,
                                            **filters)

    # -- deleting ----------------------------------------------------------------------

    def get_session_delete_targets(self, session_id: str) -> list[str]:
        """Upstream lists what deleting the session removes: itself, then its delegate
        descendants sorted (``[]`` when missing); calls
        :func:`~hermes_data.sessions.core.maintenance.get_session_delete_targets`."""
        return maintenance.get_session_delete_targets(self.store, session_id)

    def delete_session(self, session_id: str,
                       sessions_dir: str | os.PathLike[str] | None = None,
                       expected_delete_ids: list[str] | None = None) -> bool:
        """Upstream deletes a session with its delegate descendants (False when missing or
        when the set differs from ``expected_delete_ids``); calls
        :func:`~hermes_data.sessions.core.maintenance.delete_session`."""
        return maintenance.delete_session(
            self.store, session_id, sessions_dir=sessions_dir,
            expected_delete_ids=None if expected_delete_ids is None else set(expected_delete_ids))

    def delete_sessions(self, session_ids: list[str],
                        sessions_dir: str | os.PathLike[str] | None = None) -> int:
        """Upstream deletes many sessions in one transaction and returns how many existed;
        calls :func:`~hermes_data.sessions.core.maintenance.delete_sessions`."""
        return maintenance.delete_sessions(self.store, session_ids, sessions_dir=sessions_dir)

    def purge_stale_tool_call_markers(self, *, dry_run: bool = False,
                                      backup: bool = True) -> dict[str, Any]:
        """Upstream blanks bare ``[marker]`` contents of tool-call rows (backup first) and
        reports ``{dry_run, rows_affected, row_ids, backup_path}``; calls
        :func:`~hermes_data.sessions.core.maintenance.purge_stale_tool_call_markers`."""
        return plain_dict(maintenance.purge_stale_tool_call_markers(  # type: ignore[return-value]
            self.store, dry_run=dry_run, backup=backup))

    # -- sizes, VACUUM and auto-maintenance --------------------------------------------

    def logical_size_bytes(self) -> int | None:
        """Upstream returns the database's logical size (page count × page size); calls
        :func:`~hermes_data.sessions.core.maintenance.logical_size_bytes`."""
        return maintenance.logical_size_bytes(self.store)

    def vacuum(self) -> dict[str, int]:
        """Upstream optimizes the FTS indexes, then VACUUMs, returning how many indexes it
        optimized; calls :func:`~hermes_data.sessions.core.maintenance.vacuum` (which
        answers the sizes before and after, docs/compat.md "Maintenance")."""
        return maintenance.vacuum(self.store)

    def maybe_auto_prune_and_vacuum(
            self, retention_days: int = 90, min_interval_hours: int = 24, vacuum: bool = True,
            sessions_dir: str | os.PathLike[str] | None = None,
            min_vacuum_interval_days: int = 30,
            min_vacuum_freelist_ratio: float = AUTO_VACUUM_MIN_FREELIST_RATIO) -> dict[str, Any]:
        """Upstream's startup maintenance: prune, close stale automation sessions, VACUUM when
        due; never raises, reports ``{skipped, pruned, closed, vacuumed, …}``; calls
        :func:`~hermes_data.sessions.core.maintenance.maybe_auto_prune_and_vacuum`."""
        return maintenance.maybe_auto_prune_and_vacuum(
            self.store, retention_days=retention_days, min_interval_hours=min_interval_hours,
            vacuum_enabled=vacuum, sessions_dir=sessions_dir,
            min_vacuum_interval_days=min_vacuum_interval_days,
            min_vacuum_freelist_ratio=min_vacuum_freelist_ratio)
