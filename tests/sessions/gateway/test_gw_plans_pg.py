"""Query plans of the gateway's hot lookups on PostgreSQL (issue 20 acceptance 5, the
PostgreSQL half of test_gw_plans.py): with 20,000 keyed sessions and as many routing entries,
analyzed, no lookup of ``sessions`` or ``gateway_routing`` — the reset fences' inner lookups
included — is a sequential scan."""

from __future__ import annotations

import json

import pytest

from hermes_data.sessions.gateway.sql import for_dialect as gateway_sql
from hermes_data.sessions.gateway.peers_sql import for_dialect as peer_sql
from hermes_data.sessions.gateway.peers_sql import tuple_params

N = 20_000
_P, _G = peer_sql("postgresql"), gateway_sql("postgresql")


def _scans(node: dict) -> list[tuple[str, str]]:
    found = []
    if node.get("Relation Name") in ("sessions", "gateway_routing"):
        found.append((node["Relation Name"], node["Node Type"]))
    for child in node.get("Plans", ()):
        found.extend(_scans(child))
    return found


@pytest.fixture
def filled(pg_store):
    with pg_store.engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO sessions (id, source, session_key, user_id, chat_id, chat_type, "
            "started_at, message_count) SELECT 's' || i, 'telegram', 'key' || i, "
            "'u' || (i %% 1000), 'c' || (i %% 1000), 'dm', 1700000000 + i, "
            "CASE WHEN i %% 5 = 0 THEN 1 ELSE 0 END FROM generate_series(0, %s) AS i",
            (N - 1,))
        conn.exec_driver_sql(
            "INSERT INTO messages (session_id, role, content, timestamp) SELECT 's' || i, "
            "'user', 'hi', 1700000000 + i FROM generate_series(0, %s, 5) AS i", (N - 1,))
        conn.exec_driver_sql(
            "INSERT INTO gateway_routing (scope, session_key, entry_json, updated_at) "
            "SELECT 'scope' || (i %% 100), 'key' || i, '{}', 1700000000 "
            "FROM generate_series(0, %s) AS i", (N - 1,))
    with pg_store.engine.connect() as conn:
        conn.exec_driver_sql("ANALYZE sessions")
        conn.exec_driver_sql("ANALYZE messages")
        conn.exec_driver_sql("ANALYZE gateway_routing")
        conn.commit()
    return pg_store


_TUPLE = (True, True, True, False)
_TUPLE_THREAD = (True, True, True, True)


@pytest.mark.parametrize(("statement", "args"), [
    (_P.BY_KEY, ("key4242", "telegram")),
    (_P.by_tuple(_TUPLE, False), tuple_params("telegram", ("u7", "c7", "dm", ""), None)[1]),
    (_P.by_tuple(_TUPLE_THREAD, True),
     tuple_params("telegram", ("u7", "c7", "dm", "t1"), "default")[1]),
    (_G.ROUTING_LOAD, ("scope7",)),
    (_G.ROUTING_GET, ("scope7", "key4207")),
], ids=["by-key", "by-tuple", "by-tuple-owned-thread", "routing-load", "routing-get"])
def test_gateway_lookups_use_an_index_on_postgresql(filled, statement, args):
    with filled.engine.connect() as conn:
        plan = conn.exec_driver_sql("EXPLAIN (FORMAT JSON) " + statement, args).scalar()
    root = (plan if isinstance(plan, list) else json.loads(plan))[0]["Plan"]
    scans = _scans(root)
    assert scans, root
    assert all(kind != "Seq Scan" for _, kind in scans), json.dumps(root, indent=1)[:4000]
