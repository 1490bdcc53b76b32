"""Storage spec §4 item 29: no search route selects ``m.content`` whole — a hit carries a
snippet window, never a multi-MB body (every route: words, phrase, literal, trigram, the
CJK-bigram index, LIKE, tool rows, the backfill gap supplement). Statement trace of a real
SQLite file; the checkpoint half of the item is ``tests/test_checkpoint_discipline.py``."""

from __future__ import annotations

import re

from hermes_data.sessions.store import SessionStore

from tests.sessions.storage.test_open_path import dbapi_trace


def select_items(statement: str) -> list[list[str]]:
    """The top-level result columns of every SELECT in ``statement`` (sub-selects too)."""
    out = []
    for m in re.finditer(r"\bSELECT\b", statement, re.I):
        depth, start, items = 0, m.end(), []
        i = start
        while i < len(statement):
            ch = statement[i]
            if ch == "(":
                depth += 1
            elif ch == ")":
                if depth == 0:
                    break
                depth -= 1
            elif depth == 0 and ch == ",":
                items.append(statement[start:i].strip())
                start = i + 1
            elif depth == 0 and re.match(r"\bFROM\b", statement[i:i + 5], re.I) \
                    and not statement[i - 1].isalnum():
                break
            i += 1
        items.append(statement[start:i].strip())
        out.append(items)
    return out


def _whole_content(item: str) -> bool:
    bare = re.sub(r"\s+AS\s+\w+$", "", item, flags=re.I).strip()
    return bare.lower() in ("m.content", "content", "messages.content")


def test_select_items_parser():
    items = select_items("SELECT m.id, substr(m.content, 1, 3), m.content AS c FROM messages m "
                         "WHERE m.id IN (SELECT rowid FROM t)")
    assert items == [["m.id", "substr(m.content, 1, 3)", "m.content AS c"], ["rowid"]]
    assert [i for i in items[0] if _whole_content(i)] == ["m.content AS c"]


def test_no_search_route_selects_the_whole_content(tmp_path):
    path = tmp_path / "state.db"
    with SessionStore(path) as s:
        s.create_session("a", "cli")
        s.create_session("c", "cron")
        s.append_messages_batch("a", [
            {"role": "user", "content": "deploy the gateway tonight 🚀 ~/.config/x"},
            {"role": "assistant", "content": "我们明天去广西桂林旅游 广"},
            {"role": "tool", "content": "100% done " + "x" * 9000, "tool_name": "terminal"},
            {"role": "user", "content": "café résumé what? C# x->y"},
        ])
        s.append_message("c", "user", "cron nightly 广西桂林")
        # A pending backfill window: the gap supplement runs on the word route.
        s.backend.write(lambda tx: tx.exec_driver_sql(
            "INSERT INTO state_meta(key, value) VALUES ('fts_rebuild_high_water', '4'), "
            "('fts_rebuild_progress', '2')"))
    queries = [("gateway", {}), ('"deploy the"', {}), ("~/.config", {}), ("🚀", {}),
               ("C#", {}), ("广西桂林", {}), ("广", {}), ("广西桂林", {"source_filter": ["cron"]}),
               ("100%", {"role_filter": ["tool"]}), ("gate", {}), ("cafe", {}),
               ("deploy NOT gateway", {}), ("what?", {"sort": "oldest"}),
               ("gateway", {"fields": ["id", "context"]})]
    with dbapi_trace() as seen:  # connections opened from here on are traced
        with SessionStore(path) as s:
            routes = {h.route for query, kw in queries for h in s.search_messages(query, **kw)}
    assert {"fts", "trigram", "bigram", "like"} <= routes, routes
    selects = [st for st in seen if st.lstrip().upper().startswith(("SELECT", "WITH"))]
    assert len(selects) >= len(queries)
    offenders = [(st, item) for st in selects for items in select_items(st)
                 for item in items if _whole_content(item)]
    assert offenders == []
