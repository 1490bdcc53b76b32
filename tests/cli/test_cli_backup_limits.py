"""Issue 31 item 2: an ``export --all`` backup restores with ``import``, whatever the size of
its sessions; an export never leaves a partial file; the command line sets the export limit.

Real files, ``hermes-data`` in a real process (``run_cli``).
"""

from __future__ import annotations

import json
import sqlite3

import pytest

from hermes_data.sessions.store import SessionStore
from hermes_data.sessions.ui.portability.imports import (DEFAULT_LIMITS, ImportLimits,
                                                         transaction_chunks, validate)

from tests.conftest import run_cli

BIG = 12_000  # above the old per-entry import cap (10,000) and its 5 MiB


@pytest.fixture(scope="module")
def big_store(tmp_path_factory):
    """A store with one session of 12,000 small messages and one small session."""
    path = tmp_path_factory.mktemp("backup") / "src.db"
    with SessionStore(path) as s:
        s.create_session("big", "cli")
        s.append_messages_batch("big", [{"role": "user" if i % 2 else "assistant",
                                         "content": f"message {i} " + "x" * 400}
                                        for i in range(BIG)])
        s.create_session("small", "cli")
        s.append_message("small", "user", "hi")
    return path


def _counts(path) -> tuple[int, int]:
    with sqlite3.connect(path) as c:
        return (c.execute("SELECT COUNT(*) FROM sessions").fetchone()[0],
                c.execute("SELECT COUNT(*) FROM messages WHERE active = 1").fetchone()[0])


def test_export_all_backup_restores_with_import(tmp_path, big_store):
    out, dst = tmp_path / "all.jsonl", tmp_path / "dst.db"
    proc = run_cli("export", "--all", "--url", str(big_store), "-o", str(out))
    assert proc.returncode == 0, proc.stderr  # a backup is not subject to the 20,000 guard…
    docs = [json.loads(line) for line in out.read_text().splitlines()]
    assert [len(d["messages"]) for d in docs] == [BIG, 1]
    # … and it is what the old per-entry caps refused (10,000 messages, 5 MiB)
    assert len(validate(docs)) >= 2
    assert run_cli("upgrade", "--store", "sessions", "--url", str(dst)).returncode == 0
    proc = run_cli("import", str(out), "--url", str(dst), "--json")
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert json.loads(proc.stdout)["sessions"]["imported"] == 2
    assert _counts(dst) == _counts(big_store) == (2, BIG + 1)
    with SessionStore(dst, read_only=True) as s:
        assert s.get_messages("big", limit=1)[0].content.startswith("message 0 ")


def test_export_limit_from_the_command_line(tmp_path, big_store):
    out = tmp_path / "keep.jsonl"
    out.write_text("previous backup\n")
    # --all with a limit refuses and leaves the target as it was, and no temporary file
    proc = run_cli("export", "--all", "--max-messages", "11999", "--url", str(big_store),
                   "-o", str(out))
    assert proc.returncode == 2 and "more than 11999" in proc.stderr, proc.stderr
    assert out.read_text() == "previous backup\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.jsonl"]
    new = tmp_path / "new.jsonl"
    proc = run_cli("export", "--all", "--max-messages", "5", "--url", str(big_store),
                   "-o", str(new))
    assert proc.returncode == 2 and not new.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.jsonl"]
    proc = run_cli("export", "--all", "--max-messages", str(BIG), "--url", str(big_store),
                   "-o", str(new))
    assert proc.returncode == 0 and len(new.read_text().splitlines()) == 2
    assert (new.stat().st_mode & 0o777) == 0o600
    # one session: the configured guard (20,000) by default, --max-messages N / 0 to change it
    doc = tmp_path / "big.json"
    proc = run_cli("export", "big", "--format", "json", "--max-messages", "100",
                   "--url", str(big_store), "-o", str(doc))
    assert proc.returncode == 2 and "more than 100" in proc.stderr and not doc.exists()
    proc = run_cli("export", "big", "--format", "json", "--max-messages", "0",
                   "--url", str(big_store), "-o", str(doc))
    assert proc.returncode == 0 and len(json.loads(doc.read_text())["messages"]) == BIG
    lines = tmp_path / "big.jsonl"
    proc = run_cli("export", "big", "--max-messages", "100", "--url", str(big_store),
                   "-o", str(lines))
    assert proc.returncode == 2 and not lines.exists()


def test_import_caps_on_request_and_all_or_nothing(tmp_path):
    payload = tmp_path / "p.jsonl"
    payload.write_text("\n".join(json.dumps({"id": f"s{i}", "messages": [
        {"role": "user", "content": "y" * 100}] * (3 if i == 1 else 1)}) for i in range(3)))
    dst = tmp_path / "dst.db"
    assert run_cli("upgrade", "--store", "sessions", "--url", str(dst)).returncode == 0
    proc = run_cli("import", str(payload), "--url", str(dst), "--max-messages", "2")
    assert proc.returncode == 1 and ("entry 1: messages exceeds the per-session import limit: "
                                     "3 messages; the limit is 2") in proc.stdout
    assert "nothing imported" in proc.stdout and _counts(dst) == (0, 0)
    proc = run_cli("import", str(payload), "--url", str(dst), "--max-entry-bytes", "200")
    assert proc.returncode == 1 and _counts(dst) == (0, 0)
    assert "entry 1: session exceeds the import size limit: entry is" in proc.stdout
    proc = run_cli("import", str(payload), "--url", str(dst), "--max-messages", "3")
    assert proc.returncode == 0 and _counts(dst) == (3, 5)


def test_transactions_are_packed_within_the_library_caps():
    msgs = [{"role": "user", "content": "z"}]
    payload = ([{"id": f"a{i}", "messages": msgs * 200} for i in range(300)]
               + [{"id": "huge", "messages": msgs * 60_000}] + [{"id": "b", "messages": msgs}])
    chunks = transaction_chunks(payload)
    assert [len(c) for c in chunks] == [250, 50, 1, 1]
    assert sum(chunks, []) == payload
    total = ImportLimits(messages_each=0, bytes_each=0)
    assert all(not validate(c, total) for c in chunks if len(c) > 1)
    assert DEFAULT_LIMITS.messages_each == 10_000  # the library call keeps upstream's caps
