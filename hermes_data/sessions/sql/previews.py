"""The listing preview's SQL (docs/sessions-ui.md §3.3): ``RAW(m)`` of the first eligible
user row. A pure compaction summary never previews; a carrier previews only the user text it
carries (cut to 800 characters in SQL); a skill scaffold keeps head and tail (400 + U+001E +
400) so :func:`hermes_data.sessions.sql.markers.shape_preview` can describe it; anything else is
its first 63 characters, line breaks flattened. The marker literals are the constants of
:mod:`hermes_data.sessions.sql.markers`, quoted here (never user input)."""

from __future__ import annotations

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
