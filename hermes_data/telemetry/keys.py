"""Cache keys of the telemetry store, shared by the writes that fill a cache and the reads
that look it up (neither module imports the other for them)."""

from __future__ import annotations


def efficiency_cache_key(window_hours: int, include_deleted: bool, limit_n: int) -> str:
    """The upstream key of ``model_efficiency_cache``: ``str((window_hours, 0|1, limit))``."""
    return str((int(window_hours), 1 if include_deleted else 0, int(limit_n)))
