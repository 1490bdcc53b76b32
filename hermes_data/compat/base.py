"""What every compat method class shares: the typed store it adapts."""

from __future__ import annotations

from hermes_data.sessions.store import SessionStore


class CompatBase:
    """Holds :attr:`store`, the :class:`~hermes_data.sessions.store.SessionStore` that every
    method of :class:`~hermes_data.compat.SessionDB` calls."""

    #: The typed store behind this handle; move a call site to it one call at a time
    #: (docs/compat.md "Moving to the typed API").
    store: SessionStore
