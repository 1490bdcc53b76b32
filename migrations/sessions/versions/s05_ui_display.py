"""s05 — display ordering for user interfaces (docs/sessions-ui.md §2): the
``messages.display_identity`` / ``display_order`` columns, three partial indexes, the four
display triggers; on PostgreSQL their PL/pgSQL twins and ``hermes_jsonb``.

One transaction, add-only and read-gated:

1. the two columns when absent (nullable, no default: no table rewrite; the core reconcile
   rule of :func:`hermes_data.migrate.ops.add_missing_columns`); a present column is never touched;
2. each index only when a read shows it missing (a same-named index of another definition is
   kept and reported — WARNING);
3. SQLite: each trigger missing ⇒ created; present ⇒ its stored SQL, normalised (stripped,
   space/TAB/LF/CR runs collapsed), is compared with this revision's text and with the pinned
   upstream variants (normalised SHA-256); neither ⇒ dropped and re-created;
   PostgreSQL: ``hermes_jsonb`` and the four functions created or replaced when their stored
   body differs, each trigger created when absent (dropped and re-created when its definition
   differs).

**No data step**: every existing visible row stays pending (identity and order NULL); the
store computes identities in Python per session (``ensure_display_order``), because hashing
every row here would hold the write lock for minutes on a multi-GB store.

Revision ID: s05_ui_display
Revises: s04_coordination
"""

import hashlib
import logging
import re

import sqlalchemy as sa
from alembic import op

from hermes_data.errors import ForwardOnlyError
from hermes_data.migrate.ops import add_missing_columns
from hermes_data.types import BLOB, INTEGER

revision = "s05_ui_display"
down_revision = "s04_coordination"
branch_labels = None
depends_on = None

log = logging.getLogger("hermes_data.sessions.migrations")

# Frozen DDL of its time: this file never imports the head metadata or fragments.

_INDEXES = (
    ("idx_messages_display_page",
     "CREATE INDEX idx_messages_display_page ON messages (session_id, display_order, "
     "active DESC, id DESC) WHERE active = 1 OR compacted = 1"),
    ("idx_messages_display_backfill",
     "CREATE INDEX idx_messages_display_backfill ON messages (session_id) WHERE "
     "(display_order IS NULL OR display_identity IS NULL) AND (active = 1 OR compacted = 1)"),
    ("idx_messages_display_identity",
     "CREATE INDEX idx_messages_display_identity ON messages (session_id, display_identity, "
     "display_order) WHERE display_identity IS NOT NULL AND (active = 1 OR compacted = 1)"),
)
# PostgreSQL's page index also requires a display order: without statistics the planner took
# the bare visibility predicate for a selective one and scanned this index for every search.
_PG_PAGE_INDEX = (
    "CREATE INDEX idx_messages_display_page ON messages (session_id, display_order, "
    "active DESC, id DESC) WHERE display_order IS NOT NULL AND (active = 1 OR compacted = 1)")

_SQLITE_TRIGGERS = (
    ("messages_display_order_insert",
     'CREATE TRIGGER messages_display_order_insert AFTER INSERT ON messages WHEN '
     'new.display_order IS NULL BEGIN UPDATE messages SET display_order = '
     'COALESCE((SELECT MIN(display_order) FROM messages WHERE session_id = new.session_id '
     'AND display_identity = new.display_identity AND id <> new.id AND (active = 1 OR '
     'compacted = 1)), new.id) WHERE id = new.id; END'),
    ("messages_display_visibility_update",
     'CREATE TRIGGER messages_display_visibility_update AFTER UPDATE OF active, compacted '
     'ON messages WHEN (new.active = 1 OR new.compacted = 1) <> (old.active = 1 OR '
     'old.compacted = 1) BEGIN UPDATE messages SET display_order = MIN(new.id, '
     'COALESCE((SELECT MIN(display_order) FROM messages WHERE session_id = new.session_id '
     'AND display_identity = new.display_identity AND id <> new.id AND (active = 1 OR '
     'compacted = 1)), new.id)) WHERE id = new.id AND (new.active = 1 OR new.compacted = '
     '1); UPDATE messages SET display_order = (SELECT display_order FROM messages WHERE '
     'id = new.id) WHERE session_id = new.session_id AND display_identity = '
     'new.display_identity AND (active = 1 OR compacted = 1) AND id <> new.id AND '
     '(new.active = 1 OR new.compacted = 1); UPDATE messages SET display_order = (SELECT '
     'MIN(+id) FROM messages WHERE session_id = old.session_id AND display_identity = '
     'old.display_identity AND (active = 1 OR compacted = 1)) WHERE session_id = '
     'old.session_id AND display_identity = old.display_identity AND (active = 1 OR '
     'compacted = 1) AND NOT (new.active = 1 OR new.compacted = 1); END'),
    ("messages_display_identity_update",
     'CREATE TRIGGER messages_display_identity_update AFTER UPDATE OF role, content, '
     'timestamp, tool_call_id, tool_calls, tool_name, display_kind ON messages WHEN '
     'new.role IS NOT old.role OR new.content IS NOT old.content OR new.timestamp IS NOT '
     'old.timestamp OR new.tool_call_id IS NOT old.tool_call_id OR new.tool_calls IS NOT '
     'old.tool_calls OR new.tool_name IS NOT old.tool_name OR new.display_kind IS NOT '
     'old.display_kind BEGIN UPDATE messages SET display_identity = NULL, display_order = '
     'NULL WHERE id = new.id OR (session_id = old.session_id AND display_identity = '
     'old.display_identity AND (active = 1 OR compacted = 1)); END'),
    ("messages_display_identity_delete",
     'CREATE TRIGGER messages_display_identity_delete AFTER DELETE ON messages WHEN '
     'old.active = 1 OR old.compacted = 1 BEGIN UPDATE messages SET display_order = '
     '(SELECT MIN(+id) FROM messages WHERE session_id = old.session_id AND '
     'display_identity = old.display_identity AND (active = 1 OR compacted = 1)) WHERE '
     'session_id = old.session_id AND display_identity = old.display_identity AND (active '
     '= 1 OR compacted = 1); END'),
)
_PG_FUNCTIONS = (
    ("messages_display_order_insert",
     'DECLARE peer BIGINT; BEGIN PERFORM '
     'pg_advisory_xact_lock(hashtextextended(NEW.session_id, 0)); SELECT '
     'MIN(m.display_order) INTO peer FROM messages m WHERE m.session_id = NEW.session_id '
     'AND m.display_identity = NEW.display_identity AND (m.active = 1 OR m.compacted = '
     '1); IF peer IS NULL OR NEW.id <= peer THEN NEW.display_order := NEW.id; IF peer IS '
     'NOT NULL AND (NEW.active = 1 OR NEW.compacted = 1) THEN UPDATE messages AS m SET '
     'display_order = NEW.id WHERE m.session_id = NEW.session_id AND m.display_identity = '
     'NEW.display_identity AND (m.active = 1 OR m.compacted = 1); END IF; ELSE '
     'NEW.display_order := peer; END IF; RETURN NEW; END'),
    ("messages_display_visibility_update",
     'BEGIN PERFORM pg_advisory_xact_lock(hashtextextended(NEW.session_id, 0)); IF '
     '(NEW.active = 1 OR NEW.compacted = 1) THEN IF NEW.display_identity IS NULL THEN '
     'UPDATE messages SET display_order = NEW.id WHERE id = NEW.id; ELSE UPDATE messages '
     'AS m SET display_order = (SELECT MIN(g.id) FROM messages g WHERE g.session_id = '
     'NEW.session_id AND g.display_identity = NEW.display_identity AND (g.active = 1 OR '
     'g.compacted = 1)) WHERE m.session_id = NEW.session_id AND m.display_identity = '
     'NEW.display_identity AND (m.active = 1 OR m.compacted = 1); END IF; ELSE UPDATE '
     'messages AS m SET display_order = (SELECT MIN(g.id) FROM messages g WHERE '
     'g.session_id = OLD.session_id AND g.display_identity = OLD.display_identity AND '
     '(g.active = 1 OR g.compacted = 1)) WHERE m.session_id = OLD.session_id AND '
     'm.display_identity = OLD.display_identity AND (m.active = 1 OR m.compacted = 1); '
     'END IF; RETURN NULL; END'),
    ("messages_display_identity_update",
     'BEGIN PERFORM pg_advisory_xact_lock(hashtextextended(NEW.session_id, 0)); UPDATE '
     'messages AS m SET display_identity = NULL, display_order = NULL WHERE m.id = NEW.id '
     'OR (m.session_id = OLD.session_id AND m.display_identity = OLD.display_identity AND '
     '(m.active = 1 OR m.compacted = 1)); RETURN NULL; END'),
    ("messages_display_identity_delete",
     'BEGIN PERFORM pg_advisory_xact_lock(hashtextextended(OLD.session_id, 0)); UPDATE '
     'messages AS m SET display_order = (SELECT MIN(g.id) FROM messages g WHERE '
     'g.session_id = OLD.session_id AND g.display_identity = OLD.display_identity AND '
     '(g.active = 1 OR g.compacted = 1)) WHERE m.session_id = OLD.session_id AND '
     'm.display_identity = OLD.display_identity AND (m.active = 1 OR m.compacted = 1); '
     'RETURN NULL; END'),
)
_PG_TRIGGERS = (
    ("messages_display_order_insert",
     'CREATE TRIGGER messages_display_order_insert BEFORE INSERT ON messages FOR EACH ROW '
     'WHEN (NEW.display_order IS NULL) EXECUTE FUNCTION messages_display_order_insert()'),
    ("messages_display_visibility_update",
     'CREATE TRIGGER messages_display_visibility_update AFTER UPDATE OF active, compacted '
     'ON messages FOR EACH ROW WHEN ((NEW.active = 1 OR NEW.compacted = 1) IS DISTINCT '
     'FROM (OLD.active = 1 OR OLD.compacted = 1)) EXECUTE FUNCTION '
     'messages_display_visibility_update()'),
    ("messages_display_identity_update",
     'CREATE TRIGGER messages_display_identity_update AFTER UPDATE OF role, content, '
     'timestamp, tool_call_id, tool_calls, tool_name, display_kind ON messages FOR EACH '
     'ROW WHEN (OLD.role IS DISTINCT FROM NEW.role OR OLD.content IS DISTINCT FROM '
     'NEW.content OR OLD.timestamp IS DISTINCT FROM NEW.timestamp OR OLD.tool_call_id IS '
     'DISTINCT FROM NEW.tool_call_id OR OLD.tool_calls IS DISTINCT FROM NEW.tool_calls OR '
     'OLD.tool_name IS DISTINCT FROM NEW.tool_name OR OLD.display_kind IS DISTINCT FROM '
     'NEW.display_kind) EXECUTE FUNCTION messages_display_identity_update()'),
    ("messages_display_identity_delete",
     'CREATE TRIGGER messages_display_identity_delete AFTER DELETE ON messages FOR EACH '
     'ROW WHEN (OLD.active = 1 OR OLD.compacted = 1) EXECUTE FUNCTION '
     'messages_display_identity_delete()'),
)

# Normalised SHA-256 of upstream DEFERRED_INDEX_SQL's triggers as read for the spec: a file an
# upstream process settled keeps them (no DDL ping-pong between the two implementations).
_UPSTREAM_DIGESTS = {
    "messages_display_order_insert":
        "9d8e0685b6aea9bb9e0b4d1435e3a8e48335927ebb25a826ac699affad0d30b5",
    "messages_display_visibility_update":
        "6f390d8263fb3d93e859c4321379e7d523e1fd7474d04ed1fe0ae0649a43ca75",
    "messages_display_identity_update":
        "c0cea70b35668da7f631f9666bce9879e248c65c668a798bb7b4e9334302b760",
    "messages_display_identity_delete":
        "8d5913ebbd59db154309b4b71eea9b67b6d7f2143abe6dff010bf4f96e6e4dec",
}

_PG_JSONB = ("CREATE OR REPLACE FUNCTION hermes_jsonb(doc text) RETURNS jsonb "
             "LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $hermes$BEGIN RETURN doc::jsonb; "
             "EXCEPTION WHEN others THEN RETURN NULL; END$hermes$")


def _normalise(ddl: str) -> str:
    return re.sub(r"[ \t\n\r]+", " ", ddl.strip())


def _columns():
    return [sa.Column("display_identity", BLOB), sa.Column("display_order", INTEGER)]


def _indexes(bind) -> None:
    present = {str(ix["name"]): ix for ix in sa.inspect(bind).get_indexes("messages")}
    for name, ddl in _INDEXES:
        if name == "idx_messages_display_page" and bind.dialect.name == "postgresql":
            ddl = _PG_PAGE_INDEX
        if name not in present:
            bind.exec_driver_sql(ddl)
        elif bind.dialect.name == "sqlite":
            stored = bind.exec_driver_sql(
                "SELECT sql FROM sqlite_master WHERE type = 'index' AND name = ?",
                (name,)).scalar()
            if _normalise(stored or "") != _normalise(ddl):
                log.warning("index %s exists with another definition (%s); kept as it is",
                            name, stored)


def _sqlite_triggers(bind) -> None:
    stored = dict(bind.exec_driver_sql(
        "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' "
        "AND tbl_name = 'messages'").fetchall())
    for name, ddl in _SQLITE_TRIGGERS:
        have = stored.get(name)
        if have is not None:
            norm = _normalise(have)
            if norm == _normalise(ddl) \
                    or hashlib.sha256(norm.encode("utf-8")).hexdigest() == _UPSTREAM_DIGESTS[name]:
                continue
            log.warning("trigger %s differs from the canonical text: replaced", name)
            bind.exec_driver_sql(f"DROP TRIGGER {name}")
        bind.exec_driver_sql(ddl)


def _pg_objects(bind) -> None:
    bind.exec_driver_sql("SELECT pg_advisory_xact_lock(hashtextextended("
                         "'hermes_display_objects', 0))")
    bodies = dict(bind.exec_driver_sql(
        "SELECT proname, prosrc FROM pg_proc WHERE pronamespace = "
        "current_schema()::regnamespace AND proname IN ('hermes_jsonb', "
        "'messages_display_order_insert', 'messages_display_visibility_update', "
        "'messages_display_identity_update', 'messages_display_identity_delete')").fetchall())
    if "hermes_jsonb" not in bodies:
        bind.exec_driver_sql(_PG_JSONB)
    for name, body in _PG_FUNCTIONS:
        if _normalise(bodies.get(name) or "") != _normalise(body):
            bind.exec_driver_sql(f"CREATE OR REPLACE FUNCTION {name}() RETURNS trigger "
                                 f"LANGUAGE plpgsql AS $hermes${body}$hermes$")
    present = {r[0] for r in bind.exec_driver_sql(
        "SELECT tgname FROM pg_trigger WHERE tgrelid = 'messages'::regclass "
        "AND NOT tgisinternal").fetchall()}
    for name, ddl in _PG_TRIGGERS:
        if name not in present:
            bind.exec_driver_sql(ddl)


def upgrade() -> None:
    bind = op.get_bind()
    add_missing_columns(bind, "messages", _columns(), log)
    _indexes(bind)
    if bind.dialect.name == "postgresql":
        _pg_objects(bind)
    else:
        _sqlite_triggers(bind)


def downgrade() -> None:
    raise ForwardOnlyError(f"revision {revision} cannot be downgraded: the history is forward-only")
