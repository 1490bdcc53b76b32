"""A drop-in for the agent's ``hermes_state`` module: ``from hermes_data.compat import
SessionDB`` gives upstream's class, method names, signatures, defaults, return shapes and
exceptions over :class:`~hermes_data.sessions.store.SessionStore` (docs/compat.md).

The layer is a thin adapter: no SQL, no database connection, no behaviour of its own beyond
adapting names and shapes (``tests/compat/test_compat_rules.py``). The names it covers are
the table in :mod:`hermes_data.compat.names`.
"""

from __future__ import annotations

from hermes_data.compat.session_db import SessionDB

__all__ = ["SessionDB"]
