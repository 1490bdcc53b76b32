"""Module paths before the concern packages (release 0.1 of the tree), kept importable.

The session store's modules moved into concern packages and the generic layer's ``cli_*``,
``migrate``/``shape``/``ops`` and ``copy`` modules into packages (CHANGELOG lists every move).
A service that imported a deep module by its old path keeps working: :class:`MovedModuleFinder`
answers an old path with the module at its new path (the same module object, so
monkeypatching either name patches both) and warns once with a :class:`DeprecationWarning`
naming the new path. Old paths that are packages now (``hermes_data.cli``,
``hermes_data.migrate``, ``hermes_data.copy``, ``hermes_data.sessions.search``) re-export their
public names instead. ``import hermes_data`` installs a stub finder that imports this module (and its table) only
when an import below ``hermes_data`` finds no module: a cold start pays for neither.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import warnings
from types import ModuleType
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    import importlib.abc

#: old path -> new path, both below ``hermes_data.``
MOVED: dict[str, str] = {
    "cli_copy": "cli.copy",
    "cli_maintenance": "cli.maintenance",
    "cli_output": "cli.output",
    "cli_portability": "cli.portability",
    "cli_repair": "cli.repair",
    "cli_search": "cli.search",
    "cli_stats": "cli.stats",
    "collation": "migrate.collation",
    "copy_extras": "copy.extras",
    "diagnostics": "cli.doctor",
    "fresh": "migrate.fresh",
    "migration_spec": "migrate.spec",
    "ops": "migrate.ops",
    "sessions.accounting": "sessions.agent.accounting",
    "sessions.activity": "sessions.agent.activity",
    "sessions.agent_api": "sessions.agent.api",
    "sessions.agent_rows": "sessions.rows",
    "sessions.bulk": "sessions.agent.bulk",
    "sessions.cjk": "sessions.storage.fts.cjk",
    "sessions.cleanup": "sessions.coordination.cleanup",
    "sessions.compression_locks": "sessions.coordination.compression_locks",
    "sessions.cooldowns": "sessions.coordination.cooldowns",
    "sessions.coord_rows": "sessions.rows",
    "sessions.coordination_api": "sessions.coordination.api",
    "sessions.delegations": "sessions.store",
    "sessions.display": "sessions.core.display_order",
    "sessions.display_reads": "sessions.coordination.display_reads",
    "sessions.display_schema": "sessions.storage.display_schema",
    "sessions.doomed": "sessions.core.doomed",
    "sessions.encoding": "sessions.core.encoding",
    "sessions.export": "sessions.ui.portability.export",
    "sessions.filesafety": "sessions.storage.filesafety",
    "sessions.fresh": "sessions.storage.fresh",
    "sessions.fts_deferral": "sessions.storage.fts.deferral",
    "sessions.fts_gap": "sessions.search.gap",
    "sessions.fts_maintenance": "sessions.storage.fts.maintenance",
    "sessions.fts_shadow": "sessions.storage.fts.shadow",
    "sessions.fts_storage": "sessions.storage.fts.layout",
    "sessions.gateway_api": "sessions.gateway.api",
    "sessions.gateway_common": "sessions.gateway.common",
    "sessions.gateway_routing": "sessions.gateway.routing",
    "sessions.guard_rows": "sessions.coordination.lock_rows",
    "sessions.guards": "sessions.storage.handle_guards",
    "sessions.handoffs": "sessions.gateway.handoffs",
    "sessions.heartbeats": "sessions.gateway.heartbeats",
    "sessions.identity": "sessions.agent.identity",
    "sessions.imports": "sessions.ui.portability.imports",
    "sessions.kanban": "sessions.gateway.kanban",
    "sessions.lifecycle": "sessions.core.lifecycle",
    "sessions.lineage": "sessions.core.lineage",
    "sessions.listing": "sessions.core.listing",
    "sessions.maintenance": "sessions.core.maintenance",
    "sessions.markers": "sessions.sql.markers",
    "sessions.messages": "sessions.core.messages",
    "sessions.meta": "sessions.core.meta",
    "sessions.migration": "sessions.storage.adoption",
    "sessions.never_active": "sessions.gateway.never_active",
    "sessions.opening": "sessions.storage.opening",
    "sessions.orphans": "sessions.gateway.orphans",
    "sessions.ownership": "sessions.storage.ownership",
    "sessions.peers": "sessions.gateway.peers",
    "sessions.persistence_errors": "sessions.core.persistence_errors",
    "sessions.pickers": "sessions.ui.pickers",
    "sessions.projections": "sessions.agent.projections",
    "sessions.quarantine": "sessions.storage.quarantine",
    "sessions.reactions": "sessions.ui.reactions",
    "sessions.reaping": "sessions.storage.reaping",
    "sessions.reasoning_search": "sessions.search.reasoning",
    "sessions.recovery": "sessions.coordination.recovery",
    "sessions.registry": "sessions.storage.registry",
    "sessions.render": "sessions.ui.portability.render",
    "sessions.repair": "sessions.storage.repair.procedure",
    "sessions.repair_backup": "sessions.storage.repair.backup",
    "sessions.rewind": "sessions.coordination.rewind",
    "sessions.rewrites": "sessions.coordination.rewrites",
    "sessions.rich": "sessions.ui.rich",
    "sessions.row_helpers": "sessions.agent.message_rows",
    "sessions.search_caps": "sessions.search.capabilities",
    "sessions.search_exec": "sessions.search.execute",
    "sessions.search_pg": "sessions.search.postgres",
    "sessions.search_plan": "sessions.search.plan",
    "sessions.search_stats": "sessions.search.stats",
    "sessions.session_meta": "sessions.agent.session_meta",
    "sessions.sql.accounting": "sessions.agent.accounting_sql",
    "sessions.sql.backend": "sessions.backends.sql",
    "sessions.sql.bulk": "sessions.agent.bulk_sql",
    "sessions.sql.cjk": "sessions.storage.fts.cjk_sql",
    "sessions.sql.coordination": "sessions.coordination.sql",
    "sessions.sql.display": "sessions.storage.display_sql",
    "sessions.sql.fold": "sessions.storage.fts.fold_sql",
    "sessions.sql.fts": "sessions.storage.fts.ddl",
    "sessions.sql.fts_maintenance": "sessions.storage.fts.sql",
    "sessions.sql.fts_storage": "sessions.storage.fts.layout_sql",
    "sessions.sql.gateway": "sessions.gateway.sql",
    "sessions.sql.identity": "sessions.agent.identity_sql",
    "sessions.sql.listing": "sessions.core.listing_sql",
    "sessions.sql.maintenance": "sessions.core.maintenance_sql",
    "sessions.sql.migration": "sessions.storage.adoption_sql",
    "sessions.sql.opening": "sessions.storage.opening_sql",
    "sessions.sql.peers": "sessions.gateway.peers_sql",
    "sessions.sql.pickers": "sessions.ui.pickers_sql",
    "sessions.sql.portability": "sessions.ui.portability.sql",
    "sessions.sql.projections": "sessions.agent.projections_sql",
    "sessions.sql.reactions": "sessions.ui.reactions_sql",
    "sessions.sql.reasoning_search": "sessions.search.reasoning_sql",
    "sessions.sql.repair": "sessions.gateway.repair_sql",
    "sessions.sql.row_helpers": "sessions.agent.message_rows_sql",
    "sessions.sql.schema_repair": "sessions.storage.repair.sql",
    "sessions.sql.search": "sessions.search.sql",
    "sessions.sql.session_meta": "sessions.agent.session_meta_sql",
    "sessions.sql.telegram": "sessions.gateway.telegram_sql",
    "sessions.sql.views": "sessions.ui.views_sql",
    "sessions.storage_api": "sessions.storage.api",
    "sessions.sweeps": "sessions.coordination.sweeps",
    "sessions.telegram_topics": "sessions.gateway.telegram_topics",
    "sessions.titles": "sessions.core.titles",
    "sessions.token_writer": "sessions.agent.token_writer",
    "sessions.turn_leases": "sessions.coordination.turn_leases",
    "sessions.ui_api": "sessions.ui.api",
    "sessions.unavailable": "sessions.agent.unavailable",
    "sessions.upstream_cjk": "sessions.storage.fts.upstream_cjk",
    "sessions.views": "sessions.ui.views",
    "sessions.writability": "sessions.storage.writability",
    "shape": "migrate.shape",
}


class MovedModuleFinder:
    """Resolves an old module path (a key of :data:`MOVED`) to the module at its new path: a
    meta path finder and its own loader (the protocols, without ``importlib.abc``, whose import
    a cold start would pay)."""

    def find_spec(self, fullname: str, path: object = None,
                  target: object = None) -> importlib.machinery.ModuleSpec | None:
        """A spec for ``fullname`` when it is an old path; None (not ours) otherwise."""
        if not fullname.startswith("hermes_data.") or fullname[12:] not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, cast("importlib.abc.Loader", self))

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        """The module at the new path (imported now), standing for the old name."""
        new = "hermes_data." + MOVED[spec.name[12:]]
        warnings.warn(f"{spec.name} moved to {new}; import it from there",
                      DeprecationWarning, stacklevel=2)
        return importlib.import_module(new)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: :meth:`create_module` returned a module already executed."""


#: The one instance ``hermes_data``'s stub finder delegates to.
FINDER = MovedModuleFinder()
