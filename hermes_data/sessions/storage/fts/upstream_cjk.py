"""Upstream's ``messages_fts_cjk`` triggers on adopted files
(docs/sessions-storage.md §3.9.1).

Upstream hosts with its native ``cjk_unicode61`` tokenizer keep a third FTS5 index,
``messages_fts_cjk``, fed by three triggers on ``messages``. hermes-data cannot load that
tokenizer, so every insert, update or delete of a message would fail while the triggers
exist. Upstream's own tokenizer-less self-heal is followed exactly: first the breadcrumb
``fts_cjk_stale='1'`` (the index now misses rows; a capable upstream host rebuilds it with
``optimize-storage``), **then** the three triggers are dropped, in one transaction.

It runs at a writable open that finds any of the triggers (read first: a settled file writes
nothing), when a write fails with ``no such tokenizer: cjk_unicode61`` (the triggers were
re-installed behind the handle — the write is then retried once), and inside the core FTS
fail-open and stale recovery. The table, its view and upstream's markers stay for a capable
host; hermes-data never queries, optimizes, merges or rebuilds ``messages_fts_cjk``.
"""

from __future__ import annotations

import logging
from typing import Any, Iterable

from hermes_data.sessions.storage.fts import sql as q

log = logging.getLogger("hermes_data.sessions.storage.fts.upstream_cjk")

UPSTREAM_CJK_TRIGGERS = q.UPSTREAM_CJK_TRIGGERS
_TOKENIZER_ERROR = "no such tokenizer: cjk_unicode61"


def is_cjk_tokenizer_error(exc: BaseException) -> bool:
    """A write failed because an upstream CJK trigger fired (``no such tokenizer:
    cjk_unicode61``; the driver error or its SQLAlchemy wrapper)."""
    return _TOKENIZER_ERROR in str(getattr(exc, "orig", exc)).lower()


def present(conn: Any) -> list[str]:
    """The upstream CJK triggers in the schema (a read)."""
    return [r[0] for r in conn.exec_driver_sql(q.UPSTREAM_CJK_TRIGGERS_PRESENT).fetchall()]


def heal(conn: Any, names: Iterable[str] | None = None) -> list[str]:
    """Inside the caller's write transaction: the breadcrumb, then drop the triggers present
    (``names`` when the caller already read them). Returns what was dropped (nothing
    written when none exists)."""
    found = [n for n in (present(conn) if names is None else names)
             if n in UPSTREAM_CJK_TRIGGERS]
    if not found:
        return []
    conn.exec_driver_sql(q.MARK_FTS_CJK_STALE)  # breadcrumb first (upstream's order)
    for name in found:
        conn.exec_driver_sql(q.drop_upstream_cjk_trigger(name))
    return found


def heal_at_open(conn: Any, objects: Iterable[str], done: list[str]) -> None:
    """The writable open's step: ``objects`` are the FTS object names the open read."""
    dropped = heal(conn, [n for n in objects if n in UPSTREAM_CJK_TRIGGERS])
    if dropped:
        log.warning("upstream messages_fts_cjk triggers need the cjk_unicode61 tokenizer this "
                    "host lacks: fts_cjk_stale set, dropped %s", ", ".join(dropped))
        done.append(f"dropped upstream CJK triggers ({', '.join(dropped)}); fts_cjk_stale set")


def heal_after_write_failure(conn: Any) -> None:
    """The write path's step (its own transaction; the failed write is retried once)."""
    dropped = heal(conn)
    log.warning("a write hit upstream's messages_fts_cjk triggers (no cjk_unicode61 tokenizer "
                "here): fts_cjk_stale set, dropped %s; retrying the write",
                ", ".join(dropped) or "nothing")


__all__ = ["UPSTREAM_CJK_TRIGGERS", "heal", "heal_after_write_failure", "heal_at_open",
           "is_cjk_tokenizer_error", "present"]
