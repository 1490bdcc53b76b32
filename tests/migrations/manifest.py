"""The fixture manifests' canonical dump, recomputed over an adopted database.

Algorithm (from the manifest's ``canonical_dump``): per table, columns sorted by name; each row
is a compact JSON array with NULL → null, INTEGER → number, TEXT → string, REAL →
``["r", repr(float)]``, BLOB → ``["b", hex]``; rows sorted as strings; the table digest is
sha256 of ``"table:" + name + "\\ncols:" + json(cols) + "\\n" + "\\n".join(rows)``.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

from ..conftest import FIXTURES

TELEMETRY_MANIFEST = FIXTURES / "legacy-telemetry" / "manifest.json"


def load_manifest(path: Path = TELEMETRY_MANIFEST) -> dict:
    return json.loads(path.read_text())


def _value(v):
    if isinstance(v, float):
        return ["r", repr(v)]
    if isinstance(v, bytes):
        return ["b", v.hex()]
    return v


def table_digest(con: sqlite3.Connection, table: str, columns: list[str]) -> tuple[str, int]:
    """sha256 and row count of ``table`` projected onto ``columns`` (the manifest's list)."""
    cols = sorted(columns)
    select = ", ".join(f'"{c}"' for c in cols)
    rows = sorted(
        json.dumps([_value(v) for v in row], ensure_ascii=False, separators=(",", ":"))
        for row in con.execute(f'SELECT {select} FROM "{table}"')
    )
    text = f"table:{table}\ncols:{json.dumps(cols)}\n" + "\n".join(rows)
    return hashlib.sha256(text.encode("utf-8")).hexdigest(), len(rows)


def fixture_entries(kind: str | None = None) -> list[dict]:
    return [f for f in load_manifest()["fixtures"] if kind is None or f["kind"] == kind]


#: Tables whose rows adoption may change: the ledger gains rows; v17 deletes by its rule.
MUTABLE_BY_RULE = {"schema_version", "known_free_models", "free_paid_transitions"}


def v17_survivors(con: sqlite3.Connection) -> tuple[set, set]:
    """(known_free_models keys, free_paid_transitions keys) that the v17 rule keeps, computed
    in Python over an *unadopted* file — independent of the SQL in the revision."""
    def exists(table: str) -> bool:
        return con.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (table,)).fetchone() is not None

    if not exists("known_free_models"):
        return set(), set()
    free = [tuple(r) for r in con.execute("SELECT model, provider FROM known_free_models")]
    evidence = {
        (m, p) for m, p, cost, tin, tout in con.execute(
            "SELECT model, provider, cost_usd, tokens_in, tokens_out FROM llm_calls")
        if cost == 0 and (tin or 0) + (tout or 0) > 0
    }
    doomed = {(m, p) for m, p in free if p != "" and (m, p) not in evidence}
    kept_free = set(free) - doomed
    transitions = {tuple(r) for r in con.execute("SELECT model, provider FROM free_paid_transitions")} \
        if exists("free_paid_transitions") else set()
    return kept_free, transitions - doomed


def assert_adopted_losslessly(adopted: Path, entry: dict, original: Path | None = None) -> None:
    """Every check of issue 3 (3): checksums of pre-existing rows, ledger 1..18 once each,
    the v17 repair deleting exactly what its rule selects (when ``original`` is given)."""
    con = sqlite3.connect(adopted)
    try:
        for table, info in entry["tables"].items():
            cols = [c["name"] for c in info["columns"]]
            digest, count = table_digest(con, table, cols)
            if table not in MUTABLE_BY_RULE:
                assert digest == info["sha256"], f"{entry['file']}: rows of {table} changed"
                assert count == info["rows"]
        versions = [r[0] for r in con.execute("SELECT version FROM schema_version ORDER BY version")]
        assert versions == list(range(1, 19)), f"{entry['file']}: ledger {versions}"
        old_rows = {r for r in con.execute(
            "SELECT version, applied_at FROM schema_version WHERE version IN (%s)"
            % ",".join(str(v) for v in entry["ledger_versions"]))}
        assert len(old_rows) == len(entry["ledger_versions"])
        if original is not None:
            ocon = sqlite3.connect(f"file:{original}?mode=ro", uri=True)
            try:
                kept_free, kept_trans = v17_survivors(ocon)
                old_ledger = set(ocon.execute("SELECT version, applied_at FROM schema_version"))
            finally:
                ocon.close()
            assert old_rows == old_ledger, "pre-existing ledger rows were rewritten"
            assert {tuple(r) for r in con.execute("SELECT model, provider FROM known_free_models")} == kept_free
            assert {tuple(r) for r in con.execute("SELECT model, provider FROM free_paid_transitions")} == kept_trans
    finally:
        con.close()
