"""``SessionDB``'s upstream-shaped methods of the maintenance area (the names are listed in
:data:`hermes_data.compat.names.SESSION_DB_METHODS`); each calls the typed store and adapts
only names, arguments and return shapes (docs/compat.md)."""

from __future__ import annotations

from hermes_data.compat.base import CompatBase


class MaintenanceMethods(CompatBase):
    """The maintenance methods of :class:`~hermes_data.compat.SessionDB`."""
