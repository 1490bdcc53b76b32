"""Telegram DM topic mode (docs/sessions-gateway.md §3.8; profile-namespaced, seed 003
#76423): per-chat topic mode, one topic per session.

SQLite: the tables are the user's ``/topic`` opt-in — :func:`apply_telegram_topic_migration`
creates or upgrades them (v1/v2 ⇒ v3) in one write transaction; readers answer empty while
they are absent (detected by inspection, never by catching every error). PostgreSQL: the
revision created them; bind, delete, enable and disable first take a transaction-scoped
advisory lock on ``(profile, chat)`` so "last binding of the chat" cannot race a bind.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from hermes_data.storable import check_texts
from hermes_data.errors import DatabaseBusyError
from hermes_data.sessions.rows import SessionRichRow
from hermes_data.sessions.errors import SessionNotFoundError
from hermes_data.sessions.gateway.common import wall
from hermes_data.sessions.handle import StoreHandle
from hermes_data.sessions.core.listing import session_fields
from hermes_data.sessions.sql.core import SESSION_ROW_COLS
from hermes_data.sessions.gateway.repair_sql import for_dialect as repair_sql
from hermes_data.sessions.gateway.telegram_sql import (BINDINGS, INDEXES, MODE, SCHEMA_KEY, SCHEMA_VERSION, SQLITE_OBJECTS,
                           TABLES, V3_COLUMNS, V3_DDL, TelegramStatements, copy_into_new,
                           drop_table, for_dialect, rename_table, table_columns)

log = logging.getLogger("hermes_data.sessions.gateway")

_ALREADY_LINKED = "session is already linked to another Telegram topic"


@dataclass(frozen=True)
class TopicBinding:
    """One Telegram topic bound to a session."""

    profile_name: str
    chat_id: str
    thread_id: str
    user_id: str
    session_key: str
    session_id: str
    managed_mode: str
    linked_at: float
    updated_at: float

    def as_dict(self) -> dict[str, Any]:
        """Upstream's dict keys."""
        return asdict(self)


def _normalize_telegram_topic_profile_name(profile_name: Any) -> str:
    """``P(x)``: the stripped profile name, or ``'default'``."""
    return str(profile_name or "").strip() or "default"


def _t(store: StoreHandle) -> TelegramStatements:
    return for_dialect(store.backend.dialect)


def _present(conn: Connection, d: str) -> bool:
    return conn.exec_driver_sql(repair_sql(d).TABLE_EXISTS, (BINDINGS,)).first() is not None \
        and conn.exec_driver_sql(repair_sql(d).TABLE_EXISTS, (MODE,)).first() is not None


def _lock(conn: Connection, t: TelegramStatements, profile: str, chat: str) -> None:
    if t.ADVISORY_LOCK is not None:
        conn.exec_driver_sql(t.ADVISORY_LOCK, (f"hermes:tg-topic:{profile}:{chat}",))


# -- the opt-in migration ---------------------------------------------------------------


def _settled_shape(conn: Connection, t: TelegramStatements) -> bool:
    objects = {(str(a), str(b)) for a, b in conn.exec_driver_sql(SQLITE_OBJECTS)}
    names = {n for _, n in objects}
    if any(f"{tb}_new" in names for tb in TABLES) or not all(tb in names for tb in TABLES):
        return False
    if any("profile_name" not in _columns(conn, tb) for tb in TABLES):
        return False
    if not all(name in names for name, _ in INDEXES):
        return False
    return conn.exec_driver_sql(t.META_GET, (SCHEMA_KEY,)).scalar() == SCHEMA_VERSION


def _columns(conn: Connection, table: str) -> list[str]:
    return [str(r[1]) for r in conn.exec_driver_sql(table_columns(table))]


def _migrate(conn: Connection, t: TelegramStatements) -> None:
    names = {str(n) for _, n in conn.exec_driver_sql(SQLITE_OBJECTS)}
    for table in TABLES:  # a crash between DROP and RENAME, or before the DROP
        if f"{table}_new" in names:
            if table in names:
                conn.exec_driver_sql(drop_table(f"{table}_new"))
            else:
                conn.exec_driver_sql(rename_table(f"{table}_new", table))
                names.add(table)
            names.discard(f"{table}_new")
    for table in TABLES:
        if table not in names:
            conn.exec_driver_sql(V3_DDL[table].format(name=table))
            continue
        have = _columns(conn, table)
        if "profile_name" in have:
            continue
        common = [c for c in V3_COLUMNS[table] if c in have and c != "profile_name"]
        total = conn.exec_driver_sql(t.LEGACY_COUNT[table]).scalar() or 0
        conn.exec_driver_sql(V3_DDL[table].format(name=f"{table}_new"))
        copied = conn.exec_driver_sql(copy_into_new(table, common)).rowcount
        conn.exec_driver_sql(drop_table(table))
        conn.exec_driver_sql(rename_table(f"{table}_new", table))
        if copied != total:
            log.warning("%s: %d of %d legacy row(s) named a session that no longer exists and "
                        "were not carried into v3", table, total - copied, total)
        log.info("%s upgraded to v3 (profile 'default', %d row(s))", table, copied)
    dupes = conn.exec_driver_sql(t.DEDUPE_COUNT).scalar() or 0
    if dupes:
        conn.exec_driver_sql(t.DEDUPE)
        log.warning("%s: %d older duplicate binding(s) of one session removed (the newest is "
                    "kept)", BINDINGS, dupes)
    names = {str(n) for _, n in conn.exec_driver_sql(SQLITE_OBJECTS)}
    for name, ddl in INDEXES:
        if name not in names:
            conn.exec_driver_sql(ddl)
    conn.exec_driver_sql(t.META_SET, (SCHEMA_KEY, SCHEMA_VERSION))


def apply_telegram_topic_migration(store: StoreHandle) -> None:
    """Create or upgrade the Telegram topic tables (the opt-in). A settled shape is
    recognised by reads only (cached per handle); otherwise one write transaction: leftover
    ``<t>_new`` tables resolved, v1/v2 tables copied into profile ``'default'`` (bindings of
    missing sessions dropped and counted; v1 gains the cascade), older duplicate bindings of
    one session removed, indexes and the schema key set. PostgreSQL: verified only. The
    handle state's ``telegram_topics_settled`` remembers a settled shape."""
    state = store.backend.state
    if state.telegram_topics_settled:
        return
    t, d = _t(store), store.backend.dialect
    if d != "sqlite":
        if not store.backend.read(lambda c: _present(c, d)):
            raise RuntimeError("the Telegram topic tables are missing on this PostgreSQL store; "
                               "run `hermes-data upgrade --store sessions`")
        state.telegram_topics_settled = True
        return
    if store.backend.read(lambda c: _settled_shape(c, t)):
        state.telegram_topics_settled = True
        return

    def run(conn: Connection) -> None:
        if not _settled_shape(conn, t):
            _migrate(conn, t)

    store.backend.write(run)
    state.telegram_topics_settled = True


# -- mode ---------------------------------------------------------------------------------


def _flag(value: Any) -> int | None:
    return None if value is None else int(bool(value))


def enable_telegram_topic_mode(store: StoreHandle, *, chat_id: Any, user_id: Any,
                               profile_name: str | None = "default",
                               has_topics_enabled: bool | None = None,
                               allows_users_to_create_topics: bool | None = None) -> None:
    """Turn topic mode on for a chat (the opt-in migration first); the latest capability
    probe wins (None stores NULL); ``activated_at`` and the message ids are kept."""
    check_texts((("chat_id", chat_id), ("user_id", user_id), ("profile_name", profile_name)))
    apply_telegram_topic_migration(store)
    t, p, chat = _t(store), _normalize_telegram_topic_profile_name(profile_name), str(chat_id)

    def run(conn: Connection) -> None:
        _lock(conn, t, p, chat)
        now = wall()
        conn.exec_driver_sql(t.ENABLE, (p, chat, str(user_id), now, now,
                                        _flag(has_topics_enabled),
                                        _flag(allows_users_to_create_topics), now))

    store.backend.write(run)


def disable_telegram_topic_mode(store: StoreHandle, *, chat_id: Any,
                                profile_name: str | None = "default",
                                clear_bindings: bool = True) -> bool:
    """Turn topic mode off for a chat (any user) and, with ``clear_bindings``, delete its
    bindings, in one transaction; whether a mode row changed. Never creates the tables
    (absent ⇒ ``False``)."""
    check_texts((("chat_id", chat_id), ("profile_name", profile_name)))
    t, d = _t(store), store.backend.dialect
    p, chat = _normalize_telegram_topic_profile_name(profile_name), str(chat_id)

    def run(conn: Connection) -> bool:
        if not _present(conn, d):
            return False
        _lock(conn, t, p, chat)
        changed = conn.exec_driver_sql(t.DISABLE, (wall(), p, chat)).rowcount > 0
        if clear_bindings:
            conn.exec_driver_sql(t.CLEAR_CHAT, (p, chat))
        return changed

    return store.backend.write(run)


def is_telegram_topic_mode_enabled(store: StoreHandle, *, chat_id: Any, user_id: Any,
                                   profile_name: str | None = "default") -> bool:
    """Whether ``(profile, chat, user)`` has topic mode on (absent tables ⇒ ``False``)."""
    t, d = _t(store), store.backend.dialect
    args = (_normalize_telegram_topic_profile_name(profile_name), str(chat_id), str(user_id))
    return store.backend.read(lambda c: _present(c, d) and c.exec_driver_sql(
        t.IS_ENABLED, args).first() is not None)


# -- bindings -------------------------------------------------------------------------------


def _binding(row: Any) -> TopicBinding:
    a, b, c, e, f, g, h = (str(v) for v in row[:7])
    return TopicBinding(a, b, c, e, f, g, h, float(row[7]), float(row[8]))


def get_telegram_topic_binding(store: StoreHandle, *, chat_id: Any, thread_id: Any,
                               profile_name: str | None = "default") -> TopicBinding | None:
    """The binding of one topic, or None."""
    t, d = _t(store), store.backend.dialect
    args = (_normalize_telegram_topic_profile_name(profile_name), str(chat_id), str(thread_id))

    def run(conn: Connection) -> TopicBinding | None:
        row = conn.exec_driver_sql(t.BINDING, args).first() if _present(conn, d) else None
        return None if row is None else _binding(row)

    return store.backend.read(run)


def get_telegram_topic_binding_by_session(store: StoreHandle, *,
                                          session_id: str) -> TopicBinding | None:
    """The topic a session is bound to (any profile), or None."""
    t, d = _t(store), store.backend.dialect

    def run(conn: Connection) -> TopicBinding | None:
        row = (conn.exec_driver_sql(t.BINDING_BY_SESSION, (session_id,)).first()
               if _present(conn, d) else None)
        return None if row is None else _binding(row)

    return store.backend.read(run)


def list_telegram_topic_bindings_for_chat(store: StoreHandle, *, chat_id: Any,
                                          profile_name: str | None = "default"
                                          ) -> list[TopicBinding]:
    """A chat's bindings, most recently updated first."""
    t, d = _t(store), store.backend.dialect
    args = (_normalize_telegram_topic_profile_name(profile_name), str(chat_id))
    return store.backend.read(lambda c: [_binding(r) for r in c.exec_driver_sql(
        t.BINDINGS_FOR_CHAT, args)] if _present(c, d) else [])


def is_telegram_session_linked_to_topic(store: StoreHandle, *, session_id: str) -> bool:
    """Whether a session is bound to a topic."""
    t, d = _t(store), store.backend.dialect
    return store.backend.read(lambda c: _present(c, d) and c.exec_driver_sql(
        t.LINKED, (session_id,)).first() is not None)


def _integrity(exc: sa.exc.IntegrityError, session_id: str) -> Exception:
    text = str(exc.orig).lower()
    code = getattr(exc.orig, "sqlstate", None)
    if code == "23503" or "foreign key" in text:
        return SessionNotFoundError(f"session {session_id!r} does not exist")
    return ValueError(_ALREADY_LINKED)


def bind_telegram_topic(store: StoreHandle, *, chat_id: Any, thread_id: Any, user_id: Any,
                        session_key: str, session_id: str, managed_mode: str = "auto",
                        profile_name: str | None = "default") -> None:
    """Bind a topic to a session (one topic per session): the opt-in migration, then one
    transaction. A session bound to another topic ⇒ ``ValueError``; an unknown session ⇒
    ``SessionNotFoundError``; re-pointing a topic to another session resets ``linked_at``."""
    if not isinstance(managed_mode, str) or not managed_mode.strip():
        raise ValueError(f"managed_mode must be a non-empty string, got {managed_mode!r}")
    check_texts((("chat_id", chat_id), ("thread_id", thread_id), ("user_id", user_id),
                 ("session_key", session_key), ("session_id", session_id),
                 ("managed_mode", managed_mode), ("profile_name", profile_name)))
    apply_telegram_topic_migration(store)
    t = _t(store)
    p, chat, thread = _normalize_telegram_topic_profile_name(profile_name), str(chat_id), \
        str(thread_id)

    def run(conn: Connection) -> None:
        _lock(conn, t, p, chat)
        row = conn.exec_driver_sql(t.BINDING_BY_SESSION, (session_id,)).first()
        if row is not None and (str(row[0]), str(row[1]), str(row[2])) != (p, chat, thread):
            raise ValueError(_ALREADY_LINKED)
        now = wall()
        conn.exec_driver_sql(t.BIND, (p, chat, thread, str(user_id), session_key, session_id,
                                      managed_mode, now, now))

    try:
        store.backend.write(run)
    except sa.exc.IntegrityError as exc:
        raise _integrity(exc, session_id) from exc


def delete_telegram_topic_binding(store: StoreHandle, *, chat_id: Any, thread_id: Any,
                                  profile_name: str | None = "default") -> int:
    """Delete a topic's binding (after Telegram answered "Thread not found", #31501); when
    it was the chat's last, the chat's mode is disabled in the same transaction. Returns
    bindings deleted (absent tables ⇒ 0). Cleanup hot path: a driver error or a busy store
    is a WARNING and 0; sticky handle errors propagate."""
    check_texts((("chat_id", chat_id), ("thread_id", thread_id), ("profile_name", profile_name)))
    t, d = _t(store), store.backend.dialect
    p, chat, thread = _normalize_telegram_topic_profile_name(profile_name), str(chat_id), \
        str(thread_id)

    def run(conn: Connection) -> int:
        if not _present(conn, d):
            return 0
        _lock(conn, t, p, chat)
        n = conn.exec_driver_sql(t.DELETE_BINDING, (p, chat, thread)).rowcount
        if n and conn.exec_driver_sql(t.CHAT_HAS_BINDINGS, (p, chat)).first() is None:
            conn.exec_driver_sql(t.DISABLE, (wall(), p, chat))
        return n

    try:
        return store.backend.write(run)
    except (DatabaseBusyError, sa.exc.DBAPIError) as exc:
        log.warning("could not delete the Telegram topic binding %s/%s/%s: %s", p, chat,
                    thread, exc)
        return 0


def list_unlinked_telegram_sessions_for_user(store: Any, *, chat_id: Any, user_id: Any,
                                             profile_name: str | None = "default",
                                             limit: int = 10) -> list[SessionRichRow]:
    """A user's Telegram sessions of this profile that no topic is bound to and that did not
    end in ``compression``, most recently active first, with prompt, preview and
    ``last_active``. ``chat_id`` is unused (sessions of any chat are offered); the profile
    clause holds even without the bindings table."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ValueError(f"limit must be an int >= 0, got {limit!r}")
    t, d = _t(store), store.backend.dialect
    args = (str(user_id), _normalize_telegram_topic_profile_name(profile_name), limit)
    rows = store.backend.read(lambda c: c.exec_driver_sql(
        t.UNLINKED[bool(c.exec_driver_sql(repair_sql(d).TABLE_EXISTS, (BINDINGS,)).first())],
        args).fetchall())
    n = len(SESSION_ROW_COLS)
    return [SessionRichRow(**session_fields(r), preview=r[n + 1], last_active=r[n + 2])
            for r in rows]
