"""Named ``text()`` fragments for what Core expresses badly (recursive CTEs, planner hints).

Every value is a bound parameter (``:name``); nothing is formatted into SQL. Each fragment
carries a one-line comment saying what it is for. Everything else is a Core construct built
from :mod:`hermes_data.telemetry.schema` in :mod:`.reads` / :mod:`.writes`.
"""

from __future__ import annotations

import sqlalchemy as sa

# Sessions of cron job :scope_id plus every delegated descendant (UNION, so a cycle ends).
CRON_SUBTREE_CTE = """
WITH RECURSIVE cron_subtree(session_id) AS (
    SELECT session_id FROM runs WHERE cron_job_id = :scope_id
    UNION
    SELECT se.child_session_id
      FROM subagent_edges AS se
      JOIN cron_subtree AS st ON se.parent_session_id = st.session_id
)
"""

# spend_by_scope for scope 'cron_job': runs of the job's whole subtree started at/after :since.
SPEND_CRON_JOB = sa.text(CRON_SUBTREE_CTE + """
SELECT COALESCE(SUM(r.cost_usd), 0.0),
       COALESCE(SUM(r.estimated_llm_calls), 0),
       COALESCE(SUM(r.api_calls), 0)
  FROM runs AS r
 WHERE r.session_id IN (SELECT session_id FROM cron_subtree)
   AND r.started_at >= :since
""")

# daily_spend_series for scope 'cron_job': per UTC day cost of the job's subtree since :since.
DAILY_SPEND_CRON_JOB = sa.text(CRON_SUBTREE_CTE + """
SELECT substr(r.started_at, 1, 10) AS day, COALESCE(SUM(r.cost_usd), 0.0)
  FROM runs AS r
 WHERE r.session_id IN (SELECT session_id FROM cron_subtree)
   AND r.started_at >= :since
 GROUP BY day
""")

# estimated_price_share for scope 'cron_job': (all calls, calls whose model is in :models JSON).
ESTIMATED_SHARE_CRON_JOB = sa.text(CRON_SUBTREE_CTE + """
SELECT COUNT(*),
       COALESCE(SUM(lc.model IN (SELECT value FROM json_each(:models))), 0)
  FROM runs AS r
  JOIN llm_calls AS lc ON lc.session_id = r.session_id
 WHERE r.session_id IN (SELECT session_id FROM cron_subtree)
   AND r.started_at >= :since
""")

# stats_summary top tools, index-driven: runs in the window by idx_runs_started, then their
# tool rows by idx_tool_session (CROSS JOIN pins that loop order; upstream scanned tool_calls).
TOP_TOOLS = sa.text("""
SELECT tc.tool_name,
       COUNT(*) AS calls,
       SUM(CASE WHEN tc.ok = 0 THEN 1 ELSE 0 END) AS failures,
       AVG(tc.latency_ms) AS avg_ms
  FROM runs AS r
 CROSS JOIN tool_calls AS tc
 WHERE r.started_at >= :since AND r.started_at < :until
   AND tc.session_id = r.session_id
 GROUP BY tc.tool_name
 ORDER BY calls DESC, tc.tool_name
 LIMIT :limit
""")
