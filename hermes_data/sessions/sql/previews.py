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

def _core_kit(d: str) -> Any:
    from hermes_data.sessions.sql.constructs import const, instr, right_chars, trim_chars

    pg = d == "postgresql"

    def ch(n: int) -> Any:
        return (sa.func.chr if pg else sa.func.char)(const(n))

    ws = (ch(9).op("||")(ch(10)).op("||")(ch(13)).op("||")(const(" ")) if pg
          else sa.func.char(const(9), const(10), const(13), const(32)))

    class Kit:
        @staticmethod
        def ltrim(x: Any) -> Any:
            return sa.func.ltrim(x, ws)

        @staticmethod
        def trim(x: Any) -> Any:
            return trim_chars(x, ws)

        @staticmethod
        def instr(x: Any, lit: str) -> Any:
            return instr(x, const(lit))

        @staticmethod
        def tail(x: Any, n: int) -> Any:
            return right_chars(x, const(n))

        @staticmethod
        def flat(x: Any) -> Any:
            return sa.func.replace(sa.func.replace(x, ch(13), const(" ")), ch(10), const(" "))

        @staticmethod
        def starts(x: Any, lit: str) -> Any:
            return sa.func.substr(x, const(1), const(len(lit))) == const(lit)

        @staticmethod
        def substr(x: Any, start: Any, n: int | None = None) -> Any:
            start = const(start) if isinstance(start, int) else start
            return (sa.func.substr(x, start) if n is None
                    else sa.func.substr(x, start, const(n)))

        chr = staticmethod(ch)
        const_ = staticmethod(const)

    return Kit


def raw_and_eligible_expr(c: Any, kind: Any, d: str) -> tuple[Any, Any]:
    """``(RAW(m), ELIGIBLE(m))`` as Core expressions over content column ``c`` and display-kind
    column ``kind`` (the constructs of :func:`raw_and_eligible`)."""
    x = _core_kit(d)
    const = x.const_

    def summary_start(e: Any) -> Any:
        return sa.or_(x.starts(e, mk.LONG_FORM_INTRO), x.starts(e, mk.LEGACY_PREFIX))

    standalone = summary_start(x.ltrim(c))
    mpos = x.instr(c, mk.MERGED_DELIM)
    merged = sa.and_(mpos > const(0), summary_start(
        x.ltrim(x.substr(c, mpos + const(len(mk.MERGED_DELIM))))))
    epos = x.instr(c, mk.END_MARKER)
    remainder = x.substr(c, epos + const(len(mk.END_MARKER)))
    prior0 = x.trim(sa.func.substr(c, const(1), mpos - const(1)))
    prior = sa.case((x.starts(prior0, mk.PRIOR_HEADER),
                     x.ltrim(x.substr(prior0, len(mk.PRIOR_HEADER) + 1))), else_=prior0)
    eligible = sa.and_(
        sa.func.coalesce(kind, const("")) != const("hidden"),
        sa.or_(sa.not_(sa.or_(standalone, merged)),
               sa.and_(standalone, epos > const(0), x.trim(remainder) != const("")),
               sa.and_(merged, prior != const(""))))
    scaffold = x.starts(c, mk.SKILL_PREFIX)
    flat = x.flat(c)
    raw = sa.case(
        (standalone, x.substr(remainder, 1, 800)),
        (merged, x.substr(prior, 1, 800)),
        (sa.and_(scaffold, sa.func.length(c) > const(800)),
         x.substr(flat, 1, 400).op("||")(x.chr(30)).op("||")(x.tail(flat, 400))),
        (scaffold, x.substr(flat, 1, 800)),
        else_=x.substr(flat, 1, 63))
    return raw, eligible


def preview_expr(s: Any, d: str) -> Any:
    """RAW of session ``s``'s first eligible user row by ``timestamp, id``, as a correlated
    scalar subquery (``s``: an alias of ``sessions``; ``d``: the dialect)."""
    from hermes_data.sessions.sql.constructs import const

    pv = s.element.metadata.tables["messages"].alias("pv")
    raw, eligible = raw_and_eligible_expr(pv.c.content, pv.c.display_kind, d)
    return (sa.select(raw)
            .where(pv.c.session_id == s.c.id, pv.c.role == const("user"),
                   pv.c.content.is_not(None), eligible)
            .order_by(pv.c.timestamp, pv.c.id).limit(const(1))
            .correlate(s).scalar_subquery())
