"""Every SQL text of the session store, grouped by concern (one module each, so none grows
past the project's 700-line limit); query modules import statements from here and never
write SQL themselves.

* :mod:`.predicates` — reason sets, constants, the lineage predicates (EDGE, FORK,
  LISTABLE, LAST_ACTIVE, the preview) shared by every lineage-aware statement.
* :mod:`.fts` — the FTS5 objects (views, virtual tables, the six triggers), the legacy inline
  layout, and the PostgreSQL full-text expressions that replace them there.
* :mod:`.lineage` — the recursive lineage CTEs (chain, tip, root, resume, lineage-wide flags).
* :mod:`.core` — state_meta, lifecycle, transcript, titles and single-session reads.
* :mod:`.listing` — the session filter, sidebar list, counts and the bounded recent browse.
* :mod:`.opening` — open-time probes and heals (SQLite); :mod:`.maintenance` — delete,
  prune, archive, VACUUM; :mod:`.search` — the search routes.
* :mod:`.coordination` — guard rows, the conversation key, rewrites, rewind, cooldowns,
  sweeps and empty/ghost cleanup (sessions-ext-coordination.md), built per dialect by its
  own ``for_dialect``.

* :mod:`.dialect` — placeholders per dialect: :func:`~.dialect.render`, the one rewrite of a
  ``?`` driver statement for psycopg, and :class:`~.dialect.Statements`, the base of every
  concern's statements-of-one-dialect class.

:func:`for_dialect` returns a :class:`Fragments`: the statements of one dialect side by
side, built once per process. Every fragment binds its values; identifiers come only from
fixed allow-lists.
"""

from __future__ import annotations

from hermes_data.sessions.core.sql import CoreStatements
from hermes_data.sessions.storage.fts.ddl import (BASE_TRIGGERS, FTS_BASE_OBJECTS, FTS_DELETE_TRIGGER_DDL,
                  FTS_INSERT_TRIGGER_DDL, FTS_OBJECTS_V3, FTS_REBUILD, FTS_SHADOW_SUFFIXES,
                  FTS_SRC_VIEW_DDL, FTS_TABLE_DDL, FTS_TRIGGERS, FTS_TRIGRAM_DELETE_TRIGGER_DDL,
                  FTS_TRIGRAM_INSERT_TRIGGER_DDL, FTS_TRIGRAM_OBJECTS, FTS_TRIGRAM_REBUILD,
                  FTS_TRIGRAM_SRC_VIEW_DDL, FTS_TRIGRAM_TABLE_DDL, FTS_TRIGRAM_UPDATE_TRIGGER_DDL,
                  FTS_UPDATE_TRIGGER_DDL, FTS_VIEWS, FTS_VIRTUAL_TABLES, PG_FTS_COLUMN,
                  PG_FTS_DOCUMENT, PG_FTS_GENERATED, PG_FTS_INDEX_COLUMNS, PG_FTS_SOURCE,
                  PG_FTS_SPLIT, TRIGRAM_TRIGGERS, legacy_repopulate, legacy_trigger_ddl)
from hermes_data.sessions.sql.lineage import (ANCESTORS_OF, CHAIN_FROM, LINEAGE_OF, RESUME_LINEAGE_COUNT,
                      RESUME_LINEAGE_OF, RESUME_TARGET_OF, ROOT_OF, TIP_OF, LineageStatements)
from hermes_data.sessions.sql.predicates import (AUTOMATIC_END_REASONS, EPOCH_MAX, EPOCH_MIN, MAX_LINEAGE_DEPTH,
                         RESET_END_REASONS, RESUME_MAX_HOPS, TOOL_INDEX_PREFIX, J,
                         branch_child, edge, fork, last_active, legacy_reset_child, listable,
                         preview_sql, reset_child)

__all__ = [
    "ANCESTORS_OF", "AUTOMATIC_END_REASONS", "BASE_TRIGGERS", "CHAIN_FROM", "EPOCH_MAX",
    "EPOCH_MIN", "FTS_BASE_OBJECTS", "FTS_DELETE_TRIGGER_DDL", "FTS_INSERT_TRIGGER_DDL",
    "FTS_OBJECTS_V3", "FTS_REBUILD", "FTS_SHADOW_SUFFIXES", "FTS_SRC_VIEW_DDL", "FTS_TABLE_DDL",
    "FTS_TRIGGERS", "FTS_TRIGRAM_DELETE_TRIGGER_DDL", "FTS_TRIGRAM_INSERT_TRIGGER_DDL",
    "FTS_TRIGRAM_OBJECTS", "FTS_TRIGRAM_REBUILD", "FTS_TRIGRAM_SRC_VIEW_DDL",
    "FTS_TRIGRAM_TABLE_DDL", "FTS_TRIGRAM_UPDATE_TRIGGER_DDL", "FTS_UPDATE_TRIGGER_DDL",
    "FTS_VIEWS", "FTS_VIRTUAL_TABLES", "Fragments", "J", "LINEAGE_OF", "MAX_LINEAGE_DEPTH",
    "PG_FTS_COLUMN", "PG_FTS_DOCUMENT", "PG_FTS_GENERATED", "PG_FTS_INDEX_COLUMNS",
    "PG_FTS_SOURCE", "PG_FTS_SPLIT", "RESET_END_REASONS", "RESUME_LINEAGE_COUNT",
    "RESUME_LINEAGE_OF", "RESUME_MAX_HOPS", "RESUME_TARGET_OF", "ROOT_OF", "TIP_OF",
    "TOOL_INDEX_PREFIX", "TRIGRAM_TRIGGERS", "branch_child", "edge", "for_dialect", "fork",
    "last_active", "legacy_repopulate", "legacy_reset_child", "legacy_trigger_ddl", "listable",
    "preview_sql", "reset_child",
]


class Fragments(LineageStatements, CoreStatements):
    """The statements and predicate builders of one dialect, side by side."""

    def __init__(self, dialect: str) -> None:
        CoreStatements.__init__(self, dialect)  # checks the dialect first
        LineageStatements.__init__(self, dialect)

    def J(self, expr: str, key: str) -> str:
        """Non-throwing JSON marker lookup."""
        return J(expr, key, self.dialect)

    def edge(self, p: str, c: str) -> str:
        """EDGE(p, c)."""
        return edge(p, c, self.dialect)

    def listable(self, s: str) -> str:
        """LISTABLE(s)."""
        return listable(s, self.dialect)

    def legacy_reset_child(self, c: str, alias: str = "rp") -> str:
        """The legacy reset-child heuristic."""
        return legacy_reset_child(c, alias)

    def last_active(self, s: str) -> str:
        """LAST_ACTIVE(s)."""
        return last_active(s)

    def preview_sql(self, s: str) -> str:
        """Preview of session ``s``."""
        return preview_sql(s, self.dialect)


#: The :class:`Fragments` of ``dialect`` (``sqlite`` or ``postgresql``), built once per
#: process; another dialect raises ``ValueError``.
for_dialect = Fragments.for_dialect
