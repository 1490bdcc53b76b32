"""A private PostgreSQL server the fault tests may stop, restart and cancel on (issue 31).

Never the shared server at 127.0.0.1:5432: ``initdb`` + ``pg_ctl`` from the installed
binaries (``HERMES_DATA_PG_BIN``, default ``/usr/lib/postgresql/15/bin``) on a free port and a
temporary directory, once per test session; stopped and removed at teardown, even when a test
fails. The server refuses to run as root, so under root (CI) it runs as the ``postgres`` OS
user through ``runuser``. Skipped only when the binaries are absent; any other failure to
start it fails the tests.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

BIN = Path(os.environ.get("HERMES_DATA_PG_BIN", "/usr/lib/postgresql/15/bin"))
#: Trust authentication ignores it: a password in the URL shows that no error prints it.
PASSWORD = "s3cret-pw"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PrivateServer:
    """One PostgreSQL cluster in ``root`` listening on 127.0.0.1:``port`` (and a socket in
    ``root``)."""

    def __init__(self, root: Path, port: int, as_user: list[str]) -> None:
        self.root, self.port, self._as_user = root, port, as_user
        self.data = root / "data"

    def _run(self, *cmd: str, timeout: float = 60) -> subprocess.CompletedProcess:
        done = subprocess.run([*self._as_user, *cmd], capture_output=True, text=True,
                              timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr}"
                               f"{done.stdout}\n{self.log_tail()}")
        return done

    def log_tail(self) -> str:
        log = self.root / "server.log"
        return log.read_text(errors="replace")[-2000:] if log.exists() else ""

    def initdb(self) -> None:
        self._run(str(BIN / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres",
                  "-E", "UTF8", "--locale=C.UTF-8", "--no-sync")

    def _ctl(self, action: str, *extra: str) -> None:
        options = (f"-p {self.port} -h 127.0.0.1 -k {self.root} -c fsync=off "
                   "-c full_page_writes=off")
        self._run(str(BIN / "pg_ctl"), "-D", str(self.data), "-l", str(self.root / "server.log"),
                  "-w", "-t", "60", "-o", options, action, *extra)

    def start(self) -> None:
        self._ctl("start")

    def restart(self, mode: str = "fast") -> None:
        """``pg_ctl restart -m mode``: every connection is ended (fast: 57P01, immediate:
        57P02); returns once the server accepts connections again."""
        self._ctl("restart", "-m", mode)

    def stop(self) -> None:
        subprocess.run([*self._as_user, str(BIN / "pg_ctl"), "-D", str(self.data), "-w",
                        "-m", "immediate", "stop"], capture_output=True, timeout=60)

    def url(self, database: str, query: str = "") -> str:
        """A SQLAlchemy URL of ``database`` on this server (with :data:`PASSWORD`)."""
        return (f"postgresql+psycopg://postgres:{PASSWORD}@127.0.0.1:{self.port}/{database}"
                + (f"?{query}" if query else ""))

    def admin(self):
        """A psycopg autocommit connection to the ``postgres`` database (the test's second
        connection: terminating backends, holding locks)."""
        import psycopg

        return psycopg.connect(host="127.0.0.1", port=self.port, user="postgres",
                               dbname="postgres", autocommit=True)

    def terminate(self, pid: int) -> None:
        """``pg_terminate_backend(pid)`` and wait until that backend has exited."""
        with self.admin() as admin:
            assert admin.execute("SELECT pg_terminate_backend(%s, 10000)", (pid,)).fetchone()[0]

    def create_database(self, name: str) -> None:
        with self.admin() as admin:
            admin.execute(f'CREATE DATABASE "{name}"')


@pytest.fixture(scope="session")
def private_pg():
    """The private server (see the module docstring)."""
    if not (BIN / "initdb").is_file() or not (BIN / "pg_ctl").is_file():
        pytest.skip(f"no PostgreSQL server binaries in {BIN} (set HERMES_DATA_PG_BIN)")
    as_user: list[str] = []
    root = Path(tempfile.mkdtemp(prefix="hd-pgfault-"))
    if os.geteuid() == 0:  # initdb and postgres refuse root
        runuser = shutil.which("runuser")
        assert runuser, "running as root: runuser is needed to start PostgreSQL as postgres"
        owner = pwd.getpwnam("postgres")  # KeyError: no postgres user to run the server as
        os.chown(root, owner.pw_uid, owner.pw_gid)
        as_user = [runuser, "-u", "postgres", "--"]
    server = PrivateServer(root, _free_port(), as_user)
    try:
        server.initdb()
        for attempt in range(3):  # the free port may be taken between the probe and start
            try:
                server.start()
                break
            except RuntimeError:
                if attempt == 2:
                    raise
                server.port = _free_port()
                time.sleep(0.2)
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def faults_sessions_url(private_pg):
    """A session-store database on the private server, upgraded to head once."""
    from hermes_data.migrate import runner as migrate

    private_pg.create_database("sessions")
    url = private_pg.url("sessions")
    migrate.upgrade("sessions", url)
    return url


@pytest.fixture(scope="session")
def faults_telemetry_url(private_pg):
    """A telemetry-store database on the private server, upgraded to head once."""
    from hermes_data.migrate import runner as migrate

    private_pg.create_database("telemetry")
    url = private_pg.url("telemetry")
    migrate.upgrade("telemetry", url)
    return url
