"""Issue 31 item 8: a telemetry call record whose identifiers hold a lone surrogate or NUL
is refused with the typed error before anything is written (both backends, both writers).
Hook payload text keeps its coercion to U+FFFD (tests/telemetry/test_errors.py)."""

from __future__ import annotations

import pytest

from hermes_data.errors import UnstorableValueError
from hermes_data.telemetry import writes as W

from .conftest import NOW, sql


def _rows(store) -> tuple:
    return tuple(sql(store, f"SELECT COUNT(*) FROM {t}")[0][0]
                 for t in ("llm_calls", "tool_calls", "runs"))


@pytest.mark.parametrize("bad", ["\ud800", "a\x00b"])
def test_call_records_refuse_unstorable_text(store, bad):
    W.start_run(store, "s1", model="m")
    W.record_llm_call(store, "s1", NOW, "m", "p", 1, 1, 0.1, 1)
    W.record_tool_call(store, "s1", NOW, "t")
    before = _rows(store)
    calls = {
        "model": lambda: W.record_llm_call(store, "s1", NOW, bad, "p", 1, 1, 0.1, 1),
        "provider": lambda: W.record_llm_call(store, "s1", NOW, "m", bad),
        "session_id": lambda: W.record_llm_call(store, bad, NOW, "m", "p"),
        "turn_id": lambda: W.record_llm_call(store, "s1", NOW, "m", "p", turn_id=bad),
        "sender_id": lambda: W.record_llm_call(store, "s1", NOW, "m", "p", sender_id=bad),
        "tool_name": lambda: W.record_tool_call(store, "s1", NOW, bad),
        "tool_call_id": lambda: W.record_tool_call(store, "s1", NOW, "t", tool_call_id=bad),
        "session_id ": lambda: W.start_run(store, bad),
        "status": lambda: W.end_run(store, "s1", bad),
    }
    for argument, call in calls.items():
        with pytest.raises(UnstorableValueError) as info:
            call()
        assert info.value.argument == argument.strip() and info.value.value == bad
        assert isinstance(info.value, ValueError)
        assert _rows(store) == before, argument


def test_the_buffered_writer_refuses_at_the_call(store):
    from hermes_data.telemetry.buffered import BufferedWriter

    writer = BufferedWriter(store)
    try:
        with pytest.raises(UnstorableValueError):
            writer.record_llm_call("s1", NOW, "\ud800", "p")
        with pytest.raises(UnstorableValueError):
            writer.record_tool_call("s1", NOW, "a\x00b")
    finally:
        writer.close()
    assert _rows(store) == (0, 0, 0)
