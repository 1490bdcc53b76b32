"""``hermes-data export --format/--lineage/--all`` and ``hermes-data import`` (issue 19
acceptance 4)."""

from __future__ import annotations

import json

from hermes_data.sessions.store import SessionStore

from tests.conftest import run_cli


def test_export_documents_and_import_round_trip(tmp_path):
    src, dst = tmp_path / "a.db", tmp_path / "b.db"
    with SessionStore(src) as s:
        s.create_session("x", "cli")
        s.append_message("x", "user", "hello <b>")
    proc = run_cli("export", "x", "--url", str(src), "--format", "html")
    assert proc.returncode == 0 and proc.stdout.startswith("<!DOCTYPE html>")
    assert "hello &lt;b&gt;" in proc.stdout and "exported x as html" in proc.stderr
    out = tmp_path / "all.jsonl"
    proc = run_cli("export", "--all", "--url", str(src), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == ["x"]
    proc = run_cli("import", str(out), "--url", str(dst), "--dry-run")
    assert proc.returncode == 0 and "nothing written" in proc.stdout and not dst.exists()
    # import writes into an existing store only (issue 31): `upgrade` creates it
    assert run_cli("import", str(out), "--url", str(dst)).returncode == 2 and not dst.exists()
    assert run_cli("upgrade", "--store", "sessions", "--url", str(dst)).returncode == 0
    proc = run_cli("import", str(out), "--url", str(dst), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["sessions"]["imported"] == 1
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a"}\n{oops\n')
    proc = run_cli("import", str(bad), "--url", str(dst))
    assert proc.returncode == 2 and "line 2" in proc.stderr
