"""Upgrade, adopt and check the stores (the generic migration layer; no store package is
imported here).

* :mod:`.runner` — the one upgrade/adopt/check path the CLI, ``alembic`` and the stores share;
* :mod:`.spec` — what a store's migration is made of (:class:`~.spec.StoreSpec`);
* :mod:`.shape` — live schema vs metadata; :mod:`.fresh` — creating a store at head;
* :mod:`.ops` — helpers for hand-written revisions; :mod:`.collation` — PostgreSQL collation.

The public functions are re-exported lazily (``from hermes_data.migrate import upgrade``), so
importing a helper module does not load Alembic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hermes_data.migrate.runner import (StoreStatus, UpgradeReport, alembic_config, check,
                                            head_revision, status, store_spec, upgrade)

_EXPORTS = ("StoreStatus", "UpgradeReport", "alembic_config", "check", "head_revision",
            "status", "store_spec", "upgrade")

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        from hermes_data.migrate import runner

        value = getattr(runner, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
