"""s07 — storage resilience (docs/sessions-storage.md §2.5): the CJK-bigram index.

SQLite, one transaction, add-only, and only where FTS5 works (a TEMP probe table; without
FTS5 a later FTS5-capable writable open creates them):

1. each docs/sessions-storage.md §2.2 object when absent — the documents ``messages_cjk_doc``, the queue
   ``messages_cjk_queue``, the FTS5 index ``messages_cjk_fts`` (``ascii`` tokenizer,
   ``detail='none'``), its three document triggers and the three pure-SQL queue triggers on
   ``messages``. Objects the writable open already built (the search-quality work creates the
   same texts there) are left as they are, markers included; a same-named object with other
   DDL is never rewritten (``check`` reports it);
2. when this revision created the documents or a queue trigger and ``messages`` has a row:
   the backfill window ``cjk_bigram_high_water = MAX(messages.id)``,
   ``cjk_bigram_progress = '0'`` (above the mark the queue triggers cover new rows; below it
   the store's post-commit steps and ``optimize-storage`` index the existing ones).

PostgreSQL: ``hermes_cjk_grams(role, content, tool_name, tool_calls)`` (IMMUTABLE, PARALLEL
SAFE, plain SQL: ``'{}'`` for tool rows, else the distinct CJK letters and adjacent letter
pairs of the three columns) and the partial GIN index ``messages_cjk_grams`` over it
(``WHERE role <> 'tool'``). No queue, no markers: the server maintains the index. On
PostgreSQL ≥ 14 also expression statistics on the scope's delegate test (``sessions`` is
then analysed): every scoped page (the gram route, trigram CJK, the literal tier) is
planned from the right row estimate. The three PL/pgSQL helpers with an EXCEPTION block
(``hermes_json_get``, ``hermes_json_object``, ``hermes_jsonb``) become PARALLEL UNSAFE: no
process of a parallel query can open their subtransaction.

Revision ID: s07_storage
Revises: s06_gateway
"""

import logging

from alembic import op

from hermes_data.errors import ForwardOnlyError
from hermes_data.sessions.storage.opening import capabilities

revision = "s07_storage"
down_revision = "s06_gateway"
branch_labels = None
depends_on = None

log = logging.getLogger("hermes_data.sessions.migrations")

# Frozen DDL of its time: this file never imports the head metadata or fragments.

_NA = "length(COALESCE({e}, '')) <> length(CAST(COALESCE({e}, '') AS BLOB))"


def _in_scope(r: str) -> str:
    nonascii = " OR ".join(_NA.format(e=f"{r}.{c}") for c in ("content", "tool_name",
                                                                "tool_calls"))
    return (f"{r}.role <> 'tool' AND ({nonascii}) AND EXISTS (SELECT 1 FROM sessions WHERE "
            f"id = {r}.session_id AND sessions.source NOT IN ('cron', 'subagent') AND "
            "json_extract(CASE WHEN json_valid(sessions.model_config) THEN "
            "sessions.model_config ELSE '{}' END, '$._delegate_from') IS NULL)")


_ENQUEUE = "INSERT OR IGNORE INTO messages_cjk_queue(id) VALUES"
_INDEXED = "EXISTS (SELECT 1 FROM messages_cjk_doc WHERE id = old.id)"

_SQLITE_OBJECTS = (
    ("messages_cjk_doc", "CREATE TABLE IF NOT EXISTS messages_cjk_doc "
                         "(id INTEGER PRIMARY KEY, doc TEXT NOT NULL)"),
    ("messages_cjk_queue", "CREATE TABLE IF NOT EXISTS messages_cjk_queue "
                           "(id INTEGER PRIMARY KEY)"),
    ("messages_cjk_fts", "CREATE VIRTUAL TABLE IF NOT EXISTS messages_cjk_fts USING fts5(doc, "
                         "content='messages_cjk_doc', content_rowid='id', tokenize='ascii', "
                         "detail='none')"),
    ("messages_cjk_doc_ai", "CREATE TRIGGER IF NOT EXISTS messages_cjk_doc_ai AFTER INSERT ON "
                            "messages_cjk_doc BEGIN INSERT INTO messages_cjk_fts(rowid, doc) "
                            "VALUES (new.id, new.doc); END"),
    ("messages_cjk_doc_ad", "CREATE TRIGGER IF NOT EXISTS messages_cjk_doc_ad AFTER DELETE ON "
                            "messages_cjk_doc BEGIN INSERT INTO messages_cjk_fts("
                            "messages_cjk_fts, rowid, doc) VALUES ('delete', old.id, "
                            "old.doc); END"),
    ("messages_cjk_doc_au", "CREATE TRIGGER IF NOT EXISTS messages_cjk_doc_au AFTER UPDATE OF "
                            "doc ON messages_cjk_doc BEGIN INSERT INTO messages_cjk_fts("
                            "messages_cjk_fts, rowid, doc) VALUES ('delete', old.id, "
                            "old.doc); INSERT INTO messages_cjk_fts(rowid, doc) VALUES "
                            "(new.id, new.doc); END"),
    ("messages_cjk_enqueue_insert",
     "CREATE TRIGGER IF NOT EXISTS messages_cjk_enqueue_insert AFTER INSERT ON messages "
     f"WHEN {_in_scope('new')} BEGIN {_ENQUEUE} (new.id); END"),
    ("messages_cjk_enqueue_update",
     "CREATE TRIGGER IF NOT EXISTS messages_cjk_enqueue_update "
     "AFTER UPDATE OF content, tool_name, tool_calls, role ON messages "
     "WHEN (old.content IS NOT new.content OR old.tool_name IS NOT new.tool_name "
     "OR old.tool_calls IS NOT new.tool_calls OR old.role IS NOT new.role) "
     f"AND ({_INDEXED} OR {_in_scope('new')}) BEGIN {_ENQUEUE} (new.id); END"),
    ("messages_cjk_enqueue_delete",
     "CREATE TRIGGER IF NOT EXISTS messages_cjk_enqueue_delete AFTER DELETE ON messages "
     f"WHEN {_INDEXED} BEGIN {_ENQUEUE} (old.id); END"),
)

_CJK_CLASS = ("[\\u1100-\\u11ff\\u3040-\\u309f\\u30a0-\\u30ff\\u3130-\\u318f\\u31f0-\\u31ff"
              "\\u3400-\\u4dbf\\u4e00-\\u9fff\\ua960-\\ua97f\\uac00-\\ud7a3\\ud7b0-\\ud7ff"
              "\\uf900-\\ufaff\\U00020000-\\U0002fa1f]+")
_PG_GRAMS_FUNCTION = (
    "CREATE OR REPLACE FUNCTION hermes_cjk_grams(text, text, text, text) RETURNS text[] "
    "LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $grams$ "
    "SELECT CASE WHEN $1 = 'tool' THEN '{}'::text[] ELSE ARRAY("
    "SELECT DISTINCT g FROM (SELECT r.m[1] AS run FROM unnest(ARRAY[$2, $3, $4]) AS f(v), "
    f"regexp_matches(f.v, '{_CJK_CLASS}', 'g') AS r(m)) AS runs, "
    "LATERAL (SELECT substr(runs.run, i, 1) FROM generate_series(1, length(runs.run)) AS i "
    "UNION ALL SELECT substr(runs.run, i, 2) FROM generate_series(1, length(runs.run) - 1) "
    "AS i) AS t(g) ORDER BY g) END $grams$")
#: Statistics on the trigram scope's delegate test (PostgreSQL ≥ 14): without them the planner
#: assumes 0.5 % of the sessions pass ``hermes_json_get(model_config, '_delegate_from') IS
#: NULL`` and drives scoped pages from ``sessions``, reading every message of every session.
_PG_SCOPE_STATISTICS = (
    "CREATE STATISTICS IF NOT EXISTS sessions_delegate_from_stats "
    "ON (hermes_json_get(model_config, '_delegate_from')) FROM sessions")
_PG_GRAMS_INDEX = (
    "CREATE INDEX IF NOT EXISTS messages_cjk_grams ON messages USING gin "
    "(hermes_cjk_grams(role, content, tool_name, tool_calls)) WHERE role <> 'tool'")


def _fts5_works(bind) -> bool:
    # The store's own probe (TEMP tables only): it honours the capabilities tests force.
    return capabilities(bind).fts5


def _upgrade_sqlite(bind) -> None:
    if not _fts5_works(bind):
        log.info("s07: SQLite has no FTS5: the CJK-bigram objects wait for an FTS5-capable "
                 "writable open")
        return
    present = {r[0] for r in bind.exec_driver_sql(
        "SELECT name FROM sqlite_master WHERE name LIKE 'messages_cjk%'")}
    created = []
    for name, ddl in _SQLITE_OBJECTS:
        if name not in present:
            bind.exec_driver_sql(ddl)
            created.append(name)
    if created:
        log.info("s07: created %s", ", ".join(created))
    seeds = any(n == "messages_cjk_doc" or n.startswith("messages_cjk_enqueue") for n in created)
    if not seeds:
        return
    high = bind.exec_driver_sql("SELECT MAX(id) FROM messages").scalar()
    has_marker = bind.exec_driver_sql(
        "SELECT 1 FROM state_meta WHERE key = 'cjk_bigram_high_water'").first() is not None
    if high is not None and not has_marker:
        for key, value in (("cjk_bigram_high_water", str(high)), ("cjk_bigram_progress", "0")):
            bind.exec_driver_sql(
                "INSERT INTO state_meta(key, value) VALUES (?, ?) "
                "ON CONFLICT(key) DO UPDATE SET value = excluded.value", (key, value))
        log.info("s07: CJK-bigram backfill of messages up to id %s pending", high)


#: PL/pgSQL functions of s01/s05 whose EXCEPTION block opens a subtransaction, which no
#: process of a parallel query can (the leader included): declared PARALLEL SAFE there, any
#: parallel plan calling them fails ("cannot start subtransactions during a parallel
#: operation") — first seen once the statistics below made the planner choose parallel
#: scans for scoped searches. PARALLEL UNSAFE keeps such queries serial.
_PG_RESTRICTED = ("hermes_json_get(text, text)", "hermes_json_object(text)", "hermes_jsonb(text)")


def _upgrade_postgresql(bind) -> None:
    for signature in _PG_RESTRICTED:
        bind.exec_driver_sql(f"ALTER FUNCTION {signature} PARALLEL UNSAFE")
    bind.exec_driver_sql(_PG_GRAMS_FUNCTION)
    bind.exec_driver_sql(_PG_GRAMS_INDEX)
    if int(bind.exec_driver_sql("SHOW server_version_num").scalar()) >= 140000:
        bind.exec_driver_sql(_PG_SCOPE_STATISTICS)
        bind.exec_driver_sql("ANALYZE sessions")  # small: the statistics apply at once


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        _upgrade_postgresql(bind)
    else:
        _upgrade_sqlite(bind)


def downgrade() -> None:
    raise ForwardOnlyError(f"revision {revision} cannot be downgraded: the history is forward-only")
