"""The backend interface of the session store: what query functions and the
:class:`~hermes_data.sessions.store.SessionStore` facade need from a database.

A backend owns connections and transactions; it knows nothing of sessions or messages.
Query functions (``lifecycle``, ``messages``, ``lineage``, ``listing``, ``maintenance`` …)
take a SQLAlchemy ``Connection`` (or, on the transcript hot path, a :class:`Driver`) plus
the dialect's :class:`~hermes_data.sessions.sql.Fragments`, and run on either backend.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence, TypeVar

from sqlalchemy.engine import Connection, Engine, URL

from hermes_data.errors import ConfigurationError
from hermes_data.sessions.sql import Fragments

T = TypeVar("T")

#: Patience budgets (docs/sessions.md §8.5), seconds.
ROUTINE_PATIENCE_S = 20.0
TRANSCRIPT_PATIENCE_S = 60.0
OPEN_PATIENCE_S = 20.0


@dataclass(frozen=True)
class OpenOptions:
    """Open-time settings of one store handle, read from its configuration by the
    :class:`~hermes_data.sessions.store.SessionStore` constructor and handed to
    :func:`~hermes_data.sessions.backends.open_backend`, which keeps them on the handle's
    :class:`HandleState` (the open, the migration hooks and later maintenance read them
    there). The defaults are a store opened without configuration."""

    #: ``sessions.cjk_index`` (docs/sessions-storage.md §3.9.2): keep the CJK-bigram index (False drops it).
    cjk_index: bool = True
    #: ``sessions.reap_orphan_desktop_backends`` (docs/sessions-storage.md §3.8): the stale-FTS escalation may
    #: end orphaned desktop backends holding the file.
    reap_orphans: bool = True


#: A deferred stale-FTS recovery's first retry backoff, seconds (docs/sessions-storage.md §3.8).
FTS_RETRY_BACKOFF_START_S = 60.0


@dataclass
class FtsMergeState:
    """:mod:`~hermes_data.sessions.storage.fts.maintenance`'s bookkeeping of one handle."""

    #: Successful transcript writes (the merge cadence counts them).
    writes: int = 0
    #: Indexes whose ``usermerge`` was checked on this handle.
    usermerge_checked: set[str] = field(default_factory=set)
    #: Monotonic time before which a deferred-recovery retry is skipped.
    retry_after: float | None = None
    #: The current retry backoff (doubles per failure, reset on success).
    backoff: float = FTS_RETRY_BACKOFF_START_S


@dataclass
class CjkDrainState:
    """:mod:`~hermes_data.sessions.storage.fts.cjk`'s drain bookkeeping of one handle (no
    query needed to know there is nothing to do)."""

    #: Appends seen (a drain every ``DRAIN_EVERY`` of them).
    writes: int = 0
    #: Work remained after the last drain.
    pending: bool = False
    #: The index exists and this SQLite build can load it (as last read).
    available: bool = True


@dataclass
class HandleState:
    """Everything the concern modules keep per store handle, owned by the backend (made with
    it, :attr:`SessionBackend.state`; collected with it). Each field names its owner."""

    #: The store constructor's open-time settings (read by the open and by maintenance).
    options: OpenOptions = field(default_factory=OpenOptions)
    #: storage.fts.maintenance: merge cadence and deferred-recovery retry backoff.
    fts_merge: FtsMergeState = field(default_factory=FtsMergeState)
    #: storage.fts.cjk: the post-commit drain's counters.
    cjk_drain: CjkDrainState = field(default_factory=CjkDrainState)
    #: gateway.handoffs: this handle's claimant token (minted at the first claim).
    handoff_claimant: str | None = None
    #: gateway.telegram_topics: the topic tables were found (or made) present on this handle.
    telegram_topics_settled: bool = False
    #: ui.portability.export: the ``sessions`` columns of this database, read once.
    export_columns: list[str] | None = None


class Cursor(Protocol):
    """The part of a DB-API cursor the hot path uses."""

    rowcount: int

    def fetchone(self) -> Any: ...

    def fetchall(self) -> Sequence[Any]: ...


class Driver(Protocol):
    """A connection inside a write transaction, at the DB-API level: statements are the
    dialect's rendered driver text (``Fragments`` attributes), values positional."""

    def execute(self, statement: str, parameters: Sequence[Any] = ...) -> Cursor: ...

    def executemany(self, statement: str, rows: Sequence[Sequence[Any]]) -> Any: ...


def driver_connection(conn: Connection) -> Any:
    """The DB-API connection under a SQLAlchemy ``Connection``: statements sent there run in
    the caller's transaction and return plain tuples (no result metadata or ``Row``)."""
    raw = conn.connection.driver_connection
    assert raw is not None
    return raw


class MaintenanceLock(Protocol):
    """A non-blocking cross-process lock for startup maintenance."""

    def acquire(self) -> bool: ...

    def release(self) -> None: ...

    def close(self) -> None: ...


class SessionBackend(ABC):
    """One open session-store database (a SQLite file or a PostgreSQL database)."""

    #: ``sqlite`` or ``postgresql``.
    dialect: str
    #: The dialect's statements.
    sql: Fragments
    #: The database URL, and the file path (SQLite) or the rendered URL (PostgreSQL).
    url: URL
    path: Path
    read_only: bool
    #: Repairs the open (or the upgrade it ran) made, for the CLI's report.
    open_repairs: list[str]
    #: Which full-text indexes this handle can use (SQLite probes them; always True on PostgreSQL).
    fts_available: dict[str, bool]
    #: Set when structural corruption was seen: the handle refuses further work.
    quarantined: bool = False
    #: This handle's state: its open options and the concern modules' bookkeeping (made by
    #: the backend's constructor).
    state: HandleState

    # -- transactions -------------------------------------------------------------------

    @abstractmethod
    def write(self, fn: Callable[[Connection], T], *,
              patience: float = ROUTINE_PATIENCE_S) -> T:
        """Run ``fn`` in one write transaction; retry lock conflicts with jitter until
        ``patience`` runs out (then :class:`~hermes_data.errors.DatabaseBusyError`)."""

    @abstractmethod
    def write_driver(self, fn: Callable[[Driver], T], *,
                     patience: float = TRANSCRIPT_PATIENCE_S, header_in_fn: bool = True) -> T:
        """Like :meth:`write`, handing ``fn`` the DB-API level :class:`Driver` (hot paths:
        no per-call compilation). ``fn`` must pass the header value its admission statement
        returns to :meth:`check_header` before the transaction can commit, unless
        ``header_in_fn`` is False (small transactions without an admission statement, such
        as guard rows): then the backend reads and checks the header itself."""

    def check_header(self, application_id: int | None) -> None:
        """Compare the file header read inside a write with the one seen at open
        (SQLite's replaced-file guard); a no-op where there is no file."""

    @abstractmethod
    def reading(self) -> AbstractContextManager[Connection]:
        """A connection inside a read transaction (a pooled reader where there is one)."""

    def read(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn`` on :meth:`reading`'s connection."""
        with self.reading() as conn:
            return fn(conn)

    def read_driver(self, fn: Callable[[Driver], T], *, single_statement: bool = False) -> T:
        """Like :meth:`read`, handing ``fn`` a DB-API level :class:`Driver` inside the read
        transaction (hot reads: rows as plain tuples, no per-call compilation).
        ``single_statement``: ``fn`` sends exactly one statement, which is its own snapshot,
        so a backend may run it without an explicit transaction (SQLite does)."""
        return self.read(lambda conn: fn(driver_connection(conn)))

    @abstractmethod
    def reading_on_writer(self) -> AbstractContextManager[Connection]:
        """The writer's own connection in a read transaction (sees this handle's commits).
        No patience: for a caller that handles a lock conflict itself; others use
        :meth:`read_on_writer`."""

    def read_on_writer(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn`` on :meth:`reading_on_writer`'s connection, with :meth:`read`'s patience
        where the backend has one (a lock conflict waits, then
        :class:`~hermes_data.errors.DatabaseBusyError`; never a raw driver error)."""
        with self.reading_on_writer() as conn:
            return fn(conn)

    @abstractmethod
    def read_bounded(self, fn: Callable[[Connection], T], timeout_s: float) -> T:
        """Run a read that is interrupted past ``timeout_s`` with :class:`TimeoutError`."""

    @abstractmethod
    def changes(self, conn: Connection, result: Any) -> int:
        """Rows a ``WITH … UPDATE`` just changed."""

    # -- handle -------------------------------------------------------------------------

    #: The engine while the handle is open.
    _engine: Engine | None = None

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine (raises once closed)."""
        if self._engine is None:
            raise ConfigurationError(f"{self.path}: the session store is closed")
        return self._engine

    @property
    @abstractmethod
    def journal_mode(self) -> str:
        """``wal`` / ``delete`` … on SQLite; ``n/a`` on PostgreSQL."""

    @abstractmethod
    def close(self) -> None:
        """Close every connection. Idempotent."""

    def owner_profile(self, root: Path) -> str | None:
        """Profile owning this database under ``root`` (only a file can belong to one)."""
        return None

    # -- maintenance --------------------------------------------------------------------

    @abstractmethod
    def logical_size_bytes(self) -> int:
        """Bytes the store's data occupies (SQLite: page_count × page_size)."""

    @abstractmethod
    def freelist_ratio(self) -> float | None:
        """Free pages / pages (SQLite); None where unknown or meaningless."""

    @abstractmethod
    def vacuum(self) -> None:
        """Compact / analyze the store (SQLite: FTS optimize, VACUUM between PASSIVE
        checkpoints; PostgreSQL: ``VACUUM (ANALYZE)`` of the store's tables)."""

    @abstractmethod
    def maintenance_lock(self) -> MaintenanceLock:
        """A cross-process lock for startup maintenance (not yet acquired)."""
