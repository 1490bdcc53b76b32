"""Statements of the agent turn API's session metadata writes
(docs/sessions-agent.md §3.3, §3.9, §3.10): model_config merges, model / prompt / route writes, tool names, cwd
and Git metadata, profiles, and the activity columns (docs/sessions-agent.md §3.7)."""

from __future__ import annotations

from hermes_data.sessions.sql.dialect import Statements, value_rows


#: Pairs per ``backfill_repo_roots`` statement (2 variables each: ≤ 900 per statement).
BACKFILL_PAIRS = 450
_NULL_PROMPT = "system_prompt = NULL, system_prompt_hash = NULL"


class MetaStatements(Statements):
    """The metadata statements of one dialect."""

    def __init__(self, d: str) -> None:
        super().__init__(d)
        pg = d == "postgresql"
        lock = " FOR UPDATE" if pg else ""
        r = self.render
        #: model_config of one session, locked for a read-modify-write on PostgreSQL.
        self.CONFIG_FOR_UPDATE = r(f"SELECT model_config FROM sessions WHERE id = ?{lock}")
        #: model_config of one session (plain read).
        self.CONFIG = r("SELECT model_config FROM sessions WHERE id = ?")
        #: Replace model_config.
        self.SET_CONFIG = r("UPDATE sessions SET model_config = ? WHERE id = ?")
        #: Replace model_config; model only when given.
        self.SET_META = r("UPDATE sessions SET model_config = ?, model = COALESCE(?, model) "
                          "WHERE id = ?")
        #: The prompt hash a session references (before it changes).
        self.PROMPT_HASH = r(f"SELECT system_prompt_hash FROM sessions WHERE id = ?{lock}")
        #: Point a session at a stored prompt (inline legacy copy cleared).
        self.SET_PROMPT = r("UPDATE sessions SET system_prompt_hash = ?, system_prompt = NULL "
                            "WHERE id = ?")
        #: Delete one prompt when no session references it any more.
        self.DROP_PROMPT_IF_UNUSED = r(
            "DELETE FROM system_prompts WHERE hash = ? AND NOT EXISTS "
            "(SELECT 1 FROM sessions WHERE system_prompt_hash = ?)")
        #: Set the model; the prompt snapshot (its footer names the model) goes.
        self.SET_MODEL = r(f"UPDATE sessions SET model = ?, {_NULL_PROMPT} WHERE id = ?")
        #: Set the model when given; the prompt snapshot goes.
        self.SET_MODEL_IF_GIVEN = r(
            f"UPDATE sessions SET model = COALESCE(?, model), {_NULL_PROMPT} WHERE id = ?")
        #: Billing route (mode only when given); the prompt snapshot goes.
        self.SET_BILLING_ROUTE = r(
            "UPDATE sessions SET billing_provider = ?, billing_base_url = ?, "
            f"billing_mode = COALESCE(?, billing_mode), {_NULL_PROMPT} WHERE id = ?")
        #: Tool names (JSON array or NULL).
        self.SET_TOOL_NAMES = r("UPDATE sessions SET tool_names = ? WHERE id = ?")
        #: The expiry-finalized flag, when it differs.
        self.SET_EXPIRY_FINALIZED = r(
            "UPDATE sessions SET expiry_finalized = ? WHERE id = ? "
            "AND COALESCE(expiry_finalized, 0) <> ?")
        #: Stored cwd, locked for the claim on PostgreSQL.
        self.CWD_FOR_UPDATE = r(f"SELECT cwd FROM sessions WHERE id = ?{lock}")
        claim = ("UPDATE sessions SET cwd = ?, "
                 "git_metadata_generation = COALESCE(git_metadata_generation, 0) + 1, ")
        #: Claim a (new) cwd: branch and root replaced (NULL when not given).
        self.CLAIM_CWD_REPLACE = r(claim + "git_branch = ?, git_repo_root = ? WHERE id = ?")
        #: Claim the same cwd: only given branch/root are written.
        self.CLAIM_CWD_KEEP = r(claim + "git_branch = COALESCE(?, git_branch), "
                                "git_repo_root = COALESCE(?, git_repo_root) WHERE id = ?")
        #: The claim generation.
        self.GIT_GENERATION = r("SELECT git_metadata_generation FROM sessions WHERE id = ?")
        #: Publish probed Git metadata only onto the claim it was probed for.
        self.PUBLISH_GIT = r(
            "UPDATE sessions SET git_branch = COALESCE(?, git_branch), "
            "git_repo_root = COALESCE(?, git_repo_root) WHERE id = ? AND cwd = ? "
            "AND git_metadata_generation = ?")
        cwds = ("SELECT cwd, COUNT(*), MAX(COALESCE(ended_at, started_at, 0)) AS last_active "
                "FROM sessions WHERE cwd IS NOT NULL AND TRIM(cwd) <> ''{f} "
                "GROUP BY cwd ORDER BY last_active DESC, cwd")
        #: Distinct non-blank cwds (every kind of row), newest first.
        self.DISTINCT_CWDS_ALL = r(cwds.format(f=""))
        #: The same over unarchived rows.
        self.DISTINCT_CWDS = r(cwds.format(f=" AND COALESCE(archived, 0) = 0"))
        #: Owner profile for rows without one.
        self.BACKFILL_PROFILES = r("UPDATE sessions SET profile_name = ? "
                                   "WHERE profile_name IS NULL OR TRIM(profile_name) = ''")
        # -- activity (docs/sessions-agent.md §3.7)
        #: Move the heartbeat forward (never backwards; a garbage cell is overwritten).
        self.TOUCH_ACTIVITY = r(
            "UPDATE sessions SET last_activity_at = ?, last_activity_description = ?, "
            "last_activity_provenance = ? WHERE id = ? AND (last_activity_at IS NULL "
            "OR last_activity_at < ? OR last_activity_at < ? OR last_activity_at > ?)")
        #: The three activity columns.
        self.ACTIVITY = r("SELECT last_activity_at, last_activity_description, "
                          "last_activity_provenance FROM sessions WHERE id = ?")
        #: Clear the activity labels (the timestamp stays).
        self.CLEAR_ACTIVITY_LABELS = r(
            "UPDATE sessions SET last_activity_description = '', "
            "last_activity_provenance = 'unknown' WHERE id = ?")
        # -- titles (docs/sessions-agent.md §3.10)
        #: Title and its source.
        self.TITLE = r("SELECT title, title_source FROM sessions WHERE id = ?")
        #: Re-label a title's source (titled rows only).
        self.SET_TITLE_SOURCE = r("UPDATE sessions SET title_source = ? WHERE id = ? "
                                  "AND title IS NOT NULL")

    def backfill_roots(self, pairs: int) -> str:
        """Fill empty ``git_repo_root`` of sessions whose cwd is one of ``pairs`` (cwd, root)
        bound pairs, in one statement."""
        values = value_rows(pairs, 2)
        return self.render(
            f"WITH pairs(cwd, root) AS (VALUES {values}) UPDATE sessions SET "
            "git_repo_root = (SELECT root FROM pairs WHERE pairs.cwd = sessions.cwd) "
            "WHERE COALESCE(git_repo_root, '') = '' "
            "AND cwd IN (SELECT cwd FROM pairs)")


#: The MetaStatements of a dialect (built once per process).
for_dialect = MetaStatements.for_dialect
