"""hermes-data: typed data access for the Hermes agent's telemetry and session stores.

The public surface is small on purpose::

    from hermes_data import TelemetryStore, SessionStore, upgrade, check, status

Store classes are imported lazily so ``import hermes_data`` stays cheap for the CLI.
"""

from __future__ import annotations

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

from hermes_data import moved as _moved

_moved.install()  # old deep module paths keep importing (hermes_data/moved.py)

_LAZY = {
    # An Alembic CommandError too, built on first use: importing it imports Alembic.
    "ForwardOnlyError": ("hermes_data.errors", "ForwardOnlyError"),
    "upgrade": ("hermes_data.migrate.runner", "upgrade"),
    "check": ("hermes_data.migrate.runner", "check"),
    "status": ("hermes_data.migrate.runner", "status"),
    "UpgradeReport": ("hermes_data.migrate.runner", "UpgradeReport"),
    "TelemetryStore": ("hermes_data.telemetry.store", "TelemetryStore"),
    "SessionStore": ("hermes_data.sessions.store", "SessionStore"),
}

__all__ = [
    "AdoptionError", "ConfigurationError", "DatabaseBusyError", "ForwardOnlyError",
    "HermesDataError", "NotAHermesDatabaseError", "ProductionStateDbError", "SchemaDriftError",
    "WalUnsupportedError",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'hermes_data' has no attribute {name!r}")
