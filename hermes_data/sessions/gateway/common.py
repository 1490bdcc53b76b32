"""Shared rules of the gateway family (docs/sessions-gateway.md §3.0): argument checks,
the two clocks, chunking. Claim strings and ``DEAD`` are coordination's
(:mod:`.guard_rows`: ``make_holder``, ``holder_is_provably_dead``).

* ``wall()`` is the injectable wall clock (tests patch it); ``db_now`` stamps values another
  process later compares with its own "now": SQLite ⇒ ``wall()``, PostgreSQL ⇒ the server's
  ``clock_timestamp()`` (multi-host rule M2: a stored time is compared only with the clock
  that stamped it).
* M1: a claimant's ``pid=`` is probed only when its ``host=`` names this host (on
  PostgreSQL ``host=`` is required); remote liveness comes from heartbeats or an age bound.
"""

from __future__ import annotations

import math
import time
from typing import Any, Iterable, Iterator, Sequence

from sqlalchemy.engine import Connection

from hermes_data.sessions.gateway.sql import CHUNK
from hermes_data.sessions.sql.core import CoreStatements


def wall() -> float:
    """The wall clock (epoch seconds); injectable in tests."""
    return time.time()


def db_now(conn: Connection, dialect: str) -> float:
    """"Now" for values another process compares (see the module docstring)."""
    st = CoreStatements.for_dialect(dialect).SERVER_NOW
    if st is None:
        return wall()
    value = conn.exec_driver_sql(st).scalar()
    if value is None:
        raise RuntimeError("the server clock read returned no value")
    return float(value)


def driver_now(tx: Any, dialect: str) -> float:
    """:func:`db_now` on a DB-API level ``Driver`` (``write_driver`` transactions)."""
    st = CoreStatements.for_dialect(dialect).SERVER_NOW
    if st is None:
        return wall()
    row = tx.execute(st).fetchone()
    if row is None or row[0] is None:
        raise RuntimeError("the server clock read returned no value")
    return float(row[0])


def finite(name: str, value: Any) -> float:
    """``value`` as a finite float; ``bool``, non-numbers and nan/inf ⇒ ``ValueError``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    out = float(value)
    if not math.isfinite(out):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return out


def str_collection(name: str, values: Any) -> list[str]:
    """An iterable of ``str`` (a bare ``str``/``bytes`` ⇒ ``TypeError``): non-blank,
    deduplicated, in first-seen order."""
    if isinstance(values, (str, bytes, bytearray)):
        raise TypeError(f"{name} must be a collection of strings, not a bare {type(values).__name__}")
    out: dict[str, None] = {}
    for v in values:
        if not isinstance(v, str):
            raise TypeError(f"{name} must hold strings, got {type(v).__name__} {v!r}")
        if v.strip():
            out[v] = None
    return list(out)


def chunks(items: Sequence[Any], size: int = CHUNK) -> Iterator[Sequence[Any]]:
    """``items`` in slices of at most ``size`` (≤ 900 ids per statement)."""
    for i in range(0, len(items), size):
        yield items[i:i + size]


def text_arg(name: str, value: Any) -> str:
    """A ``str`` payload (else ``TypeError``)."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be str, got {type(value).__name__}")
    return value


def ids_of(rows: Iterable[Sequence[Any]]) -> list[str]:
    """The first column of ``rows`` as strings."""
    return [str(r[0]) for r in rows]
