"""Timestamps in the telemetry store's canonical text form."""

from __future__ import annotations

from datetime import datetime, timezone


def utcnow_iso() -> str:
    """Current UTC time as ``datetime.isoformat()`` text (``YYYY-MM-DDTHH:MM:SS.ffffff+00:00``),
    the form every legacy row holds, so text comparisons order correctly."""
    return datetime.now(timezone.utc).isoformat()
