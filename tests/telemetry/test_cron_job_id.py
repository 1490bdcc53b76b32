"""Issue 33 (telemetry, item 5): ``start_run`` reads the cron job id from a cron session id
when the caller passes none, by upstream's hook-layer rule (docs/telemetry.md §5.2): only
for ``platform == 'cron'``, the anchored ``^cron_(?P<job_id>.+)_\\d{8}_\\d{6}$`` with a
greedy job part, no match → NULL and a warning. An explicit ``cron_job_id`` always wins."""

from __future__ import annotations

import logging

import pytest

from hermes_data.telemetry import cron_job_id_from_session_id, list_cron_job_ids
from hermes_data.telemetry import reads as R
from hermes_data.telemetry import writes as W

from .conftest import NOW, iso

READS = [
    ("cron_nightly_20260721_120000", "nightly"),
    # The greedy job part keeps underscores, digits and even a date-like group.
    ("cron_my_job_2_20260101_120000", "my_job_2"),
    ("cron_backup_20260101_20260102_030405", "backup_20260101"),
    ("cron___20260101_120000", "_"),
    ("cron_a-b.c d_20260101_000000", "a-b.c d"),
    ("cron_ジョブ_20260101_120000", "ジョブ"),
]

NOT_CRON = [
    "20260721_120000_1a2b3c",             # a CLI / chat id
    "cron_20260101_120000",               # no job part
    "cron__20260101_120000",              # an empty job part
    "cron_job",                           # no suffix at all
    "cron_job_2026010_120000",            # a 7-digit date
    "cron_job_20260101_12000",            # a 5-digit time
    "cron_job_20260101_1200000",          # a 7-digit time
    "cron_job_20260101-120000",           # '-' instead of '_'
    "cron_job_20260101120000",            # date and time run together
    "cron_job_20260101_120000_extra",     # anything after the time
    "cron_job_2026o101_120000",           # a letter in the date
    "Cron_job_20260101_120000",           # the prefix is case-sensitive
    "cron-job_20260101_120000",           # 'cron-' is not 'cron_'
    "xcron_job_20260101_120000",          # anchored at the start
    " cron_job_20260101_120000",          # … exactly
    "telegram_cron_job_20260101_120000",
    "",
]


@pytest.mark.parametrize("session_id,job", READS)
def test_a_cron_session_id_gives_its_job(session_id, job):
    assert cron_job_id_from_session_id(session_id) == job


@pytest.mark.parametrize("session_id", NOT_CRON)
def test_ids_that_are_not_cron_ids_give_none(session_id):
    assert cron_job_id_from_session_id(session_id) is None


@pytest.mark.parametrize("value", [None, 42, b"cron_job_20260101_120000"])
def test_a_value_that_is_not_text_gives_none(value):
    assert cron_job_id_from_session_id(value) is None


def test_start_run_reads_the_job_of_a_cron_run(store):
    """Both backends: the parsed id is stored and the per-job reads see it."""
    W.start_run(store, "cron_my_job_2_20260720_150000", "m", "cron", started_at=NOW)
    W.start_run(store, "cron_nightly_20260720_150001", "m", "cron", started_at=NOW)
    assert R.get_run(store, "cron_my_job_2_20260720_150000").cron_job_id == "my_job_2"
    assert list_cron_job_ids(store, iso(2026, 7, 20, 0, 0, 0)) == ["my_job_2", "nightly"]


def test_an_explicit_cron_job_id_wins(store):
    W.start_run(store, "cron_nightly_20260720_150000", "m", "cron", "weekly", started_at=NOW)
    W.start_run(store, "cron_nightly_20260720_150001", "m", "cron", cron_job_id="",
                started_at=NOW)
    assert R.get_run(store, "cron_nightly_20260720_150000").cron_job_id == "weekly"
    # '' is the caller's "no job": stored as NULL, the id is not read.
    assert R.get_run(store, "cron_nightly_20260720_150001").cron_job_id is None


@pytest.mark.parametrize("platform", ["cli", "telegram", None, "Cron", "cron "])
def test_only_a_cron_platform_is_parsed(store, platform):
    W.start_run(store, "cron_nightly_20260720_150000", "m", platform, started_at=NOW)
    assert R.get_run(store, "cron_nightly_20260720_150000").cron_job_id is None


@pytest.mark.parametrize("session_id", ["20260720_150000_1a2b3c", "cron__20260720_150000",
                                        "cron_job_20260720_150000_x"])
def test_a_cron_run_whose_id_does_not_read_stays_null_with_a_warning(store, caplog,
                                                                     session_id):
    with caplog.at_level(logging.WARNING, logger="hermes_data.telemetry.writes"):
        W.start_run(store, session_id, "m", "cron", started_at=NOW)
    run = R.get_run(store, session_id)
    assert run.platform == "cron" and run.cron_job_id is None
    warnings = [r for r in caplog.records if r.name == "hermes_data.telemetry.writes"
                and r.levelno == logging.WARNING]
    assert len(warnings) == 1 and session_id in warnings[0].getMessage()


def test_a_parsed_job_is_no_warning(store, caplog):
    with caplog.at_level(logging.WARNING, logger="hermes_data.telemetry.writes"):
        W.start_run(store, "cron_nightly_20260720_150000", "m", "cron", started_at=NOW)
    assert not [r for r in caplog.records if r.name == "hermes_data.telemetry.writes"]


def test_the_parsed_job_fills_a_lazily_created_row(store):
    """A call recorded before the start hook creates the row without a job; the late start
    fills it from the session id (only NULL facts are filled)."""
    sid = "cron_nightly_20260720_150000"
    W.record_llm_call(store, sid, NOW, "m", "p", 1, 1, 0.1, 5)
    assert R.get_run(store, sid).cron_job_id is None
    W.start_run(store, sid, "m", "cron")
    assert R.get_run(store, sid).cron_job_id == "nightly"


def test_a_sqlalchemy_connection_target_parses_too(store):
    with store.engine.connect() as conn:
        W.start_run(conn, "cron_nightly_20260720_150000", "m", "cron", started_at=NOW)
        conn.commit()
    assert R.get_run(store, "cron_nightly_20260720_150000").cron_job_id == "nightly"
