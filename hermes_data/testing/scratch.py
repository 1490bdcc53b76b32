"""Scratch PostgreSQL databases for a test session (the pytest plugin's PostgreSQL side).

An administrator URL names a server and a database the tests may connect to in order to
``CREATE DATABASE`` / ``DROP DATABASE``. Each store (``sessions``, ``telemetry``) gets one
scratch database per test session, created on first use and upgraded to head once;
:meth:`ScratchDatabases.empty` truncates the store's tables between tests, and
:meth:`ScratchDatabases.drop_all` drops every database it created at the end of the session
(``WITH (FORCE)``, so a connection a test leaked cannot keep it alive).

No pytest here: failures raise :class:`ScratchDatabaseError` with a message the plugin shows.
"""

from __future__ import annotations

import logging
import secrets
from typing import Any

from hermes_data.errors import HermesDataError

__all__ = ["SCRATCH_PREFIX", "STORES", "ScratchDatabaseError", "ScratchDatabases",
           "scratch_name", "store_tables"]

log = logging.getLogger("hermes_data.testing")

#: Every scratch database's name starts with this (then the store and a random suffix), so a
#: database left behind by a killed run is recognisable: ``hermes_data_test_sessions_3f9c…``.
SCRATCH_PREFIX = "hermes_data_test_"
#: The stores the plugin can give a scratch database for.
STORES = ("sessions", "telemetry")
#: How long emptying a scratch database waits for a lock another connection holds (a store a
#: test left open) before it fails with a message, instead of hanging the run.
EMPTY_LOCK_TIMEOUT = "30s"


class ScratchDatabaseError(HermesDataError):
    """The configured PostgreSQL server cannot give the tests a scratch database."""


def scratch_name(store: str) -> str:
    """A fresh scratch database name for ``store``: the prefix, the store, 12 random hex."""
    if store not in STORES:
        raise ValueError(f"store {store!r}: not one of {', '.join(STORES)}")
    return f"{SCRATCH_PREFIX}{store}_{secrets.token_hex(6)}"


def store_tables(store: str) -> tuple[str, ...]:
    """The tables of ``store`` a test may write, children before parents (what one
    ``TRUNCATE`` empties; the Alembic version row stays)."""
    if store == "sessions":
        from hermes_data.sessions.schema import TELEGRAM_TABLES
        from hermes_data.sessions.schema import metadata as sessions_metadata

        return (*TELEGRAM_TABLES, *(t.name for t in reversed(sessions_metadata.sorted_tables)))
    if store == "telemetry":
        from hermes_data.telemetry.schema import metadata as telemetry_metadata

        return tuple(t.name for t in reversed(telemetry_metadata.sorted_tables))
    raise ValueError(f"store {store!r}: not one of {', '.join(STORES)}")


class ScratchDatabases:
    """The scratch databases of one test session on the server of ``admin_url``.

    ``source`` says where the URL came from (an option, an ini key, an environment
    variable); every error message names it, so the reader knows what to fix.
    """

    def __init__(self, admin_url: str, source: str) -> None:
        import sqlalchemy as sa

        try:
            url = sa.engine.make_url(admin_url)
        except sa.exc.ArgumentError as exc:
            raise ScratchDatabaseError(
                f"{source}: {admin_url!r} is not a database URL ({exc})") from None
        if url.get_backend_name() != "postgresql":
            raise ScratchDatabaseError(
                f"{source}: {url.render_as_string(hide_password=True)} is not a PostgreSQL URL "
                "(expected postgresql+psycopg://user@host:port/database)")
        self.admin_url = url
        self.source = source
        #: store → URL of its scratch database (created on first use).
        self.urls: dict[str, str] = {}
        #: store → name of its scratch database.
        self.names: dict[str, str] = {}
        self._engines: dict[str, Any] = {}
        self._admin: Any = None

    def describe(self) -> str:
        """The administrator URL (password hidden) and where it was configured."""
        return f"{self.admin_url.render_as_string(hide_password=True)} (from {self.source})"

    def _admin_engine(self) -> Any:
        if self._admin is None:
            import sqlalchemy as sa

            try:
                self._admin = sa.create_engine(self.admin_url, isolation_level="AUTOCOMMIT",
                                               poolclass=sa.pool.NullPool)
            except ModuleNotFoundError as exc:
                raise ScratchDatabaseError(
                    f"PostgreSQL test server {self.describe()}: its driver is not installed "
                    f"({exc}); install hermes-data[postgres]") from None
        return self._admin

    def _admin_execute(self, *statements: str) -> None:
        import sqlalchemy as sa

        try:
            with self._admin_engine().connect() as conn:
                for statement in statements:
                    conn.exec_driver_sql(statement)
        except sa.exc.OperationalError as exc:
            raise ScratchDatabaseError(
                f"PostgreSQL test server {self.describe()} is unreachable or refused "
                f"{statements[0]!r}: {str(exc.orig).strip() or exc}. Start the server, or "
                "unconfigure it to skip the PostgreSQL runs") from None
        except sa.exc.ProgrammingError as exc:
            raise ScratchDatabaseError(
                f"PostgreSQL test server {self.describe()} refused {statements[0]!r}: "
                f"{str(exc.orig).strip()}. The configured role needs CREATEDB") from None

    def url(self, store: str) -> str:
        """The URL of ``store``'s scratch database, created and upgraded to head on first
        use."""
        url = self.urls.get(store)
        if url is not None:
            return url
        from hermes_data.migrate import runner

        name = scratch_name(store)
        # synchronous_commit=off for this database only: tests check results, not fsyncs.
        self._admin_execute(f'CREATE DATABASE "{name}"',
                            f'ALTER DATABASE "{name}" SET synchronous_commit = off')
        url = self.admin_url.set(database=name).render_as_string(hide_password=False)
        self.urls[store] = url
        self.names[store] = name
        log.info("created the scratch %s database %s on %s", store, name, self.describe())
        runner.upgrade(store, url)
        return url

    def empty(self, store: str) -> str:
        """``store``'s scratch database with every table emptied and identities restarted
        (``TRUNCATE … RESTART IDENTITY``); returns its URL."""
        import sqlalchemy as sa

        url = self.url(store)
        engine = self._engines.get(store)
        if engine is None:
            engine = self._engines[store] = sa.create_engine(url, pool_size=1, max_overflow=0)
        tables = ", ".join(f'"{t}"' for t in store_tables(store))
        try:
            with engine.begin() as conn:
                conn.exec_driver_sql(f"SET LOCAL lock_timeout = '{EMPTY_LOCK_TIMEOUT}'")
                conn.exec_driver_sql(f"TRUNCATE {tables} RESTART IDENTITY")
        except sa.exc.OperationalError as exc:
            raise ScratchDatabaseError(
                f"cannot empty the scratch {store} database {self.names[store]} on "
                f"{self.describe()}: {str(exc.orig).strip() or exc} (a store an earlier test "
                "left open holds a lock?)") from None
        return url

    def drop_all(self) -> list[str]:
        """Drop every scratch database this object created (``WITH (FORCE)``); returns
        their names. A failure to drop one is logged and the others are still dropped."""
        for engine in self._engines.values():
            engine.dispose()
        self._engines.clear()
        dropped = []
        for store, name in list(self.names.items()):
            try:
                self._admin_execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            except ScratchDatabaseError as exc:
                log.error("could not drop the scratch %s database %s: %s", store, name, exc)
                continue
            dropped.append(name)
            del self.urls[store], self.names[store]
        if self._admin is not None:
            self._admin.dispose()
            self._admin = None
        return dropped
