"""Statements of the agent turn API's identity and reset operations
(docs/sessions-agent.md §3.8): id resolution, fork checks, session-reset promotion and the
per-peer conversation generation."""

from __future__ import annotations

from hermes_data.sessions.sql.dialect import Statements
from hermes_data.sessions.sql.predicates import RESET_END_REASONS

#: End reasons gateway recovery reopens (a subset of the core's automatic ones).
RECOVERABLE_END_REASONS = ("agent_close", "ws_orphan_reap", "superseded_by_resume",
                           "startup_orphan_reap")


def _list(values: tuple[str, ...]) -> str:
    return ", ".join(f"'{v}'" for v in values)


class IdentityStatements(Statements):
    """The identity statements of one dialect."""

    def __init__(self, d: str) -> None:
        super().__init__(d)
        pg = d == "postgresql"
        r = self.render
        #: Exact id.
        self.EXACT_ID = r("SELECT id FROM sessions WHERE id = ?")
        prefix = "left(id, ?)" if pg else "substr(id, 1, ?)"
        #: Case-sensitive id prefix; two rows tell ambiguity.
        self.ID_PREFIX = r(f"SELECT id FROM sessions WHERE {prefix} = ? ORDER BY id LIMIT 2")
        #: What the fork / scope checks read.
        self.SCOPE = r("SELECT source, parent_session_id, model_config FROM sessions "
                       "WHERE id = ?")
        #: End a live (or recoverably closed) row with a reset reason.
        self.PROMOTE_RESET = r(
            "UPDATE sessions SET ended_at = ?, end_reason = ? WHERE id = ? AND "
            f"(ended_at IS NULL OR end_reason IN ({_list(RECOVERABLE_END_REASONS)}))")
        #: Bump the generation of the session's routing peer (blank source/key: no row).
        self.BUMP_GENERATION = r(
            "INSERT INTO conversation_generations (source, session_key, generation) "
            "SELECT TRIM(source), TRIM(session_key), 1 FROM sessions WHERE id = ? "
            "AND TRIM(COALESCE(source, '')) <> '' AND TRIM(COALESCE(session_key, '')) <> '' "
            "ON CONFLICT (source, session_key) DO UPDATE SET "
            "generation = conversation_generations.generation + 1")
        #: One peer's generation.
        self.GENERATION = r("SELECT generation FROM conversation_generations "
                            "WHERE source = ? AND session_key = ?")


#: Reasons that open a new conversation for the peer (the core's reset reasons).
RESET_REASONS = frozenset(RESET_END_REASONS)


#: The IdentityStatements of a dialect (built once per process).
for_dialect = IdentityStatements.for_dialect
