"""Never-active keyed sessions and orphan repair (spec sessions-ext-gateway.md §3.4–§3.5,
acceptance behaviours 20–24)."""

from __future__ import annotations

import json
import time

import pytest

from hermes_data.sessions.gateway import never_active
from hermes_data.sessions.store import SessionStore

from tests.sessions.gateway.test_gw_peers import _msg, _row

DAY = 86400.0


def _old(store, sid, **kw):
    _row(store, sid, session_key=f"k-{sid}", started_at=time.time() - 2 * DAY, **kw)


def _ids(store, days=1):
    return [c.id for c in store.list_never_active_keyed_sessions(older_than_days=days)]


def test_gw20_never_active_listing_and_its_exclusions(store, backend):
    """Behaviour 20: a keyed open empty 2-day-old row is listed for ``older_than_days=1``; a
    title, ``last_activity_at``, one rewound message, ``api_call_count=1``, pin, archive or
    child each excludes it (a topic binding too, PostgreSQL); -1 / nan ⇒ ValueError."""
    _old(store, "plain")
    _old(store, "young")
    with store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE sessions SET started_at = ? WHERE id = 'young'",
                             (time.time() - 3600,))
    excluded = {"titled": "title = 'x'", "active": "last_activity_at = 1800000000",
                "calls": "api_call_count = 1", "pinned": "pinned = 1",
                "archived": "archived = 1", "rewound": None, "parent": None}
    for sid, assign in excluded.items():
        _old(store, sid)
        if assign:
            with store.engine.begin() as conn:
                conn.exec_driver_sql(f"UPDATE sessions SET {assign} WHERE id = ?", (sid,))
    _msg(store, "rewound", time.time())
    with store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE messages SET active = 0 WHERE session_id = 'rewound'")
    _row(store, "kid", parent_session_id="parent", source="cli", started_at=time.time())
    if backend == "postgresql":
        _old(store, "bound")
        with store.engine.begin() as conn:
            conn.exec_driver_sql(
                "INSERT INTO telegram_dm_topic_bindings (chat_id, thread_id, user_id, "
                "session_key, session_id, linked_at, updated_at) VALUES ('c', '1', 'u', 'k', "
                "'bound', 1, 1)")
    listed = store.list_never_active_keyed_sessions(older_than_days=1)
    assert [c.id for c in listed] == ["plain"]
    assert listed[0].as_dict()["session_key"] == "k-plain"
    assert set(_ids(store, 0)) == {"plain", "young"}
    for bad in (-1, float("nan"), True):
        with pytest.raises(ValueError):
            store.list_never_active_keyed_sessions(older_than_days=bad)


def test_gw21_prune_deletes_rows_with_their_entries_and_rechecks(store, monkeypatch):
    """Behaviour 21: prune deletes the rows and their routing entries in every scope (a
    malformed entry stays), returning both counts; a message appended after the listing or
    a live turn lease keeps the row and its entry; more candidates than one 900-id chunk
    work (the spec's 1500)."""
    for sid in ("a", "b", "late", "leased"):
        _old(store, sid)
        store.save_gateway_routing_entry(f"k-{sid}", json.dumps({"session_id": sid}),
                                         scope="s1")
    store.save_gateway_routing_entry("k-a", json.dumps({"session_id": "a"}), scope="s2")
    store.save_gateway_routing_entry("bad", "{not json", scope="s1")
    with store.engine.begin() as conn:
        conn.exec_driver_sql("INSERT INTO session_turn_leases (conversation_id, holder, "
                             "acquired_at, expires_at) VALUES ('leased', 'other', ?, ?)",
                             (time.time(), time.time() + 600))
    monkeypatch.setattr(never_active, "_after_listing",
                        lambda c: _msg(store, "late", time.time()))
    res = store.prune_never_active_keyed_sessions(older_than_days=1)
    assert res == (2, 3) and res.sessions_deleted == 2
    assert store.get_session("a") is None and store.get_session("late") is not None
    assert store.get_session("leased") is not None
    assert set(store.load_gateway_routing_entries(scope="s1")) == {"k-late", "k-leased", "bad"}
    assert store.load_gateway_routing_entries(scope="s2") == {}
    monkeypatch.setattr(never_active, "_after_listing", lambda c: None)
    start = time.time() - 2 * DAY
    with store.engine.begin() as conn:
        conn.exec_driver_sql("INSERT INTO sessions (id, source, session_key, started_at) "
                             "VALUES (?, 'telegram', ?, ?)",
                             [(f"n{i:04d}", f"key{i}", start) for i in range(1500)])
    assert store.prune_never_active_keyed_sessions(older_than_days=1).sessions_deleted == 1500


@pytest.mark.sqlite_only("upstream state.db shapes are SQLite files")
def test_gw22_orphans_of_the_adopted_fixture(legacy_copy):
    """Behaviour 22: on the adopted fixture the discord row is non-adoptable ("no keyed
    predecessor…"), the three telegram ``mix00*`` rows are contested for
    ``20260801_120500_d4e5f6``, the tool row and the branch child are absent."""
    with SessionStore(legacy_copy) as s:
        found = {c.orphan_id: c for c in s.find_orphaned_gateway_sessions()}
    discord = found["20260802_081500_0a0b0c"]
    assert not discord.adoptable and discord.reason.startswith("no keyed predecessor")
    mixed = [c for i, c in found.items() if "_mix00" in i]
    assert len(mixed) == 3 and {c.donor_id for c in mixed} == {"20260801_120500_d4e5f6"}
    assert all(not c.adoptable and "claims this predecessor" in c.reason for c in mixed)
    assert "20260807_104500_sub010" not in found and "20260807_103000_brc009" not in found


def test_gw23_lineage_donor_rules(store):
    """Behaviour 23: a keyed same-source parent makes its orphan adoptable whatever the gap;
    another source gives the lineage reason; ``max_gap_s=-1`` ⇒ ValueError."""
    T = 1_700_000_000.0
    _row(store, "p", session_key="k", started_at=T)
    _row(store, "o", parent_session_id="p", started_at=T + 10 * DAY)
    _msg(store, "o", T + 10 * DAY)
    _row(store, "p2", source="discord", session_key="k2", started_at=T)
    _row(store, "o2", parent_session_id="p2", started_at=T + 1)
    _msg(store, "o2", T + 2)
    found = {c.orphan_id: c for c in store.find_orphaned_gateway_sessions(max_gap_s=0)}
    assert (found["o"].adoptable, found["o"].donor_id, found["o"].evidence) == (
        True, "p", "lineage")
    assert not found["o2"].adoptable and "no gateway identity" in found["o2"].reason
    with pytest.raises(ValueError):
        store.find_orphaned_gateway_sessions(max_gap_s=-1)


def test_gw24_adoption_stamps_and_replays(store):
    """Behaviour 24: adoption stamps the key, fills only NULL tuple columns, keeps the
    parent; an open donor ends ``superseded_by_repair``, a session_reset donor keeps its
    reason; the orphan is listed and recovered; a replay ⇒ True; another source or an
    orphan keyed meanwhile ⇒ False, nothing written."""
    T = 1_700_000_000.0
    _row(store, "donor", session_key="k", chat_id="c", chat_type="group", user_id="u",
         thread_id="7", started_at=T)
    _row(store, "root", source="cli", started_at=T - 10)
    _row(store, "orphan", chat_type="dm", started_at=T + 60, parent_session_id="root")
    _msg(store, "orphan", T + 61)
    assert store.adopt_orphaned_gateway_session("orphan", "donor")
    o, d = store.get_session("orphan"), store.get_session("donor")
    assert (o.session_key, o.chat_id, o.chat_type, o.user_id, o.parent_session_id) == (
        "k", "c", "dm", "u", "root")
    assert d.end_reason == "superseded_by_repair" and d.ended_at is not None
    assert store.adopt_orphaned_gateway_session("orphan", "donor")  # replay
    assert store.find_latest_gateway_session_for_peer(source="telegram",
                                                      session_key="k").id == "orphan"
    _row(store, "d2", session_key="k2", started_at=T, ended_at=T + 1,
         end_reason="session_reset")
    _row(store, "o2", started_at=T + 2)
    assert store.adopt_orphaned_gateway_session("o2", "d2")
    assert store.get_session("d2").end_reason == "session_reset"
    _row(store, "d3", source="discord", session_key="k3", started_at=T)
    _row(store, "o3", started_at=T + 2)
    _row(store, "o4", session_key="mine", started_at=T + 2)
    assert store.adopt_orphaned_gateway_session("o3", "d3") is False
    assert store.adopt_orphaned_gateway_session("o4", "donor") is False
    assert store.get_session("o3").session_key is None
    assert store.get_session("d3").ended_at is None
    assert store.adopt_orphaned_gateway_session("o3", "o3") is False
    assert store.adopt_orphaned_gateway_session("o3", "missing") is False


def test_adoption_without_replay_is_upstreams_answer(store):
    """Issue 33: ``accept_replay=False`` answers as upstream's adoption: the first call adopts
    (True), a repeat finds the orphan keyed and answers False with nothing written (the
    default answers that replay True)."""
    T = 1_700_000_000.0
    _row(store, "donor", session_key="k", chat_id="c", started_at=T)
    _row(store, "orphan", started_at=T + 60)
    assert store.adopt_orphaned_gateway_session("orphan", "donor", accept_replay=False) is True
    before = (store.get_session("orphan"), store.get_session("donor"))
    assert store.adopt_orphaned_gateway_session("orphan", "donor", accept_replay=False) is False
    assert (store.get_session("orphan"), store.get_session("donor")) == before
    assert store.adopt_orphaned_gateway_session("orphan", "donor") is True  # the default
    assert store.adopt_orphaned_gateway_session("orphan", "missing", accept_replay=False) is False
