"""What upstream's write path adds after every write transaction a baseline sends.

Upstream's ``SessionDB._execute_write`` (seed 002) counts the successful write transactions
of its handle and, after every 50th (``_CHECKPOINT_EVERY_N_WRITES``), runs the best-effort
``PRAGMA wal_checkpoint(PASSIVE)`` of ``_try_wal_checkpoint`` (errors ignored). hermes-data's
writer does the same (``backends.sqlite.CHECKPOINT_EVERY``, WAL only: in a rollback journal
the pragma is a no-op). A baseline that sends upstream's statements without it leaves out a
cost both real implementations pay — in WAL with ``synchronous=NORMAL`` a PASSIVE checkpoint
fsyncs the WAL and the database, a large share of a small write's amortised time.

:class:`UpstreamWriter` is that counter for a plain ``sqlite3`` connection in autocommit
mode: the baseline sends ``BEGIN IMMEDIATE`` and its statements, then :meth:`commit`.
"""

from __future__ import annotations

import sqlite3

#: Upstream's ``_CHECKPOINT_EVERY_N_WRITES`` (seed 002).
CHECKPOINT_EVERY_N_WRITES = 50


class UpstreamWriter:
    """``COMMIT`` plus upstream's per-handle write count and periodic PASSIVE checkpoint."""

    def __init__(self, con: sqlite3.Connection) -> None:
        self.con = con
        self.writes = 0

    def commit(self) -> None:
        self.con.execute("COMMIT")
        self.writes += 1
        if self.writes % CHECKPOINT_EVERY_N_WRITES == 0:
            try:  # best effort, as upstream's _try_wal_checkpoint
                self.con.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            except sqlite3.Error:
                pass
