"""Transcript diversion to ``sessions/<id>.jsonl`` (docs/sessions-storage.md §3.11; issue 33:
upstream's ``divert_session_transcript_jsonl``)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from hermes_data.config import hermes_home
from hermes_data.sessions.storage.diversion import divert_session_transcript_jsonl


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_a_stored_transcript_diverts_and_reads_back(store):
    """What a live process holds (the store's own export of a turn) lands as one JSON line per
    message under ``$HERMES_HOME/sessions``, appended, and reads back equal — both backends."""
    store.create_session("20260808_090000_div001", "telegram")
    store.append_message("20260808_090000_div001", "user", "hello ✓")
    store.append_message("20260808_090000_div001", "assistant", "hi",
                         tool_calls=[{"id": "c1", "type": "function",
                                      "function": {"name": "f", "arguments": "{}"}}])
    doc = store.export_session("20260808_090000_div001").to_json()
    path = divert_session_transcript_jsonl("  20260808_090000_div001 ", doc["messages"])
    assert path == hermes_home() / "sessions" / "20260808_090000_div001.jsonl"
    assert _lines(path) == json.loads(json.dumps(doc["messages"], default=str))
    again = divert_session_transcript_jsonl("20260808_090000_div001",
                                            [{"role": "user", "content": "more"}])
    assert again == path and len(_lines(path)) == 3  # appended, never rewritten
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


def test_shapes_and_nothing_to_write(tmp_path):
    base = tmp_path / "s"
    assert divert_session_transcript_jsonl("", [{"role": "user"}], sessions_dir=base) is None
    assert divert_session_transcript_jsonl(None, [{"role": "user"}], sessions_dir=base) is None
    assert divert_session_transcript_jsonl("   ", [{"role": "user"}], sessions_dir=base) is None
    assert divert_session_transcript_jsonl("s1", [], sessions_dir=base) is None
    assert divert_session_transcript_jsonl("s1", None, sessions_dir=base) is None
    assert not base.exists()  # nothing created for nothing to write
    path = divert_session_transcript_jsonl(
        "s1", [{"role": "user", "content": "a", "at": 1.5, "blob": b"x"}, None, "plain", 7,
               {"role": "user", "content": "lone \ud800 surrogate"}], sessions_dir=base)
    assert path == base / "s1.jsonl"
    assert _lines(path) == [{"role": "user", "content": "a", "at": 1.5, "blob": "b'x'"},
                            {"content": "plain"}, {"content": "7"},
                            {"role": "user", "content": "lone \ud800 surrogate"}]


@pytest.mark.parametrize("sid", ["../escape", "a/b", "a\\b", "..", ".", "C:evil", "nul\x00x"])
def test_an_id_naming_another_directory_is_refused(tmp_path, sid):
    base = tmp_path / "s"
    with pytest.raises(ValueError, match="cannot name a transcript file"):
        divert_session_transcript_jsonl(sid, [{"role": "user"}], sessions_dir=base)
    assert not base.exists() and not (tmp_path / "escape.jsonl").exists()


def test_a_planted_link_is_not_followed(tmp_path):
    base = tmp_path / "s"
    base.mkdir()
    target = tmp_path / "elsewhere.txt"
    target.write_text("keep\n")
    os.symlink(target, base / "s1.jsonl")
    with pytest.raises(OSError):
        divert_session_transcript_jsonl("s1", [{"role": "user"}], sessions_dir=base)
    assert target.read_text() == "keep\n"
