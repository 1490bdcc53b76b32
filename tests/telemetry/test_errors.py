"""The v18 failure ledger: record_llm_call_error and the api_request_error payload rules."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from hermes_data.telemetry import reads as R
from hermes_data.telemetry import writes as W

from .conftest import NOW, sql

LIVE_404 = {
    "session_id": "s1", "turn_id": "s1:t:0001", "task_id": "t", "api_request_id": "req-1",
    "api_call_count": 3, "provider": "openrouter", "status_code": 404, "reason": "model_not_found",
    "retryable": False, "retry_count": 0, "max_retries": 2, "api_duration": 1.2344,
    "error": {"type": "NotFoundError", "message": "model vendor/gone does not exist"},
    "request": {"method": "POST", "body": {"model": "vendor/gone", "messages": []}},
}


def ledger(store, session_id="s1"):
    return R.llm_call_errors_for_session(store, session_id)


def test_live_shaped_404_writes_ledger_row_and_alert(store):
    out = W.record_api_request_error(store, LIVE_404)
    [row] = ledger(store)
    assert (row.model, row.provider, row.error_type, row.error_message) == \
        ("vendor/gone", "openrouter", "NotFoundError", "model vendor/gone does not exist")
    assert (row.status_code, row.retryable, row.duration_ms, row.reason) == (404, 0, 1234, "model_not_found")
    assert (row.turn_id, row.task_id, row.api_request_id, row.api_call_count,
            row.retry_count, row.max_retries) == ("s1:t:0001", "t", "req-1", 3, 0, 2)
    assert out.error_id == row.id
    assert out.alert is not None and out.alert.error_message == "model vendor/gone does not exist"
    assert R.get_model_unavailable(store, "vendor/gone", "openrouter").occurrences == 1


def test_flat_names_are_the_fallback_for_older_hosts(store):
    payload = {"session_id": "s1", "status_code": 404, "retryable": False,
               "error_type": "Flat", "error_message": "flat message",
               "api_kwargs": {"model": "flat/model"}, "model": "kwarg/model"}
    W.record_api_request_error(store, payload)
    W.record_api_request_error(store, {"session_id": "s1", "model": "kwarg/model"})
    rows = ledger(store)
    assert (rows[0].model, rows[0].error_type, rows[0].error_message) == \
        ("flat/model", "Flat", "flat message")
    assert rows[1].model == "kwarg/model"
    # nested wins over flat when both are present
    W.record_api_request_error(store, {**payload, "error": {"type": "N", "message": "nested"},
                                       "request": {"body": {"model": "nested/model"}}})
    assert (ledger(store)[2].model, ledger(store)[2].error_message) == ("nested/model", "nested")


@pytest.mark.parametrize("retryable, stored, alerts", [
    (False, 0, True), (True, 1, False), (None, None, False), ("false", None, False), (0, None, False),
])
def test_retryable_storage_and_identity_guard(store, retryable, stored, alerts):
    payload = {**LIVE_404, "retryable": retryable}
    if retryable is None:
        del payload["retryable"]
    out = W.record_api_request_error(store, payload)
    assert ledger(store)[0].retryable == stored
    assert (out.alert is not None) is alerts
    assert (R.get_model_unavailable(store, "vendor/gone", "openrouter") is not None) is alerts


def test_non_404_writes_ledger_only_and_every_attempt_is_a_row(store):
    for _ in range(3):
        W.record_api_request_error(store, {**LIVE_404, "status_code": 429, "retryable": True})
    W.record_api_request_error(store, {**LIVE_404, "status_code": 500})
    assert [r.status_code for r in ledger(store)] == [429, 429, 429, 500]
    assert R.recent_model_unavailable(store, 0) == []


@pytest.mark.parametrize("duration, expected", [
    (1.5, 1500), ("2.25", 2250), (0, 0), (None, None), (math.nan, None), (math.inf, None),
    (-math.inf, None), ("abc", None), ("nan", None), ("1e400", None), (1e300, None),
    (10**30, None), (True, None), ([1], None), ({"s": 1}, None),
])
def test_api_duration_seconds_to_ms_never_costs_the_row(store, duration, expected):
    out = W.record_api_request_error(store, {**LIVE_404, "api_duration": duration})
    [row] = ledger(store)
    assert row.duration_ms == expected and out.duration_ms == expected
    assert out.alert is not None  # an unreadable duration does not kill the 404 alert either


def test_omitted_text_is_empty_and_empty_ids_are_null(store):
    W.record_api_request_error(store, {"session_id": "s1", "turn_id": "", "task_id": "",
                                       "api_request_id": ""})
    [row] = ledger(store)
    assert (row.model, row.provider, row.error_type, row.error_message, row.reason) == ("",) * 5
    assert (row.turn_id, row.task_id, row.api_request_id, row.status_code, row.retryable,
            row.duration_ms) == (None,) * 6
    W.record_api_request_error(store, {})  # no session at all: '' (the column is NOT NULL)
    assert len(ledger(store, "")) == 1


def test_message_truncated_to_500_at_the_write_boundary(store):
    W.record_llm_call_error(store, session_id="s1", error_message="é" * 800)
    W.record_api_request_error(store, {**LIVE_404, "error": {"type": "x", "message": "m" * 900}})
    rows = ledger(store)
    assert [len(r.error_message) for r in rows] == [500, 500]
    assert len(R.get_model_unavailable(store, "vendor/gone", "openrouter").error_message) == 500


def test_provider_falls_back_to_the_sessions_run(store):
    W.record_llm_call(store, "s1", NOW, "vendor/gone", "run-provider", 1, 1, 0.1, 1)
    out = W.record_api_request_error(store, {**LIVE_404, "provider": ""})
    assert ledger(store)[0].provider == "run-provider" and out.provider == "run-provider"
    assert R.get_model_unavailable(store, "vendor/gone", "run-provider") is not None
    W.record_api_request_error(store, {**LIVE_404, "session_id": "unknown", "provider": None})
    assert ledger(store, "unknown")[0].provider == ""


def test_lone_surrogates_become_replacement_characters(store):
    W.record_api_request_error(store, {**LIVE_404, "error": {"type": "\ud800", "message": "a\udfffb"},
                                       "request": {"body": {"model": "m\ud83d\ude00"}}})
    [row] = ledger(store)
    assert row.error_type == "\ufffd" and row.error_message == "a\ufffdb"
    assert row.model == "m\U0001F600"  # a valid surrogate pair is re-joined


def test_nul_characters_become_replacement_characters_on_both_backends(store):
    # PostgreSQL text cannot hold U+0000; the row is kept with U+FFFD instead, on both backends.
    out = W.record_api_request_error(store, {**LIVE_404, "error": {"type": "a\x00b", "message": "\x00"},
                                             "reason": "r\x00\u00e9"})
    assert out.error_id is not None
    [row] = ledger(store)
    assert (row.error_type, row.error_message, row.reason) == ("a\ufffdb", "\ufffd", "r\ufffd\u00e9")


# ----------------------------------------------------------------------------- hypothesis
_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=40),
    st.text(alphabet=st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), max_size=4),
)
_values = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=8)
_keys = st.sampled_from([
    "session_id", "turn_id", "task_id", "api_request_id", "api_call_count", "model", "provider",
    "status_code", "reason", "retryable", "retry_count", "max_retries", "api_duration",
    "error_type", "error_message", "error", "request", "api_kwargs",
])
_nested = st.fixed_dictionaries({}, optional={
    "error": st.dictionaries(st.sampled_from(["type", "message"]), _values, max_size=2),
    "request": st.fixed_dictionaries({}, optional={
        "body": st.dictionaries(st.sampled_from(["model", "messages"]), _values, max_size=2)}),
})
_payloads = st.builds(lambda a, b: {**a, **b}, st.dictionaries(_keys, _values, max_size=10), _nested)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payload=_payloads)
def test_hostile_payloads_never_raise_and_always_leave_a_bounded_row(store, payload):
    out = W.record_api_request_error(store, payload)
    assert out.error_id is not None  # the ledger row was written
    row, = sql(store,
               "SELECT error_message, duration_ms, retryable, status_code, turn_id, model "
               "FROM llm_call_errors WHERE id = ?", out.error_id)
    message, duration_ms, retryable, status_code, turn_id, model = row
    assert len(message) <= 500
    assert duration_ms is None or isinstance(duration_ms, int)
    assert retryable in (0, 1, None) and (retryable is not None) == isinstance(payload.get("retryable"), bool)
    assert status_code is None or isinstance(status_code, int)
    assert turn_id != ""
    assert model == out.model
    # the alert fired exactly when the identity guard says so
    should_alert = out.status_code == 404 and payload.get("retryable") is False and bool(out.model)
    assert (out.alert is not None) is should_alert


def test_integer_fields_refuse_digits_int_cannot_read():
    """The example hypothesis found: '²' passes str.isdigit() but int() refuses it; junk
    becomes NULL like any other junk instead of raising."""
    from hermes_data.telemetry.values import opt_int

    assert opt_int("²") is None and opt_int("-+5") is None and opt_int("٣") is None
    assert opt_int(" 42 ") == 42 and opt_int("-7") == -7 and opt_int("+3") == 3
