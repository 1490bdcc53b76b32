"""The session store on PostgreSQL (what ``SessionStore("postgresql+psycopg://…")`` returns).

Same public API and the same statements as :class:`~hermes_data.sessions.store.SessionStore`;
what differs is gated here, once, instead of being sprinkled through the store:

* **Connections.** A pooled engine; the handle keeps one writer connection (writes are
  serialised by the handle's lock, as on SQLite) and reads check out pooled connections.
  None of the SQLite machinery applies: no PRAGMAs, no ``mode=ro`` read pool, no WAL /
  replaced-file guards, no ``application_id``, no FTS5 stale/rebuild (full-text search is
  index-maintained by the server).
* **Driver SQL.** The store's positional driver statements are written with ``?``
  placeholders; a ``before_cursor_execute`` hook on this engine rewrites them to psycopg's
  ``%s`` (``%`` escaped first). Compiled ``text()`` statements are left alone.
* **Dialect twins** of the ``text()`` fragments come from ``sql.for_dialect("postgresql")``.
* **Transactions** are plain ``BEGIN`` … ``COMMIT`` (row locks, not a database write lock);
  a serialization failure or deadlock is retried with the same patience budget as a busy
  SQLite file.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Mapping, Sequence, TypeVar

import sqlalchemy as sa
from sqlalchemy import event, text
from sqlalchemy.engine import Connection

from .. import migrate
from ..config import resolve_url
from ..engine import create_engine_for
from ..errors import ConfigurationError, DatabaseBusyError
from . import encoding as enc
from . import sql
from .errors import CompressionSessionClosedError, SessionNotFoundError
from .rows import NewMessage, RecentSessionRow
from .store import (_INSERT_MESSAGE, ROUTINE_PATIENCE_S, TRANSCRIPT_PATIENCE_S, SessionStore,
                    _preview, _unread)

log = logging.getLogger("hermes_data.sessions.pg_store")

T = TypeVar("T")

_INSERT_MESSAGE_RETURNING = _INSERT_MESSAGE + " RETURNING id"
_ADMIT = ("UPDATE sessions SET message_count = COALESCE(message_count, 0) + ?, "
          "tool_call_count = COALESCE(tool_call_count, 0) + ? WHERE id = ? "
          "RETURNING ended_at, end_reason")
#: SQLSTATEs retried like a busy SQLite file: serialization_failure, deadlock_detected,
#: lock_not_available.
_RETRY_SQLSTATES = {"40001", "40P01", "55P03"}


def _qmark_to_format(statement: str) -> str:
    # Driver statements of the store bind with '?'; psycopg wants '%s' and a literal '%%'.
    return statement.replace("%", "%%").replace("?", "%s")


def _sqlstate(exc: BaseException) -> str | None:
    return getattr(getattr(exc, "orig", None), "sqlstate", None)


class PgSessionStore(SessionStore):
    """:class:`SessionStore` over a PostgreSQL database (see the module docstring)."""

    _sql = sql.for_dialect("postgresql")
    #: PostgreSQL reports the rows a WITH … UPDATE changed in its rowcount.
    _changes = staticmethod(lambda _conn, result: max(0, int(result.rowcount or 0)))

    def __init__(self, path_or_url: str | os.PathLike | None = None, *,
                 config: Mapping[str, Any] | Callable[[], Mapping[str, Any]] | None = None,
                 hermes_root: str | os.PathLike | None = None, read_only: bool = False,
                 pool_size: int = 8, **_sqlite_only: Any) -> None:
        from pathlib import Path

        from ..config import hermes_home

        self.url = resolve_url("sessions", path_or_url)
        self.path = Path(self.url.render_as_string(hide_password=True))
        self.read_only = read_only
        self._config = config
        self._root = Path(hermes_root) if hermes_root is not None else hermes_home()
        self._lock = threading.RLock()
        self._writes = 0
        self._closed = False
        self._sticky = None
        self.quarantined = False
        self.open_repairs: list[str] = []
        self._read_pool = None
        self._identity = None
        self._app_id = 0
        self._raw = None
        #: Full-text search is index-maintained: always available.
        self.fts_available = {"messages_fts": True, "messages_fts_trigram": True}
        self._engine = create_engine_for("sessions", self.url, pool_size=pool_size,
                                         max_overflow=32, pool_timeout=60)
        event.listen(self._engine, "before_cursor_execute", self._rewrite, retval=True)
        try:
            if not read_only:
                spec = migrate.store_spec("sessions")
                with self._engine.connect() as conn:
                    rev = migrate.current_revision(conn, spec.version_table_for(conn))
                if rev != migrate.head_revision("sessions"):
                    report = migrate.upgrade("sessions", self.url)
                    self.open_repairs.extend(report.repairs)
            self._writer = self._engine.connect()
            self._read_engine = self._engine
        except BaseException:
            self._engine.dispose()
            raise

    @staticmethod
    def _rewrite(conn, cursor, statement, parameters, context, executemany):
        if context is not None and context.compiled is None:
            statement = _qmark_to_format(statement)
        return statement, parameters

    # -- open / close ------------------------------------------------------------------

    def close(self) -> None:
        """Close the writer and dispose of the pool. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._writer is not None:
                self._writer.close()
                self._writer = None
            if self._engine is not None:
                self._engine.dispose()
                self._engine = None

    def _checkpoint(self) -> None:
        """No-op: checkpoints are the server's business on PostgreSQL."""

    @property
    def journal_mode(self) -> str:
        """``n/a``: PostgreSQL has no journal mode."""
        return "n/a"

    # -- transactions ------------------------------------------------------------------

    def _write(self, fn: Callable[[Connection], T], *, patience: float = ROUTINE_PATIENCE_S,
               raw: bool = False, header_in_fn: bool = False) -> T:
        """Run ``fn`` in one transaction on the writer; retry serialization failures and
        deadlocks with jitter until ``patience`` runs out."""
        if self.read_only:
            raise ConfigurationError(f"{self.path}: this session store handle is read-only")
        start = time.monotonic()
        deadline = start + patience
        while True:
            with self._lock:
                if self._writer is None:
                    raise ConfigurationError(f"{self.path}: the session store is closed")
                try:
                    with self._writer.begin():
                        result = fn(self._writer)
                    self._writes += 1
                    return result
                except sa.exc.DBAPIError as exc:
                    if _sqlstate(exc) not in _RETRY_SQLSTATES:
                        raise
                    err = exc
            now = time.monotonic()
            if now >= deadline:
                raise DatabaseBusyError(
                    f"{self.path}: write kept conflicting for over {patience:.1f} s; retry later"
                ) from err
            time.sleep(min(random.uniform(0.02, 0.15), deadline - now))

    _attempt = None  # the SQLite transaction contract does not apply

    @contextmanager
    def _reading_on_writer(self) -> Iterator[Connection]:
        with self._lock:
            if self._writer is None:
                raise ConfigurationError(f"{self.path}: the session store is closed")
            with self._writer.begin():
                yield self._writer

    @contextmanager
    def _reading(self) -> Iterator[Connection]:
        """A pooled connection in a read transaction."""
        if self._engine is None:
            raise ConfigurationError(f"{self.path}: the session store is closed")
        with self._engine.connect() as conn, conn.begin():
            yield conn

    def set_meta(self, key: str, value: str | None) -> None:
        """Upsert a ``state_meta`` value."""
        self._write(lambda c: c.exec_driver_sql(
            "INSERT INTO state_meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET "
            "value = excluded.value", (key, value)))

    # -- messages ----------------------------------------------------------------------

    def _admit(self, conn: Connection, session_id: str, count: int, tools: int) -> None:
        row = conn.exec_driver_sql(_ADMIT, (count, tools, session_id)).first()
        if row is None:
            raise SessionNotFoundError(session_id)
        if row[0] is not None and row[1] == "compression":
            raise CompressionSessionClosedError(session_id)

    def append_message(self, session_id: str, role: str, content: Any = None, **fields: Any) -> int:
        """Append one message in its own transaction; returns the new row id."""
        row = self._encode_row({**fields, "role": role, "content": content}, 0, batch=False,
                               default_ts=enc.now())
        tools = enc.count_tool_calls(row[3])
        params = (session_id, *row)

        def work(conn: Connection) -> int:
            self._admit(conn, session_id, 1, tools)
            return conn.exec_driver_sql(_INSERT_MESSAGE_RETURNING, params).scalar_one()

        return self._write(work, patience=TRANSCRIPT_PATIENCE_S)

    def append_messages_batch(self, session_id: str, messages: Sequence[NewMessage],
                              chunk_rows: int | None = None) -> int:
        """Append ``messages`` all-or-nothing (or per chunk of ``chunk_rows``); returns rows inserted."""
        if not messages:
            return 0
        encoded = self._with_timestamps([self._encode_row(m, i) for i, m in enumerate(messages)])
        size = len(encoded) if not chunk_rows or chunk_rows <= 0 else chunk_rows
        inserted = 0
        for begin in range(0, len(encoded), size):
            chunk = encoded[begin:begin + size]
            tools = sum(enc.count_tool_calls(r[3]) for r in chunk)

            def work(conn: Connection, chunk=chunk, tools=tools) -> int:
                self._admit(conn, session_id, len(chunk), tools)
                conn.exec_driver_sql(_INSERT_MESSAGE, [(session_id, *r) for r in chunk])
                return len(chunk)

            inserted += self._write(work, patience=TRANSCRIPT_PATIENCE_S)
        return inserted

    def _clone_rows(self, conn: Connection, parent: str, child: str, watermark: int,
                    ceiling: int | None) -> tuple[int, int]:
        # Column-exact copy (extra columns included) except id/session_id/active/compacted and
        # generated columns (fts_document, s02: PostgreSQL computes it, no insert may name it).
        cols = [c["name"] for c in sa.inspect(conn).get_columns("messages")
                if c["name"] not in ("id", "session_id", "active", "compacted")
                and not c.get("computed")]
        col_sql = ", ".join('"' + c.replace('"', '""') + '"' for c in cols)
        cond = "session_id = ? AND active = 1 AND id > ?" + (" AND id <= ?" if ceiling is not None else "")
        params: tuple[Any, ...] = (parent, watermark) + ((ceiling,) if ceiling is not None else ())
        tools = sum(enc.count_tool_calls(r[0]) for r in conn.exec_driver_sql(
            f"SELECT tool_calls FROM messages WHERE {cond}", params))
        n = conn.exec_driver_sql(
            f"INSERT INTO messages (session_id, active, compacted, {col_sql}) "
            f"SELECT ?, 1, 0, {col_sql} FROM messages WHERE {cond} ORDER BY id",
            (child, *params)).rowcount
        return n, tools

    # -- reads ---------------------------------------------------------------------------

    def list_recent_sessions_bounded(self, limit: int = 20, exclude_sources=None,
                                     timeout_seconds: float = 3.0,
                                     candidate_limit: int | None = None,
                                     lineage_limit: int | None = None) -> list[RecentSessionRow]:
        """Latency-bounded recent browse (§5.3) bounded by ``statement_timeout``
        (:class:`TimeoutError` past the deadline, never a partial list).

        PostgreSQL rejects LIMIT inside a recursive CTE; the lineage walks are bounded by
        their UNION (each session once) and the timeout instead of ``lineage_limit``."""
        s = self._sql
        limit = max(1, int(limit))
        cand = candidate_limit if candidate_limit is not None else max(128, 8 * limit)
        cand = min(max(cand, limit), 2048)
        params: dict[str, Any] = {"cand": cand, "limit": limit}
        excl = ""
        excluded = list(exclude_sources or [])
        if excluded:
            names = [f"x{i}" for i in range(len(excluded))]
            excl = f" AND s.source NOT IN ({', '.join(':' + n for n in names)})"
            params.update(zip(names, excluded))
        q = text(
            "WITH RECURSIVE "
            "cand(id) AS (SELECT s.id FROM sessions s WHERE s.archived = 0 AND s.hidden = 0 "
            f"AND {s.J('s.model_config', '_delegate_from')} IS NULL{excl} "
            "ORDER BY COALESCE(s.last_activity_at, s.started_at) DESC, s.started_at DESC, s.id DESC "
            "LIMIT :cand), "
            "anc(id) AS (SELECT id FROM cand UNION SELECT p.id FROM anc JOIN sessions c ON c.id = anc.id "
            f"JOIN sessions p ON p.id = c.parent_session_id WHERE {s.edge('p', 'c')}), "
            "roots(id) AS (SELECT a.id FROM anc a JOIN sessions r ON r.id = a.id WHERE NOT EXISTS "
            f"(SELECT 1 FROM sessions p WHERE p.id = r.parent_session_id AND {s.edge('p', 'r')})), "
            "chains(root, id) AS (SELECT id, id FROM roots UNION SELECT chains.root, c.id FROM chains "
            "JOIN sessions p ON p.id = chains.id JOIN sessions c ON c.parent_session_id = p.id "
            f"WHERE {s.edge('p', 'c')}), "
            f"act AS (SELECT chains.root, chains.id, {s.last_active('t')} AS la, t.started_at AS st "
            "FROM chains JOIN sessions t ON t.id = chains.id), "
            "ranked AS (SELECT root, id, la, ROW_NUMBER() OVER (PARTITION BY root ORDER BY "
            "la DESC, st DESC, id DESC) AS rn FROM act) "
            "SELECT t.id, t.source, t.model, COALESCE(t.title, r.title), r.started_at, t.ended_at, "
            f"t.end_reason, t.message_count, t.tool_call_count, ranked.la, {s.preview_sql('t')}, "
            "r.id, t.last_read_at FROM ranked JOIN sessions t ON t.id = ranked.id "
            "JOIN sessions r ON r.id = ranked.root WHERE ranked.rn = 1 AND r.archived = 0 "
            f"AND r.hidden = 0 AND {s.listable('r')} ORDER BY ranked.la DESC, r.started_at DESC "
            "LIMIT :limit")
        with self._reading() as conn:
            conn.exec_driver_sql(
                f"SET LOCAL statement_timeout = {max(1, int(timeout_seconds * 1000))}")
            try:
                rows = conn.execute(q, params).fetchall()
            except sa.exc.OperationalError as exc:
                if _sqlstate(exc) == "57014":  # query_canceled
                    raise TimeoutError(
                        f"recent-session browse exceeded {timeout_seconds} s") from exc
                raise
        out = []
        for r in rows:
            la, read_at = r[9], r[12]
            out.append(RecentSessionRow(
                id=r[0], source=r[1], model=r[2], title=r[3], started_at=r[4], ended_at=r[5],
                end_reason=r[6], message_count=r[7] or 0, tool_call_count=r[8] or 0,
                last_active=la, preview=_preview(r[10]),
                lineage_root_id=r[11] if r[11] != r[0] else None,
                unread=_unread(la, read_at)))
        return out

    def owner_profile(self) -> str | None:
        """None: a PostgreSQL database is not a profile's file."""
        return None
