"""``SessionDB``: upstream's class name and constructor over :class:`SessionStore`."""

from __future__ import annotations

import os
from pathlib import Path

from hermes_data.compat.agent_methods import AgentMethods
from hermes_data.compat.coordination_methods import CoordinationMethods
from hermes_data.compat.core_methods import CoreMethods
from hermes_data.compat.gateway_methods import GatewayMethods
from hermes_data.compat.maintenance_methods import MaintenanceMethods
from hermes_data.compat.ui_methods import UiMethods
from hermes_data.sessions.agent.identity_sql import RECOVERABLE_END_REASONS
from hermes_data.sessions.core.encoding import MAX_TITLE_LENGTH
from hermes_data.sessions.core.titles import (CANONICAL_BOT_CHAT_TITLE, TITLE_SOURCE_DERIVED,
                                              TITLE_SOURCE_LLM, TITLE_SOURCE_USER)
from hermes_data.sessions.ui.reactions import REACTIONS_METADATA_KEY
from hermes_data.sessions.store import SessionStore


class SessionDB(CoreMethods, AgentMethods, MaintenanceMethods, CoordinationMethods,
                GatewayMethods, UiMethods):
    """The agent's ``SessionDB``, method for method (docs/compat.md).

    ``SessionDB(db_path=None, read_only=False)`` opens ``db_path`` (a SQLite file; here also a
    ``postgresql+psycopg://`` URL), or the configured ``state.db`` when it is ``None``.
    """

    # Upstream's class constants (SESSION_DB_ATTRIBUTES), the store's values.
    #: Longest title ``sanitize_title`` keeps.
    MAX_TITLE_LENGTH = MAX_TITLE_LENGTH
    #: Title provenances, lowest to highest rank (what ``set_auto_title`` /
    #: ``set_session_title_source`` take).
    TITLE_SOURCE_DERIVED = TITLE_SOURCE_DERIVED
    TITLE_SOURCE_LLM = TITLE_SOURCE_LLM
    TITLE_SOURCE_USER = TITLE_SOURCE_USER
    #: The title of a bot's hidden canonical chat, which renames never move.
    CANONICAL_BOT_CHAT_TITLE = CANONICAL_BOT_CHAT_TITLE
    #: The ``display_metadata`` key message reactions live under.
    REACTIONS_METADATA_KEY = REACTIONS_METADATA_KEY
    #: Accidental end reasons gateway recovery treats as resumable.
    RECOVERABLE_END_REASONS = RECOVERABLE_END_REASONS

    def __init__(self, db_path: str | os.PathLike[str] | None = None,
                 read_only: bool = False) -> None:
        self.store = SessionStore(db_path, read_only=read_only)

    @classmethod
    def over(cls, store: SessionStore) -> "SessionDB":
        """A ``SessionDB`` adapting an already open ``store`` (closing it closes ``store``)."""
        db = cls.__new__(cls)
        db.store = store
        return db

    @property
    def db_path(self) -> Path:
        """The database file (for a PostgreSQL store: the path-like name the store reports)."""
        return self.store.path

    @property
    def read_only(self) -> bool:
        """Whether this handle refuses writes."""
        return self.store.read_only
