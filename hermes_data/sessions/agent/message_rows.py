"""Message-row helpers of the agent turn API (docs/sessions-agent.md §3.6): the latest
user row's ``api_content``, display-kind stamping, role and latest-row lookups, the active
id list and watermark, archived/platform-id probes and the store-wide message count.

Operations take the store first (the facade delegates); statements are in
:mod:`.sql.row_helpers`.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import Connection

from hermes_data.storable import check_texts
from hermes_data.sessions.core import encoding as enc
from hermes_data.sessions.handle import StoreHandle
from hermes_data.sessions.agent.message_rows_sql import BLANK_CHARS, RowHelperStatements, for_dialect


def _s(store: StoreHandle) -> RowHelperStatements:
    return for_dialect(store.backend.dialect)


def _read(store: StoreHandle, statement: str, params: tuple = ()) -> Any:
    return store.backend.read(lambda c: c.exec_driver_sql(statement, params).first())


def set_latest_user_api_content(store: StoreHandle, session_id: str, content: Any,
                                api_content: str | None) -> int:
    """Set ``api_content`` on the newest active user row of ``session_id`` only while its
    content still equals ``content`` (a racing rewrite makes this a no-op); rows changed."""
    api = enc.scrub(api_content)  # lone surrogates → U+FFFD, NUL refused, as appends do
    check_texts((("session_id", session_id), ("api_content", api)))
    if not session_id:
        return 0
    d = store.backend.dialect
    params = (api, session_id, enc.encode_content(content, d))
    return store.backend.write(lambda c: c.exec_driver_sql(
        _s(store).SET_LATEST_USER_API_CONTENT, params).rowcount)


def set_latest_matching_message_display_kind(store: StoreHandle, session_id: str, *, role: str,
                                             content: Any, display_kind: str,
                                             display_metadata: Any = None) -> bool:
    """Stamp ``display_kind`` on the newest active row with ``role`` and ``content``;
    ``display_metadata`` is written only when given (stored reactions survive)."""
    check_texts((("session_id", session_id), ("role", role),
                 ("display_kind", enc.scrub(display_kind))))  # scrubbed, as appends do
    if not session_id or not content or not display_kind:
        return False
    s = _s(store)
    encoded = enc.encode_content(content, store.backend.dialect)
    kind = enc.scrub(display_kind)
    meta = None if display_metadata is None else enc.encode_display_metadata(display_metadata)

    def work(conn: Connection) -> bool:
        row = conn.exec_driver_sql(s.LATEST_MATCHING, (session_id, role, encoded)).first()
        if row is None:
            return False
        if display_metadata is None:
            conn.exec_driver_sql(s.SET_DISPLAY_KIND, (kind, row[0]))
        else:
            conn.exec_driver_sql(s.SET_DISPLAY_KIND_META, (kind, meta, row[0]))
        return True

    return store.backend.write(work)


def get_message_role(store: StoreHandle, session_id: str, row_id: Any) -> str | None:
    """Role of the active row ``row_id`` of ``session_id`` (another session's row ⇒ None)."""
    if not session_id or isinstance(row_id, bool) or not isinstance(row_id, int):
        return None
    row = _read(store, _s(store).MESSAGE_ROLE, (row_id, session_id))
    return None if row is None else row[0]


def latest_message_row_id(store: StoreHandle, session_id: str, *, role: str = "user",
                          offset: int = 0, require_text: bool = True) -> int | None:
    """Id of the newest active ``user``/``assistant`` row, ``offset`` rows back; with
    ``require_text`` only rows with visible text (not blank, not ``hidden``) count."""
    if not session_id or role not in ("user", "assistant") or offset < 0:
        return None
    s = _s(store)
    if require_text:
        row = _read(store, s.LATEST_TEXT_ROW, (session_id, role, BLANK_CHARS, offset))
    else:
        row = _read(store, s.LATEST_ROW, (session_id, role, offset))
    return None if row is None else int(row[0])


def latest_user_message_row_id(store: StoreHandle, session_id: str) -> int | None:
    """``latest_message_row_id(session_id, role='user')`` (upstream's public shim, kept)."""
    return latest_message_row_id(store, session_id, role="user")


def get_active_message_ids(store: StoreHandle, session_id: str) -> list[int]:
    """Active row ids of ``session_id`` ascending (harness rows included)."""
    if not session_id:
        return []
    rows = store.backend.read(lambda c: c.exec_driver_sql(
        _s(store).ACTIVE_IDS, (session_id,)).fetchall())
    return [int(r[0]) for r in rows]


def get_active_message_watermark(store: StoreHandle, session_id: str) -> int:
    """Highest active row id of ``session_id`` (0 when none)."""
    if not session_id:
        return 0
    return int(_read(store, _s(store).ACTIVE_WATERMARK, (session_id,))[0])


def has_archived_messages(store: StoreHandle, session_id: str) -> bool:
    """Whether ``session_id`` has rewound/archived (``active = 0``) rows (diagnostic only)."""
    return bool(session_id) and _read(store, _s(store).HAS_INACTIVE, (session_id,)) is not None


def has_platform_message_id(store: StoreHandle, session_id: str,
                            platform_message_id: str | None) -> bool:
    """Whether any row of ``session_id`` (active or not) carries the platform message id."""
    if not session_id or not platform_message_id:
        return False
    return _read(store, _s(store).HAS_PLATFORM_ID,
                 (session_id, platform_message_id)) is not None


def store_message_count(store: StoreHandle, include_inactive: bool = False) -> int:
    """Message rows of the whole store (active ones unless ``include_inactive``)."""
    s = _s(store)
    return int(_read(store, s.STORE_COUNT_ALL if include_inactive else s.STORE_COUNT_ACTIVE)[0])
