"""Session-store backends, chosen by the URL's dialect from one registry.

``open_backend(url, …)`` returns the :class:`~.base.SessionBackend` for a resolved URL:
:class:`~.sqlite.SqliteBackend` for ``sqlite`` files, :class:`~.postgresql.PostgresBackend`
for ``postgresql`` databases. Backend modules are imported on first use, so SQLite callers
never import the PostgreSQL one.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, Callable

from sqlalchemy.engine import URL

from hermes_data.errors import ConfigurationError
from hermes_data.sessions.backends.base import (OPEN_PATIENCE_S, ROUTINE_PATIENCE_S, TRANSCRIPT_PATIENCE_S,
                                               HandleState, OpenOptions, SessionBackend)

__all__ = ["OPEN_PATIENCE_S", "ROUTINE_PATIENCE_S", "TRANSCRIPT_PATIENCE_S", "HandleState",
           "OpenOptions", "SessionBackend", "open_backend", "register"]

#: dialect name → (module, class name) of its backend.
_REGISTRY: dict[str, tuple[str, str]] = {
    "sqlite": ("hermes_data.sessions.backends.sqlite", "SqliteBackend"),
    "postgresql": ("hermes_data.sessions.backends.postgresql", "PostgresBackend"),
}


def register(dialect: str, module: str, cls: str) -> None:
    """Add (or replace) the backend class serving ``dialect``."""
    _REGISTRY[dialect] = (module, cls)


def backend_class(url: URL) -> Callable[..., SessionBackend]:
    """The backend class for ``url``'s dialect; a clear error names an unsupported one."""
    name = url.get_backend_name()
    try:
        module, cls = _REGISTRY[name]
    except KeyError:
        raise ConfigurationError(
            f"{url.render_as_string(hide_password=True)}: the session store runs on "
            f"{' or '.join(sorted(_REGISTRY))}, not {name!r}") from None
    loaded = sys.modules.get(module)  # every store open asks: import_module only when needed
    if loaded is None or getattr(loaded.__spec__, "_initializing", False):
        loaded = importlib.import_module(module)  # (not imported, or importing on a thread)
    backend: Callable[..., SessionBackend] = getattr(loaded, cls)
    return backend


def open_backend(url: URL, *, open_options: OpenOptions | None = None,
                 **options: Any) -> SessionBackend:
    """Open the backend for ``url`` with the store's ``open_options`` (kept on the handle's
    :class:`HandleState`; default: :class:`OpenOptions`'s defaults) and backend-specific
    ``options``."""
    return backend_class(url)(url, open_options=open_options or OpenOptions(), **options)
