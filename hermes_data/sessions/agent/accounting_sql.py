"""Statements of the agent turn API's accounting (docs/sessions-agent.md §3.2–§3.4):
the session summary counters, ``session_model_usage`` upserts, the dominant route and the
store-wide totals.

Driver statements written with ``?`` and rendered once per dialect (psycopg: ``%s``). A
value that may be NULL and is tested with ``IS NULL`` is cast, so PostgreSQL can type it.
"""

from __future__ import annotations

from hermes_data.sessions.sql.dialect import Statements, marks


#: The counters of one token delta (``update_token_counts`` keywords), summed by coalescing.
COUNTERS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
            "reasoning_tokens", "api_call_count")
#: The five token counters (the seed and dominant-route token sum).
TOKEN_COUNTERS = COUNTERS[:5]
#: The route / task key of ``session_model_usage``.
USAGE_KEY = ("session_id", "model", "billing_provider", "billing_base_url", "billing_mode",
             "task")
USAGE_COLS = (*USAGE_KEY, *COUNTERS[5:], *COUNTERS[:5], "estimated_cost_usd",
              "actual_cost_usd", "cost_status", "cost_source", "first_seen", "last_seen")


class AccountingStatements(Statements):
    """The accounting statements of one dialect."""

    def __init__(self, d: str) -> None:
        super().__init__(d)
        pg = d == "postgresql"
        real = "DOUBLE PRECISION" if pg else "REAL"
        lock = " FOR UPDATE" if pg else ""
        r = self.render
        #: The route columns of one session (read-modify-write: locked on PostgreSQL).
        self.ROUTE_FOR_UPDATE = r(
            "SELECT model, billing_provider, billing_base_url, billing_mode, api_call_count "
            f"FROM sessions WHERE id = ?{lock}")
        #: The route columns, after the summary update (what a usage row falls back to).
        self.ROUTE = r("SELECT model, billing_provider, billing_base_url, billing_mode "
                       "FROM sessions WHERE id = ?")
        #: Stamp the route that served the first accounted call.
        self.SET_FIRST_ROUTE = r("UPDATE sessions SET model = ?, billing_provider = ?, "
                                 "billing_base_url = ?, billing_mode = ? WHERE id = ?")
        tail = ("cost_status = COALESCE(?, cost_status), cost_source = COALESCE(?, cost_source), "
                "pricing_version = COALESCE(?, pricing_version), "
                "billing_provider = COALESCE(billing_provider, ?), "
                "billing_base_url = COALESCE(billing_base_url, ?), "
                "billing_mode = COALESCE(billing_mode, ?), model = COALESCE(model, ?) WHERE id = ?")
        add = ", ".join(f"{c} = COALESCE({c}, 0) + ?" for c in COUNTERS)
        #: Incremental summary: counters add (legacy NULL cells count as 0), costs add.
        self.SUMMARY_ADD = r(
            f"UPDATE sessions SET {add}, "
            "estimated_cost_usd = COALESCE(estimated_cost_usd, 0) + COALESCE(?, 0), "
            f"actual_cost_usd = CASE WHEN CAST(? AS {real}) IS NULL THEN actual_cost_usd "
            "ELSE COALESCE(actual_cost_usd, 0) + ? END, " + tail)
        put = ", ".join(f"{c} = ?" for c in COUNTERS)
        #: Absolute summary: counters set; an absolute write without estimate resets it.
        self.SUMMARY_SET = r(
            f"UPDATE sessions SET {put}, estimated_cost_usd = COALESCE(?, 0), "
            f"actual_cost_usd = CASE WHEN CAST(? AS {real}) IS NULL THEN actual_cost_usd "
            "ELSE ? END, " + tail)
        adds = ", ".join(f"{c} = session_model_usage.{c} + excluded.{c}"
                         for c in (*COUNTERS, "estimated_cost_usd", "actual_cost_usd"))
        #: Add one delta to its (session, route, task) usage row.
        self.USAGE_UPSERT = r(
            f"INSERT INTO session_model_usage ({', '.join(USAGE_COLS)}) "
            f"VALUES ({marks(len(USAGE_COLS))}) "
            f"ON CONFLICT ({', '.join(USAGE_KEY)}) DO UPDATE SET {adds}, "
            "cost_status = COALESCE(excluded.cost_status, session_model_usage.cost_status), "
            "cost_source = COALESCE(excluded.cost_source, session_model_usage.cost_source), "
            "last_seen = excluded.last_seen")
        tokens = " + ".join(TOKEN_COUNTERS)
        #: The main-loop route that served most calls (then tokens, recency, route order).
        self.DOMINANT_ROUTE = r(
            "SELECT model, billing_provider, billing_base_url, billing_mode, api_call_count "
            "FROM session_model_usage WHERE session_id = ? AND task = '' "
            "AND model <> 'unknown' AND billing_provider <> '' "
            f"ORDER BY api_call_count DESC, ({tokens}) DESC, COALESCE(last_seen, 0) DESC, "
            "model, billing_provider, billing_base_url, billing_mode LIMIT 1")
        totals = ("SELECT COALESCE(SUM(COALESCE(input_tokens, 0) + COALESCE(output_tokens, 0)), 0), "
                  "COALESCE(SUM(COALESCE(actual_cost_usd, estimated_cost_usd, 0)), 0) "
                  "FROM sessions WHERE parent_session_id IS NULL "
                  "AND COALESCE(message_count, 0) >= ?")
        #: Store-wide totals over root sessions (archived ones included).
        self.USAGE_TOTALS_ALL = r(totals)
        #: Store-wide totals over unarchived root sessions.
        self.USAGE_TOTALS = r(totals + " AND COALESCE(archived, 0) = 0")
        #: ``unknown`` takes a real source while the session has no message rows.
        self.UPGRADE_UNKNOWN_SOURCE = r(
            "UPDATE sessions SET source = ? WHERE id = ? AND source = 'unknown' "
            "AND NOT EXISTS (SELECT 1 FROM messages WHERE session_id = ?)")
        #: Usage rows of one session (tests, exports).
        self.USAGE_OF = r(f"SELECT {', '.join(USAGE_COLS)} FROM session_model_usage "
                          "WHERE session_id = ? ORDER BY task, model, billing_provider, "
                          "billing_base_url, billing_mode")


#: The AccountingStatements of a dialect (built once per process).
for_dialect = AccountingStatements.for_dialect
