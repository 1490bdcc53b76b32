"""Query plans of the gateway's hot lookups (issue 20 acceptance 5): on a store without
statistics (no ANALYZE — how most files are), every lookup of ``sessions`` and
``gateway_routing`` is an index search, the reset fences' inner lookups included."""

from __future__ import annotations

import re
import sqlite3

import pytest

from hermes_data.sessions.gateway.sql import for_dialect as gateway_sql
from hermes_data.sessions.gateway.peers_sql import for_dialect as peer_sql
from hermes_data.sessions.store import SessionStore

_P, _G = peer_sql("sqlite"), gateway_sql("sqlite")


@pytest.mark.parametrize(("statement", "index"), [
    (_P.BY_KEY, "idx_sessions_session_key (session_key=?)"),
    (_P.by_tuple((True, True, True, False), False),
     "idx_sessions_gateway_peer (source=? AND user_id=? AND chat_id=? AND chat_type=?)"),
    (_P.by_tuple((True, True, True, True), True), "idx_sessions_gateway_peer (source=? AND "
                                                  "user_id=? AND chat_id=? AND chat_type=? AND thread_id=?)"),
    (_G.ROUTING_LOAD, "sqlite_autoindex_gateway_routing_1 (scope=?)"),
    (_G.ROUTING_GET, "sqlite_autoindex_gateway_routing_1 (scope=? AND session_key=?)"),
], ids=["by-key", "by-tuple", "by-tuple-owned-thread", "routing-load", "routing-get"])
def test_gateway_lookups_search_an_index(tmp_path, statement, index):
    path = tmp_path / "state.db"
    SessionStore(path).close()
    con = sqlite3.connect(path)
    try:
        plan = [r[3] for r in con.execute(f"EXPLAIN QUERY PLAN {statement}",
                                          (None,) * statement.count("?"))]
    finally:
        con.close()
    touched = [line for line in plan if re.match(r"(SEARCH|SCAN) (s|fb|gateway_routing)\b",
                                                 line)]
    assert touched and all(line.startswith("SEARCH") and index in line for line in touched), \
        plan
