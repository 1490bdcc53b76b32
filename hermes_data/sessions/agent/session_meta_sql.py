"""Statements of the agent turn API's session metadata writes
(docs/sessions-agent.md §3.3, §3.9, §3.10): model_config merges, model / prompt / route writes, tool names, cwd
and Git metadata, profiles, and the activity columns (docs/sessions-agent.md §3.7)."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import sqlalchemy as sa

from hermes_data.sessions.schema import sessions as s
from hermes_data.sessions.schema import system_prompts
from hermes_data.sessions.sql.constructs import bp, const
from hermes_data.sessions.sql.dialect import Statements, driver_statement
from hermes_data.statements import DriverPrepared


#: Pairs per ``backfill_repo_roots`` statement (2 variables each: ≤ 900 per statement).
BACKFILL_PAIRS = 450


def _set(*pairs: tuple[str, Any]) -> list[tuple[Any, Any]]:
    return [(s.c[c], v) for c, v in pairs]


def _upd(*pairs: tuple[str, Any]) -> sa.Update:
    # SET in the given order (positional callers), values bound or expressions.
    return sa.update(s).ordered_values(*_set(*pairs))


_NULL_PROMPT = (("system_prompt", sa.null()), ("system_prompt_hash", sa.null()))
_BY_ID = s.c.id == bp("id")


def _col(name: str, *, lock: bool = False) -> Any:
    """``SELECT <name> FROM sessions WHERE id = ?`` (locked on PostgreSQL with ``lock``)."""
    def build(d: str) -> sa.Select:
        stmt = sa.select(s.c[name]).where(_BY_ID)
        return stmt.with_for_update() if lock else stmt
    return driver_statement(build, "id")


def _claim(keep: bool) -> Any:
    git = ((("git_branch", sa.func.coalesce(bp("branch"), s.c.git_branch)),
            ("git_repo_root", sa.func.coalesce(bp("root"), s.c.git_repo_root)))
           if keep else (("git_branch", bp("branch")), ("git_repo_root", bp("root"))))
    return driver_statement(lambda d: _upd(
        ("cwd", bp("cwd")),
        ("git_metadata_generation", sa.func.coalesce(s.c.git_metadata_generation, const(0))
         + const(1)), *git).where(_BY_ID), "cwd", "branch", "root", "id")


def _cwds(unarchived: bool) -> Any:
    def build(d: str) -> sa.Select:
        last = sa.func.max(sa.func.coalesce(s.c.ended_at, s.c.started_at, const(0))
                           ).label("last_active")
        conds = [s.c.cwd.is_not(None), sa.func.trim(s.c.cwd) != const("")]
        if unarchived:
            conds.append(sa.func.coalesce(s.c.archived, const(0)) == const(0))
        return (sa.select(s.c.cwd, sa.func.count(), last).where(*conds).group_by(s.c.cwd)
                .order_by(last.desc(), s.c.cwd))
    return driver_statement(build)


class MetaStatements(Statements):
    """The metadata statements of one dialect (Core constructs over ``sessions``, compiled
    on first use; callers pass positional tuples in each statement's declared order)."""

    #: model_config of one session, locked for a read-modify-write on PostgreSQL.
    CONFIG_FOR_UPDATE = _col("model_config", lock=True)
    #: model_config of one session (plain read).
    CONFIG = _col("model_config")
    #: Replace model_config.
    SET_CONFIG = driver_statement(lambda d: _upd(("model_config", bp("cfg"))).where(_BY_ID),
                                  "cfg", "id")
    #: Replace model_config; model only when given.
    SET_META = driver_statement(lambda d: _upd(
        ("model_config", bp("cfg")), ("model", sa.func.coalesce(bp("model"), s.c.model)),
    ).where(_BY_ID), "cfg", "model", "id")
    #: The prompt hash a session references (before it changes).
    PROMPT_HASH = _col("system_prompt_hash", lock=True)
    #: Point a session at a stored prompt (inline legacy copy cleared).
    SET_PROMPT = driver_statement(lambda d: _upd(
        ("system_prompt_hash", bp("hash")), ("system_prompt", sa.null())).where(_BY_ID),
        "hash", "id")
    #: Delete one prompt when no session references it any more.
    DROP_PROMPT_IF_UNUSED = driver_statement(lambda d: sa.delete(system_prompts).where(
        system_prompts.c.hash == bp("hash"),
        ~sa.select(const(1)).where(s.c.system_prompt_hash == bp("hash2")).exists()),
        "hash", "hash2")
    #: Set the model; the prompt snapshot (its footer names the model) goes.
    SET_MODEL = driver_statement(lambda d: _upd(
        ("model", bp("model")), *_NULL_PROMPT).where(_BY_ID), "model", "id")
    #: Set the model when given; the prompt snapshot goes.
    SET_MODEL_IF_GIVEN = driver_statement(lambda d: _upd(
        ("model", sa.func.coalesce(bp("model"), s.c.model)), *_NULL_PROMPT).where(_BY_ID),
        "model", "id")
    #: Billing route (mode only when given); the prompt snapshot goes.
    SET_BILLING_ROUTE = driver_statement(lambda d: _upd(
        ("billing_provider", bp("provider")), ("billing_base_url", bp("base_url")),
        ("billing_mode", sa.func.coalesce(bp("mode"), s.c.billing_mode)), *_NULL_PROMPT,
    ).where(_BY_ID), "provider", "base_url", "mode", "id")
    #: Tool names (JSON array or NULL).
    SET_TOOL_NAMES = driver_statement(lambda d: _upd(("tool_names", bp("names"))).where(
        _BY_ID), "names", "id")
    #: The expiry-finalized flag, when it differs.
    SET_EXPIRY_FINALIZED = driver_statement(lambda d: _upd(
        ("expiry_finalized", bp("v"))).where(
        _BY_ID, sa.func.coalesce(s.c.expiry_finalized, const(0)) != bp("v2")), "v", "id", "v2")
    #: Stored cwd, locked for the claim on PostgreSQL.
    CWD_FOR_UPDATE = _col("cwd", lock=True)
    #: Claim a (new) cwd: branch and root replaced (NULL when not given).
    CLAIM_CWD_REPLACE = _claim(keep=False)
    #: Claim the same cwd: only given branch/root are written.
    CLAIM_CWD_KEEP = _claim(keep=True)
    #: The claim generation.
    GIT_GENERATION = _col("git_metadata_generation")
    #: Publish probed Git metadata only onto the claim it was probed for.
    PUBLISH_GIT = driver_statement(lambda d: _upd(
        ("git_branch", sa.func.coalesce(bp("branch"), s.c.git_branch)),
        ("git_repo_root", sa.func.coalesce(bp("root"), s.c.git_repo_root)),
    ).where(_BY_ID, s.c.cwd == bp("cwd"), s.c.git_metadata_generation == bp("generation")),
        "branch", "root", "id", "cwd", "generation")
    #: Distinct non-blank cwds (every kind of row), newest first.
    DISTINCT_CWDS_ALL = _cwds(unarchived=False)
    #: The same over unarchived rows.
    DISTINCT_CWDS = _cwds(unarchived=True)
    #: Owner profile for rows without one.
    BACKFILL_PROFILES = driver_statement(lambda d: _upd(("profile_name", bp("name"))).where(
        sa.or_(s.c.profile_name.is_(None), sa.func.trim(s.c.profile_name) == const(""))),
        "name")
    # -- activity (docs/sessions-agent.md §3.7)
    #: Move the heartbeat forward (never backwards; a garbage cell is overwritten).
    TOUCH_ACTIVITY = driver_statement(lambda d: _upd(
        ("last_activity_at", bp("at")), ("last_activity_description", bp("description")),
        ("last_activity_provenance", bp("provenance")),
    ).where(_BY_ID, sa.or_(s.c.last_activity_at.is_(None), s.c.last_activity_at < bp("at2"),
                           s.c.last_activity_at < bp("lo"), s.c.last_activity_at > bp("hi"))),
        "at", "description", "provenance", "id", "at2", "lo", "hi")
    #: The three activity columns.
    ACTIVITY = driver_statement(lambda d: sa.select(
        s.c.last_activity_at, s.c.last_activity_description, s.c.last_activity_provenance,
    ).where(_BY_ID), "id")
    #: Clear the activity labels (the timestamp stays).
    CLEAR_ACTIVITY_LABELS = driver_statement(lambda d: _upd(
        ("last_activity_description", const("")),
        ("last_activity_provenance", const("unknown"))).where(_BY_ID), "id")
    # -- titles (docs/sessions-agent.md §3.10)
    #: Title and its source.
    TITLE = driver_statement(lambda d: sa.select(s.c.title, s.c.title_source).where(_BY_ID),
                             "id")
    #: Re-label a title's source (titled rows only).
    SET_TITLE_SOURCE = driver_statement(lambda d: _upd(("title_source", bp("source"))).where(
        _BY_ID, s.c.title.is_not(None)), "source", "id")

    def backfill_roots(self, pairs: int) -> str:
        """Fill empty ``git_repo_root`` of sessions whose cwd is one of ``pairs`` (cwd, root)
        bound pairs, in one statement."""
        order = tuple(name for i in range(pairs) for name in (f"c{i}", f"r{i}"))
        return _backfill_roots(pairs).positional_sql(self.dialect, order)


@lru_cache(maxsize=32)
def _backfill_roots(n: int) -> DriverPrepared:
    """``WITH pairs(cwd, root) AS (VALUES …) UPDATE sessions …`` for ``n`` bound pairs."""
    def build() -> sa.Update:
        pairs = sa.values(sa.column("cwd"), sa.column("root"), name="pairs").data(
            [(bp(f"c{i}"), bp(f"r{i}")) for i in range(n)]).cte("pairs")
        root = sa.select(pairs.c.root).where(pairs.c.cwd == s.c.cwd).scalar_subquery()
        return sa.update(s).values(git_repo_root=root).where(
            sa.func.coalesce(s.c.git_repo_root, const("")) == const(""),
            s.c.cwd.in_(sa.select(pairs.c.cwd)))
    return DriverPrepared("backfill_roots", build)


#: The MetaStatements of a dialect (built once per process).
for_dialect = MetaStatements.for_dialect
