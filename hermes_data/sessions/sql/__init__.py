"""The shared SQL kit of the session store: what the concern packages' statements build on.

* :mod:`.dialect` — the one placeholder renderer and the ``Statements`` base;
* :mod:`.predicates` — reason sets, constants and the lineage predicates (EDGE, FORK,
  LISTABLE, LAST_ACTIVE, the preview) every lineage-aware statement shares;
* :mod:`.lineage` — the recursive lineage CTEs (chain, tip, root, resume, lineage-wide flags);
* :mod:`.core` — the core statements every concern reaches through its backend (state_meta,
  lifecycle, the transcript, titles, single-session reads);
* :mod:`.ddl` — DDL helpers (checked DROPs, whitespace-collapsed comparison); :mod:`.markers`
  and :mod:`.previews` — the agent's marker literals and the listing preview's SQL.

A concern's own statements live beside it (``<concern>/sql.py``, ``*_sql.py``); the FTS
objects in :mod:`hermes_data.sessions.storage.fts.ddl`. The kit imports no concern package
(docs/architecture.md "Layers").

:func:`for_dialect` returns a :class:`Fragments`: the statements of one dialect side by
side, built once per process. Every fragment binds its values; identifiers come only from
fixed allow-lists.
"""

from __future__ import annotations

from hermes_data.sessions.sql.core import CoreStatements
from hermes_data.sessions.sql.lineage import (ANCESTORS_OF, CHAIN_FROM, LINEAGE_OF, RESUME_LINEAGE_COUNT,
                      RESUME_LINEAGE_OF, RESUME_TARGET_OF, ROOT_OF, TIP_OF, LineageStatements)
from hermes_data.sessions.sql.predicates import (AUTOMATIC_END_REASONS, EPOCH_MAX, EPOCH_MIN, MAX_LINEAGE_DEPTH,
                         RESET_END_REASONS, RESUME_MAX_HOPS, TOOL_INDEX_PREFIX, J,
                         branch_child, edge, fork, last_active, legacy_reset_child, listable,
                         preview_sql, reset_child)

__all__ = [
    "ANCESTORS_OF", "AUTOMATIC_END_REASONS", "CHAIN_FROM", "EPOCH_MAX", "EPOCH_MIN",
    "Fragments", "J", "LINEAGE_OF", "MAX_LINEAGE_DEPTH", "RESET_END_REASONS",
    "RESUME_LINEAGE_COUNT", "RESUME_LINEAGE_OF", "RESUME_MAX_HOPS", "RESUME_TARGET_OF",
    "ROOT_OF", "TIP_OF", "TOOL_INDEX_PREFIX", "branch_child", "edge", "for_dialect", "fork",
    "last_active", "legacy_reset_child", "listable", "preview_sql", "reset_child",
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
