"""The transcript read path's row building (issue 14): ``message_rows`` fills each
``MessageRow``'s ``__dict__`` directly instead of running the frozen dataclass's generated
``__init__``. The rows must be indistinguishable from constructor-built ones — values,
equality, hash, ``repr``, ``asdict``/``to_dict``, immutability — for every stored value, and
the export writes exactly the lines it wrote with ``asdict``."""

from __future__ import annotations

import dataclasses
import io
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hermes_data.cli.maintenance import write_jsonl
from hermes_data.sessions.core import encoding as enc
from hermes_data.sessions.core.messages import message_rows
from hermes_data.sessions.rows import MESSAGE_ROW_FIELDS, MessageRow, new_message_row
from hermes_data.sessions.sql.core import MESSAGE_COLS


def _reference(r, dialect: str) -> MessageRow:
    """The constructor-built row (the decoding of spec §6.1, field by field)."""
    return MessageRow(
        id=r[0], session_id=r[1], role=r[2], content=enc.decode_content(r[3], dialect),
        tool_call_id=r[4], tool_calls=enc.decode_tool_calls(r[5]), tool_name=r[6],
        timestamp=r[7], token_count=r[8], finish_reason=r[9], reasoning=r[10],
        reasoning_content=r[11], reasoning_details=r[12], codex_reasoning_items=r[13],
        codex_message_items=r[14], platform_message_id=r[15], observed=r[16] or 0,
        compressed_summary=bool(r[17]), effect_disposition=r[18], active=bool(r[19]),
        compacted=bool(r[20]), api_content=r[21], display_kind=r[22],
        display_metadata=enc.decode_display_metadata(r[23]))


_TEXT = st.one_of(st.none(), st.text(max_size=20))
_JSONISH = st.one_of(st.none(), st.sampled_from(
    ['[{"id": "1"}]', '{"a": 1}', '"{\\"a\\": 2}"', "not json", "[]", "3"]), st.text(max_size=8))
_CONTENT = st.one_of(
    _TEXT, st.binary(max_size=8), st.integers(), st.floats(allow_nan=False),
    st.sampled_from(["\x00json:[{\"type\": \"text\"}]", "\x00json:broken",
                     "\ufdd0json:{\"a\": 1}", "\ufdd0json:\"x\\u0000y\""]))
_FLAG = st.one_of(st.none(), st.integers(min_value=0, max_value=2))
_ROW = st.tuples(
    st.integers(min_value=1), st.text(min_size=1, max_size=5), st.sampled_from(["user", "tool"]),
    _CONTENT, _TEXT, _JSONISH, _TEXT, st.floats(allow_nan=False), st.one_of(st.none(), st.integers()),
    _TEXT, _TEXT, _TEXT, _TEXT, _TEXT, _TEXT, _TEXT, _FLAG, _FLAG, _TEXT, _FLAG, _FLAG, _TEXT,
    _TEXT, _JSONISH)


@settings(max_examples=300, deadline=None)
@given(row=_ROW, dialect=st.sampled_from(["sqlite", "postgresql"]))
def test_built_rows_are_constructor_rows(row, dialect):
    assert len(row) == len(MESSAGE_COLS) == len(MESSAGE_ROW_FIELDS)
    (got,) = message_rows([row], dialect)
    want = _reference(row, dialect)
    assert got == want and want == got
    assert repr(got) == repr(want)
    assert dataclasses.asdict(got) == dataclasses.asdict(want) == got.to_dict()
    assert list(got.to_dict()) == list(MESSAGE_ROW_FIELDS)
    if _hashable(want):  # content/tool_calls lists make a row unhashable either way
        assert hash(got) == hash(want)
    else:
        assert not _hashable(got)
    assert type(got) is MessageRow and dataclasses.is_dataclass(got)


def _hashable(row: MessageRow) -> bool:
    try:
        hash(row)
    except TypeError:
        return False
    return True


def test_built_rows_stay_frozen():
    row = new_message_row([None] * len(MESSAGE_ROW_FIELDS))
    with pytest.raises(dataclasses.FrozenInstanceError):
        row.role = "user"  # type: ignore[misc]
    assert dataclasses.replace(row, role="user").role == "user"


def test_to_dict_shares_no_state_with_the_row():
    (row,) = message_rows([(1, "s", "user", "\x00json:[{\"t\": 1}]", None, '[{"id": "1"}]',
                            None, 1.0, None, None, None, None, None, None, None, None, 0, 1,
                            None, 1, 0, None, None, '{"k": 1}')], "sqlite")
    d = row.to_dict()
    d["role"] = "changed"
    assert row.role == "user"
    assert d["content"] == [{"t": 1}] and d["compressed_summary"] is True


def test_export_lines_are_the_asdict_lines(store):
    store.create_session("s", "cli")
    store.append_messages_batch("s", [
        {"role": "user", "content": [{"type": "text", "text": "héllo"}], "display_metadata": {"a": 1}},
        {"role": "assistant", "content": "ok \u2603", "tool_calls": [{"id": "x"}],
         "_compressed_summary": True},
        {"role": "tool", "content": None, "tool_name": "terminal"},
    ] * 7)
    out = io.StringIO()
    seen: list[int] = []
    assert write_jsonl(store, "s", out, page_size=4, progress=seen.append) == 21
    assert seen == [4, 8, 12, 16, 20, 21]
    want = "".join(json.dumps(dataclasses.asdict(m), ensure_ascii=False, default=str) + "\n"
                   for m in store.get_messages("s"))
    assert out.getvalue() == want
