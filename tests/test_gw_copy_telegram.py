"""Copying a session store whose Telegram DM-topic opt-in ran (gateway §2.5) to PostgreSQL
and back: the bindings arrive in the revision-created tables and come back."""

from __future__ import annotations

import sqlite3

import sqlalchemy as sa

from hermes_data.copy.transfer import copy_store
from hermes_data.sessions.store import SessionStore


def test_opted_in_telegram_tables_round_trip_through_postgresql(tmp_path, pg_url):
    src = tmp_path / "state.db"
    with SessionStore(src) as s:
        s.create_session("s1", "telegram")
        s.enable_telegram_topic_mode(chat_id="c", user_id="u")
        s.bind_telegram_topic(chat_id="c", thread_id="7", user_id="u", session_key="k",
                              session_id="s1")
    assert copy_store(src, pg_url, store="sessions").verified
    with sa.create_engine(pg_url).connect() as conn:
        assert conn.exec_driver_sql("SELECT session_id, thread_id FROM "
                                    "telegram_dm_topic_bindings").fetchall() == [("s1", "7")]
    back = tmp_path / "back" / "state.db"
    assert copy_store(pg_url, back, store="sessions").verified
    con = sqlite3.connect(back)
    try:
        assert con.execute("SELECT session_id, thread_id, profile_name FROM "
                           "telegram_dm_topic_bindings").fetchall() == [("s1", "7", "default")]
    finally:
        con.close()
