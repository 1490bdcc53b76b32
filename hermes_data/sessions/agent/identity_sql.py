"""Statements of the agent turn API's identity and reset operations
(docs/sessions-agent.md §3.8): id resolution, fork checks, session-reset promotion and the
per-peer conversation generation."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from hermes_data.sessions.schema import conversation_generations
from hermes_data.sessions.schema import sessions as s
from hermes_data.sessions.sql.constructs import bp, const, dialect_insert, left_chars
from hermes_data.sessions.sql.dialect import Statements, driver_statement
from hermes_data.sessions.sql.predicates import RESET_END_REASONS

#: End reasons gateway recovery reopens (a subset of the core's automatic ones).
RECOVERABLE_END_REASONS = ("agent_close", "ws_orphan_reap", "superseded_by_resume",
                           "startup_orphan_reap")


def _bump_generation(d: str) -> Any:
    # INSERT … SELECT … ON CONFLICT DO UPDATE with each dialect's own insert construct.
    insert = dialect_insert(d)
    g = conversation_generations
    blank = const("")
    peer = sa.select(sa.func.trim(s.c.source), sa.func.trim(s.c.session_key), const(1)).where(
        s.c.id == bp("id"),
        sa.func.trim(sa.func.coalesce(s.c.source, blank)) != blank,
        sa.func.trim(sa.func.coalesce(s.c.session_key, blank)) != blank)
    return insert(g).from_select(["source", "session_key", "generation"], peer) \
        .on_conflict_do_update(index_elements=[g.c.source, g.c.session_key],
                               set_={"generation": g.c.generation + const(1)})


class IdentityStatements(Statements):
    """The identity statements of one dialect (Core constructs, compiled on first use;
    callers pass positional tuples in each statement's declared order)."""

    #: Exact id.
    EXACT_ID = driver_statement(lambda d: sa.select(s.c.id).where(s.c.id == bp("id")), "id")
    #: Case-sensitive id prefix; two rows tell ambiguity.
    ID_PREFIX = driver_statement(lambda d: sa.select(s.c.id).where(
        left_chars(s.c.id, bp("n")) == bp("prefix")).order_by(s.c.id).limit(const(2)),
        "n", "prefix")
    #: What the fork / scope checks read.
    SCOPE = driver_statement(lambda d: sa.select(
        s.c.source, s.c.parent_session_id, s.c.model_config).where(s.c.id == bp("id")), "id")
    #: End a live (or recoverably closed) row with a reset reason.
    PROMOTE_RESET = driver_statement(lambda d: sa.update(s).ordered_values(
        (s.c.ended_at, bp("ended_at")), (s.c.end_reason, bp("reason"))).where(
        s.c.id == bp("id"), sa.or_(s.c.ended_at.is_(None), s.c.end_reason.in_(
            [const(r) for r in RECOVERABLE_END_REASONS]))), "ended_at", "reason", "id")
    #: Bump the generation of the session's routing peer (blank source/key: no row).
    BUMP_GENERATION = driver_statement(_bump_generation, "id")
    #: One peer's generation.
    GENERATION = driver_statement(lambda d: sa.select(conversation_generations.c.generation)
                                  .where(conversation_generations.c.source == bp("source"),
                                         conversation_generations.c.session_key == bp("key")),
                                  "source", "key")


#: Reasons that open a new conversation for the peer (the core's reset reasons).
RESET_REASONS = frozenset(RESET_END_REASONS)


#: The IdentityStatements of a dialect (built once per process).
for_dialect = IdentityStatements.for_dialect
