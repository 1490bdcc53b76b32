"""Statements of message reactions (docs/sessions-ui.md §4.10): read-modify-write of a
row's ``display_metadata`` (PostgreSQL locks the rows it reads with ``FOR UPDATE``; SQLite
runs under ``BEGIN IMMEDIATE``). No display or FTS trigger watches ``display_metadata``.

Core constructs over :mod:`hermes_data.sessions.schema`, compiled once per dialect
(:class:`hermes_data.statements.DriverPrepared`); ``with_for_update()`` renders nothing on SQLite.
"""

from __future__ import annotations

import sqlalchemy as sa

from hermes_data.sessions.schema import messages as m
from hermes_data.sessions.sql.constructs import bp, const, instr
from hermes_data.statements import DriverPrepared

#: The ``display_metadata`` key reactions are stored under (upstream's name; public as
#: :data:`hermes_data.sessions.ui.reactions.REACTIONS_METADATA_KEY`, the same object).
REACTIONS_METADATA_KEY = "reactions"


def _meta() -> sa.Select:
    return sa.select(m.c.display_metadata).where(m.c.id == bp("id"), m.c.session_id == bp("s"))


#: One row's metadata (any visibility).
GET_META = DriverPrepared("reactions_get_meta", _meta)
#: Store a row's metadata.
SET_META = DriverPrepared("reactions_set_meta", lambda: sa.update(m).values(
    display_metadata=bp("m")).where(m.c.id == bp("id")))
#: One row's metadata inside the write transaction (locked on PostgreSQL).
META_FOR_UPDATE = DriverPrepared("reactions_meta_for_update", lambda: _meta().with_for_update())
#: Active rows of :s whose metadata mentions ``reactions`` (others are never decoded), by
#: id; locked on PostgreSQL.
UNSEEN_CANDIDATES = DriverPrepared("reactions_unseen_candidates", lambda: sa.select(
    m.c.id, m.c.role, m.c.content, m.c.display_metadata).where(
    m.c.session_id == bp("s"), m.c.active == const(1), m.c.display_metadata.is_not(None),
    instr(m.c.display_metadata, const(REACTIONS_METADATA_KEY)) > const(0),
).order_by(m.c.id).with_for_update())
