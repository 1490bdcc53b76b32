"""The listing preview's SQL (docs/sessions-ui.md §3.3): ``RAW(m)`` of the first eligible
user row. A pure compaction summary never previews; a carrier previews only the user text it
carries (cut to 800 characters in SQL); a skill scaffold keeps head and tail (400 + U+001E +
400) so :func:`hermes_data.sessions.sql.markers.shape_preview` can describe it; anything else is
its first 63 characters, line breaks flattened. The marker literals are the constants of
:mod:`hermes_data.sessions.sql.markers`, quoted here (never user input)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from hermes_data.sessions.sql import markers as mk
from hermes_data.sessions.sql.constructs import (const, instr, not_hidden, right_chars,
                                                   sibling_table, trim_chars)


def _lit(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


class _Dialect:
    def __init__(self, d: str) -> None:
        pg = d == "postgresql"
        self.ch = "chr" if pg else "char"
        self.ws = "chr(9) || chr(10) || chr(13) || ' '" if pg else "char(9, 10, 13, 32)"
        self.pg = pg

    def ltrim(self, x: str) -> str:
        return f"ltrim({x}, {self.ws})"

    def trim(self, x: str) -> str:
        return f"{'btrim' if self.pg else 'trim'}({x}, {self.ws})"

    def instr(self, x: str, lit: str) -> str:
        return f"{'strpos' if self.pg else 'instr'}({x}, {_lit(lit)})"

    def tail(self, x: str, n: int) -> str:
        return f"right({x}, {n})" if self.pg else f"substr({x}, -{n})"

    def flat(self, x: str) -> str:
        return f"replace(replace({x}, {self.ch}(13), ' '), {self.ch}(10), ' ')"


def _starts(x: str, lit: str) -> str:
    return f"substr({x}, 1, {len(lit)}) = {_lit(lit)}"


def _summary_start(x: str) -> str:
    return f"({_starts(x, mk.LONG_FORM_INTRO)} OR {_starts(x, mk.LEGACY_PREFIX)})"


def raw_and_eligible(c: str, kind: str, d: str) -> tuple[str, str]:
    """``(RAW(m), ELIGIBLE(m))`` over content column ``c`` and display-kind column ``kind``."""
    x = _Dialect(d)
    standalone = _summary_start(x.ltrim(c))
    mpos = x.instr(c, mk.MERGED_DELIM)
    merged = (f"({mpos} > 0 AND "
              f"{_summary_start(x.ltrim(f'substr({c}, {mpos} + {len(mk.MERGED_DELIM)})'))})")
    epos = x.instr(c, mk.END_MARKER)
    remainder = f"substr({c}, {epos} + {len(mk.END_MARKER)})"
    prior0 = x.trim(f"substr({c}, 1, {mpos} - 1)")
    prior = (f"(CASE WHEN {_starts(prior0, mk.PRIOR_HEADER)} THEN "
             f"{x.ltrim(f'substr({prior0}, {len(mk.PRIOR_HEADER) + 1})')} ELSE {prior0} END)")
    eligible = (f"(COALESCE({kind}, '') <> 'hidden' AND (NOT ({standalone} OR {merged}) "
                f"OR ({standalone} AND {epos} > 0 AND {x.trim(remainder)} <> '') "
                f"OR ({merged} AND {prior} <> '')))")
    scaffold = _starts(c, mk.SKILL_PREFIX)
    flat = x.flat(c)
    raw = (f"(CASE WHEN {standalone} THEN substr({remainder}, 1, 800) "
           f"WHEN {merged} THEN substr({prior}, 1, 800) "
           f"WHEN {scaffold} AND length({c}) > 800 THEN substr({flat}, 1, 400) || "
           f"{x.ch}(30) || {x.tail(flat, 400)} "
           f"WHEN {scaffold} THEN substr({flat}, 1, 800) "
           f"ELSE substr({flat}, 1, 63) END)")
    return raw, eligible


def preview_sql(s: str, d: str = "sqlite") -> str:
    """RAW of session ``s``'s first eligible user row by ``timestamp, id``."""
    raw, eligible = raw_and_eligible("pv.content", "pv.display_kind", d)
    return (f"(SELECT {raw} FROM messages pv WHERE pv.session_id = {s}.id AND pv.role = 'user' "
            f"AND pv.content IS NOT NULL AND {eligible} ORDER BY pv.timestamp, pv.id LIMIT 1)")


# ---------------------------------------------------------------------------------------
# The same preview as a Core construct (issue 32): ``preview_expr(s, d)`` for an alias ``s`` of
# ``sessions`` on dialect ``d``. Every constant is an inline literal (constructs.const), so the
# construct binds nothing; the functions spelled differently per dialect are chosen here.
# ---------------------------------------------------------------------------------------

class _CoreDialect:
    """:class:`_Dialect`'s helpers as Core expressions (``instr``, ``TRIM`` and the tail are
    the per-dialect constructs of :mod:`~hermes_data.sessions.sql.constructs`; only ``char``
    and the whitespace set are chosen here)."""

    def __init__(self, d: str) -> None:
        self.pg = d == "postgresql"
        self.ws = (self.ch(9).op("||")(self.ch(10)).op("||")(self.ch(13)).op("||")(const(" "))
                   if self.pg else sa.func.char(const(9), const(10), const(13), const(32)))

    def ch(self, n: int) -> Any:
        return (sa.func.chr if self.pg else sa.func.char)(const(n))

    def ltrim(self, x: Any) -> Any:
        return sa.func.ltrim(x, self.ws)

    def trim(self, x: Any) -> Any:
        return trim_chars(x, self.ws)

    def flat(self, x: Any) -> Any:
        return sa.func.replace(sa.func.replace(x, self.ch(13), const(" ")), self.ch(10),
                               const(" "))


def _substr(x: Any, start: Any, n: int | None = None) -> Any:
    start = const(start) if isinstance(start, int) else start
    return sa.func.substr(x, start) if n is None else sa.func.substr(x, start, const(n))


def _starts_expr(x: Any, lit: str) -> Any:
    return _substr(x, 1, len(lit)) == const(lit)


def _summary_start_expr(x: Any) -> Any:
    return sa.or_(_starts_expr(x, mk.LONG_FORM_INTRO), _starts_expr(x, mk.LEGACY_PREFIX))


def raw_and_eligible_expr(c: Any, kind: Any, d: str) -> tuple[Any, Any]:
    """``(RAW(m), ELIGIBLE(m))`` as Core expressions over content column ``c`` and display-kind
    column ``kind`` (the constructs of :func:`raw_and_eligible`)."""
    x = _CoreDialect(d)
    standalone = _summary_start_expr(x.ltrim(c))
    mpos = instr(c, const(mk.MERGED_DELIM))
    merged = sa.and_(mpos > const(0), _summary_start_expr(
        x.ltrim(_substr(c, mpos + const(len(mk.MERGED_DELIM))))))
    epos = instr(c, const(mk.END_MARKER))
    remainder = _substr(c, epos + const(len(mk.END_MARKER)))
    prior0 = x.trim(sa.func.substr(c, const(1), mpos - const(1)))
    prior = sa.case((_starts_expr(prior0, mk.PRIOR_HEADER),
                     x.ltrim(_substr(prior0, len(mk.PRIOR_HEADER) + 1))), else_=prior0)
    eligible = sa.and_(
        not_hidden(kind),
        sa.or_(sa.not_(sa.or_(standalone, merged)),
               sa.and_(standalone, epos > const(0), x.trim(remainder) != const("")),
               sa.and_(merged, prior != const(""))))
    scaffold = _starts_expr(c, mk.SKILL_PREFIX)
    flat = x.flat(c)
    raw = sa.case(
        (standalone, _substr(remainder, 1, 800)),
        (merged, _substr(prior, 1, 800)),
        (sa.and_(scaffold, sa.func.length(c) > const(800)),
         _substr(flat, 1, 400).op("||")(x.ch(30)).op("||")(right_chars(flat, const(400)))),
        (scaffold, _substr(flat, 1, 800)),
        else_=_substr(flat, 1, 63))
    return raw, eligible


def preview_expr(s: Any, d: str) -> Any:
    """RAW of session ``s``'s first eligible user row by ``timestamp, id``, as a correlated
    scalar subquery (``s``: an alias of ``sessions``; ``d``: the dialect)."""
    pv = sibling_table(s, "messages").alias("pv")
    raw, eligible = raw_and_eligible_expr(pv.c.content, pv.c.display_kind, d)
    return (sa.select(raw)
            .where(pv.c.session_id == s.c.id, pv.c.role == const("user"),
                   pv.c.content.is_not(None), eligible)
            .order_by(pv.c.timestamp, pv.c.id).limit(const(1))
            .correlate(s).scalar_subquery())
