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

from typing import TYPE_CHECKING

from hermes_data.lazy import lazy_exports

if TYPE_CHECKING:
    from hermes_data.migrate.runner import (StoreStatus, UpgradeReport, alembic_config, check,
                                            head_revision, status, store_spec, upgrade)

_EXPORTS = dict.fromkeys((
    "StoreStatus", "UpgradeReport", "alembic_config", "check", "head_revision", "status",
    "store_spec", "upgrade",
), "runner")

__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS, globals())  # hermes_data/lazy.py
