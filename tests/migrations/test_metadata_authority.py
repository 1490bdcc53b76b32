"""The Core metadata is the one authority for the head shape of both stores on both dialects
(issue 32, item 3): a fresh store holds no ordinary table the head metadata does not declare,
the frozen fragments that create a declared table create exactly the declared shape, and the
objects only PostgreSQL has are declared with their dialect."""

from __future__ import annotations

import sqlite3

import pytest
import sqlalchemy as sa

from hermes_data.migrate import runner as migrate
from hermes_data.migrate.shape import INTERNAL_TABLES, diff_shapes, sqlite_shape
from hermes_data.sessions import schema
from hermes_data.sessions.gateway import telegram_sql
from hermes_data.sessions.storage.fts import cjk_sql
from hermes_data.sessions.store import SessionStore
from hermes_data.telemetry.schema import metadata as telemetry_metadata


def _sqlite_tables(path) -> dict[str, str]:
    """name -> CREATE statement of every table of a SQLite file but SQLite's own."""
    con = sqlite3.connect(path)
    try:
        rows = con.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'").fetchall()
    finally:
        con.close()
    return {str(n): str(s or "") for n, s in rows if not str(n).startswith("sqlite_")}


def _ordinary(tables: dict[str, str], spec) -> set[str]:
    """The ordinary tables: what remains once the internal ones and the store's non-ordinary
    ones are set aside — each of those proven virtual (``CREATE VIRTUAL TABLE``) or the shadow
    table of a virtual one, so the set-aside list cannot hide an ordinary table."""
    virtual = {n for n, sql in tables.items() if sql.upper().startswith("CREATE VIRTUAL TABLE")}
    out = set()
    for name in tables:
        if name in INTERNAL_TABLES:
            continue
        if spec.not_ordinary_table is not None and spec.not_ordinary_table(name):
            assert name in virtual or any(name.startswith(v + "_") for v in virtual), \
                f"{name} is set aside as not ordinary but is neither virtual nor a shadow table"
            continue
        out.add(name)
    return out


def _required(head: sa.MetaData, dialect: str) -> set[str]:
    return {t.name for t in head.tables.values() if dialect not in t.info.get("optional_on", ())}


@pytest.mark.parametrize("fast_create", [True, False], ids=["fresh-path", "revisions"])
def test_fresh_sqlite_session_store_has_no_table_outside_the_metadata(tmp_path, fast_create):
    db = tmp_path / "state.db"
    migrate.upgrade("sessions", db, fast_create=fast_create)
    spec = migrate.store_spec("sessions")
    head = schema.head_metadata("sqlite")
    live = _ordinary(_sqlite_tables(db), spec)
    assert live - set(head.tables) == set()
    assert _required(head, "sqlite") <= live
    # FTS5 works here: the CJK-bigram step created its documents and queue, both declared.
    assert set(schema.CJK_DOCUMENT_TABLES) <= live
    # The user's opt-in adds the Telegram tables: declared too.
    with SessionStore(db) as store:
        store.apply_telegram_topic_migration()
    live = _ordinary(_sqlite_tables(db), spec)
    assert set(schema.TELEGRAM_TABLES) <= live
    assert live - set(head.tables) == set()


@pytest.mark.parametrize("fast_create", [True, False], ids=["fresh-path", "revisions"])
def test_fresh_sqlite_telemetry_store_has_no_table_outside_the_metadata(tmp_path, fast_create):
    db = tmp_path / "telemetry.db"
    migrate.upgrade("telemetry", db, fast_create=fast_create)
    live = _ordinary(_sqlite_tables(db), migrate.store_spec("telemetry"))
    assert live == set(telemetry_metadata.tables)


@pytest.mark.journal_independent("PostgreSQL only")
def test_fresh_postgresql_stores_have_no_table_outside_the_metadata(pg_url):
    # Both stores in one database, as a deployment may share one.
    migrate.upgrade("telemetry", pg_url)
    migrate.upgrade("sessions", pg_url)
    engine = sa.create_engine(pg_url)
    try:
        with engine.connect() as conn:
            live = {str(r[0]) for r in conn.exec_driver_sql(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")}
            sessions_head = schema.head_metadata("postgresql")
            telemetry_head = migrate.store_spec("telemetry").metadata_on("postgresql")
            versions = {"alembic_version", "alembic_version_sessions"}
            assert live - versions == set(sessions_head.tables) | set(telemetry_head.tables)
            # Every key column is NOT NULL there, and the heads say so.
            insp = sa.inspect(conn)
            for head in (sessions_head, telemetry_head):
                for table in head.tables.values():
                    nullable = {c["name"]: c["nullable"] for c in insp.get_columns(table.name)}
                    for column in table.columns:
                        assert nullable[column.name] == column.nullable, \
                            f"{table.name}.{column.name}"
    finally:
        engine.dispose()


def test_the_sqlite_fragments_create_exactly_the_declared_tables(tmp_path):
    """The CJK-bigram documents and queue and the Telegram tables are created by frozen DDL
    fragments, never by ``create_all``: each fragment's table equals its declaration (ordered
    columns with type, NOT NULL, default and key position; the Telegram indexes)."""
    names = schema.CJK_DOCUMENT_TABLES + schema.TELEGRAM_TABLES
    assert (cjk_sql.CJK_DOC, cjk_sql.CJK_QUEUE) == schema.CJK_DOCUMENT_TABLES
    assert telegram_sql.TABLES == schema.TELEGRAM_TABLES
    made = sa.create_engine(f"sqlite:///{tmp_path / 'fragments.db'}")
    declared = sa.create_engine(f"sqlite:///{tmp_path / 'declared.db'}")
    try:
        with made.begin() as conn:
            conn.exec_driver_sql(cjk_sql.DOC_DDL)
            conn.exec_driver_sql(cjk_sql.QUEUE_DDL)
            for name in telegram_sql.TABLES:
                conn.exec_driver_sql(telegram_sql.V3_DDL[name].format(name=name))
            for _name, ddl in telegram_sql.INDEXES:
                conn.exec_driver_sql(ddl)
        head = schema.head_metadata("sqlite")
        with declared.begin() as conn:
            head.create_all(conn, tables=[head.tables[n] for n in names])
        with made.connect() as a, declared.connect() as b:
            assert diff_shapes(sqlite_shape(b), sqlite_shape(a), ordered=True) == []
    finally:
        made.dispose()
        declared.dispose()


def test_step_tables_are_not_created_by_the_metadata_paths():
    """Declaring the step tables changes nothing the creation paths do: the fresh path,
    reconciliation and ``hermes-data check`` work from ``metadata``, which holds none of them."""
    spec = migrate.store_spec("sessions")
    steps = set(schema.CJK_DOCUMENT_TABLES) | set(schema.TELEGRAM_TABLES)
    assert spec.metadata is schema.metadata
    assert steps.isdisjoint(schema.metadata.tables)
    assert steps <= set(schema.head_metadata("sqlite").tables)
    assert set(schema.TELEGRAM_TABLES) <= set(schema.head_metadata("postgresql").tables)
    assert set(schema.CJK_DOCUMENT_TABLES).isdisjoint(schema.head_metadata("postgresql").tables)


def test_postgresql_only_objects_are_declared_with_their_dialect():
    head = schema.head_metadata("postgresql")
    messages = head.tables["messages"]
    assert messages.c.fts_document.computed is not None
    assert "fts_document" not in schema.metadata.tables["messages"].c  # no insert names it
    gin = {str(ix.name) for t in head.tables.values() for ix in t.indexes
           if ix.dialect_options["postgresql"]["using"] == "gin"}
    assert gin == {"messages_fts_document", "messages_fts_trgm", "messages_cjk_grams",
                   "messages_symbol_grams", "messages_fts_fold", "messages_tool_trgm"}
    for table in head.tables.values():
        for ix in table.indexes:
            if ix.name not in {i.name for i in schema.pg_metadata.tables[table.name].indexes}:
                assert ix.info.get("created_by"), ix.name  # which revision creates it
    # None of them is in the SQLite head.
    sqlite_indexes = {ix.name for t in schema.head_metadata("sqlite").tables.values()
                      for ix in t.indexes}
    assert sqlite_indexes.isdisjoint(gin | {"idx_sessions_cron_id_c"})
    with pytest.raises(ValueError, match="mysql"):
        schema.head_metadata("mysql")
