"""hermes-data: typed data access for the Hermes agent's telemetry and session stores.

The public surface is small on purpose::

    from hermes_data import TelemetryStore, SessionStore, upgrade, check, status

Store classes are imported lazily so ``import hermes_data`` stays cheap for the CLI.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from hermes_data.errors import (
    AdoptionError,
    ConfigurationError,
    DatabaseBusyError,
    HermesDataError,
    NotAHermesDatabaseError,
    ProductionStateDbError,
    SchemaDriftError,
    WalUnsupportedError,
)

__version__ = "0.1.0"

if TYPE_CHECKING:  # what the lazy names below are, for type checkers (never run)
    from hermes_data.errors import ForwardOnlyError
    from hermes_data.migrate.runner import UpgradeReport, check, status, upgrade
    from hermes_data.sessions.store import SessionStore
    from hermes_data.telemetry.store import TelemetryStore

class _OldModulePaths:
    """Meta path finder for the module paths before the concern packages: consulted only
    after the path finder found no module, it hands a ``hermes_data.*`` name to
    :mod:`hermes_data.moved` (imported then, not at start-up)."""

    @staticmethod
    def find_spec(fullname: str, path: object = None, target: object = None) -> Any:
        """The old path's spec (:data:`hermes_data.moved.MOVED`), or None: not ours."""
        if not fullname.startswith("hermes_data."):
            return None
        from hermes_data.moved import FINDER

        return FINDER.find_spec(fullname, path, target)


if not any(f is _OldModulePaths for f in sys.meta_path):
    sys.meta_path.append(_OldModulePaths)  # after the path finder: a real module always wins

from hermes_data.lazy import lazy_exports  # noqa: E402  (after the finder is installed)

_LAZY = {
    # An Alembic CommandError too, built on first use: importing it imports Alembic.
    "ForwardOnlyError": "errors",
    "upgrade": "migrate.runner", "check": "migrate.runner", "status": "migrate.runner",
    "UpgradeReport": "migrate.runner",
    "TelemetryStore": "telemetry.store",
    "SessionStore": "sessions.store",
}

__all__ = [
    "AdoptionError", "ConfigurationError", "DatabaseBusyError", "ForwardOnlyError",
    "HermesDataError", "NotAHermesDatabaseError", "ProductionStateDbError", "SchemaDriftError",
    "WalUnsupportedError",
    *_LAZY,
]
__getattr__ = lazy_exports(__name__, _LAZY, globals())  # hermes_data/lazy.py
