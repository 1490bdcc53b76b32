"""s06 — the messaging gateway (docs/sessions-gateway.md §2): the ``handoff_*`` columns,
``gateway_routing`` (with its primary-key heal), ``gateway_hygiene_state``,
``gateway_heartbeats``, ``async_delegations``, their indexes; on PostgreSQL the two Telegram
DM-topic tables.

One transaction, add-only and read-gated (a store that has everything sees only reads):

1. the docs/sessions-gateway.md §2.2 ``sessions`` columns when absent (the core reconcile rule of
   :func:`hermes_data.migrate.ops.add_missing_columns`); ``api_call_count`` is ``s03``'s, re-checked;
2. each docs/sessions-gateway.md §2.1 table when absent (``conversation_generations`` is ``s03``'s, re-checked with
   the same definition); missing columns of a present one appended — a tool-created
   ``async_delegations`` without ``origin_session_id`` gets ``TEXT NOT NULL DEFAULT ''`` and
   its rows read ``''`` (seed 003 #94691); a present column is never touched;
3. SQLite: ``gateway_routing``'s primary key healed to ``(scope, session_key)``:
   a ``gateway_routing_legacy_pk`` left by an interrupted older heal is renamed back (no
   canonical table) or merged into the canonical one (``scope`` NULL ⇒ ``''``, the larger
   ``updated_at`` wins per key, a tie keeps the canonical row) and dropped; a table keyed
   otherwise (``session_key TEXT PRIMARY KEY`` builds, #59203) is renamed to the legacy name,
   the canonical table created, the rows copied oldest first so the newest wins per key, the
   legacy table dropped. SQLite DDL is transactional: a failure anywhere rolls back to the
   original table with all its rows;
4. the docs/sessions-gateway.md §2.3 indexes when absent, except the Telegram pair;
5. PostgreSQL only: both Telegram tables and their indexes (on SQLite they stay the user's
   opt-in, ``apply_telegram_topic_migration``).

Revision ID: s06_gateway
Revises: s05_ui_display
"""

import logging

import sqlalchemy as sa
from alembic import op

from hermes_data.errors import ForwardOnlyError
from hermes_data.migrate.ops import add_missing_columns
from hermes_data.types import INTEGER, REAL, TEXT

revision = "s06_gateway"
down_revision = "s05_ui_display"
branch_labels = None
depends_on = None

log = logging.getLogger("hermes_data.sessions.migrations")

# Frozen DDL of its time: this file never imports the head metadata.


def _session_columns():
    """docs/sessions-gateway.md §2.2, in the order a fresh store appends them."""
    return [
        sa.Column("handoff_state", TEXT),
        sa.Column("handoff_platform", TEXT),
        sa.Column("handoff_error", TEXT),
        sa.Column("handoff_requested_at", REAL),
        sa.Column("handoff_claimed_by", TEXT),
        sa.Column("handoff_claimed_at", REAL),
        sa.Column("api_call_count", INTEGER, server_default=sa.text("0")),
    ]


def _tables():
    md = sa.MetaData()
    zero, empty = sa.text("0"), sa.text("''")
    sessions = sa.Table(
        "sessions", md,
        sa.Column("id", TEXT, primary_key=True),
        *[sa.Column(n, TEXT) for n in ("source", "user_id", "chat_id", "chat_type",
                                       "thread_id", "handoff_state")],
        sa.Column("started_at", REAL),
    )
    routing = sa.Table(
        "gateway_routing", md,
        sa.Column("scope", TEXT, primary_key=True, nullable=False, server_default=empty),
        sa.Column("session_key", TEXT, primary_key=True, nullable=False),
        sa.Column("entry_json", TEXT, nullable=False),
        sa.Column("updated_at", REAL, nullable=False),
    )
    hygiene = sa.Table(
        "gateway_hygiene_state", md,
        sa.Column("session_key", TEXT, primary_key=True, nullable=True),
        sa.Column("failure_streak", INTEGER, nullable=False, server_default=zero),
    )
    heartbeats = sa.Table(
        "gateway_heartbeats", md,
        sa.Column("backend_id", TEXT, primary_key=True, nullable=True),
        sa.Column("pid", INTEGER, nullable=False),
        sa.Column("started_at", REAL, nullable=False),
        sa.Column("last_heartbeat", REAL, nullable=False),
        sa.Column("profile", TEXT, nullable=False, server_default=empty),
        sa.Column("host", TEXT, nullable=False, server_default=empty),
    )
    generations = sa.Table(
        "conversation_generations", md,
        sa.Column("source", TEXT, primary_key=True, nullable=False),
        sa.Column("session_key", TEXT, primary_key=True, nullable=False),
        sa.Column("generation", INTEGER, nullable=False, server_default=zero),
    )
    delegations = sa.Table(
        "async_delegations", md,
        sa.Column("delegation_id", TEXT, primary_key=True, nullable=True),
        sa.Column("origin_session", TEXT, nullable=False),
        sa.Column("origin_ui_session_id", TEXT, nullable=False, server_default=empty),
        sa.Column("parent_session_id", TEXT),
        sa.Column("state", TEXT, nullable=False),
        sa.Column("dispatched_at", REAL, nullable=False),
        sa.Column("completed_at", REAL),
        sa.Column("updated_at", REAL, nullable=False),
        sa.Column("event_json", TEXT),
        sa.Column("result_json", TEXT),
        sa.Column("delivery_state", TEXT, nullable=False, server_default=sa.text("'pending'")),
        sa.Column("delivery_attempts", INTEGER, nullable=False, server_default=zero),
        sa.Column("delivered_at", REAL),
        sa.Column("owner_pid", INTEGER),
        sa.Column("owner_started_at", INTEGER),
        sa.Column("task_json", TEXT),
        sa.Column("delivery_claim", TEXT),
        sa.Column("delivery_claimed_at", REAL),
        sa.Column("origin_session_id", TEXT, nullable=False, server_default=empty),
    )
    dflt = sa.text("'default'")
    mode = sa.Table(
        "telegram_dm_topic_mode", md,
        sa.Column("profile_name", TEXT, primary_key=True, nullable=False, server_default=dflt),
        sa.Column("chat_id", TEXT, primary_key=True, nullable=False),
        sa.Column("user_id", TEXT, nullable=False),
        sa.Column("enabled", INTEGER, nullable=False, server_default=sa.text("1")),
        sa.Column("activated_at", REAL, nullable=False),
        sa.Column("updated_at", REAL, nullable=False),
        sa.Column("has_topics_enabled", INTEGER),
        sa.Column("allows_users_to_create_topics", INTEGER),
        sa.Column("capability_checked_at", REAL),
        sa.Column("intro_message_id", TEXT),
        sa.Column("pinned_message_id", TEXT),
    )
    bindings = sa.Table(
        "telegram_dm_topic_bindings", md,
        sa.Column("profile_name", TEXT, primary_key=True, nullable=False, server_default=dflt),
        sa.Column("chat_id", TEXT, primary_key=True, nullable=False),
        sa.Column("thread_id", TEXT, primary_key=True, nullable=False),
        sa.Column("user_id", TEXT, nullable=False),
        sa.Column("session_key", TEXT, nullable=False),
        sa.Column("session_id", TEXT, sa.ForeignKey("sessions.id", ondelete="CASCADE"),
                  nullable=False),
        sa.Column("managed_mode", TEXT, nullable=False, server_default=sa.text("'auto'")),
        sa.Column("linked_at", REAL, nullable=False),
        sa.Column("updated_at", REAL, nullable=False),
    )
    s = sessions.c
    indexes = [
        sa.Index("idx_sessions_gateway_peer", s.source, s.user_id, s.chat_id, s.chat_type,
                 s.thread_id, s.started_at.desc()),
        sa.Index("idx_sessions_handoff_state", s.handoff_state, s.started_at),
        sa.Index("idx_async_delegations_delivery", delegations.c.delivery_state,
                 delegations.c.completed_at),
    ]
    telegram_indexes = [
        sa.Index("idx_telegram_dm_topic_bindings_session", bindings.c.session_id, unique=True),
        sa.Index("idx_telegram_dm_topic_bindings_user", bindings.c.profile_name,
                 bindings.c.user_id, bindings.c.chat_id),
    ]
    return ((routing, hygiene, heartbeats, generations, delegations), indexes,
            (mode, bindings), telegram_indexes)


_CANONICAL_KEY = ["scope", "session_key"]
_LEGACY = "gateway_routing_legacy_pk"
_COLUMNS = "scope, session_key, entry_json, updated_at"


def _sqlite_key(bind, table: str) -> list[str]:
    rows = bind.exec_driver_sql(f'PRAGMA table_info("{table}")').fetchall()
    return [str(r[1]) for r in sorted((r for r in rows if r[5]), key=lambda r: r[5])]


def _sqlite_columns(bind, table: str) -> set[str]:
    return {str(r[1]) for r in bind.exec_driver_sql(f'PRAGMA table_info("{table}")').fetchall()}


def _copy_from_legacy(bind, *, newest_wins_ties: bool) -> int:
    """Upsert the legacy table's rows into the canonical one, oldest first; a row replaces
    the stored one only when newer (``newest_wins_ties``: or as new)."""
    scope = "COALESCE(scope, '')" if "scope" in _sqlite_columns(bind, _LEGACY) else "''"
    cmp = ">=" if newest_wins_ties else ">"
    return bind.exec_driver_sql(
        f"INSERT INTO gateway_routing ({_COLUMNS}) SELECT {scope}, session_key, entry_json, "
        f"updated_at FROM {_LEGACY} WHERE 1 ORDER BY updated_at, rowid "
        "ON CONFLICT (scope, session_key) DO UPDATE SET entry_json = excluded.entry_json, "
        f"updated_at = excluded.updated_at WHERE excluded.updated_at {cmp} "
        "gateway_routing.updated_at").rowcount


def _heal_gateway_routing_pk(bind, routing: sa.Table) -> None:
    """docs/sessions-gateway.md §2.4 step 3 (SQLite): leave ``gateway_routing`` keyed by ``(scope, session_key)``."""
    tables = set(sa.inspect(bind).get_table_names())
    if _LEGACY in tables:
        if "gateway_routing" not in tables:
            bind.exec_driver_sql(f"ALTER TABLE {_LEGACY} RENAME TO gateway_routing")
            log.warning("gateway_routing: restored from %s (an interrupted heal)", _LEGACY)
        else:
            n = bind.exec_driver_sql(f"SELECT COUNT(*) FROM {_LEGACY}").scalar() or 0
            _copy_from_legacy(bind, newest_wins_ties=False)
            bind.exec_driver_sql(f"DROP TABLE {_LEGACY}")
            log.warning("gateway_routing: merged %d row(s) of a leftover %s (newer entries "
                        "win) and dropped it", n, _LEGACY)
    if _sqlite_key(bind, "gateway_routing") == _CANONICAL_KEY:
        return
    n = bind.exec_driver_sql("SELECT COUNT(*) FROM gateway_routing").scalar() or 0
    bind.exec_driver_sql(f"ALTER TABLE gateway_routing RENAME TO {_LEGACY}")
    bind.execute(sa.schema.CreateTable(routing))
    _copy_from_legacy(bind, newest_wins_ties=True)
    kept = bind.exec_driver_sql("SELECT COUNT(*) FROM gateway_routing").scalar() or 0
    bind.exec_driver_sql(f"DROP TABLE {_LEGACY}")
    log.warning("gateway_routing: primary key rebuilt as (scope, session_key) (#59203); "
                "%d row(s) became %d entr(y/ies), the newest per key", n, kept)


def upgrade() -> None:
    bind = op.get_bind()
    pg = bind.dialect.name == "postgresql"
    tables, indexes, telegram, telegram_indexes = _tables()
    add_missing_columns(bind, "sessions", _session_columns(), log)
    present = set(sa.inspect(bind).get_table_names())
    for table in tables + (telegram if pg else ()):
        if table.name in present:
            add_missing_columns(bind, table.name, table.columns, log)
        elif table.name == "gateway_routing" and _LEGACY in present and not pg:
            continue  # the heal renames the stranded legacy table back
        else:
            bind.execute(sa.schema.CreateTable(table))
    if not pg:
        _heal_gateway_routing_pk(bind, tables[0])
    have = {str(r[0]) for r in bind.exec_driver_sql(
        "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()" if pg
        else "SELECT name FROM sqlite_master WHERE type = 'index'")}
    for ix in indexes + (telegram_indexes if pg else []):
        if ix.name not in have:
            bind.execute(sa.schema.CreateIndex(ix))


def downgrade() -> None:
    raise ForwardOnlyError(f"revision {revision} cannot be downgraded: the history is forward-only")
