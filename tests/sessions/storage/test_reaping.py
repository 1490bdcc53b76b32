"""Orphan desktop-backend reaping (spec sessions-ext-storage.md §3.8, acceptance §4.22).

Two halves: injected psutil-like inspection (every proof failing on its own, the signal
sequence, non-Linux), and real child processes this test spawns that meet and fail each
proof. The real half's process factory refuses any pid the test did not spawn, so nothing
else can ever be signalled.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time
from collections import namedtuple
from pathlib import Path

import psutil
import pytest

from hermes_data.sessions.storage import reaping
from hermes_data.sessions.storage.reaping import Inspection, reap_orphan_desktop_backends
from hermes_data.sessions.store import SessionStore

pytestmark = pytest.mark.journal_independent("process inspection and signals only")

NOW = 1_000_000.0
Uids = namedtuple("Uids", "real effective saved")


class FakeFile:
    def __init__(self, path: str) -> None:
        self.path = path


class FakeConn:
    def __init__(self, status: str) -> None:
        self.status = status


class FakeProc:
    """A psutil.Process stand-in recording the signals it was sent."""

    def __init__(self, pid: int, db: Path, *, ppid: int = 1, age: float = 120.0,
                 argv: tuple[str, ...] = ("hermes", "serve", "--port", "0"),
                 files: tuple[str, ...] | None = None, conns: tuple[str, ...] = (),
                 uid: int | None = None, fail: str | None = None) -> None:
        self.pid = pid
        self._ppid, self._age, self._argv = ppid, age, argv
        self._files = (str(db),) if files is None else files
        self._conns, self._uid, self._fail = conns, os.getuid() if uid is None else uid, fail
        self.signals: list[str] = []

    def _maybe_fail(self, what: str) -> None:
        if self._fail == what:
            raise psutil.AccessDenied(self.pid)

    def open_files(self):
        self._maybe_fail("open_files")
        return [FakeFile(p) for p in self._files]

    def ppid(self) -> int:
        self._maybe_fail("ppid")
        return self._ppid

    def create_time(self) -> float:
        self._maybe_fail("create_time")
        return NOW - self._age

    def cmdline(self):
        self._maybe_fail("cmdline")
        return list(self._argv)

    def net_connections(self, kind: str = "inet"):
        self._maybe_fail("connections")
        assert kind == "inet"
        return [FakeConn(s) for s in self._conns]

    def uids(self):
        self._maybe_fail("uids")
        return Uids(self._uid, self._uid, self._uid)

    def terminate(self) -> None:
        self.signals.append("TERM")

    def kill(self) -> None:
        self.signals.append("KILL")


def _inspection(procs: dict[int, FakeProc], *, survivors: tuple[int, ...] = (),
                platform: str = "linux", waits: list | None = None) -> Inspection:
    def process(pid: int) -> FakeProc:
        if pid not in procs:
            raise psutil.NoSuchProcess(pid)
        return procs[pid]

    def wait_procs(ps, timeout):
        if waits is not None:
            waits.append((sorted(p.pid for p in ps), timeout))
        alive = [p for p in ps if p.pid in survivors and "KILL" not in p.signals]
        return [p for p in ps if p not in alive], alive

    return Inspection(process=process, wait_procs=wait_procs, clock=lambda: NOW,
                      platform=platform, protected=lambda: {os.getpid(), 1})


def test_injected_every_failed_proof_is_never_signalled(tmp_path):
    db = tmp_path / "state.db"
    db.touch()
    procs = {
        101: FakeProc(101, db, ppid=4242),                                  # has a parent
        102: FakeProc(102, db, age=59.0),                                   # younger than 60 s
        103: FakeProc(103, db, argv=("hermes", "serve", "--port", "8080")),  # fixed port
        104: FakeProc(104, db, argv=("hermes", "gateway", "--port", "0")),   # not serve/dashboard
        105: FakeProc(105, db, conns=("LISTEN", psutil.CONN_ESTABLISHED)),  # a client uses it
        106: FakeProc(106, db, uid=os.getuid() + 1),                        # another user
        107: FakeProc(107, db, fail="cmdline"),                             # inspection raised
        108: FakeProc(108, db, files=(str(tmp_path / "other.db"),)),        # unproven descriptor
        109: FakeProc(109, db, fail="open_files"),
    }
    holders = [(pid, str(db)) for pid in procs] + [(0, str(db)), (-1, "scan failed"),
                                                   (os.getpid(), str(db)), (1, str(db))]
    assert reap_orphan_desktop_backends(db, holders, inspection=_inspection(procs)) == []
    assert all(p.signals == [] for p in procs.values())


def test_injected_qualifying_candidates_get_term_then_kill(tmp_path):
    db = tmp_path / "state.db"
    db.touch()
    procs = {
        201: FakeProc(201, db),                                               # exits on TERM
        202: FakeProc(202, db, argv=("hermes", "dashboard", "--port=0"),       # survives TERM
                      files=(f"{db}-wal (deleted)",)),
        203: FakeProc(203, db, ppid=0, files=(f"{db}-shm",), conns=("LISTEN",)),
        204: FakeProc(204, db, ppid=77),                                      # not a candidate
    }
    waits: list = []
    insp = _inspection(procs, survivors=(202,), waits=waits)
    got = reap_orphan_desktop_backends(db, [(p, str(db)) for p in procs], inspection=insp)
    assert sorted(got) == [201, 202, 203]
    assert procs[201].signals == ["TERM"] and procs[203].signals == ["TERM"]
    assert procs[202].signals == ["TERM", "KILL"]
    assert procs[204].signals == []
    assert waits == [([201, 202, 203], reaping.WAIT_SECONDS), ([202], reaping.WAIT_SECONDS)]
    assert reaping.WAIT_SECONDS == 1.5


def test_injected_non_linux_and_min_age(tmp_path):
    db = tmp_path / "state.db"
    db.touch()
    procs = {301: FakeProc(301, db, age=30.0)}
    for platform in ("darwin", "win32"):
        assert reap_orphan_desktop_backends(
            db, [(301, str(db))], min_age_seconds=0,
            inspection=_inspection(procs, platform=platform)) == []
    assert reap_orphan_desktop_backends(db, [(301, str(db))],
                                        inspection=_inspection(procs)) == []
    assert procs[301].signals == []
    assert reap_orphan_desktop_backends(db, [(301, str(db))], min_age_seconds=10,
                                        inspection=_inspection(procs)) == [301]


def test_setting_default_true_and_off():
    assert reaping.enabled(None) is True
    assert reaping.enabled({"sessions": {}}) is True
    assert reaping.enabled({"sessions": {"reap_orphan_desktop_backends": False}}) is False
    assert reaping.enabled(lambda: {"sessions": {"reap_orphan_desktop_backends": "false"}}) is False
    assert reaping.enabled({"sessions": {"reap_orphan_desktop_backends": True}}) is True
    assert reaping.enabled(lambda: 1 / 0) is True  # unreadable config keeps the default


# ---------------------------------------------------------------------------------------
# Real child processes
# ---------------------------------------------------------------------------------------

#: A backend stand-in: holds ``argv[1]`` open, optionally connects to a port or drops to
#: uid 65534, writes ``<marker>`` on SIGTERM and exits (or ignores it), prints "ready".
CHILD = textwrap.dedent("""
    import os, signal, socket, sys, time
    hold, marker, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    f = open(hold, "rb")
    keep = []
    if mode.startswith("connect:"):
        s = socket.create_connection(("127.0.0.1", int(mode.split(":")[1])))
        keep.append(s)
    if mode == "other-uid":
        os.setgid(65534); os.setuid(65534)
    def on_term(*_):
        with open(marker, "a") as m:
            m.write("TERM\\n")
        if mode != "ignore-term":
            os._exit(0)
    signal.signal(signal.SIGTERM, on_term)
    print("ready", flush=True)
    time.sleep(60)
""")

#: Spawns CHILD in a new session, prints its pid once it is ready, exits: the child is an
#: orphan (its parent becomes init, ppid 1).
LAUNCHER = textwrap.dedent("""
    import subprocess, sys, os
    p = subprocess.Popen([sys.executable, "-c", sys.argv[1], *sys.argv[2:]],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                         start_new_session=True)
    assert p.stdout.readline().strip() == "ready"
    print(p.pid, flush=True)
    os._exit(0)
""")


class Spawned:
    """The processes this test started (the only ones it may signal)."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.pids: dict[int, float] = {}  # pid -> create_time
        self.direct: list[subprocess.Popen] = []

    def orphan(self, hold: Path, name: str, *argv: str, mode: str = "plain") -> int:
        marker = self.tmp / f"{name}.marker"
        out = subprocess.run([sys.executable, "-c", LAUNCHER, CHILD, str(hold), str(marker), mode,
                              *argv], capture_output=True, text=True, timeout=30, check=True)
        pid = int(out.stdout.strip())
        self.pids[pid] = psutil.Process(pid).create_time()
        return pid

    def child(self, hold: Path, name: str, *argv: str) -> int:
        marker = self.tmp / f"{name}.marker"
        p = subprocess.Popen([sys.executable, "-c", CHILD, str(hold), str(marker), "plain",
                              *argv], stdout=subprocess.PIPE, text=True)
        assert p.stdout.readline().strip() == "ready"
        self.direct.append(p)
        self.pids[p.pid] = psutil.Process(p.pid).create_time()
        return p.pid

    def process(self, pid: int) -> psutil.Process:
        """The reaper's process factory: only pids spawned here, never a recycled one."""
        if pid not in self.pids:
            raise AssertionError(f"the reaper asked for pid {pid}, which this test did not spawn")
        proc = psutil.Process(pid)
        assert proc.create_time() == self.pids[pid]
        return proc

    def marker(self, name: str) -> str:
        path = self.tmp / f"{name}.marker"
        return path.read_text() if path.exists() else ""

    def alive(self, pid: int) -> bool:
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    def cleanup(self) -> None:
        for pid, created in self.pids.items():
            try:
                proc = psutil.Process(pid)
                if proc.create_time() == created:
                    proc.kill()
            except psutil.Error:
                pass
        for p in self.direct:
            p.wait(timeout=10)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reaping is Linux-only")
def test_real_children_meet_and_fail_each_proof(tmp_path):
    db = tmp_path / "state.db"
    with SessionStore(db) as s:
        s.create_session("a", "cli")
    other = tmp_path / "other.bin"
    other.write_bytes(b"x")
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    spawned = Spawned(tmp_path)
    try:
        good = spawned.orphan(db, "good", "serve", "--port", "0")
        stubborn = spawned.orphan(db, "stubborn", "dashboard", "--port=0", mode="ignore-term")
        fixed = spawned.orphan(db, "fixed", "serve", "--port", "8080")
        cli = spawned.orphan(db, "cli", "chat", "--port", "0")
        parented = spawned.child(db, "parented", "serve", "--port", "0")
        client = spawned.orphan(db, "client", "serve", "--port", "0", mode=f"connect:{port}")
        accepted, _ = listener.accept()
        unproven = spawned.orphan(other, "unproven", "serve", "--port", "0")
        other_uid = (spawned.orphan(db, "otheruid", "serve", "--port", "0", mode="other-uid")
                     if os.getuid() == 0 else None)
        gone_pid = spawned.child(other, "gone", "serve", "--port", "0")
        spawned.direct[-1].kill()
        spawned.direct[-1].wait()  # reaped: inspecting it raises NoSuchProcess

        for pid in (good, stubborn, fixed, cli, client):
            assert psutil.Process(pid).ppid() == 1
        # The shared holder scan finds them by descriptor (not the unproven one).
        scanned = {pid for pid, _ in reaping.scan_holders(db)}
        assert {good, stubborn, fixed, cli, parented, client} <= scanned
        assert unproven not in scanned and os.getpid() not in scanned
        holders = [*reaping.scan_holders(db), (unproven, str(db)), (gone_pid, str(db)),
                   (os.getpid(), str(db))]

        # Real clock: every candidate is younger than 60 s -> nothing signalled.
        young = Inspection(process=spawned.process)
        assert reap_orphan_desktop_backends(db, holders, inspection=young) == []
        # Two minutes later: only the two orphan ephemeral-port backends qualify.
        later = Inspection(process=spawned.process, clock=lambda: time.time() + 120)
        t0 = time.monotonic()
        got = reap_orphan_desktop_backends(db, holders, inspection=later)
        elapsed = time.monotonic() - t0
        assert sorted(got) == sorted([good, stubborn])
        assert spawned.marker("good") == "TERM\n" and spawned.marker("stubborn") == "TERM\n"
        assert not spawned.alive(good) and not spawned.alive(stubborn)  # SIGKILL after 1.5 s
        assert elapsed >= reaping.WAIT_SECONDS
        for pid in (fixed, cli, parented, client, unproven, *([other_uid] if other_uid else [])):
            assert spawned.alive(pid), pid
        for name in ("fixed", "cli", "parented", "client", "unproven", "otheruid"):
            assert spawned.marker(name) == ""
        accepted.close()
    finally:
        listener.close()
        spawned.cleanup()


def test_scan_is_the_shared_holder_scan(tmp_path):
    from hermes_data.sessions.storage import filesafety

    db = tmp_path / "state.db"
    seen = []
    filesafety.set_holder_scanner(lambda p: seen.append(p) or [(4242, "uninspectable")])
    try:
        assert reaping.scan_holders(db) == [(4242, "uninspectable")]
    finally:
        filesafety.set_holder_scanner(None)
    assert seen == [db]
    assert reaping.scan_holders(None)[0][0] == -1
