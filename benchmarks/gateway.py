"""Gateway routing and peer recovery against plain sqlite3 running the same statements
(issue 20 acceptance 5: >= 0.8x).

    python benchmarks/gateway.py [--journal wal|delete] [--sessions 100000] [--repeat 5]

One file holds --sessions telegram sessions (one in five with messages, keyed, peer tuples
over 1,000 chats) and as many routing entries spread over 100 scopes, without ANALYZE (as
most files are). Lines:

* ``save``: ``save_gateway_routing_entry`` (upsert, own transaction) vs ``BEGIN IMMEDIATE``
  + the store's own ``ROUTING_UPSERT`` text + ``COMMIT`` on a sqlite3 connection, plus — as
  upstream's ``_execute_write`` does after every 50th successful write transaction of a
  handle — a ``PRAGMA wal_checkpoint(PASSIVE)`` (:mod:`upstream_writes`; hermes-data's
  writer checkpoints on the same cadence, so leaving it out charged one side only);
* ``load``: ``load_gateway_routing_entries`` of one 1,000-entry scope vs ``ROUTING_LOAD``
  ``fetchall`` and upstream's ``{r["session_key"]: r["entry_json"] for r in rows}``;
* ``find key`` / ``find tuple``: ``find_latest_gateway_session_for_peer`` by an existing
  key, and by an unknown key falling back to the peer tuple, vs the same ``BY_KEY`` /
  ``BY_KEY`` + ``by_tuple(…)`` texts, ``fetchone``, no transaction around them, and
  upstream's ``_session_row_dict`` of the row found.

The baseline connection reads through ``sqlite3.Row`` as upstream's connections do (seed 002
sets ``row_factory = sqlite3.Row`` on every connection) and shapes its results as upstream's
methods return them (a dict per session row, a dict of entries): the caller of either side
gets a usable result, not a bare tuple.

Sides alternate per repetition; medians of --repeat; ratio = baseline time / ours (>= 0.8
is the target). Same journal mode and ``synchronous`` (printed); each side on its own copy of
the built file: on one shared WAL the side that commits first after the other's PASSIVE
checkpoint pays the WAL restart, so the phase of the two write counters decided who paid.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hermes_data.engine import SqliteSettings  # noqa: E402
from hermes_data.sessions.gateway.sql import for_dialect as gateway_sql  # noqa: E402
from hermes_data.sessions.gateway.peers_sql import for_dialect as peer_sql  # noqa: E402
from hermes_data.sessions.gateway.peers_sql import tuple_params  # noqa: E402
from hermes_data.sessions.store import SessionStore  # noqa: E402

from upstream_writes import UpstreamWriter  # noqa: E402  (same directory)

T0 = 1_700_000_000.0


def _session_row_dict(row: sqlite3.Row) -> dict:
    """Upstream's shaping of a session row (seed 002 ``_session_row_dict``)."""
    data = dict(row)
    if "_system_prompt_resolved" in data:
        resolved = data.pop("_system_prompt_resolved")
        if "system_prompt" in data:
            data["system_prompt"] = resolved
    return data
SCOPES = 100
CHATS = 1000


def build(path: Path, journal: str, n: int) -> None:
    with SessionStore(path, settings=SqliteSettings(journal_mode=journal)):
        pass
    con = sqlite3.connect(path)
    con.executemany(
        "INSERT INTO sessions (id, source, session_key, user_id, chat_id, chat_type, "
        "started_at, message_count) VALUES (?, 'telegram', ?, ?, ?, 'dm', ?, ?)",
        [(f"s{i:06d}", f"key{i}", f"u{i % CHATS}", f"c{i % CHATS}", T0 + i,
          1 if i % 5 == 0 else 0) for i in range(n)])
    con.executemany("INSERT INTO messages (session_id, role, content, timestamp) VALUES "
                    "(?, 'user', 'hi', ?)", [(f"s{i:06d}", T0 + i) for i in range(0, n, 5)])
    con.executemany("INSERT INTO gateway_routing (scope, session_key, entry_json, updated_at) "
                    "VALUES (?, ?, ?, ?)",
                    [(f"scope{i % SCOPES}", f"key{i}", f'{{"session_id": "s{i:06d}"}}', T0)
                     for i in range(n)])
    con.commit()
    con.close()


def timed(fn, calls) -> float:
    t = time.perf_counter()
    for args in calls:
        fn(*args)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--journal", default="wal", choices=("wal", "delete"))
    ap.add_argument("--sessions", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    g, p = gateway_sql("sqlite"), peer_sql("sqlite")
    rnd = random.Random(7)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "state.db"
        t = time.perf_counter()
        build(path, args.journal, args.sessions)
        print(f"built {args.sessions:,} sessions/routing entries in {time.perf_counter() - t:.1f}s")
        base_path = Path(tmp) / "base.db"  # the baseline's own identical copy (no shared WAL)
        shutil.copyfile(path, base_path)
        store = SessionStore(path, settings=SqliteSettings(journal_mode=args.journal))
        with store.engine.connect() as c:
            sync = c.exec_driver_sql("PRAGMA synchronous").scalar()
        con = sqlite3.connect(base_path, isolation_level=None)
        con.row_factory = sqlite3.Row  # as upstream's connections
        con.execute(f"PRAGMA synchronous={sync}")
        con.execute("PRAGMA busy_timeout=5000")
        print(f"journal_mode={store.journal_mode} synchronous={sync} "
              f"sqlite {sqlite3.sqlite_version}")

        writer = UpstreamWriter(con)

        def base_save(key, scope, entry):
            con.execute("BEGIN IMMEDIATE")
            con.execute(g.ROUTING_UPSERT, (scope, key, entry, time.time()))
            writer.commit()

        def base_load(scope):
            rows = con.execute(g.ROUTING_LOAD, (scope,)).fetchall()
            return {r["session_key"]: r["entry_json"] for r in rows}

        def base_find(key, user, chat):
            row = con.execute(p.BY_KEY, (key, "telegram")).fetchone()
            if row is None:
                present, params = tuple_params("telegram", (user, chat, "dm", ""), None)
                row = con.execute(p.by_tuple(present, False), params).fetchone()
            return None if row is None else _session_row_dict(row)

        def ours_save(key, scope, entry):
            store.save_gateway_routing_entry(key, entry, scope=scope)

        def ours_load(scope):
            return store.load_gateway_routing_entries(scope=scope)

        def ours_find(key, user, chat):
            return store.find_latest_gateway_session_for_peer(
                source="telegram", session_key=key, user_id=user, chat_id=chat,
                chat_type="dm")

        n = args.sessions
        lines = {
            "save (per call)": (base_save, ours_save, lambda: [
                (f"key{rnd.randrange(n)}", f"scope{rnd.randrange(SCOPES)}",
                 f'{{"session_id": "x{rnd.random()}"}}') for _ in range(300)]),
            "load 1,000-entry scope": (base_load, ours_load, lambda: [
                (f"scope{rnd.randrange(SCOPES)}",) for _ in range(30)]),
            "find by key": (base_find, ours_find, lambda: [
                (f"key{rnd.randrange(n)}", "u1", "c1") for _ in range(1000)]),
            "find by tuple fallback": (base_find, ours_find, lambda: [
                (f"nokey{i}", f"u{k}", f"c{k}") for i, k in
                ((i, rnd.randrange(CHATS)) for i in range(200))]),
        }
        assert ours_find("key5", "u5", "c5").id == base_find("key5", "u5", "c5")["id"]
        assert ours_find("nokey", "u5", "c5").id == base_find("nokey", "u5", "c5")["id"]
        assert ours_load("scope3") == base_load("scope3")
        for name, (base, ours, make) in lines.items():
            b_times, o_times = [], []
            for rep in range(args.repeat):
                calls = make()
                sides = [(base, b_times), (ours, o_times)]
                for fn, acc in (sides if rep % 2 == 0 else sides[::-1]):
                    acc.append(timed(fn, calls) / len(calls))
            b, o = statistics.median(b_times), statistics.median(o_times)
            print(f"{name:24s} sqlite3 {b * 1e6:9.1f} us  hermes-data {o * 1e6:9.1f} us  "
                  f"ratio {b / o:.2f}x")
        con.close()
        store.close()


if __name__ == "__main__":
    main()
