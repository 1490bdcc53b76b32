"""``SessionDB``'s upstream-shaped methods of the maintenance area (the names are listed in
:data:`hermes_data.compat.names.SESSION_DB_METHODS`); each calls the typed store's
maintenance methods (docs/sessions.md §7.4–§7.6) and adapts only names, arguments and return shapes (docs/compat.md "Maintenance").

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
        active first, as dicts; calls ``SessionStore.list_prune_candidates``."""
        return as_dicts(self.store.list_prune_candidates(older_than_days, source=source,
                                                         **filters))

    def count_prune_matches(self, older_than_days: float | None = None,
                            source: str | None = None, **filters: Any) -> int:
        """Upstream counts the ended sessions the filters match; calls
        ``SessionStore.count_prune_matches``."""
        return self.store.count_prune_matches(older_than_days, source=source,
                                               **filters)

    def count_open_prune_matches(self, older_than_days: float | None = None,
                                 source: str | None = None, **filters: Any) -> int:
        """Upstream counts the open sessions the same filters would match (spared by a
        prune); calls ``SessionStore.count_open_prune_matches``."""
        return self.store.count_open_prune_matches(older_than_days,
                                                    source=source, **filters)

    def prune_sessions(self, older_than_days: float | None = 90, source: str | None = None,
                       sessions_dir: str | os.PathLike[str] | None = None,
                       exclude_active_write_guards: bool = False, **filters: Any) -> int:
        """Upstream deletes the ended sessions matching the filters and returns how many;
        calls ``SessionStore.prune_sessions``."""
        return self.store.prune_sessions(
            older_than_days, source=source, sessions_dir=sessions_dir,
            exclude_active_write_guards=exclude_active_write_guards, **filters)

    def archive_sessions(self, older_than_days: float | None = None, source: str | None = None,
                         **filters: Any) -> int:
        """Upstream archives each match's whole lineage (only unarchived rows by default) and
        returns how many matched; calls ``SessionStore.archive_sessions``."""
        return self.store.archive_sessions(older_than_days, source=source,
                                            **filters)

    # -- deleting ----------------------------------------------------------------------

    def get_session_delete_targets(self, session_id: str) -> list[str]:
        """Upstream lists what deleting the session removes: itself, then its delegate
        descendants sorted (``[]`` when missing); calls
        ``SessionStore.get_session_delete_targets``."""
        return self.store.get_session_delete_targets(session_id)

    def delete_session(self, session_id: str,
                       sessions_dir: str | os.PathLike[str] | None = None,
                       expected_delete_ids: list[str] | None = None) -> bool:
        """Upstream deletes a session with its delegate descendants (False when missing or
        when the set differs from ``expected_delete_ids``); calls
        ``SessionStore.delete_session``."""
        return self.store.delete_session(
            session_id, sessions_dir=sessions_dir,
            expected_delete_ids=None if expected_delete_ids is None else set(expected_delete_ids))

    def delete_sessions(self, session_ids: list[str],
                        sessions_dir: str | os.PathLike[str] | None = None) -> int:
        """Upstream deletes many sessions in one transaction and returns how many existed;
        calls ``SessionStore.delete_sessions``."""
        return self.store.delete_sessions(session_ids, sessions_dir=sessions_dir)

    def purge_stale_tool_call_markers(self, *, dry_run: bool = False,
                                      backup: bool = True) -> dict[str, Any]:
        """Upstream blanks bare ``[marker]`` contents of tool-call rows (backup first) and
        reports ``{dry_run, rows_affected, row_ids, backup_path}``; calls
        ``SessionStore.purge_stale_tool_call_markers``."""
        return plain_dict(self.store.purge_stale_tool_call_markers(  # type: ignore[return-value]
            dry_run=dry_run, backup=backup))

    # -- sizes, VACUUM and auto-maintenance --------------------------------------------

    def logical_size_bytes(self) -> int | None:
        """Upstream returns the database's logical size (page count × page size); calls
        ``SessionStore.logical_size_bytes``."""
        return self.store.logical_size_bytes()

    def vacuum(self) -> int:
        """Upstream optimizes the FTS indexes, then VACUUMs, returning how many indexes it
        optimized; calls ``SessionStore.vacuum`` (whose report also has the sizes before
        and after) and returns its ``fts_optimized``."""
        return self.store.vacuum()["fts_optimized"]

    def maybe_auto_prune_and_vacuum(
            self, retention_days: int = 90, min_interval_hours: int = 24, vacuum: bool = True,
            sessions_dir: str | os.PathLike[str] | None = None,
            min_vacuum_interval_days: int = 30,
            min_vacuum_freelist_ratio: float = AUTO_VACUUM_MIN_FREELIST_RATIO) -> dict[str, Any]:
        """Upstream's startup maintenance: prune, close stale automation sessions, VACUUM when
        due; never raises, reports ``{skipped, pruned, closed, vacuumed, …}``; calls
        ``SessionStore.maybe_auto_prune_and_vacuum``."""
        return self.store.maybe_auto_prune_and_vacuum(
            retention_days=retention_days, min_interval_hours=min_interval_hours,
            vacuum_enabled=vacuum, sessions_dir=sessions_dir,
            min_vacuum_interval_days=min_vacuum_interval_days,
            min_vacuum_freelist_ratio=min_vacuum_freelist_ratio)
