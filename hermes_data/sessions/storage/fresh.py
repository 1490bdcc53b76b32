"""Fresh session store at the head (used by :mod:`hermes_data.migrate.fresh`).

After the head metadata's DDL (``sessions/schema.py`` — columns added there follow
automatically), a fresh file gets what ``s01_baseline`` and the store's ``after_upgrade``
hook would leave on an empty file: the current-layout FTS5 objects (views, external-content
tables, narrowed triggers; the trigram half only where the tokenizer exists, none without
FTS5), the four display triggers of ``s05_ui_display`` and the settled ``state_meta`` rows and ``application_id`` of
:func:`~hermes_data.sessions.storage.adoption.settle`, so the first open writes nothing.
``tests/migrations/test_fresh_path.py`` compares the result with the revision path.
"""

from __future__ import annotations

import logging

from typing import Any

from sqlalchemy.engine import Connection


from hermes_data.sessions.storage.fts import ddl as fts_ddl
from hermes_data.sessions.backends.base import OpenOptions
from hermes_data.sessions.storage.fts import cjk
from hermes_data.sessions.storage import opening
from hermes_data.sessions.storage.adoption import settle
from hermes_data.sessions.storage import display_sql as display

log = logging.getLogger("hermes_data.sessions.storage.fresh")

#: The revisions a fresh file stands for, in order (a test keeps them equal to the scripts).
REVISIONS = ("s01_baseline", "s02_pg_stored_tsvector", "s03_agent_turn",
             "s04_coordination", "s05_ui_display", "s06_gateway", "s07_storage",
             "s08_symbol_grams", "s09_accent_fold", "s10_tool_trigrams")


def create_head(conn: Connection, cursor: Any, options: OpenOptions | None = None) -> None:
    """FTS objects and settled bookkeeping, in the caller's transaction (tables exist; the
    file held nothing else, so every fragment is created). ``options``: the opening handle's
    :class:`OpenOptions` (``sessions.cjk_index``), when a handle's open creates the file."""
    caps = opening.capabilities(conn)
    if caps.fts5:
        for _name, ddl in fts_ddl.FTS_BASE_OBJECTS + (fts_ddl.FTS_TRIGRAM_OBJECTS if caps.trigram else ()):
            cursor.execute(ddl)
    else:
        log.warning("SQLite has no FTS5 module: full-text search disabled, search uses LIKE")
    for _name, ddl in display.TRIGGERS:  # s05_ui_display's four display triggers
        cursor.execute(ddl)
    if caps.fts5:
        # The CJK-bigram index (docs/sessions-storage.md §2.2): last, as the writable open after
        # the revisions creates it.
        cjk.create_fresh(cursor, (options or OpenOptions()).cjk_index)
    settle(conn)
