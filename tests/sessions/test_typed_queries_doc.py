"""docs/sessions-guide.md "Typed queries over the schema": the guide's example, run as written
on both backends (issue 32, item 5), so the example stays true."""

from __future__ import annotations

import re
from pathlib import Path

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "sessions-guide.md"


def _example() -> str:
    text = GUIDE.read_text(encoding="utf-8")
    section = text.split("## Typed queries over the schema", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_guides_typed_query_runs_on_the_store(session_store):
    namespace: dict = {}
    exec(compile(_example(), str(GUIDE), "exec"), namespace)
    report = namespace["activity_by_source"]
    s = session_store
    a = s.create_session("a1", "cli")
    s.append_messages_batch(a, [{"role": "user", "content": "one"},
                                {"role": "assistant", "content": "two"},
                                {"role": "user", "content": "again"},
                                {"role": "assistant", "content": "four"}])
    ids = [m.id for m in s.get_messages(a)]
    b = s.create_session("b1", "telegram")
    s.append_message(b, "user", "three")
    s.create_session("c1", "cli")  # no messages: counted, with zero messages
    # Rewinding to the second user row hides it and the row after it: the report counts
    # visible messages only.
    s.rewind_to_message(a, ids[2])
    assert s.message_count(a) == 2 and s.message_count(a, include_inactive=True) == 4
    assert report(s, since=0.0) == {"cli": (2, 2), "telegram": (1, 1)}
    assert report(s, since=4_000_000_000.0) == {}
