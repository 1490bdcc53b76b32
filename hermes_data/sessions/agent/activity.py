"""Activity heartbeat and labels of the agent turn API (docs/sessions-agent.md §3.7),
and the title helpers of docs/sessions-agent.md §3.10.

The heartbeat is observation-only and sits on the response path (#76354): its writes wait
at most 0.5 s for the write lock and give up quietly (False) rather than delay a reply.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from hermes_data.storable import check_text
from hermes_data.errors import DatabaseBusyError
from hermes_data.sessions.core import encoding as enc
from hermes_data.sessions.core.titles import TITLE_RANKS
from hermes_data.sessions.rows import ActivitySnapshot
from hermes_data.sessions.handle import StoreHandle
from hermes_data.sessions.sql.predicates import EPOCH_MAX, EPOCH_MIN
from hermes_data.sessions.agent.session_meta_sql import MetaStatements, for_dialect

log = logging.getLogger("hermes_data.sessions.agent.activity")

#: Write patience of the activity writes, seconds.
ACTIVITY_PATIENCE_S = 0.5
#: The provenance values kept; anything else is stored as ``unknown``.
PROVENANCES = frozenset({"unknown", "agent.compression", "agent.compression_timeout",
                         "agent.compression_cooldown", "agent.compression_turnhold",
                         "agent.session_turn_lease"})
#: Longest description kept (longer ones end with an ellipsis).
MAX_DESCRIPTION = 120
#: Title sources ``set_session_title_source`` accepts.
TITLE_SOURCES = tuple(TITLE_RANKS)  # derived, llm, user: lowest to highest rank


def _m(store: StoreHandle) -> MetaStatements:
    return for_dialect(store.backend.dialect)


def clean_description(description: Any) -> str | None:
    """Stripped, scrubbed (lone surrogates and NUL → U+FFFD), at most 120 characters (``…``
    marks a cut)."""
    if description is None:
        return None
    text = enc.scrub_label(str(description).strip()) or ""
    return text if len(text) <= MAX_DESCRIPTION else text[:MAX_DESCRIPTION - 1] + "…"


def clean_provenance(provenance: Any) -> str:
    """The provenance if it is one of :data:`PROVENANCES`, else ``unknown``."""
    return provenance if isinstance(provenance, str) and provenance in PROVENANCES else "unknown"


def _quiet_write(store: StoreHandle, what: str, session_id: str, fn: Any) -> bool:
    try:
        return bool(store.backend.write(fn, patience=ACTIVITY_PATIENCE_S))
    except DatabaseBusyError:
        log.debug("%s of session %s skipped: the write lock stayed busy", what, session_id)
        return False


def touch_session_activity(store: StoreHandle, session_id: str, ts: float | None = None, *,
                           description: str | None = None,
                           provenance: str | None = None) -> bool:
    """Move the session's activity heartbeat forward to ``ts`` (default now) with its label;
    never backwards (a stored value outside the epoch window is overwritten). A timestamp
    that is not a number in the window writes nothing; a busy store ⇒ False after 0.5 s."""
    check_text("session_id", session_id)
    when = enc.now() if ts is None else ts
    if not session_id or isinstance(when, bool) or not isinstance(when, (int, float)) \
            or not math.isfinite(when) or not EPOCH_MIN <= when < EPOCH_MAX:
        return False
    params = (float(when), clean_description(description), clean_provenance(provenance),
              session_id, float(when), EPOCH_MIN, EPOCH_MAX)
    st = _m(store).TOUCH_ACTIVITY
    return _quiet_write(store, "activity touch", session_id,
                        lambda c: c.exec_driver_sql(st, params).rowcount == 1)


def clear_session_activity_labels(store: StoreHandle, session_id: str) -> bool:
    """Clear the activity description and provenance (the timestamp stays). A row already
    clear (or missing) is not written at all: this runs in every turn's ``finally``."""
    check_text("session_id", session_id)
    if not session_id:
        return False
    m = _m(store)
    row = store.backend.read(lambda c: c.exec_driver_sql(m.ACTIVITY, (session_id,)).first())
    if row is None or (not row[1] and row[2] in (None, "", "unknown")):
        return False
    return _quiet_write(store, "activity clear", session_id, lambda c: c.exec_driver_sql(
        m.CLEAR_ACTIVITY_LABELS, (session_id,)).rowcount == 1)


def get_session_activity(store: StoreHandle, session_id: str) -> ActivitySnapshot | None:
    """The activity columns of ``session_id`` and seconds since (no token flush)."""
    if not session_id:
        return None
    m = _m(store)
    row = store.backend.read(lambda c: c.exec_driver_sql(m.ACTIVITY, (session_id,)).first())
    if row is None:
        return None
    at = row[0]
    since = None if at is None else round(enc.now() - float(at), 1)
    return ActivitySnapshot(at, row[1], row[2], since)


def set_auto_title_if_empty(store: Any, session_id: str, title: str | None) -> bool:
    """``set_auto_title(session_id, title, source='llm')`` (upstream's public shim, kept)."""
    return bool(store.set_auto_title(session_id, title, "llm"))


def _title(store: StoreHandle, session_id: str) -> tuple[Any, Any] | None:
    if not session_id:
        return None
    m = _m(store)
    return store.backend.read(lambda c: c.exec_driver_sql(m.TITLE, (session_id,)).first())


def get_session_title(store: StoreHandle, session_id: str) -> str | None:
    """The session's title, or None."""
    row = _title(store, session_id)
    return None if row is None else row[0]


def get_session_title_source(store: StoreHandle, session_id: str) -> str | None:
    """Where the title came from (``derived``/``llm``/``user``); None when untitled."""
    row = _title(store, session_id)
    return None if row is None or row[0] is None else row[1]


def set_session_title_source(store: StoreHandle, session_id: str, source: str) -> bool:
    """Re-label a titled session's title source; ``ValueError`` outside derived/llm/user."""
    if source not in TITLE_SOURCES:
        raise ValueError(f"title source must be one of {', '.join(TITLE_SOURCES)}, "
                         f"not {source!r}")
    check_text("session_id", session_id)
    if not session_id:
        return False
    return store.backend.write(lambda c: c.exec_driver_sql(
        _m(store).SET_TITLE_SOURCE, (source, session_id)).rowcount == 1)

