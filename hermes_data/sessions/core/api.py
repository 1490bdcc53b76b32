"""The core package's public ``SessionStore`` methods that live outside the facade, as
declarative delegation tables (:mod:`hermes_data.sessions.handle`): each entry maps a public
name to an operation function (store first) in a module by concern; the classes hold no state
and no logic, and ``SessionStore`` inherits them.

* :class:`LineageAPI` — the lineage-wide flags (docs/sessions.md §4.6) and upstream's
  ``get_compression_lineage`` walk (docs/sessions.md §4.4).
* :class:`MaintenanceAPI` — delete, prune, archive, sizes and VACUUM
  (docs/sessions.md §7.4, §7.5, §7.6), the functions of :mod:`.maintenance`, which upstream's ``SessionDB`` had as
  methods; and ``sanitize_title`` (docs/sessions.md §4.5), a static method there too.
"""

from __future__ import annotations

from hermes_data.sessions.core import encoding
from hermes_data.sessions.core import lineage
from hermes_data.sessions.core import maintenance
from hermes_data.sessions.handle import Op, static


class LineageAPI:
    """The lineage delegation table (see the module docstring)."""

    set_session_archived = Op(lineage.set_session_archived)
    set_session_hidden = Op(lineage.set_session_hidden)
    set_session_read = Op(lineage.set_session_read)
    set_session_pinned = Op(lineage.set_session_pinned)
    get_compression_lineage = Op(lineage.get_compression_lineage)


class MaintenanceAPI:
    """The maintenance delegation table (see the module docstring)."""

    # -- deletion (docs/sessions.md §7.4)
    delete_session = Op(maintenance.delete_session)
    delete_sessions = Op(maintenance.delete_sessions)
    get_session_delete_targets = Op(maintenance.get_session_delete_targets)
    purge_stale_tool_call_markers = Op(maintenance.purge_stale_tool_call_markers)

    # -- prune and archive (docs/sessions.md §7.5)
    prune_sessions = Op(maintenance.prune_sessions)
    archive_sessions = Op(maintenance.archive_sessions)
    list_prune_candidates = Op(maintenance.list_prune_candidates)
    count_prune_matches = Op(maintenance.count_prune_matches)
    count_open_prune_matches = Op(maintenance.count_open_prune_matches)

    # -- sizes, VACUUM and auto-maintenance (docs/sessions.md §7.6)
    logical_size_bytes = Op(maintenance.logical_size_bytes)
    vacuum = Op(maintenance.vacuum)
    maybe_auto_prune_and_vacuum = Op(maintenance.maybe_auto_prune_and_vacuum)

    # -- titles (docs/sessions.md §4.5)
    sanitize_title = static(encoding.sanitize_title)
