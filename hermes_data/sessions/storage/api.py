"""The storage-resilience API's public ``SessionStore`` methods
(docs/sessions-storage.md §3.6–§3.9), as one declarative delegation table (:mod:`hermes_data.sessions.handle`): each
entry maps a public name to an operation function (store first) in a module by concern; the
class holds no state and no logic, and ``SessionStore`` inherits it.
"""

from __future__ import annotations

from hermes_data.sessions.storage.fts import cjk
from hermes_data.sessions.storage.fts import maintenance as fts_maintenance
from hermes_data.sessions.storage.fts import layout as fts_storage
from hermes_data.sessions.handle import Op


class StorageAPI:
    """The delegation table (see the module docstring)."""

    # -- the CJK-bigram index (docs/sessions-storage.md §3.9.2)
    cjk_index_status = Op(cjk.cjk_index_status)
    cjk_index_step = Op(cjk.cjk_index_step)

    # -- the legacy FTS layout migration (docs/sessions-storage.md §3.6)
    fts_optimize_available = Op(fts_storage.fts_optimize_available)
    fts_rebuild_status = Op(fts_storage.fts_rebuild_status)
    fts_rebuild_step = Op(fts_storage.fts_rebuild_step)
    optimize_fts_storage = Op(fts_storage.optimize_fts_storage)

    # -- optimize / rebuild / merges, stale deferral and retry (docs/sessions-storage.md §3.7–§3.8)
    optimize_fts = Op(fts_maintenance.optimize_fts)
    rebuild_fts = Op(fts_maintenance.rebuild_fts)
    merge_fts = Op(fts_maintenance.merge_fts)
    retry_deferred_fts_recovery = Op(fts_maintenance.retry_deferred_fts_recovery)
