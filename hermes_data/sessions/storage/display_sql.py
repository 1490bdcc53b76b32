"""Display ordering objects of the session store (docs/sessions-ui.md §2.2–§2.4) and the
statements of :mod:`hermes_data.sessions.core.display_order` (docs/sessions-ui.md §3.4, §4.14).

``VIS`` = ``active = 1 OR compacted = 1`` (search visibility). The four SQLite triggers keep
invariant **D1**: within a session, every visible row sharing a non-NULL
``display_identity`` carries one ``display_order`` equal to the smallest id of those rows.
Writes to any column outside their ``OF`` lists (``display_metadata``, ``observed``, flags)
fire none of them (D2).

FROZEN together with ``migrations/sessions/versions/s05_ui_display.py``, which carries its own
copy of these texts: the canonical trigger SQL may only change with a new revision (the
writable open replaces a stored trigger whose normalised text differs from the canonical one
and from every :data:`KNOWN_VARIANT_DIGESTS`).
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import sqlalchemy as sa
from sqlalchemy import text

from hermes_data.sessions.schema import messages
from hermes_data.sessions.sql.constructs import bp, const
from hermes_data.sessions.sql.ddl import checked_drop
from hermes_data.statements import DriverPrepared

#: The visibility predicate of docs/sessions-ui.md §2.2, as the partial indexes and the triggers spell it.
VIS = "(active = 1 OR compacted = 1)"

_PEER_ORDER = ("(SELECT MIN(display_order) FROM messages WHERE session_id = new.session_id "
               f"AND display_identity = new.display_identity AND id <> new.id AND {VIS})")


def _group_min(r: str) -> str:
    # Smallest id of the visible group of row ``r`` (``old``/``new``). ``+id``: seek the group on
    # idx_messages_display_identity, never walk the session's (session_id, id) index.
    return (f"(SELECT MIN(+id) FROM messages WHERE session_id = {r}.session_id "
            f"AND display_identity = {r}.display_identity AND {VIS})")


def _in_group(r: str) -> str:
    return f"session_id = {r}.session_id AND display_identity = {r}.display_identity AND {VIS}"


_NEW_VIS = "(new.active = 1 OR new.compacted = 1)"
_OLD_VIS = "(old.active = 1 OR old.compacted = 1)"
#: The columns of the display dedupe key (plus ``display_kind``): a change makes rows pending.
IDENTITY_COLUMNS = ("role", "content", "timestamp", "tool_call_id", "tool_calls", "tool_name",
                    "display_kind")

#: A new row takes its visible peers' order, else its own id.
INSERT_TRIGGER_DDL = (
    "CREATE TRIGGER messages_display_order_insert AFTER INSERT ON messages "
    "WHEN new.display_order IS NULL BEGIN "
    f"UPDATE messages SET display_order = COALESCE({_PEER_ORDER}, new.id) WHERE id = new.id; END"
)
#: A row turning visible joins its group (own order, then its peers'); a row turning
#: invisible leaves its old group at that group's smallest id.
VISIBILITY_TRIGGER_DDL = (
    "CREATE TRIGGER messages_display_visibility_update AFTER UPDATE OF active, compacted "
    f"ON messages WHEN {_NEW_VIS} <> {_OLD_VIS} BEGIN "
    f"UPDATE messages SET display_order = MIN(new.id, COALESCE({_PEER_ORDER}, new.id)) "
    f"WHERE id = new.id AND {_NEW_VIS}; "
    "UPDATE messages SET display_order = (SELECT display_order FROM messages WHERE id = new.id) "
    f"WHERE {_in_group('new')} AND id <> new.id AND {_NEW_VIS}; "
    f"UPDATE messages SET display_order = {_group_min('old')} "
    f"WHERE {_in_group('old')} AND NOT {_NEW_VIS}; END"
)
#: A change of the key columns makes the row and its old visible group pending.
IDENTITY_TRIGGER_DDL = (
    f"CREATE TRIGGER messages_display_identity_update AFTER UPDATE OF {', '.join(IDENTITY_COLUMNS)} "
    "ON messages WHEN " + " OR ".join(f"new.{c} IS NOT old.{c}" for c in IDENTITY_COLUMNS)
    + " BEGIN UPDATE messages SET display_identity = NULL, display_order = NULL "
    f"WHERE id = new.id OR ({_in_group('old')}); END"
)
#: A deleted visible row leaves its group at the group's smallest remaining id.
DELETE_TRIGGER_DDL = (
    "CREATE TRIGGER messages_display_identity_delete AFTER DELETE ON messages "
    f"WHEN old.active = 1 OR old.compacted = 1 BEGIN "
    f"UPDATE messages SET display_order = {_group_min('old')} WHERE {_in_group('old')}; END"
)

#: The four triggers, by name, in creation order.
TRIGGERS: tuple[tuple[str, str], ...] = (
    ("messages_display_order_insert", INSERT_TRIGGER_DDL),
    ("messages_display_visibility_update", VISIBILITY_TRIGGER_DDL),
    ("messages_display_identity_update", IDENTITY_TRIGGER_DDL),
    ("messages_display_identity_delete", DELETE_TRIGGER_DDL),
)
TRIGGER_NAMES = tuple(n for n, _ in TRIGGERS)

_WS = re.compile(r"[ \t\n\r]+")


def normalise(ddl: str) -> str:
    """Stored trigger SQL for comparison: stripped, space/TAB/LF/CR runs collapsed."""
    return _WS.sub(" ", ddl.strip())


def digest(ddl: str) -> str:
    """SHA-256 (hex) of :func:`normalise` of ``ddl``."""
    return hashlib.sha256(normalise(ddl).encode("utf-8")).hexdigest()


#: Known upstream variants per trigger (normalised SHA-256), kept as they are so hermes-data and
#: upstream processes on one file never ping-pong DDL. First: upstream ``DEFERRED_INDEX_SQL`` as
#: read for the reference (each satisfies D1).
KNOWN_VARIANT_DIGESTS: dict[str, tuple[str, ...]] = {
    "messages_display_order_insert": (
        "9d8e0685b6aea9bb9e0b4d1435e3a8e48335927ebb25a826ac699affad0d30b5",),
    "messages_display_visibility_update": (
        "6f390d8263fb3d93e859c4321379e7d523e1fd7474d04ed1fe0ae0649a43ca75",),
    "messages_display_identity_update": (
        "c0cea70b35668da7f631f9666bce9879e248c65c668a798bb7b4e9334302b760",),
    "messages_display_identity_delete": (
        "8d5913ebbd59db154309b4b71eea9b67b6d7f2143abe6dff010bf4f96e6e4dec",),
}

#: The stored SQL of the four triggers (SQLite).
STORED_TRIGGERS = text(
    "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'messages' "
    "AND name IN (" + ", ".join(f"'{n}'" for n in TRIGGER_NAMES) + ")")


def drop_trigger(name: str) -> str:
    """Drop one display trigger (``name`` from :data:`TRIGGER_NAMES` only)."""
    return checked_drop("TRIGGER", name, TRIGGER_NAMES, "a display trigger")


# ---------------------------------------------------------------------------------------
# PostgreSQL twins (docs/sessions-ui.md §2.4)
# ---------------------------------------------------------------------------------------

_LOCK = "PERFORM pg_advisory_xact_lock(hashtextextended({r}.session_id, 0));"
_PG_VIS = "(m.active = 1 OR m.compacted = 1)"


def _pg_group(r: str) -> str:
    return (f"m.session_id = {r}.session_id AND m.display_identity = {r}.display_identity "
            f"AND {_PG_VIS}")


def _pg_regroup(r: str) -> str:
    # Every visible row of r's group := the group's smallest id (D1 from the final state).
    return (f"UPDATE messages AS m SET display_order = (SELECT MIN(g.id) FROM messages g "
            f"WHERE g.session_id = {r}.session_id AND g.display_identity = {r}.display_identity "
            f"AND (g.active = 1 OR g.compacted = 1)) WHERE {_pg_group(r)};")


#: PL/pgSQL bodies (``prosrc``) by function name; functions share the triggers' names.
#: Each first takes the session's transaction advisory lock: without a database write lock two
#: concurrent inserts of one identity could miss each other. The insert function also handles
#: an id below its peers' order (ids are drawn before the lock).
PG_FUNCTION_BODIES: dict[str, str] = {
    "messages_display_order_insert": (
        "DECLARE peer BIGINT; BEGIN " + _LOCK.format(r="NEW") + " "
        f"SELECT MIN(m.display_order) INTO peer FROM messages m WHERE {_pg_group('NEW')}; "
        "IF peer IS NULL OR NEW.id <= peer THEN NEW.display_order := NEW.id; "
        "IF peer IS NOT NULL AND (NEW.active = 1 OR NEW.compacted = 1) THEN "
        f"UPDATE messages AS m SET display_order = NEW.id WHERE {_pg_group('NEW')}; END IF; "
        "ELSE NEW.display_order := peer; END IF; RETURN NEW; END"),
    "messages_display_visibility_update": (
        "BEGIN " + _LOCK.format(r="NEW") + " IF (NEW.active = 1 OR NEW.compacted = 1) THEN "
        "IF NEW.display_identity IS NULL THEN UPDATE messages SET display_order = NEW.id "
        "WHERE id = NEW.id; ELSE " + _pg_regroup("NEW") + " END IF; "
        "ELSE " + _pg_regroup("OLD") + " END IF; RETURN NULL; END"),
    "messages_display_identity_update": (
        "BEGIN " + _LOCK.format(r="NEW") + " UPDATE messages AS m SET display_identity = NULL, "
        f"display_order = NULL WHERE m.id = NEW.id OR ({_pg_group('OLD')}); RETURN NULL; END"),
    "messages_display_identity_delete": (
        "BEGIN " + _LOCK.format(r="OLD") + " " + _pg_regroup("OLD") + " RETURN NULL; END"),
}

_PG_KEY_CHANGED = " OR ".join(f"OLD.{c} IS DISTINCT FROM NEW.{c}" for c in IDENTITY_COLUMNS)
#: (event clause, WHEN condition) per trigger.
PG_TRIGGER_EVENTS: dict[str, tuple[str, str]] = {
    "messages_display_order_insert": ("BEFORE INSERT", "NEW.display_order IS NULL"),
    "messages_display_visibility_update": (
        "AFTER UPDATE OF active, compacted",
        "(NEW.active = 1 OR NEW.compacted = 1) IS DISTINCT FROM "
        "(OLD.active = 1 OR OLD.compacted = 1)"),
    "messages_display_identity_update": (
        f"AFTER UPDATE OF {', '.join(IDENTITY_COLUMNS)}", _PG_KEY_CHANGED),
    "messages_display_identity_delete": ("AFTER DELETE", "OLD.active = 1 OR OLD.compacted = 1"),
}

#: ``hermes_jsonb(doc)``: the jsonb cast, NULL on NULL or on any cast error (docs/sessions-ui.md §4.9).
#: PARALLEL UNSAFE: its EXCEPTION block is a subtransaction no parallel query can open.
PG_JSONB_BODY = "BEGIN RETURN doc::jsonb; EXCEPTION WHEN others THEN RETURN NULL; END"
PG_JSONB_DDL = ("CREATE OR REPLACE FUNCTION hermes_jsonb(doc text) RETURNS jsonb "
                "LANGUAGE plpgsql IMMUTABLE PARALLEL UNSAFE AS $hermes$" + PG_JSONB_BODY
                + "$hermes$")


def pg_function_ddl(name: str) -> str:
    """``CREATE OR REPLACE FUNCTION`` of one trigger function (fixed names only)."""
    return (f"CREATE OR REPLACE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS "
            f"$hermes${PG_FUNCTION_BODIES[name]}$hermes$")


def pg_trigger_ddl(name: str) -> str:
    """``CREATE TRIGGER`` of one display trigger (fixed names only)."""
    event, when = PG_TRIGGER_EVENTS[name]
    return (f"CREATE TRIGGER {name} {event} ON messages FOR EACH ROW WHEN ({when}) "
            f"EXECUTE FUNCTION {name}()")


def pg_drop_trigger(name: str) -> str:
    """Drop one display trigger on PostgreSQL (fixed names only)."""
    return checked_drop("TRIGGER", name, PG_TRIGGER_EVENTS, "a display trigger", on="messages")


_PG_NAMES = ", ".join(f"'{n}'" for n in (*TRIGGER_NAMES, "hermes_jsonb"))
#: Stored bodies of the display functions and ``hermes_jsonb`` in the current schema.
PG_STORED_FUNCTIONS = text(
    f"SELECT p.proname, p.prosrc FROM pg_proc p WHERE p.proname IN ({_PG_NAMES}) "
    "AND p.pronamespace = current_schema()::regnamespace")
#: Stored trigger definitions on ``messages``.
PG_STORED_TRIGGERS = text(
    "SELECT t.tgname, pg_get_triggerdef(t.oid) FROM pg_trigger t "
    "WHERE t.tgrelid = 'messages'::regclass AND NOT t.tgisinternal "
    f"AND t.tgname IN ({_PG_NAMES})")
#: Serialises concurrent opens repairing the display objects.
PG_DISPLAY_LOCK = text("SELECT pg_advisory_xact_lock(hashtextextended('hermes_display_objects', 0))")


def pg_normalise_triggerdef(ddl: str) -> str:
    """``pg_get_triggerdef`` output comparable with :func:`pg_trigger_ddl`: the table's schema
    qualifier, parentheses, double quotes and whitespace removed, case folded (the server
    re-renders the WHEN clause with its own parentheses and quoting)."""
    out = re.sub(r" ON [A-Za-z_][A-Za-z0-9_]*\.messages ", " ON messages ", normalise(ddl))
    return re.sub(r'[()"\s]', "", out).lower()


# ---------------------------------------------------------------------------------------
# Reads and writes of docs/sessions-ui.md §4.14
# ---------------------------------------------------------------------------------------

def _vis() -> Any:
    # VIS with its constants inline, as the partial indexes spell it (SQLite uses them only
    # for a literally repeated term).
    return sa.or_(messages.c.active == const(1), messages.c.compacted == const(1))


def _pending() -> Any:
    return sa.and_(sa.or_(messages.c.display_order.is_(None),
                          messages.c.display_identity.is_(None)), _vis())


#: Does a session have a pending visible row? (``idx_messages_display_backfill``)
PENDING_PROBE = DriverPrepared("pending_probe", lambda: sa.select(const(1)).select_from(
    messages).where(messages.c.session_id == bp("sid"), _pending()).limit(const(1)))
#: A session's visible rows with their key columns, by id.
VISIBLE_KEY_ROWS = DriverPrepared("visible_key_rows", lambda: sa.select(*(messages.c[c] for c in (
    "id", "role", "content", "timestamp", "tool_call_id", "tool_calls", "tool_name",
    "display_order", "display_identity"))).where(messages.c.session_id == bp("sid"), _vis())
    .order_by(messages.c.id))
#: Set one row's order and identity.
SET_DISPLAY = DriverPrepared("set_display", lambda: sa.update(messages).ordered_values(
    (messages.c.display_order, bp("o")), (messages.c.display_identity, bp("i"))).where(
    messages.c.id == bp("id")))
#: Sessions with a pending visible row (the background drain), any order.
PENDING_SESSIONS = DriverPrepared("pending_sessions", lambda: sa.select(
    messages.c.session_id).distinct().where(_pending()).limit(bp("n")))
#: PostgreSQL: the per-session transaction lock the display functions take.
PG_SESSION_LOCK = text("SELECT pg_advisory_xact_lock(hashtextextended(:sid, 0))")

# ---------------------------------------------------------------------------------------
# The batch append's own ordering (SQLite; :class:`hermes_data.sessions.core.display_order.BatchOrder`)
# ---------------------------------------------------------------------------------------

#: Largest rowid SQLite assigns (past it a batch leaves ids and order to SQLite and the trigger).
MAX_ROWID = 9223372036854775807


def peer_orders(n: int) -> str:
    """The insert trigger's peer lookup for ``n`` identities at once (driver text; values:
    session id, then the identities): ``(display_identity, MIN(display_order))`` of the
    session's visible rows per identity, on ``idx_messages_display_identity`` (``IN`` implies
    the index's ``display_identity IS NOT NULL``; an explicit ``IS NOT NULL`` term would make
    SQLite range-scan the session's identities instead)."""
    if n < 1:
        raise ValueError(f"peer_orders needs at least one identity, got {n!r}")
    return _peer_orders(n)


#: The peer lookup, compiled once; its identity list spread per call (Prepared.expanded_sql).
_PEER_ORDERS = DriverPrepared("peer_orders", lambda: sa.select(
    messages.c.display_identity, sa.func.min(messages.c.display_order)).where(
    messages.c.session_id == bp("sid"),
    messages.c.display_identity.in_(sa.bindparam("idents", expanding=True)),
    _vis()).group_by(messages.c.display_identity))


def _peer_orders(n: int) -> str:
    return _PEER_ORDERS.expanded_sql("sqlite", ("sid", "idents"), n)

