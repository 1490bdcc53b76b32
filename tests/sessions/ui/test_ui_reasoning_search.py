"""``search_messages(include_reasoning=True)`` (spec sessions-ext-ui.md §4.9; acceptance
behaviour 24 of §6)."""

from __future__ import annotations

import re

from sqlalchemy import event


def test_ab24_reasoning_route(store):
    """Behaviour 24."""
    store.create_session("s", "cli")
    a = store.append_message("s", "assistant", "plain", reasoning="alpha1 thinking")
    b = store.append_message("s", "assistant", "plain", reasoning_content="beta2 inside")
    c = store.append_message("s", "assistant", "plain",
                             reasoning_details=[{"type": "summary", "items": ["x", "gamma3"]}])
    d = store.append_message("s", "assistant", "plain", reasoning_details="delta4 raw text")
    store.append_messages_batch("s", [{"role": "user", "content": "u",
                                       "reasoning": "alpha1 user"}])
    pad = "p" * 300
    e = store.append_message("s", "assistant", "x", reasoning=pad + " epsilon5 bar " + pad)
    f = store.append_message("s", "assistant", "x", reasoning="epsilon5 foo 100% done")
    for term, want in (("alpha1", [a]), ("beta2", [b]), ("gamma3", [c]), ("delta4", [d])):
        assert [h.id for h in store.search_messages(term, include_reasoning=True)] == want
        assert store.search_messages(term) == []
    hit = store.search_messages("epsilon5 bar", include_reasoning=True)
    assert [h.id for h in hit] == [e] and len(hit[0].snippet) <= 120
    assert "epsilon5" in hit[0].snippet
    assert [h.id for h in store.search_messages("epsilon5 NOT bar", include_reasoning=True)] == [f]
    assert [h.id for h in store.search_messages("100%", include_reasoning=True)] == [f]
    assert store.search_messages("10%0", include_reasoning=True) == []
    seen: list[str] = []
    event.listen(store.engine, "before_cursor_execute",
                 lambda conn, cur, st, *x: seen.append(st))
    store.search_messages("alpha1", include_reasoning=True, fields=["id", "snippet"])
    # (the Core page names the alias ``messages AS m``, issue 32)
    selects = [re.split(r" FROM messages (?:AS )?m\b", st)[0] for st in seen
               if re.search(r"FROM messages (AS )?m\b", st)]
    assert selects
    for head in selects:  # the content appears only inside the snippet window's functions
        assert head.replace("(m.content", "").replace("lower(m.content)", "").count(
            "m.content") == 0, head
