"""Kanban worker retagging (spec sessions-ext-gateway.md §3.9, acceptance behaviour 40)."""

from __future__ import annotations

import sqlalchemy as sa


def test_gw40_retag_is_exact_gated_and_once(store):
    """Behaviour 40: ``cli`` rows at ``/w/boards``, ``/w/boards/x`` and ``C:\\w\\boards\\x``
    (root ``C:\\w\\boards``) move to kanban; ``/w/boards2``, ``/W/boards/x`` and non-cli rows
    do not; a second call issues no UPDATE; root ``/`` ⇒ 0 and no gate."""
    rows = {"a": ("cli", "/w/boards"), "b": ("cli", "/w/boards/x"), "c": ("cli", "/w/boards2"),
            "d": ("cli", "/W/boards/x"), "e": ("telegram", "/w/boards/x"),
            "f": ("cli", "C:\\w\\boards\\x")}
    for sid, (source, cwd) in rows.items():
        store.create_session(sid, source)
        with store.engine.begin() as conn:
            conn.exec_driver_sql("UPDATE sessions SET cwd = ? WHERE id = ?", (cwd, sid))
    store.append_message("b", "user", "attempt 1")
    assert store.retag_kanban_worker_sessions("/w/boards/") == 2
    assert store.retag_kanban_worker_sessions("C:\\w\\boards") == 1
    assert {sid: store.get_session(sid).source for sid in rows} == {
        "a": "kanban", "b": "kanban", "c": "cli", "d": "cli", "e": "telegram", "f": "kanban"}
    seen: list[str] = []
    sa.event.listen(store.engine, "before_cursor_execute",
                    lambda c, cur, st, p, ctx, many: seen.append(st))
    assert store.retag_kanban_worker_sessions("/w/boards") == 0
    assert not [s for s in seen if s.lstrip().upper().startswith(("UPDATE", "INSERT"))]
    assert store.retag_kanban_worker_sessions("/") == 0
    with store.engine.connect() as conn:
        keys = [r[0] for r in conn.exec_driver_sql(
            "SELECT key FROM state_meta WHERE substr(key, 1, 13) = 'kanban_worker' ORDER BY key")]
    assert keys == ["kanban_worker_source_retagged:/w/boards",
                    "kanban_worker_source_retagged:C:\\w\\boards"]
