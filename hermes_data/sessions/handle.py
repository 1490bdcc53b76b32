"""What the agent-turn operation modules need from a store handle (a structural type, so
they never import the facade that delegates to them)."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from hermes_data.sessions.backends.base import SessionBackend
from hermes_data.sessions.agent.token_writer import TokenWriter


class StoreHandle(Protocol):
    """The part of :class:`~hermes_data.sessions.store.SessionStore` operation modules use."""

    @property
    def backend(self) -> SessionBackend: ...

    @property
    def path(self) -> Path: ...

    @property
    def read_only(self) -> bool: ...

    @property
    def token_writer(self) -> TokenWriter: ...

    def owner_profile(self) -> str | None: ...
