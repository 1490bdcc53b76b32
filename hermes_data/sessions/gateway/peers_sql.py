"""Statements of gateway peer recovery (docs/sessions-gateway.md §3.3).

Over a session row ``s``: ``RECOVERABLE(s)``, ``ACT(s)`` = ``COALESCE(LAST_ACTIVE(s),
s.started_at)``, ``HAS_MSG(s)`` and the reset fence ``FENCED(s, PEER)`` — a peer row ended
at a reset boundary after ``s``'s last activity fences ``s``, except its own parent when
``s`` is that parent's reset child.
"""

from __future__ import annotations

from functools import lru_cache

from hermes_data.sessions.sql.core import SESSION_ROW_COLS
from hermes_data.sessions.agent.identity_sql import RECOVERABLE_END_REASONS
from hermes_data.sessions.sql.dialect import Statements, render
from hermes_data.sessions.sql.predicates import RESET_END_REASONS, sql_list, edge, last_active, reset_child

_TUPLE = ("user_id", "chat_id", "chat_type", "thread_id")


def act(s: str) -> str:
    """ACT(s): last activity, else start."""
    return f"COALESCE({last_active(s)}, {s}.started_at)"


def has_msg(s: str) -> str:
    """HAS_MSG(s) as 1/0 (orderable on both dialects)."""
    return (f"(CASE WHEN COALESCE({s}.message_count, 0) > 0 OR EXISTS (SELECT 1 FROM messages "
            f"hm WHERE hm.session_id = {s}.id) THEN 1 ELSE 0 END)")


def recoverable(s: str) -> str:
    """RECOVERABLE(s): open, or ended with a recoverable reason."""
    return f"({s}.ended_at IS NULL OR {s}.end_reason IN ({sql_list(RECOVERABLE_END_REASONS)}))"


def _unindexed(d: str) -> str:
    # SQLite without statistics (no ANALYZE: most files) picks idx_sessions_source for
    # "session_key = ? AND source = ?" and walks every row of the source; the unary "+"
    # leaves it idx_sessions_session_key.
    return "+" if d == "sqlite" else ""


def _keypeer(b: str, s: str, d: str) -> str:
    return f"{b}.session_key = {s}.session_key AND {_unindexed(d)}{b}.source = {s}.source"


def _tuplepeer(b: str, s: str) -> str:
    return f"{b}.source = {s}.source AND " + " AND ".join(
        f"COALESCE({b}.{c}, '') = COALESCE({s}.{c}, '')" for c in _TUPLE)


def fenced(s: str, peer: str, d: str) -> str:
    """FENCED(s, PEER) for ``peer`` in ``key`` / ``tuple``."""
    match = _keypeer("fb", s, d) if peer == "key" else _tuplepeer("fb", s)
    return (f"EXISTS (SELECT 1 FROM sessions fb WHERE {match} AND fb.ended_at IS NOT NULL "
            f"AND fb.end_reason IN ({sql_list(RESET_END_REASONS)}) AND fb.ended_at > {act(s)} "
            f"AND NOT (COALESCE({s}.parent_session_id, '') = fb.id AND {reset_child(s, d=d)}))")


class PeerStatements(Statements):
    """The peer-recovery statements of one dialect."""

    def __init__(self, d: str) -> None:
        super().__init__(d)
        pg = d == "postgresql"
        r = self.render
        select = (f"SELECT {', '.join('s.' + c for c in SESSION_ROW_COLS)}, "
                  "COALESCE(sp.prompt, s.system_prompt) FROM sessions s LEFT JOIN "
                  "system_prompts sp ON sp.hash = s.system_prompt_hash")
        #: Exact-key recovery (step 1).
        self.BY_KEY = r(
            f"{select} WHERE s.session_key = ? AND {_unindexed(d)}s.source = ? AND "
            f"{recoverable('s')} "
            f"AND NOT {fenced('s', 'key', d)} ORDER BY {has_msg('s')} DESC, {act('s')} DESC, "
            "s.started_at DESC, s.id DESC LIMIT 1")
        self._select = select
        lock = " FOR UPDATE" if pg else ""
        #: A recording target: its source and whether it has messages (locked on PG).
        self.TARGET = r(f"SELECT s.source, {has_msg('s')} FROM sessions s WHERE s.id = ?{lock}")
        #: The compression parent of a segment (one EDGE hop up).
        self.EDGE_PARENT = r(
            "SELECT p.id FROM sessions c JOIN sessions p ON p.id = c.parent_session_id "
            f"WHERE c.id = ? AND {edge('p', 'c', d)}")
        #: Stamp the routing identity on an existing row.
        self.STAMP = r(
            "UPDATE sessions SET source = ?, session_key = ?, user_id = ?, chat_id = ?, "
            "chat_type = ?, thread_id = ?, display_name = COALESCE(?, display_name), "
            "origin_json = COALESCE(?, origin_json) WHERE id = ?")
        fill = ", ".join(f"{c} = COALESCE(sessions.{c}, excluded.{c})"
                         for c in ("session_key", "user_id", "chat_id", "chat_type",
                                   "thread_id", "display_name", "origin_json"))
        #: Create a missing row (a racing create_session may win: fill its NULL columns).
        self.CREATE = r(
            "INSERT INTO sessions (id, source, session_key, user_id, chat_id, chat_type, "
            "thread_id, display_name, origin_json, profile_name, started_at) VALUES "
            f"(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET {fill}")
        origin = ("SELECT id, user_id FROM sessions WHERE LOWER(source) = LOWER(?) AND "
                  "session_key IS NOT NULL AND chat_id = ? AND ended_at IS NULL{t} "
                  "ORDER BY started_at DESC, id DESC")
        #: Open keyed rows of one chat (optionally one thread), newest first.
        self.BY_ORIGIN = r(origin.format(t=""))
        self.BY_ORIGIN_THREAD = r(origin.format(t=" AND COALESCE(thread_id, '') = ?"))
        nulls = " NULLS LAST" if pg else ""
        newest = ("NOT EXISTS (SELECT 1 FROM sessions n WHERE n.source = s.source AND "
                  "n.session_key = s.session_key AND (n.started_at > s.started_at OR "
                  "(n.started_at = s.started_at AND n.id > s.id)))")
        self._gateway = (f"SELECT {', '.join('s.' + c for c in SESSION_ROW_COLS)}, "
                         "COALESCE(sp.prompt, s.system_prompt), "
                         f"{last_active('s')} AS la FROM sessions s LEFT JOIN system_prompts "
                         f"sp ON sp.hash = s.system_prompt_hash WHERE s.session_key IS NOT "
                         f"NULL AND {newest}{{f}} ORDER BY la DESC{nulls}, s.id")

    def by_tuple(self, present: tuple[bool, ...], owned: bool) -> str:
        """Tuple fallback (step 2), without / with the owner-profile fence.

        ``present[i]``: whether the i-th of user, chat, chat type, thread is non-blank.
        A non-blank value is matched by plain equality so ``idx_sessions_gateway_peer``
        serves the lookup (``COALESCE(col, '') = ?`` would scan every row of the source); a
        blank one matches NULL or ''. The reset fence compares its peers with the same bound
        values (the candidate's own tuple equals them), so it is an index search too.
        Parameters: ``source``, the non-blank values, [``owner``, ``owner``], ``source``,
        the non-blank values (:func:`tuple_params`)."""
        return _by_tuple(self.dialect, self._select, tuple(present), owned)

    def gateway_sessions(self, platform: bool, active_only: bool) -> str:
        """One live mapping per ``(source, session_key)``: its newest row."""
        f = (" AND LOWER(s.source) = LOWER(?)" if platform else "") + (
            " AND s.ended_at IS NULL" if active_only else "")
        return self.render(self._gateway.format(f=f))


def _tuple_match(alias: str, present: tuple[bool, ...]) -> str:
    return f"{alias}.source = ? AND " + " AND ".join(
        f"{alias}.{c} = ?" if on else f"COALESCE({alias}.{c}, '') = ''"
        for c, on in zip(_TUPLE, present))


@lru_cache(maxsize=None)
def _by_tuple(d: str, select: str, present: tuple[bool, ...], owned: bool) -> str:
    if len(present) != len(_TUPLE):
        raise ValueError(f"present must flag {len(_TUPLE)} tuple columns, got {present!r}")
    owner = " AND COALESCE(s.profile_name, ?) = ?" if owned else ""
    fence = (f"EXISTS (SELECT 1 FROM sessions fb WHERE {_tuple_match('fb', present)} AND "
             f"fb.ended_at IS NOT NULL AND fb.end_reason IN ({sql_list(RESET_END_REASONS)}) "
             f"AND fb.ended_at > {act('s')} AND NOT (COALESCE(s.parent_session_id, '') = "
             f"fb.id AND {reset_child('s', d=d)}))")
    return render(d, f"{select} WHERE {_tuple_match('s', present)} AND {has_msg('s')} = 1 "
                     f"AND {recoverable('s')}{owner} AND NOT {fence} ORDER BY {act('s')} "
                     "DESC, s.started_at DESC, s.id DESC LIMIT 1")


def tuple_params(source: str, values: tuple[str, ...],
                 owner: str | None) -> tuple[tuple[bool, ...], tuple[str, ...]]:
    """``(present, params)`` of :meth:`PeerStatements.by_tuple` for the tuple ``values``
    (strings, ``''`` for a missing value) and the owner profile (None: unfenced)."""
    present = tuple(v != "" for v in values)
    given = tuple(v for v in values if v != "")
    mid = () if owner is None else (owner, owner)
    return present, (source, *given, *mid, source, *given)


#: The PeerStatements of a dialect (built once per process).
for_dialect = PeerStatements.for_dialect
