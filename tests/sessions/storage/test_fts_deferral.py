"""Stale-FTS deferral bookkeeping, escalation and the in-process retry (spec
sessions-ext-storage.md §3.8; acceptance §4.21). A real process holds the file; the wall
clock, the retry clock and the reaper are injected."""

from __future__ import annotations

import json
import logging
import sqlite3
import subprocess
import sys

import pytest


from hermes_data.sessions.storage.fts import ddl as fts_ddl
from hermes_data.sessions.storage.fts import deferral as fts_deferral
from hermes_data.sessions.storage.fts import maintenance as fts_maintenance
from hermes_data.sessions.storage.fts.deferral import Deferral, advance, parse
from hermes_data.sessions.store import SessionStore


HOLD = ("import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); "
        "c.execute('select 1 from sessions').fetchall(); print('open', flush=True); "
        "sys.stdin.read()")


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def stale_db(tmp_path):
    path = tmp_path / "state.db"
    with SessionStore(path) as s:
        s.create_session("a", "cli")
        s.append_message("a", "user", "before stale")
    con = sqlite3.connect(path)
    con.execute("INSERT INTO state_meta(key, value) VALUES ('fts_stale', '1')")
    con.commit()
    con.close()
    return path


@pytest.fixture
def holder(stale_db):
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(stale_db)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "open"
    yield p
    if p.poll() is None:
        p.stdin.close()
        p.wait(timeout=10)


def _release(p: subprocess.Popen) -> None:
    p.stdin.close()
    p.wait(timeout=10)


@pytest.fixture
def injected(monkeypatch):
    clock = Clock(1_700_000_000.0)
    reaped: list = []

    def reaper(db_path, holders, **_kw):
        reaped.append(sorted({p for p, _ in holders}))
        return []

    monkeypatch.setattr(fts_deferral, "clock", clock)
    monkeypatch.setattr(fts_deferral, "reaper", reaper)
    return clock, reaped


def _meta(path, key):
    con = sqlite3.connect(path)
    try:
        row = con.execute("SELECT value FROM state_meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else row[0]
    finally:
        con.close()


def _deferral(path) -> dict | None:
    value = _meta(path, "fts_rebuild_deferral")
    return None if value is None else json.loads(value)


def test_opens_count_escalate_once_then_recovery_clears(stale_db, holder, injected, caplog):
    clock, reaped = injected
    for n in (1, 2):
        with SessionStore(stale_db) as s:
            s.append_message("a", "user", f"during stale {n}")
        d = _deferral(stale_db)
        assert d["attempts"] == n and d["holder_pids"] == [holder.pid]
        assert d["first_seen"] == clock.t and not d["futile"]
    assert reaped == []  # 3 attempts and 60 s are both required
    clock.t += 61
    caplog.set_level(logging.ERROR)
    with SessionStore(stale_db):
        pass
    assert reaped == [[holder.pid]]  # the reaper ran once
    assert _deferral(stale_db)["attempts"] == 3
    assert f"pid {holder.pid}" in caplog.text and "Stop those processes" in caplog.text
    assert _meta(stale_db, "fts_stale") is not None
    _release(holder)
    with SessionStore(stale_db) as s:
        assert any("recovered" in r for r in s.open_repairs)
        assert s.get_meta("fts_stale") is None and s.get_meta("fts_rebuild_deferral") is None
        assert len(s.search_messages("during")) == 2


def test_escalation_reaps_then_recovers_when_the_holder_is_gone(stale_db, holder, injected,
                                                                monkeypatch):
    clock, _ = injected

    def reaper(db_path, holders, **_kw):  # the "reaped" holder goes away
        _release(holder)
        return [holder.pid]

    monkeypatch.setattr(fts_deferral, "reaper", reaper)
    for _ in range(2):
        SessionStore(stale_db).close()
    clock.t += 120
    with SessionStore(stale_db) as s:
        assert any("reaped orphan desktop backends" in r for r in s.open_repairs)
        assert any("recovered" in r for r in s.open_repairs)
        assert s.get_meta("fts_stale") is None and s.get_meta("fts_rebuild_deferral") is None


def test_setting_off_never_reaps(stale_db, holder, injected):
    clock, reaped = injected
    off = {"sessions": {"reap_orphan_desktop_backends": False}}
    for _ in range(2):
        SessionStore(stale_db, config=off).close()
    clock.t += 120
    SessionStore(stale_db, config=off).close()
    assert reaped == [] and _deferral(stale_db)["attempts"] == 3


def test_retry_backoff_without_scanning_then_true(stale_db, holder, injected, monkeypatch):
    mono = Clock(5000.0)
    monkeypatch.setattr(fts_maintenance, "clock", mono)
    scans: list = []
    real_scan = fts_deferral.holder_scan
    monkeypatch.setattr(fts_deferral, "holder_scan",
                        lambda p: scans.append(p) or real_scan(p))
    with SessionStore(stale_db) as s:  # a long-lived gateway handle
        opened_scans = len(scans)
        assert s.retry_deferred_fts_recovery() is False  # held
        assert len(scans) == opened_scans + 1
        assert _deferral(stale_db)["attempts"] == 2
        mono.t += 59  # within the 60 s backoff: no scan at all
        assert s.retry_deferred_fts_recovery() is False
        assert len(scans) == opened_scans + 1
        mono.t += 2
        assert s.retry_deferred_fts_recovery() is False  # still held; backoff now 120 s
        mono.t += 100
        assert s.retry_deferred_fts_recovery() is False
        assert len(scans) == opened_scans + 2
        _release(holder)
        mono.t += 21
        s.append_message("a", "user", "zebra written while stale")
        assert s.retry_deferred_fts_recovery() is True
        assert s.get_meta("fts_stale") is None and s.get_meta("fts_rebuild_deferral") is None
        assert s.fts_available["messages_fts"]
        assert [r.route for r in s.search_messages("zebra")] == ["fts"]
        names = {r[0] for r in sqlite3.connect(stale_db).execute(
            "SELECT name FROM sqlite_master WHERE type = 'trigger'")}
        assert set(fts_ddl.FTS_TRIGGERS) <= names
        assert s.retry_deferred_fts_recovery() is False  # nothing stale any more


def test_retry_never_raises(stale_db, monkeypatch):
    def broken(_p):
        raise RuntimeError("scan exploded")

    s = SessionStore(stale_db)
    monkeypatch.setattr(fts_deferral, "holder_scan", broken)
    try:
        assert s.retry_deferred_fts_recovery() is False
    finally:
        s.close()
    assert s.retry_deferred_fts_recovery() is False  # closed handle


def test_record_rules():
    now = 10_000.0
    d = advance(None, [(42, "db"), (-1, "scan failed"), (7, "db-wal")], now)
    assert d == Deferral(now, now, 1, [7, 42], now, 1, False)
    d2 = advance(d, [(7, "x"), (42, "y")], now + 10)
    assert (d2.attempts, d2.holders_attempts, d2.holders_since, d2.first_seen) == (2, 2, now, now)
    d3 = advance(d2, [(8, "x")], now + 20)  # a changed set resets the holder counters
    assert (d3.attempts, d3.holders_attempts, d3.holders_since) == (3, 1, now + 20)
    future = Deferral(now + 999, now, 4, [8], now + 999, 1, False)
    assert advance(future, [(8, "x")], now).first_seen == now  # future first_seen ⇒ now
    d = d3
    for i in range(4):
        d = advance(d, [(8, "x")], now + 20 + 3600 + i)
    assert d.holders_attempts == 5 and d.futile
    assert not advance(d, [], now + 9000).futile  # no holders, not futile
    assert parse("{not json") is None and parse('{"attempts": 1}') is None
    assert parse(json.dumps(d.__dict__)) == d


def test_doctor_reports_a_futile_deferral(stale_db):
    from hermes_data.cli.doctor import doctor

    record = Deferral(1000.0, 9000.0, 9, [4242], 1000.0, 9, True)
    con = sqlite3.connect(stale_db)
    con.execute("INSERT INTO state_meta(key, value) VALUES ('fts_rebuild_deferral', ?)",
                (json.dumps(record.__dict__),))
    con.commit()
    con.close()
    report = doctor("sessions", str(stale_db))
    assert report.facts["fts_rebuild_deferral"]["attempts"] == 9
    assert any("4242" in w and "deferred 9 times" in w for w in report.warnings)
