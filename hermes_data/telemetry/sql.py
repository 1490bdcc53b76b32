"""Named ``text()`` fragments for what Core expresses badly (recursive CTEs, planner hints),
and the few SQL functions whose spelling differs between SQLite and PostgreSQL.

Every value is a bound parameter (``:name``); nothing is formatted into SQL. Each fragment
carries a one-line comment saying what it is for. Everything else is a Core construct built
from :mod:`hermes_data.telemetry.schema` in :mod:`.reads` / :mod:`.writes`.

Fragments whose SQLite text PostgreSQL does not accept (``json_each``, ``SUM`` of a boolean)
or types differently (``SUM``/``AVG`` of a BIGINT is ``numeric`` there, which psycopg returns
as ``Decimal``) have a ``PG_…`` twin; the others run unchanged on both.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.functions import FunctionElement


# --------------------------------------------------------------------------- session settings
# PostgreSQL: no JIT compilation on the telemetry store's held connections (set at checkout,
# reset before the connection goes back to the pool; docs/telemetry.md §8.8).
NO_JIT = "SET jit = off"
RESET_JIT = "RESET jit"


# --------------------------------------------------------------------------- dialect functions
class int_sum(FunctionElement):
    """``SUM`` of integers as an integer: ``sum(x)`` on SQLite, ``CAST(sum(x) AS BIGINT)`` on
    PostgreSQL (whose ``sum(bigint)`` is ``numeric``)."""

    type = sa.Integer()
    name = "int_sum"
    inherit_cache = True


@compiles(int_sum)
def _int_sum(element, compiler, **kw):
    return "sum(%s)" % compiler.process(element.clauses, **kw)


@compiles(int_sum, "postgresql")
def _int_sum_pg(element, compiler, **kw):
    return "CAST(sum(%s) AS BIGINT)" % compiler.process(element.clauses, **kw)


class float_avg(FunctionElement):
    """``AVG`` as a float: ``avg(x)`` on SQLite, ``CAST(avg(x) AS DOUBLE PRECISION)`` on
    PostgreSQL (whose ``avg(bigint)`` is ``numeric``)."""

    type = sa.Float()
    name = "float_avg"
    inherit_cache = True


@compiles(float_avg)
def _float_avg(element, compiler, **kw):
    return "avg(%s)" % compiler.process(element.clauses, **kw)


@compiles(float_avg, "postgresql")
def _float_avg_pg(element, compiler, **kw):
    return "CAST(avg(%s) AS DOUBLE PRECISION)" % compiler.process(element.clauses, **kw)


class round6(FunctionElement):
    """Money rounded to 6 decimals: ``round(x, 6)``; PostgreSQL has no ``round(double, int)``,
    so there it rounds the ``numeric`` and returns a double again."""

    type = sa.Float()
    name = "round6"
    inherit_cache = True


@compiles(round6)
def _round6(element, compiler, **kw):
    return "round(%s, 6)" % compiler.process(element.clauses, **kw)


@compiles(round6, "postgresql")
def _round6_pg(element, compiler, **kw):
    return ("CAST(round(CAST(%s AS NUMERIC), 6) AS DOUBLE PRECISION)"
            % compiler.process(element.clauses, **kw))


class in_json_array(FunctionElement):
    """``x IN (the strings of a JSON array bound as one parameter)`` — ``json_each`` on
    SQLite, ``json_array_elements_text`` on PostgreSQL. Arguments: (column, bind)."""

    type = sa.Boolean()
    name = "in_json_array"
    inherit_cache = True


@compiles(in_json_array)
def _in_json_array(element, compiler, **kw):
    col, arr = list(element.clauses)
    return "%s IN (SELECT value FROM json_each(%s))" % (compiler.process(col, **kw),
                                                          compiler.process(arr, **kw))


@compiles(in_json_array, "postgresql")
def _in_json_array_pg(element, compiler, **kw):
    # ``= ANY`` of an array built once per statement (an InitPlan): ``IN (SELECT …)`` in a
    # select list is a SubPlan PostgreSQL rescans for every row (docs/telemetry.md §8.8).
    col, arr = list(element.clauses)
    return "%s = ANY(ARRAY(SELECT json_array_elements_text(CAST(%s AS JSON))))" % (
        compiler.process(col, **kw), compiler.process(arr, **kw))


#: ``OFFSET 0`` of a PostgreSQL LATERAL subquery: the planner never flattens a subquery with
#: an OFFSET into its parent, so the subquery stays a per-row probe of the child table's
#: session index (docs/telemetry.md §8.8) instead of a hash join over the whole table.
NO_FLATTEN: sa.ColumnElement[int] = sa.literal_column("0", sa.Integer())


class ms_between(FunctionElement):
    """Whole milliseconds from ``start`` to ``end`` (both canonical ISO text), rounded;
    NULL when either cannot be read as a time. Arguments: (end, start)."""

    type = sa.Integer()
    name = "ms_between"
    inherit_cache = True


@compiles(ms_between)
def _ms_between(element, compiler, **kw):
    end, start = (compiler.process(c, **kw) for c in element.clauses)
    # ROUND, not upstream's bare CAST: julianday() is a double, and truncating its
    # product turned an exact 5 s into 4999 ms.
    return f"CAST(round((julianday({end}) - julianday({start})) * 86400000) AS INTEGER)"


# Text that does not look like an ISO date would make the timestamptz cast raise; julianday()
# returns NULL there, so the PostgreSQL spelling returns NULL as well.
_ISO_PREFIX = r"'^[0-9]{4}-[0-9]{2}-[0-9]{2}([T ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]+)?)?)?([+-][0-9]{2}:?[0-9]{2}|Z)?$'"


@compiles(ms_between, "postgresql")
def _ms_between_pg(element, compiler, **kw):
    end, start = (compiler.process(c, **kw) for c in element.clauses)
    return (f"CASE WHEN {end} ~ {_ISO_PREFIX} AND {start} ~ {_ISO_PREFIX} THEN "
            f"CAST(round(EXTRACT(EPOCH FROM (CAST({end} AS TIMESTAMPTZ) - "
            f"CAST({start} AS TIMESTAMPTZ))) * 1000) AS BIGINT) END")


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

# PostgreSQL twin of SPEND_CRON_JOB: integer sums cast back from numeric; each subtree session's
# run found by its key (LATERAL, OFFSET 0: never a hash join over every run). UNION already
# made the subtree distinct; the DISTINCT is for the planner, whose guess for a recursive CTE
# (ten times its first term) priced the key lookups past jit_above_cost.
PG_SPEND_CRON_JOB = sa.text(CRON_SUBTREE_CTE + """
SELECT COALESCE(SUM(r.cost_usd), 0.0),
       CAST(COALESCE(SUM(r.estimated_llm_calls), 0) AS BIGINT),
       CAST(COALESCE(SUM(r.api_calls), 0) AS BIGINT)
  FROM (SELECT DISTINCT session_id FROM cron_subtree) AS st
 CROSS JOIN LATERAL (SELECT runs.cost_usd, runs.estimated_llm_calls, runs.api_calls
                       FROM runs
                      WHERE runs.session_id = st.session_id AND runs.started_at >= :since
                     OFFSET 0) AS r
""")

# PostgreSQL twin of DAILY_SPEND_CRON_JOB: the subtree's runs found by key as above.
PG_DAILY_SPEND_CRON_JOB = sa.text(CRON_SUBTREE_CTE + """
SELECT substr(r.started_at, 1, 10) AS day, COALESCE(SUM(r.cost_usd), 0.0)
  FROM (SELECT DISTINCT session_id FROM cron_subtree) AS st
 CROSS JOIN LATERAL (SELECT runs.started_at, runs.cost_usd
                       FROM runs
                      WHERE runs.session_id = st.session_id AND runs.started_at >= :since
                     OFFSET 0) AS r
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

# PostgreSQL twin of ESTIMATED_SHARE_CRON_JOB: the subtree's runs by key, each run's calls by
# idx_llm_session (LATERAL, OFFSET 0), the model list unnested once (= ANY of an array).
PG_ESTIMATED_SHARE_CRON_JOB = sa.text(CRON_SUBTREE_CTE + """
SELECT COUNT(*),
       COALESCE(SUM(CASE WHEN lc.model = ANY(ARRAY(SELECT json_array_elements_text(CAST(:models AS JSON))))
                         THEN 1 ELSE 0 END), 0)
  FROM (SELECT DISTINCT session_id FROM cron_subtree) AS st
 CROSS JOIN LATERAL (SELECT runs.session_id
                       FROM runs
                      WHERE runs.session_id = st.session_id AND runs.started_at >= :since
                     OFFSET 0) AS r
 CROSS JOIN LATERAL (SELECT llm_calls.model
                       FROM llm_calls
                      WHERE llm_calls.session_id = r.session_id
                     OFFSET 0) AS lc
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

# PostgreSQL twin of TOP_TOOLS: the same loop order, pinned by a LATERAL subquery the planner
# cannot flatten (OFFSET 0) — as a plain join it hashed every tool call; AVG of a BIGINT cast
# back to a double.
PG_TOP_TOOLS = sa.text("""
SELECT tc.tool_name,
       COUNT(*) AS calls,
       SUM(CASE WHEN tc.ok = 0 THEN 1 ELSE 0 END) AS failures,
       CAST(AVG(tc.latency_ms) AS DOUBLE PRECISION) AS avg_ms
  FROM runs AS r
 CROSS JOIN LATERAL (SELECT tool_calls.tool_name, tool_calls.ok, tool_calls.latency_ms
                       FROM tool_calls
                      WHERE tool_calls.session_id = r.session_id
                     OFFSET 0) AS tc
 WHERE r.started_at >= :since AND r.started_at < :until
 GROUP BY tc.tool_name
 ORDER BY calls DESC, tc.tool_name
 LIMIT :limit
""")


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def create_index(name: str, table: str, columns: tuple[str, ...], *, unique: bool = False) -> str:
    """``CREATE [UNIQUE] INDEX IF NOT EXISTS`` for a ledger index being rebuilt on adoption
    (names from the ledger's own table, quoted)."""
    return (f"CREATE {'UNIQUE ' if unique else ''}INDEX IF NOT EXISTS {_quote(name)} "
            f"ON {_quote(table)} ({', '.join(_quote(c) for c in columns)})")
