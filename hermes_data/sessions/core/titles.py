"""Session titles (docs/sessions.md §4.5): ranks, uniqueness with transfer from compression
ancestors, the protected 'Bot Chat' title, and lineage numbering (``base #N``).
"""

from __future__ import annotations

import re

from sqlalchemy.engine import Connection

from hermes_data.sessions.core import encoding as enc
from hermes_data.sessions.core import lineage
from hermes_data.sessions.sql import Fragments
from hermes_data.sessions.sql.predicates import CANONICAL_BOT_CHAT_TITLE

#: Title provenance (upstream's names), lowest to highest authority: the instant title derived
#: from the first message, the model's title, the user's.
TITLE_SOURCE_DERIVED = "derived"
TITLE_SOURCE_LLM = "llm"
TITLE_SOURCE_USER = "user"
#: Title provenance ranks: a write lands only over a lower (or equal, for users) rank.
TITLE_RANKS = {TITLE_SOURCE_DERIVED: 0, TITLE_SOURCE_LLM: 1, TITLE_SOURCE_USER: 2}
_NUMBERED = re.compile(r" #\d+$")


def set_title(conn: Connection, q: Fragments, session_id: str, title: str | None,
              source: str) -> bool:
    """Write a (sanitized) title with its source; returns whether the row changed (an
    unknown session: False, as upstream).

    A user write raises for a title held by an unrelated session; an automatic write never
    replaces an equal- or higher-ranked title and never raises."""
    user = source == TITLE_SOURCE_USER
    cur = conn.exec_driver_sql(q.TITLE_STATE, (session_id,)).first()
    if cur is None:
        return False
    old_title, old_source, hidden = cur
    if hidden and old_title == CANONICAL_BOT_CHAT_TITLE and title != CANONICAL_BOT_CHAT_TITLE:
        if user:
            raise ValueError(
                f"session {session_id!r} is the canonical hidden 'Bot Chat'; its title "
                "identifies it to the bot and cannot be changed")
        return False
    if not user and old_title is not None:
        if TITLE_RANKS.get(old_source or TITLE_SOURCE_USER, 2) >= TITLE_RANKS[source]:
            return False
    if title is not None:
        holder = conn.exec_driver_sql(q.TITLE_HOLDER, (title, session_id)).first()
        if holder is not None:
            if holder[0] not in lineage.ancestors(conn, q, session_id):
                raise ValueError(f"title {title!r} is already in use by session {holder[0]!r}")
            conn.exec_driver_sql(q.CLEAR_TITLE, (holder[0],))
    return conn.exec_driver_sql(
        q.SET_TITLE_IF_UNCHANGED,
        (title, None if title is None else source, session_id, old_title, old_source)
    ).rowcount == 1


def next_title_in_lineage(conn: Connection, q: Fragments, base: str) -> str:
    """Next numbered title: ``base`` when unused, else ``base #(max(N, 1) + 1)``."""
    base = _NUMBERED.sub("", base)
    rows = conn.exec_driver_sql(q.TITLE_VARIANTS, (base, enc.escape_like(base) + " #%")).fetchall()
    numbers = []
    for (t,) in rows:
        if t == base:
            numbers.append(1)
        else:
            suffix = t[len(base) + 2:]
            if suffix.isascii() and suffix.isdigit():  # '²'.isdigit() but int('²') fails
                numbers.append(int(suffix))
    if not numbers:
        return base
    return f"{base} #{max(max(numbers), 1) + 1}"


def session_by_title(conn: Connection, q: Fragments, title: str) -> str | None:
    """Id of the session holding exactly ``title``."""
    sid = conn.exec_driver_sql(q.SESSION_BY_TITLE, (title,)).scalar()
    return None if sid is None else str(sid)


def resolve_by_title(conn: Connection, q: Fragments, title: str) -> str | None:
    """Newest numbered variant ``title #N``, else the exact title's session id."""
    rows = conn.exec_driver_sql(q.NUMBERED_TITLES, (enc.escape_like(title) + " #%",)).fetchall()
    for sid, t in rows:
        suffix = t[len(title) + 2:]
        if suffix.isascii() and suffix.isdigit():
            return str(sid)
    return session_by_title(conn, q, title)
