"""PostgreSQL equivalents of SQLite-specific store checks (plans, one-statement walks)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from tests.sessions.conftest import make_chain

pytestmark = pytest.mark.journal_independent("PostgreSQL only")


def test_lineage_of_a_500_segment_chain_in_one_statement(pg_store):
    ids = make_chain(pg_store, 500)
    seen: list[str] = []
    sa.event.listen(pg_store.engine, "before_cursor_execute",
                    lambda *a: seen.append(a[2]))
    assert pg_store.get_lineage_ids(ids[250]) == ids
    assert pg_store.get_compression_tip(ids[0]) == ids[-1]
    assert pg_store.get_compression_root(ids[-1]) == ids[0]
    assert sum(1 for s in seen if "WITH RECURSIVE" in s) == 3


def test_keyset_paging_uses_the_session_id_index(pg_store):
    pg_store.create_session("s1", "cli")
    pg_store.append_messages_batch("s1", [{"role": "user", "content": f"m{i}"} for i in range(300)])
    page = pg_store.get_messages("s1", limit=100, after_id=100)
    assert [m.id for m in page] == list(range(101, 201))
    with pg_store.engine.connect() as conn:
        conn.exec_driver_sql("SET enable_seqscan = off")
        plan = "\n".join(r[0] for r in conn.exec_driver_sql(
            "EXPLAIN SELECT id FROM messages WHERE session_id = 's1' AND +active = 1 "
            "AND id > 100 ORDER BY id LIMIT 100"))
    assert "idx_messages_session_id" in plan, plan


def test_malformed_model_config_never_raises(pg_store):
    pg_store.create_session("root", "cli", model_config="{not json")
    pg_store.create_session("kid", "cli", parent_session_id="root", model_config="[1, 2]")
    assert pg_store.end_session("root", "compression")
    assert pg_store.get_lineage_ids("kid") == ["root", "kid"]
    assert [r.id for r in pg_store.list_sessions()] == ["kid"]
