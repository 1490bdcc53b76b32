"""Shadow tables of a forgotten FTS table (docs/sessions-storage.md §3.6 step 3).

The demote forgets ``messages_fts`` / ``messages_fts_trigram`` by deleting their catalogue
rows; their shadow tables (``<t>_data``, ``_idx``, ``_content``, ``_docsize``, ``_config``)
are then plain tables that would collide with the shadow tables of a new FTS table of the
same name. :func:`demote_orphan_shadows` renames them — by explicit name, never by pattern
(#103647) — to ``fts_v22_trash_<name>``, where the paced teardown drains them. It runs in
the demote and before any FTS table is (re)created, so a crash between the two steps of
the demote's fallback shape never leaves a file that cannot be opened. No other import of
this package: the open path and the migration both use it.
"""

from __future__ import annotations

from sqlalchemy.engine import Connection

from hermes_data.sessions.storage.fts.ddl import FTS_SHADOW_SUFFIXES, FTS_VIRTUAL_TABLES
from hermes_data.sessions.storage.fts import layout_sql as q


def trash_target(name: str, taken: set[str]) -> str:
    """``fts_v22_trash_<name>``, or ``…_<n>`` beside an undrained table of an earlier demote."""
    target = q.TRASH_PREFIX + name
    n = 2
    while target in taken:
        target = f"{q.TRASH_PREFIX}{name}_{n}"
        n += 1
    taken.add(target)
    return target


def demote_orphan_shadows(conn: Connection) -> list[str]:
    """Rename the shadow tables of every FTS table whose catalogue row is gone; returns the
    renamed names (nothing to do ⇒ ``[]``, nothing written)."""
    tables = {r[0] for r in conn.exec_driver_sql(q.TABLE_NAMES)}
    moved = []
    for vtab in FTS_VIRTUAL_TABLES:
        if vtab in tables:
            continue
        for name in (vtab + s for s in FTS_SHADOW_SUFFIXES):
            if name in tables:
                conn.exec_driver_sql(q.rename_to_trash(name, trash_target(name, tables)))
                moved.append(name)
    return moved


def names_after_orphan_shadows(conn: Connection) -> set[str]:
    """:func:`demote_orphan_shadows`, then every schema object name of the file (what an FTS
    (re)creation checks before creating the missing objects)."""
    demote_orphan_shadows(conn)
    return {r[0] for r in conn.exec_driver_sql(q.SCHEMA_NAMES).fetchall()}
