"""Normalising values at the telemetry write boundary: timestamps to the canonical ISO
text, hook payload fields to storable text and integers (lone surrogates, NUL, junk and
overflow never cost a row)."""

from __future__ import annotations

import re
from datetime import datetime, timezone

from hermes_data import storable

_INT64_MAX = 2**63 - 1
#: An integer written in ASCII digits ('²' and '-+5' are junk: str.isdigit() accepts the first,
#: int() refuses both).
_DECIMAL = re.compile(r"[+-]?[0-9]+")

#: Run statuses that a later ``ok`` does not overwrite unless asked (docs/telemetry.md §8.5). Kept here,
#: not in :mod:`.types` (which re-exports it): the write path does not import the 20 row
#: dataclasses of the read API (~30 ms of a cold start, issue 14).
TERMINAL_STATUSES = ("error", "interrupted")

#: A cron session id, ``cron_{job_id}_{YYYYMMDD}_{HHMMSS}`` (docs/telemetry.md §5.2): the
#: hook layer's anchored pattern, kept as it is — the greedy ``.+`` leaves underscores in the
#: job id, and only the last two ``_``-separated groups are the date and the time.
CRON_SESSION_ID = re.compile(r"^cron_(?P<job_id>.+)_\d{8}_\d{6}$")


def to_iso(value: str | datetime | None) -> str:
    """``value`` in the canonical stored form (``None`` → now; strings pass through)."""
    if value is None:
        return datetime.now(timezone.utc).isoformat()
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: pass an aware datetime (UTC)")
        return value.astimezone(timezone.utc).isoformat()
    return value


def cron_job_id_from_session_id(session_id: object) -> str | None:
    """The cron job id a cron session id carries, else ``None``.

    ``cron_my_job_2_20260101_120000`` → ``my_job_2``; an id without the ``cron_`` prefix, without
    a job part, or whose suffix is not ``_<8 digits>_<6 digits>`` gives ``None``, as does a
    value that is not a string. The caller decides when to ask (upstream: only for runs whose
    platform is ``cron``, docs/telemetry.md §5.2).
    """
    if not isinstance(session_id, str):
        return None
    found = CRON_SESSION_ID.match(session_id)
    return found.group("job_id") if found else None


def clean_text(value: object) -> str:
    """Storable text: ``None`` → ``''``, non-strings → ``str()``, lone surrogates → U+FFFD."""
    if value is None:
        return ""
    if not isinstance(value, str):
        try:
            value = str(value)
        except Exception:  # a hostile __str__ must not cost the row
            return ""
    if value.isascii():
        return value.replace("\x00", "\ufffd") if "\x00" in value else value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        # Re-pair surrogate pairs, replace the unpaired ones with U+FFFD.
        value = value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return value.replace("\x00", "\ufffd") if "\x00" in value else value


def opt_text(value: object) -> str | None:
    """Optional identifier: ``None`` / ``''`` → ``None`` (NULL), else storable text."""
    if value is None or value == "":
        return None
    text = clean_text(value)
    return text or None


def opt_int(value: object) -> int | None:
    """An integer the column can hold, else ``None`` (bools, floats with fractions, junk)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if -_INT64_MAX - 1 <= value <= _INT64_MAX else None
    if isinstance(value, str) and _DECIMAL.fullmatch(value.strip()):
        return opt_int(int(value.strip()))
    if isinstance(value, float) and value.is_integer():
        return opt_int(int(value))
    return None


def duration_ms_from_seconds(api_duration: object) -> int | None:
    """``round(float(api_duration) * 1000)``, or ``None`` when the value cannot be read.

    NaN, ±inf, non-numeric strings, bools, containers and results beyond a 64-bit integer
    all give ``None`` — the honest value for a duration we could not read.
    """
    if api_duration is None or isinstance(api_duration, bool):
        return None
    try:
        ms = round(float(api_duration) * 1000)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return None
    return ms if -_INT64_MAX - 1 <= ms <= _INT64_MAX else None


def retryable_flag(value: object) -> int | None:
    """``True`` → 1, ``False`` → 0, anything else (unknown) → NULL."""
    return 1 if value is True else 0 if value is False else None


#: The text arguments of a call record, in the order :func:`check_texts` receives them.
LLM_CALL_TEXT = ("session_id", "ts", "model", "provider", "moa_preset", "turn_id", "task_id",
                 "api_request_id", "sender_id", "profile")
TOOL_CALL_TEXT = ("session_id", "ts", "tool_name", "turn_id", "tool_call_id")


def check_texts(names: tuple[str, ...], values: tuple[object, ...]) -> None:
    """Refuse, before anything is written, a call whose identifiers the row stores verbatim
    hold NUL or a lone surrogate (:class:`~hermes_data.errors.UnstorableValueError` naming
    the argument, issue 31). Hot path: one join and two C scans when every value is fine."""
    joined = "".join([v for v in values if v.__class__ is str])
    if not storable.is_storable(joined):
        storable.check_texts(zip(names, values))
