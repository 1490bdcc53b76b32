"""The display triggers' open-time check (docs/sessions-ui.md §2.3–§2.4).

Upstream dropped and re-created its four display triggers on every open; ``DROP TRIGGER``
takes the write lock, so settled databases blocked behind a sibling (seed 003). Here a
writable open only *reads* the stored SQL (:func:`stale_triggers`): a missing trigger is
created, one whose normalised text is neither ours nor a pinned upstream variant is dropped
and re-created — that trigger only, inside the open's one write transaction. A settled store
sees no statement beyond the read.

PostgreSQL (:func:`ensure_pg_display_objects`): ``hermes_jsonb`` and the four functions are
replaced when their stored body differs, each trigger re-created when its definition differs.
"""

from __future__ import annotations

import logging

from sqlalchemy.engine import Connection, Engine

from hermes_data.sessions.storage import display_sql as q

log = logging.getLogger("hermes_data.sessions.storage.display_schema")


def stale_triggers(conn: Connection) -> list[str]:
    """Names of the display triggers a writable open must (re)create (read-only)."""
    stored = {str(n): str(s or "") for n, s in conn.execute(q.STORED_TRIGGERS).fetchall()}
    out = []
    for name, ddl in q.TRIGGERS:
        have = stored.get(name)
        if have is None:
            out.append(name)
            continue
        norm = q.normalise(have)
        if norm != q.normalise(ddl) and q.digest(have) not in q.KNOWN_VARIANT_DIGESTS[name]:
            out.append(name)
    return out


def repair_triggers(conn: Connection, names: list[str], repairs: list[str]) -> None:
    """Drop (when present) and create each named trigger, in the caller's write transaction;
    re-reads first so a sibling's repair is not repeated."""
    todo = set(stale_triggers(conn)) & set(names)
    ddl = dict(q.TRIGGERS)
    for name in q.TRIGGER_NAMES:
        if name not in todo:
            continue
        conn.exec_driver_sql(q.drop_trigger(name))
        conn.exec_driver_sql(ddl[name])
        log.warning("display trigger %s was missing or not canonical: re-created", name)
        repairs.append(f"re-created display trigger {name}")


def ensure_pg_display_objects(engine: Engine) -> list[str]:
    """PostgreSQL: bring ``hermes_jsonb``, the four functions and triggers to their canonical
    text (read first; a settled database sees only the two catalogue reads)."""
    def plan(conn: Connection) -> tuple[list[str], list[str], bool]:
        bodies = {str(n): str(s) for n, s in conn.execute(q.PG_STORED_FUNCTIONS).fetchall()}
        defs = {str(n): str(s) for n, s in conn.execute(q.PG_STORED_TRIGGERS).fetchall()}
        functions = [n for n, body in q.PG_FUNCTION_BODIES.items()
                     if q.normalise(bodies.get(n, "")) != q.normalise(body)]
        triggers = [n for n in q.PG_TRIGGER_EVENTS
                    if q.pg_normalise_triggerdef(defs.get(n, ""))
                    != q.pg_normalise_triggerdef(q.pg_trigger_ddl(n))]
        return functions, triggers, "hermes_jsonb" not in bodies

    with engine.begin() as conn:
        functions, triggers, jsonb = plan(conn)
        if not (functions or triggers or jsonb):
            return []
        conn.execute(q.PG_DISPLAY_LOCK)
        functions, triggers, jsonb = plan(conn)
        done: list[str] = []
        if jsonb:
            conn.exec_driver_sql(q.PG_JSONB_DDL)
            done.append("created function hermes_jsonb")
        for name in functions:
            conn.exec_driver_sql(q.pg_function_ddl(name))
            done.append(f"replaced function {name}")
        for name in triggers:
            conn.exec_driver_sql(q.pg_drop_trigger(name))
            conn.exec_driver_sql(q.pg_trigger_ddl(name))
            done.append(f"re-created trigger {name}")
    for line in done:
        log.warning("display objects: %s", line)
    return done
